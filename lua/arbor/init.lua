--- arbor: a supervision engine. The public module.
--
-- `arbor.run(root)` builds a tree on the real clock; `require "arbor.testing"`
-- builds one on a virtual clock. Runnables get a ctx (see docs/lua-api.md).
local core = require "arbor.core"
local policy = require "arbor.policy"
local channel = require "arbor.channel"
local term = require "arbor.term"
local render = require "arbor.render"

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
local cli            -- set by the arbor binary: {quiet, control, script, default}
local last_run       -- {ok, reason} of the last arbor.run

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

-- ---- ctx methods written in Lua -----------------------------------------

local methods = core.ctx_methods
local Shield = {__close = function(s) s.ctx:_shield_leave() end}

--- ctx:shield(fn, ...): runs fn with cancellation held off (T7): blocking
-- calls inside work normally until the shutdown deadline.
function methods.shield(ctx, fn, ...)
  if type(fn) ~= "function" then
    error(ctx.dn .. ": ctx:shield(fn): want a function, got " .. type(fn), 2)
  end
  ctx:_shield_enter()
  local guard <close> = setmetatable({ctx = ctx}, Shield)
  return fn(...)
end

--- ctx:await(start): calls start(cb) and blocks until cb(...) is called;
-- returns cb's arguments. Turns any callback API (luv) into a blocking call.
-- Canceled meanwhile, it raises the cancellation error and a later cb is
-- ignored. A cb called before start returns is fine.
function methods.await(ctx, start)
  if type(start) ~= "function" then
    error(ctx.dn .. ": ctx:await(start): want a function, got " .. type(start), 2)
  end
  local seq = ctx:_park_seq()
  local state, early = "starting", nil
  start(function(...)
    if state == "starting" then
      early, state = table.pack(...), "done"
    elseif state == "parked" then
      state = "done"
      ctx:_unpark(seq, ...)
    end
  end)
  if early then return table.unpack(early, 1, early.n) end
  state = "parked"
  return ctx:_park()
end

-- ---- node views (T13a, T13) ---------------------------------------------

local NodeMethods = {}

local function view_engine(self)
  return rawget(self, "_engine"), rawget(self, "dn")
end

-- The harness settles after each method, like after its other actions.
local function acted(self)
  local after = rawget(self, "_after")
  if after then after() end
end

--- node:restart(): cancels a running node so it restarts at once; starts a
-- node waiting for a delayed restart, or one that was given up or held.
function NodeMethods.restart(self)
  local e, dn = view_engine(self)
  e:restart(dn)
  acted(self)
end

--- node:cancel(): cancels the current incarnation (children first, T12);
-- by T8 it then restarts, as a CANCELED node does.
function NodeMethods.cancel(self)
  local e, dn = view_engine(self)
  e:cancel(dn)
  acted(self)
end

--- node:stop(): cancels the node and holds it down until node:restart().
function NodeMethods.stop(self)
  local e, dn = view_engine(self)
  e:hold(dn)
  acted(self)
end

--- node:swap(fn [, {restart = true}]): the next start runs fn (T13).
function NodeMethods.swap(self, fn, opts)
  local e, dn = view_engine(self)
  if type(fn) ~= "function" then
    error("swap " .. dn .. ": the runnable must be a function, got " .. type(fn), 2)
  end
  if opts ~= nil and type(opts) ~= "table" then
    error("swap " .. dn .. ": options must be a table, got " .. type(opts), 2)
  end
  for k in pairs(opts or {}) do
    if k ~= "restart" then
      error("swap " .. dn .. ": unknown option '" .. core.cut(k) .. "'", 2)
    end
  end
  e:swap(dn, fn, opts and opts.restart)
  acted(self)
end

--- node:set_policy(p): p decides this node's next restart; the failure
-- history is kept (T13). nil restores the default policy.
function NodeMethods.set_policy(self, p)
  local e, dn = view_engine(self)
  if p ~= nil and type(p) ~= "function" then
    error("set_policy " .. dn .. ": the policy must be a function, got " .. type(p), 2)
  end
  e:set_policy(dn, p)
  acted(self)
end

--- node:logs([n]): the node's last log lines, {time=, line=} oldest first.
function NodeMethods.logs(self, n)
  local e, dn = view_engine(self)
  return e:logs(dn, n)
end

-- ---- explain (issue 4) --------------------------------------------------

local function secs(x) return string.format("%.3fs", x) end

