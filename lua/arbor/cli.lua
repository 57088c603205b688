--- arbor.cli: what the arbor binary (src/main.c) and the arbor module say
-- to each other about `arbor run`: the command line's options before the
-- script runs, and the exit status once it ran.
local M = {}

--- Under `arbor run`: {quiet, control, script, default, http, log_dir,
-- log_max_bytes, log_keep, log_mode, log_format, init, restore_fd}; under
-- `arbor check` also check = true; nil elsewhere.
M.options = nil

local last_run -- {ok, reason} of the last arbor.run
local first_failure -- the error of the root's first start, before HEALTHY
local checked -- what arbor.run found under `arbor check`: {errors = n}

--- setup(quiet, control, script, extra): called by the binary before the
-- script; extra: {http = "ADDR:PORT", log_dir, log_max_bytes, log_keep,
-- log_mode (integers), log_format ("text" or "json"), check = true under
-- `arbor check`, init = true under --init, restore_fd: the state's
-- descriptor after `arbor ctl reexec`}.
-- control: the socket path, false for none, nil for the default: then
-- $ARBOR_CONTROL (a path, or "none"), else the default path, which may fail
-- with a warning unless another arbor is serving it.
function M.setup(quiet, control, script, extra)
  if extra and extra.check then
    M.options = {quiet = true, control = false, script = script, check = true}
    return
  end
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
  extra = extra or {}
  M.options = {quiet = quiet, control = control, script = script, default = default,
    http = extra.http, log_dir = extra.log_dir, log_format = extra.log_format,
    log_max_bytes = extra.log_max_bytes, log_keep = extra.log_keep, log_mode = extra.log_mode,
    init = extra.init,
    restore_fd = extra.restore_fd}
end

--- What `arbor run` printed on stderr: once a write failed (EPIPE: the
-- reader of a pipe went away; EIO: the terminal was closed) printing stops
-- for good, and the lines not printed are counted (`lost`, with the first
-- error in `error`); supervision goes on (`arbor ctl status` shows them).
M.stderr = {lost = 0, error = nil}

--- print_line(text): writes text and a newline on stderr, or counts it.
function M.print_line(text)
  local st = M.stderr
  if st.error then
    st.lost = st.lost + 1
    return
  end
  local ok, err = io.stderr:write(text, "\n")
  if not ok then
    st.error, st.lost = err or "write failed", st.lost + 1
  end
end

--- Called by arbor.run with what it returns.
function M.ran(ok, reason) last_run = {ok = ok, reason = reason} end

-- An error raised by the root itself (not a child's escalation), in its
-- first incarnation, before it signaled HEALTHY.
local function first_start_error(ev)
  if ev.restarts ~= 0 or ev.healthy ~= 0 or ev.returned then return false end
  return not (type(ev.err) == "string" and ev.err:match("^child [%w_.-]+ escalated: "))
end

--- root_policy(p, default) -> the root's policy under `arbor run`: p (or
-- default when p is nil), except that an
-- error the root raises in its first start, before it signaled HEALTHY,
-- is a mistake in the script (an unknown option, a bad argument): the
-- tree is not restarted, and `arbor run` exits 2 with the message.
-- Elsewhere (arbor.run from lua5.4) p as it is.
function M.root_policy(p, default)
  if not M.options then return p end
  p = p or default
  return function(ev)
    if first_start_error(ev) then
      first_failure = tostring(ev.err)
      return "stop"
    end
    return p(ev)
  end
end

-- ---- arbor check ------------------------------------------------------------

--- Virtual seconds `arbor check` runs the tree for.
M.CHECK_SECONDS = 5

