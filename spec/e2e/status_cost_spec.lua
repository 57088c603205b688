-- Issue 25 point 6, end to end: `arbor ctl status`, `tree` and a /metrics
-- scrape read /proc only for the processes arbor started (their process
-- groups), never /proc/PID/stat of every process on the host. strace on
-- the running arbor lists the /proc files it opens while it answers.
local json = require "arbor.json"
local support = require "e2e.support"
local bin, q, sh, read, poll = support.bin, support.q, support.sh, support.read, support.poll

-- The pids of a process group (what /proc says: the reference).
local function members(pgid)
  local _, out = sh(support.plain .. "pgrep -g " .. pgid)
  local t = {}
  for pid in out:gmatch("%d+") do t[#t + 1] = tonumber(pid) end
  table.sort(t)
  return t
end

-- The root's children as `arbor ctl tree --json` has them: dn -> node
-- (pid: the program's, which leads its group; pids: the group's members).
local function tree_nodes(e)
  local _, out = sh(bin .. " ctl " .. q(e.sock) .. " tree --json")
  local t = {}
  for _, n in ipairs((json.decode(out) or {children = {}}).children) do t[n.dn] = n end
  return t
end

describe("status, tree and /metrics read the /proc of arbor's processes only", function()
  local e, strangers
  after_each(function()
    if strangers then os.execute("kill -- -" .. strangers .. " 2>/dev/null") end
    strangers = nil
    if e then support.stop_arbor(e) end
    e = nil
  end)

  it("opens no /proc file of 200 unrelated processes, and lists every member of each group", function()
    e = support.run_arbor("--http 127.0.0.1:0 spec/e2e/fixtures/procs.lua", "PROCS=5")
    local nodes
    poll(function()
      nodes = tree_nodes(e)
      for i = 1, 5 do
        local n = nodes["root.p" .. i]
        if not n or not n.pids or #n.pids ~= 3 then return false end
      end
      return true
    end, "five groups of three")
    local ours = {}
    for i = 1, 5 do
      local n = nodes["root.p" .. i]
      assert.same(members(n.pid), n.pids)
      for _, pid in ipairs(n.pids) do ours[pid] = true end
    end
    -- 200 processes that arbor did not start, in a group of their own
    strangers = tonumber(support.capture("setsid sh -c 'for i in $(seq 200); do sleep 1000 & done; "
      .. "wait' > /dev/null 2>&1 & echo $!"))
    local unrelated
    poll(function()
      unrelated = members(strangers)
      return #unrelated == 201
    end, "200 unrelated sleeps")
    local port
    poll(function()
      port = (read(e.dir .. "/err") or ""):match("serving http://127%.0%.0%.1:(%d+)")
      return port
    end, "the http address")
    -- strace attached to every thread of arbor, until we stop it
    local trace = e.dir .. "/trace"
    local tracer = tonumber(support.capture(support.plain .. "strace -f -e trace=open,openat -o "
      .. q(trace) .. " -p " .. e.pid .. " > " .. q(e.dir .. "/strace.err") .. " 2>&1 & echo $!"))
    finally(function() os.execute("kill " .. tracer .. " 2>/dev/null") end)
    poll(function() return (read(e.dir .. "/strace.err") or ""):find("attached") end, "strace to attach")
    local code, status = sh(bin .. " ctl " .. q(e.sock) .. " status")
    assert.equal(0, code, status)
    assert.matches("root.p5", status, 1, true)
    local code2, tree = sh(bin .. " ctl " .. q(e.sock) .. " tree --json")
    assert.equal(0, code2, tree)
    local code3, metrics = sh(support.plain .. "curl -s --max-time 10 http://127.0.0.1:" .. port .. "/metrics")
    assert.equal(0, code3)
    assert.matches('arbor_node_process_cpu_seconds_total{dn="root.p5"}', metrics, 1, true)
    os.execute("kill -INT " .. tracer)
    poll(function() return not support.alive(tracer) end, "strace to detach")
    local opened, read_ours = {}, 0
    for pid in (read(trace) or ""):gmatch('"/proc/(%d+)/') do
      pid = tonumber(pid)
      opened[pid] = true
      if ours[pid] then read_ours = read_ours + 1 end
    end
    assert.is_true(read_ours > 0, "strace saw no /proc read of arbor's processes")
    for _, pid in ipairs(unrelated) do
      assert.is_nil(opened[pid], "arbor opened /proc/" .. pid .. ", an unrelated process")
    end
    local n = 0
    for pid in pairs(opened) do
      if not ours[pid] and pid ~= e.pid then n = n + 1 end
    end
    assert.is_true(n <= 2, n .. " other processes' /proc read") -- arbor's guard
  end)

  it("under --init, a member whose parent exited (reparented to arbor) is listed", function()
    e = support.run_arbor("--init spec/e2e/fixtures/procs.lua", "PROCS=1 ORPHAN=1")
    local n
    poll(function()
      n = tree_nodes(e)["root.orphan"]
      return n and n.pids and #n.pids == 2
    end, "root.orphan's two processes")
    assert.same(members(n.pid), n.pids)
  end)
end)
