-- End-to-end: the live control plane (C1-C4). Each test starts the real
-- arbor binary on spec/e2e/fixtures/live.lua with its socket in a fresh
-- mktemp directory and drives it with `arbor ctl`, `arbor repl` (piped, and
-- through a pseudo-terminal made by script(1)) and raw connections.
local client = require "arbor.client"
local core = require "arbor.core"
local json = require "arbor.json"

local support = require "e2e.support"
local bin, q, sh, mktemp = support.bin, support.q, support.sh, support.mktemp
local read_file = support.read
local fixture = "spec/e2e/fixtures/live.lua"

-- Polls fn (bounded: about 10 s) until it returns a true value.
local function poll(fn, what)
  for _ = 1, 1000 do
    local v = fn()
    if v then return v end
    support.sleep(0.01)
  end
  error("timed out waiting for " .. what, 2)
end

local function alive(pid) return os.execute("kill -0 " .. pid .. " 2>/dev/null") == true end

local function ctl(e, args)
  return sh(bin .. " ctl " .. q(e.sock) .. " " .. args)
end

-- One request over a fresh connection: the end frame and the other frames.
local function request(sock, req)
  local conn = assert(client.open(sock))
  local frames = {}
  local reply, err = conn:request(req, function(f) frames[#frames + 1] = f end)
  conn:close()
  return reply, err, frames
end

local function beats(e)
  local r = request(e.sock, {op = "logs", dn = "root.heart", n = 1, json = true})
  local line = r and r.data and r.data[1] and r.data[1].line
  return tonumber(line and line:match("beat (%d+)")) or 0
end

-- Starts arbor on the fixture; returns {sock, dir, pid, rc_file}.
local function start(opts)
  opts = opts or {}
  local dir = opts.dir or mktemp()
  local sock = opts.sock or (dir .. "/ctl.sock")
  local e = {dir = dir, sock = sock, rc_file = dir .. "/rc." .. os.time() .. math.random(1e6)}
  os.execute(string.format("(%s run --quiet --control %s %s; echo $? > %s.tmp; mv %s.tmp %s) > %s/out 2>&1 &",
    bin, q(sock), opts.script or fixture, q(e.rc_file), q(e.rc_file), q(e.rc_file), q(dir)))
  local st = poll(function()
    local c = core.connect(sock)
    if not c then return nil end
    c:close()
    local r = request(sock, {op = "status", json = true})
    return r and r.ok and r.data
  end, "the control socket")
  e.pid = st.pid
  return e
end

local function stop(e)
  if e.pid and alive(e.pid) then
    os.execute("kill " .. e.pid)
    poll(function() return not alive(e.pid) end, "arbor to exit")
  end
end

local function finish(e)
  stop(e)
  os.execute("rm -rf " .. q(e.dir))
end

local function is_socket(path) return os.execute("test -S " .. q(path)) == true end

-- A user for the specs that need another uid (created once; CI runs as
-- root), or nil when not root.
local function test_user(user)
  if select(2, sh("id -u")) ~= "0\n" then return nil end
  if sh("id -u " .. user) ~= 0 then
    local code, out = sh("useradd -M -N -s /usr/sbin/nologin " .. user)
    assert(code == 0 or sh("id -u " .. user) == 0, out)
  end
  return tonumber((select(2, sh("id -u " .. user))))
end

describe("control socket (C1)", function()
  local e
  before_each(function() e = start() end)
  after_each(function() finish(e) end)

  it("is a 0600 socket in a 0700 directory, removed at exit", function()
    local dir = e.dir .. "/sub"
    stop(e)
    e = start({dir = e.dir, sock = dir .. "/x.sock"})
    local _, modes = sh("stat -c '%a %F' " .. q(dir) .. " " .. q(e.sock))
    assert.matches("^700 directory\n600 socket\n$", modes)
    local code = ctl(e, "shutdown")
    assert.equal(0, code)
    poll(function() return read_file(e.rc_file) end, "the exit status")
    assert.equal("0\n", read_file(e.rc_file))
    assert.is_false(is_socket(e.sock))
  end)

  it("refuses a second arbor on a live socket, and replaces a stale one", function()
    local code, out = sh(bin .. " run --quiet --control " .. q(e.sock) .. " " .. fixture)
    assert.equal(2, code)
    -- one line, no traceback
    assert.equal("arbor: another arbor is serving " .. e.sock
      .. " (stop it, or pass --control with another path)\n", out)
    assert.equal(0, (ctl(e, "status"))) -- the first one still answers
    -- a crash leaves the socket file behind: the next run takes it over
    os.execute("kill -9 " .. e.pid)
    poll(function() return not alive(e.pid) end, "arbor to die")
    assert.is_true(is_socket(e.sock))
    local code2, out2 = ctl(e, "status")
    assert.equal(3, code2)
    assert.matches("no engine running at .* %(a stale socket%)", out2)
    local e2 = start({dir = e.dir, sock = e.sock})
    assert.are_not.equal(e.pid, e2.pid)
    assert.equal(0, (ctl(e2, "status")))
    e.pid = e2.pid
  end)

  it("listens by default in $XDG_RUNTIME_DIR/arbor/SCRIPT.sock, found by name or alone", function()
    local xdg = e.dir .. "/xdg"
    os.execute("mkdir -p " .. q(xdg))
    local env = "env -u ARBOR_CONTROL XDG_RUNTIME_DIR=" .. q(xdg) .. " "
    os.execute(env .. bin .. " run --quiet " .. fixture .. " > /dev/null 2>&1 &")
    local sock = xdg .. "/arbor/live.sock"
    poll(function() return sh(env .. bin .. " ctl status") == 0 end, "the default socket")
    local _, modes = sh("stat -c '%a %F' " .. q(xdg .. "/arbor") .. " " .. q(sock))
    assert.matches("^700 directory\n600 socket\n$", modes)
    local code, out = sh(env .. bin .. " ctl live status --json")
    assert.equal(0, code)
    local pid = json.decode(out).pid
    code, out = sh(env .. bin .. " ctl shutdown")
    assert.equal(0, code, out)
    poll(function() return not alive(pid) end, "arbor to exit")
    -- ARBOR_CONTROL=none: no socket; a default path that cannot be made: a
    -- warning, and the tree runs all the same
    code = sh("XDG_RUNTIME_DIR=" .. q(xdg) .. " ARBOR_CONTROL=none " .. bin
      .. " run --quiet spec/e2e/fixtures/restarts.lua")
    assert.equal(0, code)
    assert.is_false(is_socket(xdg .. "/arbor/restarts.sock"))
    code, out = sh("env -u ARBOR_CONTROL XDG_RUNTIME_DIR=" .. q(e.dir .. "/none/deeper") .. " "
      .. bin .. " run --quiet spec/e2e/fixtures/restarts.lua")
    assert.equal(0, code)
    assert.matches("arbor: warning: no control socket: cannot create the directory", out, 1, true)
    code, out = sh(env .. bin .. " ctl status")
    assert.equal(3, code)
    assert.matches("no engine running: no control socket in " .. xdg .. "/arbor", out, 1, true)
  end)

  it("does not replace a file that is not a socket", function()
    local path = e.dir .. "/plain"
    io.open(path, "w"):close()
    local code, out = sh(bin .. " run --quiet --control " .. q(path) .. " " .. fixture)
    assert.equal(2, code)
    assert.matches("exists and is not a socket", out, 1, true)
  end)

  it("refuses a peer of another uid (not root)", function()
    local user = "arbor-ctl-test"
    if not test_user(user) then
      print("\n  SKIPPED: the other-uid test needs root (to create a user)")
      return
    end
    -- the user runs a copy of arbor it can read
    local copy = e.dir .. "/bin"
    assert.equal(0, (sh(string.format("mkdir -p %s && cp %s %s/arbor && cp -r lua %s/ && chmod -R a+rX %s",
      q(copy), q(bin), q(copy), q(copy), q(copy)))))
    os.execute("chmod 711 " .. q(e.dir))
    local as_user = string.format("runuser -u %s -- env ARBOR_LUA_DIR=%s/lua %s/arbor ctl %s status",
      user, q(copy), q(copy), q(e.sock))
    -- the socket itself is 0600: the kernel refuses first
    local code, out = sh(as_user)
    assert.equal(3, code)
    assert.equal("arbor ctl: cannot connect: permission denied: " .. e.sock .. "\n", out)
    -- opened up, the engine checks the peer's uid and refuses
    os.execute("chmod 666 " .. q(e.sock))
    code, out = sh(as_user)
    assert.equal(3, code)
    assert.matches("refused: uid %d+ may not control this engine %(owner uid 0%)", out)
    local _, logs = ctl(e, "logs root -n 1000")
    assert.matches("control: refused a connection from uid %d+ %(pid %d+%)", logs)
    assert.equal(0, (ctl(e, "status")))
  end)
end)

describe("socket trust (C1)", function()
  local victim, squatter = "arbor-ctl-victim", "arbor-ctl-squatter"
  local vuid, suid, dir, copy, fakes, home

  -- the victim's own arbor: a copy every user can read
  setup(function()
    vuid, suid = test_user(victim), test_user(squatter)
    if not vuid then return end
    dir = mktemp()
    os.execute("chmod 755 " .. q(dir))
    copy = dir .. "/bin"
    assert.equal(0, (sh(string.format("mkdir -p %s && cp %s %s/arbor && cp -r lua %s/ && "
      .. "cp spec/e2e/fixtures/fake_engine.lua %s/ && chmod -R a+rX %s",
      q(copy), q(bin), q(copy), q(copy), q(copy), q(copy)))))
    home = "/tmp/arbor-" .. vuid -- the victim's default directory
  end)
  teardown(function()
    if dir then os.execute("rm -rf " .. q(dir)) end
  end)
  before_each(function()
    if not vuid then return end
    fakes = {}
    os.execute("rm -rf " .. q(home))
  end)
  after_each(function()
    if not vuid then return end
    for _, f in ipairs(fakes) do
      local pid = read_file(f .. ".pid")
      if pid then os.execute("kill " .. pid) end
    end
    os.execute("rm -rf " .. q(home))
  end)

  local function skipped()
    if vuid then return false end
    print("\n  SKIPPED: the socket trust tests need root (to create users)")
    return true
  end

  -- The squatter's fake engine at sock; returns the file recording how many
  -- bytes it received.
  local function fake(sock)
    local sdir = dir .. "/squatter" -- where the squatter writes
    os.execute(string.format("mkdir -p %s && chown %s %s", q(sdir), squatter, q(sdir)))
    local record = string.format("%s/record%d", sdir, math.random(1e9))
    fakes[#fakes + 1] = record
    os.execute(string.format("runuser -u %s -- lua5.4 %s/fake_engine.lua %s %s > /dev/null 2>&1 &",
      squatter, q(copy), q(sock), q(record)))
    poll(function() return read_file(record .. ".pid") end, "the fake engine")
    return record
  end

  local function as_victim(args)
    return sh(string.format("runuser -u %s -- env -u XDG_RUNTIME_DIR -u ARBOR_CONTROL "
      .. "ARBOR_LUA_DIR=%s/lua %s/arbor %s", victim, q(copy), q(copy), args))
  end

  it("refuses a default directory another user made", function()
    if skipped() then return end
    os.execute(string.format("runuser -u %s -- mkdir -m 755 %s", squatter, q(home)))
    local record = fake(home .. "/live.sock")
    local code, out = as_victim("ctl eval 'return 1'")
    assert.equal(3, code, out)
    assert.equal(string.format("arbor ctl: refusing %s/live.sock: the directory %s belongs "
      .. "to uid %d, not to you (uid %d) or root\n", home, home, suid, vuid), out)
    assert.equal("0", read_file(record)) -- nothing was sent
  end)

  it("refuses a default directory that is a symbolic link", function()
    if skipped() then return end
    local elsewhere = dir .. "/elsewhere"
    os.execute(string.format("mkdir -m 755 %s && chown %s %s", q(elsewhere), squatter, q(elsewhere)))
    os.execute(string.format("runuser -u %s -- ln -s %s %s", squatter, q(elsewhere), q(home)))
    local record = fake(elsewhere .. "/live.sock")
    local code, out = as_victim("ctl eval 'return 1'")
    assert.equal(3, code, out)
    assert.matches("arbor ctl: refusing " .. home .. "/live.sock: the directory " .. home
      .. " is a symbolic link", out, 1, true)
    assert.equal("0", read_file(record))
  end)

  it("refuses a directory others may write to", function()
    if skipped() then return end
    os.execute(string.format("mkdir -m 777 %s && chown %s %s && chmod 777 %s", q(home),
      victim, q(home), q(home)))
    local record = fake(home .. "/live.sock")
    local code, out = as_victim("ctl eval 'return 1'")
    assert.equal(3, code, out)
    assert.matches("arbor ctl: refusing " .. home .. "/live.sock: the directory " .. home
      .. " is writable by group or others (mode 0777)", out, 1, true)
    assert.equal("0", read_file(record))
  end)

  it("refuses a socket another user serves, even in a sticky directory", function()
    if skipped() then return end
    local sticky = dir .. "/sticky"
    os.execute("mkdir " .. q(sticky) .. " && chmod 1777 " .. q(sticky))
    local sock = sticky .. "/x.sock"
    local record = fake(sock)
    for _, cmd in ipairs({"ctl " .. q(sock) .. " eval 'return 1'", "repl " .. q(sock) .. " < /dev/null"}) do
      local code, out = as_victim(cmd)
      assert.equal(3, code, out)
      assert.matches("refusing " .. sock .. ": it is served by uid " .. suid .. " %(pid %d+%), "
        .. "not by you %(uid " .. vuid .. "%) or root", out)
    end
    assert.equal("0", read_file(record))
  end)

  it("talks to the user's own engine in its default directory", function()
    if skipped() then return end
    local script = copy .. "/mine.lua"
    local f = io.open(script, "w")
    f:write('return function(ctx) ctx:signal("healthy") ctx:wait() end\n')
    f:close()
    os.execute("chmod a+r " .. q(script))
    os.execute(string.format("runuser -u %s -- env -u XDG_RUNTIME_DIR -u ARBOR_CONTROL "
      .. "ARBOR_LUA_DIR=%s/lua %s/arbor run --quiet %s > /dev/null 2>&1 &", victim, q(copy),
      q(copy), q(script)))
    poll(function() return as_victim("ctl status") == 0 end, "the victim's engine")
    local _, modes = sh("stat -c '%a %U' " .. q(home))
    assert.equal("700 " .. victim .. "\n", modes)
    local code, out = as_victim("ctl eval 'return 6 * 7'")
    assert.equal(0, code)
    assert.equal("42\n", out)
    assert.equal(0, (as_victim("ctl shutdown")))
  end)

  it("arbor run refuses a directory that is a symbolic link or others may write to", function()
    local base = mktemp()
    os.execute(string.format("mkdir %s/real %s/open %s/sticky && ln -s real %s/link && "
      .. "chmod 777 %s/open && chmod 1777 %s/sticky", q(base), q(base), q(base), q(base),
      q(base), q(base)))
    local function run(sub)
      return sh(bin .. " run --quiet --control " .. q(base .. "/" .. sub .. "/x.sock")
        .. " spec/e2e/fixtures/restarts.lua")
    end
    local code, out = run("link")
    assert.equal(2, code)
    assert.equal("arbor: the directory " .. base .. "/link is a symbolic link; "
      .. "refusing to serve the control socket there\n", out)
    code, out = run("open")
    assert.equal(2, code)
    assert.matches("the directory " .. base .. "/open is writable by group or others "
      .. "(mode 0777); refusing to serve the control socket there", out, 1, true)
    -- a sticky directory (like /tmp) is accepted: others cannot replace the
    -- socket, and clients check who serves it
    code, out = run("sticky")
    assert.equal(0, code, out)
    os.execute("rm -rf " .. q(base))
  end)
end)

describe("arbor ctl (C3)", function()
  local e
  setup(function() e = start() end)
  teardown(function() finish(e) end)

  it("prints status, tree and node, as text and --json", function()
    local code, out = ctl(e, "status")
    assert.equal(0, code)
    assert.matches("pid " .. e.pid, out, 1, true)
    poll(function()
      local _, s = ctl(e, "node root.flaky --json")
      return json.decode(s).restarts > 0
    end, "flaky to crash")
    code, out = ctl(e, "tree")
    assert.equal(0, code)
    assert.matches("root %[HEALTHY%] up [%d.]+s\n|%-%- heart %[HEALTHY%]", out)
    assert.matches("`-- flaky %[%u+%].-restarts=%d+.-flaky is broken", out)
    code, out = ctl(e, "tree --json")
    assert.equal(0, code)
    local t = assert(json.decode(out))
    assert.equal("root", t.dn)
    assert.equal("root.heart", t.children[1].dn)
    assert.is_number(t.children[1].uptime)
    -- the lifecycle fields, as arbor.tree() has them
    assert.is_nil(t.coordinator) -- a parent of plain children has no coordinator
    assert.equal("main", t.children[1].lifecycle)
    assert.is_false(t.children[1].blocked)
    assert.is_false(t.children[1].sidecar)
    code, out = ctl(e, "node root.workers.w1 --json")
    assert.equal(0, code)
    local n = assert(json.decode(out))
    assert.equal("HEALTHY", n.state)
    assert.equal("root.workers", n.parent)
    code, out = ctl(e, "tree root.workers")
    assert.equal(0, code)
    assert.matches("^workers %[HEALTHY%]", out)
  end)

  it("fails with a message and exit 1 on an unknown DN", function()
    for _, cmd in ipairs({"node root.nope", "restart root.nope", "stop root.nope",
        "logs root.nope", "tree root.nope"}) do
      local code, out = ctl(e, cmd)
      assert.equal(1, code, cmd)
      assert.matches("no node root.nope", out, 1, true)
    end
    local code, out = ctl(e, "node root.nope --json")
    assert.equal(1, code)
    assert.equal(false, json.decode(out:match("^[^\n]*")).ok)
  end)

  it("exits 3 when no engine runs, 2 on usage errors", function()
    local code, out = sh(bin .. " ctl " .. q(e.dir .. "/none.sock") .. " status")
    assert.equal(3, code)
    assert.matches("no engine running: no socket at", out, 1, true)
    code, out = ctl(e, "frobnicate")
    assert.equal(2, code)
    assert.matches("unknown command 'frobnicate'", out, 1, true)
    code = ctl(e, "node")
    assert.equal(2, code)
    code, out = ctl(e, "logs root.heart -n x")
    assert.equal(2, code)
    assert.matches("-n needs a whole number", out, 1, true)
  end)

  it("evaluates code: values, --json, errors with tracebacks", function()
    local code, out = ctl(e, "eval " .. q('return 1, "two", {3}'))
    assert.equal(0, code)
    assert.equal('1\t"two"\t{3}\n', out)
    code, out = ctl(e, "eval --json " .. q('return 1, nil, {a = {1, 2}}, print'))
    assert.equal(0, code)
    local v = json.decode(out)
    assert.equal(1, v[1])
    assert.equal(json.null, v[2])
    assert.same({1, 2}, v[3].a)
    assert.matches("^<function: ", v[4])
    code, out = ctl(e, "eval " .. q('local t = nil\nreturn t.x'))
    assert.equal(1, code)
    assert.matches("repl:2: attempt to index a nil value", out, 1, true)
    assert.matches("stack traceback:", out, 1, true)
    code, out = ctl(e, "eval " .. q("return ("))
    assert.equal(1, code)
    assert.matches("<eof>", out, 1, true)
  end)

  it("stops a runaway evaluation at its budget while the tree keeps running", function()
    local before = beats(e)
    local code, out = ctl(e, "eval --budget 300000000 " .. q("while true do end"))
    assert.equal(1, code)
    assert.matches("instruction budget of 300000000 exceeded", out, 1, true)
    assert.matches("repl:1: in main chunk", out, 1, true)
    -- the heartbeat beat meanwhile (3e8 instructions take a second or more)
    assert.is_true(beats(e) > before + 5)
    assert.equal(0, (ctl(e, "status")))
  end)

  it("prints a large result in slices, under the evaluation's budget, and cuts it", function()
    -- a check handle counts the loop's turns
    assert.equal(0, (ctl(e, "eval " .. q("_G.turns = 0 _G.turn_check = require('luv').new_check() "
      .. "turn_check:start(function() _G.turns = _G.turns + 1 end)"))))
    -- printed between two probes of the turn count: the rendering of a
    -- million entries spans loop turns (the tree runs meanwhile)
    local code, out = ctl(e, "eval " .. q([[
      local big = {} for i = 1, 1e6 do big[i] = i end
      local probe = setmetatable({}, {__tostring = function() return "turn " .. _G.turns end})
      return probe, big, probe]]))
    assert.equal(0, code, out)
    local first, last = out:match("^turn (%d+)\t{\n  1,\n  2,\n.-\n  100,\n  %.%.%. %(999900 more%)\n}\tturn (%d+)\n$")
    assert.is_truthy(first, out:sub(1, 200))
    assert.is_true(tonumber(last) > tonumber(first), out:sub(1, 200))
    -- the rendering, text or JSON, counts in the evaluation's budget
    assert.equal(0, (ctl(e, "eval " .. q("_G.big = {} for i = 1, 1e6 do big[i] = i end"))))
    for _, json_flag in ipairs({"", "--json "}) do
      code, out = ctl(e, "eval --budget 1000000 " .. json_flag .. q("return big"))
      assert.equal(1, code, out:sub(1, 200))
      assert.matches("printing the result: evaluation stopped: instruction budget of 1000000 exceeded",
        out, 1, true)
    end
    -- a text past 1 MiB is cut, and says so
    code, out = ctl(e, "eval " .. q([[
      local t = {} for i = 1, 100 do t[i] = {} for j = 1, 100 do t[i][j] = ("y"):rep(200) end end
      return t, ("z"):rep(3 << 20)]]))
    assert.equal(0, code)
    assert.is_true(#out < (1 << 20) + 4096, #out)
    local marker = "\n(truncated: the text of the result is limited to 1048576 bytes)\n"
    assert.equal(marker, out:sub(-#marker))
    ctl(e, "eval " .. q("turn_check:close() _G.big = nil"))
  end)

  it("restarts and stops nodes, and follows events and logs", function()
    local ev_file, log_file = e.dir .. "/events", e.dir .. "/logs"
    os.execute(string.format("%s ctl %s events -f --json -n 0 > %s 2>&1 & echo $! > %s.pid",
      bin, q(e.sock), q(ev_file), q(ev_file)))
    os.execute(string.format("%s ctl %s logs root.workers.w1 -f -n 0 > %s 2>&1 & echo $! > %s.pid",
      bin, q(e.sock), q(log_file), q(log_file)))
    poll(function()
      local r = request(e.sock, {op = "status", json = true})
      return r.data.clients >= 3
    end, "the followers")
    local code, out = ctl(e, "restart root.workers.w1")
    assert.equal(0, code)
    assert.matches("root.workers.w1: restarted", out, 1, true)
    poll(function()
      local s = read_file(ev_file) or ""
      return s:find('"to":"HEALTHY"', 1, true) and s:find("root.workers.w1", 1, true)
    end, "the restart's events")
    poll(function()
      return (read_file(log_file) or ""):find("root.workers.w1 +| worker version 1")
    end, "the followed log line")
    for line in read_file(ev_file):gmatch("[^\n]+") do
      assert.is_table(json.decode(line))
    end
    os.execute("kill $(cat " .. q(ev_file) .. ".pid) $(cat " .. q(log_file) .. ".pid)")
    code = ctl(e, "stop root.workers.w2")
    assert.equal(0, code)
    local _, n = ctl(e, "node root.workers.w2 --json")
    assert.is_true(json.decode(n).held)
    assert.equal(0, (ctl(e, "restart root.workers.w2")))
    poll(function()
      local _, s = ctl(e, "node root.workers.w2 --json")
      return json.decode(s).state == "HEALTHY"
    end, "w2 back")
  end)
end)

describe("arbor repl (C2)", function()
  local e
  setup(function() e = start() end)
  teardown(function() finish(e) end)

  local function repl(input, extra)
    local f = e.dir .. "/in"
    local h = io.open(f, "w")
    h:write(input)
    h:close()
    return sh(bin .. " repl --echo " .. (extra or "") .. q(e.sock) .. " < " .. q(f))
  end

  it("prints values, keeps session variables, reads multi-line input", function()
    local code, out = repl([[
x = 41
return x + 1
local y = 10
y * 2
function triple(a)
  return a * 3
end
triple(5)
t = {1, "a", {k = true}} t.self = t
t
print("hi", nil, 3)
{a = {b = {c = {d = {e = 1}}}}}
_G.x
]])
    assert.equal(0, code, out)
    assert.matches("> return x %+ 1\n42\n", out)
    assert.matches("> y %* 2\n20\n", out)
    assert.matches("> function triple%(a%)\n>>   return a %* 3\n>> end\n> triple%(5%)\n15\n", out)
    assert.matches('{1, "a", {k = true}, self = <cycle>}', out, 1, true)
    assert.matches("hi\tnil\t3\n", out, 1, true)
    assert.matches("{a = {b = {c = {d = {...}}}}}", out, 1, true)
    assert.matches("> _G.x\nnil\n", out, 1, true) -- nothing leaked into the tree
  end)

  it("keeps sessions apart", function()
    local _, out = repl("secret = 7\nsecret\n")
    assert.matches("> secret\n7\n", out)
    _, out = repl("secret\n")
    assert.matches("> secret\nnil\n", out)
  end)

  it("draws the tree and runs the helpers", function()
    local code, out = repl([[
tree()
node("root.heart").state
logs("root.heart", 2)
events(2)
help()
restart("root.nope")
explain("root.flaky")
]])
    assert.equal(1, code) -- an evaluation failed
    assert.matches("root %[HEALTHY%] up", out)
    assert.matches('"HEALTHY"', out, 1, true)
    assert.matches("root.heart +| beat %d+\n", out)
    assert.matches("swap%(dn, fn", out)
    assert.matches("restart: no node root.nope", out, 1, true)
    assert.matches("root.flaky is %a+", out)
  end)

  it("swaps a crash-looping node's policy and code live", function()
    poll(function()
      local _, before = ctl(e, "node root.flaky --json")
      return (json.decode(before).error or ""):find("flaky is broken", 1, true)
    end, "flaky to fail")
    local code, out = repl([[
policy("root.flaky", function(ev) return 0.05 end)
swap("root.flaky", function(c) c:log("fixed") c:signal("healthy") c:wait() end)
]])
    assert.equal(0, code, out)
    assert.matches("root.flaky: policy replaced", out, 1, true)
    assert.matches("root.flaky: runnable swapped", out, 1, true)
    poll(function()
      local _, s = ctl(e, "node root.flaky --json")
      return json.decode(s).state == "HEALTHY"
    end, "flaky to recover")
    local _, logs = ctl(e, "logs root.flaky")
    assert.matches("| fixed", logs, 1, true)
    local _, evs = ctl(e, "events -n 200")
    assert.matches("root.flaky +policy: policy replaced", evs)
    assert.matches("root.flaky +policy: runnable swapped", evs)
  end)

  it("reloads a module and swaps the runnables that came from it", function()
    local src = "spec/e2e/fixtures/liveworker.lua"
    local code, out = repl(string.format([[
package.loaded.liveworker.version
_G.package.preload.liveworker = function()
  local m = dofile(%q)
  m.version = 2
  return m
end
reload("liveworker", {restart = true})
]], src))
    assert.equal(0, code, out)
    assert.matches("reloaded liveworker; swapped 2 node(s): root.workers.w1, root.workers.w2", out, 1, true)
    poll(function()
      local _, s = ctl(e, "logs root.workers.w2")
      return s:find("worker version 2", 1, true)
    end, "w2 running the reloaded code")
    os.execute("true")
    request(e.sock, {op = "eval", code = "package.preload.liveworker = nil"})
  end)

  it("interrupts a runaway evaluation on SIGINT while the heartbeat beats", function()
    local out_file, pid_file = e.dir .. "/repl.out", e.dir .. "/repl.pid"
    local p = io.popen(string.format("sh -c 'echo $$ > %s; exec %s repl --echo %s' > %s 2>&1",
      pid_file, bin, q(e.sock), q(out_file)), "w")
    p:write("budget(1e15)\nwhile true do end\n")
    p:flush()
    poll(function()
      local r = request(e.sock, {op = "status", json = true})
      return r.data.evaluations == 1
    end, "the evaluation to run")
    local b = beats(e)
    poll(function() return beats(e) >= b + 5 end, "the heartbeat to go on")
    os.execute("kill -INT $(cat " .. q(pid_file) .. ")")
    poll(function() return (read_file(out_file) or ""):find("interrupted", 1, true) end,
      "the interrupt")
    p:write("return 'after'\n")
    p:close()
    local out = read_file(out_file)
    assert.matches("interrupted\nstack traceback:\n\trepl:1: in main chunk", out, 1, true)
    assert.matches('> return \'after\'\n"after"\n', out, 1, true)
    local r = request(e.sock, {op = "status", json = true})
    assert.equal(0, r.data.evaluations)
  end)

  -- `arbor repl` on a pseudo-terminal made by script(1) (bsdutils, which
  -- Debian always has), with HOME=home, once it shows its first prompt. t.typed(keys, want) types keys and waits
  -- until the terminal (its text without carriage returns and escape
  -- sequences) shows want once more than before (a want that ends with the
  -- prompt does not start with it, so that two never overlap): a line is
  -- typed only when the one before it is done, never ahead (a Ctrl-C drops
  -- the terminal's unread input, and the lines in it). t.pid is the
  -- repl's pid and process group; t.close() ends the input (script then
  -- types an end of file) and returns the exit code once the repl has
  -- exited.
  local function terminal(home)
    os.execute("mkdir -p " .. q(home))
    local out_file, pid_file = home .. ".out", home .. ".pid"
    os.remove(pid_file)
    local cmd = string.format("echo $$ > %s; exec %s repl %s", q(pid_file), bin, q(e.sock))
    local p = io.popen(string.format("HOME=%s TERM=xterm timeout 60 script -qfec %s /dev/null > %s 2>&1",
      q(home), q(cmd), q(out_file)), "w")
    local function screen()
      return ((read_file(out_file) or ""):gsub("\r", ""):gsub("\27%[[%d;?]*%a", ""))
    end
    local function shown(want)
      local _, n = screen():gsub(want:gsub("%p", "%%%0"), "")
      return n
    end
    local t = {}
    function t.typed(keys, want)
      local before = shown(want)
      p:write(keys)
      p:flush()
      if not pcall(poll, function() return shown(want) > before end, "") then
        error("timed out waiting for the terminal to show " .. want .. "\n--- it shows:\n"
          .. screen(), 2)
      end
    end
    function t.close()
      local _, _, code = p:close()
      return code
    end
    poll(function() return shown("Ctrl-D quits.\n> ") > 0 end, "the first prompt")
    t.pid = poll(function() return tonumber(read_file(pid_file)) end, "the repl's pid")
    return t
  end

  it("edits lines, keeps history and completes names on a terminal", function()
    local home = e.dir .. "/home"
    local t = terminal(home)
    t.typed("budget(1e15)\n", "budget(1e15)\n1000000000000000\n> ")
    -- an evaluation that takes a moment: the next lines wait for it (typed
    -- ahead, they would be in the terminal's input when the Ctrl-C below
    -- interrupts this one, and dropped)
    t.typed("for _ = 1, 3e7 do end x = 20\n", "for _ = 1, 3e7 do end x = 20\n> ")
    t.typed("return x + 1\n", "return x + 1\n21\n> ")
    t.typed("\27[A\n", "return x + 1\n21\n> ") -- up arrow: the last line again
    t.typed("arbo\t.ru\t\n", "> arbor.run\nfunction: ") -- completion of names, fields
    t.typed('node("root.he\t).state\n', 'node("root.heart").state\n"HEALTHY"\n> ') -- of DNs
    t.typed("while true do end\n", "> while true do end\n")
    poll(function() -- this one: the lines before it are done
      local r = request(e.sock, {op = "status", json = true})
      return r.data.evaluations == 1
    end, "the evaluation to run")
    t.typed("\3", "interrupted\nstack traceback:\n\trepl:1: in main chunk\n> ") -- Ctrl-C
    t.typed("\4", "> \n") -- Ctrl-D
    assert.equal(0, t.close()) -- the repl has exited: its history is complete
    assert.equal("budget(1e15)\nfor _ = 1, 3e7 do end x = 20\nreturn x + 1\nreturn x + 1\n"
      .. 'arbor.run\nnode("root.heart").state\nwhile true do end\n',
      read_file(home .. "/.arbor_history"))
  end)

  it("writes each line to the history as it is entered: a hangup or a kill loses none", function()
    local home = e.dir .. "/home-killed"
    local t = terminal(home)
    t.typed("a = 1\n", "a = 1\n> ")
    t.typed("return a\n", "return a\n1\n> ")
    os.execute("kill -HUP -" .. t.pid) -- the terminal went away (its process group)
    assert.is_not.equal(0, t.close())
    assert.equal("a = 1\nreturn a\n", read_file(home .. "/.arbor_history"))
    t = terminal(home)
    t.typed("\27[A\n", "return a\nnil\n> ") -- the last session's line
    t.typed("b = 2\n", "b = 2\n> ")
    os.execute("kill -KILL -" .. t.pid)
    assert.is_not.equal(0, t.close())
    assert.equal("a = 1\nreturn a\nreturn a\nb = 2\n", read_file(home .. "/.arbor_history"))
  end)
end)

describe("protocol (C4)", function()
  local e
  setup(function() e = start() end)
  teardown(function() finish(e) end)

  -- Sends raw bytes; returns the frames received until the engine closed.
  local function raw(bytes, half_close)
    local c = assert(core.connect(e.sock))
    assert(c:send_raw(bytes))
    if half_close then c:shutdown_write() end
    local frames = {}
    while true do
      local p, err, code = c:recv(10000)
      if not p then
        c:close()
        return frames, err, code
      end
      frames[#frames + 1] = assert(json.decode(p))
    end
  end

  local function header(n)
    return string.char(n >> 24 & 255, n >> 16 & 255, n >> 8 & 255, n & 255)
  end

  it("answers garbage, oversized, empty and truncated frames with an error and a close", function()
    local cases = {
      {"GET / HTTP/1.1\r\n\r\n", false, "frame too large %(1195725856 bytes, limit 1048576%)"},
      {header(2 << 20) .. "{}", false, "frame too large %(2097152 bytes, limit 1048576%)"},
      {header(0), false, "empty frame"},
      {header(100) .. '{"id":1', true, "truncated frame: the connection ended 11 byte%(s%) into a frame"},
      {header(3) .. "{{{", false, "protocol error: invalid JSON at byte 2"},
      {header(7) .. '"hello"', false, "a request must be a JSON object"},
      {header(15) .. '{"op":"status"}', false, "a request needs an id"},
    }
    for _, case in ipairs(cases) do
      local frames, _, code = raw(case[1], case[2])
      assert.equal("EOF", code)
      assert.equal(1, #frames)
      assert.equal(json.null, frames[1].id)
      assert.is_false(frames[1].ok)
      assert.matches(case[3], frames[1].error)
    end
    -- a valid frame before the bad one is still answered
    local good = '{"id":7,"op":"status"}'
    local frames = raw(header(#good) .. good .. header(0))
    assert.equal(2, #frames)
    assert.equal(7, frames[1].id)
    assert.is_true(frames[1].ok)
    -- an unknown op is an error reply; the connection stays
    local r = request(e.sock, {op = "frobnicate"})
    assert.is_false(r.ok)
    assert.matches("unknown op 'frobnicate'", r.error, 1, true)
    assert.equal(0, (ctl(e, "status")))
  end)

  it("completes without running the session's code (__index, __pairs)", function()
    local c = assert(core.connect(e.sock))
    -- one request on this connection (its session); nil when no reply came
    -- within 10 s (a frozen engine)
    local function ask(id, req)
      req.id = id
      assert(c:send(json.encode(req)))
      local p = c:recv(10000)
      return p and json.decode(p)
    end
    local r = ask(1, {op = "eval", code = [[
      local mt = {__index = function() while true do end end,
                  __pairs = function() while true do end end}
      trap = setmetatable({field = 1}, mt)
      obj = setmetatable({}, {__index = {method = function() end, size = 1}})
      return true]]})
    assert.is_true(r.ok, r.error)
    local hostile = ask(2, {op = "complete", text = "trap.f"})
    local nested = ask(3, {op = "complete", text = "trap.x.y"})
    local inherited = ask(4, {op = "complete", text = "obj:m"})
    c:close()
    assert.is_table(hostile, "no reply: the completion froze the engine")
    assert.same({"trap.field"}, hostile.matches)
    assert.same({}, nested.matches)
    assert.same({"obj:method"}, inherited.matches)
    assert.equal(0, (ctl(e, "status")))
  end)

  it("streams watch() until interrupted, also after a long computation", function()
    local conn = assert(client.open(e.sock))
    local id = assert(conn:send({op = "eval", code = "for i = 1, 3e6 do end watch()"}))
    local frames = {}
    local reply = conn:wait(id, function(f)
      frames[#frames + 1] = f
      if f.out and f.out:find("watching events") then
        -- make an event, then stop watching
        request(e.sock, {op = "restart", dn = "root.workers.w2"})
      elseif f.out and f.out:find("root.workers.w2 +NEW %-> HEALTHY") then
        conn.c:send(json.encode({op = "interrupt", target = id, id = "stop"}))
      end
    end)
    conn:close()
    assert.is_true(reply.ok)
    assert.is_true(reply.interrupted)
    assert.matches("watching events", frames[1].out, 1, true)
    assert.is_true(#frames >= 3)
  end)

  it("serves 100 clients at once, each with its own session", function()
    local conns = {}
    for i = 1, 100 do conns[i] = assert(client.open(e.sock)) end
    local ids = {}
    for i, c in ipairs(conns) do
      ids[i] = assert(c:send({op = "eval", code = "n = " .. i .. " return n"}))
    end
    local st = request(e.sock, {op = "status", json = true})
    assert.equal(101, st.data.clients)
    for i, c in ipairs(conns) do
      local r = assert(c:wait(ids[i]))
      assert.equal(tostring(i), r.text)
    end
    for i = 100, 1, -1 do -- in the other order: each kept its own n
      local r = assert(conns[i]:request({op = "eval", code = "return n * 2"}))
      assert.equal(tostring(i * 2), r.text)
      conns[i]:close()
    end
    poll(function()
      return request(e.sock, {op = "status", json = true}).data.clients == 1
    end, "the clients to be gone")
  end)

  it("sends a reply larger than the unsent-output limit to a client that reads it", function()
    local conn = assert(client.open(e.sock))
    local reply, err = conn:request({op = "eval", json = true,
      code = "return string.rep('x', 80 << 20)"}) -- 80 MiB: over the 64 MiB
    conn:close()
    assert(reply, err)
    assert.equal(80 << 20, #reply.values[1])
    assert.equal(0, (ctl(e, "status")))
  end)

  it("answers while a runnable works longer than its sleeps between them", function()
    -- each pass works (some ms) longer than the sleep that follows it, so
    -- the next wake-up is already due when the runnable yields: the loop
    -- must still poll the socket between passes (libuv 1.44 runs a timer
    -- re-armed at 0 ms again in the same pass, never polling)
    local dir = mktemp()
    local script = dir .. "/busy.lua"
    local f = assert(io.open(script, "w"))
    f:write([[
return function(ctx)
  ctx:run("busy", function(c)
    while true do
      local x = 0
      for i = 1, 3000000 do x = x + i end
      c:sleep(0.001)
    end
  end)
  ctx:signal("healthy")
  ctx:wait()
end]])
    f:close()
    local b = support.run_arbor("--quiet " .. q(script))
    assert.is_true(support.eventually(function() return core.connect(b.sock) end))
    -- a starved engine never answers: timeout(1) is the failure guard
    local code, out = sh("timeout 20 " .. bin .. " ctl " .. q(b.sock) .. " status")
    if code ~= 0 then os.execute("kill -9 " .. b.pid) end -- it would not hear SIGTERM either
    support.stop_arbor(b)
    os.execute("rm -rf " .. q(dir))
    assert.equal(0, code, out)
    assert.matches("root.busy", out, 1, true)
  end)

  it("drops a client that stops reading, without blocking the engine", function()
    -- the drops logged so far: another test's would do for this one's
    local function drops()
      local _, logs = ctl(e, "logs root -n 1000")
      local n = 0
      for _ in logs:gmatch("dropped client %d+: it stopped reading") do n = n + 1 end
      return n
    end
    local dropped = drops()
    local c = assert(core.connect(e.sock))
    local before = beats(e)
    for id = 1, 12 do -- 96 MiB of replies, none read
      assert(c:send(json.encode({op = "eval", code = "return string.rep('x', 8 << 20)",
        id = id, json = true})))
    end
    assert.is_true(support.eventually(function() -- dropped after 5 s without progress
      return drops() > dropped
    end))
    assert.is_true(beats(e) > before)
    assert.equal(0, (ctl(e, "status")))
    -- the dropped client reads what was sent, then the end
    local got = 0
    while c:recv(10000) do got = got + 1 end
    assert.is_true(got < 12)
    c:close()
  end)
end)

describe("docs/repl.md", function()
  it("the session: a crash-looping node gets a policy and new code, and recovers", function()
    local e = start({script = "docs/examples/shop.lua"})
    local ok, err = pcall(function()
      poll(function() -- the tree while payments waits for its restart
        local _, tree = ctl(e, "tree")
        return tree:find("payments %[DEAD%] restarts=%d+ [%w, -]*restart in [%d.]+s  last error: "
          .. "docs/examples/shop.lua:23: attempt to perform arithmetic on a nil value %(field 'amount'%)")
      end, "payments to crash")
      local f = e.dir .. "/in"
      local h = io.open(f, "w")
      h:write([[
policy("root.payments", arbor.policy.constant(0.5))
swap("root.payments", function(ctx)
  ctx:signal("healthy")
  for _, order in ipairs({{id = 2}, {id = 3, amount = 12}}) do
    if order.amount then
      ctx:log("charging order", order.id, order.amount * 100, "cents")
    else
      ctx:log("order", order.id, "has no amount: skipped")
    end
  end
  ctx:wait()
end)
]])
      h:close()
      local code, out = sh(bin .. " repl " .. q(e.sock) .. " < " .. q(f))
      assert.equal(0, code, out)
      poll(function()
        local _, s = ctl(e, "logs root.payments")
        return s:find("order 2 has no amount: skipped", 1, true)
      end, "payments to run the new code")
      local _, s = ctl(e, "node root.payments --json")
      assert.equal("HEALTHY", json.decode(s).state)
    end)
    finish(e)
    assert(ok, err)
  end)
end)
