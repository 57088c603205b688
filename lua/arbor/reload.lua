--- arbor.reload: applies a changed supervisor script to the running tree
-- without restarting what did not change (`arbor ctl reload`, SIGHUP;
-- docs/restore.md).
--
-- The script is read again and its tree built on a check engine first
-- (arbor.cli.build: the virtual clock, no process started): a script that
-- fails to load, or whose nodes meet an error while building, changes
-- nothing. Then the plan: walking the running tree and the new one by DN,
-- a node whose definition (arbor.definition: runnable and options) is the
-- same is kept with its whole subtree; a changed parent gets a new
-- incarnation that adopts its children (the engine's reload, one level at
-- a time: each child its new incarnation names again is compared in
-- turn; a lifecycle coordinator keeps its gates); a changed leaf, or a
-- parent whose groups changed members or whose children changed their
-- lifecycle, restarts; nodes only in the running tree stop, nodes only in
-- the new one start.
local cli = require "arbor.cli"
local core = require "arbor.core"
local definition = require "arbor.definition"
local policy = require "arbor.policy"

local M = {}

local running -- the arbor.run in progress: {e, root, opts, script, args}

--- started(e, root, opts, script, args): arbor.run tells what it runs
-- (script: the file reload reads again, nil when there is none).
function M.started(e, root, opts, script, args)
  running = {e = e, root = root, opts = opts, script = script, args = args or {}}
end

--- current() -> the arbor.run in progress ({e, root, opts, script,
-- args}), or nil.
function M.current() return running end

--- stopped(): the arbor.run is over.
function M.stopped() running = nil end

-- ---- reading the script again -----------------------------------------------

local capture -- while a script is read again: what its arbor.run gave
local CAPTURED = setmetatable({}, {__tostring = function() return "arbor.run captured" end})

--- capturing() -> true while a script is read for a reload: its arbor.run
-- only records what it was given (M.captured).
function M.capturing() return capture ~= nil end

--- captured(root, opts): records arbor.run's arguments and unwinds the
-- script (what follows arbor.run runs when the tree stopped: not now).
function M.captured(root, opts)
  capture.root, capture.opts = root, opts or {}
  error(CAPTURED, 0)
end

