-- The virtual-clock harness, arbor.testing (H1-H3).
local testing = require "arbor.testing"
local arbor = require "arbor"
local policy = require "arbor.policy"

local support = require "support"
local new = support.new
local idle = support.idle

after_each(support.close_all)

-- Fails a second after it starts, never HEALTHY (so backoff keeps growing).
local function failing(c)
  c:sleep(1)
  error("failing", 0)
end

-- Fails a second after it became HEALTHY.
local function flaky(c)
  c:signal("healthy")
  c:sleep(1)
  error("flaky", 0)
end

describe("H1 virtual time", function()
  it("runs an hour of exponential backoff without waiting", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("w", failing)
      idle(ctx)
    end)
    h:advance(3600)
    assert.equal(3600, h:now())
    local decisions = h:events{dn = "root.w", kind = "policy"}
    -- backoff: 0.5 * 1.5^(n-1) capped at 60, +-50%; each incarnation lives 1s
    assert.is_true(#decisions > 50)
    assert.is_true(#decisions < 150)
    local w = h:node("root.w")
    assert.equal(#decisions, w.restarts + (w.state == "DEAD" and 1 or 0))
    -- every restart happened exactly when its decision said
    local starts = {}
    for _, ev in ipairs(h:events{dn = "root.w", to = "NEW"}) do
      if ev.incarnation > 1 then starts[ev.incarnation] = ev.time end
    end
    for i, ev in ipairs(decisions) do
      if starts[i + 1] then
        assert.near(ev.time + ev.delay, starts[i + 1], 1e-9)
      end
    end
    -- late in the hour the delay sits at the cap
    assert.is_true(decisions[#decisions].delay >= 30)
  end)

  it("moves time only when the spec advances it", function()
    local h = new()
    local woke = false
    h:start(function(ctx)
      ctx:signal("healthy")
      ctx:sleep(5)
      woke = true
      ctx:wait()
    end)
    h:settle()
    h:settle()
    assert.equal(0, h:now())
    assert.is_false(woke)
    h:advance(4.999)
    assert.is_false(woke)
    h:advance(0.001)
    assert.is_true(woke)
  end)

  it("returns virtual time from arbor.now() inside a runnable", function()
    local times = {}
    local h = new()
    h:advance(100) -- time moves before the tree starts too
    h:start(function(ctx)
      times[#times + 1] = arbor.now()
      ctx:signal("healthy")
      ctx:sleep(42)
      times[#times + 1] = arbor.now()
      ctx:wait()
    end)
    h:advance(1000)
    assert.same({100, 142}, times)
    assert.equal(1100, h:now())
  end)
end)

describe("H1 determinism", function()
  local function run(seed)
    local h = new{seed = seed}
    h:start(function(ctx)
      ctx:group{a = flaky, b = idle, c = function(c)
        c:run("x", flaky, {policy = policy.exponential{jitter = 1}})
        idle(c)
      end}
      ctx:run("d", function(c)
        c:signal("healthy")
        c:sleep(arbor.random() * 10)
        error("random death", 0)
      end)
      idle(ctx)
    end)
    h:advance(600)
    local out = {}
    for _, ev in ipairs(h:events()) do
      out[#out + 1] = table.concat({ev.seq, ev.time, ev.dn, ev.incarnation,
        ev.kind, tostring(ev.from), tostring(ev.to), tostring(ev.reason)}, "|")
    end
    return out
  end

  it("gives identical event lists for two runs with the same seed", function()
    local a, b = run(42), run(42)
    assert.is_true(#a > 100)
    assert.same(a, b)
  end)

  it("gives different jitter for a different seed", function()
    assert.are_not.same(run(42), run(43))
  end)
end)

describe("H2 harness operations", function()
  it("settles: runs work queued from outside until nothing can progress", function()
    local ch = arbor.channel()
    local got = {}
    local h = new()
    h:start(function(ctx)
      ctx:run("r", function(c)
        c:signal("healthy")
        while true do got[#got + 1] = ch:recv() end
      end)
      idle(ctx)
    end)
    ch:send("a") -- wakes the receiver; it runs at the next settle
    assert.same({}, got)
    h:settle()
    assert.same({"a"}, got)
    -- the raw engine's cancel does not run anything by itself either
    h.engine:cancel("root.r")
    assert.equal("HEALTHY", h:state("root.r"))
    h:settle()
    assert.equal(2, h:node("root.r").incarnation)
  end)

  it("advances through due timers in order, within one call", function()
    local order = {}
    local h = new()
    h:start(function(ctx)
      for i, s in ipairs{3, 1, 2, 2} do
        ctx:run("s" .. i, function(c)
          c:signal("healthy")
          c:sleep(s)
          order[#order + 1] = arbor.now()
          c:wait()
        end)
      end
      idle(ctx)
    end)
    h:advance(10)
    assert.same({1, 2, 2, 3}, order)
    assert.equal(10, h:now())
    local ok, err = pcall(h.advance, h, -1)
    assert.is_false(ok)
    assert.matches("want a finite number >= 0", err, 1, true)
    ok = pcall(h.advance, h, 0 / 0)
    assert.is_false(ok)
    assert.equal(10, h:now())
  end)

  it("reads node states, views and events", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("w", idle)
      ctx:signal("healthy")
      ctx:wait()
    end)
    assert.equal("HEALTHY", h:state("root"))
    assert.equal("HEALTHY", h:state("root.w"))
    assert.is_nil(h:state("root.nope"))
    local v, err, code = h:node("root.nope")
    assert.is_nil(v)
    assert.equal("ENOENT: no node root.nope", err)
    assert.equal("ENOENT", code)
    local ok, e2 = pcall(h.node, h, 42)
    assert.is_false(ok)
    assert.matches("dn must be a string", e2, 1, true)
    -- events, with a filter
    local all = h:events{kind = "state"}
    assert.equal(4, #all)
    local w = h:events{dn = "root.w"}
    assert.equal(2, #w)
    assert.same({"NEW", "HEALTHY"}, {w[1].to, w[2].to})
    assert.equal(1, #h:events{dn = "root.w", to = "HEALTHY"})
    assert.equal(0, #h:events{dn = "root.w", to = "DEAD"})
    -- tree snapshot
    local t = h:tree()
    assert.equal("root", t.dn)
    assert.equal("HEALTHY", t.state)
    assert.equal("root.w", t.children[1].dn)
    assert.equal("root.w", h:tree("root.w").dn)
  end)

  it("gives node views with the methods of arbor.node", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("w", function(c)
        c:log("hello", 1, true)
        idle(c)
      end)
      idle(ctx)
    end)
    local w = h:node("root.w")
    for _, m in ipairs{"restart", "cancel", "stop", "swap", "set_policy", "logs"} do
      assert.is_function(w[m], m)
    end
    local logs = w:logs()
    assert.equal(1, #logs)
    assert.equal("hello 1 true", logs[1].line)
    assert.equal(0, logs[1].time)
    w:restart()
    h:settle()
    assert.equal(2, w.incarnation)
    assert.equal(2, #w:logs())
  end)

  it("settles after a node view method, like every other harness action", function()
    -- docs/testing.md: "Every action settles the tree afterwards" and h:node
    -- is listed with its methods; but NodeMethods (lua/arbor/init.lua) call
    -- the engine directly and nothing settles until the next harness call.
    local h = new()
    h:start(function(ctx)
      ctx:run("w", idle)
      idle(ctx)
    end)
    local w = h:node("root.w")
    w:cancel()
    assert.equal(2, w.incarnation)
    w:stop()
    assert.equal("CANCELED", w.state)
    w:restart()
    assert.equal("HEALTHY", w.state)
  end)

  it("injects a failure with h:fail", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("w", idle, {policy = policy.constant(3)})
      idle(ctx)
    end)
    h:advance(1)
    h:fail("root.w", "injected at 1")
    assert.equal("DEAD", h:state("root.w"))
    assert.equal("injected at 1", h:node("root.w").error)
    h:advance(3)
    assert.equal("HEALTHY", h:state("root.w"))
    assert.equal(2, h:node("root.w").incarnation)
  end)

  it("stops the tree in order and reports the time the stop took", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("slow", function(c)
        c:signal("healthy")
        pcall(c.wait, c)
        c:shield(function() c:sleep(2.5) end)
      end)
      idle(ctx)
    end)
    h:advance(10)
    assert.equal(2.5, h:stop())
    assert.equal(12.5, h:now())
    local finished, gave_up = h.engine:finished()
    assert.is_true(finished)
    assert.is_false(gave_up)
    assert.equal("CANCELED", h:state("root"))
    assert.equal("CANCELED", h:state("root.slow"))
    assert.is_false(h:node("root.slow").forced)
    -- stopping again does nothing
    assert.equal(0, h:stop())
  end)

  it("stops a tree that is waiting for a delayed restart", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("w", flaky, {policy = policy.constant(100)})
      idle(ctx)
    end)
    h:advance(1)
    assert.equal(0, h:stop())
    assert.is_true((h.engine:finished()))
    assert.equal("CANCELED", h:state("root.w"))
    assert.equal(1, h:now())
  end)

  it("runs until a predicate holds", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("w", flaky, {policy = policy.constant(2)})
      idle(ctx)
    end)
    local ok = h:run_until(function() return h:node("root.w").incarnation >= 4 end, 100)
    assert.is_true(ok)
    assert.equal(4, h:node("root.w").incarnation)
    assert.equal(9, h:now()) -- fails at 1, 4, 7; restarts at 3, 6, 9
    ok = h:run_until(function() return false end, 5)
    assert.is_false(ok)
    assert.equal(14, h:now())
  end)

  it("checks its arguments", function()
    local ok, err = pcall(testing.new, {seed = 1, bogus = true})
    assert.is_false(ok)
    assert.matches("testing.new: unknown option 'bogus'", err, 1, true)
    ok, err = pcall(testing.new, 5)
    assert.is_false(ok)
    assert.matches("opts must be a table", err, 1, true)
    local h = new()
    ok, err = pcall(h.start, h, "nope")
    assert.is_false(ok)
    assert.matches("the root runnable must be a function", err, 1, true)
    h:start(idle)
    ok, err = pcall(h.start, h, idle)
    assert.is_false(ok)
    assert.matches("already started", err, 1, true)
  end)

  it("applies the start options policy and shutdown to the root", function()
    local h = new()
    h:start(function(ctx)
      ctx:signal("healthy")
      pcall(ctx.wait, ctx)
      ctx:shield(function() ctx:sleep(100) end)
    end, {shutdown = 2})
    assert.equal(2, h.engine:node("root").shutdown)
    assert.equal(2, h:stop())
    assert.is_true(h:node("root").forced)
  end)

  it("uses the default policy it was given", function()
    local h = new{seed = 1, policy = policy.constant(7)}
    h:start(function(ctx)
      ctx:run("w", flaky)
      idle(ctx)
    end)
    h:advance(1)
    assert.equal(8, h.engine:node("root.w").restart_at)
  end)
end)

describe("harness calls from inside the tree", function()
  it("refuse to advance or close, and settle does nothing", function()
    local h = new()
    local results = {}
    h:start(function(ctx)
      ctx:run("w", function(c)
        c:signal("healthy")
        results.advance = {pcall(h.advance, h, 1)}
        results.close = {pcall(h.close, h)}
        results.settle = {pcall(h.settle, h)}
        h:node("root.w2"):restart() -- a view method settles: a no-op here
        c:wait()
      end)
      ctx:run("w2", idle)
      idle(ctx)
    end)
    assert.is_false(results.advance[1])
    assert.matches("advance: not from inside the tree", results.advance[2], 1, true)
    assert.is_false(results.close[1])
    assert.matches("close: not from inside the tree", results.close[2], 1, true)
    assert.is_true(results.settle[1])
    assert.equal(2, h:node("root.w2").incarnation)
    assert.equal("HEALTHY", h:state("root.w"))
  end)
end)
