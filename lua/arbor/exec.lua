--- arbor.exec: operating-system processes (X1-X6).
--
-- `ctx:exec(argv, opts)` starts a program in its own process group and
-- returns a handle; `arbor.exec(argv, opts)` is a ready-made runnable that
-- supervises one program: readiness, exit classification, graceful stop.
-- The mechanism (spawn, pipes, the stop, the guard) is C (src/proc/); this
-- module checks options and holds the readiness logic.
local core = require "arbor.core"
local fail = require("arbor.failure").fail

local M = {}

local function misuse(ctx, what, fmt, ...)
  error(string.format("%s: %s: " .. fmt, ctx.dn, what, ...), 3)
end

local ready_modes = {spawn = 0, notify = 1, systemd = 2}

local exec_options = {cwd = true, env = true, env_replace = true, uid = true,
  gid = true, umask = true, stdin = true, stop_signal = true, grace = true,
  ready = true, line_max = true, rlimits = true}

-- A signal number from a name ("TERM", "SIGTERM") or a number.
local signums = {} -- names already looked up
local function signum(ctx, what, v)
  if math.type(v) == "integer" and v > 0 and v < 65 then return v end
  local n = signums[v]
  if n then return n end
  n = type(v) == "string" and core.signum(v)
  if not n then misuse(ctx, what, "unknown signal %s", tostring(v)) end
  signums[v] = n
  return n
end

-- The program's path: argv[1] as given when it has a slash (relative to
-- cwd), else searched in PATH. nil, "ENAME: message", "ENAME" when it
-- cannot run. A path with a slash is only checked when `check` is set:
-- otherwise exec itself finds out, and the check then explains (M.exec).
local function resolve(prog, cwd, path, check)
  if prog:find("/", 1, true) then
    if not check then return prog end
    local f = prog
    if cwd and prog:sub(1, 1) ~= "/" then f = cwd .. "/" .. prog end
    local ok, err, code = core.access(f)
    if ok then return prog end
    return nil, err, code
  end
  path = path or "/usr/local/bin:/usr/bin:/bin"
  local other, other_code
  for dir in path:gmatch("[^:]+") do
    local f = dir .. "/" .. prog
    local ok, err, code = core.access(f)
    if ok then return f end
    if code ~= "ENOENT" and not other then other, other_code = err, code end
  end
  if other then return nil, other, other_code end
  return fail("ENOENT", "%s: not found in PATH %s", prog, path)
end