--- load(path, args) -> root, opts | nil, err: runs the script at path
-- again, with args, for the root runnable and options it gives arbor.run
-- (or the runnable it returns).
function M.load(path, args)
  local chunk, err = loadfile(path)
  if not chunk then return nil, err end
  capture = {}
  local ok, res = pcall(chunk, table.unpack(args, 1, args.n or #args))
  local got = capture
  capture = nil
  if got.root then return got.root, got.opts end
  if not ok then return nil, "script error: " .. tostring(res) end
  if type(res) == "function" then return res, {} end
  return nil, "the script neither called arbor.run nor returned a root runnable"
end

-- ---- the plan -----------------------------------------------------------------

-- The options of arbor.run that are part of the root's definition; the
-- others belong to the process (a reload does not change them).
local function root_definition(root, opts)
  return {fn = root, opts = {policy = opts.policy}}
end

-- The names of arbor.run's options that differ (other than the root's
-- policy and the default policy, which a reload applies).
local function unapplied(old, new)
  local keys, out = {}, {}
  for k in pairs(old) do keys[k] = true end
  for k in pairs(new) do keys[k] = true end
  for k in pairs(keys) do
    if k ~= "policy" and k ~= "default_policy"
        and definition.text(old[k]) ~= definition.text(new[k]) then
      out[#out + 1] = k
    end
  end
  table.sort(out)
  return out
end

local function children_by_name(view)
  local t = {}
  for _, c in ipairs(view.children) do t[c.name] = c end
  return t
end

-- What of each of view's children an adopting parent cannot change in
-- place: whether it is a group member, its lifecycle and sidecar flag.
local function shapes(e, view)
  local t = {}
  for _, c in ipairs(view.children) do
    local d = e:definition(c.dn)
    t[c.name] = {member = d and d.member or false,
      text = string.format("%s/%s/%s", tostring(d and d.member), c.lifecycle, tostring(c.sidecar))}
  end
  return t
end

-- true when a new incarnation of the parent can adopt its children: those
-- in both trees keep their shape, and no group gains or loses a member.
local function adoptable(live, ov, new, nv)
  local old, fresh = shapes(live, ov), shapes(new, nv)
  for name, o in pairs(old) do
    local f = fresh[name]
    if (f and f.text ~= o.text) or (not f and o.member) then return false end
  end
  for name, f in pairs(fresh) do
    if f.member and not old[name] then return false end
  end
  return true
end

-- What a node the reload keeps runs while the new tree is built: it
-- signals healthy (and done, for a prestart or poststart job, so gates open
-- as they did) instead of running its code again, and starts no children
-- (it keeps its running subtree).
local function stand_in(opts)
  if type(opts) == "table" and (opts.lifecycle == "prestart" or opts.lifecycle == "poststart")
      and not opts.sidecar then
    return function(ctx) ctx:signal("healthy") ctx:signal("done") end
  end
  return function(ctx) ctx:signal("healthy") ctx:wait() end
end

--- build(live, root, opts [, limit]) -> engine, errors, kept: the new
-- tree of root and opts built on a check engine (arbor.cli.build, within
-- limit seconds when given), where every node
-- whose running counterpart in the engine `live` has the same definition,
-- or is a job its parent's coordinator finished with (it does not run
-- again in this incarnation of its parent), runs a stand-in, not its code:
-- a migration a reload keeps does not run to build the plan; kept: those
-- DNs.
function M.build(live, root, opts, limit)
  local kept = {}
  local e, errors = cli.build(root, opts, function(dn, fn, o)
    local d = live:definition(dn)
    if d and (d.finished or definition.same(d.fn, d.opts, fn, o)) then
      kept[dn] = true
      return stand_in(o)
    end
  end, limit)
  return e, errors, kept
end

--- plan(live, new, old_root, new_root [, kept]) -> {steps = {{dn, action,
-- why}...}, whole = {dn = "restart"}, counts = {action = n}}: what
-- applying the tree built on the engine `new` to the running engine `live`
-- does; old_root and new_root: the root's definitions ({fn, opts}); kept:
-- the DNs M.build found unchanged. Actions: keep, reload (a new
-- incarnation adopts the children), restart, stop, start.
function M.plan(live, new, old_root, new_root, kept)
  kept = kept or {}
  local steps, whole, counts = {}, {}, {}
  local function add(dn, action, why)
    steps[#steps + 1] = {dn = dn, action = action, why = why}
    counts[action] = (counts[action] or 0) + 1
  end
  local function subtree(view, action)
    add(view.dn, action)
    for _, c in ipairs(view.children) do subtree(c, action) end
  end
  local function walk(ov, nv, forced)
    if not nv then return subtree(ov, "stop") end
    if not ov then return subtree(nv, "start") end
    local od = ov.dn == "root" and old_root or live:definition(ov.dn)
    local nd = nv.dn == "root" and new_root or new:definition(nv.dn)
    local action, why
    if forced then
      action, why = "restart", "its parent restarts"
    elseif kept[ov.dn] then
      return subtree(ov, "keep")
    else
      why = definition.why(od.fn, od.opts, nd.fn, nd.opts)
      if not why then return subtree(ov, "keep") end
      local runs = ov.state == "NEW" or ov.state == "HEALTHY" or ov.state == "DONE"
      if runs and #ov.children > 0 and adoptable(live, ov, new, nv) then
        action = "reload"
      else
        action = "restart"
        whole[ov.dn] = "restart"
      end
    end
    add(ov.dn, action, why)
    local old, fresh = children_by_name(ov), children_by_name(nv)
    for _, c in ipairs(nv.children) do walk(old[c.name], c, action == "restart") end
    for _, c in ipairs(ov.children) do
      if not fresh[c.name] then walk(c, nil, action == "restart") end
    end
  end
  walk(live:tree("root"), new:tree("root"), false)
  return {steps = steps, whole = whole, counts = counts}
end

--- apply(e, plan, root, root_policy) -> true | nil, err: carries out plan
-- (M.plan) on the engine e, whose root's runnable becomes root and its
-- policy root_policy (nil: the default); the rest happens as the root's new
-- incarnation runs (its children are adopted in its first step).
function M.apply(e, plan, root, root_policy)
  if plan.steps[1].action == "keep" then return true end
  e:reload_plan(plan.whole)
  local ok, err = e:reload("root", root, root_policy, plan.whole.root ~= nil)
  if ok == nil then return nil, err end
  return true
end

-- ---- reload -------------------------------------------------------------------

--- Seconds a reload may read the script, and then build its tree, when
-- the tree has no runaway limit (arbor.run's runaway = 0).
M.DEFAULT_BUDGET = 10

--- budget(e) -> seconds: how long reading the script, and then building
-- its tree, may hold the loop of the engine e: its runaway limit
-- (arbor.run's `runaway`, 10 s by default), else M.DEFAULT_BUDGET. Past
-- it the reload fails and the tree runs on untouched.
function M.budget(e)
  local r = e:runaway()
  return r > 0 and r or M.DEFAULT_BUDGET
end

local ORDER = {"keep", "reload", "restart", "stop", "start"}

-- The plan and what was not applied, as text.
local function describe(r)
  local parts = {}
  for _, a in ipairs(ORDER) do
    if r.counts[a] then parts[#parts + 1] = string.format("%d %s", r.counts[a], a) end
  end
  local out = {string.format("reload %s%s: %s (%.1f ms)", r.script,
    r.dry_run and " --dry-run (nothing done)" or "", table.concat(parts, ", "), r.seconds * 1000)}
  for _, s in ipairs(r.steps) do
    out[#out + 1] = string.format("  %-8s %s%s", s.action, s.dn, s.why and "  (" .. s.why .. ")" or "")
  end
  if #r.unapplied > 0 then
    out[#out + 1] = "not applied (arbor.run options a reload does not change; restart arbor): "
      .. table.concat(r.unapplied, ", ")
  end
  return table.concat(out, "\n")
end

--- reload{dry_run = bool} -> result | nil, err: reads the script again and
-- applies it (or, dry_run, only plans). result: {script, dry_run, steps,
-- counts, unapplied, seconds, text}; seconds: how long reading, building,
-- planning and applying took (the loop, and so the control socket, waited
-- that long; the adoptions follow in the root's first step). err when nothing was done: no script, a reload
-- under way, the script failed to load or its tree met errors (each with
-- its DN and message).
function M.reload(opts)
  opts = opts or {}
  if opts.dry_run ~= nil and type(opts.dry_run) ~= "boolean" then
    error("arbor.reload.reload: dry_run must be a boolean, got " .. type(opts.dry_run), 2)
  end
  local t0 = core.hrtime()
  if not running then return nil, "reload: no tree is running" end
  local e = running.e
  if not running.script then
    return nil, "reload: no script to read again (run the tree with `arbor run SCRIPT`)"
  end
  if e:reloading() then
    return nil, "reload: a reload is under way (its nodes are still adopting their children)"
  end
  local limit = M.budget(e)
  local ok, root, ropts = core.bounded(limit, "the script ran %d ms without yielding (limit %d ms)",
    M.load, running.script, running.args)
  capture = nil -- a load stopped at its bound did not unwind it
  if not ok then root, ropts = nil, root end
  if not root then
    return nil, string.format("reload %s: not applied: %s; the running tree is unchanged",
      running.script, ropts)
  end
  local check, errors, kept = M.build(e, root, ropts, limit)
  if #errors > 0 then
    cli.close_built(check)
    if #errors == 1 and errors[1].passed then
      return nil, string.format("reload %s: not applied: %s; the running tree is unchanged",
        running.script, errors[#errors].reason)
    end
    local out = {string.format("reload %s: not applied: the new tree met %d error(s) "
      .. "(arbor check %s shows them); the running tree is unchanged:", running.script, #errors,
      running.script)}
    for _, x in ipairs(errors) do out[#out + 1] = string.format("  %s: %s", x.dn, x.reason) end
    return nil, table.concat(out, "\n")
  end
  local old_root = root_definition(running.root, running.opts)
  local new_root = root_definition(root, ropts)
  local plan = M.plan(e, check, old_root, new_root, kept)
  cli.close_built(check)
  local r = {script = running.script, dry_run = opts.dry_run or false, steps = plan.steps,
    counts = plan.counts, unapplied = unapplied(running.opts, ropts)}
  if not r.dry_run then
    local default = ropts.default_policy or policy.exponential()
    if definition.text(running.opts.default_policy) ~= definition.text(ropts.default_policy) then
      e:set_default_policy(default)
    end
    local ok, err = M.apply(e, plan, root, cli.root_policy(ropts.policy, default))
    if ok == nil then return nil, err end
    running.root, running.opts = root, ropts
  end
  r.seconds = (core.hrtime() - t0) / 1e9
  r.text = describe(r)
  return r
end

--- on_hangup() -> text: SIGHUP's reload, as the one line the root logs.
function M.on_hangup()
  local r, err = M.reload()
  local text = r and r.text or err
  return (text:gsub("\n%s*", "; "))
end

return M
