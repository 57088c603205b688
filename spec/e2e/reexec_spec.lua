-- End-to-end: `arbor ctl reexec` (issue 17, docs/restore.md). arbor
-- replaces itself in place; `sleep` services keep their pids (also when the
-- new binary reports another version), a Lua runnable starts again with
-- ctx.restored and its counters, a prestart migration and a poststart job
-- do not run again across two reexecs, a binary that is not an arbor is
-- refused with the tree running on, a new arbor that cannot load the script
-- leaves no process behind, and under --init in a PID namespace arbor stays
-- PID 1.
local json = require "arbor.json"
local support = require "e2e.support"
local bin, q, sh, read = support.bin, support.q, support.sh, support.read
local poll, alive = support.poll, support.alive

local lua_dir = (support.capture("pwd"):gsub("%s+$", "")) .. "/lua"

-- The supervisor: keep (sleep), a Lua node that logs whether it was
-- restored, a prestart migration and a poststart job that append to files
-- in the script's directory; extra goes into the root.
local function script(dir, extra)
  local f = assert(io.open(dir .. "/sup.lua", "w"))
  f:write(string.format([[
local arbor = require "arbor"
local dir = %q
arbor.run(function(ctx)
  ctx:run("migrate", arbor.exec({"sh", "-c", "echo x >> " .. dir .. "/migrations"}, {oneshot = true}),
    {lifecycle = "prestart"})
  ctx:run("keep", arbor.exec{"sleep", "1000"})
  ctx:run("lua", function(c)
    c:log("restored " .. tostring(c.restored))
    c:signal("healthy")
    c:wait()
  end)
  ctx:run("warm", arbor.exec({"sh", "-c", "echo x >> " .. dir .. "/warm"}, {oneshot = true}),
    {lifecycle = "poststart"})
  %s
  ctx:signal("healthy")
  ctx:wait()
end)
]], dir, extra or ""))
  f:close()
  return q(dir .. "/sup.lua")
end

