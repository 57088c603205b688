--- arbor.restore: `arbor ctl reexec` (docs/restore.md). arbor replaces
-- itself in place (same pid: its processes stay its children) with the
-- same binary or another one, and the new arbor takes the tree over.
--
-- Before the exec, the state goes into a memory file (memfd) whose
-- descriptor, like those of the processes (their output pipes, their
-- notification pipe or socket) and of the process guard, stays open across
-- the exec: JSON, {format, from, now (the engine's clock, which the new
-- engine's goes on from), script, args, nodes = {dn = {restarts,
-- consecutive, failures, finished, held, healthy_for, overrides}}, procs =
-- {{dn, pid, slot, fds, note, sd, sd_path, stop_signal, signal, grace,
-- exec, definition, parts, healthy_for}}, guard = {sock, table, pid}}. The new arbor
-- (ARBOR_RESTORE_FD) adopts the guard, loads the script and builds the
-- tree: a node made at a DN of the state gets its counters and its runtime
-- swaps back (their functions cross as bytecode with their captured
-- values, when those are plain data) and stays down when it was held; an
-- `arbor.exec` node whose definition is the same takes its running process
-- over (same pid, pipes, readiness, uptime); a prestart or poststart job
-- its parent's coordinator had finished with is not run again (it is DONE
-- at once); Lua runnables start again with ctx.restored = true. A process
-- the new tree did not take over within ADOPT_SECONDS is stopped (M.stop),
-- with its own stop signal and grace (procs records carry stop_signal,
-- grace and the parts of their definition, to say what changed).
--
-- Before the exec, the binary's --version runs off the loop within
-- VERSION_SECONDS, and the signals arbor answers are held
-- (core.hold_signals): pending across the exec, the new arbor takes them
-- once its engine runs.
local core = require "arbor.core"
local definition = require "arbor.definition"
local json = require "arbor.json"

local M = {}

