-- Reexec benchmark (issue 17): prints each figure next to its target.
-- Run by scripts/bench: build/arbor run --quiet spec/bench/reexec.lua [--small]
-- It starts an engine (spec/bench/support/reload_tree.lua: supervisors of
-- Lua leaves and sleep processes) and has it replace itself (`reexec`)
-- through the control socket: the figure is how long the control socket
-- did not answer, from the request until the new arbor's status reply. The
-- processes must keep their pids: they are not interrupted at all.
local arbor = require "arbor"
local core = require "arbor.core"
local json = require "arbor.json"

local bench = dofile((arg[0]:match("^(.*/)") or "") .. "support/common.lua")
local size, median, report, request = bench.size, bench.median, bench.report, bench.request

-- dn -> pid of every node running a process
local function pids(c)
  local t = {}
  for _, row in ipairs(request(c, {op = "status", json = true, id = 0}).data.table) do
    if row.pid then t[row.dn] = row.pid end
  end
  return t
end

local function measure()
  local supervisors, leaves, procs = size(10, 2), size(100, 10), size(50, 5)
  local nodes = supervisors * (leaves + 1) + procs + 1
  local vdir = bench.mktemp()
  local version = vdir .. "/version"
  local f = assert(io.open(version, "w"))
  f:write("1\n")
  f:close()
  local c, pid, dir = bench.serve(string.format("spec/bench/support/reload_tree.lua %s %d %d %d",
    version, supervisors, leaves, procs), nodes)
  local sock = dir .. "/bench.sock"
  local before = pids(c)
  local times = {}
  for _ = 1, size(5, 1) do
    local t0 = core.hrtime()
    assert(c:send(json.encode({op = "reexec", id = 1})))
    local reply = c:recv() -- the connection ends with the exec
    assert(not reply or not json.decode(reply).error, reply)
    c:close()
    c = nil
    while not c do
      c = core.connect(sock)
      if c then
        local ok, st = pcall(request, c, {op = "status", json = true, id = 0})
        if not ok or st.data.running < nodes then
          c:close()
          c = nil
        end
      end
    end
    times[#times + 1] = (core.hrtime() - t0) / 1e6
  end
  local after = pids(c)
  local moved = 0
  for dn, p in pairs(before) do
    if after[dn] ~= p then moved = moved + 1 end
  end
  local ms = median(times)
  report(string.format("reexec, %d Lua nodes and %d processes: control socket down, median",
    supervisors * (leaves + 1), procs), ms, "ms", "<= 100 ms", ms <= 100)
  report("  processes replaced or restarted by the reexecs", moved, "", "0", moved == 0)
  bench.unserve(c, pid, dir)
  os.execute("rm -rf " .. vdir)
end

bench.banner("reexec")
arbor.run(function()
  measure()
  arbor.stop()
end, {control = false, runaway = 0})
