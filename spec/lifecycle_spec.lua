-- Lifecycle gates (L0-L8): prestart, main, poststart, poststop and sidecar
-- children ordered by readiness, on the virtual clock.
local policy = require "arbor.policy"

local support = require "support"
local idle = support.idle
local new = support.new

after_each(support.close_all)

-- A job: runs `seconds`, then signals healthy and done.
local function job(seconds, log, name)
  return function(c)
    if log then log[#log + 1] = "start " .. name end
    c:sleep(seconds or 0)
    c:signal("healthy")
    c:signal("done")
    if log then log[#log + 1] = "done " .. name end
  end
end

-- A service: becomes healthy after `seconds`, then runs until canceled.
local function service(seconds, log, name)
  return function(c)
    if log then log[#log + 1] = "start " .. name end
    c:sleep(seconds or 0)
    c:signal("healthy")
    local ok, err = pcall(c.wait, c)
    if log then log[#log + 1] = "stop " .. name end
    error(err, 0)
  end
end

-- Coordinator moves of dn as "from>to" strings.
local function moves(h, dn) return support.transitions(h, dn, "coordinator") end

-- A harness whose root runs parent as "root.p", started.
local function with_parent(parent)
  local h = new()
  h:start(function(ctx)
    ctx:run("p", parent)
    idle(ctx)
  end)
  return h
end

-- The whole worked example of the docs: migrate, proxy, app, warm, flush.
local function app_parent(log, opts)
  opts = opts or {}
  return function(p)
    p:run("migrate", job(2, log, "migrate"), {lifecycle = "prestart",
      policy = opts.migrate_policy})
    p:run("proxy", service(5, log, "proxy"), {lifecycle = "prestart", sidecar = true})
    p:run("app", opts.app or service(1, log, "app"))
    p:run("warm", job(3, log, "warm"), {lifecycle = "poststart"})
    p:run("flush", function(c)
      log[#log + 1] = "start flush"
      c:sleep(opts.flush_time or 1)
      c:signal("healthy")
      c:signal("done")
      log[#log + 1] = "done flush"
    end, {lifecycle = "poststop", shutdown = opts.flush_shutdown})
    p:signal("healthy")
    p:wait()
  end
end

describe("L1 main waits for prestart", function()
  it("starts main once prestart jobs are DONE and prestart sidecars HEALTHY", function()
    local log = {}
    local h = with_parent(app_parent(log))
    -- migrate and proxy run; app, warm, flush are NEW and blocked
    assert.same({"start migrate", "start proxy"}, log)
    local app = h:node("root.p.app")
    assert.equal("NEW", app.state)
    assert.is_true(app.blocked)
    assert.equal("main", app.lifecycle)
    assert.equal(0, app.incarnation)
    assert.equal("prestart", h:node("root.p").coordinator)
    assert.is_true(h:node("root.p.proxy").sidecar)
    assert.equal("prestart", h:node("root.p.proxy").lifecycle)
    h:advance(2) -- migrate DONE, proxy not yet healthy
    assert.equal("DONE", h:state("root.p.migrate"))
    assert.is_true(h:node("root.p.app").blocked)
    h:advance(3) -- proxy HEALTHY at t=5: readiness, not spawned
    assert.equal("HEALTHY", h:state("root.p.proxy"))
    assert.is_false(h:node("root.p.app").blocked)
    assert.equal("NEW", h:state("root.p.app"))
    assert.equal("main", h:node("root.p").coordinator)
    local started = h:events{dn = "root.p.app", to = "NEW"}
    assert.equal(5, started[1].time)
  end)

  it("shows coordinator, lifecycle, sidecar and blocked in arbor.tree()", function()
    local h = with_parent(app_parent({}))
    local p = h:tree().children[1]
    assert.equal("prestart", p.coordinator)
    local by = {}
    for _, c in ipairs(p.children) do by[c.name] = c end
    assert.is_true(by.proxy.sidecar)
    assert.is_true(by.app.blocked)
    assert.equal("poststop", by.flush.lifecycle)
    assert.is_false(by.migrate.blocked)
  end)
end)

describe("L2 poststart waits for main", function()
  it("starts poststart once every main child is HEALTHY", function()
    local log = {}
    local h = with_parent(app_parent(log))
    h:advance(5)
    assert.is_true(h:node("root.p.warm").blocked)
    h:advance(1) -- app healthy at t=6
    assert.equal("HEALTHY", h:state("root.p.app"))
    assert.equal("NEW", h:state("root.p.warm"))
    assert.is_false(h:node("root.p.warm").blocked)
    assert.equal("poststart", h:node("root.p").coordinator)
    h:advance(3)
    assert.equal("DONE", h:state("root.p.warm"))
    assert.equal("running", h:node("root.p").coordinator)
    assert.same({"init>prestart", "prestart>main", "main>poststart",
      "poststart>running"}, moves(h, "root.p"))
    -- poststop has not run
    assert.is_true(h:node("root.p.flush").blocked)
  end)

  it("counts a main child that exited as exited", function()
    local h = with_parent(function(p)
      p:run("m", function(c) c:sleep(1) error("boom") end,
        {policy = policy.constant(100)})
      p:run("post", job(0), {lifecycle = "poststart"})
      idle(p)
    end)
    h:advance(1)
    assert.equal("DEAD", h:state("root.p.m"))
    assert.equal("DONE", h:state("root.p.post"))
  end)
end)

describe("L3 poststop", function()
  it("runs on normal completion, after sidecars are canceled (L4)", function()
    local log = {}
    local h = with_parent(app_parent(log, {app = job(2, log, "app")}))
    h:advance(7) -- app DONE at t=7
    assert.equal("DONE", h:state("root.p.app"))
    assert.equal("CANCELED", h:state("root.p.proxy"))
    assert.is_true(h:node("root.p.proxy").retired)
    -- warm (poststart) started at t=7 and runs 3 s; flush waits for it
    assert.equal("NEW", h:state("root.p.warm"))
    assert.is_true(h:node("root.p.flush").blocked)
    h:advance(3)
    assert.equal("DONE", h:state("root.p.warm"))
    assert.equal("poststop", h:node("root.p").coordinator)
    assert.equal("NEW", h:state("root.p.flush"))
    h:advance(1)
    assert.equal("DONE", h:state("root.p.flush"))
    -- the proxy is not restarted: retired within this incarnation
    h:advance(60)
    assert.equal("CANCELED", h:state("root.p.proxy"))
    assert.equal(0, h:node("root.p.proxy").restarts)
    assert.same({"start migrate", "start proxy", "done migrate", "start app",
      "done app", "stop proxy", "start warm", "done warm", "start flush",
      "done flush"}, log)
  end)

  it("runs when the parent is stopped, before the parent is told", function()
    local log = {}
    local h = with_parent(function(p)
      p:run("app", service(0, log, "app"))
      p:run("flush", job(2, log, "flush"), {lifecycle = "poststop"})
      p:signal("healthy")
      local ok = pcall(p.wait, p)
      log[#log + 1] = "parent told"
      error(arbor_canceled or require("arbor").canceled, 0)
    end)
    assert.is_true(h:node("root.p.flush").blocked)
    h:node("root.p"):stop()
    -- app stopped, flush running, the parent not yet told
    assert.same({"start app", "stop app", "start flush"}, log)
    assert.equal("CANCELED", h:state("root.p.app"))
    assert.equal("NEW", h:state("root.p.flush"))
    assert.equal("poststop", h:node("root.p").coordinator)
    assert.equal("HEALTHY", h:state("root.p"))
    h:advance(2)
    assert.same({"start app", "stop app", "start flush", "done flush",
      "parent told"}, log)
    assert.equal("CANCELED", h:state("root.p"))
    assert.equal("DONE", h:state("root.p.flush"))
  end)

  it("runs on a tree stop, and h:stop() waits for it", function()
    local log = {}
    local h = new()
    h:start(function(ctx)
      ctx:run("app", service(0, log, "app"))
      ctx:run("flush", job(3, log, "flush"), {lifecycle = "poststop"})
      idle(ctx)
    end)
    local took = h:stop()
    assert.equal(3, took)
    assert.same({"start app", "stop app", "start flush", "done flush"}, log)
    assert.equal("CANCELED", h:state("root"))
  end)

  it("is bounded by its shutdown time when the parent stops", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("app", idle)
      ctx:run("flush", function(c)
        c:sleep(100)
        c:signal("healthy")
        c:signal("done")
      end, {lifecycle = "poststop", shutdown = 4})
      ctx:run("stubborn", function(c)
        c:shield(function() c:sleep(100) end)
      end, {lifecycle = "poststop", shutdown = 3})
      idle(ctx)
    end)
    local took = h:stop()
    -- flush is canceled at 4 s (its sleep raises); stubborn is canceled at
    -- 3 s, shields itself, and is closed 3 s later
    assert.equal(6, took)
    local flush = h:node("root.flush")
    assert.equal("CANCELED", flush.state)
    assert.is_false(flush.forced)
    assert.matches("poststop ran past its shutdown time", h:logs("root.flush")[1].line)
    assert.is_true(h:node("root.stubborn").forced)
  end)

  it("runs when a sibling's death tears the parent down", function()
    local log = {}
    local h = new()
    h:start(function(ctx)
      ctx:group{
        a = function(c) c:signal("healthy") c:sleep(5) error("a failed") end,
        p = function(p)
          p:run("app", service(0, log, "app"))
          p:run("flush", job(1, log, "flush"), {lifecycle = "poststop"})
          idle(p)
        end,
      }
      idle(ctx)
    end)
    h:advance(5)
    assert.same({"start app", "stop app", "start flush"}, log)
    h:advance(1)
    assert.same({"start app", "stop app", "start flush", "done flush"},
      {table.unpack(log, 1, 4)})
    assert.equal("start app", log[5]) -- the group restarted
  end)

  it("runs before an escalation fails the parent (L8 escalate)", function()
    local log = {}
    local h = new()
    h:start(function(ctx)
      ctx:run("p", function(p)
        p:run("app", function(c)
          log[#log + 1] = "start app"
          c:sleep(1)
          error("app broke")
        end, {policy = function() return "escalate" end})
        p:run("flush", job(2, log, "flush"), {lifecycle = "poststop"})
        idle(p)
      end, {policy = policy.constant(10)})
      idle(ctx)
    end)
    h:advance(1)
    assert.equal("DEAD", h:state("root.p"))
    assert.equal("NEW", h:state("root.p.flush"))
    assert.same({}, h:events{dn = "root.p", kind = "policy"})
    h:advance(2)
    assert.same({"start app", "start flush", "done flush"}, log)
    local decisions = h:events{dn = "root.p", kind = "policy"}
    assert.equal(1, #decisions) -- decided once poststop ended
    assert.equal(3, decisions[1].time)
    assert.matches("child root.p.app escalated: .*app broke", h:node("root.p").error)
  end)

  it("counts the subtree as exited only after poststop ended", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("p", function(p)
        p:run("flush", job(5), {lifecycle = "poststop"})
        p:sleep(1)
        error("p failed")
      end, {policy = policy.immediate})
      idle(ctx)
    end)
    h:advance(1)
    assert.equal("DEAD", h:state("root.p"))
    assert.equal("NEW", h:state("root.p.flush"))
    assert.equal(1, h:node("root.p").live)
    h:advance(5)
    -- restarted at t=6, after flush ended
    local restarts = h:events{dn = "root.p", kind = "state", reason = "restart"}
    assert.equal(1, #restarts)
    assert.equal(6, restarts[1].time)
  end)
end)

describe("L5 finished jobs do not run again", function()
  it("does not rerun prestart or poststart jobs while the parent lives", function()
    local runs = {migrate = 0, warm = 0}
    local h = with_parent(function(p)
      p:run("migrate", function(c)
        runs.migrate = runs.migrate + 1
        c:signal("healthy") c:signal("done")
      end, {lifecycle = "prestart"})
      p:run("app", function(c) c:signal("healthy") c:sleep(1) error("x") end,
        {policy = policy.immediate})
      p:run("warm", function(c)
        runs.warm = runs.warm + 1
        c:signal("healthy") c:signal("done")
      end, {lifecycle = "poststart"})
      idle(p)
    end)
    h:advance(5.5) -- app restarted 5 times (L6), coordinator unchanged
    assert.is_true(h:node("root.p.app").restarts >= 5)
    assert.same({migrate = 1, warm = 1}, runs)
    assert.equal("running", h:node("root.p").coordinator)
    assert.is_true(h:node("root.p.migrate").retired)
  end)
end)

describe("L6 restarts under policy leave the coordinator", function()
  it("restarts a crashed sidecar alone while main runs", function()
    local h = new()
    local proxy_runs = 0
    h:start(function(ctx)
      ctx:run("p", function(p)
        p:run("proxy", function(c)
          proxy_runs = proxy_runs + 1
          c:signal("healthy")
          if proxy_runs == 1 then c:sleep(3) error("proxy crashed") end
          c:wait()
        end, {lifecycle = "prestart", sidecar = true, policy = policy.constant(1)})
        p:run("app", idle)
        idle(p)
      end)
      idle(ctx)
    end)
    local before = #moves(h, "root.p")
    assert.equal("running", h:node("root.p").coordinator)
    h:advance(3)
    assert.equal("DEAD", h:state("root.p.proxy"))
    assert.equal("HEALTHY", h:state("root.p.app")) -- main keeps running
    h:advance(1)
    assert.equal("HEALTHY", h:state("root.p.proxy"))
    assert.equal(1, h:node("root.p.proxy").restarts)
    assert.equal(before, #moves(h, "root.p"))
    assert.equal("running", h:node("root.p").coordinator)
  end)
end)

describe("L7 gates only control starting", function()
  it("never stops a running child when a gate closes", function()
    local h = with_parent(function(p)
      -- a prestart job that keeps running (healthy, then done) while
      -- the prestart gate closes behind it
      p:run("slow", function(c)
        c:signal("healthy") c:signal("done")
        c:sleep(10)
      end, {lifecycle = "prestart"})
      p:run("app", idle)
      idle(p)
    end)
    assert.equal("running", h:node("root.p").coordinator)
    assert.is_true(h:node("root.p.slow").running)
    h:advance(10)
    assert.is_false(h:node("root.p.slow").running)
    assert.equal("DONE", h:state("root.p.slow"))
  end)

  it("never starts blocked children of a canceled parent, but poststop", function()
    local h = with_parent(function(p)
      p:run("pre", function(c) c:sleep(100) end, {lifecycle = "prestart"})
      p:run("app", idle)
      p:run("warm", idle, {lifecycle = "poststart"})
      p:run("flush", job(0), {lifecycle = "poststop"})
      idle(p)
    end)
    h:node("root.p"):stop()
    assert.equal("CANCELED", h:state("root.p.app"))
    assert.equal(0, h:node("root.p.app").incarnation)
    assert.is_false(h:node("root.p.app").blocked)
    assert.equal(0, h:node("root.p.warm").incarnation)
    assert.equal("DONE", h:state("root.p.flush"))
    assert.equal("CANCELED", h:state("root.p"))
  end)
end)

describe("L8 a prestart child that gives up", function()
  it("under never: main never starts, poststop runs, the failure is an event", function()
    local log = {}
    local h = with_parent(function(p)
      p:run("migrate", function(c) c:sleep(1) error("migration failed") end,
        {lifecycle = "prestart", policy = policy.never})
      p:run("proxy", service(0, log, "proxy"), {lifecycle = "prestart", sidecar = true})
      p:run("app", service(0, log, "app"))
      p:run("flush", job(1, log, "flush"), {lifecycle = "poststop"})
      idle(p)
    end)
    h:advance(1)
    assert.equal("DEAD", h:state("root.p.migrate"))
    assert.equal("CANCELED", h:state("root.p.app"))
    assert.equal(0, h:node("root.p.app").incarnation)
    assert.equal("CANCELED", h:state("root.p.proxy"))
    assert.equal("poststop", h:node("root.p").coordinator)
    local last = h:events{kind = "coordinator", dn = "root.p"}
    assert.matches("prestart child gave up", last[#last].reason)
    assert.equal("prestart", last[#last].from)
    h:advance(1)
    assert.same({"start proxy", "stop proxy", "start flush", "done flush"}, log)
    assert.equal("HEALTHY", h:state("root.p")) -- the parent is not affected
    h:advance(100)
    assert.equal(0, h:node("root.p.app").incarnation)
  end)

  it("under the default policy: retried with backoff, main waits", function()
    local tries = 0
    local h = with_parent(function(p)
      p:run("migrate", function(c)
        tries = tries + 1
        if tries < 4 then error("database not up") end
        c:signal("healthy") c:signal("done")
      end, {lifecycle = "prestart"})
      p:run("app", idle)
      idle(p)
    end)
    assert.equal("prestart", h:node("root.p").coordinator)
    assert.is_true(h:node("root.p.app").blocked)
    h:run_until(function() return h:state("root.p.app") == "HEALTHY" end, 60)
    assert.equal(4, tries)
    assert.equal("DONE", h:state("root.p.migrate"))
    assert.equal("running", h:node("root.p").coordinator)
  end)
end)

describe("a parent restart", function()
  it("replays the whole sequence from init", function()
    local log = {}
    local h = with_parent(app_parent(log))
    h:advance(12)
    assert.equal("running", h:node("root.p").coordinator)
    local mark = #log
    h:node("root.p"):restart()
    -- stopping: app and proxy stop (last started first), then flush runs
    assert.same({"stop app", "stop proxy", "start flush"},
      {table.unpack(log, mark + 1)})
    h:advance(1)
    -- the new incarnation: the coordinator starts again from init
    assert.same({"stop app", "stop proxy", "start flush", "done flush",
      "start migrate", "start proxy"}, {table.unpack(log, mark + 1)})
    assert.equal(2, h:node("root.p").incarnation)
    assert.equal("prestart", h:node("root.p").coordinator)
    assert.equal(1, h:node("root.p.migrate").incarnation) -- a fresh child
    assert.is_true(h:node("root.p.app").blocked)
    h:advance(20)
    assert.equal("running", h:node("root.p").coordinator)
    assert.equal("DONE", h:state("root.p.warm"))
    assert.same({"init>prestart", "prestart>main", "main>poststart",
      "poststart>running", "running>poststop", "poststop>init",
      "init>prestart", "prestart>main", "main>poststart", "poststart>running"},
      moves(h, "root.p"))
  end)
end)

describe("bad input", function()
  local function add_err(opts)
    local err
    local h = new()
    h:start(function(ctx)
      local ok, e = pcall(ctx.run, ctx, "x", idle, opts)
      err = e
      idle(ctx)
    end)
    assert.same({}, h.engine:node("root").children) -- nothing changed
    return err
  end

  it("rejects unknown lifecycle names", function()
    assert.equal("root: ctx:run: option 'lifecycle' must be \"prestart\", "
      .. "\"poststart\", \"poststop\" or \"main\", got \"prestrat\"",
      add_err{lifecycle = "prestrat"})
    assert.matches("option 'lifecycle' must be .* got number", add_err{lifecycle = 1})
  end)

  it("rejects sidecar on poststop and main, and non-boolean sidecar", function()
    assert.equal("root: ctx:run: option 'sidecar' is valid on prestart and "
      .. "poststart children only, not on a poststop child (L0)",
      add_err{lifecycle = "poststop", sidecar = true})
    assert.matches("not on a main child", add_err{sidecar = true})
    assert.equal("root: ctx:run: option 'sidecar' must be a boolean, got string",
      add_err{lifecycle = "prestart", sidecar = "yes"})
  end)

  it("rejects a prestart child once main has started", function()
    local err
    local h = new()
    h:start(function(ctx)
      ctx:run("app", idle)
      ctx:sleep(1)
      local ok, e = pcall(ctx.run, ctx, "late", idle, {lifecycle = "prestart"})
      err = e
      ok, e = pcall(ctx.group, ctx, {a = idle}, {lifecycle = "prestart"})
      assert(not ok and e:match("cannot add prestart child 'a'"))
      idle(ctx)
    end)
    h:advance(1)
    assert.equal("root: ctx:run: cannot add prestart child 'late': the "
      .. "coordinator is in state running and the prestart gate never opens "
      .. "again in this incarnation (L0)", err)
    assert.same({"app"}, h.engine:node("root").children)
  end)

  it("rejects lifecycle options on the root", function()
    local testing = require "arbor.testing"
    local h = testing.new()
    local ok, err = pcall(h.start, h, idle, {lifecycle = "prestart"})
    assert.is_false(ok)
    assert.matches("h:start: root: option 'lifecycle' is not allowed on the root", err)
    local arbor = require "arbor"
    ok, err = pcall(arbor.run, idle, {sidecar = true})
    assert.is_false(ok)
    assert.matches("arbor.run: root: option 'sidecar' is not allowed on the root", err)
    h:close()
  end)

  it("applies group options to every member", function()
    local h = new()
    h:start(function(ctx)
      ctx:group({a = job(1), b = job(2)}, {lifecycle = "prestart"})
      ctx:run("app", idle)
      idle(ctx)
    end)
    assert.equal("prestart", h:node("root.a").lifecycle)
    -- each member starts once: the group's release of b and the gate's
    -- start of b are the same start
    assert.equal(1, h:node("root.b").incarnation)
    assert.equal(1, h:node("root.a").incarnation)
    assert.is_true(h:node("root.app").blocked)
    h:advance(2)
    assert.equal("HEALTHY", h:state("root.app"))
  end)
end)

describe("events", function()
  it("records every coordinator move as a coordinator event", function()
    local h = with_parent(app_parent({}))
    h:advance(20)
    local evs = h:events{kind = "coordinator", dn = "root.p"}
    assert.equal(4, #evs)
    for _, ev in ipairs(evs) do
      assert.is_string(ev.reason)
      assert.equal(1, ev.incarnation)
    end
    assert.equal("main", evs[2].to)
    assert.matches("L1", evs[2].reason)
  end)
end)

describe("the worked example (docs/examples/lifecycle.lua)", function()
  it("orders migrate, proxy, app, warmup and flush", function()
    local h = new()
    h:start(dofile("docs/examples/lifecycle.lua"))
    assert.equal("prestart", h:node("root.shop").coordinator)
    assert.is_true(h:node("root.shop.app").blocked)
    h:advance(0.9) -- migrations applied, proxy healthy since 0.5
    assert.equal("NEW", h:state("root.shop.app"))
    assert.is_false(h:node("root.shop.app").blocked)
    h:advance(0.2)
    assert.equal("NEW", h:state("root.shop.warmup"))
    h:advance(2.5) -- five orders handled: main finished
    assert.equal("DONE", h:state("root.shop.app"))
    assert.equal("CANCELED", h:state("root.shop.proxy"))
    assert.equal("poststop", h:node("root.shop").coordinator)
    assert.equal("flushing 5 orders", h:logs("root.shop.flush")[1].line)
    h:advance(0.3)
    assert.equal("DONE", h:state("root.shop.flush"))
    assert.is_true(h.engine:finished())
  end)

  it("still flushes when stopped early", function()
    local h = new()
    h:start(dofile("docs/examples/lifecycle.lua"))
    h:advance(2)
    local took = h:stop()
    assert.is_true(math.abs(took - 0.3) < 1e-9)
    assert.equal("DONE", h:state("root.shop.flush"))
    assert.equal("CANCELED", h:state("root.shop.app"))
  end)
end)

describe("gated parents", function()
  it("are the parents of lifecycle children, in views, snapshots and renders", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("plain", function(c) c:run("a", idle) idle(c) end)
      ctx:run("shop", function(c)
        c:run("migrate", function(m) m:sleep(1) m:signal("healthy") m:signal("done") end,
          {lifecycle = "prestart"})
        c:run("app", idle)
        idle(c)
      end)
      idle(ctx)
    end)
    assert.is_nil(h:node("root.plain").gated) -- plain children: no coordinator
    assert.is_nil(h:node("root.plain").coordinator)
    assert.is_true(h:node("root.shop").gated)
    assert.is_nil(h:node("root.shop.app").gated) -- no children, no coordinator
    local drawn = require("arbor").render(h:tree())
    assert.matches("shop [HEALTHY] {prestart}", drawn, 1, true)
    assert.matches("plain [HEALTHY] up 0.0s\n", drawn, 1, true)
  end)
end)
