-- Restarts (T8), event-driven decisions (T9), the root (T11) and events
-- (T14). All on the virtual clock.
local testing = require "arbor.testing"
local arbor = require "arbor"
local policy = require "arbor.policy"

local support = require "support"
local new = support.new
local idle = support.idle
local transitions = support.transitions

after_each(support.close_all)

-- A runnable that becomes healthy, then dies after `after` seconds.
local function dies_after(after, msg)
  return function(c)
    c:signal("healthy")
    c:sleep(after)
    error(msg or "died", 0)
  end
end

describe("T8 restarts", function()
  it("restarts a DEAD leaf after the policy delay, DEAD meanwhile", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("w", dies_after(1), {policy = policy.constant(10)})
      idle(ctx)
    end)
    h:advance(1)
    local w = h:node("root.w")
    assert.equal("DEAD", w.state)
    assert.equal(11, h.engine:node("root.w").restart_at)
    h:advance(9.5)
    assert.equal("DEAD", w.state)
    assert.equal(1, w.incarnation)
    assert.equal(0, w.restarts)
    h:advance(0.5)
    assert.equal(2, w.incarnation)
    assert.equal(1, w.restarts)
    assert.equal("HEALTHY", w.state)
    local starts = h:events{dn = "root.w", from = "DEAD", to = "NEW"}
    assert.equal(1, #starts)
    assert.equal(11, starts[1].time)
    assert.equal("restart", starts[1].reason)
    assert.equal(2, starts[1].incarnation)
  end)

  it("restarts a CANCELED node with delay 0, without asking the policy", function()
    local calls = 0
    local h = new()
    h:start(function(ctx)
      ctx:run("w", idle, {policy = function() calls = calls + 1 return 50 end})
      idle(ctx)
    end)
    h:advance(3)
    h:node("root.w"):cancel()
    h:settle()
    assert.equal(2, h:node("root.w").incarnation)
    assert.equal(3, h:events{dn = "root.w", from = "CANCELED", to = "NEW"}[1].time)
    assert.equal(0, calls)
  end)

  it("restarts a DONE node whose context was canceled with delay 0", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("w", function(c)
        c:signal("healthy")
        c:signal("done")
        pcall(c.wait, c)
      end)
      idle(ctx)
    end)
    h:advance(2)
    h:node("root.w"):cancel()
    h:settle()
    assert.equal(2, h:node("root.w").incarnation)
    assert.same({"NEW>NEW", "NEW>HEALTHY", "HEALTHY>DONE", "DONE>NEW", "NEW>HEALTHY",
      "HEALTHY>DONE"}, transitions(h, "root.w"))
  end)

  it("does not restart a DONE node whose context is not canceled", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("w", function(c) c:signal("healthy") c:signal("done") end)
      idle(ctx)
    end)
    h:advance(1000)
    assert.equal("DONE", h:state("root.w"))
    assert.equal(1, h:node("root.w").incarnation)
  end)

  it("restarts a node with children only after its whole subtree exited", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("p", function(p)
        p:run("slow", function(c)
          c:signal("healthy")
          pcall(c.wait, c)
          c:shield(function() c:sleep(3) end) -- cleanup takes 3s
        end)
        p:run("fast", idle)
        p:signal("healthy")
        p:sleep(1)
        error("p died")
      end, {policy = policy.immediate})
      idle(ctx)
    end)
    h:advance(1)
    assert.equal("DEAD", h:state("root.p"))
    assert.is_true(h:node("root.p.slow").running)
    h:advance(2.9)
    assert.equal("DEAD", h:state("root.p"))
    assert.equal(1, h:node("root.p").incarnation)
    h:advance(0.1)
    assert.equal(2, h:node("root.p").incarnation)
    assert.equal(4, h:events{dn = "root.p", from = "DEAD", to = "NEW"}[1].time)
  end)

  it("restarts only the topmost node (the largest subtree)", function()
    local calls = {}
    local function spy(name, decision)
      return function()
        calls[#calls + 1] = name
        return decision
      end
    end
    local h = new()
    h:start(function(ctx)
      ctx:run("p", function(p)
        p:run("c", function(c)
          c:signal("healthy")
          pcall(c.wait, c)
          error("c failed while stopping") -- c ends DEAD as well
        end, {policy = spy("c", 0)})
        p:signal("healthy")
        p:sleep(1)
        error("p died")
      end, {policy = spy("p", 0)})
      idle(ctx)
    end)
    h:advance(1)
    -- both are DEAD-ended; only p was asked and restarted, c came back as a
    -- fresh child of p's new incarnation
    assert.same({"p"}, calls)
    assert.equal(2, h:node("root.p").incarnation)
    assert.equal(1, h:node("root.p.c").incarnation)
    assert.equal(0, h:node("root.p.c").restarts)
    assert.equal("HEALTHY", h:state("root.p.c"))
  end)

  it("cancels a pending delayed restart when the parent is canceled", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("p", function(p)
        p:run("c", dies_after(1, "c died"), {policy = policy.constant(100)})
        idle(p)
      end, {policy = policy.never})
      idle(ctx)
    end)
    h:advance(1)
    assert.equal("DEAD", h:state("root.p.c"))
    assert.equal(101, h.engine:node("root.p.c").restart_at)
    h:node("root.p"):stop()
    h:settle()
    assert.equal("CANCELED", h:state("root.p.c"))
    assert.equal(1, #h:events{dn = "root.p.c", from = "DEAD", to = "CANCELED"})
    assert.is_nil(h.engine:node("root.p.c").restart_at)
    h:advance(1000)
    assert.equal("CANCELED", h:state("root.p.c"))
    assert.equal(1, h:node("root.p.c").incarnation)
    assert.is_nil(h.engine:next_timer())
  end)

  it("restarts nothing under a canceled parent", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("p", function(p)
        p:group{a = idle, b = idle}
        idle(p)
      end)
      idle(ctx)
    end)
    h:node("root.p"):stop()
    h:settle()
    h:advance(1000)
    for _, dn in ipairs{"root.p", "root.p.a", "root.p.b"} do
      assert.equal("CANCELED", h:state(dn))
      assert.equal(1, h:node(dn).incarnation)
    end
  end)

  it("a pending restart under a parent that dies is discarded with it", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("p", function(p)
        p:run("c", function(c)
          if c.incarnation == 1 then return dies_after(1)(c) end
          idle(c)
        end, {policy = policy.constant(100)})
        p:signal("healthy")
        p:sleep(5)
        error("p died")
      end, {policy = policy.constant(1)})
      idle(ctx)
    end)
    h:advance(1)
    assert.equal("DEAD", h:state("root.p.c"))
    h:advance(5) -- p dies at 5, restarts at 6
    assert.equal(2, h:node("root.p").incarnation)
    assert.equal(1, h:node("root.p.c").incarnation)
    assert.equal("HEALTHY", h:state("root.p.c"))
    h:advance(100)
    -- the old c's restart at 101 never happened
    assert.equal(1, h:node("root.p.c").incarnation)
  end)

  it("makes children created under a canceled parent CANCELED, never run", function()
    local ran = false
    local h = new()
    h:start(function(ctx)
      ctx:run("p", function(p)
        p:signal("healthy")
        pcall(p.wait, p)
        p:run("late", function() ran = true end)
        p:group{g1 = function() ran = true end}
        p:shield(function() p:sleep(1) end)
      end)
      idle(ctx)
    end)
    h:node("root.p"):stop()
    h:settle()
    assert.equal("CANCELED", h:state("root.p.late"))
    assert.equal("CANCELED", h:state("root.p.g1"))
    local ev = h:events{dn = "root.p.late"}
    assert.equal(1, #ev)
    assert.equal("NEW", ev[1].from)
    assert.equal("CANCELED", ev[1].to)
    assert.equal("parent canceled", ev[1].reason)
    h:advance(10)
    assert.is_false(ran)
    assert.equal(0, h:node("root.p.late").incarnation)
    assert.equal("CANCELED", h:state("root.p"))
  end)

  it("makes children queued but not yet run CANCELED when the parent dies", function()
    local ran = false
    local h = new()
    h:start(function(ctx)
      ctx:run("p", function(p)
        p:run("queued", function() ran = true end)
        error("p died before its child ran")
      end, {policy = policy.never})
      idle(ctx)
    end)
    assert.is_false(ran)
    assert.equal("DEAD", h:state("root.p"))
    assert.equal("CANCELED", h:state("root.p.queued"))
  end)
end)

