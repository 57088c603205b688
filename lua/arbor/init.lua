--- arbor: a supervision engine. The public module.
--
-- `arbor.run(root)` builds a tree on the real clock; `require "arbor.testing"`
-- builds one on a virtual clock. Runnables get a ctx (see docs/lua-api.md).
local core = require "arbor.core"
local policy = require "arbor.policy"
local channel = require "arbor.channel"
local term = require "arbor.term"
local render = require "arbor.render"
local node = require "arbor.node"
local arbor_cli = require "arbor.cli"
local metrics = require "arbor.metrics"
local explain = require("arbor.explain").explain
local message = require("arbor.failure").message
local reload = require "arbor.reload"
local restore = require "arbor.restore"
require "arbor.ctx" -- the ctx methods written in Lua

local M = {}

M.exec = require("arbor.exec").runnable
M.probe = require "arbor.probe"
M.version = core.version
M.policy = policy
M.channel = channel
--- The error value blocking calls raise once their context is canceled.
M.canceled = core.canceled
M.is_canceled = core.is_canceled

local running_engine -- the engine of the arbor.run in progress
-- Subscriptions made by arbor.on_event outside any tree: the next arbor.run
-- subscribes them to its tree before the root starts.
local pending = {}

-- os.exit while the engine runs user code (a runnable, a policy, a
-- subscriber, a defer, an evaluation) would end arbor at once, with no
-- ordered stop and its processes left to the guard: it raises there
-- instead (docs/semantics.md T12), so the node fails like for any error.
local exit = os.exit
function os.exit(...)
  if core.current() or running_engine then
    local ctx = core.self()
    error((ctx and ctx.dn .. ": " or "") .. "os.exit is refused inside the "
      .. "tree: it would end arbor at once, without stopping the tree in "
      .. "order; call arbor.stop() (arbor.run then returns, and the script "
      .. "may exit)", 2)
  end
  return exit(...)
end

-- coroutine.resume and coroutine.wrap resume through the watchdog, so a
-- runnable or a policy looping inside a coroutine it resumed is stopped as
-- one looping in its own code is (T7). Lua's own otherwise.
coroutine.resume, coroutine.wrap = core.resume, core.wrap

--- The engine that calling code belongs to: the one resuming it now, else
-- the one arbor.run is running.
local function engine(level)
  local e = core.current() or running_engine
  if not e then
    error("arbor: no tree is running here (call arbor.run, or use "
      .. "arbor.testing)", (level or 2) + 1)
  end
  return e
end

-- ---- the module API ------------------------------------------------------

local run_options = {policy = true, default_policy = true, shutdown = true,
  seed = true, ring = true, ring_bytes = true, outbox = true, signals = true,
  log = true, on_event = true, quiet = true, runaway = true, control = true,
  auto_shutdown = true, stop = true, http = true, max_series = true,
  log_dir = true, log_max_bytes = true, log_keep = true, log_format = true,
  log_flush = true, log_mode = true}

