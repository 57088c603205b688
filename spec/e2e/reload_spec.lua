-- End-to-end: `arbor ctl reload` and SIGHUP apply a changed script to the
-- running tree (issue 17, docs/restore.md): `sleep` services whose
-- definition did not change keep their pids, a changed argv restarts only
-- that node, a removed node's process goes, a new one starts; --dry-run
-- changes nothing; a broken script leaves the tree as it was.
local json = require "arbor.json"
local support = require "e2e.support"
local bin, q, sh, read = support.bin, support.q, support.sh, support.read
local poll, alive = support.poll, support.alive

-- The supervisor script: services keep (sleep 1000), change (sleep
-- `arg`), and old and new when asked; extra: text inserted in the root.
local function script(path, o)
  local f = assert(io.open(path, "w"))
  f:write(string.format([[
local arbor = require "arbor"
arbor.run(function(ctx)
  ctx:run("keep", arbor.exec{"sleep", "1000"})
  ctx:run("change", arbor.exec{"sleep", "%s"})
  %s
  %s
  %s
  ctx:signal("healthy")
  ctx:wait()
end)
]], o.change or "1001", o.old and 'ctx:run("old", arbor.exec{"sleep", "1002"})' or "",
    o.new and 'ctx:run("new", arbor.exec{"sleep", "1003"})' or "", o.extra or ""))
  f:close()
end

