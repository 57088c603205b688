--- arbor.exec: operating-system processes (X1-X6).
--
-- `ctx:exec(argv, opts)` starts a program in its own process group and
-- returns a handle; `arbor.exec(argv, opts)` is a ready-made runnable that
-- supervises one program: readiness, exit classification, graceful stop.
-- The mechanism (spawn, pipes, the stop, the guard) is C (src/proc/); this
-- module checks options and holds the readiness logic.
local core = require "arbor.core"
local restore = require "arbor.restore"
local fail = require("arbor.failure").fail

local M = {}

-- ---- checking options ---------------------------------------------------
--
-- Every check adds to a list of problems instead of raising, so that one
-- error names every bad option at once; ctx:exec and arbor.exec raise it at
-- their caller's line. Nothing here does I/O but looking up user and group
-- names.

local ready_modes = {spawn = 0, notify = 1, systemd = 2}

local exec_options = {cwd = true, env = true, env_replace = true, uid = true,
  gid = true, umask = true, stdin = true, stop_signal = true, grace = true,
  ready = true, line_max = true, rlimits = true, parse = true, log_overflow = true}

-- arbor.exec's own, besides ctx:exec's
local runnable_only = {oneshot = true, watchdog = true, liveness = true,
  min_uptime = true, ready_timeout = true}

-- Options of ctx:run and ctx:group, which a user may put in the wrong table.
local run_options = {"policy", "shutdown", "lifecycle", "sidecar", "strategy",
  "ordered", "significant", "auto_shutdown"}

