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
-- {{dn, pid, slot, fds, note, sd, sd_path, exec, definition,
-- healthy_for}}, guard = {sock, table, pid}}. The new arbor
-- (ARBOR_RESTORE_FD) adopts the guard, loads the script and builds the
-- tree: a node made at a DN of the state gets its counters and its runtime
-- swaps back (their functions cross as bytecode with their captured
-- values, when those are plain data) and stays down when it was held; an
-- `arbor.exec` node whose definition is the same takes its running process
-- over (same pid, pipes, readiness, uptime); a prestart or poststart job
-- its parent's coordinator had finished with is not run again (it is DONE
-- at once); Lua runnables start again with ctx.restored = true. A process
-- the new tree did not take over within ADOPT_SECONDS is stopped (M.stop).
local core = require "arbor.core"
local definition = require "arbor.definition"
local json = require "arbor.json"

local M = {}

--- Seconds the new tree has to take its processes over, and the grace of
-- one it does not take over (SIGTERM, then SIGKILL).
M.ADOPT_SECONDS, M.STOP_GRACE = 10, 10

-- The runnables arbor.exec made: their processes can be taken over (a Lua
-- runnable that started processes with ctx:exec starts again, and starts
-- its own again).
local exec_runnables = setmetatable({}, {__mode = "k"})

--- mark_exec(fn): fn is an arbor.exec runnable.
function M.mark_exec(fn) exec_runnables[fn] = true end

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

local function shell_quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

-- The format of the state binary reads, from its --version; nil, why.
local function binary_format(binary)
  local p = io.popen(shell_quote(binary) .. " --version 2>&1")
  if not p then return nil, "cannot run " .. binary end
  local out = p:read("a")
  local ok = p:close()
  local first = out:match("^[^\n]*")
  if not ok then return nil, string.format("%s --version failed: %s", binary, first) end
  if not out:match("^arbor ") then
    return nil, string.format("%s is not an arbor (its --version says: %s)", binary, first)
  end
  local fmt = tonumber(out:match("reexec state format (%d+)"))
  if not fmt then return nil, binary .. " cannot take a tree over (no reexec state format)" end
  return fmt, out:match("^arbor (%S+)")
end

--- reexec(running, {binary = path}) -> nil, err: replaces this arbor by
-- binary (default: the file it runs) with the same command line; returns
-- only when that could not start (the tree runs on, as it was). running:
-- arbor.reload's record of the arbor.run in progress.
function M.reexec(running, opts)
  opts = opts or {}
  local e = running.e
  if not running.script then
    return nil, "reexec: no script to load again (run the tree with `arbor run SCRIPT`)"
  end
  if e:reloading() then return nil, "reexec: a reload is under way" end
  local binary = opts.binary or core.self_exe()
  local fmt, version = binary_format(binary)
  if not fmt then return nil, "reexec: " .. version end
  if fmt < core.state_format then
    return nil, string.format("reexec: %s reads the state format %d, this arbor writes %d "
      .. "(an older arbor cannot take this tree over)", binary, fmt, core.state_format)
  end
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
    rec.healthy_for = state.nodes[rec.dn] and state.nodes[rec.dn].healthy_for
    state.procs[#state.procs + 1] = rec
  end
  local fd, err = core.memfd("arbor-state", json.encode(state))
  if not fd then return nil, "reexec: " .. err end
  core.log_sync(e) -- the log files' writer thread does not cross the exec
  local _, xerr = core.exec(binary, core.self_argv(), "ARBOR_RESTORE_FD", tostring(fd))
  core.close_fd(fd) -- the exec failed: what was kept open for it is not any more
  for _, rec in ipairs(state.procs) do
    for _, d in ipairs(rec.fds) do core.cloexec(d) end
    core.cloexec(rec.note)
    core.cloexec(rec.sd)
  end
  if state.guard then
    core.cloexec(state.guard.sock)
    core.cloexec(state.guard.table)
  end
  return nil, string.format("reexec: %s (arbor %s): %s; the tree runs on", binary,
    tostring(version), xerr)
end

-- ---- the new arbor ------------------------------------------------------------

local nodes, procs = {}, {} -- the state's, by DN, until taken (procs: lists)

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

--- stop(e, rec): a process of the state the new tree does not take over:
-- its group is stopped (SIGTERM now, SIGKILL after STOP_GRACE) and reaped
-- (then rec.gone is true).
function M.stop(e, rec)
  local uv = require "luv"
  core.signal_group(rec.pid, 15)
  core.signal_group(rec.pid, 18) -- SIGCONT
  for _, fd in ipairs(rec.fds) do core.close_fd(fd) end
  if rec.note >= 0 then core.close_fd(rec.note) end
  if rec.sd >= 0 then core.close_fd(rec.sd) end
  e:log_root(string.format("reexec: %s (pid %d) was not taken over by the new tree: stopped",
    rec.dn, rec.pid))
  local t, waited = uv.new_timer(), 0
  t:start(100, 100, function()
    waited = waited + 0.1
    if core.reap(rec.pid) then
      rec.gone = true
      t:close()
      return
    end
    if waited >= M.STOP_GRACE then core.signal_group(rec.pid, 9) end
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
      M.stop(e, rec)
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
  local t = uv.new_timer()
  t:start(M.ADOPT_SECONDS * 1000, 0, function()
    t:close()
    e:node_filter(nil)
    for dn, list in pairs(procs) do
      procs[dn] = nil
      for _, rec in ipairs(list) do M.stop(e, rec) end
    end
  end)
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
-- nil and the old record, whose process is being stopped. Taken once.
function M.take(ctx, e)
  local list = procs[ctx.dn]
  if not list then return nil end
  procs[ctx.dn] = nil
  local rec = table.remove(list, 1)
  for _, other in ipairs(list) do M.stop(e, other) end -- a probe's
  local d = e:definition(ctx.dn)
  if d and definition.of(d.fn, d.opts) == rec.definition then return rec end
  M.stop(e, rec)
  return nil, rec
end

--- pending() -> true while processes of the state wait to be taken over.
function M.pending() return next(procs) ~= nil end

return M
