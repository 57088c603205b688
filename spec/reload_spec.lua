-- Issue 17: reload. A changed script applied to a running tree keeps the
-- nodes whose definition did not change (same incarnation, same state,
-- same counters), restarts the changed ones, stops the removed ones and
-- starts the new ones; a changed parent's new incarnation adopts its
-- children. On the virtual clock: the plan is built on a check engine
-- (arbor.cli.build) and carried out on the harness's engine.
local cli = require "arbor.cli"
local policy = require "arbor.policy"
local reload = require "arbor.reload"
local support = require "support"
local new, idle = support.new, support.idle

after_each(support.close_all)

-- Plans new_root against h's tree (whose root runnable is old_root) and
-- carries the plan out; returns the plan.
local function apply(h, old_root, new_root)
  local check, errors, kept = reload.build(h.engine, new_root, {})
  assert.same({}, errors)
  local plan = reload.plan(h.engine, check, {fn = old_root, opts = {policy = nil}},
    {fn = new_root, opts = {policy = nil}}, kept)
  cli.close_built(check)
  assert(reload.apply(h.engine, plan, new_root, nil))
  h:settle()
  return plan
end

local function actions(plan)
  local t = {}
  for _, s in ipairs(plan.steps) do t[s.dn] = s.action end
  return t
end

local function incarnation(h, dn) return h:node(dn).incarnation end

-- A leaf that says which version of the script made it.
local function leaf(version)
  return function(ctx) ctx:log(version) idle(ctx) end
end

-- root > a (unchanged), b (its version), c (only when with_c)
local function script(version, with_c)
  local a = function(ctx) idle(ctx) end
  return function(ctx)
    ctx:run("a", a)
    ctx:run("b", leaf(version))
    if with_c then ctx:run("c", function(c) idle(c) end) end
    idle(ctx)
  end
end

