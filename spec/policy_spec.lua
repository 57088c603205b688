-- Restart policies: what a policy is told (P1), its decisions (P2), faulty
-- policies (P3), the stock policies (P4) and determinism (P5). All on the
-- virtual clock.
local testing = require "arbor.testing"
local policy = require "arbor.policy"

local support = require "support"
local new = support.new
local idle = support.idle

after_each(support.close_all)

-- A tree with one child "w" running fn under policy p.
local function with_child(fn, p, hopts)
  local h = new(hopts)
  h:start(function(ctx)
    ctx:run("w", fn, {policy = p})
    idle(ctx)
  end)
  return h
end

-- Times at which dn's incarnations started (restarts only).
local function restart_times(h, dn)
  local out = {}
  for _, ev in ipairs(h:events{dn = dn, kind = "state", to = "NEW"}) do
    if ev.incarnation > 1 then out[#out + 1] = ev.time end
  end
  return out
end

local function copy(t)
  local c = {}
  for k, v in pairs(t) do c[k] = type(v) == "table" and copy(v) or v end
  return c
end

describe("P1 the policy's argument", function()
  it("carries dn, err, consecutive, restarts, failures, failure, uptime, healthy, returned, memory and now", function()
    local seen = {}
    local h = with_child(function(c)
      -- incarnation 3 becomes HEALTHY before failing
      if c.incarnation == 3 then c:signal("healthy") end
      c:sleep(3)
      error("boom " .. c.incarnation, 0)
    end, function(ev)
      seen[#seen + 1] = copy(ev)
      return 1
    end)
    h:advance(3)
    assert.equal(1, #seen)
    assert.same({dn = "root.w", err = "boom 1", consecutive = 1, restarts = 0,
      failures = {3}, failure = 1, uptime = 3, healthy = 0, returned = false,
      memory = {}, now = 3}, seen[1])
    h:advance(4) -- restarted at 4, fails at 7
    assert.same({dn = "root.w", err = "boom 2", consecutive = 2, restarts = 1,
      failures = {3, 7}, failure = 2, uptime = 3, healthy = 0, returned = false,
      memory = {}, now = 7}, seen[2])
    h:advance(4) -- restarted at 8, HEALTHY, fails at 11
    assert.same({dn = "root.w", err = "boom 3", consecutive = 1, restarts = 2,
      failures = {3, 7, 11}, failure = 3, uptime = 3, healthy = 3, returned = false,
      memory = {}, now = 11}, seen[3])
    h:advance(4)
    assert.equal(2, seen[4].consecutive)
    assert.equal(3, seen[4].restarts)
  end)

  it("keeps the 16 most recent failure times", function()
    -- the bound is the implementation's (ARBOR_FAILURES in src/engine/engine.h);
    -- SEMANTICS.md only says "times of recent failures"
    local last
    local h = with_child(function(c) c:sleep(1) error("x") end, function(ev)
      last = copy(ev)
      return 0
    end)
    h:advance(20)
    assert.equal(20, last.consecutive)
    assert.equal(16, #last.failures)
    for i = 1, 16 do assert.equal(i + 4, last.failures[i]) end
  end)

  it("resets consecutive after DONE too", function()
    local seen = {}
    local h = new()
    h:start(function(ctx)
      ctx:run("w", function(c)
        if c.incarnation == 2 then
          c:signal("healthy")
          c:signal("done")
          pcall(c.wait, c) -- canceled below: DONE, restarted with delay 0
          return
        end
        c:sleep(1)
        error("x")
      end, {policy = function(ev) seen[#seen + 1] = ev.consecutive return 1 end})
      idle(ctx)
    end)
    h:advance(1)  -- incarnation 1 fails at 1
    h:advance(1)  -- incarnation 2 at 2: DONE
    assert.equal("DONE", h:state("root.w"))
    h:node("root.w"):cancel()
    h:settle()
    h:advance(1)  -- incarnation 3 fails at 3
    assert.same({1, 1}, seen)
  end)

  it("is not consulted for CANCELED or DONE exits", function()
    local calls = 0
    local h = with_child(idle, function() calls = calls + 1 return 0 end)
    h:node("root.w"):cancel()
    h:settle()
    h:node("root.w"):restart()
    h:settle()
    assert.equal(3, h:node("root.w").incarnation)
    assert.equal(0, calls)
  end)
end)

describe("P2 decisions", function()
  it("a number restarts after that many seconds", function()
    local h = with_child(function(c) c:sleep(1) error("x") end,
      function() return 2.5 end)
    h:advance(10)
    -- fails at 1, 4.5, 8; restarts at 3.5, 7
    assert.same({3.5, 7}, restart_times(h, "root.w"))
  end)

  it("0 restarts at once", function()
    local h = with_child(function(c) c:sleep(1) error("x") end,
      function() return 0 end)
    h:advance(3)
    assert.same({1, 2, 3}, restart_times(h, "root.w"))
  end)

  it("'stop' leaves the node DEAD and its siblings and parent running", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("w", function(c) c:signal("healthy") c:sleep(1) error("w failed") end,
        {policy = function() return "stop" end})
      ctx:run("sib", idle)
      idle(ctx)
    end)
    h:advance(1)
    h:advance(1000)
    local w = h:node("root.w")
    assert.equal("DEAD", w.state)
    assert.equal(1, w.incarnation)
    assert.is_true(w.held)
    assert.equal("HEALTHY", h:state("root.sib"))
    assert.equal(1, h:node("root.sib").incarnation)
    assert.equal("HEALTHY", h:state("root"))
    assert.equal(1, h:node("root").incarnation)
    assert.is_nil(h.engine:next_timer())
  end)

  it("'escalate' fails the parent, whose own policy decides", function()
    local parent_saw
    local h = new()
    h:start(function(ctx)
      ctx:run("p", function(p)
        p:run("c", function(c)
          c:signal("healthy")
          c:sleep(1)
          error("c failed", 0)
        end, {policy = function() return "escalate" end})
        p:run("other", idle)
        idle(p)
      end, {policy = function(ev)
        parent_saw = copy(ev)
        return 5
      end})
      ctx:run("uncle", idle)
      idle(ctx)
    end)
    h:advance(1)
    local p = h:node("root.p")
    assert.equal("DEAD", p.state)
    assert.equal("child root.p.c escalated: c failed", p.error)
    assert.equal("child root.p.c escalated: c failed", parent_saw.err)
    assert.equal("root.p", parent_saw.dn)
    assert.equal(1, parent_saw.consecutive)
    assert.equal(0, parent_saw.restarts)
    assert.same({1}, parent_saw.failures)
    assert.equal(1, parent_saw.now)
    assert.equal(1, parent_saw.uptime)
    local dead = h:events{dn = "root.p", to = "DEAD"}
    assert.equal(1, #dead)
    assert.equal("child root.p.c escalated: c failed", dead[1].reason)
    -- the parent's death spread to its other child, not to its sibling
    assert.equal(1, #h:events{dn = "root.p.other", to = "CANCELED"})
    assert.equal("HEALTHY", h:state("root.uncle"))
    assert.equal(1, h:node("root.uncle").incarnation)
    -- the parent's policy said 5 seconds
    h:advance(4.9)
    assert.equal(1, p.incarnation)
    h:advance(0.1)
    assert.equal(2, p.incarnation)
    assert.equal("HEALTHY", h:state("root.p.c"))
    assert.equal(1, h:node("root.p.c").incarnation)
  end)

  it("'escalate' climbs two levels", function()
    local esc = function() return "escalate" end
    local top_saw
    local h = new()
    h:start(function(ctx)
      ctx:run("a", function(a)
        a:run("b", function(b)
          b:run("c", function(c)
            c:signal("healthy")
            c:sleep(1)
            error("deep failure", 0)
          end, {policy = esc})
          idle(b)
        end, {policy = esc})
        idle(a)
      end, {policy = function(ev) top_saw = ev.err return "stop" end})
      idle(ctx)
    end)
    h:advance(1)
    assert.equal("child root.a.b.c escalated: deep failure", h:node("root.a.b").error)
    assert.equal("child root.a.b escalated: child root.a.b.c escalated: deep failure",
      h:node("root.a").error)
    assert.equal(h:node("root.a").error, top_saw)
    assert.equal("DEAD", h:state("root.a"))
    assert.equal("HEALTHY", h:state("root"))
    h:advance(100)
    assert.equal(1, h:node("root.a").incarnation)
  end)
end)

describe("P3 faulty policies", function()
  local faulty = {
    {"raises", function() error("policy broke") end, "policy broke"},
    {"returns nil", function() end, "returned nil"},
    {"returns a negative number", function() return -1 end, "returned number -1"},
    {"returns NaN", function() return 0 / 0 end, "returned number"},
    {"returns infinity", function() return math.huge end, "returned number"},
    {"returns a table", function() return {} end, "returned table"},
    {"returns an unknown string", function() return "restart" end,
      "returned string restart"},
    {"loops forever", function() while true do end end, "time budget exceeded"},
  }
  for _, case in ipairs(faulty) do
    it("that " .. case[1] .. " is logged, recorded and the default decides", function()
      local h = with_child(function(c) c:sleep(1) error("x") end, case[2],
        {seed = 1, policy = policy.constant(2)})
      h:advance(1)
      local w = h:node("root.w")
      assert.equal("DEAD", w.state)
      local evs = h:events{dn = "root.w", kind = "policy"}
      assert.equal(2, #evs)
      assert.matches("^faulty policy: ", evs[1].reason)
      assert.matches(case[3], evs[1].reason, 1, true)
      assert.matches("the default decides", evs[1].reason, 1, true)
      assert.equal(2, evs[2].delay) -- the default's decision
      local logs = h:logs("root.w")
      assert.equal(1, #logs)
      assert.equal(evs[1].reason, logs[1].line)
      -- the node is restarted by the default's decision
      h:advance(2)
      assert.equal(2, w.incarnation)
      assert.same({3}, restart_times(h, "root.w"))
      assert.equal("HEALTHY", h:state("root"))
    end)
  end

  it("never strands a node, even when the default itself is faulty", function()
    -- documented in src/engine/decide.c (consult): when the default fails too,
    -- the node restarts after one second
    local h = with_child(function(c) c:sleep(1) error("x") end,
      function() error("custom broke") end,
      {seed = 1, policy = function() return "bogus" end})
    h:advance(1)
    local evs = h:events{dn = "root.w", kind = "policy"}
    assert.equal(3, #evs)
    assert.matches("custom broke", evs[1].reason, 1, true)
    assert.matches("returned string bogus", evs[2].reason, 1, true)
    assert.equal(1, evs[3].delay)
    h:advance(1)
    assert.equal(2, h:node("root.w").incarnation)
  end)

  it("does not let a faulty policy reset the failure history", function()
    local seen = {}
    local n = 0
    local h = with_child(function(c) c:sleep(1) error("x") end, function(ev)
      n = n + 1
      seen[#seen + 1] = ev.consecutive
      if n == 2 then error("once") end
      return 1
    end, {seed = 1, policy = policy.constant(1)})
    h:advance(6)
    assert.same({1, 2, 3}, seen)
  end)
end)

describe("stock policies", function()
  local function delays_of(p, seed, failures)
    local got = {}
    local h = with_child(function(c) c:sleep(1) error("x") end, function(ev)
      local d = p(ev)
      got[#got + 1] = d
      return d
    end, {seed = seed})
    for i = 1, failures do
      h:advance(1)
      if i < failures then h:advance(got[i]) end
    end
    assert.equal(failures, #got)
    return got, h
  end

  describe("exponential", function()
    it("spreads initial * multiplier^(n-1), capped at max, by +-jitter", function()
      local p = policy.exponential{initial = 1, multiplier = 2, max = 20, jitter = 0.25}
      local got, h = delays_of(p, 1, 8)
      local distinct = {}
      for n, d in ipairs(got) do
        local base = math.min(20, 2 ^ (n - 1))
        assert.is_true(d >= base * 0.75 and d <= base * 1.25,
          ("failure %d: %g not in [%g, %g]"):format(n, d, base * 0.75, base * 1.25))
        distinct[d] = true
      end
      -- the jitter does move the delays
      local count = 0
      for _ in pairs(distinct) do count = count + 1 end
      assert.is_true(count >= 7)
      -- with this jitter, 1,2,4,8,16 grow strictly
      for n = 2, 5 do assert.is_true(got[n] > got[n - 1]) end
      -- the engine restarted at exactly the returned delays
      local evs = h:events{dn = "root.w", kind = "policy"}
      for i, ev in ipairs(evs) do assert.equal(got[i], ev.delay) end
    end)

    it("with jitter = 0 gives exactly initial * multiplier^(n-1), capped", function()
      local p = policy.exponential{initial = 0.5, multiplier = 3, max = 30, jitter = 0}
      local got = delays_of(p, 1, 7)
      assert.same({0.5, 1.5, 4.5, 13.5, 30, 30, 30}, got)
    end)

    it("resets after HEALTHY", function()
      local got = {}
      local p = policy.exponential{initial = 1, multiplier = 2, max = 100, jitter = 0}
      local h = with_child(function(c)
        if c.incarnation == 4 then c:signal("healthy") end
        c:sleep(1)
        error("x")
      end, function(ev) local d = p(ev) got[#got + 1] = d return d end)
      h:advance(100)
      assert.same({1, 2, 4, 1, 2, 4}, {table.unpack(got, 1, 6)})
    end)

    it("has the defaults initial 0.5, multiplier 1.5, max 60, jitter 0.5", function()
      local got = delays_of(policy.exponential(), 3, 14)
      for n, d in ipairs(got) do
        local base = math.min(60, 0.5 * 1.5 ^ (n - 1))
        assert.is_true(d >= base * 0.5 and d <= base * 1.5,
          ("failure %d: %g vs base %g"):format(n, d, base))
      end
      -- 0.5 * 1.5^13 > 60: the cap applies
      assert.is_true(got[14] <= 90)
    end)

    it("is the harness's default policy", function()
      local h = new()
      h:start(function(ctx)
        ctx:run("w", function(c) c:sleep(1) error("x") end)
        idle(ctx)
      end)
      h:advance(1)
      local d = h:events{dn = "root.w", kind = "policy"}[1].delay
      assert.is_true(d >= 0.25 and d <= 0.75)
    end)

    it("is a plain function of the argument table", function()
      local p = policy.exponential{initial = 2, multiplier = 2, max = 10, jitter = 0}
      assert.equal(2, p{consecutive = 1})
      assert.equal(8, p{consecutive = 3})
      assert.equal(10, p{consecutive = 4})
      assert.equal(2, p{})
    end)

    local bad = {
      {{initial = -1}, "'initial'"},
      {{initial = "1"}, "'initial'"},
      {{initial = 0 / 0}, "'initial'"},
      {{multiplier = 0.5}, "'multiplier'"},
      {{max = math.huge}, "'max'"},
      {{max = -1}, "'max'"},
      {{jitter = 1.5}, "'jitter'"},
      {{jitter = -0.1}, "'jitter'"},
      {{initial = 10, max = 5}, "'max' must be >= 'initial'"},
      {{bogus = 1}, "unknown option 'bogus'"},
    }
    for _, case in ipairs(bad) do
      it("refuses bad parameters, naming them: " .. case[2], function()
        local ok, err = pcall(policy.exponential, case[1])
        assert.is_false(ok)
        assert.matches("arbor.policy.exponential", err, 1, true)
        assert.matches(case[2], err, 1, true)
      end)
    end

    it("refuses options that are not a table", function()
      local ok, err = pcall(policy.exponential, 5)
      assert.is_false(ok)
      assert.matches("options must be a table, got number", err, 1, true)
    end)
  end)

  describe("constant", function()
    it("always waits the same delay", function()
      local h = with_child(function(c) c:sleep(1) error("x") end, policy.constant(4))
      h:advance(20)
      assert.same({5, 10, 15, 20}, restart_times(h, "root.w"))
      assert.equal(4, policy.constant(4){consecutive = 9})
    end)

    for _, bad in ipairs{-1, "3", 0 / 0, math.huge} do
      it("refuses " .. tostring(bad), function()
        local ok, err = pcall(policy.constant, bad)
        assert.is_false(ok)
        assert.matches("arbor.policy.constant(seconds)", err, 1, true)
      end)
    end
  end)

  describe("immediate and never", function()
    it("immediate restarts at once", function()
      local h = with_child(function(c) c:sleep(1) error("x") end, policy.immediate)
      h:advance(3)
      assert.same({1, 2, 3}, restart_times(h, "root.w"))
      assert.equal(0, policy.immediate{consecutive = 50})
    end)

    it("never says stop", function()
      local h = with_child(function(c) c:sleep(1) error("x") end, policy.never)
      h:advance(100)
      assert.same({}, restart_times(h, "root.w"))
      assert.equal("DEAD", h:state("root.w"))
      assert.equal("stop", policy.never{consecutive = 1})
    end)
  end)
end)

describe("P5 determinism", function()
  it("gives the same jittered delays for the same seed", function()
    local function run(seed)
      local got = {}
      local h = new{seed = seed}
      h:start(function(ctx)
        ctx:run("w", function(c) c:sleep(1) error("x") end)
        idle(ctx)
      end)
      h:advance(300)
      for _, ev in ipairs(h:events{dn = "root.w", kind = "policy"}) do
        got[#got + 1] = ev.delay
      end
      return got
    end
    local a, b, c = run(7), run(7), run(8)
    assert.is_true(#a > 10)
    assert.same(a, b)
    assert.are_not.same(a, c)
  end)
end)

describe("P1 the reused event table", function()
  it("carries only the deciding node's failures", function()
    local h = new()
    local seen = {}
    local function record(ev)
      seen[#seen + 1] = {dn = ev.dn, n = #ev.failures, consecutive = ev.consecutive}
      return 1
    end
    h:start(function(ctx)
      ctx:run("a", function(c) c:sleep(1) error("a") end, {policy = record})
      ctx:run("b", function(c) c:sleep(10) error("b") end, {policy = record})
      idle(ctx)
    end)
    h:advance(10)
    -- a failed at t=1, 3, 5, 7, 9 (five failures); b once at t=10
    local last = seen[#seen]
    assert.same({dn = "root.b", n = 1, consecutive = 1}, last)
    assert.same({dn = "root.a", n = 5, consecutive = 5}, seen[#seen - 1])
  end)

  it("gives pairs every field, one failures table per call, nothing after the call", function()
    local h = new()
    local copy, same, kept
    h:start(function(ctx)
      ctx:run("a", function(c) c:sleep(1) error("boom") end, {policy = function(ev)
        copy = {}
        for k, v in pairs(ev) do copy[k] = v end
        same = ev.failures == ev.failures
        kept = ev
        return "stop"
      end})
      idle(ctx)
    end)
    h:advance(1)
    local keys = {}
    for k in pairs(copy) do keys[#keys + 1] = k end
    table.sort(keys)
    assert.same({"consecutive", "dn", "err", "failure", "failures", "healthy",
      "memory", "now", "restarts", "returned", "uptime"}, keys)
    assert.equal("root.a", copy.dn)
    assert.equal(1, copy.consecutive)
    assert.same({1}, copy.failures)
    assert.matches("boom", copy.err)
    assert.is_true(same)
    -- read after its call, the reused table describes no node
    assert.is_nil(kept.dn)
    assert.is_nil(kept.consecutive)
  end)
end)
