-- arbor.control.ops: the operations of the control protocol, one table.
local ops = require "arbor.control.ops"

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
end)
