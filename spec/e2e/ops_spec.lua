-- End-to-end: every service can be seen and signalled (issue 15, point 4):
-- `arbor ctl status` (the node table), `signal`, `start`, `explain`, and
-- the pids, uptimes and last exits of node views and `tree`.
local json = require "arbor.json"
local core = require "arbor.core"
local support = require "e2e.support"
local bin, q, sh, mktemp = support.bin, support.q, support.sh, support.mktemp

local function poll(fn, what)
  local v
  assert(support.eventually(function() v = fn() return v end), "timed out waiting for " .. what)
  return v
end

describe("arbor ctl status, signal, start, explain", function()
  local dir, sock, pid
  local function ctl(args) return sh(bin .. " ctl " .. q(sock) .. " " .. args) end

  setup(function()
    dir = mktemp()
    sock = dir .. "/ctl.sock"
    os.execute(string.format("%s run --quiet --control %s spec/e2e/fixtures/ops.lua > %s/out 2>&1 & echo $! > %s/pid",
      bin, q(sock), q(dir), q(dir)))
    pid = tonumber(poll(function() return support.read(dir .. "/pid") end, "the pid"))
    poll(function()
      local c = core.connect(sock)
      if c then c:close() end
      return c
    end, "the control socket")
    poll(function()
      local _, out = ctl("logs root.trap")
      return out:find("trapping", 1, true)
    end, "the trap to be set")
  end)

  teardown(function()
    ctl("shutdown")
    os.execute("kill " .. pid .. " 2>/dev/null; rm -rf " .. q(dir))
  end)

  it("status prints a table: DN, state, pid, uptime, restarts, why a node is down", function()
    local out = poll(function()
      local code, s = ctl("status")
      assert.equal(0, code)
      return s:find("crash-looping, restart in", 1, true) and s
    end, "root.loop to crash-loop")
    assert.matches("pid " .. pid, out, 1, true)
    assert.matches("\nDN +STATE +PID +UPTIME +RESTARTS\n", out)
    assert.matches("\nroot%.trap +HEALTHY +%d+ +[%d.]+s +0\n", out)
    assert.matches("\nroot%.loop +DEAD +%- +%- +%d+ +crash%-looping, restart in [%d.]+s; last error: [^\n]*crashes", out)
    assert.matches("\nroot%.quits +DEAD +%- +%- +0 +given up %(policy stop%); last error: [^\n]*quits at once", out)
    assert.matches("\nroot%.idle +HEALTHY +%- +[%d.]+s +0", out)
    -- the drawn tree says the same
    local _, tree = ctl("tree")
    assert.matches("|%-%- trap %[HEALTHY%] pid %d+ up [%d.]+s", tree)
    assert.matches("|%-%- quits %[DEAD%] given up %(policy stop%)", tree)
  end)

  it("status --json has the table; tree --json and node --json the pids and last exit", function()
    -- the trap's shell starts a sleep after each one: between two, its
    -- group is the shell alone (a loaded machine caught that moment)
    local st, rows
    poll(function()
      local code, out = ctl("status --json")
      assert.equal(0, code)
      st, rows = json.decode(out), {}
      for _, r in ipairs(st.table) do rows[r.dn] = r end
      return #(rows["root.trap"].pids or {}) >= 2
    end, "root.trap's shell and its sleep")
    assert.equal(pid, st.pid)
    assert.same({"root", "root.trap", "root.loop", "root.quits", "root.idle"},
      (function() local l = {} for i, r in ipairs(st.table) do l[i] = r.dn end return l end)())
    local trap = rows["root.trap"]
    assert.is_number(trap.pid)
    assert.is_number(trap.uptime)
    assert.truthy(#trap.pids >= 2) -- sh and its sleep, one group
    local found = false
    for _, p in ipairs(trap.pids) do found = found or p == trap.pid end
    assert.is_true(found)
    assert.equal("given up (policy stop)", rows["root.quits"].note)
    assert.equal("DEAD", rows["root.quits"].last_exit.state)
    assert.matches("quits at once", rows["root.quits"].last_exit.reason)
    assert.is_number(rows["root.quits"].last_exit.ago)
    local _, t = ctl("tree --json")
    t = json.decode(t)
    assert.equal(trap.pid, t.children[1].pid)
    local _, n = ctl("node root.trap --json")
    n = json.decode(n)
    assert.equal(trap.pid, n.pid)
    assert.is_nil(n.last_exit) -- never exited
    local _, one = ctl("status root.idle --json")
    assert.equal(1, #json.decode(one).table)
  end)

  it("signal sends a signal to the node's process group; a node without processes is an error", function()
    local code, out = ctl("signal root.trap HUP")
    assert.equal(0, code, out)
    assert.equal("root.trap: sent SIGHUP to 1 process group(s)\n", out)
    poll(function()
      local _, logs = ctl("logs root.trap")
      return logs:find("got HUP", 1, true)
    end, "the program to log SIGHUP")
    code, out = ctl("signal root.trap 10 --json") -- SIGUSR1 by number
    assert.equal(0, code, out)
    assert.same({dn = "root.trap", signal = "SIGUSR1", groups = 1}, json.decode(out))
    poll(function()
      local _, logs = ctl("logs root.trap")
      return logs:find("got USR1", 1, true)
    end, "the program to log SIGUSR1")
    code, out = ctl("signal root.idle HUP")
    assert.equal(1, code)
    assert.equal("arbor ctl signal: root.idle runs no process to signal\n", out)
    code, out = ctl("signal root.trap NOPE")
    assert.equal(1, code)
    assert.matches("root.trap: unknown signal 'NOPE'", out, 1, true)
    code, out = ctl("signal root.trap")
    assert.equal(2, code)
    -- node:signal from an evaluation
    code, out = ctl([[eval 'return arbor.node("root.trap"):signal("hup")']])
    assert.equal(0, code, out)
    assert.matches("1\t\"SIGHUP\"", out, 1, true)
  end)

  it("start starts a node that was given up or stopped; explain says why", function()
    local code, out = ctl("explain root.quits")
    assert.equal(0, code)
    assert.matches("root.quits was given up: its policy decided \"stop\"", out, 1, true)
    code, out = ctl("explain root.quits --json")
    assert.equal("given_up", json.decode(out).why)
    code, out = ctl("start root.idle")
    assert.equal(1, code)
    assert.equal("arbor ctl start: root.idle is running (HEALTHY): restart restarts it\n", out)
    assert.equal(0, (ctl("stop root.idle")))
    local _, st = ctl("status root.idle")
    assert.matches("\nroot%.idle +CANCELED +%- +%- +0 +held", st)
    code, out = ctl("start root.idle")
    assert.equal(0, code, out)
    assert.equal("root.idle: started\n", out)
    poll(function()
      local _, s = ctl("node root.idle --json")
      return json.decode(s).state == "HEALTHY"
    end, "root.idle to run again")
    code = ctl("start root.quits")
    assert.equal(0, code)
    poll(function()
      local _, s = ctl("node root.quits --json")
      return json.decode(s).restarts == 1
    end, "root.quits to start again")
  end)
end)
