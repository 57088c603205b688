-- HTTP benchmark (issue 25, point 5): prints each figure next to its
-- target. Run by scripts/bench: build/arbor run --quiet spec/bench/http.lua
-- [--small]
-- It starts an engine of 30,000 idle nodes serving HTTP
-- (spec/bench/support/http_tree.lua), in which a node sleeps 1 ms over and
-- over and notes the longest the loop made it wait past that, and scrapes
-- /metrics (every node a series: 14 MB) and /tree (5 MB) with curl, four
-- at a time, while /healthz is asked over and over. The figures: how long
-- the loop was held at most, and how much of that arbor itself worked (on
-- a loaded machine the rest is other processes' turn on the CPU; a render
-- in one go held the loop for the whole render: 190 ms of CPU before issue
-- 25), the time per scrape, and /healthz's round trips meanwhile.
local arbor = require "arbor"
local core = require "arbor.core"

local bench = dofile((arg[0]:match("^(.*/)") or "") .. "support/common.lua")
local size, median, report, request, sh = bench.size, bench.median, bench.report, bench.request, bench.sh

local function measure()
  local nodes, rounds = size(30000, 2000), size(5, 1)
  local dir = bench.mktemp()
  local c, pid, sdir = bench.serve(string.format("spec/bench/support/http_tree.lua %d %s/port",
    nodes, dir), nodes + nodes // 1000 + 2)
  local port
  while not port do
    local f = io.open(dir .. "/port")
    port = f and tonumber(f:read("l"))
    if f then f:close() end
  end
  local url = "http://127.0.0.1:" .. port
  local function gap()
    local wall, cpu = request(c, {op = "eval", code = "return loop_gap(true)", id = 1})
      .text:match("^(%S+)%s+(%S+)")
    return tonumber(wall), tonumber(cpu)
  end
  gap() -- from here on
  os.execute("sleep 1")
  local idle_gap, idle_cpu = gap()
  -- four scrapers, each `rounds` scrapes of /metrics then /tree; /healthz
  -- asked meanwhile until they are done
  local t0 = core.hrtime()
  os.execute(string.format("(for i in 1 2 3 4; do (for r in $(seq %d); do curl -s -o /dev/null "
    .. "%s/metrics; curl -s -o /dev/null %s/tree; done) & done; wait; touch %s/done)",
    rounds, url, url, dir) .. " > /dev/null 2>&1 &")
  local probes = {}
  while not io.open(dir .. "/done") do
    local out = sh(string.format("curl -s -o /dev/null -w '%%{http_code} %%{time_total}' %s/healthz", url))
    local code, secs = out:match("^(%d+) (%S+)")
    assert(code == "200", "healthz: " .. out)
    probes[#probes + 1] = tonumber(secs) * 1000
  end
  local per_scrape = (core.hrtime() - t0) / 1e9 / (rounds * 8 / 4)
  local busy_gap, busy_cpu = gap()
  table.sort(probes)
  bench.unserve(c, pid, sdir)
  os.execute("rm -rf " .. dir)
  report(string.format("loop held at most, %d idle nodes, no scrape", nodes), idle_gap, "ms", "")
  report("  arbor's CPU time in it", idle_cpu, "ms", "")
  report(string.format("loop held at most, 4 scrapers of /metrics and /tree"), busy_gap, "ms", "")
  report("  arbor's CPU time in the longest hold", busy_cpu, "ms", "<= 20 ms", busy_cpu <= 20)
  report(string.format("  a scrape, 4 at a time (%d of /metrics and of /tree)", rounds * 4),
    per_scrape, "s", "")
  report(string.format("  /healthz meanwhile, median of %d", #probes), median(probes), "ms", "")
  report("  /healthz meanwhile, the slowest", probes[#probes], "ms", "")
end

bench.banner("http")
arbor.run(function()
  measure()
  arbor.stop()
end, {control = false, runaway = 0})
