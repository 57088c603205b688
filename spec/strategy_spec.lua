-- Issue 4: group strategies, ordered starts, significant children and
-- auto_shutdown, explain. On the virtual clock.
local policy = require "arbor.policy"
local support = require "support"
local new, idle = support.new, support.idle

after_each(support.close_all)

-- HEALTHY, then takes 3 s to stop (a shielded sleep).
local function slow_to_stop(x)
  x:signal("healthy")
  x:shield(function() x:sleep(3) end)
  x:wait()
end

-- Starts (incarnation > 1 only) of the members, in the order they happened.
local function restarts(h)
  local out = {}
  for _, ev in ipairs(h:events{kind = "state", to = "NEW"}) do
    if ev.incarnation > 1 then out[#out + 1] = ev.dn:match("[^.]+$") end
  end
  return out
end

-- A group a, b, c under opts; member `bad` fails once at t = 1.
local function group(opts, bad, delay)
  local h = new()
  local failed = false
  local function member(name)
    return function(c)
      c:signal("healthy")
      if name == bad and not failed then
        c:sleep(1)
        failed = true
        error(name .. " broke")
      end
      c:wait()
    end
  end
  opts.policy = policy.constant(delay or 2)
  h:start(function(ctx)
    ctx:group({a = member("a"), b = member("b"), c = member("c")}, opts)
    idle(ctx)
  end)
  return h
end

describe("group strategies", function()
  it("one_for_all (the default): every member restarts, in start order", function()
    local h = group({}, "a")
    h:advance(1)
    assert.equal("DEAD", h:state("root.a"))
    assert.equal("CANCELED", h:state("root.b"))
    assert.equal("CANCELED", h:state("root.c"))
    assert.equal("waiting_member", h:node("root.b").why)
    assert.matches("waits for group member root.a to start", h:node("root.b").explanation, 1, true)
    h:advance(2)
    assert.same({"a", "b", "c"}, restarts(h))
    for _, m in ipairs{"a", "b", "c"} do assert.equal("HEALTHY", h:state("root." .. m)) end
  end)

  it("one_for_all: the last member dying restarts the others first", function()
    local h = group({strategy = "one_for_all"}, "c")
    h:advance(3)
    assert.same({"a", "b", "c"}, restarts(h))
  end)

  it("rest_for_one: the members started after the dead one restart, in order", function()
    local h = group({strategy = "rest_for_one"}, "b")
    h:advance(1)
    assert.equal("HEALTHY", h:state("root.a"))
    assert.equal("DEAD", h:state("root.b"))
    assert.equal("CANCELED", h:state("root.c"))
    h:advance(2)
    assert.same({"b", "c"}, restarts(h))
    assert.equal(1, h:node("root.a").incarnation)
  end)

  it("rest_for_one: the last member restarts alone", function()
    local h = group({strategy = "rest_for_one"}, "c")
    h:advance(3)
    assert.same({"c"}, restarts(h))
  end)

  it("one_for_one: only the dead member restarts", function()
    local h = group({strategy = "one_for_one"}, "a")
    h:advance(1)
    assert.equal("HEALTHY", h:state("root.b"))
    h:advance(2)
    assert.same({"a"}, restarts(h))
  end)

  it("a member given up no longer holds the others back", function()
    local h = new()
    h:start(function(ctx)
      ctx:group({
        a = function(c) c:signal("healthy") c:sleep(1) error("a") end,
        b = idle,
      }, {policy = function() return "stop" end}) -- gives up, not temporary (never)
      idle(ctx)
    end)
    h:advance(1)
    assert.equal("DEAD", h:state("root.a"))
    assert.equal("HEALTHY", h:state("root.b"))
    assert.same({"b"}, restarts(h))
  end)

  it("ordered: each member starts once the previous one is HEALTHY", function()
    local h = new()
    local function slow(secs)
      return function(c) c:sleep(secs) c:signal("healthy") c:wait() end
    end
    h:start(function(ctx)
      ctx:group({a = slow(2), b = slow(3), c = slow(1)}, {ordered = true})
      idle(ctx)
    end)
    assert.equal("NEW", h:state("root.a"))
    assert.equal(0, h:node("root.b").incarnation)
    assert.equal("waiting_member", h:node("root.b").why)
    assert.matches("to be HEALTHY", h:node("root.b").explanation, 1, true)
    h:advance(2)
    assert.equal("HEALTHY", h:state("root.a"))
    assert.equal(1, h:node("root.b").incarnation)
    assert.equal(0, h:node("root.c").incarnation)
    h:advance(3)
    assert.equal("HEALTHY", h:state("root.b"))
    assert.equal("NEW", h:state("root.c"))
    h:advance(1)
    assert.equal("HEALTHY", h:state("root.c"))
  end)

  local bad = {
    {{strategy = "all_for_none"}, "option 'strategy' must be one of"},
    {{strategy = 3}, "option 'strategy' must be one of"},
    {{ordered = "yes"}, "option 'ordered' must be a boolean"},
    {{significant = true}, "option 'significant' on a one_for_all group"},
    {{auto_shutdown = "sometimes"}, "option 'auto_shutdown' must be one of"},
  }
  for _, case in ipairs(bad) do
    it("refuses bad group options: " .. case[2], function()
      local h = new()
      local err
      h:start(function(ctx)
        local ok
        ok, err = pcall(ctx.group, ctx, {a = idle}, case[1])
        idle(ctx)
      end)
      assert.matches("root: ctx:group: " .. case[2], err, 1, true)
      assert.same({}, h:node("root").children)
    end)
  end

  it("refuses strategy options on ctx:run", function()
    local h = new()
    local err
    h:start(function(ctx)
      local ok
      ok, err = pcall(ctx.run, ctx, "x", idle, {strategy = "rest_for_one"})
      idle(ctx)
    end)
    assert.matches("options 'strategy' and 'ordered' are for ctx:group", err, 1, true)
  end)
end)

describe("significant children", function()
  local function finishing(c) c:signal("healthy") c:sleep(5) c:signal("done") end

  it("any_significant: the parent ends DONE when one ends DONE, its other children stopped", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("sup", function(c)
        c:run("main", finishing, {significant = true})
        c:run("helper", idle)
        idle(c)
      end, {auto_shutdown = "any_significant"})
      idle(ctx)
    end)
    h:advance(5)
    assert.equal("DONE", h:state("root.sup"))
    assert.equal("CANCELED", h:state("root.sup.helper"))
    assert.equal("auto_shutdown", h:node("root.sup").why)
    assert.matches("significant child root.sup.main done", h:node("root.sup").explanation, 1, true)
    h:advance(100)
    assert.equal("DONE", h:state("root.sup")) -- not restarted
    assert.equal(1, h:node("root.sup").incarnation)
  end)

  it("all_significant: waits for every significant child", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("sup", function(c)
        c:run("one", finishing, {significant = true})
        c:run("two", function(x) x:signal("healthy") x:sleep(9) x:signal("done") end,
          {significant = true})
        idle(c)
      end, {auto_shutdown = "all_significant"})
      idle(ctx)
    end)
    h:advance(5)
    assert.equal("HEALTHY", h:state("root.sup"))
    h:advance(4)
    assert.equal("DONE", h:state("root.sup"))
  end)

  it("without auto_shutdown a significant child changes nothing", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("main", finishing, {significant = true})
      idle(ctx)
    end)
    h:advance(10)
    assert.equal("HEALTHY", h:state("root"))
  end)

  it("the root's auto_shutdown finishes the tree", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("job", finishing, {significant = true})
      idle(ctx)
    end, {auto_shutdown = "any_significant"})
    h:advance(5)
    assert.equal("DONE", h:state("root"))
    assert.is_true((h.engine:finished()))
  end)

  it("is allowed on rest_for_one groups", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("sup", function(c)
        c:group({a = finishing, b = idle}, {strategy = "rest_for_one", significant = true})
        idle(c)
      end, {auto_shutdown = "any_significant"})
      idle(ctx)
    end)
    h:advance(5)
    assert.equal("DONE", h:state("root.sup"))
  end)