--- Seconds the new tree has to take its processes over; the grace of one
-- it does not take over when the state does not say its own (an arbor
-- before issue 25's did not).
M.ADOPT_SECONDS, M.STOP_GRACE = 10, 10

-- The runnables arbor.exec made: their processes can be taken over (a Lua
-- runnable that started processes with ctx:exec starts again, and starts
-- its own again).
local exec_runnables = setmetatable({}, {__mode = "k"})

--- mark_exec(fn, argv, opts): fn is the arbor.exec runnable of argv and
-- opts.
function M.mark_exec(fn, argv, opts)
  exec_runnables[fn] = true
  definition.exec(fn, argv, opts)
end

-- ---- runtime swaps across the exec ----------------------------------------

-- A value that crosses as JSON: nil, booleans, numbers, strings, and tables
-- of those (no cycles, string or integer keys).
local function plain(v, depth)
  local t = type(v)
  if t == "nil" or t == "boolean" or t == "number" or t == "string" then return true end
  if t ~= "table" or (depth or 0) > 8 or getmetatable(v) then return false end
  for k, x in pairs(v) do
    if (type(k) ~= "string" and math.type(k) ~= "integer") or not plain(x, (depth or 0) + 1) then
      return false
    end
  end
  return true
end

-- A runtime swap's function as data: its bytecode (hex) and its upvalues'
-- values; nil, why when it cannot cross (a C function, or it captures a
-- function, a coroutine or userdata).
local function freeze(f)
  local ok, code = pcall(string.dump, f)
  if not ok then return nil, "a C function" end
  local ups, i = {}, 1
  while true do
    local name, v = debug.getupvalue(f, i)
    if not name then break end
    if name == "_ENV" then -- _G, or a REPL session's environment: _G after
      ups[i] = {env = true}
    elseif plain(v) then
      ups[i] = {value = v}
    else
      return nil, string.format("it captures %s '%s'", type(v), name)
    end
    i = i + 1
  end
  return {code = (code:gsub(".", function(c) return string.format("%02x", c:byte()) end)),
    upvalues = ups, n = i - 1}
end

local function thaw(t)
  local code = t.code:gsub("%x%x", function(h) return string.char(tonumber(h, 16)) end)
  local f = assert(load(code, "=(runtime swap)", "b"))
  for i = 1, t.n do
    local u = t.upvalues[i] or {}
    debug.setupvalue(f, i, u.env and _G or u.value)
  end
  return f
end

-- The runtime swaps of dn on e, frozen: {fn, policy} (each nil when not
-- swapped, or when it cannot cross: then why says so).
local function frozen_overrides(e, dn)
  local fn, policy = e:override(dn)
  if not fn and not policy then return nil end
  local out = {}
  for k, f in pairs{fn = fn, policy = policy} do
    local t, why = freeze(f)
    if t then out[k] = t else out.why = (out.why and out.why .. "; " or "") .. k .. ": " .. why end
  end
  return out
end

-- Applies a node's frozen swaps (its node was just made).
local function apply_overrides(e, dn, o)
  if o.why then e:log_root(string.format("reexec: a runtime swap of %s is not carried over (%s)", dn, o.why)) end
  local ok, err = pcall(function()
    if o.fn then e:swap(dn, thaw(o.fn)) end
    if o.policy then e:set_policy(dn, thaw(o.policy)) end
  end)
  if not ok then e:log_root(string.format("reexec: a runtime swap of %s: %s", dn, tostring(err))) end
end

--- Seconds `BINARY --version` has to answer.
M.VERSION_SECONDS = 2
--- Bytes of its answer read (the rest is not).
local VERSION_BYTES = 65536

-- What `binary --version` says: done(format, version) | done(nil, why).
-- It runs off the loop, a process of its own (its own group, killed with
-- what it started when it does not answer within M.VERSION_SECONDS).
local checking -- the pid of a `--version` that has not answered yet

local function binary_format(binary, done)
  local uv = require "luv"
  local pipes = {uv.new_pipe(false), uv.new_pipe(false)}
  local text = {"", ""} -- its stdout, its stderr
  local timer = uv.new_timer()
  local handle, pid, status
  local pending, finished = 3, false -- the exit, and the end of both pipes
  local function finish(why)
    if finished then return end
    finished = true
    checking = nil
    timer:close()
    for _, p in ipairs(pipes) do
      if not p:is_closing() then p:close() end
    end
    if why then return done(nil, why) end
    local out = text[1] ~= "" and text[1] or text[2]
    local first = out:match("^[^\n]*")
    if status ~= 0 then
      return done(nil, string.format("%s --version failed: %s", binary,
        first ~= "" and first or "exit status " .. tostring(status)))
    end
    if not out:match("^arbor ") then
      return done(nil, string.format("%s is not an arbor (its --version says: %s)", binary, first))
    end
    local fmt = tonumber(out:match("reexec state format (%d+)"))
    if not fmt then return done(nil, binary .. " cannot take a tree over (no reexec state format)") end
    return done(fmt, out:match("^arbor (%S+)"))
  end
  local function step()
    pending = pending - 1
    if pending == 0 then finish() end
  end
  handle, pid = uv.spawn(binary, {args = {"--version"}, stdio = {nil, pipes[1], pipes[2]},
    detached = true}, function(code, signal)
    status = signal ~= 0 and "signal " .. signal or code
    handle:close()
    step()
  end)
  if not handle then
    for _, p in ipairs(pipes) do p:close() end
    timer:close()
    return done(nil, string.format("%s --version failed: %s", binary, tostring(pid)))
  end
  checking = pid
  for i, p in ipairs(pipes) do
    p:read_start(function(_, data)
      if data then
        if #text[i] < VERSION_BYTES then text[i] = text[i] .. data end
      else
        step()
      end
    end)
  end
  timer:start(math.floor(M.VERSION_SECONDS * 1000), 0, function()
    if not status then core.signal_group(pid, 9) end
    finish(string.format("%s --version did not answer within %g s", binary, M.VERSION_SECONDS))
  end)
end

-- Calls fn once the loop went through one poll for I/O after now (an
-- idle handle keeps that poll from waiting): a signal that libuv's handler
-- took before core.hold_signals is handled by then.
local function after_a_poll(fn)
  local uv = require "luv"
  local idle, prepare, check = uv.new_idle(), uv.new_prepare(), uv.new_check()
  local polled = false
  idle:start(function() end)
  prepare:start(function() polled = true end)
  check:start(function()
    if not polled then return end
    idle:close()
    prepare:close()
    check:close()
    fn()
  end)
end

-- Why a reexec cannot be done now, or nil.
local function refused(running)
  local e = running.e
  if not running.script then
    return "reexec: no script to load again (run the tree with `arbor run SCRIPT`)"
  end
  if e:reloading() then return "reexec: a reload is under way" end
  if e:stopping() then return "reexec: the tree is stopping" end
end

-- The exec itself: the state into a memfd, then binary (arbor `version`)
-- in place of this process. Returns why only when that could not be done.
local function exec(running, binary, version)
  local e = running.e
  local state = {format = core.state_format, from = core.version, now = e:now(),
    script = running.script, args = running.args, nodes = {}, procs = {},
    guard = core.guard_export()}
  local function walk(v)
    local rec = e:node_record(v.dn)
    rec.overrides = frozen_overrides(e, v.dn)
    state.nodes[v.dn] = rec
    for _, c in ipairs(v.children) do walk(c) end
  end
  walk(e:tree("root"))
  for _, rec in ipairs(core.proc_export(e)) do
    local d = e:definition(rec.dn)
    rec.exec = exec_runnables[d.fn] == true
    rec.definition = definition.of(d.fn, d.opts)
    rec.parts = rec.exec and definition.parts(d.fn, d.opts) or nil
    rec.healthy_for = state.nodes[rec.dn] and state.nodes[rec.dn].healthy_for
    state.procs[#state.procs + 1] = rec
  end
  local fd, err = core.memfd("arbor-state", json.encode(state))
  local xerr = err
  if fd then
    core.log_sync(e) -- the log files' writer thread does not cross the exec
    local _
    _, xerr = core.exec(binary, core.self_argv(), "ARBOR_RESTORE_FD", tostring(fd))
    core.close_fd(fd) -- the exec failed: what was kept open for it is not any more
  end
  for _, rec in ipairs(state.procs) do
    for _, d in ipairs(rec.fds) do core.cloexec(d) end
    core.cloexec(rec.note)
    core.cloexec(rec.sd)
  end
  if state.guard then
    core.cloexec(state.guard.sock)
    core.cloexec(state.guard.table)
  end
  return string.format("reexec: %s (arbor %s): %s; the tree runs on", binary,
    tostring(version), xerr)
end

local under_way -- a reexec checks its binary

--- reexec(running, {binary = path}, reply): replaces this arbor by binary
-- (default: the file it runs) with the same command line. running:
-- arbor.reload's record of the arbor.run in progress. The binary's
-- `--version` runs off the loop first (M.VERSION_SECONDS); then the stop
-- signals are held (core.hold_signals: one that comes until the new arbor
-- handles signals waits for it, as the blocked mask and pending signals
-- cross execve) and, one poll of the loop later, arbor execs. reply(err)
-- is called only when that could not be done: the tree runs on, as it was.
function M.reexec(running, opts, reply)
  opts = opts or {}
  local why = refused(running) or (under_way and "reexec: a reexec is under way")
  if why then return reply(why) end
  under_way = true
  local binary = opts.binary or core.self_exe()
  binary_format(binary, function(fmt, version)
    if not fmt then
      under_way = nil
      return reply("reexec: " .. version .. "; the tree runs on")
    end
    if fmt < core.state_format then
      under_way = nil
      return reply(string.format("reexec: %s reads the state format %d, this arbor writes %d "
        .. "(an older arbor cannot take this tree over); the tree runs on", binary, fmt,
        core.state_format))
    end
    core.hold_signals()
    after_a_poll(function()
      local err = refused(running) or exec(running, binary, version)
      core.release_signals() -- what came meanwhile is handled here now
      under_way = nil
      reply(err)
    end)
  end)
end

-- ---- the new arbor ------------------------------------------------------------

local nodes, procs = {}, {} -- the state's, by DN, until taken (procs: lists)
local stopping = {}          -- records M.stop stops, until they are gone
local adopt_timer            -- ends the takeover (M.start)

--- load(fd) -> state | nil, err: the state the arbor before handed over.
function M.load(fd)
  local data, err = core.read_fd(fd)
  if not data then return nil, err end
  local ok, state = pcall(json.decode, data)
  if not ok or type(state) ~= "table" then return nil, "the state is not JSON: " .. tostring(state) end
  if math.type(state.format) ~= "integer" then return nil, "the state has no format" end
  if state.format > core.state_format then
    return nil, string.format("the state's format %d is newer than this arbor reads (%d)",
      state.format, core.state_format)
  end
  return state
end

--- Bytes of a stopping process's output the root's log takes; what
-- comes beyond is counted, and the count logged.
M.STOP_OUTPUT = 65536

-- Reads what the stopping process rec wrote (its stdout and stderr read
-- ends, rec.fds[1] and [2]) and logs it on the root, line by line;
-- final: also a last partial line, and the count of what was not logged.
local function drain(e, rec, final)
  for i = 1, 2 do
    local fd = rec.fds[i]
    while fd and fd >= 0 do
      local data = core.drain_fd(fd)
      if not data or data == "" then break end
      rec.pending = (rec.pending or "") .. data
    end
  end
  local text = rec.pending or ""
  local last = 1
  for line, at in text:gmatch("([^\n]*)\n()") do
    last = at
    if (rec.logged or 0) + #line <= M.STOP_OUTPUT then
      rec.logged = (rec.logged or 0) + #line
      e:log_root(string.format("reexec: %s (pid %d, stopping): %s", rec.dn, rec.pid, line))
    else
      rec.dropped = (rec.dropped or 0) + 1
    end
  end
  rec.pending = text:sub(last)
  if #rec.pending > M.STOP_OUTPUT then -- no newline: not kept whole
    rec.dropped, rec.pending = (rec.dropped or 0) + 1, ""
  end
  if final then
    if rec.pending ~= "" then
      e:log_root(string.format("reexec: %s (pid %d, stopping): %s", rec.dn, rec.pid, rec.pending))
    end
    if rec.dropped then
      e:log_root(string.format("reexec: %s (pid %d): %d line(s) of its output while it stopped "
        .. "not logged (beyond %d bytes)", rec.dn, rec.pid, rec.dropped, M.STOP_OUTPUT))
    end
  end
end

--- stop(e, rec, why): a process of the state the new tree does not take
-- over (why: the reason, "its policy changed"): its group is stopped as
-- its node stopped it, with its own stop signal now and SIGKILL after its
-- own grace, and reaped (then rec.gone is true). The root's log says so,
-- and takes what it writes meanwhile (its pipes stay open until it is
-- gone: a program shutting down must not die of SIGPIPE).
function M.stop(e, rec, why)
  local uv = require "luv"
  stopping[rec] = true
  local sig = math.type(rec.stop_signal) == "integer" and rec.stop_signal or 15
  local grace = type(rec.grace) == "number" and rec.grace >= 0 and rec.grace or M.STOP_GRACE
  core.signal_group(rec.pid, sig)
  core.signal_group(rec.pid, 18) -- SIGCONT
  core.close_fd(rec.fds[3]) -- the write ends: the read ends see the end
  core.close_fd(rec.fds[4]) -- once the group is gone
  if rec.note >= 0 then core.close_fd(rec.note) end
  if rec.sd >= 0 then core.close_fd(rec.sd) end
  e:log_root(string.format("reexec: %s: not taken over: %s; pid %d stopped (%s, SIGKILL after %g s)",
    rec.dn, why or "not taken over by the new tree", rec.pid,
    rec.signal or ("signal " .. sig), grace))
  local t, waited = uv.new_timer(), 0
  t:start(100, 100, function()
    waited = waited + 0.1
    if core.reap(rec.pid) then
      drain(e, rec, true)
      core.close_fd(rec.fds[1])
      core.close_fd(rec.fds[2])
      rec.gone = true
      stopping[rec] = nil
      t:close()
      return
    end
    drain(e, rec)
    if waited >= grace and not rec.killed then
      rec.killed = true
      core.signal_group(rec.pid, 9)
    end
  end)
end

--- start(e, state): before the tree starts: the guard is the one of the
-- arbor before, and the nodes the tree makes take their state back (the
-- engine's node filter sees every node created). Processes not taken
-- over within ADOPT_SECONDS are stopped.
function M.start(e, state)
  if type(state.now) == "number" then e:set_clock(state.now) end
  local g = state.guard
  if type(g) == "table" then
    local ok, err = core.guard_adopt(g.sock, g.table, g.pid)
    if not ok then e:log_root("reexec: the process guard: " .. tostring(err)) end
  end
  nodes, procs = state.nodes or {}, {}
  for _, rec in ipairs(state.procs or {}) do
    if rec.exec then
      procs[rec.dn] = procs[rec.dn] or {}
      table.insert(procs[rec.dn], rec)
    else -- a Lua runnable's own (ctx:exec): it starts again, and them too
      M.stop(e, rec, "a Lua runnable's process (ctx:exec): the runnable starts again, "
        .. "and starts its own")
    end
  end
  for _, list in pairs(procs) do -- the oldest first: the program, not a
    table.sort(list, function(a, b) return a.pid < b.pid end) -- probe
  end
  e:node_filter(function(dn)
    local rec = nodes[dn]
    if not rec then return end
    nodes[dn] = nil
    e:restore_node(dn, rec)
    if rec.overrides then apply_overrides(e, dn, rec.overrides) end
  end)
  local uv = require "luv"
  adopt_timer = uv.new_timer()
  adopt_timer:start(M.ADOPT_SECONDS * 1000, 0, function()
    adopt_timer:close()
    adopt_timer = nil
    e:node_filter(nil)
    for dn, list in pairs(procs) do
      procs[dn] = nil
      for _, rec in ipairs(list) do
        M.stop(e, rec, string.format("its node did not take it over within %d s "
          .. "(the new script does not make it, or does not run it)", M.ADOPT_SECONDS))
      end
    end
  end)
end

--- finish(e): the tree of engine e stopped (arbor.run returns): a
-- reexec's version check still running is killed; after a reexec, the
-- processes of the state no node took over (the stop came first) are
-- stopped now, each with its own stop signal and grace, and waited for,
-- as are those being stopped, so that none is killed by the guard when
-- arbor exits.
function M.finish(e)
  local uv = require "luv"
  if checking then -- a reexec's version check: its answer is not wanted
    core.signal_group(checking, 9)
    checking = nil
  end
  if adopt_timer then
    adopt_timer:close()
    adopt_timer = nil
  end
  for dn, list in pairs(procs) do
    procs[dn] = nil
    for _, rec in ipairs(list) do
      M.stop(e, rec, "the tree stopped before its node took it over")
    end
  end
  local longest = 0
  for rec in pairs(stopping) do
    local grace = type(rec.grace) == "number" and rec.grace or M.STOP_GRACE
    if grace > longest then longest = grace end
  end
  local deadline = uv.now() + (longest + 1) * 1000
  while next(stopping) and uv.now() < deadline do uv.run("once") end
end

--- root(e, state): the root's counters (the engine made it without the filter).
function M.root(e)
  local rec = nodes.root
  if rec then
    nodes.root = nil
    e:restore_node("root", rec)
    if rec.overrides then apply_overrides(e, "root", rec.overrides) end
  end
end

--- take(ctx, e) -> record | nil, old: the process the arbor before ran for
-- ctx's node (on engine e), when the node's definition is the same; else
-- nil and the old record, whose process is being stopped (the root's log
-- says which part of the definition changed). Taken once.
function M.take(ctx, e)
  local list = procs[ctx.dn]
  if not list then return nil end
  procs[ctx.dn] = nil
  local rec = table.remove(list, 1)
  for _, other in ipairs(list) do -- a probe's
    M.stop(e, other, "a probe's process: the node runs its probes again")
  end
  local d = e:definition(ctx.dn)
  if d and definition.of(d.fn, d.opts) == rec.definition then return rec end
  local why = "its node is gone"
  if d then
    why = type(rec.parts) == "table" and definition.changed(rec.parts, definition.parts(d.fn, d.opts))
      or "its definition changed"
  end
  M.stop(e, rec, why)
  return nil, rec
end

--- pending() -> true while processes of the state wait to be taken over.
function M.pending() return next(procs) ~= nil end

return M
