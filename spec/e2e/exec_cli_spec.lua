-- End-to-end: processes under the real arbor binary: kill -9 of arbor
-- leaves nothing behind; --init as PID 1 reaps orphans and stops on SIGTERM.
local support = require "e2e.support"
local bin, fixtures = support.bin, support.fixtures
local read, eventually = support.read, support.eventually
local sh = support.capture

-- Live (non-zombie) processes: {pid, pgid, cmdline}.
local function processes()
  local out = {}
  for name in sh("ls /proc"):gmatch("%d+") do
    local stat = read("/proc/" .. name .. "/stat")
    local state, pgid
    if stat then state, pgid = stat:match("%) (%a) %d+ (%d+)") end
    if state and state ~= "Z" then
      local cmd = (read("/proc/" .. name .. "/cmdline") or ""):gsub("%z", " ")
      out[#out + 1] = {pid = tonumber(name), pgid = tonumber(pgid), cmd = cmd}
    end
  end
  return out
end

-- {pid, ppid, state, comm} of a process, or nil.
local function stat(pid)
  local s = read("/proc/" .. pid .. "/stat")
  if not s then return nil end
  local comm, state, ppid = s:match("^%d+ %((.*)%) (%a) (%d+)")
  return {pid = pid, ppid = tonumber(ppid), state = state, comm = comm}
end

-- The processes whose command line holds marker, arbor (pid) aside.
local function marked_by(marker, pid)
  local found = {}
  for _, p in ipairs(processes()) do
    if p.cmd:find(marker, 1, true) and p.pid ~= pid then found[#found + 1] = p end
  end
  return found
end

-- True when no process of the process groups in `groups` (pgid -> true)
-- is left.
local function groups_gone(groups)
  for _, p in ipairs(processes()) do
    if groups[p.pgid] then return false end
  end
  return true
end

-- The live guard (arbor-guard) of arbor process pid, or nil.
local function guard_of(pid)
  for name in sh("ls /proc"):gmatch("%d+") do
    local st = stat(name)
    if st and st.comm == "arbor-guard" and st.ppid == pid and st.state ~= "Z" then
      return tonumber(name)
    end
  end
end

describe("arbor processes, end to end", function()
  it("kill -9 of arbor takes its process groups down", function()
    local marker = tostring(os.time() % 100000) .. tostring(math.random(100000, 999999))
    local pid = tonumber(sh(bin .. " run --quiet " .. fixtures .. "exec_orphans.lua "
      .. marker .. " >/dev/null 2>&1 & echo $!"))
    finally(function() os.execute("kill -9 " .. pid .. " 2>/dev/null") end)
    local function marked() return marked_by(marker, pid) end
    assert.is_true(eventually(function() return #marked() >= 3 end))
    local groups = {}
    for _, p in ipairs(marked()) do groups[p.pgid] = true end
    assert.is_nil(groups[pid]) -- its own group, not arbor's
    os.execute("kill -9 " .. pid)
    assert.is_true(eventually(function() return #marked() == 0 end))
    assert.is_true(eventually(function() return groups_gone(groups) end))
  end)

  for _, init in ipairs{"", " --init"} do
    it("replaces a guard killed with kill -9" .. init .. ": a later kill -9 of arbor still leaves nothing", function()
      local marker = tostring(os.time() % 100000) .. tostring(math.random(100000, 999999))
      local dir = support.mktemp()
      local out = dir .. "/out"
      local pid = tonumber(sh(bin .. " run" .. init .. " " .. fixtures .. "exec_guard.lua "
        .. marker .. " >" .. out .. " 2>&1 & echo $!"))
      local function marked() return marked_by(marker, pid) end
      finally(function() -- a failed test leaves nothing running
        os.execute("kill -9 " .. pid .. " 2>/dev/null")
        for _, p in ipairs(marked()) do os.execute("kill -9 " .. p.pid) end
        os.execute("rm -rf " .. dir)
      end)
      assert.is_true(eventually(function() return #marked() >= 5 end))
      local groups = {}
      for _, p in ipairs(marked()) do groups[p.pgid] = true end
      local old
      assert.is_true(eventually(function()
        old = guard_of(pid)
        return old ~= nil
      end))
      os.execute("kill -9 " .. old)
      local line = "process guard (pid " .. old .. ") killed by signal 9 (SIGKILL); "
        .. "started a new one (pid "
      local new
      assert.is_true(eventually(function()
        local s = read(out) or ""
        local at = s:find(line, 1, true)
        new = at and tonumber(s:match("^(%d+)%)", at + #line))
        return new ~= nil
      end), read(out))
      assert.matches("root%s+| " .. line:gsub("%p", "%%%0"), read(out))
      -- the new guard names itself once forked: not at once
      assert.is_true(eventually(function() return guard_of(pid) == new end))
      assert.is_nil(stat(old)) -- reaped
      os.execute("kill -9 " .. pid)
      assert.is_true(eventually(function() return #marked() == 0 end))
      assert.is_true(eventually(function() return groups_gone(groups) end))
    end)
  end

  it("gives a process fds 0, 1, 2 and every signal at its default, whatever arbor inherited", function()
    local dir = support.mktemp()
    finally(function() os.execute("rm -rf " .. dir) end)
    -- started with descriptor 7 open and signals ignored
    local out = sh("sh -c 'exec 7>" .. dir .. "/seven; "
      .. "trap \"\" WINCH URG XCPU PROF VTALRM IO SYS TRAP HUP 40; "
      .. "exec " .. bin .. " run --quiet " .. fixtures .. "exec_inherit.lua' 2>&1")
    assert.matches("\nnode fds 0 1 2\n", out, 1, true)
    assert.matches("node stdout: SigIgn:\t0000000000000000\n", out, 1, true)
    assert.matches("node stdout: SigBlk:\t0000000000000000\n", out, 1, true)
    -- children the tree starts itself get no descriptor arbor inherited
    -- (files the tree opens with io.open are theirs: docs/processes.md)
    for _, who in ipairs{"popen", "uv.spawn"} do
      local fds = out:match("\n" .. who:gsub("%p", "%%%0") .. " fds ([%d ]*)\n")
      assert.truthy(fds, out)
      assert.is_nil(((" " .. fds .. " "):find(" 7 ", 1, true)), who .. ": " .. fds)
    end
  end)

  it("exits 1 when a stop of the tree had to SIGKILL a process", function()
    local dir = support.mktemp()
    local pidfile = dir .. "/pid"
    local p = io.popen("sh -c 'echo $$; exec " .. bin .. " run --quiet " .. fixtures
      .. "exec_stubborn.lua " .. pidfile .. " 2>&1'; echo \"exit:$?\"")
    local pid = p:read("l")
    finally(function()
      os.execute("kill -9 " .. pid .. " 2>/dev/null")
      os.execute("rm -rf " .. dir)
    end)
    assert.is_true(eventually(function() return read(pidfile) end))
    local child = read(pidfile):match("%d+")
    os.execute("kill -TERM " .. pid)
    local rest = p:read("a")
    p:close()
    assert.matches("exit:1", rest, 1, true)
    assert.matches("arbor: the tree stopped, but 1 process(es) had to be killed with "
      .. "SIGKILL (the first: root.stubborn, pid " .. child .. ")\n", rest, 1, true)
  end)

  it("raises its own open-file limit; its processes get the one it started with", function()
    local out = sh("ulimit -Sn 256 && " .. bin .. " run --quiet " .. fixtures .. "nofile.lua 2>&1")
    assert.matches("stdout: child 256\n", out, 1, true)
    local hard = sh("ulimit -Hn"):match("%S+")
    if hard ~= "256" then
      assert.matches("self " .. (hard == "unlimited" and "unlimited" or hard), out, 1, true)
    end
  end)

  it("--init as PID 1 reaps an orphaned zombie and stops on SIGTERM", function()
    local dir = support.mktemp()
    local result = dir .. "/result"
    local arbor_pid
    finally(function() -- a failed test leaves nothing running
      if arbor_pid then os.execute("kill -9 " .. arbor_pid .. " 2>/dev/null") end
      os.execute("rm -rf " .. dir)
    end)
    sh(string.format(
      "(unshare --pid --fork --mount-proc %s run --quiet --init %sinit.lua %s; echo $? > %s.exit.tmp; mv %s.exit.tmp %s.exit) >/dev/null 2>&1 & echo $!",
      bin, fixtures, result, result, result, result))
    local unshare
    assert.is_true(eventually(function()
      for _, p in ipairs(processes()) do
        if p.cmd:find("^unshare %-%-pid") and p.cmd:find(result, 1, true) then
          unshare = p.pid
          return true
        end
      end
    end))
    -- arbor's pid outside the namespace: the child of unshare
    assert.is_true(eventually(function()
      local children = read("/proc/" .. unshare .. "/task/" .. unshare .. "/children") or ""
      arbor_pid = tonumber(children:match("%d+"))
      return arbor_pid ~= nil
    end))
    assert.is_true(eventually(function() return (read(result) or ""):find("zombies=") end))
    local r = read(result)
    assert.matches("pid=1 ", r, 1, true)
    assert.matches("zombies=0", r, 1, true)
    os.execute("kill -TERM " .. arbor_pid)
    assert.is_true(eventually(function() return read(result .. ".exit") end))
    assert.equal("0", read(result .. ".exit"):gsub("%s+", ""))
    arbor_pid = nil
  end)
end)