-- The errors a tree met: one entry per node and message, in order, with
-- how many times it came.
local function collector()
  local list, seen = {}, {}
  local function add(dn, reason)
    local key = dn .. "\0" .. reason
    if seen[key] then
      seen[key].times = seen[key].times + 1
    else
      seen[key] = {dn = dn, reason = reason, times = 1}
      list[#list + 1] = seen[key]
    end
  end
  return list, function(ev)
    if ev.kind == "state" and ev.to == "DEAD" then add(ev.dn, ev.reason or "(no reason)") end
  end
end

--- build(root, opts [, filter [, limit]]) -> engine, errors: the tree root
-- and opts (arbor.run's) build on the virtual clock in check mode
-- (core.checking(): no process is started, a process node only checks its
-- program and options), run for M.CHECK_SECONDS virtual seconds; errors:
-- every error its nodes met, {dn, reason, times}, in order. filter: the
-- engine's node_filter (arbor.reload). limit (a reload's budget, seconds):
-- one resume may run at most that long (its runaway limit), and the build
-- stops once it ran that long in all, with the error {dn = "(build)",
-- reason, passed = true}. The caller stops and closes the engine
-- (M.close_built).
function M.build(root, opts, filter, limit)
  local core = require "arbor.core"
  local policy = require "arbor.policy"
  local runaway = opts.runaway
  if limit and (runaway == nil or runaway == 0 or runaway > limit) then runaway = limit end
  local e = core.engine{virtual = true, check = true, seed = opts.seed or 1,
    ring = opts.ring, ring_bytes = opts.ring_bytes, outbox = opts.outbox,
    runaway = runaway}
  e:set_default_policy(opts.default_policy or policy.exponential())
  local errors, on_event = collector()
  e:subscribe(on_event)
  if filter then e:node_filter(filter) end
  local t0, passed = core.hrtime(), nil
  local function within()
    local ms = (core.hrtime() - t0) // 1000000
    if limit and ms >= limit * 1000 then
      passed = string.format("building its tree ran %d ms without yielding (limit %d ms)",
        ms, math.floor(limit * 1000))
      return false
    end
    return true
  end
  local ok, err = pcall(function()
    e:start(root, M.root_policy(opts.policy, opts.default_policy
      or policy.exponential()), opts.shutdown, opts.auto_shutdown)
    e:settle()
    for _ = 1, M.CHECK_SECONDS * 10 do
      if not within() then return end
      e:advance(0.1)
    end
    within()
  end)
  if passed then
    errors[#errors + 1] = {dn = "(build)", reason = passed, times = 1, passed = true}
  elseif not ok then -- a restart loop without delay never settles
    errors[#errors + 1] = {dn = "(engine)", reason = tostring(err), times = 1}
  end
  return e, errors
end

--- close_built(e): stops and closes an engine M.build made.
function M.close_built(e)
  pcall(function()
    e:stop()
    e:settle()
    e:advance(60)
  end)
  e:close()
end

--- check(root, opts): what arbor.run does under `arbor check`: builds the
-- tree (M.build), prints it and every error its nodes met (DN and message,
-- with the user's file:line) on stdout. `arbor check` then exits 0 when
-- there was none, else 2.
function M.check(root, opts)
  local render = require "arbor.render"
  local e, errors = M.build(root, opts)
  local out = {string.format("arbor check %s: the tree after %gs (virtual; no process started):",
    tostring(M.options and M.options.script), M.CHECK_SECONDS), render.tree(e:tree())}
  if #errors == 0 then
    out[#out + 1] = "no errors"
  else
    out[#out + 1] = string.format("%d error(s):", #errors)
    for _, x in ipairs(errors) do
      out[#out + 1] = string.format("  %s: %s%s", x.dn, x.reason,
        x.times > 1 and string.format(" (%d times)", x.times) or "")
    end
  end
  io.stdout:write(table.concat(out, "\n"), "\n")
  io.stdout:flush()
  M.close_built(e)
  checked = {errors = #errors}
  return #errors == 0, #errors > 0 and string.format("%d error(s)", #errors) or nil
end

--- The exit status of `arbor run` (or `arbor check`) and, unless 0, a
-- message.
function M.exit_status()
  if checked then return checked.errors == 0 and 0 or 2 end
  if first_failure then
    return 2, "the root failed in its first start, before it was HEALTHY "
      .. "(a mistake in the script; not restarted): " .. first_failure
  end
  if not last_run then
    return 2, "the script neither called arbor.run nor returned a root runnable"
  end
  if last_run.ok then return 0 end
  if last_run.reason == "interrupted" then return 130, "interrupted" end
  return 1, last_run.reason
end

return M