describe("reload", function()
  local e
  after_each(function()
    if e then support.stop_arbor(e) end
    e = nil
  end)

  local function ctl(args)
    return sh(bin .. " ctl " .. q(e.sock) .. " " .. args)
  end

  -- dn -> pid of every node with a process
  local function pids()
    local code, out = ctl("status --json")
    assert.equal(0, code, out)
    local t = {}
    for _, row in ipairs(json.decode(out).table) do
      if row.pid then t[row.dn] = row.pid end
    end
    return t
  end

  local function start(o)
    e = support.run_arbor(function(dir)
      script(dir .. "/sup.lua", o)
      return q(dir .. "/sup.lua")
    end)
    poll(function()
      local ok, p = pcall(pids)
      return ok and p["root.keep"] and p["root.change"] and (not o.old or p["root.old"])
    end, "the services to run")
    return pids()
  end

  it("keeps unchanged services' pids, restarts a changed argv, stops removed ones, starts new ones", function()
    local before = start{old = true}
    script(e.dir .. "/sup.lua", {change = "2001", new = true})
    local code, out = ctl("reload")
    assert.equal(0, code, out)
    assert.matches("reload " .. e.dir .. "/sup.lua: 1 keep, 1 reload, 1 restart, 1 stop, 1 start (", out, 1, true)
    assert.matches("\n  keep     root.keep\n", out, 1, true)
    assert.matches("\n  restart  root.change  (its argv changed)\n", out, 1, true)
    assert.matches("\n  stop     root.old\n", out, 1, true)
    assert.matches("\n  start    root.new", out, 1, true)
    poll(function()
      local p = pids()
      return p["root.new"] and p["root.change"] and p["root.change"] ~= before["root.change"]
        and not p["root.old"]
    end, "the plan to be carried out")
    local after = pids()
    assert.equal(before["root.keep"], after["root.keep"])
    assert.is_true(alive(before["root.keep"]))
    poll(function() return not alive(before["root.old"]) end, "the removed service's process to end")
    poll(function() return not alive(before["root.change"]) end, "the changed service's old process to end")
    local _, argv = sh("cat /proc/" .. after["root.change"] .. "/cmdline | tr '\\0' ' '")
    assert.equal("sleep 2001 ", argv)
    local _, events = ctl("events -n 1000")
    assert.matches("root.keep%s+restored: definition unchanged: kept running", events)
    local _, tree = ctl("tree")
    assert.matches("`%-%- new %[HEALTHY%]", tree)
    assert.is_nil(tree:find("old [", 1, true))
  end)

  it("--dry-run prints the plan and changes nothing; --json gives it as data", function()
    local before = start{}
    script(e.dir .. "/sup.lua", {change = "2001"})
    local code, out = ctl("reload --dry-run")
    assert.equal(0, code, out)
    assert.matches("reload " .. e.dir .. "/sup.lua --dry-run (nothing done): 1 keep, 1 reload, 1 restart", out, 1, true)
    code, out = ctl("reload --dry-run --json")
    assert.equal(0, code, out)
    local data = json.decode(out)
    assert.is_true(data.dry_run)
    assert.same({keep = 1, reload = 1, restart = 1}, data.counts)
    assert.is_number(data.seconds)
    assert.same({dn = "root.change", action = "restart", why = "its argv changed"}, data.steps[3])
    assert.same(before, pids())
    local _, events = ctl("events -n 1000")
    assert.is_nil(events:find("reload", 1, true))
    code, out = ctl("status --dry-run")
    assert.equal(2, code)
    assert.matches("--dry-run is an option of reload", out, 1, true)
    code, out = ctl("status -f") -- the engine would refuse the field
    assert.equal(2, code)
    assert.matches("arbor ctl status: -f is an option of logs and events", out, 1, true)
  end)

  it("refuses a request whose dry_run is not a boolean, naming the field, and changes nothing", function()
    local client = require "arbor.client"
    local before = start{}
    script(e.dir .. "/sup.lua", {change = "2001"})
    for _, bad in ipairs{"true", 1, {}} do
      local conn = assert(client.open(e.sock))
      local r = assert(conn:request({op = "reload", dry_run = bad}))
      conn:close()
      assert.is_false(r.ok)
      assert.equal("dry_run", r.field)
      assert.matches("^reload: field 'dry_run' must be a boolean, got ", r.error)
    end
    local conn = assert(client.open(e.sock))
    local r = assert(conn:request({op = "reload", dryrun = true}))
    conn:close()
    assert.is_false(r.ok)
    assert.equal("reload: unknown field 'dryrun' (the fields of reload: dry_run, json)", r.error)
    assert.same(before, pids())
    local _, events = ctl("events -n 1000")
    assert.is_nil(events:find("reload", 1, true))
  end)

  it("a script that fails to load or to build leaves the tree running as it was", function()
    local before = start{}
    local path = e.dir .. "/sup.lua"
    script(path, {change = "2001", extra = "ctx:run("})
    local code, out = ctl("reload")
    assert.equal(1, code)
    assert.matches("reload " .. e.dir .. "/sup.lua: not applied: " .. e.dir .. "/sup.lua:", out, 1, true)
    assert.matches("; the running tree is unchanged\n$", out)
    script(path, {change = "2001", extra = 'ctx:run("typo", arbor.exec{"sleep", "1"}, {grce = 1})'})
    code, out = ctl("reload")
    assert.equal(1, code)
    assert.matches("the new tree met 1 error(s)", out, 1, true)
    assert.matches("unknown option 'grce'", out, 1, true)
    script(path, {change = "2001", extra = 'ctx:run("missing", arbor.exec{"/no/such/program"})'})
    code, out = ctl("reload")
    assert.equal(1, code)
    assert.matches("root.missing: ", out, 1, true)
    assert.same(before, pids())
    local _, tree = ctl("tree")
    assert.is_nil(tree:find("typo", 1, true))
  end)

  it("does not run a prestart migration or a poststart job again across reloads", function()
    e = support.run_arbor(function(dir)
      local f = assert(io.open(dir .. "/jobs.lua", "w"))
      f:write(string.format([[
local arbor = require "arbor"
local dir, app = %q, ...
arbor.run(function(ctx)
  ctx:run("migrate", arbor.exec({"sh", "-c", "echo migrated >> " .. dir .. "/migrations"}, {oneshot = true}),
    {lifecycle = "prestart"})
  ctx:run("app", arbor.exec{"sleep", app or "1000"})
  ctx:run("warm", arbor.exec({"sh", "-c", "echo warmed >> " .. dir .. "/warm"}, {oneshot = true}),
    {lifecycle = "poststart"})
  ctx:signal("healthy")
  ctx:wait()
end)
]], dir))
      f:close()
      return q(dir .. "/jobs.lua")
    end)
    poll(function() return read(e.dir .. "/warm") end, "the poststart job")
    local app = pids()["root.app"]
    local path = e.dir .. "/jobs.lua"
    for i = 1, 2 do -- the app changes twice: each reload restarts it only
      local text = read(path):gsub('app or "%d+"', 'app or "' .. (2000 + i) .. '"')
      local f = assert(io.open(path, "w"))
      f:write(text)
      f:close()
      local code, out = ctl("reload")
      assert.equal(0, code, out)
      assert.matches("\n  keep     root.migrate\n", out, 1, true)
      assert.matches("\n  restart  root.app  (its argv changed)\n", out, 1, true)
      poll(function()
        local p = pids()["root.app"]
        return p and p ~= app
      end, "the app's restart")
      app = pids()["root.app"]
    end
    assert.equal("migrated\n", read(e.dir .. "/migrations"))
    assert.equal("warmed\n", read(e.dir .. "/warm"))
  end)

  it("SIGHUP reloads the script and logs what it did", function()
    local before = start{}
    script(e.dir .. "/sup.lua", {new = true})
    local pid = e.pid
    os.execute("kill -HUP " .. pid)
    poll(function() return pids()["root.new"] end, "the new service")
    assert.equal(before["root.keep"], pids()["root.keep"])
    assert.equal(before["root.change"], pids()["root.change"])
    local _, logs = ctl("logs root -n 1000")
    assert.matches("SIGHUP: reload " .. e.dir .. "/sup.lua: 2 keep, 1 reload, 1 start (", logs, 1, true)
    assert.matches(" ms); reload   root  (its runnable changed); keep     root.keep;", logs, 1, true)
    assert.is_true(alive(pid))
  end)
end)

