-- Hung and stuck processes are caught (issue 15, points 3 and 6): the
-- systemd watchdog (WATCHDOG=1 with systemd-notify, the real client), the
-- liveness probes of Kubernetes (a command, TCP, HTTP against busybox
-- httpd, a Lua function), and a stop that had to SIGKILL after its grace.
-- Real programs on the real clock; every wait is on a condition, timeouts
-- are failure guards only.
local arbor = require "arbor"
local policy = require "arbor.policy"
local scenario = require("support").scenario

local GUARD = 20

local function within(ctx, pred, seconds)
  local deadline = arbor.now() + (seconds or GUARD)
  while not pred() do
    if arbor.now() > deadline then return false end
    ctx:sleep(0.01)
  end
  return true
end

local function state(dn) return arbor.node(dn) and arbor.node(dn).state end

local function logs(dn)
  local out = {}
  for _, l in ipairs(arbor.logs(dn)) do out[#out + 1] = l.line end
  return out
end

local function has(list, pattern, plain)
  for _, l in ipairs(list) do
    if l:find(pattern, 1, plain) then return true end
  end
  return false
end

local function count(list, pattern)
  local n = 0
  for _, l in ipairs(list) do
    if l:find(pattern) then n = n + 1 end
  end
  return n
end

local function free_port()
  local uv = require "luv"
  local s = uv.new_tcp()
  s:bind("127.0.0.1", 0)
  local port = s:getsockname().port
  s:close()
  return port
end

describe("a stop that had to SIGKILL after the grace", function()
  it("says so in how the process ended and in the node's log", function()
    scenario(function(ctx)
      local p = assert(ctx:exec({"sh", "-c",
        "trap '' TERM; echo up; while :; do sleep 0.05; done"}, {grace = 0.3}))
      assert.is_true(within(ctx, function() return has(logs(ctx.dn), "stdout: up", true) end))
      local code, sig, how = p:stop()
      assert.is_nil(code)
      assert.equal("SIGKILL", sig)
      assert.equal("killed after grace 0.3 s", how)
      assert.is_true(has(logs(ctx.dn), "^stop: process " .. p.pid
        .. " killed after grace 0%.3 s %(SIGKILL to its group%)$"), table.concat(logs(ctx.dn), "\n"))
    end)
  end)

  it("says so for what a main process left behind", function()
    local mark = os.tmpname()
    os.remove(mark)
    finally(function() os.remove(mark) end)
    scenario(function(ctx)
      -- the main process exits once its child ignores TERM
      local p = assert(ctx:exec({"sh", "-c",
        "(trap '' TERM; echo left > " .. mark .. "; while :; do sleep 0.05; done) & "
          .. "while [ ! -s " .. mark .. " ]; do sleep 0.01; done; exit 4"},
        {grace = 0.2}))
      local code, _, how = p:wait()
      assert.equal(4, code) -- its own exit stands
      assert.equal("exited with status 4", how)
      assert.is_true(has(logs(ctx.dn), "^stop: what process " .. p.pid
        .. " left in its group was killed after grace 0%.2 s %(SIGKILL%)$"), table.concat(logs(ctx.dn), "\n"))
    end)
  end)
end)

describe("arbor.exec{watchdog = S}", function()
  it("gives the program WATCHDOG_USEC and its own pid as WATCHDOG_PID, as systemd", function()
    scenario(function(ctx, root)
      root:run("w", arbor.exec({"sh", "-c",
        "echo \"env $WATCHDOG_USEC $WATCHDOG_PID $$ ${NOTIFY_SOCKET:+socket}\"; exec sleep 1000"},
        {watchdog = 30}))
      assert.is_true(within(ctx, function() return has(logs("root.w"), "^stdout: env ") end))
      local line = logs("root.w")[1]
      local usec, wpid, pid, sock = line:match("^stdout: env (%d+) (%d+) (%d+) (%a*)$")
      assert.equal("30000000", usec)
      assert.equal(pid, wpid)
      assert.equal("socket", sock)
    end)
  end)

  it("fails a program whose WATCHDOG=1 stop coming: 'watchdog timeout after S s'", function()
    scenario(function(ctx, root)
      root:run("w", arbor.exec({"sh", "-c",
        "systemd-notify --ready; for i in 1 2 3 4 5; do systemd-notify WATCHDOG=1; "
          .. "echo ping; sleep 0.1; done; echo silent; exec sleep 1000"},
        {ready = "systemd", watchdog = 0.5, grace = 1}), {policy = policy.never})
      assert.is_true(within(ctx, function() return state("root.w") == "DEAD" end))
      assert.equal("watchdog timeout after 0.5 s", arbor.node("root.w").error)
      local l = logs("root.w")
      assert.equal(5, count(l, "^stdout: ping$"))
      assert.is_true(has(l, "stdout: silent", true))
    end)
  end)

  it("counts from the spawn without a readiness mode, and says when the stop had to kill", function()
    scenario(function(ctx, root)
      root:run("w", arbor.exec({"sh", "-c", "trap '' TERM; while :; do sleep 0.05; done"},
        {watchdog = 0.2, grace = 0.2}), {policy = policy.never})
      assert.is_true(within(ctx, function() return state("root.w") == "DEAD" end))
      assert.equal("watchdog timeout after 0.2 s (killed after grace 0.2 s)",
        arbor.node("root.w").error)
    end)
  end)

  it("fails it at once on WATCHDOG=trigger, before or after it is ready", function()
    scenario(function(ctx, root)
      root:run("after", arbor.exec({"sh", "-c",
        "systemd-notify --ready; systemd-notify WATCHDOG=trigger; exec sleep 1000"},
        {ready = "systemd", watchdog = 1000}), {policy = policy.never})
      root:run("before", arbor.exec({"sh", "-c",
        "systemd-notify WATCHDOG=trigger; exec sleep 1000"},
        {ready = "systemd", watchdog = 1000}), {policy = policy.never})
      assert.is_true(within(ctx, function()
        return state("root.after") == "DEAD" and state("root.before") == "DEAD"
      end))
      assert.equal("watchdog triggered", arbor.node("root.after").error)
      assert.equal("watchdog triggered", arbor.node("root.before").error)
    end)
  end)

  it("hears EXTEND_TIMEOUT_USEC on the notification socket", function()
    scenario(function(ctx)
      local p = assert(ctx:exec({"sh", "-c",
        "systemd-notify EXTEND_TIMEOUT_USEC=2500000; systemd-notify --ready; exec sleep 1000"},
        {ready = "systemd"}))
      local ev, s = p:_next()
      assert.equal("extend", ev)
      assert.equal(2.5, s)
      assert.equal("ready", (p:_next()))
    end)
  end)
end)

describe("arbor.exec{liveness = ...}", function()
  it("fails a process after N failed command probes in a row, with the last error", function()
    scenario(function(ctx, root)
      local flag = os.tmpname()
      finally(function() os.remove(flag) end)
      -- passes while the file holds "ok"
      root:run("l", arbor.exec({"sleep", "1000"}, {liveness = {
        probe = {"sh", "-c", "grep -q ok " .. flag .. " || { echo sick >&2; exit 3; }"},
        every = 0.05, failures = 3}}), {policy = policy.never})
      local f = assert(io.open(flag, "w"))
      f:write("ok\n")
      f:close()
      assert.is_true(within(ctx, function() return state("root.l") == "HEALTHY" end))
      os.remove(flag)
      assert.is_true(within(ctx, function() return state("root.l") == "DEAD" end))
      assert.equal("liveness probe failed 3 times: sh exited with status 3",
        arbor.node("root.l").error)
      local l = logs("root.l")
      assert.is_true(has(l, "liveness probe failed (1 of 3): sh exited with status 3", true))
      assert.is_true(has(l, "liveness probe failed (2 of 3)", true))
      assert.is_true(has(l, "stderr: sick", true))
    end)
  end)

  it("resets the count on a success", function()
    scenario(function(ctx, root)
      local n = 0
      root:run("l", arbor.exec({"sleep", "1000"}, {liveness = {
        probe = function()
          n = n + 1
          if n >= 8 then return false, "flaky " .. n end
          if n % 2 == 0 then return true end
          return false, "flaky"
        end, every = 0.02, failures = 2}}), {policy = policy.never})
      assert.is_true(within(ctx, function() return state("root.l") == "DEAD" end))
      -- failures 1, 3, 5 were each followed by a success; 7 by 8
      assert.equal("liveness probe failed 2 times: flaky 8", arbor.node("root.l").error)
      assert.equal(8, n)
    end)
  end)

  it("connects over TCP: refused counts as a failure", function()
    local port = free_port()
    scenario(function(ctx, root)
      root:run("l", arbor.exec({"sleep", "1000"}, {liveness = {
        probe = {tcp = "127.0.0.1:" .. port}, every = 0.05, failures = 2}}),
        {policy = policy.never})
      assert.is_true(within(ctx, function() return state("root.l") == "DEAD" end))
      assert.equal("liveness probe failed 2 times: connect to 127.0.0.1:" .. port
        .. ": ECONNREFUSED", arbor.node("root.l").error)
    end)
  end)

  it("GETs a URL from a real web server (busybox httpd): 2xx passes, 404 fails", function()
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir " .. dir))
    finally(function() os.execute("rm -rf " .. dir) end)
    local health = assert(io.open(dir .. "/health", "w"))
    health:write("ok\n")
    health:close()
    local port = free_port()
    local url = "http://127.0.0.1:" .. port .. "/health"
    scenario(function(ctx, root)
      root:run("web", arbor.exec({"busybox", "httpd", "-f", "-vv", "-p", "127.0.0.1:" .. port,
        "-h", dir}, {ready = {probe = {tcp = "127.0.0.1:" .. port}, interval = 0.05},
        liveness = {probe = {http = url}, every = 0.05, failures = 2}}),
        {policy = policy.never})
      -- busybox logs each request: three answered while the file is there
      assert.is_true(within(ctx, function()
        return count(logs("root.web"), "response:200") >= 3
      end), table.concat(logs("root.web"), "\n"))
      assert.equal("HEALTHY", state("root.web"))
      assert.is_false(has(logs("root.web"), "liveness probe failed", true))
      os.remove(dir .. "/health")
      assert.is_true(within(ctx, function() return state("root.web") == "DEAD" end))
      assert.equal("liveness probe failed 2 times: GET " .. url .. ": status 404",
        arbor.node("root.web").error)
    end)
  end)

  it("kills a command probe that outlives its timeout", function()
    scenario(function(ctx, root)
      root:run("l", arbor.exec({"sleep", "1000"}, {liveness = {
        probe = {"sleep", "1000"}, every = 0.05, failures = 1, timeout = 0.1}}),
        {policy = policy.never})
      assert.is_true(within(ctx, function() return state("root.l") == "DEAD" end))
      assert.equal("liveness probe failed 1 times: sleep timed out after 0.1 s",
        arbor.node("root.l").error)
    end)
  end)
end)