-- The child's environment as a list of "K=V", or nil for arbor's own.
local function environment(ctx, opts)
  if opts.env == nil and not opts.env_replace then return nil end
  if opts.env ~= nil and type(opts.env) ~= "table" then
    misuse(ctx, "ctx:exec", "option 'env' must be a table of NAME = value, got %s",
      type(opts.env))
  end
  local vars, order = {}, {}
  if not opts.env_replace then
    for _, kv in ipairs(core.environ()) do
      local k = kv:match("^([^=]*)=")
      if k and not vars[k] then order[#order + 1] = k end
      if k then vars[k] = kv end
    end
  end
  for k, v in pairs(opts.env or {}) do
    if type(k) ~= "string" or k == "" or k:find("=", 1, true) then
      misuse(ctx, "ctx:exec", "option 'env': bad variable name %s", core.cut(k))
    end
    if v == false then
      vars[k] = nil
    elseif type(v) == "string" or type(v) == "number" then
      if not vars[k] then order[#order + 1] = k end
      vars[k] = k .. "=" .. tostring(v)
    else
      misuse(ctx, "ctx:exec", "option 'env': %s must be a string, a number or false, got %s",
        k, type(v))
    end
  end
  local list = {}
  for _, k in ipairs(order) do
    if vars[k] then list[#list + 1] = vars[k] end
  end
  return list, vars.PATH and vars.PATH:sub(6)
end

-- opts[key] (uid or gid) as a number: an integer >= 0 as it is, a name
-- through lookup (which may also give a second value: a user's group).
local function id_option(ctx, opts, key, what, lookup)
  local v = opts[key]
  if v == nil or (math.type(v) == "integer" and v >= 0) then return v end
  if type(v) ~= "string" then
    misuse(ctx, "ctx:exec", "option '%s' must be a %s name or an integer >= 0, got %s",
      key, what, tostring(v))
  end
  local id, extra = lookup(v)
  if not id then misuse(ctx, "ctx:exec", "unknown %s '%s'", what, v) end
  return id, extra
end

-- uid and gid from numbers or names; a user name also gives its group.
local function ids(ctx, opts)
  local uid, user_gid = id_option(ctx, opts, "uid", "user", core.user)
  local gid = id_option(ctx, opts, "gid", "group", core.group)
  if gid == nil then gid = user_gid end
  return uid, gid
end

-- rlimits = {nofile = 1024, core = 0, nproc = {soft, hard}, as = "unlimited"}
-- as "resource=soft:hard,..." for `arbor --exec-shim` (-1: unlimited).
local function limits(ctx, rl)
  if type(rl) ~= "table" then
    misuse(ctx, "ctx:exec", "option 'rlimits' must be a table, got %s", type(rl))
  end
  local function value(name, v)
    if v == "unlimited" or v == math.huge then return -1 end
    if math.type(v) ~= "integer" or v < 0 then
      misuse(ctx, "ctx:exec", "rlimits.%s: want an integer >= 0 or \"unlimited\", got %s",
        name, tostring(v))
    end
    return v
  end
  local items = {}
  for name, v in pairs(rl) do
    local res = type(name) == "string" and core.rlimit(name)
    if not res then
      misuse(ctx, "ctx:exec", "unknown resource limit '%s' (as, core, cpu, data, fsize, "
        .. "locks, memlock, msgqueue, nice, nofile, nproc, rss, rtprio, rttime, "
        .. "sigpending, stack)", tostring(name))
    end
    local soft, hard
    if type(v) == "table" then
      soft, hard = value(name, v[1]), value(name, v[2])
    else
      soft = value(name, v)
      hard = soft
    end
    items[#items + 1] = string.format("%d=%d:%d", res, soft, hard)
  end
  table.sort(items)
  return #items > 0 and table.concat(items, ",") or nil
end

--- ctx:exec(argv, opts) -> proc | nil, "ENAME: message", "ENAME". Starts
-- argv[1] (searched in PATH unless it has a slash) with argv as its
-- arguments, in its own process group. Misuse (bad argv or options) raises;
-- a program that cannot be started returns the failure naming it ("ENOENT:
-- no such file or directory: /usr/bin/nope", EACCES, ENOEXEC, ...).
-- The process is stopped when the incarnation ends (after ctx:defer's).
function M.exec(ctx, argv, opts)
  if type(argv) ~= "table" then
    misuse(ctx, "ctx:exec(argv)", "argv must be a table of strings, got %s", type(argv))
  end
  if #argv == 0 then misuse(ctx, "ctx:exec(argv)", "argv is empty") end
  for i = 1, #argv do
    if type(argv[i]) ~= "string" then
      misuse(ctx, "ctx:exec(argv)", "argv[%d] must be a string, got %s", i, type(argv[i]))
    end
  end
  if opts ~= nil and type(opts) ~= "table" then
    misuse(ctx, "ctx:exec", "options must be a table, got %s", type(opts))
  end
  opts = opts or {}
  for k in pairs(opts) do
    if not exec_options[k] then
      misuse(ctx, "ctx:exec", "unknown option '%s'", core.cut(k))
    end
  end
  if opts.cwd ~= nil and type(opts.cwd) ~= "string" then
    misuse(ctx, "ctx:exec", "option 'cwd' must be a string, got %s", type(opts.cwd))
  end
  local umask = opts.umask
  if type(umask) == "string" then umask = tonumber(umask, 8) end
  if umask ~= nil and not (math.type(umask) == "integer" and umask >= 0 and umask <= 511) then
    misuse(ctx, "ctx:exec", "option 'umask' must be an integer 0-0777 or an octal string, got %s",
      tostring(opts.umask))
  end
  local stdin = opts.stdin or "null"
  if stdin ~= "null" and stdin ~= "inherit" then
    misuse(ctx, "ctx:exec", "option 'stdin' must be \"null\" or \"inherit\", got %s", tostring(stdin))
  end
  local grace = opts.grace or 10
  if type(grace) ~= "number" or not (grace >= 0) or grace == math.huge then
    misuse(ctx, "ctx:exec", "option 'grace' must be a finite number >= 0 (seconds), got %s",
      tostring(opts.grace))
  end
  local ready = ready_modes[opts.ready or "spawn"]
  if not ready then
    misuse(ctx, "ctx:exec", "option 'ready' must be \"spawn\", \"notify\" or \"systemd\", got %s",
      tostring(opts.ready))
  end
  local line_max = opts.line_max or 4096
  if math.type(line_max) ~= "integer" or line_max < 16 then
    misuse(ctx, "ctx:exec", "option 'line_max' must be an integer >= 16, got %s",
      tostring(opts.line_max))
  end
  local stop_signal = signum(ctx, "ctx:exec: option 'stop_signal'", opts.stop_signal or "TERM")
  local uid, gid = ids(ctx, opts)
  local env, env_path = environment(ctx, opts)
  local rl = opts.rlimits ~= nil and limits(ctx, opts.rlimits) or nil
  if opts.cwd then
    local ok, err, code = core.access(opts.cwd, "dir", "cwd " .. opts.cwd)
    if not ok then return nil, err, code end
  end
  local prog, path = argv[1], env_path or os.getenv("PATH")
  -- through the rlimits shim, only a check beforehand names the program
  local file, err, code = resolve(prog, opts.cwd, path, rl ~= nil)
  if not file then return nil, err, code end
  if rl then -- applied by arbor itself between fork and exec: one more exec
    local shim = core.shim_path()
    local shim_argv = {shim, "--exec-shim", rl, file}
    for i = 1, #argv do shim_argv[#shim_argv + 1] = argv[i] end
    file, argv = shim, shim_argv
  end
  local proc, serr, scode = core.spawn(ctx, file, argv, env, opts.cwd, uid, gid,
    umask, stdin == "inherit", ready, stop_signal, grace, line_max)
  if not proc then -- in the words of the path check when it objects
    local _, why, wcode = resolve(prog, opts.cwd, path, true)
    if why then return nil, why, wcode end
    return nil, serr, scode
  end
  return proc
end

-- ---- arbor.exec: the ready-made runnable --------------------------------

local runnable_options = {oneshot = true, ready = true, interval = true}
for k in pairs(exec_options) do runnable_options[k] = true end

-- Readiness: {kind, matcher}. Misuse raises (the node ends DEAD with it).
local function readiness(ctx, r)
  if r == nil or r == "spawn" then return {kind = "spawn"} end
  if r == "notify" or r == "systemd" then return {kind = r} end
  if type(r) == "table" and r.stdout ~= nil then
    local m = r.stdout
    if type(m) == "string" then
      local ok, err = pcall(string.find, "", m)
      if not ok then misuse(ctx, "arbor.exec", "ready.stdout: bad pattern: %s", err) end
      return {kind = "stdout", match = function(line) return line:find(m) ~= nil end}
    elseif type(m) == "function" then
      return {kind = "stdout", match = m}
    end
    misuse(ctx, "arbor.exec", "ready.stdout must be a Lua pattern or a function, got %s", type(m))
  end
  if type(r) == "table" and r.probe ~= nil then
    if type(r.probe) ~= "function" then
      misuse(ctx, "arbor.exec", "ready.probe must be a function, got %s", type(r.probe))
    end
    local interval = r.interval or 1
    if type(interval) ~= "number" or not (interval > 0) or interval == math.huge then
      misuse(ctx, "arbor.exec", "ready.interval must be a finite number > 0 (seconds), got %s",
        tostring(r.interval))
    end
    return {kind = "probe", probe = r.probe, interval = interval}
  end
  misuse(ctx, "arbor.exec",
    "unknown readiness mode %s (want \"spawn\", \"notify\", \"systemd\", {stdout = pattern or function} or {probe = fn, interval = s})",
    type(r) == "string" and ("'" .. r .. "'") or type(r))
end

-- Waits until proc is ready. Returns true, or false once it has exited.
local function wait_ready(ctx, proc, r)
  if r.kind == "spawn" then return true end
  if r.kind == "stdout" then proc:_watch(true) end
  while true do
    local ev, line = proc:_next(r.kind == "probe" and r.interval or nil)
    if ev == "exit" then return false end
    if ev == "ready" and (r.kind == "notify" or r.kind == "systemd") then
      return true
    elseif ev == "line" and r.kind == "stdout" then
      local ok, hit = pcall(r.match, line)
      if not ok then error(hit, 0) end
      if hit then
        proc:_watch(false)
        return true
      end
    elseif ev == nil and r.kind == "probe" then
      local ok, res = pcall(r.probe, ctx)
      if not ok then
        if core.is_canceled(res) then error(res, 0) end
        ctx:log("probe: " .. tostring(res))
      elseif res then
        return true
      end
    end
  end
end

--- arbor.exec(argv, opts) -> runnable. The runnable starts argv, becomes
-- HEALTHY per opts.ready, and treats any exit as a failure ("exited with
-- status 3", "killed by signal 9 (SIGKILL)"), except exit 0 with
-- opts.oneshot, which makes it DONE. Canceled, it stops the process group
-- (stop_signal, then SIGKILL after grace) and ends CANCELED once it is gone.
function M.runnable(argv, opts)
  if opts ~= nil and type(opts) ~= "table" then
    error("arbor.exec(argv, opts): opts must be a table, got " .. type(opts), 2)
  end
  opts = opts or {}
  local r, eopts -- from opts, checked at the first start (misuse names the node)
  return function(ctx)
    if not r then
      for k in pairs(opts) do
        if not runnable_options[k] then misuse(ctx, "arbor.exec", "unknown option '%s'", core.cut(k)) end
      end
      local ready = readiness(ctx, opts.ready)
      eopts = {}
      for k, v in pairs(opts) do
        if exec_options[k] then eopts[k] = v end
      end
      eopts.ready = (ready.kind == "notify" or ready.kind == "systemd") and ready.kind or nil
      r = ready
    end
    local proc, err = ctx:exec(argv, eopts)
    if not proc then error(err, 0) end
    local ok, ready = pcall(wait_ready, ctx, proc, r)
    if not ok then
      if proc:status() == nil then proc:stop() end
      error(ready, 0)
    end
    local code, _, how = proc:status()
    if ready or (opts.oneshot and code == 0) then
      ctx:signal("healthy")
      code, _, how = proc:wait()
    elseif code == nil then
      code, _, how = proc:wait()
    end
    if opts.oneshot and code == 0 then
      ctx:signal("done")
      return
    end
    error(string.format("%s %s%s", argv[1], how,
      ready and "" or " before it was ready"), 0)
  end
end

return M
