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
  end)

  it("a script that fails to load or to build leaves the tree running as it was", function()
    local before = start{}
    local path = e.dir .. "/sup.lua"
    script(path, {change = "2001", extra = "ctx:run("})
    local code, out = ctl("reload")
    assert.equal(1, code)
    assert.matches("reload " .. e.dir .. "/sup.lua: not applied, the running tree is unchanged: "
      .. e.dir .. "/sup.lua:", out, 1, true)
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
