-- End-to-end: arbor under a service manager's NOTIFY_SOCKET (docs/deploy.md).
-- A real datagram listener (spec/e2e/notify_listen.c, built next to the
-- arbor binary) records every message arbor sends, in order.
local support = require "e2e.support"
local bin, q, sh, mktemp = support.bin, support.q, support.sh, support.mktemp

local listen_bin = bin:gsub("[^/]*$", "") .. "notify_listen"
local fixture = "spec/e2e/fixtures/sdnotify.lua"

local function alive(pid) return os.execute("kill -0 " .. pid .. " 2>/dev/null") == true end

local function poll(fn, what)
  if not support.eventually(fn) then error("timed out waiting for " .. what, 2) end
end

-- The messages received so far, each a string with its real newlines.
local function messages(l)
  local out = {}
  for line in (support.read(l.out) or ""):gmatch("[^\n]+") do
    if line ~= "listening" then out[#out + 1] = (line:gsub("\\n", "\n")) end
  end
  return out
end

-- The messages but WATCHDOG=1.
local function notes(l)
  local out = {}
  for _, m in ipairs(messages(l)) do
    if m ~= "WATCHDOG=1" then out[#out + 1] = m end
  end
  return out
end

-- Starts a listener at address (a path or @name) in dir.
local function listener(dir, address)
  local l = {out = dir .. "/messages"}
  l.pid = support.capture(string.format("%s %s > %s 2>&1 & echo $!", listen_bin,
    q(address), q(l.out))):match("%d+")
  poll(function() return (support.read(l.out) or ""):find("listening") end, "the listener")
  return l
end

-- Ends the listener once it printed what it had received.
local function close(l)
  os.execute("kill -TERM " .. l.pid)
  poll(function() return not alive(l.pid) end, "the listener to exit")
end

-- Starts arbor on the fixture in MODE with env (a string of VAR=value);
-- returns {dir, sock, rc}, and arbor's pid once its control socket answers
-- (unless no_wait).
local function start(dir, mode, env, no_wait)
  local a = {dir = dir, sock = dir .. "/ctl.sock", rc = dir .. "/rc"}
  os.execute(string.format(
    "(env %s %s run --quiet --control %s %s %s > %s/out 2>&1; echo $? > %s.tmp; "
      .. "mv %s.tmp %s) > /dev/null 2>&1 &", env, bin, q(a.sock), fixture,
    mode, q(dir), q(a.rc), q(a.rc), q(a.rc)))
  if no_wait then return a end
  poll(function()
    local _, out = sh(bin .. " ctl " .. q(a.sock) .. " status --json")
    a.pid = out:match('"pid":(%d+)')
    return a.pid
  end, "arbor's control socket")
  return a
end

-- Waits for arbor's exit; returns its status.
local function exited(a)
  poll(function() return support.read(a.rc) end, "arbor to exit")
  return tonumber(support.read(a.rc))
end

local function ctl(a, args)
  local code, out = sh(bin .. " ctl " .. q(a.sock) .. " " .. args)
  assert.equal(0, code, out)
end

describe("arbor under NOTIFY_SOCKET", function()
  local dir, l
  before_each(function() dir = mktemp() end)
  after_each(function()
    if l and alive(l.pid) then close(l) end
    l = nil
    os.execute("rm -rf " .. q(dir))
  end)

  it("sends READY=1 once the root is HEALTHY, STATUS= when the summary changes, "
    .. "STOPPING=1 with the stop bound when the stop begins", function()
    l = listener(dir, dir .. "/notify")
    -- the watchdog is another process's (WATCHDOG_PID): no WATCHDOG=1
    local a = start(dir, "tree", "NOTIFY_SOCKET=" .. q(dir .. "/notify")
      .. " WATCHDOG_USEC=100000 WATCHDOG_PID=1")
    poll(function() return #notes(l) >= 1 end, "READY=1")
    ctl(a, "stop root.a")
    poll(function() return #notes(l) >= 2 end, "the STATUS after a stop")
    ctl(a, "restart root.a")
    poll(function() return #notes(l) >= 3 end, "the STATUS after a restart")
    os.execute("kill -TERM " .. a.pid)
    assert.equal(0, exited(a))
    close(l)
    local m = messages(l)
    assert.same({
      "READY=1\nSTATUS=root HEALTHY; 4 node(s), 4 running, 0 unhealthy, 0 restart(s) in the last minute",
      "STATUS=root HEALTHY; 4 node(s), 3 running, 1 unhealthy, 0 restart(s) in the last minute",
      "STATUS=root HEALTHY; 4 node(s), 4 running, 0 unhealthy, 1 restart(s) in the last minute",
    }, {m[1], m[2], m[3]})
    -- the stop bound: 4 nodes of 5 s each, stopped one at a time (T12);
    -- how far the stop got when the loop first looked depends on its turns
    assert.matches("^STOPPING=1\nEXTEND_TIMEOUT_USEC=20000000\nSTATUS=stopping; "
      .. "4 node%(s%), %d running, %d unhealthy, 1 restart%(s%) in the last minute$", m[4])
    for i = 5, #m do -- the stop's progress, a second apart at most
      assert.matches("^STATUS=stopping; 4 node%(s%), %d running", m[i])
    end
  end)

  it("sends WATCHDOG=1 from the engine's loop: none while the loop is frozen", function()
    l = listener(dir, dir .. "/notify")
    local a = start(dir, "freeze", "NOTIFY_SOCKET=" .. q(dir .. "/notify")
      .. " WATCHDOG_USEC=100000")
    local function count(after)
      local n, seen = 0, after == nil
      for _, m in ipairs(messages(l)) do
        if m == after then seen = true
        elseif seen and m == "WATCHDOG=1" then n = n + 1 end
      end
      return n
    end
    poll(function() return count() >= 2 end, "WATCHDOG=1")
    ctl(a, "restart root.freezer")
    poll(function() return count("X_FREEZE=end") >= 2 end, "WATCHDOG=1 after the freeze")
    os.execute("kill -TERM " .. a.pid)
    assert.equal(0, exited(a))
    close(l)
    local m = messages(l)
    local begin, stop
    for i, v in ipairs(m) do
      if v == "X_FREEZE=begin" then begin = i end
      if v == "X_FREEZE=end" then stop = i end
    end
    assert.matches("^READY=1\n", m[1])
    assert.equal("WATCHDOG=1", m[2])
    -- a second without a turn of the loop, at 50 ms a ping: none sent
    assert.equal(begin + 1, stop)
    assert.equal("WATCHDOG=1", m[stop + 1])
    assert.matches("^STOPPING=1\n", m[#m])
  end)

  it("talks to an abstract socket (@name), hides the variables from the tree, "
    .. "and says why it stops when the root gave up", function()
    local name = "@arbor-spec-" .. dir:match("[^/]+$")
    l = listener(dir, name)
    local a = start(dir, "env", "NOTIFY_SOCKET=" .. q(name) .. " WATCHDOG_USEC=60000000", true)
    assert.equal(1, exited(a))
    close(l)
    local m = messages(l)
    assert.matches("^READY=1\nSTATUS=root HEALTHY; 1 node%(s%)", m[1])
    assert.equal("X_ENV=nil end ", m[2])
    assert.matches("^STOPPING=1\nSTATUS=root gave up %(stop%): .*sdnotify.lua:%d+: boom$", m[3])
    assert.equal(3, #m)
  end)

  it("warns about an address it cannot use or reach and runs the tree anyway", function()
    local a = start(dir, "env", "NOTIFY_SOCKET=relative/notify", true)
    assert.equal(1, exited(a))
    local out = support.read(dir .. "/out")
    assert.matches("arbor: NOTIFY_SOCKET=relative/notify: [^\n]* %(want a path or "
      .. "@name%): not notifying the service manager", out)
    assert.matches("root gave up (stop)", out, 1, true)
    -- an address nobody listens at: said once, the tree runs on
    os.execute("rm -f " .. q(dir .. "/rc"))
    a = start(dir, "env", "NOTIFY_SOCKET=" .. q(dir .. "/nobody"), true)
    assert.equal(1, exited(a))
    out = support.read(dir .. "/out")
    local _, n = out:gsub("arbor: cannot notify the service manager at NOTIFY_SOCKET="
      .. dir:gsub("%p", "%%%0") .. "/nobody: No such file or directory\n", "")
    assert.equal(1, n, out)
    assert.matches("root gave up (stop)", out, 1, true)
  end)
end)
