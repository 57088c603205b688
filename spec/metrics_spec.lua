-- Issue 16: the engine's metrics (Prometheus text format, OpenMetrics) and
-- users' counters and gauges. On the virtual clock: timestamps are engine
-- seconds there (wall-clock under arbor.run).
local metrics = require "arbor.metrics"
local policy = require "arbor.policy"
local support = require "support"
local new, idle = support.new, support.idle

after_each(support.close_all)

-- The value of the sample `name{labels}` in text, or nil.
local function sample(text, name, labels)
  for line in text:gmatch("[^\n]+") do
    local n, l, v = line:match("^([%w_:]+)(%b{}) (%S+)$")
    if not n then n, v = line:match("^([%w_:]+) (%S+)$") l = "" end
    if n == name and (l == (labels and "{" .. labels .. "}" or "")) then return tonumber(v) end
  end
end

-- A node failing 3 times (constant 1 s) then staying up, next to a steady one.
local function flaky_tree()
  local h, n = new(), 0
  h:start(function(ctx)
    ctx:run("flaky", function(c)
      n = n + 1
      c:signal("healthy")
      if n <= 3 then c:sleep(1) error("flaky " .. n) end
      c:wait()
    end, {policy = policy.constant(1)})
    ctx:run("steady", idle)
    idle(ctx)
  end)
  h:advance(10)
  return h
end

