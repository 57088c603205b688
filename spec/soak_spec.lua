-- The soak's checks (spec/soak/check.lua) on small made-up runs: each check
-- passes on a sound run and fails on the defect it is there to catch. The
-- soak itself runs in scripts/test (stages "soak"); see docs/testing.md.
local check = require "soak.check"

-- A sound run of one unit: root.u (a head) and root.u.w (a worker); fault #1
-- kills w's first incarnation, which restarts; then the tree is stopped.
local function run()
  local evs = {
    {"state", "root.u", 1, "NEW", "NEW", "start"},
    {"state", "root.u.w", 1, "NEW", "NEW", "start"},
    {"state", "root.u", 1, "NEW", "HEALTHY", ""},
    {"state", "root.u.w", 1, "NEW", "HEALTHY", ""},
    {"state", "root.u.w", 1, "HEALTHY", "DEAD", "sh killed by signal 9 (SIGKILL)"}, -- 5
    {"policy", "root.u.w", 1, "", "", "restart in 0.1s"},
    {"state", "root.u.w", 2, "DEAD", "NEW", "restart"},
    {"state", "root.u.w", 2, "NEW", "HEALTHY", ""},
    {"state", "root.u.w", 2, "HEALTHY", "CANCELED", ""},                           -- 9: the stop
    {"state", "root.u", 1, "HEALTHY", "CANCELED", ""},
  }
  local d = {layout = {["root.u"] = {unit = "u", role = "head"},
    ["root.u.w"] = {unit = "u", role = "proc"}},
    events = {}, ctl = {}, reports = {}, counts = {["root.u"] = 2},
    ledgers = {["root.u.w#1"] = 3, ["root.u.w#2"] = 1}, samples = {},
    faults = {check.parse_fault("1\t1.0\tkill\troot.u.w\tok 1 4 999\tsent")},
    logs = {
      {dn = "root.u", writer = "root.u", n = 1}, {dn = "root.u.w", writer = "root.u.w#1", n = 1},
      {dn = "root.u.w", writer = "root.u.w#1", n = 2}, {dn = "root.u.w", writer = "root.u.w#1", n = 3},
      {dn = "root.u.w", writer = "root.u.w#2", n = 1}, {dn = "root.u", writer = "root.u", n = 2},
    },
    driver = {stop_seq = "8", zombie_max_age = "0.01", zombies_at_end = "0", zombies_seen = "1",
      flood_bad = "0", flood_replies = "10", child_fd_checks = "4", child_fd_leaks = "0"},
    run = {exit = "0", orphans_term = "0", kill9_before = "5", kill9_left = "0",
      guard_replaced = "0.1", guard_before = "5", guard_left = "0"}}
  for i, e in ipairs(evs) do
    d.events[i] = {seq = i, kind = e[1], dn = e[2], inc = e[3], from = e[4], to = e[5], reason = e[6]}
    d.ctl[i] = d.events[i]
  end
  for i = 1, 60 do d.samples[i] = {t = i, rss = 8000 + i % 3, fds = 40, zombies = 0} end
  return d
end

