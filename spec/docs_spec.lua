-- The examples of README.md and docs/testing.md, kept working.
local testing = require "arbor.testing"
local policy = require "arbor.policy"

describe("documented examples", function()
  it("README: backs off", function()
    local h = testing.new{seed = 1}
    h:start(function(ctx)
      ctx:run("w", function(c) c:sleep(1) error("boom") end,
        {policy = function(ev) return 10 * ev.consecutive end})
      ctx:signal("healthy")
      ctx:wait()
    end)
    h:advance(1)
    assert.equal("DEAD", h:state("root.w"))
    h:advance(10)
    assert.equal("NEW", h:state("root.w"))
  end)

  it("testing.md: is restarted with a growing delay", function()
    local h = testing.new{seed = 1}
    h:start(function(ctx)
      ctx:run("worker", function(c)
        c:signal("healthy")
        c:sleep(5)
        error("connection lost")
      end, {policy = policy.exponential{initial = 1, jitter = 0}})
      ctx:signal("healthy")
      ctx:wait()
    end)
    h:advance(5)
    assert.equal("DEAD", h:state("root.worker"))
    assert.matches("connection lost", h:node("root.worker").error)
    h:advance(1)
    assert.equal("HEALTHY", h:state("root.worker"))
    assert.equal(1, h:node("root.worker").restarts)
  end)

  it("testing.md: gives up after three failures", function()
    local function three(ev) return ev.consecutive > 3 and "stop" or 0.5 end
    assert.equal(0.5, three{consecutive = 1})
    assert.equal("stop", three{consecutive = 4})
    local h = testing.new()
    h:start(function(ctx)
      ctx:run("w", function(c) c:sleep(1) error("x") end, {policy = three})
      ctx:signal("healthy")
      ctx:wait()
    end)
    h:advance(60)
    assert.equal("DEAD", h:state("root.w"))
    assert.equal(3, h:node("root.w").restarts)
    local decisions = h:events{dn = "root.w", kind = "policy"}
    assert.equal("stop", decisions[#decisions].reason)
  end)

  it("README: the 20-line supervisor runs", function()
    local f = assert(io.open("README.md"))
    local readme = f:read("a")
    f:close()
    local code = readme:match("```lua\n(%-%- sup%.lua.-)```")
    assert.is_string(code)
    local root = assert(load(code, "=README.md"))()
    local h = testing.new{seed = 1}
    h:start(root)
    h:advance(10)
    assert.equal("HEALTHY", h:state("root.producer"))
    assert.equal("HEALTHY", h:state("root.consumer"))
    assert.is_true(h:node("root.flaky").restarts >= 1)
    assert.matches("got 10", h:logs("root.consumer")[10].line, 1, true)
  end)

  it("the example supervisor runs on the virtual clock", function()
    local root = dofile("docs/examples/workers.lua")
    local h = testing.new{seed = 3}
    local printed = 0
    local real_print = print
    _G.print = function() printed = printed + 1 end
    h:start(root)
    h:advance(30)
    _G.print = real_print
    assert.equal(6, printed) -- the reporter draws the tree every 5 s
    assert.equal("HEALTHY", h:state("root"))
    assert.equal("HEALTHY", h:state("root.producer"))
    assert.is_true(h:node("root.flaky").restarts >= 3)
    assert.equal(0, h:node("root.producer").restarts)
  end)

  it("the example supervisor's comment draws the tree it runs", function()
    local drawn = {}
    for line in io.lines("docs/examples/workers.lua") do
      local node = line:match("^%-%-   ([|`%- ]*%l+)")
      if node then drawn[#drawn + 1] = node end
    end
    local h = testing.new{seed = 3}
    h:start(dofile("docs/examples/workers.lua"))
    h:advance(1) -- before the reporter prints
    local real = {}
    for line in require("arbor").render(h:tree()):gmatch("[^\n]+") do
      real[#real + 1] = line:match("^[|`%- ]*%l+")
    end
    assert.same(real, drawn)
  end)
end)

-- The example spec of docs/policies.md, kept working.
assert(loadfile("docs/examples/policy_spec.lua", "t", _ENV))()
