-- Processes (X1-X6) with real programs (sh -c scripts) on the real clock.
-- Every wait is on an event or a condition; timeouts are only failure
-- guards, generous on purpose.
local arbor = require "arbor"
local policy = require "arbor.policy"

local GUARD = 20 -- seconds: a condition that takes longer is a failure

local scenario = require("support").scenario

-- Polls pred every 10 ms until it holds; false after GUARD seconds.
local function within(ctx, pred, seconds)
  local deadline = arbor.now() + (seconds or GUARD)
  while not pred() do
    if arbor.now() > deadline then return false end
    ctx:sleep(0.01)
  end
  return true
end

local function state(dn)
  local n = arbor.node(dn)
  return n and n.state
end

local function logs(dn)
  local out = {}
  for _, l in ipairs(arbor.logs(dn)) do out[#out + 1] = l.line end
  return out
end

local read = require("e2e.support").read

-- Alive (not a zombie, not gone)?
local function alive(pid)
  local stat = read("/proc/" .. pid .. "/stat")
  if not stat then return false end
  return stat:match("%) (%a)") ~= "Z"
end

local function self_pid()
  return tonumber(read("/proc/self/stat"):match("^(%d+)"))
end

-- Entries of a directory (luv's synchronous scandir: no helper process
-- whose own pipe would be counted).
local function entries(dir)
  local uv = require "luv"
  local out = {}
  local h = uv.fs_scandir(dir)
  while h do
    local name = uv.fs_scandir_next(h)
    if not name then break end
    out[#out + 1] = name
  end
  return out
end

-- Zombie children of this process.
local function zombies()
  local me, n = self_pid(), 0
  for _, name in ipairs(entries("/proc")) do
    if name:match("^%d+$") then
      local stat = read("/proc/" .. name .. "/stat")
      local st, ppid
      if stat then st, ppid = stat:match("%) (%a) (%d+)") end
      if st == "Z" and tonumber(ppid) == me then n = n + 1 end
    end
  end
  return n
end

local function fd_list()
  local out = {}
  for _, fd in ipairs(entries("/proc/self/fd")) do
    out[#out + 1] = fd .. " -> " .. tostring(require("luv").fs_readlink("/proc/self/fd/" .. fd))
  end
  table.sort(out)
  return table.concat(out, "\n")
end

local function fds() return #entries("/proc/self/fd") end

local function has(list, pattern)
  for _, l in ipairs(list) do
    if l:find(pattern) then return true end
  end
  return false
end

-- A policy that restarts after `delay` until its n-th decision, which stops.
local function stop_after(n, delay)
  local calls = 0
  return function()
    calls = calls + 1
    return calls >= n and "stop" or delay
  end
end

describe("ctx:exec", function()
  it("runs a program and reports how it ended", function()
    scenario(function(ctx)
      local p = assert(ctx:exec({"sh", "-c", "exit 3"}))
      assert.is_true(p.pid > 0)
      local code, sig, how = p:wait()
      assert.equal(3, code)
      assert.is_nil(sig)
      assert.equal("exited with status 3", how)
      p = assert(ctx:exec({"sh", "-c", "kill -9 $$"}))
      code, sig, how = p:wait()
      assert.is_nil(code)
      assert.equal("SIGKILL", sig)
      assert.equal("killed by signal 9 (SIGKILL)", how)
      p = assert(ctx:exec({"sleep", "100"}))
      assert.is_true(p:kill("TERM"))
      assert.equal("SIGTERM", select(2, p:wait()))
    end)
  end)

  it("stops an incarnation's processes when it ends, after its defers", function()
    local pid, alive_in_defer
    scenario(function(ctx, root)
      root:run("w", function(c)
        pid = assert(c:exec({"sleep", "100"})).pid
        c:defer(function() alive_in_defer = alive(pid) end)
        error("boom")
      end, {policy = policy.never})
      assert.is_true(within(ctx, function() return state("root.w") == "DEAD" end))
      assert.is_true(within(ctx, function() return pid and not alive(pid) end))
    end)
    assert.is_true(alive_in_defer)
  end)

  it("lets go of the handles of processes that ended (a loop does not pile them up)", function()
    scenario(function(ctx)
      local seen = setmetatable({}, {__mode = "k"})
      for _ = 1, 20 do
        local p = assert(ctx:exec({"true"}))
        p:wait()
        seen[p] = true
      end
      collectgarbage()
      collectgarbage()
      local left = 0
      for _ in pairs(seen) do left = left + 1 end
      assert.is_true(left <= 1, left .. " handles still held")
    end)
  end)

  it("passes cwd, env and umask", function()
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir " .. dir))
    scenario(function(ctx)
      local p = assert(ctx:exec({"sh", "-c", "pwd; echo \"$A-$HOME\"; umask"},
        {cwd = dir, env = {A = "x", HOME = false}, umask = "027"}))
      p:wait()
      local l = logs(ctx.dn)
      assert.equal("stdout: " .. dir, l[1])
      assert.is_true(has(l, "stdout: x%-$"))
      assert.is_true(has(l, "stdout: 0027"))
      p = assert(ctx:exec({"sh", "-c", "echo ${HOME:-none}"}, {env_replace = true}))
      p:wait()
      assert.is_true(has(logs(ctx.dn), "stdout: none"))
    end)
    os.execute("rm -rf " .. dir)
  end)

  it("runs as another user (uid/gid by name or number)", function()
    if read("/proc/self/status"):match("\nUid:%s+(%d+)") ~= "0" then
      pending("needs root")
      return
    end
    scenario(function(ctx)
      local p = assert(ctx:exec({"sh", "-c", "id -u; id -g; echo $ARBOR_NOTIFY_FD >&3"},
        {uid = "nobody", gid = 65534, ready = "notify"}))
      assert.equal(0, p:wait())
      local l = logs(ctx.dn)
      assert.same({"stdout: 65534", "stdout: 65534"}, {l[1], l[2]})
    end)
  end)

  it("stops with stop_signal", function()
    scenario(function(ctx, root)
      root:run("svc", arbor.exec({"sh", "-c",
        "trap 'echo got INT; exit 0' INT; echo up; while :; do sleep 0.05; done"},
        {stop_signal = "SIGINT", ready = {stdout = "^up$"}}))
      assert.is_true(within(ctx, function() return state("root.svc") == "HEALTHY" end))
      arbor.node("root.svc"):stop()
      assert.is_true(within(ctx, function() return state("root.svc") == "CANCELED" end))
      assert.is_true(has(logs("root.svc"), "got INT"))
    end)
  end)

  it("applies rlimits before the program runs", function()
    scenario(function(ctx)
      local p = assert(ctx:exec({"sh", "-c", "ulimit -Sn; ulimit -Hn; ulimit -c"},
        {rlimits = {nofile = {100, 200}, core = 0}}))
      assert.equal(0, p:wait())
      local l = logs(ctx.dn)
      assert.same({"stdout: 100", "stdout: 200", "stdout: 0"}, {l[1], l[2], l[3]})
    end)
  end)

  it("keeps a partial last line and splits very long lines", function()
    scenario(function(ctx)
      local p = assert(ctx:exec({"sh", "-c",
        "printf '%05000d\\n' 7; printf 'no newline'"}, {line_max = 1024}))
      p:wait()
      local l = logs(ctx.dn)
      local pieces, total = 0, 0
      for _, line in ipairs(l) do
        local body = line:match("^stdout: ([0-9]+)$")
        if body then
          pieces = pieces + 1
          total = total + #body
          assert.is_true(#body <= 1024)
        end
      end
      assert.equal(5, pieces)
      assert.equal(5000, total)
      assert.equal("stdout: no newline", l[#l])
    end)
  end)

  it("reads a fast writer without growing memory", function()
    scenario(function(ctx)
      collectgarbage()
      local before = require("arbor.core").rss()
      -- 64 MB of output in 64 KB lines, as fast as the pipe goes
      local p = assert(ctx:exec({"sh", "-c",
        "head -c 67108864 /dev/zero | tr '\\0' 'x' | fold -w 65536"}))
      p:wait()
      collectgarbage()
      local grown = require("arbor.core").rss() - before
      -- (not checked under AddressSanitizer, whose freed memory sits in
      -- quarantine, nor under valgrind, whose allocator is its own)
      local preload = os.getenv("LD_PRELOAD") or ""
      if not (preload:find("asan", 1, true) or preload:find("vgpreload", 1, true)) then
        assert.is_true(grown < 16 * 1024 * 1024, "RSS grew by " .. grown)
      end
      assert.equal(64, #logs(ctx.dn)) -- the log keeps its last 64 lines
    end)
  end)

  it("refuses bad input clearly, leaving no zombie and no fd", function()
    -- executable, but no program the kernel can run: only exec finds out
    local garbage = os.tmpname()
    local f = assert(io.open(garbage, "w"))
    f:write("\0\1\2 not a program\n")
    f:close()
    os.execute("chmod +x " .. garbage)
    finally(function() os.remove(garbage) end)
    local cases = {
      {{garbage}, {}, "ENOEXEC: exec format error: " .. garbage},
      {{"/nonexistent/prog"}, {}, "ENOENT: no such file or directory: /nonexistent/prog"},
      {{"no-such-program-x5"}, {}, "ENOENT: no-such-program-x5: not found in PATH"},
      {{"/etc/passwd"}, {}, "EACCES: permission denied: /etc/passwd (not executable)"},
      {{"true"}, {cwd = "/nonexistent-dir"}, "ENOENT: no such file or directory: cwd /nonexistent-dir"},
      {{"true"}, {cwd = "/etc/passwd"}, "ENOTDIR: not a directory: cwd /etc/passwd"},
    } -- misuse raises at arbor.exec's call: spec/exec_options_spec.lua
    scenario(function(ctx, root)
      -- warm up: the first spawn starts the guard (an fd held for good)
      ctx:exec({"true"}):wait()
      local fd0, z0 = fds(), zombies()
      local f0 = fd_list()
      for i, c in ipairs(cases) do
        root:run("bad" .. i, arbor.exec(c[1], c[2]), {policy = policy.never})
      end
      for i, c in ipairs(cases) do
        local dn = "root.bad" .. i
        assert.is_true(within(ctx, function() return state(dn) == "DEAD" end), dn)
        assert.matches(c[3], arbor.node(dn).error, 1, true)
      end
      assert.equal(fd0, fds(), "fds before:\n" .. f0 .. "\nafter:\n" .. fd_list())
      assert.equal(z0, zombies())
    end)
  end)
end)

describe("a program that cannot run, where vfork is a fork", function()
  -- valgrind runs vfork as a fork: the child's memory is its own, and arbor
  -- goes on before the child has set itself up or exec'd. spawn.c waited
  -- on a pipe only when built with valgrind's header: a build made before
  -- valgrind was installed (`scripts/run`, then `scripts/test`, on a fresh
  -- machine) reported ENOENT and ENOEXEC as "exited with status 127" and
  -- sent SIGTERM into a child that still had arbor's handlers. So the
  -- build must not depend on what happens to be installed.
  it("is reported the same whatever headers were installed at the build", function()
    local found = {}
    for path in io.popen("find src -name '*.[ch]' | sort"):lines() do
      local n = 0
      for line in io.lines(path) do
        n = n + 1
        if line:find("__has_include", 1, true) then found[#found + 1] = path .. ":" .. n end
      end
    end
    assert.same({}, found)
  end)
end)

describe("what a program inherits", function()
  -- The descriptors of sh ($$) as ls (its child) lists them, after `begin`.
  local list_fds = {"sh", "-c", "echo begin; ls /proc/$$/fd; echo end"}
  local function fds_of(ctx, opts)
    assert.equal(0, assert(ctx:exec(list_fds, opts)):wait())
    local l, out = logs(ctx.dn), {}
    local i = #l
    while l[i] ~= "stdout: begin" do i = i - 1 end
    for j = i + 1, #l - 1 do out[#out + 1] = l[j]:match("^stdout: (%d+)$") end
    return table.concat(out, " ")
  end

  it("gets fds 0, 1, 2 (and 3 with ready = notify) only, whatever the tree holds open", function()
    local path = os.tmpname()
    local held = assert(io.open(path, "w")) -- files the tree opened
    local pipe = assert(io.popen("cat >/dev/null", "w"))
    finally(function()
      held:close()
      pipe:close()
      os.remove(path)
    end)
    scenario(function(ctx)
      assert.equal("0 1 2", fds_of(ctx))
      assert.equal("0 1 2 3", fds_of(ctx, {ready = "notify"}))
      assert.equal("0 1 2", fds_of(ctx, {stdin = "inherit"}))
      -- through `arbor --exec-shim`, which applies the rlimits
      assert.equal("0 1 2", fds_of(ctx, {rlimits = {core = 0}}))
    end)
  end)

  it("as another user, cannot write through a file the tree opened", function()
    if read("/proc/self/status"):match("\nUid:%s+(%d+)") ~= "0" then
      pending("needs root")
      return
    end
    local path = os.tmpname() -- root's, mode 0600
    local held = assert(io.open(path, "a"))
    finally(function()
      held:close()
      os.remove(path)
    end)
    local fd
    for _, n in ipairs(entries("/proc/self/fd")) do
      if require("luv").fs_readlink("/proc/self/fd/" .. n) == path then fd = n end
    end
    assert.truthy(fd)
    scenario(function(ctx)
      local p = assert(ctx:exec({"perl", "-e", [[
        open(my $h, ">&=", $ARGV[0]) or die "no fd $ARGV[0]: $!\n";
        print $h "written by uid $<\n";
        close $h or die "cannot write: $!\n";
        print "wrote\n";
      ]], fd}, {uid = "nobody"}))
      p:wait()
      assert.is_true(has(logs(ctx.dn), "^stderr: no fd " .. fd .. ": Bad file descriptor$"))
    end)
    assert.equal("", read(path))
  end)
end)

describe("a node's output pipes", function()
  it("are made once and kept across restarts, each run's lines logged", function()
    scenario(function(ctx, root)
      root:run("loop", arbor.exec({"sh", "-c", "readlink /proc/self/fd/1; echo err >&2"}),
        {policy = stop_after(10, 0)})
      assert.is_true(within(ctx, function() return state("root.loop") == "DEAD" end))
      local pipes, err = {}, 0
      for _, l in ipairs(logs("root.loop")) do
        local pipe = l:match("^stdout: (pipe:%[%d+%])$")
        if pipe then pipes[#pipes + 1] = pipe end
        if l:find("^stderr: err$") then err = err + 1 end
      end
      assert.equal(10, #pipes)
      assert.equal(10, err)
      for i = 2, 10 do assert.equal(pipes[1], pipes[i], "the same pipe every run") end
    end)
  end)

  it("log what a process that left its group writes after the main one ended", function()
    scenario(function(ctx, root)
      root:run("escape", function(c)
        c:signal("healthy")
        -- the main process ends once the other has left its group (the
        -- flag file); that one writes 0.8 s later, long after the group is
        -- gone
        local flag = os.tmpname()
        os.remove(flag)
        local p = assert(c:exec({"sh", "-c",
          "setsid sh -c 'touch \"$0\"; sleep 0.8; echo late' \"$0\" & " ..
          "while [ ! -e \"$0\" ]; do sleep 0.01; done; rm \"$0\"; echo early", flag}))
        p:wait()
        c:wait()
      end)
      assert.is_true(within(ctx, function()
        return has(logs("root.escape"), "^stdout: late$")
      end))
      assert.is_true(has(logs("root.escape"), "^stdout: early$"))
    end)
  end)

  it("are not shared: a second process running at the same time gets its own", function()
    scenario(function(ctx)
      local a = assert(ctx:exec({"sh", "-c", "sleep 0.2; echo from-a"}))
      local b = assert(ctx:exec({"sh", "-c", "echo from-b"}))
      b:wait()
      a:wait()
      assert.is_true(has(logs(ctx.dn), "^stdout: from%-a$"))
      assert.is_true(has(logs(ctx.dn), "^stdout: from%-b$"))
    end)
  end)
end)

describe("arbor.exec", function()
  it("restarts a crash loop per its policy, with how it ended", function()
    scenario(function(ctx, root)
      root:run("crash", arbor.exec({"sh", "-c", "echo boom >&2; exit 3"}),
        {policy = stop_after(4, 0.01)})
      assert.is_true(within(ctx, function()
        local n = arbor.node("root.crash")
        return n.state == "DEAD" and n.restarts == 3
      end))
      local n = arbor.node("root.crash")
      assert.equal("sh exited with status 3", n.error)
      assert.is_true(has(logs("root.crash"), "^stderr: boom$"))
    end)
  end)

  it("ends DONE after exit 0 when oneshot, DEAD otherwise", function()
    scenario(function(ctx, root)
      root:run("job", arbor.exec({"true"}, {oneshot = true}))
      root:run("svc", arbor.exec({"true"}), {policy = policy.never})
      root:run("sig", arbor.exec({"sh", "-c", "kill -9 $$"}), {policy = policy.never})
      assert.is_true(within(ctx, function()
        return state("root.job") == "DONE" and state("root.svc") == "DEAD"
          and state("root.sig") == "DEAD"
      end))
      assert.equal("true exited with status 0", arbor.node("root.svc").error)
      assert.equal("sh killed by signal 9 (SIGKILL)", arbor.node("root.sig").error)
    end)
  end)

  it("stops at once a process that obeys SIGTERM: CANCELED", function()
    scenario(function(ctx, root)
      root:run("svc", arbor.exec({"sleep", "1000"}, {grace = 60}))
      assert.is_true(within(ctx, function() return state("root.svc") == "HEALTHY" end))
      local t0 = arbor.now()
      arbor.node("root.svc"):stop()
      assert.is_true(within(ctx, function() return state("root.svc") == "CANCELED" end))
      assert.is_true(arbor.now() - t0 < 30, "the stop waited for the grace period")
    end)
  end)

  it("SIGKILLs a process ignoring SIGTERM after grace", function()
    -- (a node's own stop, not the tree's: arbor.run still returns true)
    local ok = scenario(function(ctx, root)
      root:run("stubborn", arbor.exec({"sh", "-c",
        "trap '' TERM; echo up; while :; do sleep 0.05; done"},
        {grace = 0.3, ready = {stdout = "^up$"}}))
      assert.is_true(within(ctx, function() return state("root.stubborn") == "HEALTHY" end))
      local t0 = arbor.now()
      arbor.node("root.stubborn"):stop()
      assert.is_true(within(ctx, function() return state("root.stubborn") == "CANCELED" end))
      assert.is_true(arbor.now() - t0 >= 0.3)
    end)
    assert.is_true(ok)
  end)

  it("signals the main process once per stop", function()
    -- a real-time signal: the kernel queues each one sent (two TERMs sent
    -- in a row may merge into one), so the program counts every send
    local counter = [[
      use POSIX;
      $| = 1;
      POSIX::sigaction(40, POSIX::SigAction->new(sub { syswrite STDOUT, "got it\n" }));
      print "up\n";
      sleep 1 while 1;
    ]]
    scenario(function(ctx, root)
      root:run("svc", arbor.exec({"perl", "-e", counter},
        {stop_signal = 40, grace = 0.5, ready = {stdout = "^up$"}}))
      assert.is_true(within(ctx, function() return state("root.svc") == "HEALTHY" end))
      arbor.node("root.svc"):stop()
      assert.is_true(within(ctx, function() return state("root.svc") == "CANCELED" end))
      local got = 0
      for _, l in ipairs(logs("root.svc")) do
        if l == "stdout: got it" then got = got + 1 end
      end
      assert.equal(1, got)
    end)
  end)

  -- A program that ignores SIGTERM (grace 0.2 s): SIGKILL ends it. Its pid
  -- goes to got(pid) once it runs.
  local function stubborn(got)
    return arbor.exec({"sh", "-c",
      "trap '' TERM; echo up $$; while :; do sleep 0.05; done"},
      {grace = 0.2, ready = {stdout = function(line)
        local pid = line:match("^up (%d+)$")
        if pid then got(pid) end
        return pid ~= nil
      end}})
  end

  it("reports a tree stop that had to SIGKILL a process: arbor.run returns false", function()
    local pid
    local ok, reason = scenario(function(ctx, root)
      root:run("stubborn", stubborn(function(p) pid = p end))
      assert.is_true(within(ctx, function() return state("root.stubborn") == "HEALTHY" end))
    end)
    assert.is_false(ok)
    assert.equal("the tree stopped, but 1 process(es) had to be killed with "
      .. "SIGKILL (the first: root.stubborn, pid " .. pid .. ")", reason)
  end)

  it("names both the nodes closed at their deadline and the processes killed", function()
    local pid
    local ok, reason = scenario(function(ctx, root)
      root:run("stubborn", stubborn(function(p) pid = p end))
      root:run("shielded", function(c) -- stopped first: started last
        c:signal("healthy")
        c:shield(function() while true do c:sleep(0.05) end end)
      end, {shutdown = 0.2})
      assert.is_true(within(ctx, function() return state("root.stubborn") == "HEALTHY" end))
    end)
    assert.is_false(ok)
    assert.equal("the tree stopped, but 1 node(s) were closed at their shutdown "
      .. "deadline (the first: root.shielded); 1 process(es) had to be killed "
      .. "with SIGKILL (the first: root.stubborn, pid " .. pid .. ")", reason)
  end)

  it("takes the grandchildren down with the group", function()
    scenario(function(ctx, root)
      local grandchild
      root:run("svc", arbor.exec({"sh", "-c", "sleep 1000 & echo \"child $!\"; wait"},
        {ready = {stdout = function(line)
          grandchild = tonumber(line:match("^child (%d+)$"))
          return grandchild ~= nil
        end}}))
      assert.is_true(within(ctx, function() return state("root.svc") == "HEALTHY" end))
      assert.is_true(alive(grandchild))
      arbor.node("root.svc"):stop()
      assert.is_true(within(ctx, function() return state("root.svc") == "CANCELED" end))
      assert.is_false(alive(grandchild))
    end)
  end)

  it("kills what the main process left behind when it exits", function()
    scenario(function(ctx, root)
      local grandchild
      root:run("svc", arbor.exec({"sh", "-c", "sleep 1000 & echo \"child $!\"; exit 1"},
        {ready = {stdout = function(line)
          grandchild = tonumber(line:match("^child (%d+)$"))
          return grandchild ~= nil
        end}}), {policy = policy.never})
      assert.is_true(within(ctx, function() return state("root.svc") == "DEAD" end))
      assert.is_false(alive(grandchild))
    end)
  end)

  it("becomes HEALTHY on a line on ARBOR_NOTIFY_FD (s6 style)", function()
    scenario(function(ctx, root)
      root:run("n", arbor.exec({"sh", "-c",
        "echo booting; read x < /dev/null; echo >&$ARBOR_NOTIFY_FD; echo served; exec sleep 1000"},
        {ready = "notify"}))
      assert.is_true(within(ctx, function() return state("root.n") == "HEALTHY" end))
      assert.is_true(within(ctx, function() return has(logs("root.n"), "served") end))
    end)
  end)

  it("becomes HEALTHY on READY=1 on NOTIFY_SOCKET (systemd style), STATUS= logged", function()
    local perl = [[
      use Socket;
      socket(my $s, AF_UNIX, SOCK_DGRAM, 0) or die "socket: $!";
      my $a = pack_sockaddr_un($ENV{NOTIFY_SOCKET});
      send($s, "STATUS=warming up\n", 0, $a) or die "send: $!";
      send($s, "READY=1\nSTATUS=serving", 0, $a) or die "send: $!";
      sleep 1000;
    ]]
    scenario(function(ctx, root)
      root:run("sd", arbor.exec({"perl", "-e", perl}, {ready = "systemd"}))
      assert.is_true(within(ctx, function() return state("root.sd") == "HEALTHY" end))
      assert.is_true(within(ctx, function() return has(logs("root.sd"), "^status: serving$") end))
      assert.is_true(has(logs("root.sd"), "^status: warming up$"))
    end)
  end)

  it("stays NEW until a stdout line matches", function()
    scenario(function(ctx, root)
      root:run("s", arbor.exec({"sh", "-c",
        "echo starting; read x < /dev/null; echo 'listening on 8080'; exec sleep 1000"},
        {ready = {stdout = "listening on %d+"}}))
      assert.is_true(within(ctx, function() return state("root.s") == "HEALTHY" end))
      assert.is_true(has(logs("root.s"), "stdout: starting"))
    end)
  end)

  it("fails a process that exits before it was ready", function()
    scenario(function(ctx, root)
      root:run("s", arbor.exec({"sh", "-c", "echo nope; exit 2"},
        {ready = {stdout = "ready"}}), {policy = policy.never})
      assert.is_true(within(ctx, function() return state("root.s") == "DEAD" end))
      assert.equal("sh exited with status 2 before it was ready", arbor.node("root.s").error)
    end)
  end)

  it("polls a TCP probe against a real listener", function()
    scenario(function(ctx, root)
      local uv = require "luv"
      -- a free port: bind to 0, read it, close
      local probe_sock = uv.new_tcp()
      probe_sock:bind("127.0.0.1", 0)
      local port = probe_sock:getsockname().port
      probe_sock:close()
      local server = string.format([[
        use IO::Socket::INET;
        $| = 1;
        select(undef, undef, undef, 0.3);
        my $s = IO::Socket::INET->new(LocalAddr => "127.0.0.1:%d", Listen => 5,
          ReuseAddr => 1) or die "listen: $!";
        print "listening\n";
        while (my $c = $s->accept) { close $c }
      ]], port)
      root:run("web", arbor.exec({"perl", "-e", server},
        {ready = {probe = arbor.probe.tcp("127.0.0.1", port), interval = 0.05}}))
      assert.is_true(within(ctx, function() return state("root.web") == "HEALTHY" end))
      assert.is_true(within(ctx, function() return has(logs("root.web"), "stdout: listening") end))
    end)
  end)
end)

describe("luv on arbor's loop", function()
  it("serves timers and TCP in a runnable, closed cleanly when canceled", function()
    scenario(function(ctx, root)
      local uv = require "luv"
      local handles = {}
      root:run("net", function(c)
        local server = uv.new_tcp()
        c:defer(function() server:close() end)
        handles.server = server
        assert(server:bind("127.0.0.1", 0))
        handles.port = server:getsockname().port
        server:listen(8, function()
          local client = uv.new_tcp()
          server:accept(client)
          client:write("hello\n")
          client:close()
        end)
        local timer = uv.new_timer()
        handles.timer = timer
        c:defer(function() timer:close() end)
        assert.equal("tick", c:await(function(cb)
          timer:start(10, 0, function() cb("tick") end)
        end))
        c:signal("healthy")
        c:await(function() end) -- never called back: only a cancel ends it
      end)
      assert.is_true(within(ctx, function() return state("root.net") == "HEALTHY" end))
      -- a client on the same loop reads the greeting
      local got = ctx:await(function(cb)
        local cl = uv.new_tcp()
        cl:connect("127.0.0.1", handles.port, function(err)
          if err then cl:close() return cb(err) end
          cl:read_start(function(_, data)
            cl:close()
            cb(data)
          end)
        end)
      end)
      assert.equal("hello\n", got)
      arbor.node("root.net"):stop()
      assert.is_true(within(ctx, function() return state("root.net") == "CANCELED" end))
      assert.is_true(handles.server:is_closing())
      assert.is_true(handles.timer:is_closing())
    end)
  end)

  it("ignores a callback that comes after a cancellation", function()
    scenario(function(ctx, root)
      local uv = require "luv"
      local late
      root:run("slow", function(c)
        c:signal("healthy")
        local t = uv.new_timer()
        c:await(function(cb)
          t:start(200, 0, function() t:close() late = true cb("late") end)
        end)
        error("not reached")
      end)
      assert.is_true(within(ctx, function() return state("root.slow") == "HEALTHY" end))
      arbor.node("root.slow"):stop()
      assert.is_true(within(ctx, function() return state("root.slow") == "CANCELED" end))
      assert.is_true(within(ctx, function() return late end))
      assert.equal("CANCELED", state("root.slow"))
    end)
  end)
end)

describe("luv callbacks and the harness", function()
  it("survives an error in a luv callback", function()
    scenario(function(ctx)
      local uv = require "luv"
      local t = uv.new_timer()
      ctx:defer(function() t:close() end)
      local fired = false
      t:start(1, 0, function() fired = true error("bad callback") end)
      assert.is_true(within(ctx, function() return fired end))
      ctx:sleep(0.01)
    end)
  end)

  it("refuses processes on the virtual clock, clearly", function()
    local h = require("arbor.testing").new()
    h:start(function(ctx)
      ctx:run("p", arbor.exec({"true"}), {policy = policy.never})
      ctx:signal("healthy")
      ctx:wait()
    end)
    assert.equal("DEAD", h:state("root.p"))
    assert.matches("processes need a real-clock engine", h:node("root.p").error, 1, true)
    h:close()
  end)
end)

describe("ctx:defer", function()
  it("runs last first when the incarnation ends, and logs errors", function()
    scenario(function(ctx, root)
      local order = {}
      root:run("d", function(c)
        c:defer(function() order[#order + 1] = "first" end)
        c:defer(function() error("oops") end)
        c:defer(function() order[#order + 1] = "last" end)
        error("end")
      end, {policy = policy.never})
      assert.is_true(within(ctx, function() return state("root.d") == "DEAD" end))
      assert.same({"last", "first"}, order)
      assert.is_true(has(logs("root.d"), "ctx:defer: .*oops"))
      assert.has_error(function() ctx:defer(42) end)
    end)
  end)
end)