describe("reexec", function()
  local e
  after_each(function()
    if e then
      os.execute("kill -9 " .. e.pid .. " 2>/dev/null")
      os.execute(support.plain .. "pkill -9 -f " .. q(e.dir) .. " 2>/dev/null")
      os.execute("rm -rf " .. q(e.dir))
    end
    e = nil
  end)

  local function ctl(args)
    return sh(bin .. " ctl " .. q(e.sock) .. " " .. args)
  end

  local function status()
    local code, out = ctl("status --json")
    if code ~= 0 then return nil end
    local data = json.decode(out)
    data.by = {}
    for _, row in ipairs(data.table) do data.by[row.dn] = row end
    return data
  end

  local function start(extra, args)
    e = support.run_arbor(function(dir) return (args and args(dir) or "") .. script(dir, extra) end,
      "ARBOR_LUA_DIR=" .. q(lua_dir))
    poll(function()
      local st = status()
      return st and st.by["root.keep"] and st.by["root.keep"].pid and read(e.dir .. "/warm")
    end, "the tree to run")
    return status()
  end

  it("keeps the services' pids and counters, restarts Lua runnables restored, runs no job again", function()
    local before = start()
    assert.is_true(ctl("restart root.lua") == 0)
    poll(function() return status().by["root.lua"].restarts == 1 end, "the restart")
    local code, out = ctl("reexec")
    assert.equal(0, code, out)
    assert.matches("^reexec: arbor %S+ %(pid " .. e.pid .. "%) took the tree over; the control "
      .. "socket did not answer for %d+ ms\n$", out)
    code, out = ctl("reexec")
    assert.equal(0, code, out)
    local after = status()
    assert.equal(before.pid, after.pid)
    assert.equal(before.by["root.keep"].pid, after.by["root.keep"].pid)
    assert.is_true(alive(before.by["root.keep"].pid))
    assert.equal(1, after.by["root.lua"].restarts)
    assert.equal("DONE", after.by["root.migrate"].state)
    assert.equal("DONE", after.by["root.warm"].state)
    assert.equal("x\n", read(e.dir .. "/migrations"))
    assert.equal("x\n", read(e.dir .. "/warm"))
    assert.truthy(after.by["root.keep"].uptime >= before.by["root.keep"].uptime)
    local _, logs = ctl("logs root.lua -n 10")
    assert.matches("restored true", logs, 1, true)
    local _, events = ctl("events -n 200")
    assert.matches("root.keep%s+restored: process " .. before.by["root.keep"].pid
      .. " taken over after a reexec", events)
  end)

  it("stops a changed node's old process before it starts the new one", function()
    local before = start()
    local old = before.by["root.keep"].pid
    local path = e.dir .. "/sup.lua"
    local text = read(path):gsub('"sleep", "1000"', '"sleep", "2000"')
    local f = assert(io.open(path, "w"))
    f:write(text)
    f:close()
    local code, out = ctl("reexec")
    assert.equal(0, code, out)
    poll(function()
      local row = status().by["root.keep"]
      return row.pid and row.pid ~= old and row.state == "HEALTHY"
    end, "the changed node's new process")
    assert.is_false(alive(old))
    local _, logs = ctl("logs root -n 100")
    assert.matches("reexec: root.keep: not taken over: its argv changed; pid " .. old
      .. " stopped (SIGTERM, SIGKILL after 10 s)", logs, 1, true)
  end)

  it("keeps a node stopped by hand down", function()
    start()
    assert.equal(0, (ctl("stop root.lua")))
    poll(function() return status().by["root.lua"].note == "held" end, "the stop")
    local code, out = ctl("reexec")
    assert.equal(0, code, out)
    local row = status().by["root.lua"]
    assert.equal("held", row.note)
    assert.equal("CANCELED", row.state)
    local _, logs = ctl("logs root.lua -n 10")
    assert.is_nil(logs:find("restored true", 1, true)) -- it did not run
  end)

  it("carries failure history over: a node one failure from giving up gives up at the next", function()
    start([[ctx:run("fragile", arbor.exec{"sleep", "1000"},
    {policy = arbor.policy.intensity{max = 1, period = 1000, exceeded = "stop"}})]])
    poll(function() return status().by["root.fragile"].pid end, "fragile to run")
    os.execute("kill -9 " .. status().by["root.fragile"].pid)
    poll(function()
      local row = status().by["root.fragile"]
      return row.restarts == 1 and row.pid and row.state == "HEALTHY"
    end, "the first restart")
    local code, out = ctl("reexec")
    assert.equal(0, code, out)
    local row = status().by["root.fragile"]
    assert.equal(1, row.restarts)
    os.execute("kill -9 " .. row.pid)
    poll(function() return status().by["root.fragile"].note == "given up (policy stop)" end,
      "fragile to be given up")
  end)

  it("takes the tree over with another binary that reports another version", function()
    local before = start()
    local version = before.version
    local other = version:gsub("%d+$", function(d) return tostring(tonumber(d) + 1) end)
    assert.equal(#version, #other)
    local image = assert(read(bin))
    local patched, n = image:gsub(version:gsub("%p", "%%%0") .. "%z", other .. "\0")
    assert.truthy(n > 0)
    local next_bin = e.dir .. "/arbor-next"
    local f = assert(io.open(next_bin, "wb"))
    f:write(patched)
    f:close()
    os.execute("chmod +x " .. q(next_bin))
    local code, out = ctl("reexec --binary " .. q(next_bin))
    assert.equal(0, code, out)
    assert.matches("reexec: arbor " .. other:gsub("%p", "%%%0") .. " %(pid", out)
    local after = status()
    assert.equal(other, after.version)
    assert.equal(before.by["root.keep"].pid, after.by["root.keep"].pid)
    assert.equal("x\n", read(e.dir .. "/migrations"))
  end)

  it("writes every line logged before the exec to the log files, and goes on in them", function()
    start(nil, function(dir) return "--log-dir " .. q(dir .. "/logs") .. " " end)
    local code, out = ctl("reexec")
    assert.equal(0, code, out)
    poll(function()
      local text = read(e.dir .. "/logs/root.lua.log") or ""
      return text:find("restored true", 1, true)
    end, "the restored line in the log file")
    local text = read(e.dir .. "/logs/root.lua.log")
    assert.truthy(text:find("restored false", 1, true) < text:find("restored true", 1, true))
  end)

  it("carries runtime swaps over when what they capture is plain data", function()
    start()
    -- (a local of an evaluation is a session variable: the function makes
    -- its own upvalue)
    local code, out = ctl("eval " .. q([[
      arbor.node("root.lua"):swap((function()
        local word = "swapped"
        return function(ctx)
          ctx:log(word .. " " .. tostring(ctx.restored)) ctx:signal("healthy") ctx:wait()
        end
      end)(), {restart = true})
      local helper = function() end
      arbor.node("root.keep"):set_policy(function(ev) helper() return "stop" end)
      return true]]))
    assert.equal(0, code, out)
    poll(function()
      local _, logs = ctl("logs root.lua -n 10")
      return logs:find("swapped false", 1, true)
    end, "the swap")
    code, out = ctl("reexec")
    assert.equal(0, code, out)
    poll(function()
      local _, logs = ctl("logs root.lua -n 10")
      return logs:find("swapped true", 1, true)
    end, "the swap after the reexec")
    local _, node = ctl("node root.lua --json")
    assert.truthy(json.decode(node).overridden)
    local _, logs = ctl("logs root -n 100")
    assert.matches("reexec: a runtime swap of root.keep is not carried over (policy: it "
      .. "captures function 'helper')", logs, 1, true)
  end)

  it("refuses a binary that is not an arbor, and the tree runs on", function()
    local before = start()
    local code, out = ctl("reexec --binary /bin/true")
    assert.equal(1, code)
    assert.matches("reexec: /bin/true is not an arbor (its --version says: true (GNU coreutils)", out, 1, true)
    assert.equal(1, select(2, out:gsub("\n", ""))) -- one line
    code, out = ctl("reexec --binary /no/such/arbor")
    assert.equal(1, code)
    assert.matches("reexec: /no/such/arbor --version failed: ", out, 1, true)
    local after = status()
    assert.equal(before.by["root.keep"].pid, after.by["root.keep"].pid)
    assert.equal(before.by["root.lua"].uptime <= after.by["root.lua"].uptime, true)
  end)

  it("leaves no process behind when the new arbor cannot load the script", function()
    local before = start()
    local keep = before.by["root.keep"].pid
    local f = assert(io.open(e.dir .. "/sup.lua", "a"))
    f:write("\nthis is not Lua\n")
    f:close()
    local code, out = ctl("reexec")
    assert.equal(1, code)
    assert.matches("exited after the exec: the new arbor could not take the tree over", out, 1, true)
    assert.matches("sup.lua:%d+: syntax error near .is.", read(e.dir .. "/err"))
    poll(function() return not alive(e.pid) end, "arbor to exit")
    poll(function() return not alive(keep) end, "the guard to kill the services")
  end)

  it("never takes over a process that is not its child", function()
    -- a process of this spec's (not arbor's child) and descriptors that are
    -- no output pipes
    local stranger = support.capture("sh -c 'sleep 30 >/dev/null 2>&1 & echo $!'"):match("%d+")
    finally(function() os.execute("kill " .. stranger) end)
    start(string.format([[
  ctx:run("thief", function(c)
    local core = require "arbor.core"
    local _, err = core.adopt(c, {pid = %s, slot = -1, fds = {0, 1, 2, 0}, note = -1, sd = -1})
    c:log("stranger: " .. tostring(err))
    local _, err2 = core.adopt(c, {pid = %s, slot = -1, fds = {0, 1, 2, 0}, note = -1, sd = -1})
    c:log("self: " .. tostring(err2))
    c:signal("healthy")
    c:wait()
  end)]], stranger, "require('arbor.core').getpid()"))
    local _, logs = ctl("logs root.thief -n 10")
    assert.matches("stranger: ESRCH: process " .. stranger .. " is not a child of this arbor "
      .. "leading its own process group: not taken over", logs, 1, true)
    assert.matches("self: ESRCH: process %d+ is not a child of this arbor", logs)
    assert.is_true(alive(tonumber(stranger)))
  end)

  it("keeps PID 1 under --init in a PID namespace", function()
    if os.execute("unshare --pid --fork --mount-proc true 2>/dev/null") ~= true then
      pending("unshare --pid needs root")
      return
    end
    e = support.run_arbor(function(dir)
      return "--init " .. script(dir)
    end, function(dir)
      -- run_arbor runs `sh -c 'exec BIN run ...'`: unshare goes first
      return "ARBOR_LUA_DIR=" .. q(lua_dir) .. " unshare --pid --fork --mount-proc"
    end)
    poll(function()
      local st = status()
      return st and st.by["root.keep"] and st.by["root.keep"].pid
    end, "the tree to run")
    local before = status()
    assert.equal(1, before.pid)
    local code, out = ctl("reexec")
    assert.equal(0, code, out)
    local after = status()
    assert.equal(1, after.pid)
    assert.equal(before.by["root.keep"].pid, after.by["root.keep"].pid)
  end)
end)

