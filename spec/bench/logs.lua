-- Log benchmarks (issues 16, 25): what writing log lines to files
-- (--log-dir) costs the engine, and how a process's lines are delivered
-- to the files next to s6-log and svlogd. Prints each figure next to its
-- target.
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

-- ---- log delivery (issue 25) ----------------------------------------------
-- A real process writes N lines of about 100 bytes as fast as it can (seq
-- -f, to a pipe); each logger writes them to files with a timestamp:
-- arbor under --log-dir (the process is its child, its pipe waits while
-- the file is full), s6-log (T: ISO 8601 times) and svlogd (-tt) when
-- installed (Debian packages s6 and runit). Printed: the lines delivered
-- to the files, lines per second (wall clock, first line to the last one
-- written) and the logger's CPU per line (its own process, every thread;
-- the writing process not counted).
local PAD = string.rep("x", 70) .. " request served in 12ms"
-- The writing process's command for n lines.
local function seq(n) return "seq -f '%.0f " .. PAD .. "' 1 " .. n end

-- Lines in the files of dir (the current file and rotated ones).
local function delivered(dir)
  return tonumber(bench.sh(string.format("cat %s/current %s/@* %s/*.log* 2>/dev/null | wc -l",
    dir, dir, dir)):match("%d+")) or 0
end

local ARBOR_SCRIPT = [[
local arbor = require "arbor"
local core = require "arbor.core"
local n, dir, out = tonumber(arg[1]), arg[2], arg[3]
-- CPU seconds of this process so far (every thread, not its children)
local function cpu()
  local f = assert(io.open("/proc/self/stat"))
  local s = f:read("a")
  f:close()
  local v = {}
  for x in s:match("%) (.*)$"):gmatch("%S+") do v[#v + 1] = x end
  return (tonumber(v[12]) + tonumber(v[13])) / 100
end
local c0, t0 = cpu(), core.hrtime()
arbor.run(function(ctx)
  ctx:run("w", arbor.exec({"sh", "-c", SEQ}, {oneshot = true}))
  ctx:signal("healthy")
  while arbor.node("root.w").state ~= "DONE" do ctx:sleep(0.01) end
  arbor.stop()
end, {log_dir = dir, log_max_bytes = 1 << 30})
-- arbor.run returned: the log files are closed, every line written
local f = assert(io.open(out, "w"))
f:write((core.hrtime() - t0) / 1e9, " ", cpu() - c0, "\n")
f:close()
]]

-- arbor: seconds, CPU seconds and lines delivered for n lines.
local function arbor_delivery(n)
  local tmp = bench.mktemp()
  local script, out = tmp .. "/deliver.lua", tmp .. "/result"
  local f = assert(io.open(script, "w"))
  f:write((ARBOR_SCRIPT:gsub("SEQ", function() return string.format("%q", seq(n)) end)))
  f:close()
  os.execute(string.format("build/arbor run --quiet --no-control %s %d %s %s", script, n, tmp .. "/logs", out))
  local r = bench.sh("cat " .. out)
  local secs, cpu_s = r:match("^(%S+) (%S+)")
  local got = delivered(tmp .. "/logs")
  os.execute("rm -rf '" .. tmp .. "'")
  return tonumber(secs), tonumber(cpu_s), got
end

-- A logger fed by a pipe (cmd, in DIR): seconds, its CPU seconds (the
-- shell's children's, from /proc/$$/stat once it returned) and lines
-- delivered.
local function pipe_delivery(n, setup, cmd)
  local tmp = bench.mktemp()
  local dir = tmp .. "/logs"
  os.execute((setup:gsub("%%s", dir)))
  local t0 = core.hrtime()
  local stat = bench.sh(string.format("%s | sh -c '%s; cat /proc/$$/stat'", seq(n), cmd:format(dir)))
  local secs = (core.hrtime() - t0) / 1e9
  local v = {}
  for x in stat:match("%) (.*)$"):gmatch("%S+") do v[#v + 1] = x end
  local cpu_s = (tonumber(v[14]) + tonumber(v[15])) / 100 -- cutime, cstime
  local got = delivered(dir)
  os.execute("rm -rf '" .. tmp .. "'")
  return secs, cpu_s, got
end

local function installed(prog) return bench.sh("command -v " .. prog .. " 2>/dev/null") ~= "" end

local loggers = {
  {"arbor --log-dir", arbor_delivery},
  {"s6-log", function(m) return pipe_delivery(m, "true %s", "s6-log -b n2 s268435455 T %s") end, "s6-log", "s6"},
  {"svlogd", function(m) return pipe_delivery(m, "mkdir %s && echo s0 > %s/config", "svlogd -tt %s") end,
    "svlogd", "runit"},
}
local dn = size(1000000, 20000)
for _, lg in ipairs(loggers) do
  if lg[3] and not installed(lg[3]) then
    print(string.format("%-52s (not installed: Debian package %s)", "delivery, " .. lg[1], lg[4]))
  else
    local secs, cpus, got = {}, {}, 0
    for r = 1, reps do
      local s, c, g = lg[2](dn)
      secs[r], cpus[r], got = s, c, math.min(r == 1 and g or got, g)
    end
    report(string.format("delivery, %s: lines delivered of %d", lg[1], dn), got, "lines",
      tostring(dn), got == dn)
    report("delivery, " .. lg[1] .. ": lines per second", dn / median(secs), "lines/s", "-")
    report("delivery, " .. lg[1] .. ": CPU per line", median(cpus) / dn * 1e9, "ns", "-")
  end
end
