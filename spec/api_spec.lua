-- The public API reads the same everywhere (issue 14): one meaning per
-- option name, one kind of subscription handle, stock policies all
-- constructors, no reserved word as an option name, and no private helper
-- on a public object.
local arbor = require "arbor"
local core = require "arbor.core"
local policy = require "arbor.policy"
local testing = require "arbor.testing"

-- arbor.run with a root that stops the tree once it is HEALTHY.
local function run_briefly(opts)
  opts = opts or {}
  opts.signals, opts.control = false, false
  return arbor.run(function(ctx)
    ctx:signal("healthy")
    arbor.stop()
    ctx:wait()
  end, opts)
end

describe("private helpers", function()
  it("are not on the arbor module", function()
    for k in pairs(arbor) do
      assert.is_falsy(k:find("^_"), "arbor." .. k)
    end
  end)

  it("are not methods of a ctx", function()
    local seen
    local h = testing.new()
    h:start(function(ctx)
      seen = {}
      for _, k in ipairs{"_park", "_park_seq", "_unpark", "_shield_enter",
          "_shield_leave"} do
        seen[k] = ctx[k]
      end
      ctx:signal("healthy")
      ctx:wait()
    end)
    assert.same({}, seen)
    for k in pairs(core.ctx_methods) do
      assert.is_falsy(k:find("^_"), "ctx:" .. k)
    end
  end)
end)

describe("arbor.on_event", function()
  it("called before arbor.run subscribes to the tree that run starts", function()
    local seen = {}
    local unsubscribe = arbor.on_event(function(ev)
      if ev.kind == "state" then seen[#seen + 1] = ev.dn .. " " .. ev.to end
    end)
    assert.is_function(unsubscribe)
    assert.is_true((run_briefly()))
    assert.equal("root NEW", seen[1])
    assert.equal("root HEALTHY", seen[2])
    -- that run consumed the subscription: the next one has its own
    local n = #seen
    assert.is_true((run_briefly()))
    assert.equal(n, #seen)
    unsubscribe() -- harmless once the tree is gone
  end)

  it("called before arbor.run can be taken back before the run", function()
    local called = 0
    local unsubscribe = arbor.on_event(function() called = called + 1 end)
    unsubscribe()
    assert.is_true((run_briefly()))
    assert.equal(0, called)
  end)

  it("returns the same kind of handle as h:on_event: a function", function()
    local h = testing.new()
    local got = 0
    local unsubscribe = h:on_event(function() got = got + 1 end)
    assert.is_function(unsubscribe)
    h:start(function(ctx) ctx:signal("healthy") ctx:wait() end)
    local after_start = got
    assert.is_true(after_start > 0)
    unsubscribe()
    h:node("root"):restart()
    assert.equal(after_start, got)
    unsubscribe() -- twice is harmless
    -- the older spelling, from when h:on_event returned the engine's id
    local late = 0
    h.engine:unsubscribe(h:on_event(function() late = late + 1 end))
    h:node("root"):restart()
    assert.equal(0, late)
  end)
end)

describe("policy", function()
  it("is the root's policy in arbor.run and in testing; default_policy the default", function()
    local decided = {}
    local function mark(name)
      return function(ev) decided[#decided + 1] = name .. " " .. ev.dn return "stop" end
    end
    local h = testing.new{default_policy = mark("default")}
    h:start(function(ctx)
      ctx:run("child", function() error("boom") end)
      ctx:signal("healthy")
      ctx:sleep(1)
      error("root fails")
    end, {policy = mark("root")})
    h:advance(1)
    assert.same({"default root.child", "root root"}, decided)

    decided = {}
    local ok = arbor.run(function(ctx)
      ctx:run("child", function() error("boom") end)
      ctx:signal("healthy")
      ctx:sleep(0.01)
      error("root fails")
    end, {signals = false, control = false, policy = mark("root"),
      default_policy = mark("default")})
    assert.is_false(ok)
    assert.same({"default root.child", "root root"}, decided)
  end)

  it("given to testing.new is still read as the default policy (the older spelling)", function()
    local decided = {}
    local h = testing.new{policy = function(ev) decided[#decided + 1] = ev.dn return "stop" end}
    h:start(function(ctx)
      ctx:run("child", function() error("boom") end)
      ctx:signal("healthy")
      ctx:wait()
    end)
    assert.same({"root.child"}, decided)
    local ok, err = pcall(testing.new, {policy = policy.never(), default_policy = policy.never()})
    assert.is_false(ok)
    assert.matches("testing.new: give 'default_policy' or its older spelling 'policy', not both",
      err, 1, true)
  end)
end)

describe("the stock policies", function()
  it("are all constructors", function()
    local ev = {dn = "root.x", consecutive = 1, failures = {0}, now = 0}
    for name, make in pairs{
      exponential = function() return policy.exponential{jitter = 0} end,
      constant = function() return policy.constant(2) end,
      immediate = function() return policy.immediate() end,
      never = function() return policy.never() end,
      intensity = function() return policy.intensity{max = 1, period = 1} end,
      decaying = function() return policy.decaying() end,
    } do
      local p = make()
      assert.is_function(p, name)
      assert.is_not_nil(p(ev), name)
    end
    assert.equal(0, policy.immediate()(ev))
    assert.equal("stop", policy.never()(ev))
  end)

  it("immediate and never, as values (the older spelling), are still policies", function()
    local ev = {dn = "root.x", consecutive = 1}
    assert.equal(0, policy.immediate(ev))
    assert.equal("stop", policy.never(ev))
    assert.same({0, 0, 0}, policy.curve(policy.immediate, 3))
    assert.same({0, 0, 0}, policy.curve(policy.immediate(), 3))
    assert.same({"stop"}, policy.curve(policy.never, 3))
    assert.same({"stop"}, policy.curve(policy.never(), 3))
  end)
end)

describe("intensity", function()
  local function decisions(p, trace)
    local out = {}
    for i, r in ipairs(policy.simulate(p, trace or {0, 1, 2, 3})) do out[i] = r.decision end
    return out
  end

  it("takes what it does beyond the limit as 'exceeded', not a reserved word", function()
    assert.same({0, 0, "stop"},
      decisions(policy.intensity{max = 2, period = 10, exceeded = "stop"}))
    assert.same({0, 0, 7},
      decisions(policy.chain(policy.intensity{max = 2, period = 10,
        exceeded = policy.constant(7)}, policy.immediate()), {0, 1, 2}))
  end)

  it("still takes ['then'] (the older spelling), but not both", function()
    assert.same({0, 0, "stop"},
      decisions(policy.intensity{max = 2, period = 10, ["then"] = "stop"}))
    local ok, err = pcall(policy.intensity, {max = 2, period = 10,
      exceeded = "stop", ["then"] = "stop"})
    assert.is_false(ok)
    assert.matches("arbor.policy.intensity: give 'exceeded' or its older spelling 'then', not both",
      err, 1, true)
    ok, err = pcall(policy.intensity, {max = 2, period = 10, exceeded = "later"})
    assert.is_false(ok)
    assert.matches("'exceeded' must be \"escalate\", \"stop\" or a policy", err, 1, true)
  end)
end)
