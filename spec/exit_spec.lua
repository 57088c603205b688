-- How incarnations end: exit classification (T5), death spreading (T6),
-- cancellation, shields and forced closes (T7), ordered stop (T12),
-- channels and injected failures. All on the virtual clock.
local testing = require "arbor.testing"
local arbor = require "arbor"
local policy = require "arbor.policy"

local support = require "support"
local new = support.new
local idle = support.idle
local transitions = support.transitions

after_each(support.close_all)

-- A tree whose root runs one child "w" with fn (policy never by default,
-- so that the exit state stays visible).
local function with_child(fn, opts)
  local h = new()
  h:start(function(ctx)
    ctx:run("w", fn, opts or {policy = policy.never})
    idle(ctx)
  end)
  return h
end

-- A runnable that becomes HEALTHY, then appends ctx[field] to order when
-- it is told to stop, and leaves with the cancellation error.
local function records_cancellation(order, field)
  return function(c)
    c:signal("healthy")
    local _, err = pcall(c.wait, c)
    order[#order + 1] = c[field]
    error(err, 0)
  end
end

describe("T5 exit classification", function()
  it("returned after done: DONE", function()
    local h = with_child(function(c)
      c:signal("healthy")
      c:signal("done")
    end)
    local w = h:node("root.w")
    assert.equal("DONE", w.state)
    assert.is_nil(w.error)
    assert.is_false(w.running)
    h:advance(100)
    assert.equal("DONE", w.state)
    assert.equal(1, w.incarnation)
  end)

  it("returned after done, canceled meanwhile: DONE", function()
    local h = with_child(function(c)
      c:signal("healthy")
      c:signal("done")
      local ok = pcall(c.wait, c)
      assert(not ok)
    end)
    local w = h:node("root.w")
    assert.equal("DONE", w.state)
    assert.is_true(w.running)
    w:stop() -- cancel and hold, so no restart hides the exit state
    h:settle()
    assert.equal("DONE", w.state)
    assert.is_false(w.running)
    assert.same({"NEW>NEW", "NEW>HEALTHY", "HEALTHY>DONE"}, transitions(h, "root.w"))
  end)

  it("raised the cancellation error after done: CANCELED", function()
    local h = with_child(function(c)
      c:signal("healthy")
      c:signal("done")
      c:wait()
    end)
    local w = h:node("root.w")
    w:stop()
    h:settle()
    assert.equal("CANCELED", w.state)
    assert.same({"NEW>NEW", "NEW>HEALTHY", "HEALTHY>DONE", "DONE>CANCELED"},
      transitions(h, "root.w"))
  end)

  it("canceled and returned: CANCELED", function()
    local h = with_child(function(c)
      c:signal("healthy")
      local ok = pcall(c.wait, c)
      assert(not ok)
      return "whatever"
    end)
    local w = h:node("root.w")
    w:stop()
    h:settle()
    assert.equal("CANCELED", w.state)
    assert.is_nil(w.error)
  end)

  it("canceled and raised the cancellation error: CANCELED", function()
    local h = with_child(idle)
    local w = h:node("root.w")
    w:stop()
    h:settle()
    assert.equal("CANCELED", w.state)
    assert.is_nil(w.error)
    assert.same({"NEW>NEW", "NEW>HEALTHY", "HEALTHY>CANCELED"}, transitions(h, "root.w"))
  end)

  it("canceled and raised another error: DEAD", function()
    local h = with_child(function(c)
      c:signal("healthy")
      pcall(c.wait, c)
      error("cleanup failed")
    end)
    local w = h:node("root.w")
    w:stop()
    h:settle()
    assert.equal("DEAD", w.state)
    assert.matches("cleanup failed", w.error, 1, true)
  end)

  it("raised: DEAD with the message and a traceback", function()
    local function inner() error("boom") end
    local h = with_child(function(c)
      c:signal("healthy")
      c:sleep(1)
      inner()
    end)
    h:advance(1)
    local w = h:node("root.w")
    assert.equal("DEAD", w.state)
    assert.matches("exit_spec%.lua:%d+: boom$", w.error)
    local tb = h.engine:node("root.w").traceback
    assert.is_string(tb)
    assert.matches("stack traceback:", tb, 1, true)
    assert.matches("exit_spec.lua", tb, 1, true)
    assert.matches("inner", tb, 1, true)
    local dead = h:events{dn = "root.w", to = "DEAD"}
    assert.equal(1, #dead)
    assert.equal(w.error, dead[1].reason)
    assert.equal(1, dead[1].time)
  end)

  it("the traceback is the last failure's, however late it is read", function()
    local run = 0
    local function first() error("one") end
    local function second() error("two") end
    local h = with_child(function(c)
      run = run + 1
      c:signal("healthy")
      c:sleep(1)
      if run == 1 then first() elseif run == 2 then second() end
      return -- the third run ends without a traceback: returned without done
    end, {policy = policy.constant(1)})
    h:advance(1) -- the first failure, not read
    h:advance(1) -- restarted
    h:advance(1) -- the second failure
    local tb = h.engine:node("root.w").traceback
    assert.matches("in %a+ 'second'", tb)
    assert.is_nil(tb:find("'first'", 1, true))
    assert.equal(tb, h.engine:node("root.w").traceback) -- read twice, the same
    h:advance(1) -- restarted: running again, the last failure's still there
    assert.equal("HEALTHY", h:state("root.w"))
    assert.equal(tb, h.engine:node("root.w").traceback)
    h:advance(1) -- returned without done: a failure with no traceback
    assert.matches("returned without signaling done", h:node("root.w").error, 1, true)
    assert.is_nil(h.engine:node("root.w").traceback)
  end)

  it("returned without done: DEAD", function()
    local h = with_child(function() end)
    assert.equal("DEAD", h:state("root.w"))
    assert.matches("returned without signaling done (state NEW)",
      h:node("root.w").error, 1, true)
    local h2 = with_child(function(c) c:signal("healthy") end)
    assert.equal("DEAD", h2:state("root.w"))
    assert.matches("returned without signaling done (state HEALTHY)",
      h2:node("root.w").error, 1, true)
  end)

  local odd_errors = {
    {"a table", function() error({code = 7}) end, "(error object is a table value)"},
    {"a table with __tostring", function()
      error(setmetatable({}, {__tostring = function() return "custom message" end}))
    end, "custom message"},
    {"a table whose __tostring raises", function()
      error(setmetatable({}, {__tostring = function() error("nope") end}))
    end, "(error object is a table value whose __tostring failed)"},
    {"nil", function() error(nil) end, "(error object is a nil value)"},
    {"a number", function() error(42) end, "42"},
    {"a boolean", function() error(false) end, "(error object is a boolean value)"},
    {"the cancellation error while not canceled", function()
      error(arbor.canceled)
    end, "canceled"},
  }
  for _, case in ipairs(odd_errors) do
    it("error() with " .. case[1] .. ": DEAD with a readable message", function()
      local h = with_child(function(c)
        c:signal("healthy")
        case[2]()
      end)
      local w = h:node("root.w")
      assert.equal("DEAD", w.state)
      assert.equal(case[3], w.error)
      assert.is_string(h.engine:node("root.w").traceback)
      assert.equal("HEALTHY", h:state("root"))
    end)
  end
end)

describe("T6 death spreads", function()
  local function build()
    local h = new()
    h:start(function(ctx)
      ctx:group({
        g1 = idle,
        g2 = function(c)
          c:run("kid", function(k)
            k:run("grandkid", idle)
            idle(k)
          end)
          c:signal("healthy")
          c:sleep(1)
          error("g2 died")
        end,
        g3 = idle,
      }, {policy = policy.constant(100)})
      ctx:run("other", idle)
      idle(ctx)
    end)
    return h
  end

  it("cancels the node's subtree and its group siblings, not other siblings", function()
    local h = build()
    h:advance(1)
    assert.equal("DEAD", h:state("root.g2"))
    for _, dn in ipairs{"root.g2.kid", "root.g2.kid.grandkid"} do
      assert.same({"NEW>NEW", "NEW>HEALTHY", "HEALTHY>CANCELED"}, transitions(h, dn))
    end
    -- the group siblings were canceled; CANCELED under a live parent, they
    -- restart at once, in start order (issue 4): g1 now, g3 once g2 started
    assert.same({"NEW>NEW", "NEW>HEALTHY", "HEALTHY>CANCELED", "CANCELED>NEW",
      "NEW>HEALTHY"}, transitions(h, "root.g1"))
    assert.equal(2, h:node("root.g1").incarnation)
    assert.same({"NEW>NEW", "NEW>HEALTHY", "HEALTHY>CANCELED"}, transitions(h, "root.g3"))
    assert.equal("root.g2", h:node("root.g3").waiting_member)
    -- a plain sibling and the parent are untouched
    assert.same({"NEW>NEW", "NEW>HEALTHY"}, transitions(h, "root.other"))
    assert.equal(1, h:node("root.other").incarnation)
    assert.equal("HEALTHY", h:state("root"))
    assert.equal(1, h:node("root").incarnation)
  end)

  it("cancels the subtree children first", function()
    local h = build()
    h:advance(1)
    local order = {}
    for _, ev in ipairs(h:events{kind = "state", to = "CANCELED"}) do
      order[#order + 1] = ev.dn
    end
    -- the subtree of g2 stops bottom-up; group members follow
    local pos = {}
    for i, dn in ipairs(order) do pos[dn] = pos[dn] or i end
    assert.is_truthy(pos["root.g2.kid.grandkid"])
    assert.is_true(pos["root.g2.kid.grandkid"] < pos["root.g2.kid"])
  end)

  it("DONE spreads nothing: group siblings and children keep running", function()
    local h = new()
    h:start(function(ctx)
      ctx:group{
        a = function(c)
          c:run("kid", idle)
          c:signal("healthy")
          c:sleep(1)
          c:signal("done")
        end,
        b = idle,
      }
      idle(ctx)
    end)
    h:advance(1)
    assert.equal("DONE", h:state("root.a"))
    assert.equal("HEALTHY", h:state("root.a.kid"))
    assert.equal("HEALTHY", h:state("root.b"))
    assert.equal(1, h:node("root.b").incarnation)
    h:advance(10)
    assert.equal("HEALTHY", h:state("root.a.kid"))
    assert.equal(1, h:node("root.a.kid").incarnation)
  end)

  it("CANCELED spreads nothing to group siblings", function()
    local h = new()
    h:start(function(ctx)
      ctx:group{a = idle, b = idle}
      idle(ctx)
    end)
    h:node("root.a"):stop()
    h:settle()
    assert.equal("CANCELED", h:state("root.a"))
    assert.equal("HEALTHY", h:state("root.b"))
    assert.same({"NEW>NEW", "NEW>HEALTHY"}, transitions(h, "root.b"))
  end)
end)

describe("T7 cancellation", function()
  it("makes every blocking call raise the cancellation error, now and later", function()
    local log = {}
    local h = with_child(function(c)
      if c.incarnation > 1 then return idle(c) end
      c:signal("healthy")
      log.before = c:canceled()
      local ch = arbor.channel()
      local ok, err = pcall(c.wait, c)
      log.first = {ok, arbor.is_canceled(err), tostring(err), arbor.now()}
      log.after = c:canceled()
      ok, err = pcall(c.sleep, c, 5)
      log.sleep = {ok, err == arbor.canceled, arbor.now()}
      ok, err = pcall(c.wait, c)
      log.wait = {ok, err == arbor.canceled, arbor.now()}
      ok, err = pcall(ch.recv, ch)
      log.recv = {ok, err == arbor.canceled, arbor.now()}
      ok, err = pcall(c.sleep, c, 0)
      log.sleep0 = {ok, err == arbor.canceled}
    end)
    h:advance(2)
    assert.is_false(log.before)
    assert.is_nil(log.first)
    h:node("root.w"):stop()
    h:settle()
    assert.same({false, true, "canceled", 2}, log.first)
    assert.is_true(log.after)
    assert.same({false, true, 2}, log.sleep)
    assert.same({false, true, 2}, log.wait)
    assert.same({false, true, 2}, log.recv)
    assert.same({false, true}, log.sleep0)
    assert.equal("CANCELED", h:state("root.w"))
  end)

  it("wakes a sleeping runnable at once", function()
    local woke
    local h = with_child(function(c)
      c:signal("healthy")
      local ok = pcall(c.sleep, c, 1000)
      woke = {ok, arbor.now()}
    end)
    h:advance(3)
    h:node("root.w"):stop()
    h:settle()
    assert.same({false, 3}, woke)
    assert.is_nil(h.engine:next_timer())
  end)

  it("lets blocking calls work inside ctx:shield until the deadline", function()
    local log = {}
    local h = with_child(function(c)
      c:signal("healthy")
      pcall(c.wait, c)
      log.canceled_at = arbor.now()
      local r1, r2 = c:shield(function(x)
        c:sleep(2)
        log.shielded_sleep = arbor.now()
        return x, "two"
      end, "one")
      log.returned = {r1, r2}
      -- outside the shield the cancellation holds again
      local ok, err = pcall(c.sleep, c, 1)
      log.after_shield = {ok, err == arbor.canceled, arbor.now()}
    end, {policy = policy.never, shutdown = 5})
    h:advance(1)
    h:node("root.w"):stop()
    h:settle()
    assert.equal(1, log.canceled_at)
    assert.is_nil(log.shielded_sleep)
    assert.is_true(h:node("root.w").running)
    h:advance(2)
    assert.equal(3, log.shielded_sleep)
    assert.same({"one", "two"}, log.returned)
    assert.same({false, true, 3}, log.after_shield)
    local w = h:node("root.w")
    assert.equal("CANCELED", w.state)
    assert.is_false(w.forced)
    assert.is_nil(w.error)
  end)

  it("a shield entered before the cancellation keeps its blocking call", function()
    local log = {}
    local h = with_child(function(c)
      c:signal("healthy")
      c:shield(function()
        c:sleep(3)
        log.slept = arbor.now()
      end)
      local ok = pcall(c.wait, c)
      log.wait = {ok, arbor.now()}
    end, {policy = policy.never, shutdown = 5})
    h:advance(1)
    h:node("root.w"):stop()
    h:settle()
    assert.is_nil(log.slept)
    h:advance(2)
    assert.equal(3, log.slept)
    assert.same({false, 3}, log.wait)
  end)

  it("checks the argument of ctx:sleep", function()
    local errs = {}
    with_child(function(c)
      for _, bad in ipairs{-1, 0 / 0, math.huge} do
        local _, err = pcall(c.sleep, c, bad)
        errs[#errs + 1] = err
      end
      local _, err = pcall(c.sleep, c, "soon")
      errs[#errs + 1] = err
      idle(c)
    end)
    for i = 1, 3 do
      assert.matches("root.w: ctx:sleep(seconds): want a finite number >= 0", errs[i], 1, true)
    end
    assert.matches("number expected", errs[4], 1, true)
  end)

  it("checks the argument of ctx:shield", function()
    local err
    with_child(function(c)
      local _
      _, err = pcall(c.shield, c, "nope")
      idle(c)
    end)
    assert.matches("root.w: ctx:shield(fn): want a function, got string", err, 1, true)
  end)

  it("closes the coroutine past the shutdown deadline: CANCELED, forced", function()
    local log = {}
    local h = with_child(function(c)
      local guard <close> = setmetatable({}, {__close = function()
        log.closed_at = arbor.now()
      end})
      c:signal("healthy")
      pcall(c.wait, c)
      c:shield(function() c:sleep(100) end)
      log.finished_cleanup = true
    end, {policy = policy.never, shutdown = 3})
    h:advance(1)
    h:node("root.w"):stop()
    h:settle()
    assert.is_true(h:node("root.w").running)
    assert.same({}, h:stuck())
    h:advance(2.5)
    assert.is_true(h:node("root.w").running)
    assert.is_nil(log.closed_at)
    h:advance(0.5)
    local w = h:node("root.w")
    assert.equal("CANCELED", w.state)
    assert.is_false(w.running)
    assert.is_true(w.forced)
    assert.equal("forced", w.error)
    assert.equal(4, log.closed_at)
    assert.is_nil(log.finished_cleanup)
    local forced = h:events{dn = "root.w", to = "CANCELED", reason = "forced"}
    assert.equal(1, #forced)
    assert.equal(4, forced[1].time)
    -- nothing is left stuck, and no timer is left armed
    assert.same({}, h:stuck())
    assert.is_nil(h.engine:next_timer())
  end)

  it("uses the default shutdown of 5 seconds", function()
    local h = with_child(function(c)
      c:signal("healthy")
      pcall(c.wait, c)
      c:shield(function() c:sleep(100) end)
    end)
    h:node("root.w"):stop()
    h:settle()
    h:advance(4.9)
    assert.is_true(h:node("root.w").running)
    h:advance(0.1)
    assert.is_false(h:node("root.w").running)
    assert.is_true(h:node("root.w").forced)
  end)

  it("lists a node past its deadline in arbor.stuck()", function()
    local stuck
    local h = new()
    h:start(function(ctx)
      ctx:run("x", function(c)
        c:signal("healthy")
        c:shield(function() c:wait() end)
      end, {shutdown = 0, policy = policy.never})
      ctx:signal("healthy")
      ctx:sleep(1)
      assert(#arbor.stuck() == 0)
      arbor.node("root.x"):stop()
      -- x is canceled, its deadline (shutdown 0) is now, and it has not
      -- exited yet
      stuck = arbor.stuck()
      ctx:wait()
    end)
    h:advance(1)
    assert.equal(1, #stuck)
    assert.equal("root.x", stuck[1].dn)
    assert.equal(1, stuck[1].deadline)
    assert.equal(1, stuck[1].incarnation)
    -- the engine then closed it
    assert.equal("CANCELED", h:state("root.x"))
    assert.is_true(h:node("root.x").forced)
    assert.same({}, h:stuck())
  end)

  it("never lets a stuck child block its parent's restart", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("p", function(p)
        p:run("x", function(c)
          c:signal("healthy")
          c:shield(function() c:wait() end)
        end, {shutdown = 2})
        idle(p)
      end)
      idle(ctx)
    end)
    h:node("root.p"):cancel()
    h:settle()
    assert.equal(1, h:node("root.p").incarnation)
    h:advance(2)
    assert.equal(2, h:node("root.p").incarnation)
    assert.equal("HEALTHY", h:state("root.p"))
    assert.equal(1, h:node("root.p.x").incarnation)
    assert.equal("HEALTHY", h:state("root.p.x"))
  end)

  it("does not crash the interpreter when an engine with a shielded runnable is collected at exit", function()
    -- A runnable inside ctx:shield when the interpreter closes: the engine's
    -- finalizer closes the coroutine, whose shield guard calls back into a
    -- ctx that lua_close may have finalized already.
    local script = [[
      local testing = require "arbor.testing"
      local h = testing.new{seed = 1}
      h:start(function(ctx)
        ctx:run("x", function(c) c:signal("healthy") c:shield(function() c:wait() end) end)
        ctx:signal("healthy") ctx:wait()
      end)
      h:node("root.x"):stop()
      h:settle()
      print("end of script")
    ]]
    local cmd = string.format("LUA_PATH=%q LUA_CPATH=%q lua5.4 -e %q 2>&1; echo rc=$?",
      package.path, package.cpath, script)
    local p = assert(io.popen(cmd))
    local out = p:read("a")
    p:close()
    assert.matches("end of script", out, 1, true)
    assert.matches("rc=0", out, 1, true)
  end)
end)

describe("T12 stop order", function()
  local function build(order, opts)
    opts = opts or {}
    local function leaf(stall)
      return function(ctx)
        ctx:signal("healthy")
        local ok, err = pcall(ctx.wait, ctx)
        order[#order + 1] = ctx.name .. "@" .. arbor.now()
        if stall then ctx:shield(function() ctx:sleep(stall) end) end
        error(err, 0)
      end
    end
    local function parent(kids)
      return function(ctx)
        for _, k in ipairs(kids) do ctx:run(k[1], k[2], k[3]) end
        leaf()(ctx)
      end
    end
    local h = new()
    h:start(parent{
      {"a", parent{{"a1", leaf()}, {"a2", leaf()}}},
      {"b", parent{{"b1", leaf(opts.b1_stall), {shutdown = 2}},
                   {"b2", leaf(opts.b2_stall)}}},
      {"c", leaf()},
    })
    return h
  end

  it("stops children before parents, siblings in reverse start order", function()
    local order = {}
    local h = build(order)
    local took = h:stop()
    assert.equal(0, took)
    assert.same({"c@0", "b2@0", "b1@0", "b@0", "a2@0", "a1@0", "a@0", "root@0"},
      (function()
        local out = {}
        for i, s in ipairs(order) do out[i] = s:gsub("%.0$", "") end
        return out
      end)())
    local finished, gave_up = h.engine:finished()
    assert.is_true(finished)
    assert.is_false(gave_up)
    for _, dn in ipairs{"root", "root.a", "root.a.a1", "root.a.a2", "root.b",
        "root.b.b1", "root.b.b2", "root.c"} do
      assert.equal("CANCELED", h:state(dn), dn)
    end
  end)

  it("bounds each node by its shutdown time, one after the other", function()
    local order = {}
    local h = build(order, {b1_stall = 100, b2_stall = 1})
    local took = h:stop()
    -- b2 cleans up in 1s; b1 would take 100s but is forced after 2s
    assert.equal(3, took)
    local out = {}
    for i, s in ipairs(order) do out[i] = s:gsub("%.0$", "") end
    assert.same({"c@0", "b2@0", "b1@1", "b@3", "a2@3", "a1@3", "a@3", "root@3"}, out)
    assert.is_true(h:node("root.b.b1").forced)
    assert.is_false(h:node("root.b.b2").forced)
    assert.is_true(h.engine:finished())
  end)

  it("stops the members of a group in reverse name order", function()
    local order = {}
    local member = records_cancellation(order, "name")
    local h = new()
    h:start(function(ctx)
      ctx:group{m = member, c = member, x = member, a = member}
      idle(ctx)
    end)
    h:stop()
    assert.same({"x", "m", "c", "a"}, order)
  end)

  it("stops a subtree in order and leaves its siblings alone", function()
    local order = {}
    local rec = records_cancellation(order, "dn")
    local h = new()
    h:start(function(ctx)
      ctx:run("p", function(p)
        p:run("one", rec)
        p:run("two", rec)
        rec(p)
      end)
      ctx:run("q", rec)
      idle(ctx)
    end)
    h:node("root.p"):stop()
    h:settle()
    assert.same({"root.p.two", "root.p.one", "root.p"}, order)
    assert.equal("HEALTHY", h:state("root.q"))
  end)
end)

describe("channels", function()
  it("hands values from sender to receiver with capacity 0", function()
    local ch = arbor.channel()
    local sent, got = {}, {}
    local h = new()
    h:start(function(ctx)
      ctx:run("producer", function(c)
        c:signal("healthy")
        for i = 1, 3 do
          ch:send(i)
          sent[i] = arbor.now()
        end
        c:wait()
      end)
      ctx:run("consumer", function(c)
        c:signal("healthy")
        for _ = 1, 3 do
          got[#got + 1] = {ch:recv(), arbor.now()}
          c:sleep(1)
        end
        c:wait()
      end)
      idle(ctx)
    end)
    h:advance(10)
    assert.same({{1, 0}, {2, 1}, {3, 2}}, got)
    -- a send completes only when a receiver takes the value
    assert.same({0, 1, 2}, sent)
    assert.equal(0, ch:len())
  end)

  it("buffers up to its capacity before a send blocks", function()
    local ch = arbor.channel(2)
    local sent, got = {}, {}
    local h = new()
    h:start(function(ctx)
      ctx:run("producer", function(c)
        c:signal("healthy")
        for i = 1, 5 do
          ch:send(i)
          sent[i] = arbor.now()
        end
        c:wait()
      end)
      ctx:sleep(10)
      ctx:run("consumer", function(c)
        c:signal("healthy")
        for _ = 1, 5 do
          got[#got + 1] = ch:recv()
          c:sleep(1)
        end
        c:wait()
      end)
      idle(ctx)
    end)
    -- two values wait in the buffer, the third send blocks
    assert.same({0, 0}, sent)
    assert.equal(2, ch:len())
    h:advance(100)
    assert.same({1, 2, 3, 4, 5}, got)
    assert.same({0, 0, 10, 11, 12}, sent)
  end)

  it("raises the cancellation error in a receiver that is canceled", function()
    local ch = arbor.channel(1)
    local result
    local h = new()
    h:start(function(ctx)
      ctx:run("r", function(c)
        c:signal("healthy")
        local ok, err = pcall(ch.recv, ch)
        result = {ok, arbor.is_canceled(err)}
        error(err, 0)
      end, {policy = policy.never})
      idle(ctx)
    end)
    h:node("root.r"):stop()
    h:settle()
    assert.same({false, true}, result)
    assert.equal("CANCELED", h:state("root.r"))
    -- a value sent afterwards is not lost on the canceled receiver
    ch:send("kept")
    assert.equal(1, ch:len())
    assert.equal("kept", ch:recv())
  end)

  it("raises the cancellation error in a blocked sender, whose value is dropped", function()
    local ch = arbor.channel(0)
    local result
    local h = new()
    h:start(function(ctx)
      ctx:run("s", function(c)
        c:signal("healthy")
        local ok, err = pcall(ch.send, ch, "lost")
        result = {ok, arbor.is_canceled(err)}
        error(err, 0)
      end, {policy = policy.never})
      idle(ctx)
    end)
    h:node("root.s"):stop()
    h:settle()
    assert.same({false, true}, result)
    assert.equal(0, ch:len())
    local ok, err = pcall(ch.recv, ch)
    assert.is_false(ok)
    assert.matches("would block outside a runnable", err, 1, true)
  end)

  it("raises a clear error for a call outside a runnable that would block", function()
    local ch = arbor.channel(1)
    ch:send(1) -- fits in the buffer
    local ok, err = pcall(ch.send, ch, 2)
    assert.is_false(ok)
    assert.matches("channel:send() would block outside a runnable", err, 1, true)
    assert.equal(1, ch:len())
    assert.equal(1, ch:recv())
    ok, err = pcall(ch.recv, ch)
    assert.is_false(ok)
    assert.matches("channel:recv() would block outside a runnable", err, 1, true)
    local ch0 = arbor.channel()
    ok, err = pcall(ch0.send, ch0, "x")
    assert.is_false(ok)
    assert.matches("channel:send() would block outside a runnable", err, 1, true)
  end)

  it("wakes a parked receiver from outside at the next settle", function()
    local ch = arbor.channel()
    local got
    local h = new()
    h:start(function(ctx)
      ctx:run("r", function(c)
        c:signal("healthy")
        got = ch:recv()
        c:wait()
      end)
      idle(ctx)
    end)
    ch:send("hello")
    h:settle()
    assert.equal("hello", got)
  end)

  it("never loses a value handed to a receiver that is canceled before it runs", function()
    local ch = arbor.channel()
    local got, later
    local h = new()
    h:start(function(ctx)
      ctx:run("r", function(c)
        c:signal("healthy")
        got = ch:recv()
        local ok, err = pcall(c.wait, c)
        later = {ok, arbor.is_canceled(err)}
        error(err, 0)
      end, {policy = policy.never})
      ctx:sleep(0) -- r parks in recv
      ch:send("v")  -- hands "v" over...
      arbor.node("root.r"):stop() -- ...and cancels r before it runs
      idle(ctx)
    end)
    assert.equal("v", got)
    assert.same({false, true}, later)
    assert.equal("CANCELED", h:state("root.r"))
  end)

  it("does not hand values to the stale receiver of an ended incarnation", function()
    local ch = arbor.channel()
    local got = {}
    local h = new()
    h:start(function(ctx)
      ctx:run("r", function(c)
        c:signal("healthy")
        got[#got + 1] = c.incarnation .. ":" .. tostring(ch:recv())
        c:wait()
      end)
      idle(ctx)
    end)
    h:node("root.r"):cancel() -- incarnation 1 was parked in recv
    h:settle()
    assert.equal(2, h:node("root.r").incarnation)
    ch:send("x")
    h:settle()
    assert.same({"2:x"}, got)
    assert.equal(0, ch:len())
  end)

  it("checks the capacity", function()
    for _, bad in ipairs{-1, 1.5, "2", {}} do
      local ok, err = pcall(arbor.channel, bad)
      assert.is_false(ok)
      assert.matches("arbor.channel([capacity]): want an integer >= 0", err, 1, true)
    end
  end)
end)

describe("h:fail", function()
  it("makes a node parked in ctx:wait raise the error: DEAD", function()
    local h = with_child(idle)
    h:advance(1)
    h:fail("root.w", "injected")
    local w = h:node("root.w")
    assert.equal("DEAD", w.state)
    assert.equal("injected", w.error)
    assert.matches("stack traceback:", h.engine:node("root.w").traceback, 1, true)
    assert.equal(1, h:events{dn = "root.w", to = "DEAD"}[1].time)
  end)

  it("interrupts a sleep, which does not wake later", function()
    local log = {}
    local h = with_child(function(c)
      c:signal("healthy")
      local ok, err = pcall(c.sleep, c, 10)
      log[#log + 1] = {ok, err, arbor.now()}
      c:wait()
    end)
    h:advance(2)
    h:fail("root.w", "poke")
    assert.same({{false, "poke", 2}}, log)
    -- the runnable caught it and keeps running
    assert.equal("HEALTHY", h:state("root.w"))
    h:advance(20)
    assert.equal(1, #log)
    assert.equal("HEALTHY", h:state("root.w"))
  end)

  it("interrupts a channel receive", function()
    local ch = arbor.channel()
    local h = with_child(function(c)
      c:signal("healthy")
      ch:recv()
    end)
    h:fail("root.w", {reason = "table error"})
    assert.equal("DEAD", h:state("root.w"))
    assert.equal("(error object is a table value)", h:node("root.w").error)
  end)

  it("uses a default error and refuses nodes that are not running", function()
    local h = with_child(idle)
    h:fail("root.w")
    assert.equal("injected failure", h:node("root.w").error)
    local ok, err = pcall(h.fail, h, "root.w", "again")
    assert.is_false(ok)
    assert.matches("fail root.w: the node is not running (state DEAD)", err, 1, true)
    ok, err = pcall(h.fail, h, "root.nope", "x")
    assert.is_false(ok)
    assert.matches("no node root.nope", err, 1, true)
  end)
end)

describe("T7 runaway runnables", function()
  it("fails a runnable that never yields, and the tree keeps running", function()
    -- The limit is in real seconds: this spec spends about 0.2 s.
    local h = testing.new{seed = 1, runaway = 0.2}
    h:start(function(ctx)
      ctx:run("spin", function(c)
        c:signal("healthy")
        c:sleep(1)
        while true do end
      end, {policy = policy.never})
      ctx:run("steady", function(c) c:signal("healthy") c:wait() end)
      ctx:signal("healthy")
      ctx:wait()
    end)
    h:advance(1)
    assert.equal("DEAD", h:state("root.spin"))
    assert.matches("runaway runnable: ran %d+ ms without yielding %(limit 200 ms%)",
      h:node("root.spin").error)
    assert.equal("HEALTHY", h:state("root.steady"))
    assert.equal("HEALTHY", h:state("root"))
    -- the hook is gone: the thread serves later incarnations normally
    h:node("root.steady"):restart()
    assert.equal("HEALTHY", h:state("root.steady"))
    h:close()
  end)

  it("rejects a bad limit", function()
    local ok, err = pcall(testing.new, {runaway = -1})
    assert.is_false(ok)
    assert.matches("runaway must be a finite number >= 0", err, 1, true)
  end)
end)

describe("T12 a stop in progress", function()
  it("refuses to restart the root or a node under a stopping parent", function()
    local results = {}
    local h = new()
    h:start(function(ctx)
      ctx:run("cleaner", function(c)
        c:signal("healthy")
        pcall(c.wait, c)
        c:shield(function()
          for _, dn in ipairs{"root", "root.other"} do
            local ok, err = pcall(function() arbor.node(dn):restart() end)
            results[#results + 1] = {ok, err}
          end
        end)
      end)
      ctx:run("other", idle)
      idle(ctx)
    end)
    h:stop()
    assert.is_false(results[1][1])
    assert.matches("restart root: the tree is being stopped", results[1][2], 1, true)
    assert.is_false(results[2][1])
    assert.matches("restart root.other: its parent is being stopped", results[2][2], 1, true)
    assert.is_true(h.engine:finished())
    -- once stopped, the root may be started again
    h:node("root"):restart()
    assert.equal("HEALTHY", h:state("root"))
    assert.equal("HEALTHY", h:state("root.other"))
  end)
end)
