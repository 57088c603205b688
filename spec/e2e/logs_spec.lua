-- End-to-end, issue 16: durable logs (`arbor run --log-dir`), rotation, what
-- a kill -9 loses, a full disk, `--log-format json`, process output levels
-- and `arbor ctl logs` of a subtree, -f and --since. Each test runs the real
-- arbor binary on a script written into a fresh temporary directory.
local cjson = require "cjson"
local core = require "arbor.core"
local json = require "arbor.json"
local support = require "e2e.support"
local bin, q, sh, mktemp, read = support.bin, support.q, support.sh, support.mktemp, support.read
local eventually = support.eventually

local RFC3339 = "^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.%d%d%dZ$"

local function write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

local function lines(text)
  local out = {}
  for l in (text or ""):gmatch("[^\n]+") do out[#out + 1] = l end
  return out
end

-- Starts arbor in the background on script (text) in dir with args (env:
-- "K=V ..." set for it); returns {pid, out (stdout and stderr's file), rc
-- (the exit status' file)}. The test that starts it kills what is left of
-- it when it ends, passed or not. (The shell's `wait` is quiet: its
-- "Killed" after a kill -9 read like a busted run killed in scripts/test's
-- output.)
local function start(dir, script, args, env)
  write(dir .. "/tree.lua", script)
  local a = {pid = nil, out = dir .. "/out", rc = dir .. "/rc"}
  os.execute(string.format("(%s %s run %s %s > %s 2>&1 & echo $! > %s/pid; wait $! 2>/dev/null; echo $? > %s.tmp; mv %s.tmp %s) &",
    env or "", bin, args or "", q(dir .. "/tree.lua"), q(a.out), q(dir), q(a.rc), q(a.rc), q(a.rc)))
  -- the shell makes the file before it writes the pid into it
  assert(eventually(function() return tonumber(read(dir .. "/pid") or "") end))
  a.pid = tonumber(read(dir .. "/pid"))
  finally(function() os.execute("kill -9 " .. a.pid .. " 2>/dev/null") end)
  return a
end

local function finished(a, tries)
  assert(eventually(function() return read(a.rc) end, tries), "arbor did not exit")
  return tonumber(read(a.rc))
end

-- The lines of the file at path (an iterator that closes it).
local function file_lines(path)
  local f = assert(io.open(path))
  return f:lines()
end

-- The lines a file's marker lines say were dropped, and its other lines.
local function told_and_written(path)
  local told, written = 0, 0
  for l in file_lines(path) do
    local n = l:match("^%S+ WARN  [%w.]+: %.%.%. (%d+) lines dropped$")
    if n then told = told + tonumber(n) else written = written + 1 end
  end
  return told, written
end

describe("arbor run --log-dir", function()
  it("writes each DN's lines to DIR/<dn>.log with RFC 3339 times, level and DN", function()
    local dir = mktemp()
    local a = start(dir, [[
local arbor = require "arbor"
return function(ctx)
  ctx:log("hello")
  ctx:warn("two\nlines")
  ctx:logger("http"):error("oops")
  ctx:run("out", arbor.exec({"sh", "-c", "echo to-out; echo to-err >&2"}, {oneshot = true}))
  ctx:run("klog", arbor.exec({"sh", "-c", "echo 'E0102 15:04:05.000000   77 main.go:9] broke'; echo plain"},
    {oneshot = true, parse = "klog"}))
  ctx:run("fn", arbor.exec({"sh", "-c", "echo 'DEBUG: detail'"}, {oneshot = true,
    parse = function(line) local lv, rest = line:match("^(%u+): (.*)$") return lv:lower(), rest end}))
  ctx:signal("healthy")
  ctx:sleep(0.5)
  arbor.stop()
end]], "--quiet --no-control --log-dir " .. q(dir .. "/logs"))
    assert.equal(0, finished(a))
    local root = lines(read(dir .. "/logs/root.log"))
    assert.equal(2, #root)
    for _, l in ipairs(root) do
      assert.matches(RFC3339, l:match("^(%S+)"))
    end
    assert.matches("^%S+ INFO  root: hello$", root[1])
    assert.matches("^%S+ WARN  root: two\\nlines$", root[2])
    assert.matches("^%S+ ERROR root.http: oops\n$", read(dir .. "/logs/root.http.log"))
    local out = read(dir .. "/logs/root.out.log")
    assert.matches("INFO  root.out: stdout: to-out\n", out, 1, true)
    assert.matches("WARN  root.out: stderr: to-err\n", out, 1, true)
    local klog = read(dir .. "/logs/root.klog.log")
    assert.matches("ERROR root.klog: stdout: main.go:9] broke\n", klog, 1, true)
    assert.matches("INFO  root.klog: stdout: plain\n", klog, 1, true)
    assert.matches("DEBUG root.fn: stdout: detail\n", read(dir .. "/logs/root.fn.log"), 1, true)
  end)

  it("rotates by size: N files of at most the size, renamed, the newest lines in <dn>.log", function()
    local dir = mktemp()
    local a = start(dir, [[
local arbor = require "arbor"
return function(ctx)
  for i = 1, 400 do ctx:log(string.format("line %04d %s", i, string.rep("x", 40))) end
  arbor.stop()
end]], "--quiet --no-control --log-dir " .. q(dir .. "/logs") .. " --log-max-bytes 2048 --log-keep 3")
    assert.equal(0, finished(a))
    local files = lines(support.capture("ls " .. q(dir .. "/logs")))
    assert.same({"root.log", "root.log.1", "root.log.2", "root.log.3"}, files)
    local prev
    for _, f in ipairs{"root.log.3", "root.log.2", "root.log.1", "root.log"} do
      local text = read(dir .. "/logs/" .. f)
      assert.is_true(#text <= 2048, f .. " has " .. #text .. " bytes")
      for _, l in ipairs(lines(text)) do -- in order, across the files
        local n = tonumber(l:match("line (%d+)"))
        if prev then assert.equal(prev + 1, n) end
        prev = n
      end
    end
    assert.equal(400, prev)
    assert.is_nil(read(dir .. "/logs/root.log.4"))
  end)

  it("loses at most the lines after the last flush to a kill -9", function()
    local dir = mktemp()
    local a = start(dir, [[
return function(ctx)
  local i = 0
  ctx:signal("healthy")
  while true do
    i = i + 1
    ctx:log("line " .. i)
    ctx:sleep(0.005)
  end
end]], "--quiet --no-control --log-dir " .. q(dir .. "/logs"))
    -- line 20 is in the file: a flush happened after it was logged
    assert.is_true(eventually(function()
      return (read(dir .. "/logs/root.log") or ""):find("root: line 20\n", 1, true)
    end))
    os.execute("kill -9 " .. a.pid)
    finished(a)
    local got = lines(read(dir .. "/logs/root.log"))
    -- every line up to the last flush, in order, with no gap
    for i, l in ipairs(got) do assert.matches("root: line " .. i .. "$", l) end
    assert.is_true(#got >= 20)
  end)

  it("reports a bad directory and exits 2", function()
    local dir = mktemp()
    write(dir .. "/file", "")
    write(dir .. "/tree.lua", "return function(ctx) ctx:wait() end")
    local code, out = sh(bin .. " run --quiet --no-control --log-dir " .. q(dir .. "/file/sub")
      .. " " .. q(dir .. "/tree.lua"))
    assert.equal(2, code)
    assert.matches("arbor: --log-dir: ENOTDIR", out, 1, true)
    code, out = sh(bin .. " run --log-max-bytes 12 /dev/null")
    assert.equal(2, code)
    assert.matches("--log-max-bytes needs a size in bytes >= 1024", out, 1, true)
    code, out = sh(bin .. " run --log-format xml /dev/null")
    assert.equal(2, code)
    assert.matches("--log-format needs text or json, got xml", out, 1, true)
  end)
end)

describe("log files under load", function()
  -- 1M lines as fast as a program can write them: s6-log, svlogd and
  -- supervisord deliver every one by blocking the writer on its pipe.
  local SEQ = [[
local arbor = require "arbor"
return function(ctx)
  ctx:run("w", arbor.exec({"seq", "1", "1000000"}, {oneshot = true%s}))
  ctx:signal("healthy")
  while arbor.node("root.w").state ~= "DONE" do ctx:sleep(0.05) end
  arbor.stop()
end]]

  it("delivers every line of a process writing 1M lines as fast as it can: its pipe waits", function()
    local dir = mktemp()
    local a = start(dir, SEQ:format(""), "--quiet --no-control --log-max-bytes 1G --log-dir " .. q(dir .. "/logs"))
    assert.equal(0, finished(a, 30000), read(a.out))
    local i = 0
    for l in file_lines(dir .. "/logs/root.w.log") do
      i = i + 1
      local n = tonumber(l:match(" INFO  root%.w: stdout: (%d+)$"))
      if n ~= i then error(string.format("line %d of the file is %q", i, l)) end
    end
    assert.equal(1000000, i)
  end)

  it("delivers every line of both streams of several processes flooding at once", function()
    local dir = mktemp()
    local a = start(dir, [[
local arbor = require "arbor"
return function(ctx)
  for _, name in ipairs{"a", "b", "c"} do
    ctx:run(name, arbor.exec({"sh", "-c", "seq 1 200000 >&2 & seq 1 200000; wait"}, {oneshot = true}))
  end
  ctx:signal("healthy")
  while arbor.node("root.a").state ~= "DONE" or arbor.node("root.b").state ~= "DONE"
      or arbor.node("root.c").state ~= "DONE" do
    ctx:sleep(0.05)
  end
  arbor.stop()
end]], "--quiet --no-control --log-max-bytes 1G --log-dir " .. q(dir .. "/logs"))
    assert.equal(0, finished(a, 30000), read(a.out))
    for _, name in ipairs{"a", "b", "c"} do
      local next_of = {stdout = 1, stderr = 1}
      for l in file_lines(dir .. "/logs/root." .. name .. ".log") do
        local stream, n = l:match(" root%.%a: (%a+): (%d+)$")
        if tonumber(n) ~= next_of[stream] then error(string.format("root.%s: %q", name, l)) end
        next_of[stream] = next_of[stream] + 1
      end
      assert.same({stdout = 200001, stderr = 200001}, next_of)
    end
  end)

  it("drops with log_overflow = \"drop\", and every dropped line is told, the burst's end too", function()
    local dir = mktemp()
    local a = start(dir, SEQ:format(", log_overflow = \"drop\""), "--quiet --no-control --log-max-bytes 1G --log-dir "
      .. q(dir .. "/logs"))
    assert.equal(0, finished(a, 30000), read(a.out))
    local told, written = told_and_written(dir .. "/logs/root.w.log")
    assert.equal(1000000, told + written)
  end)

  it("counts a runnable's lines past the bound, with a marker at the next flush though the DN logs no more", function()
    local dir = mktemp()
    local sock = dir .. "/ctl.sock"
    local a = start(dir, [[
return function(ctx)
  ctx:run("burst", function(c)
    -- some 20 MB in one step: more than the 8 MiB the files may hold
    for i = 1, 150000 do c:log(string.format("line %d %s", i, string.rep("z", 80))) end
    c:signal("healthy")
    c:wait() -- and never a line again
  end)
  ctx:signal("healthy")
  ctx:wait()
end]], "--quiet --control " .. q(sock) .. " --log-dir " .. q(dir .. "/logs"))
    local path = dir .. "/logs/root.burst.log"
    assert.is_true(eventually(function()
      return (read(path) or ""):find("lines dropped\n", 1, true)
    end), "no marker while arbor runs")
    local told, written = told_and_written(path)
    assert.is_true(told > 0)
    assert.equal(150000, told + written)
    sh(bin .. " ctl " .. q(sock) .. " shutdown")
    assert.equal(0, finished(a))
  end)
end)

describe("times after a step of the wall clock", function()
  -- The wall clock at each line, event and exit, not the start's wall
  -- clock plus the monotonic one: that is off after a clock step, a
  -- suspend, a reexec. spec/e2e/fake_clock.c steps arbor's wall clock.
  it("are the wall clock's of that moment: log lines, events, metric timestamps", function()
    local shim = bin:gsub("[^/]*$", "") .. "fake_clock.so"
    local dir = mktemp()
    local sock, clock = dir .. "/ctl.sock", dir .. "/clock"
    write(clock, "0")
    local step = 10 * 365 * 86400 -- ten years on
    local preload = ((os.getenv("LD_PRELOAD") or "") .. " " .. shim):gsub("^ ", "")
    local a = start(dir, [[
local arbor = require "arbor"
return function(ctx)
  ctx:run("svc", arbor.exec({"sh", "-c", "sleep 0.3; exit 1"}))
  ctx:signal("healthy")
  local i = 0
  while true do
    i = i + 1
    ctx:log("tick " .. i)
    ctx:sleep(0.1)
  end
end]], "--control " .. q(sock) .. " --log-format json --log-dir " .. q(dir .. "/logs"),
      "FAKE_CLOCK_FILE=" .. q(clock) .. " LD_PRELOAD=" .. q(preload))
    local function day(t) return os.date("!%Y-%m-%d", t) end
    assert.is_true(eventually(function() return (read(dir .. "/logs/root.log") or ""):find("tick 2", 1, true) end))
    local t = os.time()
    write(clock .. ".tmp", tostring(step))
    os.rename(clock .. ".tmp", clock)
    local want = {[day(t + step - 86400)] = true, [day(t + step)] = true, [day(t + step + 86400)] = true}
    -- a line logged after the step
    assert.is_true(eventually(function()
      local text = read(dir .. "/logs/root.log") or ""
      local last = text:match("([^\n]+)\n$") or ""
      return want[last:sub(1, 10)]
    end), "no log line at the stepped wall clock: " .. ((read(dir .. "/logs/root.log") or ""):match("[^\n]+\n$") or ""))
    -- an event after the step (root.svc exits every 0.3 s), on stderr
    assert.is_true(eventually(function()
      for l in (read(a.out) or ""):gmatch("[^\n]+") do
        local ok, obj = pcall(cjson.decode, l)
        if ok and obj.dn == "root.svc" and obj.kind == "state" and want[obj.time:sub(1, 10)] then return true end
      end
    end), "no event at the stepped wall clock")
    -- the last exit's timestamp, in the metrics
    assert.is_true(eventually(function()
      local _, out = sh(bin .. " ctl " .. q(sock) .. " metrics")
      local v = tonumber(out:match('arbor_node_last_exit_timestamp_seconds{dn="root.svc"} (%S+)'))
      return v and math.abs(v - (t + step)) < 86400
    end), "no exit timestamp at the stepped wall clock")
    sh(bin .. " ctl " .. q(sock) .. " shutdown")
    assert.equal(0, finished(a))
  end)
end)

describe("a log file that cannot be written", function()
  -- Each of these made arbor die of SIGSEGV at stop: the failure of the
  -- last write was reported into the root's log after the tree was freed.
  it("maps a DN too long for a file name to a cut name and a hash, and writes it", function()
    local dir = mktemp()
    local names = {string.rep("a", 64), string.rep("b", 64), string.rep("c", 64), string.rep("d", 64)}
    local a = start(dir, string.format([[
local arbor = require "arbor"
local names = {%q, %q, %q, %q}
local function nest(c, i)
  if i > #names then c:log("deep line") c:wait() return end
  c:run(names[i], function(d) nest(d, i + 1) end)
  c:wait()
end
return function(ctx)
  ctx:run("top", function(c) nest(c, 1) end)
  ctx:log("hello")
  ctx:signal("healthy")
  ctx:sleep(1.5) -- a flush, then the last one at stop
  arbor.stop()
end]], table.unpack(names)), "--quiet --no-control --log-dir " .. q(dir .. "/logs"))
    assert.equal(0, finished(a), read(a.out))
    local dn = "root.top." .. table.concat(names, ".")
    assert.is_true(#dn + 4 > 255)
    local files = lines(support.capture("ls " .. q(dir .. "/logs")))
    local long
    for _, f in ipairs(files) do
      if f:find("~", 1, true) then long = f end
    end
    assert.is_truthy(long, "no mapped file among " .. table.concat(files, " "))
    assert.is_true(#long <= 255)
    assert.equal(dn:sub(1, 223) .. "~", long:sub(1, 224))
    assert.matches("^%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%.log$", long:sub(225))
    -- the line names the whole DN
    assert.matches(" INFO  " .. dn .. ": deep line\n$", read(dir .. "/logs/" .. long))
    assert.matches("root: hello", read(dir .. "/logs/root.log"), 1, true)
  end)

  it("reports a directory in the file's place and stops cleanly", function()
    local dir = mktemp()
    assert(os.execute("mkdir -p " .. q(dir .. "/logs/root.log")))
    local a = start(dir, [[
local arbor = require "arbor"
return function(ctx)
  ctx:log("hello")
  ctx:logger("ok"):info("fine")
  ctx:signal("healthy")
  ctx:sleep(0.2) -- the only write is the last one, at stop
  arbor.stop()
end]], "--quiet --no-control --log-dir " .. q(dir .. "/logs"))
    assert.equal(0, finished(a), read(a.out))
    local _, n = read(a.out):gsub("arbor: log file " .. dir:gsub("%p", "%%%0")
      .. "/logs/root.log: refused: not a regular file %(a directory%)", "")
    assert.equal(1, n, read(a.out))
    assert.matches("root.ok: fine", read(dir .. "/logs/root.ok.log"), 1, true)
  end)
end)

describe("a full disk", function()
  local mnt, a
  before_each(function()
    mnt, a = mktemp(), nil
    -- mode 0750: a root arbor refuses a log directory others may write
    if not os.execute("mount -t tmpfs -o size=64k,mode=0750 tmpfs " .. q(mnt) .. " 2>/dev/null") then
      mnt = nil
    end
  end)
  after_each(function()
    if a and not read(a.rc) then os.execute("kill -9 " .. a.pid) finished(a) end
    if mnt then os.execute("umount " .. q(mnt)) end
  end)

  it("reports on stderr a last write that fails at stop, and exits cleanly", function()
    if not mnt then
      pending("mount -t tmpfs is not permitted here (needs root): the full-disk test is skipped")
      return
    end
    local dir = mktemp()
    assert(os.execute(support.plain .. "dd if=/dev/zero of=" .. q(mnt .. "/filler") .. " bs=1k count=56 2>/dev/null"), "dd failed")
    a = start(dir, [[
local arbor = require "arbor"
return function(ctx)
  for i = 1, 40 do ctx:log(string.format("line %d %s", i, string.rep("y", 1000))) end
  ctx:signal("healthy")
  ctx:sleep(0.2) -- before the first flush: the only write is the last one
  arbor.stop()
end]], "--quiet --no-control --log-dir " .. q(mnt))
    assert.equal(0, finished(a), read(a.out))
    local out = read(a.out)
    local n = tonumber(out:match("arbor: log file " .. mnt:gsub("%p", "%%%0")
      .. "/root%.log: No space left on device: (%d+) lines not written %(arbor is stopping%)"))
    assert.is_truthy(n, out)
    local log = read(mnt .. "/root.log") or ""
    assert.equal(40, n + select(2, log:gsub("root: line ", ""))) -- each line written or counted
  end)

  it("drops lines with a count and a marker, reports once, keeps the tree running", function()
    if not mnt then
      pending("mount -t tmpfs is not permitted here (needs root): the full-disk test is skipped")
      return
    end
    local dir = mktemp()
    local sock = dir .. "/ctl.sock"
    -- most of the 64 KiB taken, so that the log fills what is left
    assert(os.execute(support.plain .. "dd if=/dev/zero of=" .. q(mnt .. "/filler") .. " bs=1k count=40 2>/dev/null"), "dd failed")
    a = start(dir, [[
return function(ctx)
  ctx:run("chatty", function(c)
    for i = 1, 4000 do -- about 1 MB: the disk is full long before
      c:log(string.format("line %d %s", i, string.rep("y", 200)))
      if i % 100 == 0 then c:sleep(0.01) end
    end
    for i = 1, math.huge do c:log("calm " .. i) c:sleep(0.1) end
  end)
  ctx:signal("healthy")
  ctx:wait()
end]], "--quiet --control " .. q(sock) .. " --log-dir " .. q(mnt))
    local function ctl(args) return sh(bin .. " ctl " .. q(sock) .. " " .. args) end
    assert.is_true(eventually(function()
      return (read(a.out) or ""):find("No space left on device", 1, true)
    end), "the error was not reported")
    -- the tree runs on: its lines are in memory, the flood's end too
    assert.is_true(eventually(function()
      local _, out = ctl("logs root.chatty -n 1")
      return out:find("calm 25", 1, true)
    end))
    local code, status = ctl("status")
    assert.equal(0, code)
    assert.matches("root HEALTHY", status, 1, true)
    -- room again: writing resumes, first the count of what was lost
    os.remove(mnt .. "/filler")
    assert.is_true(eventually(function()
      return (read(a.out) or ""):find("writing works again", 1, true)
    end))
    local log = read(mnt .. "/root.chatty.log")
    local marker = log:match("\n%S+ WARN  root.chatty: %.%.%. (%d+) lines dropped\n")
    assert.is_truthy(marker, "no marker line")
    -- each line lost is counted once, however often its write was retried:
    -- the report (of all files: the root's report line was lost too), the
    -- markers and the lines that reached the file add up
    local function told_in(text)
      local n = 0
      for k in text:gmatch("WARN  root[%w.]*: %.%.%. (%d+) lines dropped\n") do n = n + tonumber(k) end
      return n
    end
    local told = told_in(log)
    assert.is_true(eventually(function() -- the report's line, after its marker
      return (read(mnt .. "/root.log") or ""):find("writing works again", 1, true)
    end))
    local reported = tonumber(read(a.out):match("writing works again %((%d+) lines were dropped%)"))
    assert.equal(told + told_in(read(mnt .. "/root.log") or ""), reported)
    -- and every line logged up to the last one in the file is there or told
    local written = select(2, log:gsub("root.chatty: line ", "")) + select(2, log:gsub("root.chatty: calm ", ""))
    local last_calm = 0
    for n in log:gmatch("root.chatty: calm (%d+)\n") do last_calm = tonumber(n) end
    assert.equal(4000 + last_calm, told + written)
    assert.is_true(tonumber(marker) > 0)
    for l in log:gmatch("[^\n]+") do -- whole lines only
      assert.matches("^%S+ %u+%s+root.chatty: ", l)
    end
    local _, reports = read(a.out):gsub("No space left on device", "")
    assert.equal(1, reports)
    local _, rootlog = ctl("logs root -n 1000")
    assert.matches("No space left on device", rootlog, 1, true)
    ctl("shutdown")
    assert.equal(0, finished(a))
  end)
end)

describe("arbor run --log-format json", function()
  it("prints one JSON object per line on stderr: time, level, dn, msg", function()
    local dir = mktemp()
    local a = start(dir, [[
local arbor = require "arbor"
return function(ctx)
  ctx:warn("careful \"quoted\"")
  ctx:logger("db"):info("ok")
  ctx:signal("healthy")
  ctx:sleep(0.2)
  arbor.stop()
end]], "--no-control --log-format json")
    assert.equal(0, finished(a))
    local seen = {}
    for _, l in ipairs(lines(read(a.out))) do
      local obj = cjson.decode(l)
      assert.matches(RFC3339, obj.time)
      assert.is_string(obj.level)
      assert.is_string(obj.dn)
      assert.is_string(obj.msg)
      seen[obj.dn .. " " .. obj.level .. " " .. obj.msg] = true
    end
    assert.is_true(seen['root warn careful "quoted"'])
    assert.is_true(seen["root.db info ok"])
    assert.is_true(seen["root info NEW -> HEALTHY"])
  end)
end)

describe("arbor ctl logs", function()
  it("shows a subtree by time, --since, and follows it across restarts with -f", function()
    local dir = mktemp()
    local sock = dir .. "/ctl.sock"
    local a = start(dir, [[
return function(ctx)
  ctx:log("root first")
  ctx:run("web", function(c)
    c:log("web start")
    c:logger("http"):warn("web sub")
    c:run("db", function(d) d:log("db start") d:wait() end)
    c:wait()
  end)
  ctx:signal("healthy")
  ctx:wait()
end]], "--quiet --control " .. q(sock))
    local function ctl(args) return sh(bin .. " ctl " .. q(sock) .. " " .. args) end
    assert.is_true(eventually(function()
      local _, out = ctl("logs root.web")
      return out:find("db start", 1, true)
    end))
    local _, out = ctl("logs root")
    local got = {}
    for _, l in ipairs(lines(out)) do got[#got + 1] = l:match("^%d%d:%d%d:%d%d%.%d%d%d (%S+)%s+| (.*)$") end
    assert.same({"root", "root.web", "root.web.http", "root.web.db"}, got)
    assert.matches("root.web.http%s+| WARN web sub", out)
    _, out = ctl("logs root.web.http")
    assert.equal(1, #lines(out))
    -- follow root.web, then restart it: its new incarnation's lines come
    local follow = dir .. "/follow"
    os.execute(string.format("%s ctl %s logs root.web -f -n 0 > %s 2>&1 & echo $! > %s.pid",
      bin, q(sock), q(follow), q(follow)))
    support.sleep(0.3)
    assert.equal(0, (ctl("restart root.web")))
    assert.is_true(eventually(function()
      local f = read(follow) or ""
      return f:find("root.web%s+| web start") and f:find("root.web.db%s+| db start")
    end))
    os.execute("kill " .. read(follow .. ".pid"))
    -- --since: the restart's lines are newer than a second, root's first is not
    support.sleep(1.2)
    assert.equal(0, (ctl("restart root.web")))
    assert.is_true(eventually(function()
      local _, o = ctl("logs root --since 1s")
      return o:find("web start", 1, true)
    end))
    _, out = ctl("logs root --since 1s")
    assert.is_nil(out:find("root first", 1, true))
    assert.equal(2, (ctl("logs root --since soon")))
    ctl("shutdown")
    assert.equal(0, finished(a))
  end)

  it("drops lines for a follower that does not keep up, with a count and a marker", function()
    local dir = mktemp()
    local sock = dir .. "/ctl.sock"
    local a = start(dir, [[
return function(ctx)
  ctx:run("flood", function(c)
    local i = 0
    while true do
      i = i + 1
      c:log(string.format("line %d %s", i, string.rep("z", 500)))
      if i % 200 == 0 then c:sleep(0.001) end
    end
  end)
  ctx:signal("healthy")
  ctx:wait()
end]], "--quiet --control " .. q(sock))
    assert.is_true(eventually(function() return core.connect(sock) end))
    local c = assert(core.connect(sock))
    assert(c:send(json.encode({op = "logs", dn = "root", follow = true, n = 0, id = 1})))
    support.sleep(3) -- not reading: megabytes pile up unsent
    local marker
    for _ = 1, 200000 do
      local frame = c:recv(5000)
      if not frame then break end
      local out = json.decode(frame).out or ""
      marker = out:match("%.%.%. (%d+) lines dropped %(this follower did not keep up%)")
      if marker then break end
    end
    c:close()
    assert.is_truthy(marker, "no marker line")
    assert.is_true(tonumber(marker) > 0)
    assert.equal(0, (sh(bin .. " ctl " .. q(sock) .. " status")))
    sh(bin .. " ctl " .. q(sock) .. " shutdown")
    assert.equal(0, finished(a))
  end)
end)