end)

describe("explain", function()
  it("says a node is running", function()
    local h = new()
    h:start(idle)
    local s, why = h:explain("root")
    assert.equal("running", why)
    assert.matches("root is running: HEALTHY, incarnation 1", s, 1, true)
  end)

  it("says a node waits for a backoff, until when", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("w", function(c) c:sleep(1) error("boom") end, {policy = policy.constant(7)})
      idle(ctx)
    end)
    h:advance(1)
    local s, why = h:explain("root.w")
    assert.equal("backoff", why)
    assert.matches("restarts it at 8.000s (in 7.000s)", s, 1, true)
    assert.equal(8, h:node("root.w").restart_at)
  end)

  it("says which policy decision gave a node up", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("w", function(c) c:sleep(1) error("boom") end, {policy = policy.never})
      idle(ctx)
    end)
    h:advance(1)
    local s, why = h:explain("root.w")
    assert.equal("given_up", why)
    assert.matches('decided "stop"', s, 1, true)
    assert.equal("stop", h:node("root.w").decision)
  end)

  it("says a node escalated, and that its parent was failed", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("p", function(c)
        c:run("w", function(x) x:sleep(1) error("boom") end,
          {policy = function() return "escalate" end})
        c:signal("healthy")
        c:shield(function() c:sleep(5) end) -- slow to stop
        c:wait()
      end, {policy = policy.constant(10)})
      idle(ctx)
    end)
    h:advance(1)
    local s, why = h:explain("root.p.w")
    assert.equal("given_up", why)
    assert.matches('decided "escalate" (its parent root.p was failed)', s, 1, true)
    assert.equal("escalate", h:node("root.p.w").decision)
    h:advance(5)
    assert.equal("backoff", select(2, h:explain("root.p")))
  end)

  it("says a canceled node is stopping, waiting for its children", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("p", function(c)
        c:run("slow", slow_to_stop)
        idle(c)
      end)
      idle(ctx)
    end)
    h:advance(1) -- slow is in its shielded sleep
    h.engine:cancel("root.p")
    h:settle()
    local s, why = h:explain("root.p")
    assert.equal("stopping", why)
    assert.matches("waits for root.p.slow to exit first", s, 1, true)
  end)

  it("says which descendant an exited node waits for, and since when", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("p", function(c)
        c:run("slow", slow_to_stop)
        c:sleep(1)
        error("p broke")
      end, {policy = policy.constant(1)})
      idle(ctx)
    end)
    h:advance(1)
    local s, why = h:explain("root.p")
    assert.equal("waiting_descendant", why)
    assert.matches("waits for descendant root.p.slow to exit (since 1.000s)", s, 1, true)
    assert.equal("root.p.slow", h:node("root.p").waiting_for)
  end)

  it("says a held node is held, a DONE one finished, a pending one not started", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("held", idle)
      ctx:run("fin", function(c) c:signal("healthy") c:signal("done") end)
      idle(ctx)
    end)
    h:node("root.held"):stop()
    assert.equal("held", select(2, h:explain("root.held")))
    assert.equal("done", select(2, h:explain("root.fin")))
    assert.is_nil((h:explain("root.nope")))
  end)

  it("names the closed lifecycle gate and the coordinator's state", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("migrate", function(c) c:sleep(5) c:signal("healthy") c:signal("done") end,
        {lifecycle = "prestart"})
      ctx:run("proxy", function(c) c:sleep(1) c:signal("healthy") c:wait() end,
        {lifecycle = "poststart", sidecar = true})
      ctx:run("app", function(c) c:signal("healthy") c:wait() end)
      idle(ctx)
    end)
    local s, why = h:explain("root.app")
    assert.equal("blocked", why)
    assert.equal("root.app is not running: its lifecycle gate (main) is closed "
      .. "while root's coordinator is in state prestart", s)
    assert.matches("gate (poststart sidecar) is closed while root's coordinator "
      .. "is in state prestart", (h:explain("root.proxy")), 1, true)
    assert.equal("blocked", h:node("root.app").why)
    h:advance(5)
    assert.equal("running", select(2, h:explain("root.app")))
    assert.equal("running", select(2, h:explain("root.proxy")))
  end)
end)