-- The result of the check whose name starts with `name`.
local function result(d, name)
  for _, r in ipairs(check.run(d)) do
    if r.name:sub(1, #name) == name then return r end
  end
  error("no check " .. name)
end

describe("the soak's checks", function()
  it("pass on a sound run", function()
    for _, r in ipairs(check.run(run())) do
      assert.is_true(r.ok, r.name .. ": " .. r.text .. " " .. table.concat(r.examples, "; "))
    end
  end)

  it("see a gap in the event stream", function()
    local d = run()
    table.remove(d.events, 6)
    assert.is_false(result(d, "event stream (in-tree").ok)
    d = run()
    table.remove(d.ctl, 6)
    assert.is_false(result(d, "event stream (arbor ctl").ok)
  end)

  it("see an event the ctl stream has twice", function()
    local d = run()
    table.insert(d.ctl, 4, d.ctl[3])
    assert.is_false(result(d, "event stream (arbor ctl").ok)
  end)

  it("see a fault that no event answers, or two", function()
    local d = run()
    d.events[5].to, d.events[5].reason = "HEALTHY", ""   -- the death never came
    local r = result(d, "every fault")
    assert.is_false(r.ok)
    assert.matches("1 unmatched", r.text)
    d = run()
    table.insert(d.events, 6, {kind = "state", dn = "root.u.w", inc = 1, from = "HEALTHY",
      to = "DEAD", reason = "sh killed by signal 9 (SIGKILL)"})
    for i, ev in ipairs(d.events) do ev.seq = i end
    d.ctl = d.events
    assert.is_false(result(d, "every fault").ok)
    assert.is_false(result(d, "each incarnation").ok)
  end)

  it("see a fault answered by another death with no cause", function()
    local d = run()
    d.events[5].reason = "sh exited with status 1"
    assert.is_false(result(d, "every fault").ok)
  end)

  it("accept a fault preempted by a later cancel in its unit", function()
    local d = run()
    d.events[5].to, d.events[5].reason = "CANCELED", ""
    table.insert(d.faults, check.parse_fault("2\t1.1\trestart\troot.u\tok 1 4"))
    local r = result(d, "every fault")
    assert.is_true(r.ok, r.text)
    assert.matches("1 preempted", r.text)
  end)

  it("see a death nothing explains", function()
    local d = run()
    d.faults = {}
    local r = result(d, "every end")
    assert.is_false(r.ok)
    assert.matches("1 unexplained", r.text)
  end)

  it("see an incarnation still running after the stop", function()
    local d = run()
    d.events[9] = {seq = 9, kind = "state", dn = "root.u.w", inc = 2, from = "HEALTHY", to = "HEALTHY"}
    d.ctl = d.events
    assert.is_false(result(d, "each incarnation").ok)
  end)

  it("see lost, reordered and misattributed log lines", function()
    local d = run()
    table.remove(d.logs, 3)                          -- root.u.w#1 line 2
    assert.is_false(result(d, "no lost log line").ok)
    d = run()
    d.ledgers["root.u.w#2"] = 2                      -- written, never arrived
    assert.is_false(result(d, "no lost log line").ok)
    d = run()
    d.logs[3], d.logs[4] = d.logs[4], d.logs[3]
    assert.is_false(result(d, "no lost log line").ok)
    d = run()
    d.logs[5].dn = "root.u"
    assert.is_false(result(d, "no lost log line").ok)
  end)

  it("see RSS and descriptors that grow", function()
    local d = run()
    for i, s in ipairs(d.samples) do s.rss = 8000 + i * 200 end
    assert.is_false(result(d, "RSS flat").ok)
    d = run()
    for i, s in ipairs(d.samples) do s.fds = 40 + i // 4 end
    assert.is_false(result(d, "open descriptors flat").ok)
  end)

  it("see a lingering zombie, orphans, a wrong exit status and leaked descriptors", function()
    local d = run()
    d.driver.zombie_max_age = "7.5"
    assert.is_false(result(d, "no zombie").ok)
    d = run()
    d.run.orphans_term, d.run.orphans_term_list = "1", "123 sleep 1000;"
    assert.is_false(result(d, "no orphan after SIGTERM").ok)
    d = run()
    d.run.kill9_left = "2"
    assert.is_false(result(d, "no orphan after kill -9").ok)
    d = run()
    d.run.guard_replaced = ""                        -- the guard was not replaced
    assert.is_false(result(d, "no orphan after kill -9 of the guard").ok)
    d = run()
    d.run.exit = "1"
    assert.is_false(result(d, "exit status").ok)
    d = run()
    d.driver.child_fd_leaks = "3"
    assert.is_false(result(d, "no descriptor leaks").ok)
  end)

  it("want exit status 1 when the stubborn process ran at the stop", function()
    local d = run()
    table.insert(d.events, 1, {kind = "state", dn = "root.stub.s", inc = 1, from = "NEW", to = "NEW"})
    for i, ev in ipairs(d.events) do ev.seq = i end
    d.events[#d.events + 1] = {seq = #d.events + 1, kind = "state", dn = "root.stub.s", inc = 1,
      from = "HEALTHY", to = "CANCELED", reason = ""}
    d.ctl, d.driver.stop_seq, d.faults[1].seq = d.events, "9", 5
    assert.is_false(result(d, "exit status").ok)
    d.run.exit = "1"
    assert.is_true(result(d, "exit status").ok)
  end)
end)

describe("the soak's look at a process's descriptors", function()
  local look = require "soak.look"
  local ARBOR = "1000"

  -- A line of /proc/PID/stat: fields 22 (starttime), 26-28 (the code and
  -- the stack of its memory image) and 51 (env_end, 0 until exec set up the
  -- new stack) as given; the rest zeros.
  local function stat(pid, comm, start, code, env_end)
    local f = {}
    for i = 3, 52 do f[i] = "0" end
    f[3] = "S"
    f[22] = start
    f[26], f[27], f[28] = code, code + 4096, code + 65536
    f[51] = env_end
    return pid .. " (" .. comm .. ") " .. table.concat(f, " ", 3)
  end

  -- A made-up /proc: procs[pid] = {exe, comm, environ, fds = {[fd] =
  -- target}, stat = a line, or a list of lines read one after the other}.
  local function fake(procs)
    local function at(path)
      local pid, rest = path:match("^/proc/(%d+)/(.*)$")
      return procs[pid], rest
    end
    local reads = {}
    return {
      readlink = function(path)
        local p, rest = at(path)
        if not p then return nil end
        if rest == "exe" then return p.exe end
        local fd = rest:match("^fd/(%d+)$")
        return fd and p.fds[fd]
      end,
      read = function(path)
        local p, rest = at(path)
        if not p then return nil end
        if rest == "stat" and type(p.stat) == "table" then
          reads[path] = math.min((reads[path] or 0) + 1, #p.stat)
          return p.stat[reads[path]]
        end
        return p[rest]
      end,
      scandir = function(path)
        local p, rest = at(path)
        if not p or rest ~= "fd" then return nil end
        local fds = {}
        for fd in pairs(p.fds) do fds[#fds + 1] = fd end
        table.sort(fds)
        return fds
      end,
    }
  end

  -- arbor: its binary, its memory image, its descriptors
  local arbor = {exe = "/usr/bin/arbor", comm = "arbor", environ = "PATH=/bin\0SOAK_TOKEN=t\0",
    stat = stat(ARBOR, "arbor", 500, 4194304, 140737488347000),
    fds = {["0"] = "/dev/null", ["1"] = "pipe:[1]", ["2"] = "pipe:[2]",
      ["5"] = "socket:[50]", ["6"] = "pipe:[60]", ["7"] = "pipe:[70]"}}
  local mine = {["socket:[50]"] = true, ["pipe:[60]"] = true, ["pipe:[70]"] = true}

  local function looks(child)
    return look.new(ARBOR, fake({[ARBOR] = arbor, ["2000"] = child})):look("2000", mine)
  end

  it("finds arbor's descriptors in a process that runs its program", function()
    local leaks = looks({exe = "/usr/bin/sleep", comm = "sleep\n",
      environ = "PATH=/bin\0ARBOR_NOTIFY_FD=3\0",
      stat = stat("2000", "sleep", 900, 93000000000000, 140737488349000),
      fds = {["0"] = "/dev/null", ["1"] = "pipe:[81]", ["2"] = "pipe:[82]",
        ["3"] = "pipe:[70]", ["8"] = "socket:[50]"}})
    -- fd 3, the notify pipe ARBOR_NOTIFY_FD names, is its own
    assert.same({"sleep fd 8 socket:[50]"}, leaks)
  end)

  it("does not look into a process inside its execve", function()
    -- past close-on-exec (comm and exe are the program's) but before exec
    -- set up its stack: its environment reads empty, so ARBOR_NOTIFY_FD is
    -- not known yet (the 127 false alarms in 60 s)
    local leaks = looks({exe = "/usr/bin/sleep", comm = "sleep\n", environ = "",
      stat = stat("2000", "sleep", 900, 93000000000000, 0),
      fds = {["0"] = "/dev/null", ["1"] = "pipe:[81]", ["2"] = "pipe:[82]",
        ["3"] = "pipe:[70]"}})
    assert.is_nil(leaks)
    -- the new program's file is its exe already, but its memory is still
    -- arbor's (before the kernel swapped it) and so are its descriptors
    leaks = looks({exe = "/usr/bin/sleep", comm = "arbor\n", environ = arbor.environ,
      stat = stat("2000", "arbor", 900, 4194304, 140737488347000), fds = arbor.fds})
    assert.is_nil(leaks)
  end)

  it("does not count a look at a process that changed while it looked", function()
    -- it ran another program meanwhile (or its pid was reused)
    local leaks = looks({exe = "/usr/bin/sleep", comm = "sleep\n", environ = "PATH=/bin\0",
      stat = {stat("2000", "sh", 900, 93000000000000, 140737488349000),
        stat("2000", "sleep", 900, 94000000000000, 140737488351000)},
      fds = {["0"] = "/dev/null", ["1"] = "pipe:[81]", ["2"] = "pipe:[82]",
        ["6"] = "pipe:[60]"}})
    assert.is_nil(leaks)
  end)

  it("reads the real /proc: a process's own descriptor is no leak, arbor's is", function()
    -- this lua5.4 plays arbor; sleep inherits a file of "arbor's" at fd 7
    local me = assert(io.open("/proc/self/stat")):read("n")
    local path = os.tmpname()
    local function start(redirect)
      local p = io.popen("sh -c 'echo $$; exec sleep 30 >/dev/null " .. redirect .. "' &")
      local pid = p:read("l")
      p:close()
      return pid
    end
    local leaky, clean = start("7>>" .. path), start("")
    local looker = look.new(me)
    local found, own
    for _ = 1, 200 do -- until both ran sleep (their exec finished)
      found, own = looker:look(leaky, {[path] = true}), looker:look(clean, {[path] = true})
      if found and own and #found > 0 then break end
      require("luv").sleep(10)
    end
    os.execute("kill " .. leaky .. " " .. clean)
    os.remove(path)
    assert.same({"sleep fd 7 " .. path}, found)
    assert.same({}, own)
    assert.is_nil(looker:look(me, {[path] = true})) -- arbor's own code
  end)
end)
