-- End-to-end, issue 25: the log files of `arbor run --log-dir DIR` under a
-- hostile or broken directory. arbor opens only regular files, relative to
-- the directory it took at start, never through a symbolic link, a FIFO or
-- a device; a root arbor refuses a directory that anyone but root may
-- write; files and the directory are not readable by every user; a hung
-- file system never freezes the stop or a reexec. Root-only cases run as
-- root (CI does) with a throwaway user, and say why they are skipped
-- otherwise.
local support = require "e2e.support"
local bin, q, sh, mktemp, read = support.bin, support.q, support.sh, support.mktemp, support.read
local eventually = support.eventually

local is_root = support.capture("id -u"):match("^0") ~= nil

local function write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

-- Starts arbor in the background on script in dir with args (as run by
-- `prefix`, e.g. "umask 022;"); returns {pid, out, rc}. The test kills
-- what is left of it when it ends.
local function start(dir, script, args, prefix)
  write(dir .. "/tree.lua", script)
  local a = {pid = nil, out = dir .. "/out", rc = dir .. "/rc"}
  os.execute(string.format("(%s %s run %s %s > %s 2>&1 & echo $! > %s/pid; wait $!; echo $? > %s.tmp; mv %s.tmp %s) &",
    prefix or "", bin, args or "", q(dir .. "/tree.lua"), q(a.out), q(dir), q(a.rc), q(a.rc), q(a.rc)))
  assert(eventually(function() return tonumber(read(dir .. "/pid") or "") end))
  a.pid = tonumber(read(dir .. "/pid"))
  finally(function() os.execute("kill -9 " .. a.pid .. " 2>/dev/null") end)
  return a
end

local function finished(a)
  assert(eventually(function() return read(a.rc) end), "arbor did not exit")
  return tonumber(read(a.rc))
end

-- The number of times text (plain) is in s.
local function count(s, text)
  local n, at = 0, 1
  while true do
    local i = (s or ""):find(text, at, true)
    if not i then return n end
    n, at = n + 1, i + #text
  end
end

local function mode_of(path)
  return support.capture("stat -c %a " .. q(path)):match("%d+")
end

-- A script that logs on the root, on a sub-logger and on a child, over
-- more than one flush, then stops.
local CHATTY = [[
local arbor = require "arbor"
return function(ctx)
  ctx:run("ok", function(c) c:log("fine") c:wait() end)
  ctx:signal("healthy")
  for i = 1, 12 do
    ctx:log("line " .. i)
    ctx:logger("x"):info("sub " .. i)
    ctx:sleep(0.1)
  end
  arbor.stop()
end]]

