-- Status cost benchmark (issue 25, point 6): prints each figure next to
-- its target. Run by scripts/bench: build/arbor run --quiet
-- spec/bench/status.lua [--small]
-- It starts an engine running 50 sleep processes
-- (spec/bench/support/reload_tree.lua) and asks it, on one control
-- connection, for `status` (what `arbor ctl status` prints) and `tree
-- --json`, against `eval "return 1"` (the round trip alone): first alone on
-- the host, then with 1,000 unrelated sleeps on the host. Both read the
-- nodes' process groups from /proc; what the host runs besides must not
-- change their cost (before issue 25, each request read /proc/PID/stat of
-- every process on the host).
local arbor = require "arbor"
local core = require "arbor.core"

local bench = dofile((arg[0]:match("^(.*/)") or "") .. "support/common.lua")
local size, median, report, request, sh = bench.size, bench.median, bench.report, bench.request, bench.sh

-- Milliseconds per request (the median of n) of req on c.
local function per_request(c, req, n)
  local times = {}
  for i = 1, n + 10 do
    local t0 = core.hrtime()
    local reply = request(c, req)
    local dt = (core.hrtime() - t0) / 1e6
    assert(reply.ok, reply.error)
    if i > 10 then times[#times + 1] = dt end -- warmed up
  end
  return median(times)
end

-- The three figures on c: status, tree --json, eval (ms per request).
local function costs(c, n)
  return per_request(c, {op = "status", id = 1}, n),
    per_request(c, {op = "tree", json = true, id = 2}, n),
    per_request(c, {op = "eval", code = "return 1", id = 3}, n)
end

local function count(pgid)
  return tonumber(sh("pgrep -g " .. pgid .. " | wc -l")) or 0
end

local function measure()
  local procs, strangers, n = size(50, 5), size(1000, 100), size(200, 20)
  local vdir = bench.mktemp()
  local f = assert(io.open(vdir .. "/version", "w"))
  f:write("1\n")
  f:close()
  local c, pid, dir = bench.serve(string.format("spec/bench/support/reload_tree.lua %s 0 0 %d",
    vdir .. "/version", procs), procs + 1)
  local status = request(c, {op = "status", json = true, id = 0}).data.table
  local listed = 0
  for _, row in ipairs(status) do listed = listed + (row.pids and #row.pids or 0) end
  assert(listed == procs, "listed " .. listed .. " processes")
  local host = tonumber(sh("ls /proc | grep -c '^[0-9]'"))
  local s0, t0, e0 = costs(c, n)
  -- unrelated sleeps in a group of their own, ended by its id
  local group = tonumber(sh("setsid sh -c 'for i in $(seq " .. strangers .. "); do sleep 100000 & done; wait'"
    .. " > /dev/null 2>&1 & echo $!"))
  while count(group) < strangers + 1 do os.execute("sleep 0.05") end
  local s1, t1, e1 = costs(c, n)
  os.execute("kill -- -" .. group)
  bench.unserve(c, pid, dir)
  os.execute("rm -rf " .. vdir)
  report(string.format("eval \"return 1\", %d processes on the host", host), e0, "ms", "")
  report(string.format("status of %d processes, %d on the host", procs, host), s0, "ms", "")
  report("  ratio to eval", s0 / e0, "x", "")
  report(string.format("tree --json of the same"), t0, "ms", "")
  report(string.format("eval \"return 1\", %d more unrelated sleeps", strangers), e1, "ms", "")
  report(string.format("status of %d processes, %d more unrelated sleeps", procs, strangers),
    s1, "ms", "<= 3 ms", s1 <= 3)
  report("  ratio to eval", s1 / e1, "x", "")
  report("  ratio to status without the sleeps", s1 / s0, "x", "<= 1.5", s1 / s0 <= 1.5)
  report(string.format("tree --json, %d more unrelated sleeps", strangers), t1, "ms", "")
end

bench.banner("status")
arbor.run(function()
  measure()
  arbor.stop()
end, {control = false, runaway = 0})
