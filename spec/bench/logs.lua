-- Log benchmarks (issue 16): what writing log lines to files (--log-dir)
-- costs the engine. Prints each figure next to its target.
-- Run by scripts/bench: build/arbor run --quiet spec/bench/logs.lua [--small]
--
-- A node logs N lines of about 100 bytes, 1000 every 10 ms (100,000 lines
-- per second; a loop turn between batches, as lines that come from
-- processes or runnables do),
-- once with log files and once without (the in-memory ring only). The
-- difference of the engine thread's CPU time per line, times 100,000, is
-- the share of one core that 100,000 lines per second written to files
-- cost the engine; the writer thread's share is printed apart (it runs on
-- another core, off the engine's loop).
local arbor = require "arbor"
local core = require "arbor.core"

local bench = dofile((arg[0]:match("^(.*/)") or "") .. "support/common.lua")
local size, median, report = bench.size, bench.median, bench.report

-- CPU seconds of the engine's thread (it runs the tree), what="thread",
-- or of every thread of the process, what="process": the run time
-- /proc/.../schedstat gives in nanoseconds.
local function schedstat(path)
  local f = io.open(path)
  if not f then return 0 end
  local ns = tonumber(f:read("a"):match("^(%d+)")) or 0
  f:close()
  return ns / 1e9
end
local function cpu(what)
  if what == "thread" then return schedstat("/proc/thread-self/schedstat") end
  local total = 0
  for tid in bench.sh("ls /proc/" .. core.getpid() .. "/task"):gmatch("%d+") do
    total = total + schedstat("/proc/" .. core.getpid() .. "/task/" .. tid .. "/schedstat")
  end
  return total
end

local LINE = string.rep("x", 70) .. " request served in 12ms"

-- Logs n lines; returns the engine thread's CPU seconds, the process's,
-- and the lines dropped.
local function run(n, dir)
  local engine_cpu, process_cpu, dropped
  arbor.run(function(ctx)
    ctx:run("w", function(c)
      c:signal("healthy")
      local e = core.current()
      local t0, p0 = cpu("thread"), cpu("process")
      for i = 1, n, 1000 do
        for k = i, math.min(n, i + 999) do c:log(LINE, k) end
        c:sleep(0.01) -- 1000 lines each 10 ms: 100,000 lines/s
      end
      engine_cpu = cpu("thread") - t0
      if dir then core.log_flush(e) end
      c:sleep(0.2) -- the writer writes the last of them
      process_cpu = cpu("process") - p0
      dropped = core.log_dropped(e)
      arbor.stop()
      c:wait()
    end)
    ctx:signal("healthy")
    ctx:wait()
  end, {signals = false, log_dir = dir or nil})
  return engine_cpu, process_cpu, dropped
end

bench.banner("log")
local n = size(300000, 20000)
local reps = size(3, 1)
local with, without, proc_with, proc_without, drops = {}, {}, {}, {}, 0
for r = 1, reps do
  local dir = bench.mktemp()
  local ec, pc, d = run(n, dir)
  with[r], proc_with[r], drops = ec, pc, drops + d
  os.execute("rm -rf '" .. dir .. "'")
  ec, pc = run(n)
  without[r], proc_without[r] = ec, pc
end
local per_line = math.max(0, median(with) - median(without)) / n
local share = per_line * 100000
report("log files: engine CPU of 100,000 lines/s (1 core)", share * 100, "%", "<= 10%",
  share <= 0.10)
report("log files: writer thread CPU of 100,000 lines/s", math.max(0,
  (median(proc_with) - median(with)) - (median(proc_without) - median(without))) / n * 100000 * 100,
  "%", "(other core)")
report("ctx:log without files, per line", median(without) / n * 1e9, "ns", "-")
report("lines dropped writing " .. n .. " lines", drops, "lines", "0", drops == 0)