-- A real stack (issue 25): nginx-like `sh` programs that stop on QUIT (as
-- nginx stops gracefully) and write which signal they got to
-- DIR/NAME.PID, under a Lua supervisor `app` whose children use stock
-- policies made in its runnable (made anew each time it runs).
local NGINX = [[
ulimit -c 0
out="$1/$2.$$"
trap 'echo QUIT >> "$out"; exit 0' QUIT
trap 'echo TERM >> "$out"; exit 0' TERM
trap 'echo INT >> "$out"; exit 0' INT
trap 'echo HUP >> "$out"' HUP
while :; do sleep 0.05; done
]]

-- The stack's script; o: {mode (web's env), worker_policy (Lua source),
-- tag (app's code), late (db is made a second after app started)}.
local function stack(dir, o)
  o = o or {}
  local f = assert(io.open(dir .. "/stack.lua", "w"))
  f:write(string.format([[
local arbor = require "arbor"
local dir, nginx = %q, %q
local function program(name) return {"sh", "-c", nginx, "nginx", dir, name} end
arbor.run(function(ctx)
  ctx:run("app", function(c)
    local _ = %q
    c:run("web", arbor.exec(program("web"), {stop_signal = "QUIT", grace = 7, env = {MODE = %q}}),
      {policy = arbor.policy.exponential()})
    c:run("worker", arbor.exec(program("worker"), {stop_signal = "QUIT", grace = 3}),
      {policy = %s})
    if %s then c:sleep(1) end
    c:run("db", arbor.exec(program("db"), {stop_signal = "INT"}),
      {policy = arbor.policy.exponential{reset_after = 600}})
    c:signal("healthy")
    c:wait()
  end)
  ctx:signal("healthy")
  ctx:wait()
end)
]], dir, NGINX, o.tag or "v1", o.mode or "a", o.worker_policy or "arbor.policy.decaying()",
    tostring(o.late == true)))
  f:close()
  return q(dir .. "/stack.lua")
end

describe("reexec of a real stack", function()
  local e
  after_each(function()
    if e then
      os.execute("kill -9 " .. e.pid .. " 2>/dev/null")
      os.execute(support.plain .. "pkill -9 -f " .. q(e.dir) .. " 2>/dev/null")
      os.execute("rm -rf " .. q(e.dir))
    end
    e = nil
  end)

  local function ctl(args) return sh(bin .. " ctl " .. q(e.sock) .. " " .. args) end

  -- dn -> pid of the stack's services, once all three run
  local function pids()
    local code, out = ctl("status --json")
    if code ~= 0 then return nil end
    local t, n = {}, 0
    for _, row in ipairs(json.decode(out).table) do
      if row.pid and row.state == "HEALTHY" then t[row.dn], n = row.pid, n + 1 end
    end
    return n == 3 and t or nil
  end

  local function start()
    e = support.run_arbor(function(dir) return stack(dir) end, "ARBOR_LUA_DIR=" .. q(lua_dir))
    poll(pids, "the stack to run")
    return pids()
  end

  it("takes unchanged services over after their parent restarted, at every reexec", function()
    start()
    -- app restarts: its children, their policies too, are made anew
    local before = pids()
    assert.equal(0, (ctl("restart root.app")))
    poll(function()
      local p = pids()
      return p and p["root.app.web"] ~= before["root.app.web"] and p
    end, "app's restart")
    poll(pids, "the stack to run again")
    local kept = pids()
    for i = 1, 3 do
      local code, out = ctl("reexec")
      assert.equal(0, code, out)
      poll(pids, "the stack after reexec " .. i)
      assert.same(kept, pids())
    end
    local _, logs = ctl("logs root -n 200")
    assert.is_nil(logs:find("not taken over", 1, true), logs)
    for _, pid in pairs(kept) do assert.is_true(alive(pid)) end
  end)

  it("stops a changed service with its own stop signal and grace, and says what changed", function()
    local before = start()
    stack(e.dir, {mode = "b", worker_policy = "arbor.policy.decaying{pause = 20}"})
    local code, out = ctl("reexec")
    assert.equal(0, code, out)
    poll(function()
      local p = pids()
      return p and p["root.app.web"] ~= before["root.app.web"]
        and p["root.app.worker"] ~= before["root.app.worker"]
    end, "the changed services' new processes")
    local web, worker = before["root.app.web"], before["root.app.worker"]
    poll(function() return read(e.dir .. "/web." .. web) and read(e.dir .. "/worker." .. worker) end,
      "the old processes' signals")
    assert.equal("QUIT\n", read(e.dir .. "/web." .. web))
    assert.equal("QUIT\n", read(e.dir .. "/worker." .. worker))
    assert.equal(before["root.app.db"], pids()["root.app.db"])
    local _, logs = ctl("logs root -n 200")
    assert.matches("reexec: root.app.web: not taken over: its env changed; pid " .. web
      .. " stopped (SIGQUIT, SIGKILL after 7 s)", logs, 1, true)
    assert.matches("reexec: root.app.worker: not taken over: its policy changed; pid " .. worker
      .. " stopped (SIGQUIT, SIGKILL after 3 s)", logs, 1, true)
  end)

  it("reload keeps unchanged services when their parent's code changed, and stops a changed one with its own signal", function()
    local before = start()
    stack(e.dir, {tag = "v2"})
    local code, out = ctl("reload")
    assert.equal(0, code, out)
    assert.matches("\n  reload   root.app  (its runnable changed)\n", out, 1, true)
    poll(pids, "the stack after the reload")
    assert.same(before, pids())
    stack(e.dir, {tag = "v2", mode = "b"})
    code, out = ctl("reload")
    assert.equal(0, code, out)
    assert.matches("\n  keep     root.app.worker\n", out, 1, true)
    local web = before["root.app.web"]
    poll(function() return read(e.dir .. "/web." .. web) end, "the old web's signal")
    assert.equal("QUIT\n", read(e.dir .. "/web." .. web))
    local _, events = ctl("events -n 200")
    assert.matches("root.app.web%s+reload: restarted: its env changed", events)
  end)
end)

-- Issue 25: the version check of the binary runs off the loop with a
-- deadline, and no signal that comes while arbor replaces itself kills it.
describe("reexec under signals", function()
  local dir, pid
  after_each(function()
    if pid then os.execute("kill -9 " .. pid .. " 2>/dev/null") end
    os.execute(support.plain .. "pkill -9 -f " .. q(dir) .. " 2>/dev/null")
    os.execute("rm -rf " .. q(dir))
    pid = nil
  end)

  local function ctl(args)
    return sh("timeout 60 " .. bin .. " ctl " .. q(dir .. "/ctl.sock") .. " " .. args)
  end

  -- dn -> pid of the three services, once they run
  local function pids()
    local code, out = ctl("status --json")
    if code ~= 0 then return nil end
    local t, n = {}, 0
    for _, row in ipairs(json.decode(out).table) do
      if row.pid and row.state == "HEALTHY" then t[row.dn], n = row.pid, n + 1 end
    end
    return n == 3 and t or nil
  end

  -- The stack (nginx-like services with stop_signal QUIT), run by a shell
  -- that writes arbor's exit status to DIR/status. Each time a new arbor
  -- loads the script (not a reload's reading) it adds a line to
  -- DIR/loads, then, while DIR/slow exists, spins half a second: the
  -- window before the new arbor handles signals, made wide.
  local function start(o)
    dir = support.mktemp()
    stack(dir, o)
    local script = read(dir .. "/stack.lua")
    local f = assert(io.open(dir .. "/stack.lua", "w"))
    f:write(string.format([[
if not require("arbor.reload").capturing() then
  local dir = %q
  local f = io.open(dir .. "/loads", "a") f:write("x\n") f:close()
  if io.open(dir .. "/slow") then
    local t = os.clock() + 0.5
    repeat until os.clock() > t
  end
end
]], dir) .. script)
    f:close()
    os.execute(string.format("ARBOR_LUA_DIR=%s sh -c '%s run --control %s %s > %s/out 2> %s/err & "
      .. "echo $! > %s/pid; wait $!; echo $? > %s/status' >/dev/null 2>&1 &", q(lua_dir), bin,
      q(dir .. "/ctl.sock"), q(dir .. "/stack.lua"), q(dir), q(dir), q(dir), q(dir)))
    poll(function() return tonumber(read(dir .. "/pid") or "") end, "arbor to start")
    pid = tonumber(read(dir .. "/pid"))
    poll(pids, "the stack to run")
    return pids()
  end

  local function loads() return select(2, (read(dir .. "/loads") or ""):gsub("\n", "")) end

  it("refuses a binary whose --version does not answer within 2 s, serving meanwhile", function()
    local before = start()
    local fake = dir .. "/stuck-arbor"
    local f = assert(io.open(fake, "w"))
    f:write("#!/bin/sh\nexec sleep 1234\n")
    f:close()
    os.execute("chmod +x " .. q(fake))
    os.execute(string.format("(%s ctl %s reexec --binary %s > %s/reexec.out 2>&1; echo $? > %s/reexec.code) &",
      bin, q(dir .. "/ctl.sock"), q(fake), q(dir), q(dir)))
    local checker
    poll(function()
      checker = tonumber(support.capture(support.plain .. "pgrep -f '^sleep 1234$'"):match("%d+"))
      return checker
    end, "the version check to run")
    finally(function() os.execute("kill -9 " .. checker .. " 2>/dev/null") end)
    -- the loop serves while the binary does not answer
    local code, out = sh("timeout 1 " .. bin .. " ctl " .. q(dir .. "/ctl.sock") .. " status")
    assert.equal(0, code, out)
    poll(function() return (read(dir .. "/reexec.code") or ""):find("\n") end, "the reexec's answer")
    assert.equal("1\n", read(dir .. "/reexec.code"))
    assert.equal("arbor ctl reexec: reexec: " .. fake .. " --version did not answer within 2 s; "
      .. "the tree runs on\n", read(dir .. "/reexec.out"))
    poll(function() return not alive(checker) end, "the version check's process to be gone")
    assert.same(before, pids())
    assert.equal(pid, json.decode(select(2, ctl("status --json"))).pid)
  end)

  it("kills a version check that did not answer when the tree stops meanwhile", function()
    start()
    local fake = dir .. "/stuck-arbor"
    local f = assert(io.open(fake, "w"))
    f:write("#!/bin/sh\nexec sleep 1235\n")
    f:close()
    os.execute("chmod +x " .. q(fake))
    os.execute(string.format("%s ctl %s reexec --binary %s > /dev/null 2>&1 &", bin,
      q(dir .. "/ctl.sock"), q(fake)))
    local checker
    poll(function()
      checker = tonumber(support.capture(support.plain .. "pgrep -f '^sleep 1235$'"):match("%d+"))
      return checker
    end, "the version check to run")
    finally(function() os.execute("kill -9 " .. checker .. " 2>/dev/null") end)
    assert.equal(0, (ctl("shutdown")))
    poll(function() return (read(dir .. "/status") or ""):find("\n") end, "arbor to exit")
    assert.equal("0\n", read(dir .. "/status"))
    poll(function() return not alive(checker) end, "the version check to be killed")
  end)

  it("survives SIGHUP, SIGUSR1 and SIGUSR2 sent throughout three reexecs", function()
    local before = start()
    local storm = dir .. "/storm"
    os.execute(string.format("sh -c 'while [ -e %s ]; do kill -HUP %d; kill -USR1 %d; kill -USR2 %d; "
      .. "sleep 0.005; done' >/dev/null 2>&1 &", q(storm), pid, pid, pid))
    local f = assert(io.open(storm, "w"))
    f:close()
    os.execute("touch " .. q(dir .. "/slow"))
    for i = 1, 3 do
      local code, out = ctl("reexec")
      assert.equal(0, code, "reexec " .. i .. ": " .. out .. (read(dir .. "/err") or ""))
      assert.is_nil(read(dir .. "/status"), "arbor exited")
    end
    os.remove(storm)
    assert.equal(4, loads())
    poll(pids, "the stack")
    assert.same(before, pids())
    assert.is_true(alive(pid))
    assert.is_nil(read(dir .. "/status"))
  end)

  it("a SIGTERM that comes while the new arbor loads stops the tree in order", function()
    -- db is made a second after app starts: the stop comes before it takes
    -- its process over, which is stopped all the same, with its own signal
    local before = start{late = true}
    os.execute("touch " .. q(dir .. "/slow"))
    os.execute(string.format("%s ctl %s reexec > /dev/null 2>&1 &", bin, q(dir .. "/ctl.sock")))
    poll(function() return loads() == 2 end, "the new arbor to load the script")
    os.execute("kill -TERM " .. pid)
    poll(function() return (read(dir .. "/status") or ""):find("\n") end, "arbor to exit")
    assert.equal("0\n", read(dir .. "/status"), read(dir .. "/err"))
    for dn, p in pairs(before) do
      local name = dn:match("[^.]+$")
      assert.equal(name == "db" and "INT\n" or "QUIT\n", read(dir .. "/" .. name .. "." .. p), dn)
    end
    assert.matches("SIGTERM: stopping the tree", read(dir .. "/err"), 1, true)
  end)
end)