describe("log files: only regular files are opened", function()
  it("never follows a symbolic link at DIR/<dn>.log: that file is refused with one line, the others are written", function()
    local dir = mktemp()
    local logs = dir .. "/logs"
    assert(os.execute("mkdir -m 0750 " .. q(logs)))
    write(dir .. "/target", "precious\n")
    assert(os.execute("ln -s " .. q(dir .. "/target") .. " " .. q(logs .. "/root.log")))
    -- a link to a missing path: nothing is created there
    assert(os.execute("ln -s " .. q(dir .. "/made-by-arbor") .. " " .. q(logs .. "/root.x.log")))
    local a = start(dir, CHATTY, "--quiet --no-control --log-dir " .. q(logs))
    assert.equal(0, finished(a), read(a.out))
    assert.equal("precious\n", read(dir .. "/target"))
    assert.is_nil(read(dir .. "/made-by-arbor"))
    local out = read(a.out)
    assert.equal(1, count(out, "arbor: log file " .. logs .. "/root.log: refused: not a regular file (a symbolic link)"), out)
    assert.equal(1, count(out, "arbor: log file " .. logs .. "/root.x.log: refused: not a regular file (a symbolic link)"), out)
    assert.matches("root.ok: fine", read(logs .. "/root.ok.log"), 1, true)
    -- the links are still links
    assert.equal(0, (sh("test -L " .. q(logs .. "/root.log"))))
  end)

  it("refuses a FIFO and a directory at DIR/<dn>.log, and a SIGTERM stops arbor at once", function()
    local dir = mktemp()
    local logs = dir .. "/logs"
    assert(os.execute("mkdir -m 0750 " .. q(logs) .. " && mkfifo " .. q(logs .. "/root.log")
      .. " && mkdir " .. q(logs .. "/root.x.log")))
    local a = start(dir, [[
return function(ctx)
  ctx:run("ok", function(c) c:log("fine") c:wait() end)
  ctx:signal("healthy")
  local i = 0
  while true do
    i = i + 1
    ctx:log("line " .. i)
    ctx:logger("x"):info("sub " .. i)
    ctx:sleep(0.05)
  end
end]], "--quiet --no-control --log-dir " .. q(logs))
    -- a flush went by: the child's file is written
    assert.is_true(eventually(function()
      return (read(logs .. "/root.ok.log") or ""):find("fine", 1, true)
    end), read(a.out))
    -- a reader on the FIFO: it opens, and is still no regular file
    os.execute("(exec 3<> " .. q(logs .. "/root.log") .. "; sleep 30) >/dev/null 2>&1 & echo $! > " .. q(dir .. "/reader"))
    finally(function() os.execute("kill " .. (read(dir .. "/reader") or "") .. " 2>/dev/null") end)
    support.sleep(1.5)
    os.execute("kill -TERM " .. a.pid)
    assert.equal(0, finished(a), read(a.out))
    local out = read(a.out)
    assert.equal(1, count(out, "arbor: log file " .. logs .. "/root.log: refused: not a regular file (a FIFO)"), out)
    assert.equal(1, count(out, "arbor: log file " .. logs .. "/root.x.log: refused: not a regular file (a directory)"), out)
  end)
end)

describe("log files: modes", function()
  it("makes the directory 0750 and the files 0640; --log-mode changes the files'", function()
    local dir = mktemp()
    local a = start(dir, CHATTY, "--quiet --no-control --log-dir " .. q(dir .. "/logs"), "umask 022;")
    assert.equal(0, finished(a), read(a.out))
    assert.equal("750", mode_of(dir .. "/logs"))
    assert.equal("640", mode_of(dir .. "/logs/root.log"))
    assert.equal("640", mode_of(dir .. "/logs/root.ok.log"))
    dir = mktemp()
    local b = start(dir, CHATTY, "--quiet --no-control --log-mode 0600 --log-dir " .. q(dir .. "/logs"), "umask 022;")
    assert.equal(0, finished(b), read(b.out))
    assert.equal("600", mode_of(dir .. "/logs/root.log"))
    -- and rotated files are made with it
    dir = mktemp()
    local c = start(dir, [[
local arbor = require "arbor"
return function(ctx)
  for i = 1, 40 do ctx:log(string.format("line %d %s", i, string.rep("r", 60))) end
  ctx:signal("healthy")
  arbor.stop()
end]], "--quiet --no-control --log-mode 0600 --log-max-bytes 1024 --log-dir "
      .. q(dir .. "/logs"), "umask 022;")
    assert.equal(0, finished(c), read(c.out))
    assert.equal("600", mode_of(dir .. "/logs/root.log"))
    assert.equal("600", mode_of(dir .. "/logs/root.log.1"))
  end)

  it("takes log_mode in arbor.run, and refuses a bad mode naming it", function()
    local dir = mktemp()
    local a = start(dir, [[
local arbor = require "arbor"
arbor.run(function(ctx) ctx:log("hi") ctx:signal("healthy") arbor.stop() end,
  {log_dir = ]] .. string.format("%q", dir .. "/logs") .. [[, log_mode = "0600"})]],
      "--quiet --no-control", "umask 022;")
    assert.equal(0, finished(a), read(a.out))
    assert.equal("600", mode_of(dir .. "/logs/root.log"))
    local code, out = sh(bin .. " run --log-mode 0999 /dev/null")
    assert.equal(2, code)
    assert.matches("--log-mode needs an octal file mode (0600, 0640), got 0999", out, 1, true)
    code, out = sh(bin .. " run --log-mode 01777 /dev/null")
    assert.equal(2, code)
    assert.matches("--log-mode needs an octal file mode (0600, 0640), got 01777", out, 1, true)
    write(dir .. "/bad.lua", [[require("arbor").run(function() end, {log_dir = "x", log_mode = "rw"})]])
    code, out = sh(bin .. " run --quiet --no-control " .. q(dir .. "/bad.lua"))
    assert.equal(2, code)
    assert.matches("option 'log_mode' must be a file mode in 0-0777, as an octal string (\"0640\") or an integer, got rw", out, 1, true)
  end)
end)