describe("arbor metrics", function()
  it("match the tree after restarts", function()
    local h = flaky_tree()
    local t = metrics.text(h.engine)
    assert.equal(3, sample(t, "arbor_node_restarts_total", 'dn="root.flaky"'))
    assert.equal(0, sample(t, "arbor_node_restarts_total", 'dn="root.steady"'))
    assert.equal(1, sample(t, "arbor_node_state", 'dn="root.flaky",state="HEALTHY"'))
    assert.equal(0, sample(t, "arbor_node_state", 'dn="root.flaky",state="DEAD"'))
    assert.equal(4, sample(t, "arbor_node_transitions_total", 'dn="root.flaky",from="NEW",to="HEALTHY"'))
    assert.equal(3, sample(t, "arbor_node_transitions_total", 'dn="root.flaky",from="HEALTHY",to="DEAD"'))
    assert.equal(3, sample(t, "arbor_node_transitions_total", 'dn="root.flaky",from="DEAD",to="NEW"'))
    assert.equal(1, sample(t, "arbor_node_transitions_total", 'dn="root.steady",from="NEW",to="HEALTHY"'))
    -- failures at 1, 3 and 5 s (1 s up, then 1 s of backoff); up again at 6 s
    assert.equal(5, sample(t, "arbor_node_last_exit_timestamp_seconds", 'dn="root.flaky"'))
    assert.equal(6, sample(t, "arbor_node_up_since_timestamp_seconds", 'dn="root.flaky"'))
    assert.is_nil(sample(t, "arbor_node_last_exit_timestamp_seconds", 'dn="root.steady"'))
    assert.equal(3, sample(t, "arbor_restarts_total"))
    assert.equal(3, sample(t, "arbor_policy_calls_total"))
    assert.equal(3, sample(t, "arbor_nodes"))
  end)

  it("a node that is DEAD waiting for its restart shows DEAD, with no up_since", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("bad", function(c) c:signal("healthy") c:sleep(1) error("x") end,
        {policy = policy.constant(5)})
      idle(ctx)
    end)
    h:advance(2)
    local t = metrics.text(h.engine)
    assert.equal(1, sample(t, "arbor_node_state", 'dn="root.bad",state="DEAD"'))
    assert.is_nil(sample(t, "arbor_node_up_since_timestamp_seconds", 'dn="root.bad"'))
  end)

  it("drops the series of discarded nodes", function()
    local h, gen = new(), 0
    h:start(function(ctx)
      ctx:run("sup", function(c)
        gen = gen + 1
        c:run("child" .. gen, idle)
        idle(c)
      end)
      idle(ctx)
    end)
    assert.is_number(sample(metrics.text(h.engine), "arbor_node_restarts_total", 'dn="root.sup.child1"'))
    h:node("root.sup"):restart()
    local t = metrics.text(h.engine)
    assert.is_nil(t:find("root.sup.child1", 1, true))
    assert.equal(0, sample(t, "arbor_node_restarts_total", 'dn="root.sup.child2"'))
  end)

  it("folds the deepest levels past max_series, and counts the nodes folded", function()
    local h = new()
    h:start(function(ctx)
      for i = 1, 4 do
        ctx:run("w" .. i, function(c)
          for j = 1, 5 do c:run("x" .. j, idle) end
          idle(c)
        end)
      end
      idle(ctx)
    end)
    local full = metrics.text(h.engine)
    assert.equal(0, sample(full, "arbor_node_series_folded"))
    assert.equal(1, sample(full, "arbor_node_state", 'dn="root.w1.x1",state="HEALTHY"'))
    local t = metrics.text(h.engine, {max_series = 10})
    assert.equal(20, sample(t, "arbor_node_series_folded"))
    assert.is_nil(t:find("root.w1.x1", 1, true))
    assert.equal(1, sample(t, "arbor_node_state", 'dn="root.w1",state="HEALTHY"'))
    assert.equal(5, sample(t, "arbor_node_state", 'dn="root.w1.*",state="HEALTHY"'))
    assert.equal(5, sample(t, "arbor_node_transitions_total", 'dn="root.w1.*",from="NEW",to="HEALTHY"'))
  end)

  it("counts faulty policies", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("bad", function(c) c:sleep(1) error("x") end,
        {policy = function() return "sometime" end})
      idle(ctx)
    end)
    h:advance(1)
    assert.equal(1, sample(metrics.text(h.engine), "arbor_policy_faults_total"))
  end)

  it("speaks OpenMetrics when asked: counter families without _total, # EOF", function()
    local h = flaky_tree()
    local t = metrics.text(h.engine, {openmetrics = true})
    assert.matches("# TYPE arbor_node_restarts counter\n", t, 1, true)
    assert.matches("\narbor_node_restarts_total{dn=\"root.flaky\"} 3\n", t, 1, true)
    assert.equal("# EOF\n", t:sub(-6))
    assert.is_true(metrics.wants_openmetrics("application/openmetrics-text; version=1.0.0"))
    assert.is_false(metrics.wants_openmetrics("text/plain"))
  end)

  it("in chunks (what /metrics writes), the same bytes as the one string", function()
    local h = new()
    h:start(function(ctx)
      for i = 1, 20 do
        ctx:run("w" .. i, function(c)
          for j = 1, 100 do c:run("x" .. j, idle) end
          idle(c)
        end)
      end
      idle(ctx)
    end)
    metrics.gauge("spec_chunked_gauge", "A user's gauge after the chunks"):set(5)
    for _, om in ipairs{false, true} do
      local opts = {openmetrics = om, max_series = 5000}
      local chunks, len = metrics.chunks(h.engine, opts)
      local t = metrics.text(h.engine, opts)
      assert.is_true(#chunks > 3, "several chunks")
      local whole = table.concat(chunks)
      -- the histogram's and Lua's figures move between two scrapes
      local function steady(s)
        return (s:gsub("\narbor_loop_turn[^\n]*", ""):gsub("\narbor_lua_memory_bytes [^\n]*", ""))
      end
      assert.equal(#whole, len)
      assert.equal(steady(t), steady(whole))
      assert.equal(5, sample(whole, "spec_chunked_gauge"))
      assert.equal(1, sample(whole, "arbor_node_state", 'dn="root.w20.x100",state="HEALTHY"'))
    end
  end)

  it("the table form has the same figures", function()
    local h = flaky_tree()
    local t = metrics.table(h.engine)
    assert.equal("counter", t.arbor_node_restarts_total.type)
    local found
    for _, s in ipairs(t.arbor_node_restarts_total.samples) do
      if s.labels.dn == "root.flaky" then found = s.value end
    end
    assert.equal(3, found)
    assert.equal("histogram", t.arbor_loop_turn_seconds.type)
  end)
end)

describe("users' counters and gauges", function()
  it("are exported with arbor's metrics", function()
    local h = new()
    h:start(idle)
    local c = metrics.counter("spec_jobs_total", "Jobs done")
    c:inc()
    c:inc(2)
    local g = metrics.gauge("spec_queue_depth", "Jobs waiting")
    g:set(7)
    g:dec()
    local t = metrics.text(h.engine)
    assert.equal(3, sample(t, "spec_jobs_total"))
    assert.equal(6, sample(t, "spec_queue_depth"))
    assert.matches("# TYPE spec_queue_depth gauge\n", t, 1, true)
    assert.equal(c, metrics.counter("spec_jobs_total"))
  end)

  it("reject bad names, reserved names, a counter going down, a type clash", function()
    for _, case in ipairs{
      {function() metrics.counter("bad name_total") end, "name must match"},
      {function() metrics.counter("arbor_mine_total") end, "arbor_ are arbor's own"},
      {function() metrics.counter("jobs") end, "ends in _total"},
      {function() metrics.counter("spec_down_total"):inc(-1) end, "a counter only goes up"},
      {function() metrics.gauge("spec_jobs_total") end, "is already a counter"},
    } do
      local ok, err = pcall(case[1])
      assert.is_false(ok)
      assert.matches(case[2], err, 1, true)
    end
  end)
end)

describe("engine settings", function()
  it("max_series and control clients come from arbor.run and the control server", function()
    local h = new()
    h:start(function(ctx)
      for i = 1, 3 do ctx:run("w" .. i, function(c) c:run("x", idle) idle(c) end) end
      idle(ctx)
    end)
    assert.equal(0, sample(metrics.text(h.engine), "arbor_control_clients"))
    metrics.configure(h.engine, {max_series = 4, control_clients = function() return 2 end})
    local t = metrics.text(h.engine)
    assert.equal(3, sample(t, "arbor_node_series_folded"))
    assert.equal(2, sample(t, "arbor_control_clients"))
    assert.equal(0, sample(metrics.text(h.engine, {max_series = 100}), "arbor_node_series_folded"))
    metrics.configure(h.engine, {control_clients = false})
    assert.equal(0, sample(metrics.text(h.engine), "arbor_control_clients"))
  end)
end)

describe("process metrics", function()
  local read = require("e2e.support").read

  -- Resident bytes of the processes pids, from /proc/PID/statm.
  local function rss(pids)
    local page = tonumber(io.popen("getconf PAGESIZE"):read("l"))
    local sum = 0
    for _, pid in ipairs(pids) do
      sum = sum + read("/proc/" .. pid .. "/statm"):match("^%d+ (%d+)") * page
    end
    return sum
  end

  it("sum a node's processes, and a folded subtree's; nodes without processes have none", function()
    local arbor = require "arbor"
    support.scenario(function(ctx)
      ctx:run("sup", function(c)
        c:run("a", arbor.exec{"sh", "-c", "exec sleep 1000"})
        c:run("b", arbor.exec{"sh", "-c", "sleep 1000 & exec sleep 1000"})
        c:signal("healthy")
        c:wait()
      end)
      local function pids(dn)
        local n = arbor.node(dn)
        return n and n.pids or {}
      end
      local function sleeping(dn, want)
        local ps = pids(dn)
        if #ps ~= want then return false end
        for _, pid in ipairs(ps) do
          if (read("/proc/" .. pid .. "/comm") or "") ~= "sleep\n" then return false end
        end
        return true
      end
      local deadline = arbor.now() + 20
      while not (sleeping("root.t.sup.a", 1) and sleeping("root.t.sup.b", 2)) do
        assert.is_true(arbor.now() < deadline, "the sleeps did not start")
        ctx:sleep(0.01)
      end
      local a, b = pids("root.t.sup.a"), pids("root.t.sup.b")
      local name = "arbor_node_process_resident_memory_bytes"
      -- a sleep that just started still faults its pages in: scrape until
      -- /proc says the same before and after
      local t, before
      repeat
        assert.is_true(arbor.now() < deadline, "the sleeps' memory did not settle")
        ctx:sleep(0.01)
        before = rss(a) + rss(b)
        t = arbor.metrics_text()
      until rss(a) + rss(b) == before
      assert.equal(rss(a), sample(t, name, 'dn="root.t.sup.a"'))
      assert.equal(rss(b), sample(t, name, 'dn="root.t.sup.b"'))
      assert.is_number(sample(t, "arbor_node_process_cpu_seconds_total", 'dn="root.t.sup.b"'))
      assert.is_nil(sample(t, name, 'dn="root.t.sup"'))
      assert.is_nil(sample(t, "arbor_node_process_cpu_seconds_total", 'dn="root.t"'))
      -- root, root.t and root.t.sup fit in 3 series: a and b are folded
      t = arbor.metrics_text({max_series = 3})
      assert.equal(2, sample(t, "arbor_node_series_folded"))
      assert.equal(rss(a) + rss(b), sample(t, name, 'dn="root.t.sup.*"'))
      assert.is_nil(sample(t, name, 'dn="root.t.sup"'))
    end)
  end)
end)