-- Edit distance between a and b (adjacent swaps count one), for the
-- did-you-mean of a misspelt name.
local function distance(a, b)
  local d = {}
  for i = 0, #a do d[i] = {[0] = i} end
  for j = 0, #b do d[0][j] = j end
  for i = 1, #a do
    for j = 1, #b do
      local cost = a:byte(i) == b:byte(j) and 0 or 1
      local v = math.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost)
      if i > 1 and j > 1 and a:byte(i) == b:byte(j - 1) and a:byte(i - 1) == b:byte(j) then
        v = math.min(v, d[i - 2][j - 2] + 1)
      end
      d[i][j] = v
    end
  end
  return d[#a][#b]
end

-- The closest of names (a list) to s within two edits (one for short
-- names), or nil.
local function closest(s, names)
  if type(s) ~= "string" then return nil end
  local best, bd
  for _, n in ipairs(names) do
    local dist = distance(s:lower(), n)
    if dist <= (#n <= 4 and 1 or 2) and (not bd or dist < bd) then best, bd = n, dist end
  end
  return best
end

local function sorted_keys(t)
  local out = {}
  for k in pairs(t) do out[#out + 1] = k end
  table.sort(out, function(a, b) return tostring(a) < tostring(b) end)
  return out
end

-- Adds "unknown option 'k'" for each key of opts not in allowed, with a
-- did-you-mean.
local function unknown_options(opts, allowed, problems)
  local keys = {}
  for k in pairs(opts) do
    if not allowed[k] then keys[#keys + 1] = k end
  end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  local names = sorted_keys(allowed)
  for _, k in ipairs(keys) do
    local msg = string.format("unknown option '%s'", core.cut(k))
    local near = closest(k, names)
    local run = closest(k, run_options)
    if k == run then
      msg = msg .. string.format(" ('%s' is an option of ctx:run, its third argument)", k)
    elseif near then
      msg = msg .. string.format(" (did you mean '%s'?)", near)
    elseif run then
      msg = msg .. string.format(" (did you mean '%s', an option of ctx:run?)", run)
    end
    problems[#problems + 1] = msg
  end
end

local function bad(problems, fmt, ...)
  problems[#problems + 1] = string.format(fmt, ...)
end

local function seconds(v, positive)
  return type(v) == "number" and v == v and v ~= math.huge
    and (v > 0 or (not positive and v == 0))
end

-- A signal number from a name ("TERM", "SIGTERM") or a number, or nil.
local signums = {} -- names already looked up
local function signum(v)
  if math.type(v) == "integer" and v > 0 and v < 65 then return v end
  local n = signums[v]
  if n then return n end
  n = type(v) == "string" and core.signum(v)
  if n then signums[v] = n end
  return n or nil
end

-- opts[key] (uid or gid) as a number: an integer >= 0 as it is, a name
-- through lookup (which may also give a second value: a user's group).
local function id_option(opts, key, what, lookup, problems)
  local v = opts[key]
  if v == nil or (math.type(v) == "integer" and v >= 0) then return v end
  if type(v) ~= "string" then
    bad(problems, "option '%s' must be a %s name or an integer >= 0, got %s",
      key, what, core.cut(v))
    return nil
  end
  local id, extra = lookup(v)
  if not id then bad(problems, "unknown %s '%s' (option '%s')", what, core.cut(v), key) end
  return id, extra
end

-- Checks env = {NAME = value or false}: a problem per bad entry.
local function check_env(env, problems)
  if type(env) ~= "table" then
    bad(problems, "option 'env' must be a table of NAME = value, got %s", type(env))
    return
  end
  for _, k in ipairs(sorted_keys(env)) do
    local v = env[k]
    if type(k) ~= "string" or k == "" or k:find("=", 1, true) then
      bad(problems, "option 'env': bad variable name %s", core.cut(k))
    elseif v ~= false and type(v) ~= "string" and type(v) ~= "number" then
      bad(problems, "option 'env': %s must be a string, a number or false, got %s", k, type(v))
    end
  end
end

-- rlimits = {nofile = 1024, core = 0, nproc = {soft, hard}, as = "unlimited"}
-- as "resource=soft:hard,..." for `arbor --exec-shim` (-1: unlimited).
local function limits(rl, problems)
  if type(rl) ~= "table" then
    bad(problems, "option 'rlimits' must be a table, got %s", type(rl))
    return nil
  end
  local function value(name, v)
    if v == "unlimited" or v == math.huge then return -1 end
    if math.type(v) ~= "integer" or v < 0 then
      bad(problems, "rlimits.%s: want an integer >= 0 or \"unlimited\", got %s",
        name, core.cut(v))
      return 0
    end
    return v
  end
  local items = {}
  for _, name in ipairs(sorted_keys(rl)) do
    local v = rl[name]
    local res = type(name) == "string" and core.rlimit(name)
    if not res then
      bad(problems, "unknown resource limit '%s' (as, core, cpu, data, fsize, "
        .. "locks, memlock, msgqueue, nice, nofile, nproc, rss, rtprio, rttime, "
        .. "sigpending, stack)", core.cut(name))
    else
      local soft, hard
      if type(v) == "table" then
        soft, hard = value(name, v[1]), value(name, v[2])
      else
        soft = value(name, v)
        hard = soft
      end
      items[#items + 1] = string.format("%d=%d:%d", res, soft, hard)
    end
  end
  table.sort(items)
  return #items > 0 and table.concat(items, ",") or nil
end

-- Checks argv: a problem when it is not a non-empty list of strings.
local function check_argv(argv, problems)
  if type(argv) == "string" then
    bad(problems, "argv must be a table of strings, got a string (write "
      .. "{\"sh\", \"-c\", %s} for a shell command line)", core.cut(string.format("%q", argv)))
  elseif type(argv) ~= "table" then
    bad(problems, "argv must be a table of strings, got %s", type(argv))
  elseif #argv == 0 then
    bad(problems, "argv is empty")
  else
    for i = 1, #argv do
      if type(argv[i]) ~= "string" then
        bad(problems, "argv[%d] must be a string, got %s", i, type(argv[i]))
      end
    end
    local keys = {}
    for k in pairs(argv) do
      if math.type(k) ~= "integer" or k < 1 or k > #argv then keys[#keys + 1] = core.cut(tostring(k)) end
    end
    table.sort(keys)
    for _, k in ipairs(keys) do
      bad(problems, "argv has the key '%s', which is not a position (options go in the "
        .. "second argument: arbor.exec({\"%s\", ...}, {%s = %s}))", k, core.cut(tostring(argv[1])),
        k, core.cut(tostring(argv[k])))
    end
  end
end

-- ctx:exec's options (ready as a string) checked into a spec for launch.
local function check_exec(opts, problems)
  local spec = {cwd = opts.cwd, env = opts.env, env_replace = opts.env_replace}
  if opts.cwd ~= nil and type(opts.cwd) ~= "string" then
    bad(problems, "option 'cwd' must be a string, got %s", type(opts.cwd))
  end
  if opts.env ~= nil then check_env(opts.env, problems) end
  local umask = opts.umask
  if type(umask) == "string" then umask = tonumber(umask, 8) end
  if umask ~= nil and not (math.type(umask) == "integer" and umask >= 0 and umask <= 511) then
    bad(problems, "option 'umask' must be an integer 0-0777 or an octal string, got %s",
      core.cut(opts.umask))
  end
  spec.umask = umask
  spec.stdin = opts.stdin or "null"
  if spec.stdin ~= "null" and spec.stdin ~= "inherit" then
    bad(problems, "option 'stdin' must be \"null\" or \"inherit\", got %s", core.cut(opts.stdin))
  end
  spec.grace = opts.grace or 10
  if not seconds(spec.grace) then
    bad(problems, "option 'grace' must be a finite number >= 0 (seconds), got %s",
      core.cut(opts.grace))
  end
  if opts.ready ~= nil and not ready_modes[opts.ready] then
    local near = closest(opts.ready, {"spawn", "notify", "systemd"})
    bad(problems, "option 'ready' must be \"spawn\", \"notify\" or \"systemd\", got %s%s",
      core.cut(opts.ready), near and string.format(" (did you mean \"%s\"?)", near) or "")
  end
  spec.ready = ready_modes[opts.ready or "spawn"]
  -- how output lines get their levels (docs/processes.md): the node's
  if opts.parse ~= nil and opts.parse ~= "klog" and type(opts.parse) ~= "function" then
    bad(problems, "option 'parse' must be \"klog\" or a function(line) -> level, text, got %s",
      core.cut(opts.parse))
  end
  spec.parse = opts.parse
  -- a full log file (--log-dir): the output waits (its pipes are not read)
  -- or is dropped and counted (docs/processes.md)
  if opts.log_overflow ~= nil and opts.log_overflow ~= "block" and opts.log_overflow ~= "drop" then
    bad(problems, "option 'log_overflow' must be \"block\" or \"drop\", got %s", core.cut(opts.log_overflow))
  end
  spec.log_overflow = opts.log_overflow or "block"
  spec.line_max = opts.line_max or 4096
  if math.type(spec.line_max) ~= "integer" or spec.line_max < 16 then
    bad(problems, "option 'line_max' must be an integer >= 16, got %s", core.cut(opts.line_max))
  end
  spec.stop_signal = signum(opts.stop_signal or "TERM")
  if not spec.stop_signal then
    bad(problems, "option 'stop_signal': unknown signal %s (want a name such as "
      .. "\"TERM\", \"SIGINT\", \"HUP\", or a number 1-64)", core.cut(opts.stop_signal))
  end
  local user_gid
  spec.uid, user_gid = id_option(opts, "uid", "user", core.user, problems)
  spec.gid = id_option(opts, "gid", "group", core.group, problems)
  if spec.gid == nil then spec.gid = user_gid end
  if opts.rlimits ~= nil then spec.rlimits = limits(opts.rlimits, problems) end
  return spec
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

-- The child's environment as a list of "K=V" (env checked by check_env),
-- or nil for arbor's own; and the PATH it gives.
local function environment(spec)
  if spec.env == nil and not spec.env_replace then return nil end
  local vars, order = {}, {}
  if not spec.env_replace then
    for _, kv in ipairs(core.environ()) do
      local k = kv:match("^([^=]*)=")
      if k and not vars[k] then order[#order + 1] = k end
      if k then vars[k] = kv end
    end
  end
  for k, v in pairs(spec.env or {}) do
    if v == false then
      vars[k] = nil
    else
      if not vars[k] then order[#order + 1] = k end
      vars[k] = k .. "=" .. tostring(v)
    end
  end
  local list = {}
  for _, k in ipairs(order) do
    if vars[k] then list[#list + 1] = vars[k] end
  end
  return list, vars.PATH and vars.PATH:sub(6)
end

-- Starts argv per a checked spec (check_exec): proc | nil, "ENAME:
-- message", "ENAME" for what only the start finds out.
-- `arbor check`: what launch would run, checked and not started: the
-- working directory and the program (found in PATH, executable). Returns
-- true or nil, "ENAME: message", "ENAME".
local function check_launch(argv, spec)
  local _, env_path = environment(spec)
  if spec.cwd then
    local ok, err, code = core.access(spec.cwd, "dir", "cwd " .. spec.cwd)
    if not ok then return nil, err, code end
  end
  local file, err, code = resolve(argv[1], spec.cwd, env_path or os.getenv("PATH"), true)
  if not file then return nil, err, code end
  return true
end

-- The options of an arbor.exec runnable, checked when arbor.exec was
-- called: its runnable starts its program through ctx:exec (a table
-- standing for the ctx sees it), which does not check them again.
local Checked = {}

local function launch(ctx, argv, spec)
  local env, env_path = environment(spec)
  local rl = spec.rlimits
  if spec.cwd then
    local ok, err, code = core.access(spec.cwd, "dir", "cwd " .. spec.cwd)
    if not ok then return nil, err, code end
  end
  local prog, path = argv[1], env_path or os.getenv("PATH")
  -- through the rlimits shim, only a check beforehand names the program
  local file, err, code = resolve(prog, spec.cwd, path, rl ~= nil)
  if not file then return nil, err, code end
  if rl then -- applied by arbor itself between fork and exec: one more exec
    local shim = core.shim_path()
    local shim_argv = {shim, "--exec-shim", rl, file}
    for i = 1, #argv do shim_argv[#shim_argv + 1] = argv[i] end
    file, argv = shim, shim_argv
  end
  core.log_parse(ctx, spec.parse)
  core.log_overflow(ctx, spec.log_overflow)
  local proc, serr, scode = core.spawn(ctx, file, argv, env, spec.cwd, spec.uid,
    spec.gid, spec.umask, spec.stdin == "inherit", spec.ready, spec.stop_signal,
    spec.grace, spec.line_max, spec.watchdog)
  if not proc then -- in the words of the path check when it objects
    local _, why, wcode = resolve(prog, spec.cwd, path, true)
    if why then return nil, why, wcode end
    return nil, serr, scode
  end
  return proc
end

--- ctx:exec(argv, opts) -> proc | nil, "ENAME: message", "ENAME". Starts
-- argv[1] (searched in PATH unless it has a slash) with argv as its
-- arguments, in its own process group. Misuse (bad argv or options) raises
-- at the caller's line, naming every bad option; a program that cannot be
-- started returns the failure naming it ("ENOENT: no such file or
-- directory: /usr/bin/nope", EACCES, ENOEXEC, ...).
-- The process is stopped when the incarnation ends (after ctx:defer's).
function M.exec(ctx, argv, opts)
  if getmetatable(opts) == Checked then return launch(ctx, argv, opts) end
  local problems = {}
  check_argv(argv, problems)
  local spec
  if opts ~= nil and type(opts) ~= "table" then
    bad(problems, "options must be a table, got %s", type(opts))
  else
    opts = opts or {}
    unknown_options(opts, exec_options, problems)
    spec = check_exec(opts, problems)
  end
  if #problems > 0 then
    error(string.format("%s: ctx:exec: %s", ctx.dn, table.concat(problems, "; ")), 2)
  end
  return launch(ctx, argv, spec)
end

-- ---- arbor.exec: the ready-made runnable --------------------------------

local runnable_options = {}
for k in pairs(exec_options) do runnable_options[k] = true end
for k in pairs(runnable_only) do runnable_options[k] = true end

-- ---- the engine's timing options (issue 15) -----------------------------
-- min_uptime and ready_timeout are the engine's (node options of ctx:run,
-- src/engine/deadline.c); a process brings its defaults, which the node's
-- own options override, and its EXTEND_TIMEOUT_USEC.

-- The node's own ctx: the runnable may be given a table standing for it.
local function own(ctx) return type(ctx) == "userdata" and ctx or core.self() end

-- At each start: the process's defaults for the node's timing options.
local function engine_defaults(ctx, min_uptime, ready_timeout)
  ctx = own(ctx)
  if not ctx then return end
  core.default_min_uptime(ctx, min_uptime)
  core.default_ready_timeout(ctx, ready_timeout)
end

-- EXTEND_TIMEOUT_USEC during the start: not failed as not ready before
-- `seconds` from now (systemd's rule: only ever later).
local function engine_extend_start(ctx, seconds)
  ctx = own(ctx)
  if ctx then core.extend_ready(ctx, seconds) end
end

-- -------------------------------------------------------------------------

-- "2", "0.5": seconds as people write them.
local function secs(v) return string.format("%g", v) end

-- A probe from its description (checked into problems, as `what`): a
-- function(ctx, timeout) -> true | false, "why". An argv table runs a
-- command (success: exit 0), {tcp = "host:port"} connects, {http = url}
-- GETs (2xx, 3xx), a Lua function(ctx) succeeds when it returns true.
local function make_probe(p, what, problems)
  if type(p) == "function" then
    return function(ctx)
      local ok, res, why = pcall(p, ctx)
      if not ok then
        if core.is_canceled(res) then error(res, 0) end
        return false, tostring(res)
      end
      if res then return true end
      return false, why and tostring(why) or ("returned " .. tostring(res))
    end
  end
  if type(p) ~= "table" then
    bad(problems, "%s must be a command (argv table), {tcp = \"host:port\"}, "
      .. "{http = url} or a function, got %s", what, type(p))
    return nil
  end
  local probe = require "arbor.probe"
  if p.tcp ~= nil then
    local host, port
    if type(p.tcp) == "string" then host, port = p.tcp:match("^%[?([^%]]*)%]?:(%d+)$") end
    port = tonumber(port)
    if not host or host == "" or not port or port < 1 or port > 65535 then
      bad(problems, "%s.tcp must be \"host:port\", got %s", what, core.cut(p.tcp))
      return nil
    end
    return function(ctx, timeout) return probe.tcp(host, port, timeout)(ctx) end
  end
  if p.http ~= nil then
    local ok, err = probe.parse_url(p.http)
    if not ok then
      bad(problems, "%s.http: %s", what, err)
      return nil
    end
    return function(ctx, timeout) return probe.http(p.http, timeout)(ctx) end
  end
  local argv_problems = {}
  check_argv(p, argv_problems)
  if #argv_problems > 0 then
    bad(problems, "%s: a command probe's %s", what, argv_problems[1])
    return nil
  end
  return function(ctx, timeout)
    local proc <close>, err = ctx:exec(p)
    if not proc then return false, err end
    local deadline = require("arbor").now() + timeout
    while true do
      local left = deadline - require("arbor").now()
      local ev = proc:_next(math.max(left, 0))
      if ev == "exit" then break end
      if ev == nil and left <= 0 then
        proc:kill("KILL", "group")
        proc:wait()
        return false, string.format("%s timed out after %s s", p[1], secs(timeout))
      end
    end
    local code, _, how = proc:status()
    if code == 0 then return true end
    return false, p[1] .. " " .. how
  end
end

-- Readiness: {kind, matcher}, checked into problems.
local function readiness(r, problems)
  if r == nil or r == "spawn" then return {kind = "spawn"} end
  if r == "notify" or r == "systemd" then return {kind = r} end
  if type(r) == "table" and r.stdout ~= nil then
    unknown_options(r, {stdout = true}, problems)
    local m = r.stdout
    if type(m) == "string" then
      local ok, err = pcall(string.find, "", m)
      if not ok then bad(problems, "ready.stdout: bad pattern: %s", err) end
      return {kind = "stdout", match = function(line) return line:find(m) ~= nil end}
    elseif type(m) == "function" then
      return {kind = "stdout", match = m}
    end
    bad(problems, "ready.stdout must be a Lua pattern or a function, got %s", type(m))
    return {kind = "spawn"}
  end
  if type(r) == "table" and r.probe ~= nil then
    unknown_options(r, {probe = true, interval = true, timeout = true}, problems)
    local probe = make_probe(r.probe, "ready.probe", problems)
    local interval = r.interval or 1
    if not seconds(interval, true) then
      bad(problems, "ready.interval must be a finite number > 0 (seconds), got %s",
        core.cut(r.interval))
    end
    local timeout = r.timeout or 1
    if not seconds(timeout, true) then
      bad(problems, "ready.timeout must be a finite number > 0 (seconds), got %s",
        core.cut(r.timeout))
    end
    return {kind = "probe", probe = probe, interval = interval, timeout = timeout}
  end
  local near = closest(r, {"spawn", "notify", "systemd"})
  bad(problems, "unknown readiness mode %s%s (want \"spawn\", \"notify\", \"systemd\", "
    .. "{stdout = pattern or function} or {probe = ..., interval = s})",
    type(r) == "string" and ("'" .. core.cut(r) .. "'") or type(r),
    near and string.format(" (did you mean \"%s\"?)", near) or "")
  return {kind = "spawn"}
end

-- liveness = {probe = ..., every = S, failures = N, timeout = T}, checked.
local function liveness(l, problems)
  if type(l) ~= "table" then
    bad(problems, "option 'liveness' must be a table {probe = ..., every = s, "
      .. "failures = n, timeout = s}, got %s", type(l))
    return nil
  end
  unknown_options(l, {probe = true, every = true, failures = true, timeout = true}, problems)
  local live = {every = l.every or 10, failures = l.failures or 3, timeout = l.timeout or 1}
  if l.probe == nil then
    bad(problems, "liveness.probe is missing")
  else
    live.probe = make_probe(l.probe, "liveness.probe", problems)
  end
  if not seconds(live.every, true) then
    bad(problems, "liveness.every must be a finite number > 0 (seconds), got %s", core.cut(l.every))
  end
  if math.type(live.failures) ~= "integer" or live.failures < 1 then
    bad(problems, "liveness.failures must be an integer >= 1, got %s", core.cut(l.failures))
  end
  if not seconds(live.timeout, true) then
    bad(problems, "liveness.timeout must be a finite number > 0 (seconds), got %s",
      core.cut(l.timeout))
  end
  return live
end

-- Waits until proc is ready. Returns true, or false once it has exited;
-- raises "watchdog triggered" on WATCHDOG=trigger.
local function wait_ready(ctx, proc, r)
  if r.kind == "spawn" then return true end
  if r.kind == "stdout" then proc:_watch(true) end
  local now = require("arbor").now
  local next_probe = r.kind == "probe" and now() + r.interval
  while true do
    local ev, arg = proc:_next(next_probe and math.max(next_probe - now(), 0) or nil)
    if ev == "exit" then return false end
    if ev == "ready" and (r.kind == "notify" or r.kind == "systemd") then
      return true
    elseif ev == "trigger" then
      error("watchdog triggered", 0)
    elseif ev == "extend" then
      engine_extend_start(ctx, arg)
    elseif ev == "line" and r.kind == "stdout" then
      local ok, hit = pcall(r.match, arg)
      if not ok then error(hit, 0) end
      if hit then
        proc:_watch(false)
        return true
      end
    elseif ev == nil and next_probe and now() >= next_probe then
      local ok, why = r.probe(ctx, r.timeout)
      if ok then return true end
      ctx:log("probe: " .. tostring(why))
      next_probe = now() + r.interval
    end
  end
end

-- Watches a ready process: its watchdog (WATCHDOG=1 every spec.watchdog
-- seconds) and its liveness probe. Returns nil once it exited, or why it
-- must be stopped.
local function supervise(ctx, proc, spec)
  local now = require("arbor").now
  local wd, live = spec.watchdog, spec.liveness
  local wd_deadline = wd and now() + wd
  local next_probe = live and now() + live.every
  local failed = 0
  while true do
    local t = math.huge
    if wd_deadline then t = wd_deadline - now() end
    if next_probe then t = math.min(t, next_probe - now()) end
    local ev = proc:_next(math.max(t, 0))
    if ev == "exit" then return nil end
    if ev == "trigger" then return "watchdog triggered" end
    if ev == "watchdog" and wd then wd_deadline = now() + wd end
    if wd_deadline and now() >= wd_deadline then
      return "watchdog timeout after " .. secs(wd) .. " s"
    end
    if next_probe and now() >= next_probe then
      local ok, why = live.probe(ctx, live.timeout)
      if proc:status() ~= nil then return nil end -- it ended meanwhile
      if ok then
        failed = 0
      else
        failed = failed + 1
        ctx:log(string.format("liveness probe failed (%d of %d): %s", failed,
          live.failures, tostring(why)))
        if failed >= live.failures then
          return string.format("liveness probe failed %d times: %s", failed, tostring(why))
        end
      end
      next_probe = now() + live.every
    end
  end
end

-- Stops proc for `why` and raises it, saying how the stop ended when it
-- had to kill ("watchdog timeout after 5 s (killed after grace 2 s)").
local function fail_with(proc, why)
  local _, sig, how = proc:stop()
  if sig == "SIGKILL" then why = why .. " (" .. how .. ")" end
  error(why, 0)
end

-- After a reexec (arbor.restore): the process the arbor before ran for
-- ctx's node, taken over when the node's definition is the same: proc,
-- nil, its record. A changed node's old process is stopped first (the new
-- one may want its port): waited for, up to its grace.
local function restored(ctx, spec)
  if not restore.pending() then return nil end
  local e = core.current()
  local rec, old = restore.take(ctx, e)
  if rec then
    core.log_overflow(ctx, spec.log_overflow)
    local proc, err = core.adopt(ctx, rec, spec.stop_signal, spec.grace, spec.line_max)
    if proc then
      e:restored(ctx.dn, string.format("process %d taken over after a reexec", rec.pid))
      return proc, nil, rec
    end
    ctx:log("reexec: not taken over: " .. tostring(err))
    restore.stop(e, rec, tostring(err))
    old = rec
  end
  local grace = old and type(old.grace) == "number" and old.grace or restore.STOP_GRACE
  for _ = 1, (grace + 1) * 20 do
    if not old or old.gone then break end
    ctx:sleep(0.05)
  end
  return nil
end

--- arbor.exec(argv, opts) -> runnable. Every option is checked here, at
-- the caller's line, naming every bad one at once. The runnable starts
-- argv, becomes HEALTHY per opts.ready, and treats any exit as a failure
-- ("exited with status 3", "killed by signal 9 (SIGKILL)"), except exit 0
-- with opts.oneshot, which makes it DONE. A watchdog or a liveness probe
-- that fails stops the process and fails the node with why. Canceled, it
-- stops the process group (stop_signal, then SIGKILL after grace) and ends
-- CANCELED once it is gone.
function M.runnable(argv, opts)
  local problems = {}
  check_argv(argv, problems)
  if opts ~= nil and type(opts) ~= "table" then
    bad(problems, "opts must be a table, got %s", type(opts))
    opts = {}
  end
  opts = opts or {}
  unknown_options(opts, runnable_options, problems)
  local eopts = {}
  for k, v in pairs(opts) do
    if exec_options[k] and k ~= "ready" then eopts[k] = v end
  end
  local r = readiness(opts.ready, problems)
  local spec = setmetatable(check_exec(eopts, problems), Checked)
  spec.ready = ready_modes[r.kind] or 0
  if opts.watchdog ~= nil and not seconds(opts.watchdog, true) then
    bad(problems, "option 'watchdog' must be a finite number > 0 (seconds), got %s",
      core.cut(opts.watchdog))
  end
  spec.watchdog = opts.watchdog
  if opts.liveness ~= nil then spec.liveness = liveness(opts.liveness, problems) end
  local min_uptime = opts.min_uptime
  if min_uptime == nil then min_uptime = 1 end
  if not seconds(min_uptime) then
    bad(problems, "option 'min_uptime' must be a finite number >= 0 (seconds), got %s",
      core.cut(opts.min_uptime))
  end
  local ready_timeout = opts.ready_timeout
  if ready_timeout == nil then ready_timeout = r.kind ~= "spawn" and 90 or false end
  if ready_timeout ~= false and not seconds(ready_timeout, true) then
    bad(problems, "option 'ready_timeout' must be a finite number > 0 (seconds) "
      .. "or false, got %s", core.cut(opts.ready_timeout))
  end
  if #problems > 0 then error("arbor.exec: " .. table.concat(problems, "; "), 2) end
  local name = argv[1]
  local function run(ctx)
    engine_defaults(ctx, min_uptime, ready_timeout)
    if core.checking() then -- `arbor check`: checked, not run
      local ok, err = check_launch(argv, spec)
      if not ok then error(err, 0) end
      ctx:signal("healthy")
      return ctx:wait()
    end
    local proc, err, adopted = restored(ctx, spec)
    if not proc then proc, err = ctx:exec(argv, spec) end
    if not proc then error(err, 0) end
    local ok, ready
    if adopted and adopted.healthy_for then -- it was ready before the reexec
      ok, ready = true, true
    else
      ok, ready = pcall(wait_ready, ctx, proc, r)
    end
    if not ok then
      if proc:status() == nil then
        if core.is_canceled(ready) then proc:stop() else fail_with(proc, ready) end
      end
      error(ready, 0)
    end
    local code, _, how = proc:status()
    if ready or (opts.oneshot and code == 0) then
      ctx:signal("healthy")
      if adopted and adopted.healthy_for then -- its uptime goes on
        core.current():set_healthy_for(ctx.dn, adopted.healthy_for)
      end
      if ready and (spec.watchdog or spec.liveness) then
        local why = supervise(ctx, proc, spec)
        if why then fail_with(proc, why) end
      end
      code, _, how = proc:wait()
    elseif code == nil then
      code, _, how = proc:wait()
    end
    if opts.oneshot and code == 0 then
      ctx:signal("done")
      return
    end
    error(string.format("%s %s%s", name, how, ready and "" or " before it was ready"), 0)
  end
  restore.mark_exec(run, argv, opts) -- its process can cross a reexec
  return run
end

return M