describe("log files: a root arbor and the directory's owner", function()
  local user
  before_each(function()
    user = nil
    if not is_root then return end
    user = "arbort" .. math.random(100000, 999999)
    assert(os.execute("useradd --no-create-home --shell /usr/sbin/nologin " .. user .. " 2>/dev/null"),
      "useradd failed")
  end)
  after_each(function()
    if user then os.execute("userdel " .. user .. " 2>/dev/null") end
  end)

  it("refuses, with exit 2 and the reason, a directory another user owns: its links are never followed", function()
    if not is_root then
      pending("runs as root only (a root arbor and a throwaway user that owns the log directory)")
      return
    end
    local dir = mktemp()
    os.execute("chmod 0755 " .. q(dir))
    local logs = dir .. "/logs"
    write(dir .. "/victim", "root's own\n")
    os.execute("chmod 0600 " .. q(dir .. "/victim"))
    assert(os.execute("mkdir -m 0750 " .. q(logs) .. " && chown " .. user .. " " .. q(logs)))
    -- the service user plants its links (as systemd's LogsDirectory= is
    -- owned by User=)
    assert(os.execute("runuser -u " .. user .. " -- ln -s " .. q(dir .. "/victim") .. " " .. q(logs .. "/root.log")))
    assert(os.execute("runuser -u " .. user .. " -- ln -s /etc/arbor-made-this " .. q(logs .. "/root.ok.log")))
    local a = start(dir, CHATTY, "--quiet --no-control --log-dir " .. q(logs))
    assert.equal(2, finished(a))
    local uid = support.capture("id -u " .. user):match("%d+")
    assert.matches("arbor: --log-dir: " .. logs .. " is insecure: it is owned by uid " .. uid
      .. ", not by root (a root arbor writes logs only in a directory that root owns and that "
      .. "neither its group nor others may write)", read(a.out), 1, true)
    assert.equal("root's own\n", read(dir .. "/victim"))
    assert.is_nil(read("/etc/arbor-made-this"))
  end)

  it("refuses a directory its group or others may write; takes a root-owned 0755 one", function()
    if not is_root then
      pending("runs as root only (a root arbor)")
      return
    end
    local dir = mktemp()
    write(dir .. "/none.lua", CHATTY)
    for _, case in ipairs{{"0770", "writable by its group (mode 0770)"}, {"0757", "writable by others (mode 0757)"},
        {"1777", "writable by others (mode 1777)"}} do
      local logs = dir .. "/logs" .. case[1]
      assert(os.execute("mkdir " .. q(logs) .. " && chmod " .. case[1] .. " " .. q(logs)))
      local code, out = sh(bin .. " run --quiet --no-control --log-dir " .. q(logs) .. " " .. q(dir .. "/none.lua"))
      assert.equal(2, code, out)
      assert.matches("arbor: --log-dir: " .. logs .. " is insecure: it is " .. case[2], out, 1, true)
    end
    local logs = dir .. "/fine"
    assert(os.execute("mkdir -m 0755 " .. q(logs)))
    local a = start(dir, CHATTY, "--quiet --no-control --log-dir " .. q(logs))
    assert.equal(0, finished(a), read(a.out))
    assert.matches("root: line 12", read(logs .. "/root.log"), 1, true)
  end)
end)

