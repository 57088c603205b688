-- Process benchmarks (issue 5): prints each figure next to its target.
-- Run by scripts/bench: build/arbor run --quiet spec/bench/exec.lua [--small]
local arbor = require "arbor"
local core = require "arbor.core"
local policy = arbor.policy
local bench = dofile((arg[0]:match("^(.*/)") or "") .. "support/common.lua")
local size, median, report, sh = bench.size, bench.median, bench.report, bench.sh
local mktemp = bench.mktemp

-- The RSS measurement runs in a fresh arbor process: this same script with
-- --rss-child supervises 10 sleep processes and prints its RSS.
if arg[1] == "--rss-child" then
  bench.measure(function(ctx)
    for i = 1, 10 do ctx:run("sleep" .. i, arbor.exec({"sleep", "1000"})) end
  end, function(c)
    local n = 0
    while n < 10 do
      n = 0
      for i = 1, 10 do
        local v = arbor.node("root.sleep" .. i)
        if v and v.state == "HEALTHY" then n = n + 1 end
      end
      c:sleep(0.01)
    end
    c:sleep(0.2) -- output pipes and the loop settle
    collectgarbage()
    collectgarbage()
    print(string.format("rss %d", core.rss()))
    io.stdout:flush()
  end)
  return
end

local true_bin = "/bin/true"

-- arbor: a node running arbor.exec{"/bin/true"} under `immediate`: every
-- exit is a failure and the node is restarted at once. A watcher reads the
-- node's restart count at both ends of a window of `seconds` (no event
-- subscriber: an observer would add its own cost to every restart).
local function arbor_rate(seconds)
  local rate
  bench.measure(function(ctx)
    ctx:run("r", arbor.exec({true_bin}), {policy = policy.immediate})
  end, function(c)
    c:sleep(0.05) -- past the first start
    local r0, t0 = arbor.node("root.r").restarts, core.hrtime()
    c:sleep(seconds)
    local r1, t1 = arbor.node("root.r").restarts, core.hrtime()
    rate = (r1 - r0) / ((t1 - t0) / 1e9)
  end)
  return rate
end

bench.banner("process")

-- Rounds alternate between the C loop and arbor, so both see the same load
-- (the development VM is shared). Each round gives a ratio; the median of
-- those is the figure (a burst of load elsewhere skews one round, not it).
local rounds, n = size(9, 2), size(500, 50)
local ratios, c_sum, a_sum = {}, 0, 0
for i = 1, rounds do
  local c = tonumber(sh("build/bench_spawn " .. n .. " " .. true_bin):match("[%d.]+"))
  local a = arbor_rate(n / c) -- about as long as the C round
  ratios[i], c_sum, a_sum = a / c, c_sum + c, a_sum + a
end
local ratio = median(ratios)
report("respawn rate, posix_spawn + waitpid loop (C), mean", c_sum / rounds, "/s", "", nil)
report("respawn rate, arbor.exec under immediate, mean", a_sum / rounds, "/s", "", nil)
report(string.format("  ratio arbor/C, median of %d rounds", rounds), ratio, "x",
  ">= 0.9 (aim 0.95)", ratio >= 0.9)
table.sort(ratios)
for i, r in ipairs(ratios) do ratios[i] = string.format("%.2f", r) end
print("  (rounds: " .. table.concat(ratios, " ") .. ")")

local out = sh("build/arbor run --quiet spec/bench/exec.lua --rss-child")
local rss = tonumber(out:match("rss (%d+)"))
report("RSS of arbor supervising 10 sleep processes", rss / 1048576, "MiB",
  "<= 4 MiB", rss <= 4 * 1048576)
-- supervisord supervising the same 10 sleeps, its RSS read the same way
-- (resident pages of the supervisor process alone), when it is installed.
local function supervisord_rss()
  local dir = mktemp()
  local f = assert(io.open(dir .. "/supervisord.conf", "w"))
  f:write("[supervisord]\nnodaemon=true\nlogfile=", dir, "/log\npidfile=", dir,
    "/pid\n")
  for i = 1, 10 do f:write("[program:sleep", i, "]\ncommand=sleep 1000\n") end
  f:close()
  local pid = tonumber(sh("supervisord -c " .. dir ..
    "/supervisord.conf >/dev/null 2>&1 & echo $!"))
  local function read(path)
    local h = io.open(path)
    if not h then return "" end
    local text = h:read("a")
    h:close()
    return text
  end
  for _ = 1, 3000 do -- until its 10 children run (a failure guard: 30 s)
    local children = read("/proc/" .. pid .. "/task/" .. pid .. "/children")
    if select(2, children:gsub("%d+", "")) >= 10 then break end
    os.execute("sleep 0.01")
  end
  os.execute("sleep 0.2")
  local kb = tonumber(read("/proc/" .. pid .. "/status"):match("VmRSS:%s+(%d+)"))
  os.execute("kill -TERM " .. pid .. "; sleep 1; rm -rf " .. dir)
  return kb and kb * 1024
end

if sh("command -v supervisord || true") ~= "" then
  local srss = supervisord_rss()
  report("RSS of supervisord supervising 10 sleep processes",
    (srss or 0) / 1048576, "MiB", "comparison", nil)
else
  print("supervisord: not installed, no comparison")
end
