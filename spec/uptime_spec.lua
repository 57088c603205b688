-- Issue 15, point 1: min_uptime. A node counts as up (its failure streak,
-- `consecutive`, starts again) only once it stayed HEALTHY for min_uptime
-- seconds (default 1, supervisord's startsecs), so a crash loop backs off
-- under the default policy. On the virtual clock.
local policy = require "arbor.policy"
local support = require "support"
local new, idle = support.new, support.idle

after_each(support.close_all)

-- The delays of dn's restart decisions, in order.
local function delays(h, dn)
  local out = {}
  for _, ev in ipairs(h:events{dn = dn, kind = "policy"}) do
    if ev.delay then out[#out + 1] = ev.delay end
  end
  return out
end

-- A policy recording each event's consecutive, uptime and healthy, then
-- deciding as `p` (default: restart at once).
local function recorder(p)
  local seen = {}
  return function(ev)
    seen[#seen + 1] = {consecutive = ev.consecutive, uptime = ev.uptime, healthy = ev.healthy}
    if p then return p(ev) end
    return 0
  end, seen
end

local function column(seen, k)
  local out = {}
  for i, s in ipairs(seen) do out[i] = s[k] end
  return out
end

describe("min_uptime", function()
  it("a crash loop's delays grow to the cap under the default policy", function()
    local h = new()
    h:start(function(ctx)
      -- HEALTHY at once, dies at once: the issue's `sh -c 'exit 1'`
      ctx:run("w", function(c) c:signal("healthy") error("exit 1") end)
      idle(ctx)
    end)
    h:advance(1200)
    local d = delays(h, "root.w")
    assert.is_true(#d >= 20, "restarts: " .. #d)
    -- exponential(): initial 0.5 * 1.5^(n-1), capped at 60, jitter +-50%
    for n = 1, #d do
      local base = math.min(60, 0.5 * 1.5 ^ (n - 1))
      assert.is_true(d[n] >= base * 0.5 - 1e-9 and d[n] <= base * 1.5 + 1e-9,
        string.format("delay %d = %g, want %g +-50%%", n, d[n], base))
    end
    -- the cap is reached: the last delays are 60 s +-50%
    assert.is_true(d[#d] >= 30, "last delay " .. d[#d])
    assert.equal(#d, h:node("root.w").consecutive)
  end)

  it("the streak counts every quick failure, HEALTHY or not", function()
    local p, seen = recorder()
    local h = new()
    h:start(function(ctx)
      ctx:run("w", function(c)
        c:signal("healthy")
        c:sleep(0.5) -- HEALTHY for 0.5 s < 1 s
        error("boom")
      end, {policy = p})
      idle(ctx)
    end)
    h:advance(2.1) -- failures at 0.5, 1.0, 1.5, 2.0
    assert.same({1, 2, 3, 4}, column(seen, "consecutive"))
    assert.same({0.5, 0.5, 0.5, 0.5}, column(seen, "healthy"))
    assert.same({0.5, 0.5, 0.5, 0.5}, column(seen, "uptime"))
  end)

  it("a node that stays up for min_uptime starts its streak again", function()
    local p, seen = recorder(function() return 0 end)
    local n = 0
    local h = new()
    h:start(function(ctx)
      ctx:run("w", function(c)
        n = n + 1
        c:signal("healthy")
        -- three quick failures, then one incarnation up 1 s, then quick again
        c:sleep(n == 4 and 1 or 0.25)
        error("boom")
      end, {policy = p})
      idle(ctx)
    end)
    h:advance(2.5) -- failures at 0.25, 0.5, 0.75, 1.75, 2.0, 2.25, 2.5
    assert.same({1, 2, 3, 1, 2, 3, 4}, column(seen, "consecutive"))
    assert.same({0.25, 0.25, 0.25, 1, 0.25, 0.25, 0.25}, column(seen, "healthy"))
  end)

  it("resets the delays of the default policy after an incarnation up long enough", function()
    local n = 0
    local h = new()
    h:start(function(ctx)
      ctx:run("w", function(c)
        n = n + 1
        c:signal("healthy")
        if n == 6 then c:sleep(5) end -- up 5 s: the streak starts again
        error("boom")
      end)
      idle(ctx)
    end)
    h:advance(300)
    local d = delays(h, "root.w")
    assert.is_true(#d >= 8)
    -- the 5th delay is the 5th of a streak (0.5 * 1.5^4 = 2.53 +-50%); the
    -- 6th, after the incarnation that was up, the first again (0.5 +-50%)
    assert.is_true(d[5] >= 1.26, "delay 5 = " .. d[5])
    assert.is_true(d[6] <= 0.75 + 1e-9, "delay 6 = " .. d[6])
  end)

  it("min_uptime = S sets the time to stay up; 0 resets at every HEALTHY", function()
    local p3, seen3 = recorder()
    local p0, seen0 = recorder()
    local h = new()
    h:start(function(ctx)
      ctx:run("slow", function(c) c:signal("healthy") c:sleep(2) error("x") end,
        {policy = p3, min_uptime = 3})
      ctx:run("zero", function(c) c:signal("healthy") error("x") end,
        {policy = function(ev) p0(ev) return 1 end, min_uptime = 0})
      idle(ctx)
    end)
    h:advance(6.5)
    assert.same({1, 2, 3}, column(seen3, "consecutive"))
    for _, c in ipairs(column(seen0, "consecutive")) do assert.equal(1, c) end
    assert.is_true(#seen0 >= 6)
  end)

  it("a node never HEALTHY never resets, however long it ran", function()
    local p, seen = recorder()
    local h = new()
    h:start(function(ctx)
      ctx:run("w", function(c) c:sleep(10) error("x") end, {policy = p})
      idle(ctx)
    end)
    h:advance(30)
    assert.same({1, 2, 3}, column(seen, "consecutive"))
    assert.same({0, 0, 0}, column(seen, "healthy"))
  end)

  it("an incarnation up long enough and then canceled resets the streak", function()
    local p, seen = recorder(function() return 0 end)
    local n = 0
    local h = new()
    h:start(function(ctx)
      ctx:run("w", function(c)
        n = n + 1
        c:signal("healthy")
        if n <= 2 then error("quick") end
        c:wait() -- the third stays up, and is restarted by hand at 10
        error("never")
      end, {policy = p})
      idle(ctx)
    end)
    h:advance(10)
    assert.same({1, 2}, column(seen, "consecutive"))
    assert.equal(2, h:node("root.w").consecutive)
    h:node("root.w"):restart()
    h:settle()
    -- the canceled incarnation was up 10 s: its end starts the streak again
    assert.equal(0, h:node("root.w").consecutive)
  end)

  it("a group's options give min_uptime to every member", function()
    local pa, seena = recorder()
    local h = new()
    h:start(function(ctx)
      ctx:group({
        a = function(c) c:signal("healthy") c:sleep(1) error("x") end,
        b = idle,
      }, {strategy = "one_for_one", policy = pa, min_uptime = 0.5})
      idle(ctx)
    end)
    h:advance(3.5)
    for _, c in ipairs(column(seena, "consecutive")) do assert.equal(1, c) end
    assert.equal(3, #seena)
  end)

  it("rejects a bad min_uptime, naming it", function()
    local h = new()
    local errs = {}
    h:start(function(ctx)
      for _, v in ipairs{-1, "1", 0 / 0, math.huge} do
        local ok, err = pcall(ctx.run, ctx, "w", idle, {min_uptime = v})
        assert.is_false(ok)
        errs[#errs + 1] = err
      end
      idle(ctx)
    end)
    assert.equal(4, #errs)
    for _, err in ipairs(errs) do
      assert.matches("option 'min_uptime' must be a finite number >= 0 %(seconds%)", err)
    end
    assert.matches("got %-1", errs[1])
    assert.matches("got string", errs[2])
  end)

  it("simulate counts a failure after less than min_uptime HEALTHY in the streak", function()
    local seen = {}
    local p = function(ev) seen[#seen + 1] = ev.consecutive return 0 end
    policy.simulate(p, {uptimes = {{uptime = 1, healthy = 0.5}, {uptime = 1, healthy = 0.5},
      {uptime = 2, healthy = 1}, {uptime = 1, healthy = 0.2}}})
    assert.same({1, 2, 1, 2}, seen)
    seen = {}
    policy.simulate(p, {uptimes = {{uptime = 1, healthy = 0.5}, {uptime = 1, healthy = 0.5}}},
      {min_uptime = 0.5})
    assert.same({1, 1}, seen)
  end)

  it("core.default_min_uptime (arbor.exec's) sets the node's unless ctx:run gave it", function()
    local core = require "arbor.core"
    local got = {}
    local h = new()
    h:start(function(ctx)
      ctx:run("given", function(c)
        got.given = core.default_min_uptime(c, 7)
        idle(c)
      end, {min_uptime = 2})
      ctx:run("unset", function(c)
        got.before = core.default_min_uptime(c)
        got.unset = core.default_min_uptime(c, 7)
        idle(c)
      end)
      idle(ctx)
    end)
    assert.equal(2, got.given)
    assert.equal(1, got.before)
    assert.equal(7, got.unset)
  end)

  it("a real program that exits at once backs off under the defaults (arbor.exec)", function()
    local arbor = require "arbor"
    local seen = {}
    local default = policy.exponential()
    support.scenario(function(ctx)
      ctx:run("crash", arbor.exec{"sh", "-c", "exit 1"}, {policy = function(ev)
        seen[#seen + 1] = ev.consecutive
        return default(ev)
      end})
      ctx:sleep(2)
    end)
    -- HEALTHY at spawn, dead within a second: every failure is in the streak
    assert.is_true(#seen >= 3, "failures: " .. #seen)
    for i, c in ipairs(seen) do assert.equal(i, c) end
  end)
end)