describe("log files: a hung file system", function()
  local hang_bin = bin:gsub("[^/]*$", "") .. "hang_open"
  local holder -- {pid, out} of hang_open

  -- Holds every open arbor (pid) makes in logs from now on, as a hung NFS
  -- or FUSE mount would, until the test ends; returns once an open is held.
  local function hang(logs, pid, dir)
    holder = {out = dir .. "/held"}
    os.execute(string.format("%s %s %d > %s 2>&1 & echo $! > %s", q(hang_bin), q(logs), pid,
      q(holder.out), q(dir .. "/holder.pid")))
    assert(eventually(function() return tonumber(read(dir .. "/holder.pid") or "") end))
    holder.pid = tonumber(read(dir .. "/holder.pid"))
    assert(eventually(function() return (read(holder.out) or ""):find("held", 1, true) end),
      "no open was held: " .. (read(holder.out) or ""))
  end
  after_each(function()
    if holder and holder.pid then os.execute("kill " .. holder.pid .. " 2>/dev/null") end
    holder = nil
  end)

  local FOREVER = [[
local arbor = require "arbor"
return function(ctx)
  -- a process that writes as fast as it can: its pipe waits, then
  ctx:run("flood", arbor.exec({"yes", "a line of output"}))
  ctx:signal("healthy")
  local i = 0
  while true do
    i = i + 1
    ctx:log("line " .. i)
    ctx:sleep(0.02)
  end
end]]

  it("bounds the wait for the writer at stop (5 s), says how many lines were not written, and exits", function()
    if not is_root then
      pending("runs as root only (fanotify holds the opens, as a hung mount would)")
      return
    end
    local dir = mktemp()
    local logs = dir .. "/logs"
    local a = start(dir, FOREVER, "--quiet --no-control --log-dir " .. q(logs))
    assert(eventually(function() return (read(logs .. "/root.log") or ""):find("line 1\n", 1, true) end))
    hang(logs, a.pid, dir)
    os.execute("kill -TERM " .. a.pid)
    assert.equal(0, finished(a), read(a.out))
    local n = tonumber(read(a.out):match("arbor: log files: the writer did not finish within 5 s %(a hung disk "
      .. "or mount%?%): (%d+) lines not written"))
    assert.is_truthy(n, read(a.out))
    assert.is_true(n > 0)
  end)

  it("bounds the wait for the writer before a reexec: the tree goes on", function()
    if not is_root then
      pending("runs as root only (fanotify holds the opens, as a hung mount would)")
      return
    end
    local dir = mktemp()
    local logs, sock = dir .. "/logs", dir .. "/ctl.sock"
    local a = start(dir, FOREVER, "--quiet --control " .. q(sock) .. " --log-dir " .. q(logs))
    -- (a frozen arbor never answers: the timeout makes that a failure)
    local function ctl(args) return sh(support.plain .. "timeout 60 " .. bin .. " ctl " .. q(sock) .. " " .. args) end
    assert(eventually(function() return (read(logs .. "/root.log") or ""):find("line 1\n", 1, true) end))
    hang(logs, a.pid, dir)
    local code, out = ctl("reexec")
    assert.equal(0, code, out)
    assert.matches("log files: the writer did not finish within 5 s", read(a.out), 1, true)
    code, out = ctl("status")
    assert.equal(0, code, out)
    assert.matches("root HEALTHY", out, 1, true)
    -- the mount comes back: the new arbor writes on
    os.execute("kill " .. holder.pid)
    local before = #(read(logs .. "/root.log") or "")
    assert(eventually(function() return #(read(logs .. "/root.log") or "") > before end))
    ctl("shutdown")
    assert.equal(0, finished(a))
  end)
end)