--- Why the node whose fields (e:node(dn)) are f is, or is not, running now:
-- a code and one sentence. `now` is the engine's time.
local function explain_fields(f, e)
  local dn, now = f.dn, e:now()
  if f.blocked then -- behind a closed lifecycle gate (L7)
    local gate = (f.sidecar and f.lifecycle .. " sidecar" or f.lifecycle)
    return "blocked", string.format("%s is not running: its lifecycle gate "
      .. "(%s) is closed while %s's coordinator is in state %s", dn, gate,
      f.parent, tostring(f.parent and e:node(f.parent, "coordinator")))
  end
  if f.running and f.stopping then
    if f.waiting_for and f.waiting_for ~= dn then
      return "stopping", string.format("%s is stopping: canceled, it waits "
        .. "for %s to exit first (children stop first, T12)", dn, f.waiting_for)
    end
    return "stopping", string.format("%s is stopping: canceled, it has %s "
      .. "to exit", dn, secs(f.shutdown))
  end
  if f.running then
    return "running", string.format("%s is running: %s, incarnation %d, "
      .. "started at %s (up %s)", dn, f.state, f.incarnation, secs(f.started),
      secs(now - f.started))
  end
  if f.waiting_member then
    return "waiting_member", string.format("%s waits for group member %s "
      .. "to %s before it starts (members start in order)", dn,
      f.waiting_member, f.ordered and "be HEALTHY" or "start")
  end
  if f.restart_at then
    return "backoff", string.format("%s is waiting for a backoff: its "
      .. "policy restarts it at %s (in %s) after it exited %s: %s", dn,
      secs(f.restart_at), secs(f.restart_at - now), f.state,
      f.error or "")
  end
  if f.waiting_for then
    return "waiting_descendant", string.format("%s exited %s at %s and "
      .. "waits for descendant %s to exit (since %s) before it can restart",
      dn, f.state, secs(f.exited), f.waiting_for, secs(f.exited))
  end
  if f.auto_done then
    return "auto_shutdown", string.format("%s ended DONE by %s", dn,
      f.error or "auto_shutdown")
  end
  if f.held and f.state == "DEAD" and f.decision == "stop" then
    return "given_up", string.format("%s was given up: its policy decided "
      .. "\"stop\" after failure %d in a row: %s", dn, f.consecutive,
      f.error or "")
  end
  if f.held and f.state == "DEAD" and f.decision == "escalate" then
    return "given_up", string.format("%s was given up: its policy decided "
      .. "\"escalate\" (its parent %s was failed) after: %s", dn,
      f.parent or "", f.error or "")
  end
  if f.held then
    return "held", string.format("%s is held down (stopped by hand, "
      .. "state %s): node:restart() starts it again", dn, f.state)
  end
  if f.state == "DONE" then
    return "done", string.format("%s finished: it ended DONE at %s and is "
      .. "not restarted", dn, secs(f.exited or now))
  end
  if f.canceled then
    return "canceled", string.format("%s is %s: its parent is being "
      .. "stopped, so it is not restarted", dn, f.state)
  end
  if f.incarnation == 0 then
    return "not_started", string.format("%s has not started yet", dn)
  end
  return "exited", string.format("%s exited %s", dn, f.state)
end

-- The fields explain reads, each read from the engine when used.
local function lazy_fields(e, dn)
  return setmetatable({}, {__index = function(_, k) return e:node(dn, k) end})
end

function M._explain(e, dn)
  local _, err = e:node(dn, "dn")
  if err then return nil, err end
  local why, sentence = explain_fields(lazy_fields(e, dn), e)
  return sentence, why
end

local NodeView = {
  -- Each field is read from the engine alone, when used (T13a): reading
  -- `state` does not build `children`.
  __index = function(self, k)
    local m = NodeMethods[k]
    if m then return m end
    local e, dn = view_engine(self)
    if k == "why" or k == "explanation" then
      if not e:node(dn, "dn") then return nil end
      local why, sentence = explain_fields(lazy_fields(e, dn), e)
      return k == "why" and why or sentence
    end
    return e:node(dn, k)
  end,
  __tostring = function(self)
    local e, dn = view_engine(self)
    return string.format("node(%s %s)", dn, e:node(dn, "state") or "gone")
  end,
}

--- A live view of the node at dn of engine e: fields are read when used;
-- `after` (optional) runs after each method (the harness settles there).
function M._node_view(e, dn, after)
  if type(dn) ~= "string" then
    error("node(dn): dn must be a string, got " .. type(dn), 3)
  end
  local _, err = e:node(dn, "dn")
  if err then return nil, err end
  return setmetatable({_engine = e, dn = dn, _after = after}, NodeView)
end

-- ---- the module API ------------------------------------------------------

--- Raises when opts give the root a lifecycle: the root has no parent,
-- so no coordinator orders it (L0).
function M._check_root_options(what, opts)
  for _, k in ipairs{"lifecycle", "sidecar"} do
    if opts[k] ~= nil then
      error(string.format("%s: root: option '%s' is not allowed on the root "
        .. "(L0: the root has no parent coordinator to order it)", what, k), 3)
    end
  end
end

local run_options = {policy = true, shutdown = true, seed = true, ring = true,
  ring_bytes = true, outbox = true, signals = true, log = true, on_event = true,
  quiet = true, runaway = true, control = true, auto_shutdown = true}