describe("reload", function()
  it("keeps unchanged nodes, restarts changed ones, stops removed ones, starts new ones", function()
    local h = new()
    local v1 = script("v1", true)
    h:start(v1)
    local a, b = incarnation(h, "root.a"), incarnation(h, "root.b")
    local v2 = function(ctx)
      ctx:run("a", function(c) idle(c) end)
      ctx:run("b", leaf("v2"))
      ctx:run("d", function(c) idle(c) end)
      idle(ctx)
    end
    local plan = apply(h, v1, v2)
    assert.same({root = "reload", ["root.a"] = "keep", ["root.b"] = "restart",
      ["root.c"] = "stop", ["root.d"] = "start"}, actions(plan))
    assert.equal(a, incarnation(h, "root.a"))
    assert.equal("HEALTHY", h:state("root.a"))
    assert.equal(b + 1, incarnation(h, "root.b"))
    assert.equal("v2", h:logs("root.b")[#h:logs("root.b")].line)
    assert.is_nil(h:node("root.c"))
    assert.equal("HEALTHY", h:state("root.d"))
    assert.equal(1, #h:events{dn = "root.a", kind = "restored"})
    assert.equal(0, #h:events{dn = "root.a", kind = "state", to = "CANCELED"})
  end)

  it("keeps everything when nothing changed, without a new root incarnation", function()
    local h = new()
    local v1 = script("v1")
    h:start(v1)
    local plan = apply(h, v1, script("v1"))
    assert.equal("keep", actions(plan).root)
    assert.equal(1, incarnation(h, "root"))
    assert.equal(1, incarnation(h, "root.b"))
  end)

  it("a changed parent's new incarnation adopts its unchanged children, level by level", function()
    local h = new()
    local function tree(version)
      local worker = function(ctx) idle(ctx) end
      return function(ctx)
        ctx:run("sup", function(c)
          c:run("w1", worker)
          c:run("w2", leaf(version))
          c:log("sup " .. version)
          idle(c)
        end)
        idle(ctx)
      end
    end
    local v1 = tree("v1")
    h:start(v1)
    local plan = apply(h, v1, tree("v2"))
    assert.same({root = "reload", ["root.sup"] = "reload", ["root.sup.w1"] = "keep",
      ["root.sup.w2"] = "restart"}, actions(plan))
    assert.equal(2, incarnation(h, "root.sup"))
    assert.equal(1, incarnation(h, "root.sup.w1"))
    assert.equal(2, incarnation(h, "root.sup.w2"))
    assert.equal(1, #h:events{dn = "root.sup.w1", kind = "restored"})
  end)

  it("keeps children whose stock policies their changed parent makes anew, also after it restarted (issue 25)", function()
    local h = new()
    local function app(version)
      return function(ctx)
        ctx:run("web", function(c) idle(c) end, {policy = policy.exponential()})
        ctx:run("worker", function(c) idle(c) end, {policy = policy.decaying{pause = 3}})
        ctx:run("db", function(c) idle(c) end, {policy = policy.chain(
          policy.intensity{max = 20, period = 60}, policy.exponential{reset_after = 600})})
        ctx:log(version)
        idle(ctx)
      end
    end
    local v1 = function(ctx) ctx:run("app", app("v1")) idle(ctx) end
    h:start(v1)
    h.engine:restart("root.app") -- its children and their policies made again
    h:settle()
    for _ = 1, 100 do policy.exponential() policy.decaying() end
    local web, worker, db = incarnation(h, "root.app.web"), incarnation(h, "root.app.worker"),
      incarnation(h, "root.app.db")
    local v2 = function(ctx) ctx:run("app", app("v2")) idle(ctx) end
    local plan = apply(h, v1, v2)
    assert.same({root = "reload", ["root.app"] = "reload", ["root.app.web"] = "keep",
      ["root.app.worker"] = "keep", ["root.app.db"] = "keep"}, actions(plan))
    assert.equal("its runnable changed", plan.steps[2].why)
    assert.equal(web, incarnation(h, "root.app.web"))
    assert.equal(worker, incarnation(h, "root.app.worker"))
    assert.equal(db, incarnation(h, "root.app.db"))
  end)

  it("says in the plan and the event which part of a definition changed", function()
    local h = new()
    local function v(grace)
      return function(ctx)
        ctx:run("svc", function(c) idle(c) end, {shutdown = grace, policy = policy.exponential()})
        idle(ctx)
      end
    end
    local v1 = v(5)
    h:start(v1)
    local plan = apply(h, v1, v(6))
    assert.same({dn = "root.svc", action = "restart", why = "its option shutdown changed"}, plan.steps[2])
    local evs = h:events{dn = "root.svc", kind = "reload"}
    assert.equal("restarted: its option shutdown changed", evs[#evs].reason)
  end)

  it("carries failure history over: a node one failure from giving up gives up at the next", function()
    local h = new()
    local function tree(version)
      local crashes = function(ctx) ctx:signal("healthy") ctx:wait() end
      return function(ctx)
        ctx:run("w", crashes, {policy = policy.intensity{max = 2, period = 100, exceeded = "stop"}})
        ctx:log(version)
        idle(ctx)
      end
    end
    local v1 = tree("v1")
    h:start(v1)
    h:fail("root.w", "boom")
    h:settle()
    h:fail("root.w", "boom")
    h:settle()
    assert.equal("HEALTHY", h:state("root.w"))
    assert.equal(2, h:node("root.w").restarts)
    apply(h, v1, tree("v2"))
    assert.equal(1, #h:events{dn = "root.w", kind = "restored"})
    assert.equal(2, h:node("root.w").restarts)
    h:fail("root.w", "boom")
    h:settle()
    assert.equal("DEAD", h:state("root.w"))
    assert.matches("given up", h:explain("root.w"))
  end)

  it("keeps a runtime swap in force on an adopted node", function()
    local h = new()
    local v1 = script("v1")
    h:start(v1)
    h:node("root.a"):swap(function(ctx) ctx:log("swapped") idle(ctx) end)
    h:settle()
    apply(h, v1, script("v2"))
    assert.equal(1, #h:events{dn = "root.a", kind = "restored"})
    h:node("root.a"):restart()
    h:settle()
    assert.equal("swapped", h:logs("root.a")[#h:logs("root.a")].line)
    assert.is_true(h:node("root.a").overridden.runnable)
  end)

  it("adopts a group whose members did not change, ring and all", function()
    local h = new()
    local function tree(version)
      local m = function(ctx) idle(ctx) end
      return function(ctx)
        ctx:group({x = m, y = m}, {strategy = "one_for_all"})
        ctx:log(version)
        idle(ctx)
      end
    end
    local v1 = tree("v1")
    h:start(v1)
    local plan = apply(h, v1, tree("v2"))
    assert.same({root = "reload", ["root.x"] = "keep", ["root.y"] = "keep"}, actions(plan))
    assert.equal(1, incarnation(h, "root.x"))
    -- still one group: a member's death restarts the other (one_for_all)
    h:fail("root.x", "boom")
    h:settle()
    h:advance(5)
    assert.equal(2, incarnation(h, "root.y"))
  end)

  it("restarts a parent whole when its groups changed members", function()
    local h = new()
    local m = function(ctx) idle(ctx) end
    local v1 = function(ctx) ctx:group({x = m, y = m}) idle(ctx) end
    local v2 = function(ctx) ctx:group({x = m, z = m}) idle(ctx) end
    h:start(v1)
    local plan = apply(h, v1, v2)
    assert.same({root = "restart", ["root.x"] = "restart", ["root.y"] = "stop",
      ["root.z"] = "start"}, actions(plan))
    assert.equal(2, incarnation(h, "root"))
    assert.is_nil(h:node("root.y"))
    assert.equal("HEALTHY", h:state("root.z"))
  end)

  it("restarts a parent whole when a child's lifecycle changed", function()
    local h = new()
    local m = function(ctx) idle(ctx) end
    local v1 = function(ctx) ctx:run("a", m) ctx:run("b", m) idle(ctx) end
    local v2 = function(ctx) ctx:run("a", m) ctx:run("b", m, {lifecycle = "poststart", sidecar = true}) idle(ctx) end
    h:start(v1)
    local plan = apply(h, v1, v2)
    assert.equal("restart", actions(plan).root)
    assert.equal(2, incarnation(h, "root"))
    assert.equal(0, #h:events{kind = "restored"})
  end)

  it("a coordinator is not handed the restart of a node it does not see", function()
    local h = new()
    local m = function(ctx) idle(ctx) end
    local v1 = function(ctx) ctx:run("a", m) ctx:log("v1") idle(ctx) end
    h:start(v1)
    apply(h, v1, function(ctx) ctx:run("a", m) ctx:log("v2") idle(ctx) end)
    assert.is_nil(h:node("root").coordinator)
  end)

  it("a node given up stays given up when it is kept", function()
    local h = new()
    local v1 = function(ctx)
      ctx:run("w", function(c) idle(c) end, {policy = policy.never()})
      idle(ctx)
    end
    h:start(v1)
    h:fail("root.w", "boom")
    h:settle()
    assert.equal("DEAD", h:state("root.w"))
    -- w's definition is the same (never() builds an equal policy); it does
    -- not run, so adopting it is not enough: it is started
    apply(h, v1, function(ctx)
      ctx:run("w", function(c) idle(c) end, {policy = policy.never()})
      ctx:log("v2")
      idle(ctx)
    end)
    assert.equal("DEAD", h:state("root.w")) -- held: policy never gave up on it
  end)

  it("a tree stopped while the parent's old incarnation is still ending stops the kept children too", function()
    local h = new()
    local slow = function(ctx)
      ctx:run("w", function(c) idle(c) end)
      ctx:signal("healthy")
      local ok = pcall(ctx.wait, ctx)
      assert(not ok)
      ctx:shield(function() ctx:sleep(1) end) -- takes a second to end
    end
    h:start(slow)
    assert(h.engine:reload("root", function(ctx) ctx:run("w", function(c) idle(c) end) idle(ctx) end))
    h:settle()
    assert.is_true(h.engine:reloading())
    h:stop()
    h:advance(10)
    assert.is_true(h.engine:finished())
    assert.equal("CANCELED", h:state("root.w"))
    assert.is_false(h.engine:reloading())
  end)

  it("a new incarnation that fails in its first step removes what it did not adopt; its policy decides", function()
    local h = new()
    local v1 = script("v1", true)
    h:start(v1)
    assert(h.engine:reload("root", function(ctx)
      ctx:run("a", function(c) idle(c) end)
      error("broken")
    end))
    h:settle()
    assert.is_nil(h:node("root.c"))
    assert.is_false(h.engine:reloading())
    assert.equal(1, #h:events{dn = "root", kind = "state", to = "DEAD"})
  end)

  it("refuses a reload of a node whose reload is under way", function()
    local h = new()
    local slow = function(ctx)
      ctx:run("w", function(c) idle(c) end)
      ctx:signal("healthy")
      pcall(ctx.wait, ctx)
      ctx:shield(function() ctx:sleep(1) end)
    end
    h:start(slow)
    assert(h.engine:reload("root", slow))
    h:settle()
    local ok, err = h.engine:reload("root", slow)
    assert.is_nil(ok)
    assert.equal("reload root: a reload of it is under way", err)
    h:advance(2)
    assert.is_false(h.engine:reloading())
    assert.equal(1, incarnation(h, "root.w"))
  end)
end)

-- The lifecycle stack of docs/lifecycle.md as the root: migrate (a
-- prestart job), proxy (a prestart sidecar), app (main), warm (a poststart
-- job), flush (poststop); each start and end goes to log.
local function job(log, name, seconds)
  return function(c)
    log[#log + 1] = "start " .. name
    c:sleep(seconds or 0)
    c:signal("healthy")
    c:signal("done")
  end
end

local function service(log, name)
  return function(c)
    log[#log + 1] = "start " .. name
    c:signal("healthy")
    local ok, err = pcall(c.wait, c)
    log[#log + 1] = "stop " .. name
    error(err, 0)
  end
end

local function stack(log, version, migrate)
  local m = migrate or job(log, "migrate", 2)
  local proxy, app, warm = service(log, "proxy"), service(log, "app"), job(log, "warm", 1)
  local flush = job(log, "flush", 1)
  return function(p)
    p:run("migrate", m, {lifecycle = "prestart"})
    p:run("proxy", proxy, {lifecycle = "prestart", sidecar = true})
    p:run("app", app)
    p:run("warm", warm, {lifecycle = "poststart"})
    p:run("flush", flush, {lifecycle = "poststop"})
    p:log(version)
    p:signal("healthy")
    p:wait()
  end
end

local function count(log, line)
  local n = 0
  for _, l in ipairs(log) do if l == line then n = n + 1 end end
  return n
end

describe("reload of a parent with lifecycle gates (Nomad's restore)", function()
  it("does not run completed prestart and poststart jobs again, adopts sidecars and main, runs no poststop", function()
    local h, log = new(), {}
    local v1 = stack(log, "v1")
    h:start(v1)
    h:advance(5)
    assert.equal("running", h:node("root").coordinator)
    local plan = apply(h, v1, stack(log, "v2"))
    assert.equal("reload", actions(plan).root)
    h:advance(5)
    assert.equal(1, count(log, "start migrate"))
    assert.equal(1, count(log, "start warm"))
    assert.equal(1, count(log, "start proxy"))
    assert.equal(1, count(log, "start app"))
    assert.equal(0, count(log, "stop app"))
    assert.equal(0, count(log, "start flush"))
    assert.equal(1, incarnation(h, "root.app"))
    assert.equal("running", h:node("root").coordinator)
    -- poststop runs when the parent really stops, once
    h:stop()
    h:advance(10)
    assert.equal(1, count(log, "start flush"))
  end)

  it("resumes a parent reloaded in the middle of its prestart phase from there", function()
    local h, log = new(), {}
    local v1 = stack(log, "v1")
    h:start(v1)
    h:advance(1) -- migrate runs (2 s)
    assert.equal("prestart", h:node("root").coordinator)
    assert.equal(0, count(log, "start app"))
    apply(h, v1, stack(log, "v2"))
    assert.equal(1, incarnation(h, "root.migrate"))
    h:advance(1.5) -- migrate ends: main starts
    assert.equal(1, count(log, "start migrate"))
    assert.equal(1, count(log, "start app"))
    h:advance(2)
    assert.equal("running", h:node("root").coordinator)
  end)

  it("does not run a finished prestart job again when its definition changed", function()
    local h, log = new(), {}
    local v1 = stack(log, "v1")
    h:start(v1)
    h:advance(5)
    apply(h, v1, stack(log, "v2", job(log, "migrate", 3)))
    h:advance(5)
    assert.equal(1, count(log, "start migrate"))
    local ev = h:events{dn = "root.migrate", kind = "reload"}
    assert.matches("finished in this incarnation of its parent, not run again", ev[#ev].reason)
  end)
end)

describe("reading a script again", function()
  local path = os.tmpname()
  after_each(function() os.remove(path) end)

  local function write(text)
    local f = assert(io.open(path, "w"))
    f:write(text)
    f:close()
  end

  it("gives what the script passes to arbor.run, and runs nothing after it", function()
    write([[
      local arbor = require "arbor"
      local x = ...
      arbor.run(function(ctx) return x end, {shutdown = 3})
      error("not reached")
    ]])
    local root, opts = reload.load(path, {"hello"})
    assert.is_function(root)
    assert.equal("hello", root())
    assert.same({shutdown = 3}, opts)
  end)

  it("gives a returned root runnable", function()
    write("return function(ctx) end")
    local root, opts = reload.load(path, {})
    assert.is_function(root)
    assert.same({}, opts)
  end)

  it("says why a script cannot be read, with the user's file:line", function()
    write("local x = \n")
    local root, err = reload.load(path, {})
    assert.is_nil(root)
    assert.matches(path .. ":2:", err, 1, true)
    write("error('bad')\n")
    root, err = reload.load(path, {})
    assert.is_nil(root)
    assert.matches("script error: " .. path .. ":1: bad", err, 1, true)
    write("local y = 1\n")
    root, err = reload.load(path, {})
    assert.equal("the script neither called arbor.run nor returned a root runnable", err)
  end)
end)

describe("reading a script and building its tree within a bound (issue 25)", function()
  local core = require "arbor.core"
  local WHAT = "it ran %d ms without yielding (limit %d ms)"

  it("gives what the call returns when it returns in time", function()
    assert.same({true, 1, nil, 3}, {core.bounded(1, WHAT, function(a, b) return a, nil, b end, 1, 3)})
    local ok, err, passed = core.bounded(1, WHAT, function() error("bad", 0) end)
    assert.same({false, "bad", false}, {ok, err, passed})
  end)

  it("stops a loop, also inside pcall and inside a coroutine", function()
    for _, fn in ipairs{
      function() while true do end end,
      function() while true do pcall(function() while true do end end) end end,
      function() coroutine.wrap(function() while true do end end)() end,
    } do
      local ok, err, passed = core.bounded(0.2, WHAT, fn)
      assert.is_false(ok)
      assert.is_true(passed)
      assert.matches("^it ran %d+ ms without yielding %(limit 200 ms%)$", err)
    end
    -- and leaves no hook behind
    assert.same({true, 7}, {core.bounded(0.2, WHAT, function() return 7 end)})
    local co = coroutine.create(function() for _ = 1, 1e6 do end return "done" end)
    assert.same({true, "done"}, {coroutine.resume(co)})
  end)

  it("interrupts a call blocked in the kernel: opening a FIFO nobody writes", function()
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir " .. dir .. " && mkfifo " .. dir .. "/fifo"))
    finally(function() os.execute("rm -rf " .. dir) end)
    local ok, err, passed = core.bounded(0.2, WHAT, function()
      local f = io.open(dir .. "/fifo")
      return f and f:read("a")
    end)
    assert.is_false(ok)
    assert.is_true(passed)
    assert.matches("without yielding", err)
  end)

  it("a tree whose build runs longer than the bound is not built further", function()
    local os_clock = os.clock
    local root = function(ctx)
      ctx:run("busy", function(c)
        c:signal("healthy")
        while true do -- 20 ms of CPU per virtual millisecond
          local t = os_clock() + 0.02
          repeat until os_clock() > t
          c:sleep(0.001)
        end
      end)
      ctx:signal("healthy")
      ctx:wait()
    end
    local e, errors = cli.build(root, {}, nil, 0.3)
    cli.close_built(e)
    assert.equal(1, #errors)
    assert.is_true(errors[1].passed)
    assert.matches("^building its tree ran %d+ ms without yielding %(limit 300 ms%)$", errors[1].reason)
  end)
end)