-- Issue 25: a script that loops or blocks while it is read again, or while
-- its tree is built, holds the loop at most the runaway budget (the
-- script's `runaway`, 1 s here): the reload fails, the tree runs on
-- untouched, and a SIGTERM that came meanwhile stops the tree in order.
describe("reload of a script that loops or blocks", function()
  local dir, pid
  after_each(function()
    if pid then os.execute("kill -9 " .. pid .. " 2>/dev/null") end
    os.execute(support.plain .. "pkill -9 -f " .. q(dir) .. " 2>/dev/null")
    os.execute("rm -rf " .. q(dir))
    pid = nil
  end)

  local function ctl(args)
    return sh("timeout 20 " .. bin .. " ctl " .. q(dir .. "/ctl.sock") .. " " .. args)
  end

  -- The script: keep (sleep), and at its top level what the file `mode`
  -- says when it is read again: loop, block (open a FIFO nobody writes)
  -- or loop in a pcall; `build`: a node that loops in the check build.
  local function start()
    dir = support.mktemp()
    os.execute("mkfifo " .. q(dir .. "/fifo"))
    local f = assert(io.open(dir .. "/sup.lua", "w"))
    f:write(string.format([[
local arbor = require "arbor"
local dir = %q
local function mode()
  local f = io.open(dir .. "/mode")
  local m = f and f:read("l")
  if f then f:close() end
  return m
end
if require("arbor.reload").capturing() then
  local m = mode()
  if m then io.open(dir .. "/reading", "w"):close() end
  if m == "loop" then while true do end end
  if m == "pcall" then while true do pcall(function() while true do end end) end end
  if m == "block" then io.open(dir .. "/fifo"):read("a") end
end
arbor.run(function(ctx)
  ctx:run("keep", arbor.exec{"sleep", "1000"})
  if mode() == "build" then
    ctx:run("spin", function(c) c:signal("healthy") while true do end end)
  end
  ctx:signal("healthy")
  ctx:wait()
end, {runaway = 1})
]], dir))
    f:close()
    os.execute(string.format("sh -c '%s run --control %s %s > %s/out 2>&1 & echo $! > %s/pid; "
      .. "wait $!; echo $? > %s/status' >/dev/null 2>&1 &", bin, q(dir .. "/ctl.sock"),
      q(dir .. "/sup.lua"), q(dir), q(dir), q(dir)))
    poll(function() return tonumber(read(dir .. "/pid") or "") end, "arbor to start")
    pid = tonumber(read(dir .. "/pid"))
    poll(function()
      local code, out = ctl("status --json")
      if code ~= 0 then return false end
      for _, row in ipairs(json.decode(out).table) do
        if row.dn == "root.keep" and row.pid then return row.pid end
      end
    end, "the tree to run")
    local _, out = ctl("status --json")
    for _, row in ipairs(json.decode(out).table) do
      if row.dn == "root.keep" then return row.pid end
    end
  end

  local function set_mode(m)
    local f = assert(io.open(dir .. "/mode", "w"))
    f:write(m, "\n")
    f:close()
  end

  it("fails past the runaway budget and leaves the tree untouched: a loop, a loop in pcall, a block, a build", function()
    local keep = start()
    for _, m in ipairs{"loop", "pcall", "block"} do
      set_mode(m)
      for _, args in ipairs{"reload", "reload --dry-run"} do
        local code, out = ctl(args)
        assert.equal(1, code, m .. ": " .. out)
        assert.matches("^arbor ctl reload: reload " .. dir:gsub("%p", "%%%0")
          .. "/sup%.lua: not applied: the script ran %d+ ms without yielding %(limit 1000 ms%); "
          .. "the running tree is unchanged\n$", out)
      end
    end
    set_mode("build")
    local code, out = ctl("reload")
    assert.equal(1, code, out)
    assert.matches("not applied: the new tree met %d error%(s%)", out)
    assert.matches("root.spin: runaway runnable: ran %d+ ms without yielding", out)
    local _, status = ctl("status --json")
    local rows = json.decode(status).table
    assert.equal(2, #rows)
    assert.equal(keep, rows[2].pid)
    assert.is_true(alive(keep))
  end)

  it("SIGHUP's reload fails the same way and is logged; arbor supervises on", function()
    local keep = start()
    set_mode("loop")
    os.execute("kill -HUP " .. pid)
    local deadline = os.time() + 60 -- a frozen arbor fails this, not hangs it
    repeat
      local _, logs = ctl("logs root -n 100")
      if logs:find("SIGHUP: reload", 1, true) then break end
      support.sleep(0.05)
    until os.time() > deadline
    assert(os.time() <= deadline, "timed out waiting for the SIGHUP line")
    local _, logs = ctl("logs root -n 100")
    assert.matches("SIGHUP: reload [^\n]*: not applied: the script ran %d+ ms without yielding", logs)
    assert.is_true(alive(keep))
    assert.is_true(alive(pid))
  end)

  it("a SIGTERM while the reload is stuck stops the tree in order once the budget is over", function()
    local keep = start()
    set_mode("loop")
    os.execute(string.format("%s ctl %s reload > %s/reload.out 2>&1 &", bin, q(dir .. "/ctl.sock"), q(dir)))
    poll(function() return read(dir .. "/reading") end, "the reload to read the script")
    os.execute("kill -TERM " .. pid)
    poll(function() return (read(dir .. "/status") or ""):find("\n") end, "arbor to exit")
    assert.equal("0\n", read(dir .. "/status")) -- stopped cleanly, in order
    assert.is_false(alive(keep))
    assert.matches("SIGTERM: stopping the tree", read(dir .. "/out"), 1, true)
  end)
end)
