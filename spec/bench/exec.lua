-- Process benchmarks (issue 5): prints each figure next to its target.
-- Run by scripts/bench: build/arbor run --quiet spec/bench/exec.lua [--small]
local arbor = require "arbor"
local core = require "arbor.core"
local policy = arbor.policy

-- The RSS measurement runs in a fresh arbor process: this same script with
-- --rss-child supervises 10 sleep processes and prints its RSS.
if arg[1] == "--rss-child" then
  local n = 0
  arbor.run(function(ctx)
    for i = 1, 10 do ctx:run("sleep" .. i, arbor.exec({"sleep", "1000"})) end
    ctx:run("measure", function(c)
      c:signal("healthy")
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
      arbor.stop()
      c:wait()
    end)
    ctx:signal("healthy")
    ctx:wait()
  end, {signals = false})
  return
end

local small = arg[1] == "--small"
local function size(full, reduced) return small and reduced or full end

local function report(name, value, unit, target, ok)
  print(string.format("%-52s %12.3f %-8s target %-14s %s", name, value, unit,
    target, ok == nil and "" or ok and "ok" or "MISSED"))
end

local function sh(cmd)
  local p = io.popen(cmd)
  local out = p:read("a")
  p:close()
  return out
end

local true_bin = "/bin/true"

-- arbor: a node running arbor.exec{"/bin/true"} under `immediate`: every
-- exit is a failure and the node is restarted at once.
local function arbor_rate(n)
  local starts, t0, t1 = 0, nil, nil
  arbor.run(function(ctx)
    ctx:run("r", arbor.exec({true_bin}), {policy = policy.immediate})
    ctx:signal("healthy")
    ctx:wait()
  end, {signals = false, on_event = function(ev)
    if ev.dn == "root.r" and ev.kind == "state" and ev.to == "NEW" then
      starts = starts + 1
      if starts == 1 then t0 = core.hrtime() end
      if starts == n + 1 then
        t1 = core.hrtime()
        arbor.stop()
      end
    end
  end})
  return n / ((t1 - t0) / 1e9)
end

print(string.format("arbor %s process benchmarks%s", arbor.version,
  small and " (small sizes: figures are not meaningful)" or ""))

-- Rounds alternate between the C loop and arbor, so both see the same load
-- (the development VM is shared); each rate is the total over its rounds.
local rounds, n = size(6, 2), size(500, 50)
local c_time, a_time = 0, 0
for _ = 1, rounds do
  c_time = c_time + n / tonumber(sh("build/bench_spawn " .. n .. " " .. true_bin):match("[%d.]+"))
  a_time = a_time + n / arbor_rate(n)
end
local c_rate, a_rate = rounds * n / c_time, rounds * n / a_time
report("respawn rate, posix_spawn + waitpid loop (C)", c_rate, "/s", "", nil)
report("respawn rate, arbor.exec under immediate", a_rate, "/s",
  ">= 90% of C", a_rate >= 0.9 * c_rate)
report("  ratio arbor/C", a_rate / c_rate, "x", ">= 0.9", a_rate >= 0.9 * c_rate)

local out = sh("build/arbor run --quiet spec/bench/exec.lua --rss-child")
local rss = tonumber(out:match("rss (%d+)"))
report("RSS of arbor supervising 10 sleep processes", rss / 1048576, "MiB",
  "<= 4 MiB", rss <= 4 * 1048576)
-- supervisord supervising the same 10 sleeps, its RSS read the same way
-- (resident pages of the supervisor process alone), when it is installed.
local function supervisord_rss()
  local dir = sh("mktemp -d"):gsub("%s+$", "")
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