describe("T8 restarts within a group", function()
  it("keeps a member's own backoff when a sibling dies meanwhile", function()
    local h = new()
    local a_runs = 0
    h:start(function(ctx)
      ctx:group({
        a = function(c)
          a_runs = a_runs + 1
          c:signal("healthy")
          c:sleep(3)
          error("a failed", 0)
        end,
        b = function(c) c:signal("healthy") c:sleep(1) error("b failed", 0) end,
      }, {policy = policy.constant(10)})
      idle(ctx)
    end)
    h:advance(1)   -- b dies: a is canceled and restarts at once (first member)
    assert.equal("DEAD", h:state("root.b"))
    assert.equal(11, h:node("root.b").restart_at)
    assert.equal(2, a_runs)
    h:advance(3)   -- a dies at t=4 while b waits for its restart at t=11
    assert.equal("DEAD", h:state("root.a"))
    assert.equal("DEAD", h:state("root.b"))
    assert.equal(11, h:node("root.b").restart_at)
    h:advance(6.5) -- t=10.5: b still waits
    assert.equal("DEAD", h:state("root.b"))
    h:advance(0.5) -- t=11: b's own schedule is due, but members start in
    -- order: it waits for a (restarting at 14)
    assert.equal("DEAD", h:state("root.b"))
    assert.equal("root.a", h:node("root.b").waiting_member)
    h:advance(3)
    assert.equal("HEALTHY", h:state("root.a"))
    assert.equal("HEALTHY", h:state("root.b"))
    assert.equal(2, h:node("root.b").incarnation)
  end)
end)

