-- End-to-end reproductions of defects the soak (scripts/soak) found beyond
-- issue 13's list; each failed before its fix.
local client = require "arbor.client"
local core = require "arbor.core"
local json = require "arbor.json"

local support = require "e2e.support"
local bin, q, mktemp = support.bin, support.q, support.mktemp

-- Starts `arbor run [--quiet]` on a script written to a fresh directory;
-- returns {dir, sock, pid}.
local function start(script, quiet)
  local dir = mktemp()
  local f = assert(io.open(dir .. "/tree.lua", "w"))
  f:write(script)
  f:close()
  local e = {dir = dir, sock = dir .. "/ctl.sock"}
  os.execute(string.format("%s run %s --control %s %s > %s/out 2>&1 &", bin,
    quiet and "--quiet" or "", q(e.sock), q(dir .. "/tree.lua"), q(dir)))
  assert(support.eventually(function()
    local c = client.open(e.sock)
    if not c then return false end
    local r = c:request({op = "status", json = true})
    c:close()
    e.pid = r and r.ok and r.data.pid
    return e.pid ~= nil
  end), "arbor did not start")
  return e
end

local function finish(e)
  os.execute("kill " .. e.pid)
  support.eventually(function() return os.execute("kill -0 " .. e.pid .. " 2>/dev/null") ~= true end)
  os.execute("rm -rf " .. q(e.dir))
end

-- Evaluates code in the engine; its first value.
local function eval(e, code)
  local c = assert(client.open(e.sock))
  local r = c:request({op = "eval", code = code, json = true})
  c:close()
  assert(r and r.ok, r and r.error)
  return r.values[1]
end

local function fds(pid)
  return tonumber(support.capture("ls /proc/" .. pid .. "/fd | wc -l"))
end

describe("soak findings", function()
  -- processes.md (X2): "The pipes are closed ... when the node is
  -- discarded." They were closed when the node's memory was freed, once no
  -- event in the ring and no ctx referred to it: a parent restarting its
  -- process children kept 4 descriptors per child and restart open until
  -- 1024 more events had passed.
  it("closes a process node's pipes when its parent's restart discards it", function()
    local e = start([[
      local arbor = require "arbor"
      return function(ctx)
        ctx:run("h", function(c)
          c:run("p", arbor.exec({"sh", "-c", "echo up; exec sleep 1000"}))
          c:signal("healthy")
          c:wait()
        end)
        ctx:signal("healthy")
        ctx:wait()
      end]], true)
    local function settled(inc)
      return support.eventually(function()
        return eval(e, string.format([[local h, p = arbor.node("root.h"), arbor.node("root.h.p")
          return h.incarnation == %d and p ~= nil and p.state == "HEALTHY"]], inc))
      end)
    end
    assert.is_true(settled(1))
    local before = fds(e.pid)
    for i = 2, 6 do
      eval(e, 'arbor.node("root.h"):restart()')
      assert.is_true(settled(i))
    end
    local after
    local ok = support.eventually(function()
      after = fds(e.pid)
      return after <= before
    end, 50)
    finish(e)
    assert.is_true(ok, string.format("%d descriptors before five restarts of the parent, %d after",
      before, after))
  end)

  -- An `events -f` request handled while events are in the ring but not
  -- delivered to subscribers yet (here: emitted by an evaluation, delivered
  -- at the end of the loop turn; another subscriber, arbor run's printer,
  -- must exist) replayed them from the ring and then received them again
  -- from its subscription.
  it("events -f sends each event once", function()
    local e = start([[
      return function(ctx)
        ctx:run("a", function(c) c:signal("healthy") c:wait() end)
        ctx:signal("healthy")
        ctx:wait()
      end]], false)
    local a = assert(core.connect(e.sock))
    local b = assert(core.connect(e.sock))
    -- A: replaces a policy (one event each time) for a second, in slices
    assert(a:send(json.encode({id = 1, op = "eval", code = [[
      local n, t0, p = arbor.node("root.a"), os.clock(), arbor.policy.immediate()
      while os.clock() - t0 < 1 do n:set_policy(p) end]]})))
    support.sleep(0.2)
    -- B: the last 3 events, then every new one
    assert(b:send(json.encode({id = 2, op = "events", n = 3, follow = true, json = true})))
    local seen, twice, n = {}, {}, 0
    while true do
      local p = b:recv(1500)
      if not p then break end
      local f = json.decode(p)
      if f.event then
        n = n + 1
        if seen[f.event.seq] then twice[#twice + 1] = f.event.seq end
        seen[f.event.seq] = true
      end
    end
    a:close()
    b:close()
    finish(e)
    assert.is_true(n > 3)
    assert.same({}, twice)
  end)
end)
