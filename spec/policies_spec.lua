-- Issue 4: the stock policies (intensity, decaying, chain, transient,
-- exponential reset_after), simulate/curve, live swaps keeping the failure
-- history. On the virtual clock.
local policy = require "arbor.policy"
local support = require "support"
local new, idle = support.new, support.idle

after_each(support.close_all)

-- A tree whose child "w" fails every `every` seconds under policy p.
local function failing(p, every, hopts)
  local h = new(hopts)
  h:start(function(ctx)
    ctx:run("w", function(c) c:sleep(every or 1) error("boom") end, {policy = p})
    ctx:run("sib", idle)
    idle(ctx)
  end)
  return h
end

local function decisions(h, dn)
  local out = {}
  for _, ev in ipairs(h:events{dn = dn, kind = "policy"}) do
    if ev.delay then out[#out + 1] = ev.delay
    elseif ev.reason == "stop" or ev.reason == "escalate" then out[#out + 1] = ev.reason end
  end
  return out
end

describe("intensity", function()
  it("gives up on the failure that makes more than max within period", function()
    local h = failing(policy.intensity{max = 3, period = 10, ["then"] = "stop"}, 1)
    h:advance(20)
    -- failures at 1, 2, 3 restart at once; the 4th (at 4) is the 4th in 10 s
    assert.same({0, 0, 0, "stop"}, decisions(h, "root.w"))
    assert.equal("DEAD", h:state("root.w"))
    assert.equal("HEALTHY", h:state("root.sib"))
    assert.equal("HEALTHY", h:state("root"))
  end)

  it("lets failures slide out of the window", function()
    -- fails every 4 s: at most 3 failures in any 10 s window
    local h = failing(policy.intensity{max = 3, period = 10, ["then"] = "stop"}, 4)
    h:advance(100)
    assert.equal(25, #decisions(h, "root.w"))
    for _, d in ipairs(decisions(h, "root.w")) do assert.equal(0, d) end
    -- every 3 s: 1, 3+1... failures at 3, 6, 9, 12 -> 4 within 10 s at 12
    local h2 = failing(policy.intensity{max = 3, period = 10, ["then"] = "stop"}, 3)
    h2:advance(100)
    assert.same({0, 0, 0, "stop"}, decisions(h2, "root.w"))
  end)

  it("escalates by default, and escalation climbs two levels", function()
    local h = new()
    local limit = policy.intensity{max = 1, period = 60}
    h:start(function(ctx)
      ctx:run("mid", function(c)
        c:run("leaf", function(l) l:sleep(1) error("leaf broke") end, {policy = limit})
        idle(c)
      end, {policy = limit})
      idle(ctx)
    end, {policy = policy.constant(100)})
    -- leaf: fails at 1 (restart), 2 (escalate) -> mid DEAD (1st), restarts;
    -- leaf fails at 3 (fresh node: restart), 4 (escalate) -> mid's 2nd
    -- failure within 60 s -> escalate -> root DEAD, constant(100)
    h:advance(5)
    assert.same({0, "escalate"}, decisions(h, "root.mid"))
    assert.equal("DEAD", h:state("root"))
    assert.matches("child root.mid escalated: child root.mid.leaf escalated: .*leaf broke",
      h:node("root").error)
    assert.same({100}, decisions(h, "root"))
  end)

  it("then = a policy decides once the limit is passed", function()
    local p = policy.chain(policy.intensity{max = 2, period = 10, ["then"] = policy.constant(30)},
      policy.constant(1))
    local h = failing(p, 1)
    h:advance(8)
    -- fail 1 (+1), fail at 3 (+1), fail at 5 -> third in 10 s -> 30
    assert.same({1, 1, 30}, decisions(h, "root.w"))
  end)

  it("counts large limits in an O(1) window, keeping the same verdicts", function()
    for _, max in ipairs{20, 50} do
      local p = policy.intensity{max = max, period = 10, ["then"] = "stop"}
      local h = failing(p, 0.1)
      h:advance(60)
      local d = decisions(h, "root.w")
      assert.equal(max + 1, #d) -- 10 failures a second: over the limit at failure max+1
      assert.equal("stop", d[#d])
    end
    -- slow enough never to pass it
    local h = failing(policy.intensity{max = 20, period = 10, ["then"] = "stop"}, 1)
    h:advance(100)
    assert.equal(100, #decisions(h, "root.w"))
  end)

  it("counts the same way in simulate and on plain tables", function()
    local c = policy.curve(policy.intensity{max = 20, period = 10}, 30)
    assert.equal(21, #c)
    assert.equal("escalate", c[21])
    local p = policy.intensity{max = 20, period = 10, ["then"] = "stop"}
    for i = 1, 20 do assert.equal(0, p{dn = "x", now = i * 0.1}) end
    assert.equal("stop", p{dn = "x", now = 2.1})
    assert.equal(0, p{dn = "y", now = 2.1}) -- another node
    assert.equal(0, p{dn = "x", now = 100}) -- long after
  end)

  it("is O(1) per decision: the window never grows", function()
    local p = policy.chain(policy.intensity{max = 1e9, period = 1}, policy.immediate)
    local h = failing(p, 0.001)
    h:advance(2)
    local n = #decisions(h, "root.w")
    assert.is_true(n >= 1999)
    assert.equal("NEW", h:state("root.w"))
  end)

  local bad = {
    {{max = -1, period = 1}, "'max'"},
    {{max = 0 / 0, period = 1}, "'max'"},
    {{max = "3", period = 1}, "'max'"},
    {{max = 3, period = 0}, "'period'"},
    {{max = 3, period = -5}, "'period'"},
    {{max = 3, period = math.huge}, "'period'"},
    {{max = 3}, "'period' is required"},
    {{period = 3}, "'max' is required"},
    {{max = 3, period = 1, ["then"] = "explode"}, "'then'"},
    {{max = 3, period = 1, bogus = 1}, "unknown option 'bogus'"},
  }
  for _, case in ipairs(bad) do
    it("refuses bad input naming it: " .. case[2], function()
      local ok, err = pcall(policy.intensity, case[1])
      assert.is_false(ok)
      assert.matches("arbor.policy.intensity", err, 1, true)
      assert.matches(case[2], err, 1, true)
    end)
  end
end)

describe("chain", function()
  it("lets the first policy that does not return nil decide", function()
    local p = policy.chain(function() end, function(ev) return ev.consecutive > 2 and "stop" or nil end,
      policy.constant(2))
    local h = failing(p, 1)
    h:advance(20)
    assert.same({2, 2, "stop"}, decisions(h, "root.w"))
  end)

  it("refuses what is not a policy, naming its position", function()
    local ok, err = pcall(policy.chain, policy.immediate, 5)
    assert.is_false(ok)
    assert.matches("argument #2", err, 1, true)
    assert.is_false(pcall(policy.chain))
  end)
end)

describe("transient", function()
  it("restarts after an error, not after a clean return without done", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("err", function(c) c:sleep(1) error("x") end,
        {policy = policy.transient(policy.constant(1))})
      ctx:run("ret", function(c) c:sleep(1) end,
        {policy = policy.transient(policy.constant(1))})
      idle(ctx)
    end)
    h:advance(5)
    assert.same({1, 1}, {table.unpack(decisions(h, "root.err"), 1, 2)})
    assert.same({"stop"}, decisions(h, "root.ret"))
    assert.equal("DEAD", h:state("root.ret"))
  end)
end)

describe("decaying", function()
  it("restarts at once until the decayed count passes the threshold, then pauses", function()
    local p = policy.decaying{threshold = 3, half_life = 10, pause = 15}
    local h = failing(p, 1)
    h:advance(30)
    -- counts 1, 1.93, 2.80, 3.61 -> pause; then the count starts over
    assert.same({0, 0, 0, 15, 0, 0, 0, 15}, {table.unpack(decisions(h, "root.w"), 1, 8)})
  end)

  it("forgets slow failures", function()
    local h = failing(policy.decaying{threshold = 2, half_life = 1, pause = 9}, 5)
    h:advance(100)
    for _, d in ipairs(decisions(h, "root.w")) do assert.equal(0, d) end
  end)

  it("refuses bad input naming it", function()
    local ok, err = pcall(policy.decaying, {half_life = 0})
    assert.is_false(ok)
    assert.matches("'half_life'", err, 1, true)
    ok, err = pcall(policy.decaying, {pause = -1})
    assert.matches("'pause'", err, 1, true)
  end)
end)

describe("exponential reset_after", function()
  it("keeps climbing across short HEALTHY spells and resets after a long one", function()
    local p = policy.exponential{initial = 1, multiplier = 2, max = 100, jitter = 0, reset_after = 10}
    local h = new()
    h:start(function(ctx)
      ctx:run("w", function(c)
        c:signal("healthy")
        c:sleep(c.incarnation == 4 and 20 or 2)
        error("x")
      end, {policy = p})
      idle(ctx)
    end)
    h:advance(200)
    -- healthy 2 s each: 1, 2, 4; incarnation 4 healthy 20 s: reset to 1
    assert.same({1, 2, 4, 1, 2, 4}, {table.unpack(decisions(h, "root.w"), 1, 6)})
  end)

  it("refuses a negative reset_after", function()
    local ok, err = pcall(policy.exponential, {reset_after = -1})
    assert.is_false(ok)
    assert.matches("'reset_after'", err, 1, true)
  end)
end)

describe("simulate and curve", function()
  it("curve gives the first n delays of a node failing at once", function()
    assert.same({1, 2, 4, 8, 10}, policy.curve(policy.exponential{initial = 1,
      multiplier = 2, max = 10, jitter = 0}, 5))
    assert.same({0, 0, "escalate"}, policy.curve(policy.intensity{max = 2, period = 5}, 10))
  end)

  it("is deterministic with jitter (seeded)", function()
    local p = policy.exponential()
    assert.same(policy.curve(p, 8), policy.curve(p, 8))
    assert.are_not.same(policy.curve(p, 8, {seed = 1}), policy.curve(p, 8, {seed = 2}))
  end)

  it("draws the same jitter as a harness with the same seed", function()
    local p = policy.exponential()
    local h = failing(p, 1, {seed = 7})
    h:advance(30)
    local got = decisions(h, "root.w")
    local sim = policy.simulate(p, {uptimes = {1, 1, 1, 1, 1, 1}}, {seed = 7})
    for i = 1, 6 do assert.equal(got[i], sim[i].delay) end
    -- exact delays for a fixed seed
    local c = policy.curve(policy.exponential{initial = 1, multiplier = 2, jitter = 0.5}, 3, {seed = 1})
    assert.same(c, policy.curve(policy.exponential{initial = 1, multiplier = 2, jitter = 0.5}, 3, {seed = 1}))
    for i, d in ipairs(c) do
      assert.is_true(d >= 0.5 * 2 ^ (i - 1) and d <= 1.5 * 2 ^ (i - 1))
    end
  end)

  it("simulate takes failure times and returns decisions with their times", function()
    local r = policy.simulate(policy.chain(policy.intensity{max = 2, period = 10, ["then"] = "stop"},
      policy.constant(1)), {0, 5, 9, 30})
    assert.equal(3, #r)
    assert.same({0, 5, 9}, {r[1].time, r[2].time, r[3].time})
    assert.same({1, 1, "stop"}, {r[1].decision, r[2].decision, r[3].decision})
    assert.equal(6, r[2].restart_at)
  end)

  it("simulate takes uptimes, and healthy spells reset consecutive", function()
    local p = policy.exponential{initial = 1, multiplier = 2, jitter = 0}
    local r = policy.simulate(p, {uptimes = {1, 1, {uptime = 5, healthy = 4}, 1}})
    assert.same({1, 2, 1, 2}, {r[1].delay, r[2].delay, r[3].delay, r[4].delay})
    -- fails at 1, restarts at 2, fails at 3, restarts at 5, fails at 10 ...
    assert.same({1, 3, 10, 12}, {r[1].time, r[2].time, r[3].time, r[4].time})
  end)

  it("refuses bad traces and faulty policies, naming the failure", function()
    local ok, err = pcall(policy.simulate, policy.immediate, {3, 1})
    assert.is_false(ok)
    assert.matches("failure 2", err, 1, true)
    ok, err = pcall(policy.simulate, function() return "later" end, {1})
    assert.is_false(ok)
    assert.matches("failure 1: the policy returned later", err, 1, true)
    ok, err = pcall(policy.curve, policy.immediate, -1)
    assert.is_false(ok)
  end)

  it("plot draws a curve as text", function()
    local text = policy.plot(policy.exponential{initial = 1, multiplier = 2, max = 8, jitter = 0}, 4)
    assert.equal("  1 | #####                                    1.000s\n"
      .. "  2 | ##########                               2.000s\n"
      .. "  3 | ####################                     4.000s\n"
      .. "  4 | ######################################## 8.000s", text)
  end)
end)

describe("set_policy keeps the failure history", function()
  it("a new intensity limit counts the failures already seen (swapped mid-storm)", function()
    local h = failing(policy.intensity{max = 100, period = 60, ["then"] = "stop"}, 1)
    h:advance(5) -- 5 failures
    assert.equal(5, #decisions(h, "root.w"))
    h:node("root.w"):set_policy(policy.intensity{max = 5, period = 60, ["then"] = "stop"})
    h:advance(1) -- the 6th failure is the 6th within 60 s
    local d = decisions(h, "root.w")
    assert.equal("stop", d[#d])
    assert.equal(6, #d)
  end)

  it("and so does a large one, sharing the window of the same period", function()
    local h = failing(policy.intensity{max = 1000, period = 60, ["then"] = "stop"}, 1)
    h:advance(30)
    h:node("root.w"):set_policy(policy.intensity{max = 20, period = 60, ["then"] = "stop"})
    h:advance(1)
    local d = decisions(h, "root.w")
    assert.equal("stop", d[#d])
    assert.equal(31, #d)
  end)
end)