describe("T9 event driven", function()
  it("arms no timer in an idle tree", function()
    local h = new()
    h:start(function(ctx)
      ctx:group{a = idle, b = idle}
      ctx:run("c", function(c)
        c:run("d", idle)
        idle(c)
      end)
      idle(ctx)
    end)
    assert.is_nil(h.engine:next_timer())
    h:advance(3600)
    assert.is_nil(h.engine:next_timer())
    assert.equal(1, h:node("root.c.d").incarnation)
  end)

  it("arms exactly the timers that are needed", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("s", function(c) c:signal("healthy") c:sleep(7) c:wait() end)
      idle(ctx)
    end)
    assert.equal(7, h.engine:next_timer())
    h:advance(7)
    assert.is_nil(h.engine:next_timer())
  end)

  it("decides the restart in the same settle as the exit", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("now", dies_after(2), {policy = policy.immediate})
      ctx:run("later", dies_after(2), {policy = policy.constant(5)})
      idle(ctx)
    end)
    h:advance(2)
    -- immediate: already running again at the time of the exit
    assert.equal(2, h:node("root.now").incarnation)
    assert.equal(2, h:events{dn = "root.now", from = "DEAD", to = "NEW"}[1].time)
    -- delayed: decided at the exit, a timer is armed for the restart
    local dec = h:events{dn = "root.later", kind = "policy"}
    assert.equal(1, #dec)
    assert.equal(2, dec[1].time)
    assert.equal(5, dec[1].delay)
    assert.matches("^restart in 5", dec[1].reason)
    assert.equal(7, h.engine:node("root.later").restart_at)
    assert.is_truthy(h.engine:next_timer())
  end)
end)

