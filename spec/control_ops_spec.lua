-- arbor.control.ops: the operations of the control protocol, one table.
local json = require "arbor.json"
local ops = require "arbor.control.ops"

-- The rows of docs/control-protocol.md's table of operations: {names,
-- fields (the second column's names, brackets and json left out)}.
local function documented_rows()
  local f = assert(io.open("docs/control-protocol.md"))
  local doc = f:read("a")
  f:close()
  local table_text = assert(doc:match("\n| op | fields | final frame |\n(.-)\n\n"))
  local rows = {}
  for row in table_text:gmatch("[^\n]+") do
    local first, second = row:match("^| ([^|]*) | ([^|]*) |")
    if first and not first:match("^%-") then
      local r = {names = {}, fields = {}}
      for name in first:gmatch("`(%w+)`") do r.names[#r.names + 1] = name end
      for field in second:gmatch("[%w_]+") do
        if field ~= "json" then r.fields[field] = true end
      end
      rows[#rows + 1] = r
    end
  end
  return rows
end

describe("the control operations", function()
  it("are the ones docs/control-protocol.md lists, in its order", function()
    local f = assert(io.open("docs/control-protocol.md"))
    local doc = f:read("a")
    f:close()
    local table_text = assert(doc:match("\n| op | fields | final frame |\n(.-)\n\n"))
    local documented = {}
    for row in table_text:gmatch("[^\n]+") do
      local first = row:match("^| ([^|]*) |") or "" -- not the |---| row
      for name in first:gmatch("`(%w+)`") do documented[#documented + 1] = name end
    end
    assert.same(documented, ops.names())
    for _, name in ipairs(documented) do assert.is_function(ops.find(name)) end
  end)

  it("name every operation when the op is unknown", function()
    assert.is_nil(ops.find("frobnicate"))
    assert.is_nil(ops.find({}))
    assert.equal("unknown op 'frobnicate' (want one of "
      .. table.concat(ops.names(), ", ") .. ")", ops.unknown("frobnicate"))
    assert.matches("want one of status, tree, node, restart, stop, logs, events, eval,",
      ops.unknown("x"), 1, true)
  end)

  it("take the request fields docs/control-protocol.md lists for them", function()
    for _, row in ipairs(documented_rows()) do
      for _, name in ipairs(row.names) do
        local have = {}
        for k in pairs(ops.fields(name)) do have[k] = true end
        assert.same(row.fields, have, name)
      end
    end
  end)

  it("check every request field by type, name a bad one, refuse an unknown one (issue 25)", function()
    local samples = {boolean = true, string = "s", count = 3, seconds = 1.5, id = 4, signal = "HUP"}
    local wrong = {boolean = {"true", 1, {}}, string = {1, true, {}}, count = {-1, 1.5, "3", true},
      seconds = {-1, "1", true, 1 / 0}, id = {true, 1.5, {}}, signal = {true, 1.5, {}}}
    for _, name in ipairs(ops.names()) do
      local fields = ops.fields(name)
      local good = {id = 1, op = name, json = true}
      for field, t in pairs(fields) do good[field] = samples[t] end
      assert.is_nil(ops.check(good), name)
      for field, t in pairs(fields) do
        for _, v in ipairs(wrong[t]) do
          local req = {id = 1, op = name}
          req[field] = v
          local err, which = ops.check(req)
          assert.equal(field, which, name .. "." .. field)
          assert.matches("^" .. name .. ": field '" .. field .. "' must be ", err)
        end
        local req = {id = 1, op = name}
        req[field] = json.null -- null is as absent
        assert.is_nil(ops.check(req))
      end
      local err, which = ops.check({id = 1, op = name, json = "yes"})
      assert.equal("json", which)
      assert.equal(name .. ": field 'json' must be a boolean, got the string \"yes\"", err)
      err, which = ops.check({id = 1, op = name, frobnicate = 1})
      assert.equal("frobnicate", which)
      assert.matches("^" .. name .. ": unknown field 'frobnicate' %(the fields of " .. name .. ": ", err)
    end
    assert.equal("reload: field 'dry_run' must be a boolean, got the string \"true\"",
      (ops.check({id = 1, op = "reload", dry_run = "true"})))
  end)
end)
