-- Issue 15, point 3: ready_timeout (HEALTHY within S seconds of the start,
-- systemd's TimeoutStartSec) and the watchdog of Lua runnables (ctx:alive()
-- at least every S seconds once HEALTHY, systemd's WatchdogSec). A missed
-- deadline fails the node and its policy decides. On the virtual clock.
local core = require "arbor.core"
local support = require "support"
local new, idle = support.new, support.idle

after_each(support.close_all)

-- The DEAD events of dn: {time, reason}.
local function deaths(h, dn)
  local out = {}
  for _, ev in ipairs(h:events{dn = dn, kind = "state", to = "DEAD"}) do
    out[#out + 1] = {time = ev.time, reason = ev.reason}
  end
  return out
end

describe("ready_timeout", function()
  it("fails a node not HEALTHY within S seconds of its start", function()
    local seen = {}
    local h = new()
    h:start(function(ctx)
      ctx:run("w", function(c) c:wait() end, {ready_timeout = 5, policy = function(ev)
        seen[#seen + 1] = {err = ev.err, uptime = ev.uptime, consecutive = ev.consecutive}
        return 1
      end})
      idle(ctx)
    end)
    h:advance(4.9)
    assert.equal("NEW", h:state("root.w"))
    h:advance(0.1)
    assert.equal(1, #seen)
    assert.same({err = "not ready after 5 s", uptime = 5, consecutive = 1}, seen[1])
    local d = deaths(h, "root.w")
    assert.equal("not ready after 5 s", d[1].reason)
    assert.equal(5, d[1].time)
    -- restarted at 6 by the policy: the deadline is armed again
    h:advance(6)
    assert.equal(2, #seen)
    assert.equal(2, seen[2].consecutive)
    assert.equal(11, deaths(h, "root.w")[2].time)
  end)

  it("prints the seconds as written", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("half", function(c) c:wait() end, {ready_timeout = 0.5, policy = function() return "stop" end})
      ctx:run("ninety", function(c) c:wait() end, {ready_timeout = 90, policy = function() return "stop" end})
      idle(ctx)
    end)
    h:advance(100)
    assert.equal("not ready after 0.5 s", deaths(h, "root.half")[1].reason)
    assert.equal("not ready after 90 s", deaths(h, "root.ninety")[1].reason)
    assert.equal("not ready after 90 s", h:node("root.ninety").error)
  end)

  it("is disarmed once HEALTHY", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("w", function(c) c:sleep(3) c:signal("healthy") c:wait() end, {ready_timeout = 5})
      idle(ctx)
    end)
    h:advance(100)
    assert.equal("HEALTHY", h:state("root.w"))
    assert.same({}, deaths(h, "root.w"))
  end)

  it("is disarmed when the incarnation ends first", function()
    local n = 0
    local h = new()
    h:start(function(ctx)
      ctx:run("w", function(c)
        n = n + 1
        if n == 1 then c:sleep(1) error("early") end
        c:signal("healthy")
        c:wait()
      end, {ready_timeout = 5, policy = function() return 10 end})
      idle(ctx)
    end)
    h:advance(30)
    local d = deaths(h, "root.w")
    assert.equal(1, #d)
    assert.matches("early", d[1].reason)
    assert.equal("HEALTHY", h:state("root.w"))
  end)

  it("cancels the incarnation: its defers and <close> run, its children stop", function()
    local log = {}
    local h = new()
    h:start(function(ctx)
      ctx:run("w", function(c)
        c:defer(function() log[#log + 1] = "deferred" end)
        c:run("kid", idle)
        local ok, err = pcall(c.wait, c)
        log[#log + 1] = core.is_canceled(err) and "canceled" or tostring(err)
        error(err, 0)
      end, {ready_timeout = 2, policy = function() return "stop" end})
      idle(ctx)
    end)
    h:advance(3)
    assert.same({"canceled", "deferred"}, log)
    assert.equal("DEAD", h:state("root.w"))
    assert.equal("CANCELED", h:state("root.w.kid"))
    assert.equal("not ready after 2 s", h:node("root.w").error)
  end)

  it("does not fire while the node is being stopped", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("w", function(c)
        c:shield(function() c:sleep(10) end) -- slow to stop
      end, {ready_timeout = 2, shutdown = 20})
      ctx:sleep(1)
      ctx:signal("healthy")
      ctx:wait()
    end)
    h:advance(1.5)
    h:node("root.w"):stop()
    h:advance(20)
    assert.same({}, deaths(h, "root.w"))
  end)

  it("false means none (over arbor.exec's default)", function()
    local got
    local h = new()
    h:start(function(ctx)
      ctx:run("w", function(c)
        got = core.default_ready_timeout(c, 90)
        c:wait()
      end, {ready_timeout = false})
      idle(ctx)
    end)
    h:advance(200)
    assert.equal(0, got)
    assert.equal("NEW", h:state("root.w"))
  end)

  it("core.default_ready_timeout (arbor.exec's) arms it from the start", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("w", function(c)
        c:sleep(1)
        core.default_ready_timeout(c, 3)
        c:wait()
      end, {policy = function() return "stop" end})
      idle(ctx)
    end)
    h:advance(10)
    local d = deaths(h, "root.w")
    assert.equal(1, #d)
    assert.equal(3, d[1].time)
  end)

  it("core.extend_ready (EXTEND_TIMEOUT_USEC) moves the deadline later, never earlier", function()
    local got = {}
    local h = new()
    h:start(function(ctx)
      ctx:run("w", function(c)
        c:sleep(4)
        got[1] = core.extend_ready(c, 10) -- due at 14 instead of 5
        got[2] = core.extend_ready(c, 1)  -- 5 < 14: unchanged
        c:wait()
      end, {ready_timeout = 5, policy = function() return "stop" end})
      ctx:run("none", function(c) got[3] = core.extend_ready(c, 10) idle(c) end)
      idle(ctx)
    end)
    h:advance(13.9)
    assert.equal("NEW", h:state("root.w"))
    h:advance(0.1)
    assert.same({true, true, false}, got)
    assert.equal(14, deaths(h, "root.w")[1].time)
    assert.equal("not ready after 5 s", deaths(h, "root.w")[1].reason)
  end)

  it("rejects bad values, naming the option", function()
    local errs = {}
    local h = new()
    h:start(function(ctx)
      for _, v in ipairs{0, -1, "5", true, math.huge} do
        local ok, err = pcall(ctx.run, ctx, "w", idle, {ready_timeout = v})
        assert.is_false(ok)
        errs[#errs + 1] = err
      end
      idle(ctx)
    end)
    for _, err in ipairs(errs) do
      assert.matches("option 'ready_timeout' must be a finite number > 0 %(seconds%) or false", err)
    end
    assert.matches("got 0$", errs[1])
    assert.matches("got boolean$", errs[4])
  end)
end)

describe("watchdog (Lua runnables)", function()
  it("fails a HEALTHY node without ctx:alive() for S seconds", function()
    local h = new()
    local beats = 3
    h:start(function(ctx)
      ctx:run("w", function(c)
        c:signal("healthy")
        for _ = 1, beats do c:sleep(1.5) c:alive() end
        c:wait() -- hung: no more heartbeats
      end, {watchdog = 2, policy = function() return "stop" end})
      idle(ctx)
    end)
    h:advance(6.4)
    assert.equal("HEALTHY", h:state("root.w"))
    h:advance(0.1) -- last beat at 4.5: due at 6.5
    local d = deaths(h, "root.w")
    assert.equal(1, #d)
    assert.equal("watchdog timeout after 2 s", d[1].reason)
    assert.equal(6.5, d[1].time)
    assert.equal("watchdog timeout after 2 s", h:node("root.w").error)
  end)

  it("a node beating in time never fails", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("w", function(c)
        c:signal("healthy")
        while true do c:sleep(0.9) c:alive() end
      end, {watchdog = 1})
      idle(ctx)
    end)
    h:advance(1000)
    assert.same({}, deaths(h, "root.w"))
  end)

  it("starts at HEALTHY: a slow start is ready_timeout's business", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("w", function(c)
        c:sleep(10) -- no heartbeat while starting
        c:signal("healthy")
        c:sleep(0.5)
        c:alive()
        c:wait()
      end, {watchdog = 1, policy = function() return "stop" end})
      idle(ctx)
    end)
    h:advance(11.4)
    assert.same({}, deaths(h, "root.w"))
    h:advance(0.1)
    assert.equal(11.5, deaths(h, "root.w")[1].time)
  end)

  it("the policy decides, and the restarted node is watched again", function()
    local seen = {}
    local h = new()
    h:start(function(ctx)
      ctx:run("w", function(c) c:signal("healthy") c:wait() end, {watchdog = 0.5,
        policy = function(ev)
          seen[#seen + 1] = {err = ev.err, healthy = ev.healthy, consecutive = ev.consecutive}
          return 1
        end})
      idle(ctx)
    end)
    h:advance(3.1) -- dies at 0.5, 2.0 (restarted at 1.5), 3.5 ...
    assert.same({{err = "watchdog timeout after 0.5 s", healthy = 0.5, consecutive = 1},
      {err = "watchdog timeout after 0.5 s", healthy = 0.5, consecutive = 2}}, seen)
  end)

  it("stops after DONE", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("w", function(c)
        c:signal("healthy")
        c:signal("done")
        c:sleep(10)
      end, {watchdog = 1})
      idle(ctx)
    end)
    h:advance(20)
    assert.same({}, deaths(h, "root.w"))
    assert.equal("DONE", h:state("root.w"))
  end)

  it("ctx:alive() without a watchdog is harmless", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("w", function(c)
        c:alive()
        c:signal("healthy")
        for _ = 1, 10 do c:alive() c:sleep(1) end
        c:signal("done")
      end)
      idle(ctx)
    end)
    h:advance(20)
    assert.equal("DONE", h:state("root.w"))
  end)

  it("core.fail_now fails the node at once with the reason (WATCHDOG=trigger)", function()
    local got, after
    local h = new()
    h:start(function(ctx)
      ctx:run("w", function(c)
        c:signal("healthy")
        c:sleep(1)
        got = core.fail_now(c, "watchdog trigger")
        after = {core.fail_now(c, "again")}
        c:sleep(1) -- raises the cancellation
        error("not reached")
      end, {policy = function() return "stop" end})
      idle(ctx)
    end)
    h:advance(5)
    assert.is_true(got)
    assert.same({false}, after)
    local d = deaths(h, "root.w")
    assert.equal(1, #d)
    assert.equal("watchdog trigger", d[1].reason)
    assert.equal("watchdog trigger", h:node("root.w").error)
  end)

  it("core.default_watchdog (arbor.exec's) sets it unless ctx:run gave it", function()
    local got = {}
    local h = new()
    h:start(function(ctx)
      ctx:run("given", function(c) got.given = core.default_watchdog(c, 7) idle(c) end,
        {watchdog = 2})
      ctx:run("unset", function(c)
        got.before = core.default_watchdog(c)
        c:signal("healthy")
        got.unset = core.default_watchdog(c, 3) -- armed at once: HEALTHY
        c:wait()
      end, {policy = function() return "stop" end})
      idle(ctx)
    end)
    h:advance(10)
    assert.same({given = 2, before = 0, unset = 3}, got)
    assert.equal(3, deaths(h, "root.unset")[1].time)
    assert.equal(2, deaths(h, "root.given")[1].time)
  end)
end)