describe("T11 the root", function()
  it("ends DONE and its children keep running", function()
    local ticks = 0
    local h = new()
    h:start(function(ctx)
      ctx:run("ticker", function(c)
        c:signal("healthy")
        while true do
          c:sleep(1)
          ticks = ticks + 1
        end
      end)
      ctx:signal("healthy")
      ctx:signal("done")
    end)
    assert.equal("DONE", h:state("root"))
    assert.is_false(h:node("root").running)
    h:advance(10)
    assert.equal(10, ticks)
    assert.equal("HEALTHY", h:state("root.ticker"))
    assert.equal(1, h:node("root.ticker").incarnation)
    assert.is_false((h.engine:finished()))
  end)

  it("ends the tree when the root's policy says stop", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("kid", idle)
      ctx:signal("healthy")
      ctx:sleep(1)
      error("root failed", 0)
    end, {policy = policy.never})
    assert.is_false((h.engine:finished()))
    h:advance(1)
    local finished, gave_up, reason = h.engine:finished()
    assert.is_true(finished)
    assert.is_true(gave_up)
    assert.matches("root gave up (stop): root failed", reason, 1, true)
    assert.equal("DEAD", h:state("root"))
    assert.equal("CANCELED", h:state("root.kid"))
    h:advance(1000)
    assert.equal(1, h:node("root").incarnation)
  end)

  it("ends the tree when the root's policy escalates", function()
    local h = new()
    h:start(function(ctx)
      ctx:signal("healthy")
      ctx:sleep(1)
      error("root failed", 0)
    end, {policy = function() return "escalate" end})
    h:advance(1)
    local finished, gave_up, reason = h.engine:finished()
    assert.is_true(finished)
    assert.is_true(gave_up)
    assert.matches("root gave up (escalate): root failed", reason, 1, true)
  end)

  it("ends the tree when a child's escalation reaches a root that gives up", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("kid", dies_after(1, "kid failed"), {policy = function() return "escalate" end})
      idle(ctx)
    end, {policy = policy.never})
    h:advance(1)
    local finished, gave_up, reason = h.engine:finished()
    assert.is_true(finished)
    assert.is_true(gave_up)
    assert.matches("child root.kid escalated: kid failed", reason, 1, true)
  end)

  it("restarts a root whose policy returns a delay", function()
    local h = new()
    h:start(function(ctx)
      if ctx.incarnation == 1 then return dies_after(1)(ctx) end
      idle(ctx)
    end, {policy = policy.constant(2)})
    h:advance(3)
    assert.equal(2, h:node("root").incarnation)
    assert.equal("HEALTHY", h:state("root"))
    assert.is_false((h.engine:finished()))
  end)
end)

