-- Issue 15 (7), end to end: a swap made over `arbor ctl eval` survives its
-- parent's restart; node:run adds a real process to a live node, and
-- node:remove stops and removes it.
local json = require "arbor.json"
local support = require "e2e.support"
local bin, q, sh, eventually = support.bin, support.q, support.sh, support.eventually

local function ctl(e, args) return sh(bin .. " ctl " .. q(e.sock) .. " " .. args) end

local function node(e, dn)
  local code, out = ctl(e, "node " .. dn .. " --json")
  return code == 0 and json.decode(out) or nil
end

local function last_line(e, dn)
  local code, out = ctl(e, "logs " .. dn .. " -n 1")
  return code == 0 and out or ""
end

describe("runtime changes, end to end", function()
  local e
  before_each(function()
    e = support.run_arbor("--quiet spec/e2e/fixtures/runtime_change.lua")
    assert.is_true(eventually(function()
      local n = node(e, "root.sup.worker")
      return n and n.state == "HEALTHY"
    end))
  end)

  after_each(function() support.stop_arbor(e) end)

  it("a swap survives the parent's restart, until unswap", function()
    local code, out = ctl(e, "eval " .. q([[
      arbor.node("root.sup.worker"):swap(function(w)
        w:log("swapped") w:signal("healthy") w:wait()
      end, {restart = true})]]))
    assert.equal(0, code, out)
    assert.is_true(eventually(function() return last_line(e, "root.sup.worker"):find("swapped") end))
    code, out = ctl(e, "restart root.sup")
    assert.equal(0, code, out)
    assert.is_true(eventually(function()
      local n = node(e, "root.sup")
      return n and n.incarnation == 2 and n.state == "HEALTHY"
    end))
    assert.is_true(eventually(function() return last_line(e, "root.sup.worker"):find("swapped") end))
    code, out = ctl(e, "eval " .. q([[return arbor.node("root.sup.worker").overridden]]))
    assert.matches("runnable = true", out, 1, true)
    code, out = ctl(e, "eval " .. q([[arbor.node("root.sup.worker"):unswap{restart = true}]]))
    assert.equal(0, code, out)
    assert.is_true(eventually(function() return last_line(e, "root.sup.worker"):find("script") end))
  end)

  it("node:run adds a real process to a live node; node:remove stops and removes it", function()
    -- a name for the program's process, this run's own (other runs of the
    -- specs may go on beside it)
    local marker = string.format("arbor-remove-%d-%d", e.pid, math.random(1e9))
    local code, out = ctl(e, "eval " .. q(string.format([[
      arbor.node("root.sup"):run("extra",
        arbor.exec({"sh", "-c", "sleep 1000", %q}))]], marker)))
    assert.equal(0, code, out)
    assert.is_true(eventually(function()
      local n = node(e, "root.sup.extra")
      return n and n.state == "HEALTHY"
    end))
    -- [x]: pgrep's own shell, whose command line holds the pattern, does not match
    local pattern = marker:sub(1, -2) .. "[" .. marker:sub(-1) .. "]"
    local marked = function() return (select(2, sh(support.plain .. "pgrep -f " .. q(pattern)))) end
    assert.matches("%d", marked())
    code, out = ctl(e, "eval " .. q([[arbor.node("root.sup.extra"):remove()]]))
    assert.equal(0, code, out)
    assert.is_true(eventually(function() return node(e, "root.sup.extra") == nil end))
    assert.is_true(eventually(function() return marked() == "" end))
    code, out = ctl(e, "eval " .. q([[arbor.node("root"):remove()]]))
    assert.equal(1, code)
    assert.matches("remove root: the root cannot be removed", out, 1, true)
  end)
end)