-- The log options of arbor.run (or `arbor run`'s command line): checked,
-- with their defaults (docs/observability.md, "Logs").
local function log_options(opts, cli)
  local o = {}
  for _, k in ipairs{"log_dir", "log_max_bytes", "log_keep", "log_format", "log_flush", "log_mode"} do
    o[k] = opts[k]
    if o[k] == nil and cli then o[k] = cli[k] end
  end
  if o.log_dir ~= nil and o.log_dir ~= false and (type(o.log_dir) ~= "string" or o.log_dir == "") then
    error("arbor.run: option 'log_dir' must be a directory path or false, got " .. tostring(o.log_dir), 3)
  end
  local function count(k, min, default)
    local v = o[k]
    if v == nil then o[k] = default return end
    if math.type(v) ~= "integer" or v < min then
      error(string.format("arbor.run: option '%s' must be an integer >= %d, got %s", k, min, tostring(v)), 4)
    end
  end
  count("log_max_bytes", 1024, 10 * 1024 * 1024)
  count("log_keep", 0, 5)
  if o.log_keep > 1000 then
    error("arbor.run: option 'log_keep' must be an integer in 0-1000, got " .. tostring(o.log_keep), 3)
  end
  -- the files' mode: an integer or an octal string ("0640")
  local mode = o.log_mode
  if type(mode) == "string" and mode:match("^[0-7]+$") then mode = tonumber(mode, 8) end
  if mode == nil then
    o.log_mode = 6 * 64 + 4 * 8 -- 0640
  elseif math.type(mode) ~= "integer" or mode < 0 or mode > 511 then
    error("arbor.run: option 'log_mode' must be a file mode in 0-0777, as an octal string (\"0640\") "
      .. "or an integer, got " .. tostring(o.log_mode), 3)
  else
    o.log_mode = mode
  end
  if o.log_flush == nil then o.log_flush = 1 end
  if type(o.log_flush) ~= "number" or not (o.log_flush > 0 and o.log_flush <= 3600) then
    error("arbor.run: option 'log_flush' must be seconds in (0, 3600], got " .. tostring(o.log_flush), 3)
  end
  o.log_format = o.log_format or "text"
  if o.log_format ~= "text" and o.log_format ~= "json" then
    error("arbor.run: option 'log_format' must be \"text\" or \"json\", got " .. tostring(o.log_format), 3)
  end
  return o
end

--- arbor.run(root [, opts]): runs a tree whose root runs `root` until the
-- tree is stopped (arbor.stop(), SIGINT, SIGTERM) or the root's policy gives
-- up (T11). Returns true, or false and the reason.
-- opts: policy (the root's), default_policy (of the nodes given none,
-- default arbor.policy.exponential()), shutdown, seed, ring (event ring
-- size), ring_bytes (bytes of
-- reasons the ring may hold), outbox (events one step may emit before
-- subscribers miss some, T14), signals (default true), log (function(dn,
-- line, time, level, wall)), on_event (function(ev)), quiet, runaway (seconds a runnable
-- may run without yielding, default 10), control (the control socket's
-- path, false for none; under `arbor run` the default is
-- docs/control-protocol.md's, elsewhere none), log_dir (write each DN's
-- lines to <log_dir>/<dn>.log), log_max_bytes (rotate past this size,
-- default 10 MiB), log_keep (rotated files kept, default 5), log_mode (the
-- files' mode, default "0640"), log_flush
-- (seconds between writes, default 1), log_format ("text" or "json": how
-- logs and events are printed on stderr); docs/observability.md, "Logs".
function M.run(root, opts)
  if type(root) ~= "function" then
    error("arbor.run(root): the root runnable must be a function, got "
      .. type(root), 2)
  end
  if opts ~= nil and type(opts) ~= "table" then
    error("arbor.run(root, opts): opts must be a table, got " .. type(opts), 2)
  end
  opts = opts or {}
  node.check_root("arbor.run", opts)
  for k in pairs(opts) do
    if not run_options[k] then
      error("arbor.run: unknown option '" .. core.cut(k) .. "'", 2)
    end
  end
  for _, k in ipairs{"policy", "default_policy"} do
    if opts[k] ~= nil and type(opts[k]) ~= "function" then
      error("arbor.run: option '" .. k .. "' must be a function, got " .. type(opts[k]), 2)
    end
  end
  if opts.control ~= nil and opts.control ~= false and type(opts.control) ~= "string" then
    error("arbor.run: option 'control' must be a path or false, got " .. type(opts.control), 2)
  end
  if reload.capturing() then return reload.captured(root, opts) end -- a reload
  if core.current() or running_engine then
    error("arbor.run: a tree is already running in this process", 2)
  end
  local http_addr = opts.http
  if http_addr == nil and arbor_cli.options then http_addr = arbor_cli.options.http end
  if http_addr ~= nil and http_addr ~= false and type(http_addr) ~= "string" then
    error("arbor.run: option 'http' must be ADDR:PORT or false, got " .. type(http_addr), 2)
  end
  if opts.max_series ~= nil and (math.type(opts.max_series) ~= "integer" or opts.max_series < 1) then
    error("arbor.run: option 'max_series' must be an integer >= 1, got " .. tostring(opts.max_series), 2)
  end
  local logopts = log_options(opts, arbor_cli.options)
  if arbor_cli.options and arbor_cli.options.check then -- `arbor check`
    return arbor_cli.check(root, opts)
  end
  local e = core.engine{virtual = false, seed = opts.seed or os.time(),
    ring = opts.ring, ring_bytes = opts.ring_bytes, outbox = opts.outbox,
    signals = opts.signals ~= false, runaway = opts.runaway}
  local restoring -- after `arbor ctl reexec`: the state of the arbor before
  if arbor_cli.options and arbor_cli.options.restore_fd then
    local err
    restoring, err = restore.load(arbor_cli.options.restore_fd)
    arbor_cli.options.restore_fd = nil
    if not restoring then -- its processes go with this arbor (the guard)
      e:close()
      error(setmetatable({}, {__tostring = function() return "arbor: reexec: " .. err end}))
    end
    restore.start(e, restoring)
  end
  local default_policy = opts.default_policy or policy.exponential()
  e:set_default_policy(default_policy)
  metrics.configure(e, {max_series = opts.max_series})
  local cli = arbor_cli.options -- under `arbor run`
  local quiet = opts.quiet or (cli and cli.quiet) or not cli
  local show = term.filter(2)
  local wall0 = core.wall0(e)
  local as_json = logopts.log_format == "json"
  local sink = opts.log or (not quiet and (as_json and function(dn, line, _, level, wall)
    arbor_cli.print_line(render.json_log(dn, line, level, wall))
  end or function(dn, line, time, level, wall)
    arbor_cli.print_line(show(render.log(dn, line, time, level, wall)))
  end)) or nil
  if logopts.log_dir then
    local ok, err = core.log_files(e, {dir = logopts.log_dir, max_bytes = logopts.log_max_bytes,
      keep = logopts.log_keep, interval = logopts.log_flush, mode = logopts.log_mode})
    if not ok then
      e:close()
      if cli then error(setmetatable({}, {__tostring = function() return "arbor: --log-dir: " .. err end})) end
      error("arbor.run: option 'log_dir': " .. err, 2)
    end
  end
  local control_path = opts.control
  if control_path == nil and cli then control_path = cli.control end
  local server
  if control_path then
    local err, code
    server, err, code = require("arbor.control").serve(e, control_path,
      {arbor = M, script = cli and cli.script})
    -- the default socket may be missing (a warning), unless another arbor
    -- serves it
    if not server and cli and cli.default and control_path == cli.control
        and code ~= "EADDRINUSE" then
      io.stderr:write("arbor: warning: no control socket: ", message(err, code), "\n")
    elseif not server then
      e:close()
      -- the arbor binary prints an error object as one line, no traceback
      if cli then
        error(setmetatable({}, {__tostring = function() return message(err, code) end}))
      end
      error("arbor.run: control socket: " .. err, 2)
    end
  end
  if server then
    local base = sink
    sink = function(dn, line, time, level, wall)
      if base then base(dn, line, time, level, wall) end
      server.on_log(dn, line, time, level, wall)
    end
  end
  local web
  if http_addr then
    local err
    web, err = require("arbor.http").serve(e, http_addr, {max_series = opts.max_series})
    if not web then
      if server then server.close() end
      e:close()
      if arbor_cli.options then
        error(setmetatable({}, {__tostring = function() return "arbor: " .. err end}))
      end
      error("arbor.run: " .. err, 2)
    end
    if not quiet then
      arbor_cli.print_line(string.format("arbor: serving http://%s:%d (/metrics /healthz /readyz /tree)",
        web.host, web.port))
    end
  end
  if sink then e:set_log(sink) end
  if not quiet then
    e:subscribe(as_json and function(ev) arbor_cli.print_line(render.json_event(ev, wall0)) end
      or function(ev) arbor_cli.print_line(show(render.event(ev, wall0))) end)
  end
  if opts.on_event then e:subscribe(opts.on_event) end
  for _, sub in ipairs(pending) do sub.attach(e) end
  pending = {}
  running_engine = e
  reload.started(e, root, opts, cli and cli.script, cli and rawget(_G, "arg"))
  if cli and cli.init then -- tini's contract: SIGHUP is the services'
    e:on_hangup(function()
      return "forwarded to the services' process groups (--init); "
        .. "`arbor ctl reload` reads the script again"
    end)
  elseif cli and cli.script then
    e:on_hangup(reload.on_hangup)
  end
  -- READY=1, STATUS=, WATCHDOG=1, STOPPING=1 to $NOTIFY_SOCKET (docs/deploy.md)
  local notifier = core.notifier(e)
  local ok, result, reason = pcall(function()
    -- under `arbor run`, a failed first start exits 2 (arbor.cli)
    e:start(root, arbor_cli.root_policy(opts.policy, default_policy),
      opts.shutdown, opts.auto_shutdown, opts.stop)
    if restoring then restore.root(e) end
    local done, why = e:run()
    restore.finish(e) -- a reexec's leftovers: what no node took over
    return done, why
  end)
  running_engine = nil
  reload.stopped()
  if notifier then
    notifier:close(not ok and tostring(result) or result and "the tree stopped"
      or reason)
  end
  if server then server.close() end
  if web then web.close() end
  e:close()
  if not ok then error(result, 0) end
  arbor_cli.ran(result, reason)
  return result, reason
end

--- arbor.notify(text): sends text (KEY=VALUE lines, sd_notify(3)) to the
-- service manager that started arbor ($NOTIFY_SOCKET): true when sent, false
-- when there is none, nil, "ENAME: message", "ENAME" when sending failed.
M.notify = core.sd_notify

--- arbor.metrics([opts]) -> the running tree's metrics as a table of
-- families (docs/observability.md); opts: max_series.
function M.metrics(opts) return metrics.table(engine(), opts) end

--- arbor.metrics_text([opts]) -> the same in Prometheus' text format
-- (opts.openmetrics: OpenMetrics').
function M.metrics_text(opts) return metrics.text(engine(), opts) end

M.counter = metrics.counter
M.gauge = metrics.gauge

--- Stops the running tree in order (T12); arbor.run then returns.
function M.stop() engine():stop() end

--- Seconds on the engine's clock (virtual under the harness).
function M.now()
  local e = core.current() or running_engine
  if e then return e:now() end
  return core.hrtime() / 1e9
end

--- A nested snapshot of the tree (or of the subtree at dn).
function M.tree(dn) return engine():tree(dn) end

--- A live view of the node at dn (T13a), or nil, "ENOENT: no node <dn>",
-- "ENOENT".
function M.node(dn) return node.view(engine(), dn) end

--- One sentence saying why the node at dn is (or is not) running now, and
-- a code for programs ("running", "backoff", "blocked", "waiting_member",
-- "waiting_descendant", "given_up", "held", "done", "auto_shutdown",
-- "stopping", "canceled", "not_started"); arbor.node(dn).why and
-- .explanation carry the same. nil, "ENOENT: no node <dn>", "ENOENT" for
-- an unknown dn.
function M.explain(dn)
  if type(dn) ~= "string" then
    error("arbor.explain(dn): dn must be a string, got " .. type(dn), 2)
  end
  return explain(engine(), dn)
end

--- The last n events (all held when n is nil), oldest first (T14).
function M.events(n) return engine():events(n) end

--- Calls fn(event) for every event from now on: of the tree of the calling
-- runnable, or of the tree arbor.run is running; called outside any tree,
-- of the tree the next arbor.run starts, from its first event. Returns a
-- function that unsubscribes (as h:on_event does). A subscriber that raises
-- is removed and logged.
function M.on_event(fn)
  if type(fn) ~= "function" then
    error("arbor.on_event(fn): want a function, got " .. type(fn), 2)
  end
  -- a script read again for a reload subscribed when it first ran
  if reload.capturing() and not core.current() then return function() end end
  local sub = node.subscription(fn)
  local e = core.current() or running_engine
  if e then
    sub.attach(e)
  else
    pending[#pending + 1] = sub
  end
  return sub.unsubscribe
end

--- Nodes past their shutdown deadline that have not exited (T7).
function M.stuck() return engine():stuck() end

--- The node's last log lines.
function M.logs(dn, n) return engine():logs(dn, n) end

--- A number in [0, 1) from the engine's seeded generator (P5).
function M.random() return engine():random() end

--- Draws a tree snapshot (arbor.tree() by default, or h:tree()) as
-- indented text, one node a line, as `arbor ctl tree` and the REPL do.
function M.render(t) return render.tree(t or M.tree()) end

return M