--- arbor.run(root [, opts]): runs a tree whose root runs `root` until the
-- tree is stopped (arbor.stop(), SIGINT, SIGTERM) or the root's policy gives
-- up (T11). Returns true, or false and the reason.
-- opts: policy, shutdown, seed, ring (event ring size), ring_bytes (bytes of
-- reasons the ring may hold), outbox (events one step may emit before
-- subscribers miss some, T14), signals (default true), log (function(dn,
-- line, time)), on_event (function(ev)), quiet, runaway (seconds a runnable
-- may run without yielding, default 10), control (the control socket's
-- path, false for none; under `arbor run` the default is
-- docs/control-protocol.md's, elsewhere none).
function M.run(root, opts)
  if type(root) ~= "function" then
    error("arbor.run(root): the root runnable must be a function, got "
      .. type(root), 2)
  end
  if opts ~= nil and type(opts) ~= "table" then
    error("arbor.run(root, opts): opts must be a table, got " .. type(opts), 2)
  end
  opts = opts or {}
  M._check_root_options("arbor.run", opts)
  for k in pairs(opts) do
    if not run_options[k] then
      error("arbor.run: unknown option '" .. core.cut(k) .. "'", 2)
    end
  end
  if opts.policy ~= nil and type(opts.policy) ~= "function" then
    error("arbor.run: option 'policy' must be a function, got " .. type(opts.policy), 2)
  end
  if opts.control ~= nil and opts.control ~= false and type(opts.control) ~= "string" then
    error("arbor.run: option 'control' must be a path or false, got " .. type(opts.control), 2)
  end
  if core.current() or running_engine then
    error("arbor.run: a tree is already running in this process", 2)
  end
  local e = core.engine{virtual = false, seed = opts.seed or os.time(),
    ring = opts.ring, ring_bytes = opts.ring_bytes, outbox = opts.outbox,
    signals = opts.signals ~= false, runaway = opts.runaway}
  e:set_default_policy(policy.exponential())
  local quiet = opts.quiet or (cli and cli.quiet) or not cli
  local show = term.filter(2)
  local sink = opts.log or (not quiet and function(dn, line, time)
    io.stderr:write(show(render.log(dn, line, time)), "\n")
  end) or nil
  local control_path = opts.control
  if control_path == nil and cli then control_path = cli.control end
  local server
  if control_path then
    local err
    server, err = require("arbor.control").serve(e, control_path,
      {arbor = M, script = cli and cli.script})
    if not server and cli and cli.default and control_path == cli.control
        and not err:find("another arbor is serving", 1, true) then
      io.stderr:write("arbor: warning: no control socket: ", err, "\n")
    elseif not server then
      e:close()
      -- the arbor binary prints an error object as one line, no traceback
      if cli then error(setmetatable({}, {__tostring = function() return err end})) end
      error("arbor.run: control socket: " .. err, 2)
    end
  end
  if server then
    local base = sink
    sink = function(dn, line, time)
      if base then base(dn, line, time) end
      server.on_log(dn, line, time)
    end
  end
  if sink then e:set_log(sink) end
  if not quiet then
    e:subscribe(function(ev)
      local line = render.event(ev, e)
      if line then io.stderr:write(show(line), "\n") end
    end)
  end
  if opts.on_event then e:subscribe(opts.on_event) end
  running_engine = e
  local ok, result, reason = pcall(function()
    e:start(root, opts.policy, opts.shutdown, opts.auto_shutdown)
    return e:run()
  end)
  running_engine = nil
  if server then server.close() end
  e:close()
  if not ok then error(result, 0) end
  last_run = {ok = result, reason = reason}
  return result, reason
end

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

--- A live view of the node at dn (T13a), or nil and a message.
function M.node(dn) return M._node_view(engine(), dn) end

--- One sentence saying why the node at dn is (or is not) running now, and
-- a code for programs ("running", "backoff", "blocked", "waiting_member",
-- "waiting_descendant", "given_up", "held", "done", "auto_shutdown",
-- "stopping", "canceled", "not_started"); arbor.node(dn).why and
-- .explanation carry the same. nil and a message for an unknown dn.
function M.explain(dn)
  if type(dn) ~= "string" then
    error("arbor.explain(dn): dn must be a string, got " .. type(dn), 2)
  end
  return M._explain(engine(), dn)
end

--- The last n events (all held when n is nil), oldest first (T14).
function M.events(n) return engine():events(n) end

--- Calls fn(event) for every event from now on. Returns a function that
-- unsubscribes. A subscriber that raises is removed and logged.
function M.on_event(fn)
  if type(fn) ~= "function" then
    error("arbor.on_event(fn): want a function, got " .. type(fn), 2)
  end
  local e = engine()
  local id = e:subscribe(fn)
  return function() e:unsubscribe(id) end
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

-- ---- used by the arbor binary -------------------------------------------

--- control: the socket path, false for none, nil for the default: then
-- $ARBOR_CONTROL (a path, or "none"), else the default path, which may fail
-- with a warning unless another arbor is serving it.
function M._cli(quiet, control, script)
  local default = false
  if control == nil then
    local env = os.getenv("ARBOR_CONTROL")
    if env == "none" then
      control = false
    elseif env and env ~= "" then
      control = env
    else
      control = require("arbor.control").default_path(script)
      default = true
    end
  end
  cli = {quiet = quiet, control = control, script = script, default = default}
end

function M._exit_status()
  if not last_run then
    return 2, "the script neither called arbor.run nor returned a root runnable"
  end
  if last_run.ok then return 0 end
  if last_run.reason == "interrupted" then return 130, "interrupted" end
  return 1, last_run.reason
end

return M
