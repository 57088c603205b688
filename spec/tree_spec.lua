-- The tree: DNs (T1), names (T2), incarnations and stale contexts (T3),
-- states and signal misuse (T4), dynamic children (T10), node views (T13a)
-- and runtime operations on nodes (T13). All on the virtual clock.
local testing = require "arbor.testing"
local arbor = require "arbor"
local policy = require "arbor.policy"

local support = require "support"
local idle = support.idle
local transitions = support.transitions

describe("T1 DNs", function()
  it("names the root 'root' and joins names with dots", function()
    local h = testing.new{seed = 1}
    local seen = {}
    h:start(function(ctx)
      seen[#seen + 1] = {ctx.dn, ctx.name}
      ctx:run("api", function(api)
        seen[#seen + 1] = {api.dn, api.name}
        api:run("http", function(http)
          seen[#seen + 1] = {http.dn, http.name}
          idle(http)
        end)
        idle(api)
      end)
      idle(ctx)
    end)
    assert.same({{"root", "root"}, {"root.api", "api"},
      {"root.api.http", "http"}}, seen)
    assert.equal("HEALTHY", h:state("root.api.http"))
    assert.equal("root.api.http", h:node("root.api.http").dn)
    assert.equal("root.api", h.engine:node("root.api.http").parent)
    local tree = h:tree()
    assert.equal("root", tree.dn)
    assert.equal("root.api", tree.children[1].dn)
    assert.equal("root.api.http", tree.children[1].children[1].dn)
    -- events address nodes by DN too
    assert.equal(1, #h:events{dn = "root.api.http", to = "HEALTHY"})
  end)

  it("does not find nodes by partial or malformed DNs", function()
    local h = testing.new{seed = 1}
    h:start(function(ctx)
      ctx:run("api", idle)
      idle(ctx)
    end)
    assert.is_nil(h:state("api"))
    assert.is_nil(h:state("root."))
    assert.is_nil(h:state("rootapi"))
    assert.is_nil(h:state("root.api.x"))
    local v, err = h:node("root.nope")
    assert.is_nil(v)
    assert.matches("no node root.nope", err, 1, true)
  end)

  -- A chain of `depth` nodes below the root, named level0001, level0002...
  -- (DNs of about 10 bytes a level); each records its ctx.dn and what
  -- arbor.node(ctx.dn) says from inside; the deepest runs `leaf`.
  local function chain(depth, leaf, opts)
    local seen = {}
    local function level(d)
      return function(c)
        local view = arbor.node(c.dn)
        seen[d] = {dn = c.dn, found = view and view.dn}
        if d == depth then return leaf(c) end
        c:run(string.format("level%04d", d + 1), level(d + 1), opts)
        idle(c)
      end
    end
    return level(0), seen
  end

  for _, depth in ipairs{600, 1500} do
    it("gives every node of a " .. depth .. "-deep chain its whole DN", function()
      local h = support.new()
      local logged = {}
      h.engine:set_log(function(dn, line) logged[#logged + 1] = {dn, line} end)
      local misuse
      local root, seen = chain(depth, function(c)
        c:log("deep")
        misuse = select(2, pcall(c.signal, c, "bogus"))
        idle(c)
      end)
      h:start(root)
      local expect, distinct = "root", {}
      for d = 0, depth do
        if d > 0 then expect = expect .. string.format(".level%04d", d) end
        assert.equal(expect, seen[d].dn)
        assert.equal(expect, seen[d].found)
        assert.is_nil(distinct[seen[d].dn])
        distinct[seen[d].dn] = true
      end
      assert.is_true(#expect > 1024 * (depth // 600))
      local deepest = h:node(expect)
      assert.equal(expect, deepest.dn)
      assert.equal(string.format("level%04d", depth), deepest.name)
      assert.equal(seen[depth - 1].dn, deepest.parent)
      assert.equal("HEALTHY", deepest.state)
      -- events, logs and error messages carry it whole
      local healthy = 0 -- among the last events (all of them would form
      for _, ev in ipairs(h.engine:events(20)) do -- megabytes of DNs)
        if ev.dn == expect and ev.to == "HEALTHY" then healthy = healthy + 1 end
      end
      assert.equal(1, healthy)
      assert.same({{expect, "deep"}}, logged)
      assert.equal(expect .. ": unknown signal", misuse:sub(1, #expect + 16))
      -- so do tree snapshots, in Lua and in JSON
      local t = h:tree()
      for _ = 1, depth do t = t.children[1] end
      assert.equal(expect, t.dn)
      local json = require("arbor.core").tree_json(h.engine, seen[depth - 1].dn)
      assert.matches('"dn":"' .. expect .. '"', json, 1, true)
      h:stop()
    end)
  end

  -- Issue 13: restarting a 10,000-deep chain took 10 s, each start and exit
  -- walking to the root. The engine counts the nodes its walks towards the
  -- root visit (tree_steps): per node restarted it must not grow with depth.
  it("restarts a deep chain in steps linear in its depth", function()
    local per_node = {}
    for _, depth in ipairs{500, 1000, 2000} do
      local h = support.new()
      local function level(d) -- reads no DN
        return function(c)
          if d < depth then
            c:run("n" .. d + 1, level(d + 1), {policy = policy.immediate})
          end
          idle(c)
        end
      end
      h:start(level(0))
      local function restarted(act)
        local before = h:stats().tree_steps
        act()
        assert.equal(depth + 1, h:stats().live)
        return (h:stats().tree_steps - before) / depth
      end
      per_node[depth] = {
        restarted(function() h:node("root"):restart() end),
        restarted(function() h:fail("root.n1") end),
      }
      h:close()
    end
    for depth, steps in pairs(per_node) do
      for i = 1, 2 do
        assert(steps[i] <= 8, string.format("%.1f steps per node at depth %d",
          steps[i], depth))
      end
    end
  end)

  it("puts whole DNs into policy events and escalation messages", function()
    local h = support.new()
    local depth, policy_dn = 150, nil
    local root, seen = chain(depth, function(c)
      c:signal("healthy")
      c:sleep(1)
      error("deep failure")
    end, {policy = function(ev)
      policy_dn = policy_dn or ev.dn -- the first decision is the deepest's
      return ev.dn == policy_dn and "escalate" or "stop"
    end})
    h:start(root)
    h:advance(1)
    local deep, parent = seen[depth].dn, seen[depth - 1].dn
    assert.is_true(#deep > 1024)
    assert.equal(deep, policy_dn)
    assert.equal("child " .. deep .. " escalated: ",
      h:node(parent).error:sub(1, #deep + 18))
    h:stop()
  end)
end)

describe("T2 names", function()
  local function try_names(names)
    local h = testing.new{seed = 1}
    local results = {}
    local after = false
    h:start(function(ctx)
      ctx:signal("healthy")
      for i, name in ipairs(names) do
        local ok, err = pcall(ctx.run, ctx, name, idle)
        results[i] = {ok = ok, err = err}
      end
      after = true -- the runnable caught the errors and keeps running
      ctx:wait()
    end)
    return h, results, after
  end

  it("rejects invalid names with the parent DN, the name and the rule", function()
    local bad = {"a.b", "", string.rep("x", 65), "sp ace", "é", "a/b", "a\0b"}
    local h, results, after = try_names(bad)
    assert.is_true(after)
    assert.equal("HEALTHY", h:state("root"))
    for i, name in ipairs(bad) do
      local r = results[i]
      assert.is_false(r.ok, "accepted " .. name)
      assert.is_string(r.err)
      assert.matches("^root: ", r.err)
      if #name > 64 then -- cut, with its length
        assert.matches("'" .. name:sub(1, 64) .. "... (65 bytes)'", r.err, 1, true)
      else
        assert.matches("'" .. name:gsub("%z.*", "") , r.err, 1, true)
      end
      assert.matches("T2", r.err, 1, true)
      assert.matches("^[A-Za-z0-9_-]{1,64}$", r.err, 1, true)
    end
    -- nothing was added
    assert.same({}, h.engine:node("root").children)
    assert.equal(2, #h:events()) -- root NEW>NEW (start), NEW>HEALTHY
  end)

  it("accepts names of 1 and 64 characters made of the allowed set", function()
    local long = string.rep("y", 64)
    local h, results = try_names{"a", long, "A-z_0-9"}
    for i = 1, 3 do assert.is_true(results[i].ok, tostring(results[i].err)) end
    assert.equal("HEALTHY", h:state("root.a"))
    assert.equal("HEALTHY", h:state("root." .. long))
    assert.equal("HEALTHY", h:state("root.A-z_0-9"))
  end)

  it("rejects a non-string name", function()
    local h, results, after = try_names{42, true}
    assert.is_true(after)
    for i = 1, 2 do
      assert.is_false(results[i].ok)
      assert.matches("^root: ", results[i].err)
      assert.matches("name must be a string", results[i].err, 1, true)
    end
    assert.same({}, h.engine:node("root").children)
  end)

  it("rejects a duplicate name and leaves the first child alone", function()
    local h, results, after = try_names{"w", "w"}
    assert.is_true(after)
    assert.is_true(results[1].ok)
    assert.is_false(results[2].ok)
    assert.matches("^root: duplicate child name 'w'", results[2].err)
    assert.matches("T2", results[2].err, 1, true)
    assert.same({"w"}, h.engine:node("root").children)
    assert.equal("HEALTHY", h:state("root.w"))
    assert.equal(1, h:node("root.w").incarnation)
    assert.same({"NEW>NEW", "NEW>HEALTHY"}, transitions(h, "root.w"))
  end)

  it("names the parent DN of a nested parent", function()
    local h = testing.new{seed = 1}
    local err
    h:start(function(ctx)
      ctx:run("api", function(api)
        api:signal("healthy")
        local _
        _, err = pcall(api.run, api, "x.y", idle)
        api:wait()
      end)
      idle(ctx)
    end)
    assert.matches("^root%.api: invalid child name 'x%.y'", err)
    assert.equal("HEALTHY", h:state("root.api"))
  end)

  it("checks every ctx:group member before adding any", function()
    local h = testing.new{seed = 1}
    local bad, dup
    h:start(function(ctx)
      ctx:signal("healthy")
      ctx:run("taken", idle)
      local _
      _, bad = pcall(ctx.group, ctx, {a = idle, ["b.c"] = idle, d = idle})
      _, dup = pcall(ctx.group, ctx, {a = idle, taken = idle, z = idle})
      ctx:wait()
    end)
    assert.matches("^root: invalid child name 'b%.c'", bad)
    assert.matches("^root: duplicate child name 'taken'", dup)
    assert.same({"taken"}, h.engine:node("root").children)
  end)

  -- Issue 13: a 10,000-character name came back whole in the error. What a
  -- message echoes of the caller's input is cut to its first 64 bytes, then
  -- "..." and its length.
  it("cuts a huge name, option, value or DN it echoes in an error", function()
    local huge = string.rep("x", 10000)
    local cut = string.rep("x", 64) .. "... (10000 bytes)"
    local errs = {}
    local h = support.new()
    h:start(function(ctx)
      ctx:signal("healthy")
      local function try(fn, ...) -- what it raised, or the message it returned
        local r = table.pack(pcall(fn, ...))
        errs[#errs + 1] = r[1] and r[3] or r[2]
      end
      try(ctx.run, ctx, huge, idle)
      try(ctx.run, ctx, huge, "not a function")
      try(ctx.group, ctx, {[huge] = idle})
      try(ctx.group, ctx, {[huge] = 42})
      try(ctx.run, ctx, "w", idle, {[huge] = 1})
      try(ctx.run, ctx, "w", idle, {lifecycle = huge})
      try(ctx.group, ctx, {w = idle}, {strategy = huge})
      try(ctx.signal, ctx, huge)
      try(arbor.node, "root." .. huge)
      try(arbor.explain, "root." .. huge)
      ctx:run("w", idle)
      local w = arbor.node("root.w")
      try(w.swap, w, idle, {[huge] = true})
      try(policy.exponential, {[huge] = 1})
      try(policy.simulate, policy.immediate, {1}, {[huge] = 1})
      ctx:wait()
    end)
    errs[#errs + 1] = select(2, h:node("root." .. huge))
    errs[#errs + 1] = select(2, h:explain("root." .. huge))
    for _, op in ipairs{"restart", "cancel", "hold", "logs"} do
      errs[#errs + 1] = select(2, pcall(h.engine[op], h.engine, "root." .. huge))
    end
    local core = require "arbor.core"
    errs[#errs + 1] = select(2, pcall(core.tree_json, h.engine, "root." .. huge))
    errs[#errs + 1] = select(2, pcall(testing.new, {[huge] = 1}))
    errs[#errs + 1] = select(2, pcall(arbor.run, idle, {[huge] = 1}))
    assert.equal(22, #errs)
    for i, err in ipairs(errs) do
      assert.is_string(err, "error " .. i)
      -- the name, or the DN "root." .. huge
      assert.matches("x%.%.%. %(1000[05] bytes%)", err)
      assert(#err < 400, string.format("error %d is %d bytes: %s...", i, #err,
        err:sub(1, 200)))
    end
    assert.matches("invalid child name '" .. cut .. "'", errs[1], 1, true)
  end)

  it("kills the runnable that does not catch the error (DEAD)", function()
    local h = testing.new{seed = 1}
    h:start(function(ctx)
      ctx:run("p", function(p)
        p:signal("healthy")
        p:run("bad.name", idle)
        p:wait()
      end, {policy = policy.never})
      idle(ctx)
    end)
    assert.equal("DEAD", h:state("root.p"))
    assert.matches("invalid child name 'bad.name'", h:node("root.p").error, 1, true)
    assert.equal("HEALTHY", h:state("root"))
  end)
end)

describe("ctx:run and ctx:group arguments", function()
  local function try(fn)
    local h = testing.new{seed = 1}
    local err
    local after = false
    h:start(function(ctx)
      ctx:signal("healthy")
      local ok
      ok, err = pcall(fn, ctx)
      assert(not ok, "accepted")
      after = true
      ctx:wait()
    end)
    assert.is_true(after)
    assert.same({}, h.engine:node("root").children)
    assert.equal("HEALTHY", h:state("root"))
    return err
  end

  it("refuses a runnable that is not a function", function()
    local err = try(function(ctx) ctx:run("w", "not a function") end)
    assert.matches("root: ctx:run('w', fn): the runnable must be a function, got string",
      err, 1, true)
    err = try(function(ctx) ctx:group{w = 42} end)
    assert.matches("root: ctx:group: member 'w' must be a function, got number", err, 1, true)
    err = try(function(ctx) ctx:group{idle} end)
    assert.matches("root: ctx:group: member names must be strings, got number", err, 1, true)
    err = try(function(ctx) ctx:group("w") end)
    assert.matches("root: ctx:group(members): want a table", err, 1, true)
  end)

  it("refuses a policy that is not a function", function()
    local err = try(function(ctx) ctx:run("w", idle, {policy = "never"}) end)
    assert.matches("root: ctx:run: option 'policy' must be a function, got string",
      err, 1, true)
    err = try(function(ctx) ctx:group({w = idle}, {policy = 3}) end)
    assert.matches("root: ctx:group: option 'policy' must be a function, got number",
      err, 1, true)
  end)

  it("refuses a bad shutdown, unknown options and non-table options", function()
    for _, bad in ipairs{-1, 0 / 0, math.huge, "5"} do
      local err = try(function(ctx) ctx:run("w", idle, {shutdown = bad}) end)
      assert.matches("root: ctx:run: option 'shutdown' must be a finite number >= 0",
        err, 1, true)
    end
    local err = try(function(ctx) ctx:run("w", idle, {polcy = policy.never}) end)
    assert.matches("root: ctx:run: unknown option 'polcy'", err, 1, true)
    err = try(function(ctx) ctx:run("w", idle, "fast") end)
    assert.matches("root: ctx:run: options must be a table, got string", err, 1, true)
  end)
end)

describe("T3 stale contexts", function()
  it("refuses a ctx of an ended incarnation and leaves the next one alone", function()
    local h = testing.new{seed = 1}
    local old
    local results = {}
    h:start(function(ctx)
      ctx:run("w", function(c)
        if c.incarnation == 1 then
          old = c
          idle(c)
        else
          assert(old ~= c)
          local function try(name, ...)
            local ok, err = pcall(old[name], old, ...)
            results[name] = ok and "ok" or err
          end
          try("signal", "healthy")
          try("run", "child", idle)
          try("group", {g = idle})
          try("sleep", 1)
          try("wait")
          try("log", "hello")
          results.canceled = old:canceled()
          results.own_canceled = c:canceled()
          -- the new incarnation itself is unaffected and keeps working
          c:sleep(1)
          results.slept = arbor.now()
          idle(c)
        end
      end)
      idle(ctx)
    end)
    local w = h:node("root.w")
    assert.equal(1, w.incarnation)
    w:cancel()
    h:settle()
    assert.equal(2, w.incarnation)
    for _, name in ipairs{"signal", "run", "group", "sleep", "wait", "log"} do
      assert.is_string(results[name], name)
      assert.matches("stale context", results[name], 1, true)
      assert.matches("root.w incarnation 1", results[name], 1, true)
    end
    assert.is_true(results.canceled)
    assert.is_false(results.own_canceled)
    -- the stale signal did not make the new incarnation HEALTHY, the stale
    -- run/group added nothing, the stale log wrote nothing
    assert.equal("NEW", h:state("root.w"))
    assert.same({}, h.engine:node("root.w").children)
    assert.same({}, h:logs("root.w"))
    h:advance(1)
    assert.equal(1, results.slept)
    assert.equal("HEALTHY", h:state("root.w"))
    assert.equal(2, w.incarnation)
  end)

  it("refuses a stale ctx used from outside the tree", function()
    local h = testing.new{seed = 1}
    local old
    h:start(function(ctx)
      ctx:run("w", function(c)
        old = old or c
        idle(c)
      end)
      idle(ctx)
    end)
    h:node("root.w"):cancel()
    h:settle()
    assert.equal(2, h:node("root.w").incarnation)
    local ok, err = pcall(old.signal, old, "done")
    assert.is_false(ok)
    assert.matches("stale context", err, 1, true)
    assert.equal("HEALTHY", h:state("root.w"))
    assert.matches("stale", tostring(old), 1, true)
  end)

  it("refuses the ctx of a discarded child after its parent restarted", function()
    local h = testing.new{seed = 1}
    local child_ctx
    h:start(function(ctx)
      ctx:run("p", function(p)
        p:run("c", function(c)
          child_ctx = child_ctx or c
          idle(c)
        end)
        idle(p)
      end)
      idle(ctx)
    end)
    h:node("root.p"):cancel()
    h:settle()
    assert.equal(2, h:node("root.p").incarnation)
    local ok, err = pcall(child_ctx.run, child_ctx, "x", idle)
    assert.is_false(ok)
    assert.matches("stale context", err, 1, true)
    assert.same({}, h.engine:node("root.p.c").children)
  end)
end)

describe("T4 states and signals", function()
  local function run_child(fn, opts)
    local h = testing.new{seed = 1}
    h:start(function(ctx)
      ctx:run("w", fn, opts or {policy = policy.never})
      idle(ctx)
    end)
    return h
  end

  it("goes NEW -> HEALTHY -> DONE", function()
    local h = run_child(function(c)
      c:signal("healthy")
      c:sleep(1)
      c:signal("done")
    end)
    assert.equal("HEALTHY", h:state("root.w"))
    h:advance(1)
    assert.equal("DONE", h:state("root.w"))
    assert.same({"NEW>NEW", "NEW>HEALTHY", "HEALTHY>DONE"}, transitions(h, "root.w"))
  end)

  it("is NEW while running before signaling healthy", function()
    local h = run_child(function(c) c:sleep(10) c:signal("healthy") c:wait() end)
    assert.equal("NEW", h:state("root.w"))
    assert.is_true(h:node("root.w").running)
    h:advance(10)
    assert.equal("HEALTHY", h:state("root.w"))
  end)

  local misuse = {
    {"healthy twice", function(c) c:signal("healthy") c:signal("healthy") end,
      'root.w: signal("healthy") is allowed from NEW, the node is HEALTHY (T4)'},
    {"done from NEW", function(c) c:signal("done") end,
      'root.w: signal("done") is allowed from HEALTHY, the node is NEW (T4)'},
    {"healthy after done", function(c)
      c:signal("healthy") c:signal("done") c:signal("healthy") end,
      'root.w: signal("healthy") is allowed from NEW, the node is DONE (T4)'},
    {"an unknown signal", function(c) c:signal("ready") end,
      'root.w: unknown signal "ready"'},
    {"a non-string signal", function(c) c:signal({}) end,
      'root.w: ctx:signal(what): want "healthy" or "done", got table'},
    {"no signal at all", function(c) c:signal() end,
      'root.w: ctx:signal(what): want "healthy" or "done", got no value'},
  }

  for _, case in ipairs(misuse) do
    it("raises on " .. case[1] .. " and the uncaught error kills the node", function()
      local h = run_child(case[2])
      assert.equal("DEAD", h:state("root.w"))
      assert.matches(case[3], h:node("root.w").error, 1, true)
      assert.equal("HEALTHY", h:state("root"))
    end)

    it("raises on " .. case[1] .. " and a caught error leaves the state alone", function()
      local caught, err
      local h = run_child(function(c)
        caught, err = pcall(case[2], c)
        c:wait()
      end)
      assert.is_false(caught)
      assert.matches(case[3], err, 1, true)
      assert.is_true(h:node("root.w").running)
      assert.not_equal("DEAD", h:state("root.w"))
    end)
  end

  it("names the type of a number passed as the signal", function()
    -- ctx_signal (src/lua/l_ctx.c) calls lua_tostring on the argument before it
    -- checks its type, which turns the number into a string in place: the
    -- message reports 'unknown signal "42"' instead of the type.
    local h = run_child(function(c) c:signal(42) end)
    assert.equal("DEAD", h:state("root.w"))
    assert.matches('root.w: ctx:signal(what): want "healthy" or "done", got number',
      h:node("root.w").error, 1, true)
  end)

  it("keeps the state a caught misuse found", function()
    local h = run_child(function(c)
      c:signal("healthy")
      assert(not pcall(c.signal, c, "healthy"))
      assert(not pcall(c.signal, c, "bogus"))
      c:wait()
    end)
    assert.equal("HEALTHY", h:state("root.w"))
    assert.same({"NEW>NEW", "NEW>HEALTHY"}, transitions(h, "root.w"))
  end)
end)

describe("T10 dynamic children", function()
  it("adds children at any time while running", function()
    local h = testing.new{seed = 1}
    h:start(function(ctx)
      ctx:signal("healthy")
      ctx:sleep(10)
      ctx:run("late", idle)
      ctx:sleep(10)
      ctx:group{g1 = idle, g2 = idle}
      ctx:wait()
    end)
    assert.same({}, h.engine:node("root").children)
    h:advance(10)
    assert.same({"late"}, h.engine:node("root").children)
    assert.equal("HEALTHY", h:state("root.late"))
    h:advance(10)
    assert.same({"late", "g1", "g2"}, h.engine:node("root").children)
    assert.equal("HEALTHY", h:state("root.g2"))
    local late = h:events{dn = "root.late", to = "NEW"}
    assert.equal(10, late[1].time)
  end)

  it("discards children on restart and the new incarnation adds them again", function()
    local h = testing.new{seed = 1}
    local runs = {}
    h:start(function(ctx)
      ctx:run("p", function(p)
        p:run("a", function(a)
          runs[#runs + 1] = a.dn .. "#" .. a.incarnation
          idle(a)
        end)
        p:signal("healthy")
        p:sleep(5)
        -- added later in the incarnation
        p:run("b", idle)
        p:sleep(5)
        error("p fails")
      end, {policy = policy.constant(3)})
      idle(ctx)
    end)
    h:advance(5)
    assert.same({"a", "b"}, h.engine:node("root.p").children)
    h:advance(5)
    -- DEAD, waiting for its restart: the old children were canceled and
    -- run no more
    assert.equal("DEAD", h:state("root.p"))
    for _, dn in ipairs{"root.p.a", "root.p.b"} do
      assert.same({"NEW>NEW", "NEW>HEALTHY", "HEALTHY>CANCELED"}, transitions(h, dn))
      assert.not_equal("HEALTHY", h:state(dn))
    end
    h:advance(3)
    assert.equal(2, h:node("root.p").incarnation)
    -- the new incarnation added "a" again (a fresh node), "b" not yet
    assert.same({"a"}, h.engine:node("root.p").children)
    assert.equal("HEALTHY", h:state("root.p.a"))
    assert.equal(1, h:node("root.p.a").incarnation)
    assert.equal(0, h:node("root.p.a").restarts)
    assert.same({"root.p.a#1", "root.p.a#1"}, runs)
    h:advance(5)
    assert.same({"a", "b"}, h.engine:node("root.p").children)
  end)

  it("starts the members of a group in name order", function()
    local h = testing.new{seed = 1}
    local ran = {}
    local function member(c)
      ran[#ran + 1] = c.name
      idle(c)
    end
    h:start(function(ctx)
      ctx:group{zeta = member, alpha = member, mid = member, Beta = member,
        ["b-2"] = member, b_1 = member}
      idle(ctx)
    end)
    local want = {"Beta", "alpha", "b-2", "b_1", "mid", "zeta"}
    assert.same(want, ran)
    local started = {}
    for _, ev in ipairs(h:events{kind = "state", to = "NEW"}) do
      if ev.dn ~= "root" then started[#started + 1] = ev.dn:sub(6) end
    end
    assert.same(want, started)
    assert.same(want, h.engine:node("root").children)
  end)

  it("accepts an empty group", function()
    local h = testing.new{seed = 1}
    h:start(function(ctx)
      ctx:group{}
      idle(ctx)
    end)
    assert.equal("HEALTHY", h:state("root"))
    assert.same({}, h.engine:node("root").children)
  end)
end)

describe("T13a node views", function()
  it("has state, restarts, error, incarnation, blocked, lifecycle, sidecar", function()
    local h = testing.new{seed = 1}
    h:start(function(ctx)
      ctx:run("w", function(c)
        c:signal("healthy")
        c:sleep(1)
        error("w broke")
      end, {policy = policy.constant(2)})
      idle(ctx)
    end)
    local w = h:node("root.w")
    assert.equal("HEALTHY", w.state)
    assert.equal(0, w.restarts)
    assert.is_nil(w.error)
    assert.equal(1, w.incarnation)
    assert.is_false(w.blocked)
    assert.equal("main", w.lifecycle)
    assert.is_false(w.sidecar)
    h:advance(1)
    -- the view is live: the same object reads the new values
    assert.equal("DEAD", w.state)
    assert.matches("w broke", w.error, 1, true)
    assert.equal(1, w.incarnation)
    assert.equal(0, w.restarts)
    h:advance(2)
    assert.equal("HEALTHY", w.state)
    assert.equal(2, w.incarnation)
    assert.equal(1, w.restarts)
    -- the last exit reason stays readable while the node runs again
    assert.matches("w broke", w.error, 1, true)
    assert.equal("node(root.w HEALTHY)", tostring(w))
  end)

  -- Issue 13: reading one field built the whole view, the names of all
  -- children included. Lua's heap shows it: each read allocated them.
  it("reads one field without building the others (100,000 children)", function()
    -- no runaway limit: under valgrind, making 100,000 children in one
    -- resume takes longer than the default 10 s of real time
    local h = support.new{seed = 1, runaway = 0}
    local n = 100000
    h:start(function(ctx)
      ctx:run("p", function(p)
        for i = 1, n do p:run("c" .. i, idle) end
        idle(p)
      end)
      idle(ctx)
    end)
    local view = h:node("root.p")
    collectgarbage()
    collectgarbage("stop")
    local function grown(reads, read)
      local before = collectgarbage("count")
      for _ = 1, reads do read() end
      return (collectgarbage("count") - before) * 1024 -- bytes
    end
    local ten = grown(10, function() return view.state end)
    if ten >= 1024 then collectgarbage("restart") end -- fails below, at once
    assert(ten < 1024, ten .. " bytes for 10 reads")
    local all = grown(n, function()
      assert(view.state == "HEALTHY" and h:state("root.p") == "HEALTHY")
    end)
    local named = grown(1000, function() return tostring(view) end)
    collectgarbage("restart")
    assert(all < 64 * 1024, all .. " bytes for 100,000 reads")
    assert(named < 1000 * 200, named .. " bytes for 1,000 tostring")
    assert.equal(n, #view.children)
  end)

  it("reads each field singly as the whole view has it", function()
    local h = support.new()
    h:start(function(ctx)
      ctx:group({a = idle, b = function(c)
        c:signal("healthy")
        c:sleep(1)
        error("b broke")
      end}, {strategy = "one_for_one", ordered = true})
      ctx:run("pre", function(c) c:signal("healthy") c:signal("done") end,
        {lifecycle = "prestart"})
      idle(ctx)
    end)
    h:advance(1)
    for _, dn in ipairs{"root", "root.a", "root.b", "root.pre"} do
      local full = h.engine:node(dn)
      for k, v in pairs(full) do
        if k ~= "children" then -- tables (last_exit) are made at each read
          assert.same(v, h.engine:node(dn, k), dn .. " " .. k)
          assert.same(v, h:node(dn)[k], dn .. " " .. k)
        end
      end
      assert.same(full.children, h.engine:node(dn, "children"))
      assert.is_nil(h.engine:node(dn, "nonsense"))
    end
    local none, err = h.engine:node("root.nope", "state")
    assert.is_nil(none)
    assert.equal("no node root.nope", err)
  end)

  it("is the same through arbor.node inside a runnable", function()
    local h = testing.new{seed = 1}
    local seen
    h:start(function(ctx)
      ctx:run("w", idle)
      ctx:sleep(0) -- let the child run
      local v = arbor.node("root.w")
      seen = {state = v.state, incarnation = v.incarnation, dn = v.dn,
        restart = type(v.restart)}
      idle(ctx)
    end)
    assert.same({state = "HEALTHY", incarnation = 1, dn = "root.w",
      restart = "function"}, seen)
  end)
end)

describe("T13 runtime operations", function()
  local function tree_with(fn, opts)
    local h = testing.new{seed = 1}
    h:start(function(ctx)
      ctx:run("w", fn, opts)
      idle(ctx)
    end)
    return h
  end

  describe("swap", function()
    it("replaces the runnable for the next start only", function()
      local runs = {}
      local h = tree_with(function(c) runs[#runs + 1] = "old" idle(c) end)
      local w = h:node("root.w")
      w:swap(function(c) runs[#runs + 1] = "new" idle(c) end)
      -- the current incarnation keeps running
      assert.same({"old"}, runs)
      assert.equal("HEALTHY", w.state)
      assert.equal(1, w.incarnation)
      assert.equal(1, #h:events{dn = "root.w", kind = "policy",
        reason = "runnable swapped"})
      w:cancel()
      h:settle()
      assert.same({"old", "new"}, runs)
      assert.equal(2, w.incarnation)
    end)

    it("with restart = true cancels now and restarts on the new code", function()
      local runs = {}
      local h = tree_with(function(c) runs[#runs + 1] = "old" idle(c) end)
      local w = h:node("root.w")
      w:swap(function(c) runs[#runs + 1] = "new" idle(c) end, {restart = true})
      h:settle()
      assert.same({"old", "new"}, runs)
      assert.equal(2, w.incarnation)
      assert.equal("HEALTHY", w.state)
      assert.same({"NEW>NEW", "NEW>HEALTHY", "HEALTHY>CANCELED",
        "CANCELED>NEW", "NEW>HEALTHY"}, transitions(h, "root.w"))
    end)

    it("applies to a node waiting for a delayed restart", function()
      local runs = {}
      local h = tree_with(function(c)
        runs[#runs + 1] = "old"
        c:sleep(1)
        error("x")
      end, {policy = policy.constant(10)})
      h:advance(1)
      local w = h:node("root.w")
      assert.equal("DEAD", w.state)
      w:swap(function(c) runs[#runs + 1] = "new" idle(c) end)
      h:settle()
      assert.equal("DEAD", w.state)
      h:advance(10)
      assert.same({"old", "new"}, runs)
      assert.equal("HEALTHY", w.state)
    end)

    it("checks its arguments before anything changes", function()
      local runs = {}
      local h = tree_with(function(c) runs[#runs + 1] = "old" idle(c) end)
      local w = h:node("root.w")
      local new = function(c) runs[#runs + 1] = "new" idle(c) end
      local bad = {
        {42},
        {nil},
        {new, "restart"},
        {new, {restart = true, bogus = 1}},
      }
      local nevents = #h:events()
      for _, args in ipairs(bad) do
        local ok, err = pcall(w.swap, w, args[1], args[2])
        assert.is_false(ok)
        assert.matches("^swap root%.w: ", err:gsub("^[^:]*:%d+: ", ""))
      end
      assert.equal(nevents, #h:events())
      assert.equal("HEALTHY", w.state)
      assert.equal(1, w.incarnation)
      -- the old runnable is still the one that runs next
      w:cancel()
      h:settle()
      assert.same({"old", "old"}, runs)
    end)
  end)

  describe("set_policy", function()
    it("replaces the policy and keeps the failure history", function()
      local seen = {}
      local function recorder(tag)
        return function(ev)
          seen[#seen + 1] = tag .. ev.consecutive
          return 1
        end
      end
      local h = tree_with(function(c) c:sleep(1) error("x") end,
        {policy = recorder("a")})
      h:advance(1)   -- fails at 1, restarts at 2
      h:advance(2)   -- fails at 3, restarts at 4
      assert.same({"a1", "a2"}, seen)
      local w = h:node("root.w")
      w:set_policy(recorder("b"))
      assert.equal(1, #h:events{dn = "root.w", kind = "policy",
        reason = "policy replaced"})
      h:advance(2)
      assert.same({"a1", "a2", "b3"}, seen)
      assert.equal(3, w.consecutive)
    end)

    it("checks its argument before anything changes", function()
      local calls = 0
      local h = tree_with(function(c) c:sleep(1) error("x") end,
        {policy = function() calls = calls + 1 return 1 end})
      local w = h:node("root.w")
      local ok, err = pcall(w.set_policy, w, "immediate")
      assert.is_false(ok)
      assert.matches("set_policy root.w: the policy must be a function, got string",
        err, 1, true)
      h:advance(1)
      assert.equal(1, calls)
    end)

    it("nil restores the script's policy: the default when it gave none", function()
      local default_calls = 0
      local h = testing.new{seed = 1, policy = function()
        default_calls = default_calls + 1
        return 1
      end}
      h:start(function(ctx)
        ctx:run("w", function(c) c:sleep(1) error("x") end)
        idle(ctx)
      end)
      h:node("root.w"):set_policy(policy.constant(1))
      h:advance(1)
      assert.equal(0, default_calls)
      h:node("root.w"):set_policy(nil)
      h:advance(2)
      assert.equal(1, default_calls)
    end)

    it("nil restores the policy the script gave, not the default", function()
      local default_calls, script_calls = 0, 0
      local h = testing.new{seed = 1, policy = function()
        default_calls = default_calls + 1
        return 1
      end}
      h:start(function(ctx)
        ctx:run("w", function(c) c:sleep(1) error("x") end,
          {policy = function() script_calls = script_calls + 1 return 1 end})
        idle(ctx)
      end)
      h:node("root.w"):set_policy(policy.constant(1))
      h:advance(1)
      h:node("root.w"):set_policy(nil)
      h:advance(2)
      assert.equal(0, default_calls)
      assert.equal(1, script_calls)
    end)
  end)

  describe("restart", function()
    it("cancels a running node so that it restarts at once", function()
      local h = tree_with(idle)
      local w = h:node("root.w")
      w:restart()
      h:settle()
      assert.equal(2, w.incarnation)
      assert.equal(1, w.restarts)
      assert.equal("HEALTHY", w.state)
      assert.equal(0, h:now())
    end)

    it("starts a node waiting for a delayed restart now", function()
      local h = tree_with(function(c) c:sleep(1) error("x") end,
        {policy = policy.constant(100)})
      h:advance(1)
      local w = h:node("root.w")
      assert.equal("DEAD", w.state)
      w:restart()
      h:settle()
      assert.equal("NEW", w.state)
      assert.equal(2, w.incarnation)
      assert.equal(1, h:now())
      -- and the old delayed restart does not fire a second start
      h:advance(100)
      assert.equal(2, w.incarnation)
    end)

    it("starts a node its policy gave up on", function()
      local h = tree_with(function(c) c:sleep(1) error("x") end,
        {policy = policy.never})
      h:advance(1)
      local w = h:node("root.w")
      h:advance(100)
      assert.equal("DEAD", w.state)
      assert.equal(1, w.incarnation)
      w:restart()
      h:settle()
      assert.equal("NEW", w.state)
      assert.equal(2, w.incarnation)
    end)
  end)

  describe("cancel", function()
    it("cancels the incarnation, which then restarts as a CANCELED node", function()
      local saw_cancel = false
      local h = tree_with(function(c)
        c:signal("healthy")
        local ok, err = pcall(c.wait, c)
        saw_cancel = not ok and arbor.is_canceled(err)
        error(err, 0)
      end)
      local w = h:node("root.w")
      w:cancel()
      h:settle()
      assert.is_true(saw_cancel)
      assert.equal(2, w.incarnation)
      assert.same({"NEW>NEW", "NEW>HEALTHY", "HEALTHY>CANCELED",
        "CANCELED>NEW", "NEW>HEALTHY"}, transitions(h, "root.w"))
    end)
  end)

  describe("stop", function()
    it("holds the node down until restart()", function()
      local h = tree_with(idle)
      local w = h:node("root.w")
      w:stop()
      h:settle()
      assert.equal("CANCELED", w.state)
      assert.is_true(w.held)
      assert.is_false(w.running)
      h:advance(3600)
      assert.equal("CANCELED", w.state)
      assert.equal(1, w.incarnation)
      assert.is_nil(h.engine:next_timer())
      w:restart()
      h:settle()
      assert.equal("HEALTHY", w.state)
      assert.equal(2, w.incarnation)
      assert.is_false(w.held)
      assert.equal("HEALTHY", h:state("root"))
    end)

    it("holds down a node waiting for a delayed restart", function()
      local h = tree_with(function(c) c:sleep(1) error("x") end,
        {policy = policy.constant(10)})
      h:advance(1)
      local w = h:node("root.w")
      w:stop()
      h:settle()
      assert.equal("CANCELED", w.state)
      h:advance(100)
      assert.equal("CANCELED", w.state)
      assert.equal(1, w.incarnation)
      w:restart()
      h:settle()
      assert.equal(2, w.incarnation)
    end)
  end)

  it("refuses to restart a node whose parent is being stopped", function()
    local h = testing.new{seed = 1}
    h:start(function(ctx)
      ctx:run("p", function(p)
        p:run("c", idle)
        idle(p)
      end)
      idle(ctx)
    end)
    h:node("root.p"):stop()
    h:settle()
    local c = h:node("root.p.c")
    local ok, err = pcall(c.restart, c)
    assert.is_false(ok)
    assert.matches("restart root.p.c: its parent is being stopped", err, 1, true)
    assert.equal("CANCELED", c.state)
    assert.equal(1, c.incarnation)
  end)
end)

describe("shared runnables", function()
  it("lets nodes share a function while one of them is swapped", function()
    local h = testing.new{seed = 1}
    local ran = {}
    local function worker(c)
      ran[#ran + 1] = c.name .. ":old"
      idle(c)
    end
    local function group(c)
      c:run("a", worker)
      c:run("b", worker)
      idle(c)
    end
    h:start(function(ctx)
      ctx:run("g", group)
      ctx:run("c", worker)
      idle(ctx)
    end)
    h:node("root.g.a"):swap(function(c)
      ran[#ran + 1] = c.name .. ":new"
      idle(c)
    end, {restart = true})
    h:node("root.g.b"):restart()
    -- g restarts: a and b are discarded and added again, a with its swap
    -- (it lasts, issue 15), b on the old code
    h:node("root.g"):restart()
    h:node("root.c"):restart()
    -- (c starts before g's children: g adds them when it runs)
    assert.same({"c:old", "a:old", "b:old", "a:new", "b:old", "a:new", "b:old",
      "c:old"}, ran)
    h:close()
  end)
end)