describe("T14 events", function()
  it("records every state change with seq, time, dn, incarnation, from, to, reason, kind", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("w", dies_after(2, "w failed"), {policy = policy.constant(1)})
      idle(ctx)
    end)
    h:advance(3)
    local evs = h:events()
    for i, ev in ipairs(evs) do
      assert.equal(i, ev.seq)
      if i > 1 then assert.is_true(ev.time >= evs[i - 1].time) end
      assert.is_string(ev.dn)
      assert.is_number(ev.incarnation)
      assert.is_string(ev.kind)
    end
    local w = {}
    for _, ev in ipairs(evs) do
      if ev.dn == "root.w" then
        local reason = ev.reason
        if ev.kind == "policy" then
          -- the reason shows the delay ("restart in 1s", "... 1.0s")
          assert.matches("^restart in 1%.?0*s$", reason)
          assert.equal(1, ev.delay)
          reason = "restart"
        end
        w[#w + 1] = {ev.time, ev.incarnation, ev.kind, ev.from, ev.to, reason}
      end
    end
    assert.same({
      {0, 1, "state", "NEW", "NEW", "start"},
      {0, 1, "state", "NEW", "HEALTHY", nil},
      {2, 1, "state", "HEALTHY", "DEAD", "w failed"},
      {2, 1, "policy", nil, nil, "restart"},
      {3, 2, "state", "DEAD", "NEW", "restart"},
      {3, 2, "state", "NEW", "HEALTHY", nil},
    }, w)
  end)

  it("keeps a bounded ring of the latest events", function()
    local h = new{seed = 1, ring = 10}
    h:start(function(ctx)
      ctx:run("w", dies_after(1), {policy = policy.immediate})
      idle(ctx)
    end)
    h:advance(20)
    local evs = h:events()
    assert.equal(10, #evs)
    local last = evs[#evs].seq
    assert.is_true(last > 40)
    for i, ev in ipairs(evs) do
      assert.equal(last - 10 + i, ev.seq)
    end
    assert.same({evs[9], evs[10]}, h.engine:events(2))
  end)

  it("records policy decisions as kind 'policy'", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("a", dies_after(1), {policy = policy.constant(4)})
      ctx:run("b", dies_after(1), {policy = policy.never})
      ctx:run("c", function(c)
        c:run("d", dies_after(1), {policy = function() return "escalate" end})
        idle(c)
      end, {policy = policy.never})
      idle(ctx)
    end)
    h:advance(1)
    local reasons = {}
    local policy_events = h:events{kind = "policy"}
    assert.equal(4, #policy_events)
    for _, ev in ipairs(policy_events) do
      assert.is_nil(ev.from)
      assert.is_nil(ev.to)
      reasons[ev.dn] = ev.delay or ev.reason
    end
    assert.same({["root.a"] = 4, ["root.b"] = "stop", ["root.c"] = "stop",
      ["root.c.d"] = "escalate"}, reasons)
  end)

  it("removes a subscriber that raises; the tree keeps running", function()
    local h = new()
    local calls, good = 0, 0
    h:on_event(function()
      calls = calls + 1
      error("subscriber broke")
    end)
    h:on_event(function() good = good + 1 end)
    h:start(function(ctx)
      ctx:run("w", dies_after(1), {policy = policy.immediate})
      idle(ctx)
    end)
    h:advance(5)
    assert.equal(1, calls)
    assert.is_true(good >= 10)
    assert.equal(#h:events(), good)
    assert.equal(6, h:node("root.w").incarnation)
    local logs = h:logs("root")
    assert.is_true(#logs >= 1)
    assert.matches("on_event subscriber removed: .*subscriber broke", logs[1].line)
  end)

  it("removes a subscriber that runs away; the tree keeps running", function()
    local h = new()
    local calls = 0
    h:on_event(function()
      calls = calls + 1
      while true do end
    end)
    h:start(function(ctx)
      ctx:run("w", dies_after(1), {policy = policy.immediate})
      idle(ctx)
    end)
    h:advance(2)
    assert.equal(1, calls)
    assert.equal(3, h:node("root.w").incarnation)
    assert.matches("time budget exceeded", h:logs("root")[1].line, 1, true)
  end)

  it("delivers every event to a subscriber, even a burst larger than the ring", function()
    -- deliver_events (src/engine/drain.c) runs after each resume and skips the
    -- events that already left the ring: a ctx:group of 20 members emits 20
    -- events in one resume, and a subscriber of a ring of 10 misses 10.
    local h = new{seed = 1, ring = 10}
    local seen = {}
    h:on_event(function(ev) seen[#seen + 1] = ev.seq end)
    h:start(function(ctx)
      local members = {}
      for i = 1, 20 do members[("m%02d"):format(i)] = idle end
      ctx:group(members)
      idle(ctx)
    end)
    local last = h:events()[10].seq
    assert.equal(last, #seen)
    for i = 1, last do assert.equal(i, seen[i]) end
  end)

  it("serves arbor.events and arbor.on_event inside a runnable", function()
    local got, seen, unsubscribed_seen = nil, {}, nil
    local h = new()
    h:start(function(ctx)
      ctx:signal("healthy")
      got = arbor.events()
      local last2 = arbor.events(1)
      assert(#last2 == 1 and last2[1].seq == got[#got].seq)
      local unsubscribe = arbor.on_event(function(ev)
        if ev.kind == "coordinator" then return end
        seen[#seen + 1] = ev.dn .. " " .. (ev.to or ev.kind)
      end)
      ctx:run("w", idle)
      ctx:sleep(1)
      unsubscribe()
      unsubscribed_seen = #seen
      ctx:run("x", idle)
      ctx:wait()
    end)
    h:advance(1)
    assert.same({"root", "root"}, {got[1].dn, got[2].dn})
    assert.equal("HEALTHY", got[2].to)
    assert.same({"root.w NEW", "root.w HEALTHY"}, seen)
    assert.equal(2, unsubscribed_seen)
    assert.equal("HEALTHY", h:state("root.x"))
    local ok, err = pcall(arbor.on_event, "nope")
    assert.is_false(ok)
    assert.matches("want a function", err, 1, true)
  end)
end)
