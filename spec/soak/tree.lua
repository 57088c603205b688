-- The soak's supervisor (scripts/soak runs it with `arbor run`): a tree of a
-- few hundred Lua nodes and a few dozen processes in independent units under
-- the root, with mixed policies, group strategies and lifecycle children.
--
-- Environment: SOAK_DIR (where it writes), SOAK_SEED (the layout), SOAK_UNITS
-- (how many units). It writes:
--   layout     one line per node: dn, unit (root's child it is under), role
--              (head, worker, idle, sleeper, job, proc, oneshot, execer,
--              stubborn: the `bodies` below)
--   events     every event, from the engine's own subscriber: seq, kind, dn,
--              incarnation, from, to, reason (tab-separated)
--   counts     after the stop: the last number each Lua writer logged
--   led/<id>   each process's last numbered line (the writer's ledger)
-- Every runnable logs numbered lines "L <writer> <n>"; a Lua writer is its
-- DN (its count runs on across incarnations), a process is <dn>#<n>, the
-- DN's n-th start in the run (incarnation numbers start again at 1 when a
-- parent's restart makes its children anew).
--
-- The driver (spec/soak/driver.lua) injects faults through `arbor ctl eval`
-- calling SOAK.inject, which checks and acts in one evaluation, on the
-- engine's thread: a fault is only counted when its target was running.
local arbor = require "arbor"
local core = require "arbor.core"
local P = arbor.policy

local dir = assert(os.getenv("SOAK_DIR"), "SOAK_DIR is not set")
local seed = tonumber(os.getenv("SOAK_SEED") or "1")
local nunits = tonumber(os.getenv("SOAK_UNITS") or "24")
local systemd = os.execute("command -v systemd-notify >/dev/null 2>&1")

-- What the driver reaches through `arbor ctl eval`.
SOAK = {}

-- ---- the programs ----------------------------------------------------------

-- A process writes "L <id> <n>" on stdout, then n into its ledger, so a line
-- in the ledger was written to the pipe before.
local SH_WRITER = [[i=0; while :; do i=$((i+1)); echo "L $1 $i"; echo $i > "$2"; sleep $3; done]]
local PERL_WRITER = [[$|=1; my ($id, $led, $iv) = @ARGV; for (my $i = 1; ; $i++) {
  print "L $id $i\n"; open(my $f, ">", $led) or die "$led: $!"; print $f "$i\n";
  close $f; select(undef, undef, undef, $iv) }]]
local READY = {
  notify = [[echo ready >&$ARBOR_NOTIFY_FD; ]],
  systemd = [[systemd-notify --ready; ]],
}

-- argv of a writer program; `kind` is "sh" or "perl"; ready as arbor.exec's.
-- "group" starts a background sleep in the process group first.
local function writer_argv(kind, ready, id, interval, group)
  local led = dir .. "/led/" .. id
  local pre = (READY[ready] or "") .. (group and "sleep 1000 & " or "")
  if kind == "perl" then
    return {"sh", "-c", pre .. 'exec perl -e "$0" "$@"', PERL_WRITER, id, led,
      tostring(interval)}
  end
  return {"sh", "-c", pre .. SH_WRITER, "sh", id, led, tostring(interval)}
end

-- Options of every process: no sanitizer preloaded into sh and perl.
local function exec_opts(extra)
  local o = {env = {LD_PRELOAD = false}, grace = 2}
  for k, v in pairs(extra or {}) do o[k] = v end
  return o
end

-- ---- policies ----------------------------------------------------------------

local policies = {
  exp = function() return P.exponential{initial = 0.05, max = 1, jitter = 0.3} end,
  const = function() return P.constant(0.2) end,
  imm = function() return P.immediate end,
  decay = function() return P.decaying{threshold = 3, half_life = 5, pause = 1} end,
  chained = function()
    return P.chain(P.intensity{max = 5, period = 5, ["then"] = P.constant(1)},
      P.constant(0.1))
  end,
  transient = function() return P.transient(P.constant(0.3)) end,
  never = function() return P.never end,
  give_up = function() return P.intensity{max = 3, period = 10, ["then"] = "stop"} end,
  escalate = function() return P.intensity{max = 3, period = 10, ["then"] = "escalate"} end,
}
-- Unit heads never give up or escalate (the units stay independent of each
-- other and of the root); members may.
local HEAD_POLICIES = {"exp", "const", "imm", "decay", "chained", "transient"}
local MEMBER_POLICIES = {"exp", "const", "imm", "decay", "chained", "transient",
  "never", "give_up", "escalate"}

-- ---- the layout ------------------------------------------------------------

math.randomseed(seed)
local function pick(t) return t[math.random(#t)] end

local nodes = {}   -- dn -> spec: {dn, unit, role, policy, children, ...}
local order = {}   -- dns in creation order

-- spec(parent_dn, name, role [, fields]) -> spec
local function spec(parent, name, role, t)
  t = t or {}
  t.dn = parent .. "." .. name
  t.name = name
  t.role = role
  t.unit = t.dn:match("^root%.([^.]+)")
  t.children = t.children or {}
  t.policy = t.policy or pick(t.head and HEAD_POLICIES or MEMBER_POLICIES)
  t.interval = 0.3 + math.random() * 1.2
  nodes[t.dn] = t
  order[#order + 1] = t.dn
  return t
end

local function add(parent, name, role, t)
  local s = spec(parent.dn, name, role, t)
  parent.children[#parent.children + 1] = s
  return s
end

local function proc_fields(t)
  t.program = pick{"sh", "perl"}
  t.ready = t.ready or pick{"spawn", "notify", systemd and "systemd" or "notify"}
  return t
end

local builders = {}

-- A group under a head: Lua workers and processes, a strategy, maybe ordered.
function builders.group(u)
  local g = {strategy = pick{"one_for_all", "rest_for_one", "one_for_one"},
    ordered = math.random() < 0.3, policy = pick(MEMBER_POLICIES)}
  u.group = g
  for i = 1, 3 do add(u, "m" .. i, "worker", {in_group = true}) end
  for i = 1, 2 do add(u, "p" .. i, "proc", proc_fields{in_group = true}) end
  add(u, "solo", "worker")
end

-- Lifecycle children: prestart job and sidecar, mains, poststart job and
-- sidecar, poststop.
function builders.lifecycle(u)
  add(u, "migrate", "oneshot", {lifecycle = "prestart"})
  if math.random() < 0.5 then
    add(u, "proxy", "proc", proc_fields{lifecycle = "prestart", sidecar = true,
      ready = "notify"})
  else
    add(u, "proxy", "worker", {lifecycle = "prestart", sidecar = true})
  end
  add(u, "app", "proc", proc_fields{ready = systemd and "systemd" or "notify"})
  add(u, "w1", "worker")
  add(u, "w2", "worker")
  add(u, "warmup", "job", {lifecycle = "poststart"})
  add(u, "agent", "worker", {lifecycle = "poststart", sidecar = true})
  add(u, "flush", "job", {lifecycle = "poststop"})
end

-- A chain of nested workers.
function builders.chain(u)
  local p = u
  for i = 1, 4 do p = add(p, "c" .. i, "worker") end
end

-- A Lua runnable supervising its own process (ctx:exec) with a background
-- child in the process group.
function builders.exec(u)
  add(u, "x", "execer", {program = pick{"sh", "perl"}})
  add(u, "y", "worker")
end

-- Many children: most wait, some log.
function builders.wide(u)
  for i = 1, 40 do
    add(u, "n" .. i, i % 4 == 0 and "worker" or pick{"idle", "sleeper"})
  end
end

local kinds = {"group", "lifecycle", "chain", "exec", "wide"}
local root = {dn = "root", children = {}}
for i = 1, nunits do
  local kind = kinds[(i - 1) % #kinds + 1]
  local u = add(root, kind:sub(1, 1) .. i, "head", {head = true})
  builders[kind](u)
end
-- One process that ignores SIGTERM, never faulted: the final stop needs a
-- SIGKILL for it (the exit status then says so, T12).
local stub = add(root, "stub", "head", {head = true, policy = "const"})
add(stub, "s", "stubborn", {policy = "const"})

-- ---- runnables -------------------------------------------------------------

local count = {}        -- Lua writer dn -> last number logged
-- dn -> ctx of its latest incarnation (weak: the harness pins no node)
SOAK.current = setmetatable({}, {__mode = "v"})
local procs = setmetatable({}, {__mode = "k"})   -- ctx -> process handle
local flags = setmetatable({}, {__mode = "k"})   -- ctx -> error to raise
local faulted = setmetatable({}, {__mode = "k"}) -- ctx -> fault number

local starts = {}       -- dn -> incarnations started, over all its nodes

local function writer_id(c) return c.dn .. "#" .. starts[c.dn] end

local function log_line(c)
  local n = (count[c.dn] or 0) + 1
  count[c.dn] = n
  c:log("L", c.dn, n)
end

-- Logs a numbered line every interval; raises the error a flag fault set.
local function work(c, s)
  while true do
    local err = flags[c]
    if err then error(err, 0) end
    log_line(c)
    c:sleep(s.interval)
  end
end

-- A ctx whose exec records the process handle (arbor.exec gives none back).
local function recording(c)
  return setmetatable({exec = function(_, argv, o)
    local p, err = c:exec(argv, o)
    procs[c] = p
    return p, err
  end}, {__index = function(_, k)
    local v = c[k]
    if type(v) == "function" then return function(_, ...) return v(c, ...) end end
    return v
  end})
end

local make -- make(s) -> a runnable of spec s (its program as it is now)

local function start_children(c, s)
  if s.group then
    local members = {}
    for _, k in ipairs(s.children) do
      if k.in_group then members[k.name] = make(k) end
    end
    c:group(members, {strategy = s.group.strategy, ordered = s.group.ordered,
      policy = policies[s.group.policy]()})
  end
  for _, k in ipairs(s.children) do
    if not k.in_group then
      c:run(k.name, make(k), {policy = policies[k.policy](),
        lifecycle = k.lifecycle, sidecar = k.sidecar})
    end
  end
end

local bodies = {}

function bodies.head(c, s)
  start_children(c, s)
  c:signal("healthy")
  work(c, s)
end
bodies.worker = bodies.head

function bodies.idle(c)
  c:signal("healthy")
  c:wait()
end

function bodies.sleeper(c, s)
  c:signal("healthy")
  while true do c:sleep(s.interval * 3) end
end

function bodies.job(c)
  c:signal("healthy")
  log_line(c)
  c:signal("done")
end

local function process(c, s, extra)
  local id = writer_id(c)
  local argv = writer_argv(s.program or "sh", s.ready, id, s.interval / 3, false)
  return arbor.exec(argv, exec_opts(extra))(recording(c))
end

function bodies.proc(c, s) return process(c, s, {ready = s.ready}) end

function bodies.oneshot(c)
  local id = writer_id(c)
  local led = dir .. "/led/" .. id
  return arbor.exec({"sh", "-c", 'echo "L $1 1"; echo 1 > "$2"', "sh", id, led},
    exec_opts{oneshot = true})(recording(c))
end

function bodies.execer(c, s)
  local id = writer_id(c)
  local p = assert(c:exec(writer_argv(s.program, "spawn", id, s.interval / 3, true),
    exec_opts()))
  procs[c] = p
  c:signal("healthy")
  local _, _, how = p:wait()
  error("writer " .. how, 0)
end

function bodies.stubborn(c)
  return arbor.exec({"sh", "-c", "trap '' TERM; while :; do sleep 1; done"},
    exec_opts{grace = 1})(recording(c))
end

function make(s)
  local body = bodies[s.role]
  return function(c)
    starts[c.dn] = (starts[c.dn] or 0) + 1
    SOAK.current[c.dn] = c
    return body(c, s)
  end
end

-- ---- fault injection (called by the driver through arbor ctl eval) ---------

local outstanding = {}   -- dn -> {inc, k}: a terminal fault not yet ended

local function last_seq()
  local t = arbor.events(1)
  return t[1] and t[1].seq or 0
end

local TERMINAL = {kill = true, term = true, fail = true, flag = true,
  restart = true, stop = true, swap_restart = true}
local SIGNALED = {kill = true, term = true, stopcont = true}
local SIGNALABLE = {proc = true, execer = true}
local FLAGGABLE = {head = true, worker = true}

-- The node view of dn with its current, started, not canceled incarnation,
-- or nil and why not.
local function live(dn)
  local n = arbor.node(dn)
  if not n then return nil, "gone" end
  if not n.running then return nil, "not-running" end
  if n.canceled then return nil, "canceled" end
  local c = SOAK.current[dn]
  if not c or c.incarnation ~= n.incarnation or c:canceled() then
    return nil, "not-started"
  end
  return n, c
end

-- Brings back a node that is down for good: held by a stop fault or given
-- up by its policy. r in [0, 1) picks where the search starts.
local function revive(r)
  local first = math.floor(r * #order) + 1
  for i = 0, #order - 1 do
    local dn = order[(first + i - 1) % #order + 1]
    local n = arbor.node(dn)
    if n and n.held and not n.running then
      local seq, inc = last_seq(), n.incarnation
      local ok, err = pcall(n.restart, n)
      if not ok then return "skip refused " .. dn .. ": " .. tostring(err) end
      return string.format("ok %s %d %d", dn, inc, seq)
    end
  end
  return "skip none-held"
end

--- SOAK.inject(k, kind, dn, r) -> "ok <inc> <seq> [<pid>]" | "skip <why>".
-- Checks that the target can take the fault and injects it, in one
-- evaluation. seq is the last event's before the fault; pid the process to
-- signal (the driver signals it). r in [0, 1) chooses within a kind.
function SOAK.inject(k, kind, dn, r)
  if kind == "revive" then return revive(r) end
  local s = nodes[dn]
  if not s or s.unit == "stub" then return "skip not-a-target" end
  local seq = last_seq()
  local n, c = arbor.node(dn), nil
  if TERMINAL[kind] or SIGNALED[kind] then
    n, c = live(dn)
    if not n then return "skip " .. c end
    if faulted[c] then return "skip faulted" end
  elseif not n then
    return "skip gone"
  end
  local inc, pid = n.incarnation, ""
  local act
  if SIGNALED[kind] then
    local p = procs[c]
    if not SIGNALABLE[s.role] or not p or p:status() ~= nil then
      return "skip no-process"
    end
    pid = " " .. p.pid
  elseif kind == "fail" then
    act = function() SOAK.engine:fail(dn, "soak fault #" .. k) end
  elseif kind == "flag" then
    if not FLAGGABLE[s.role] then return "skip not-a-worker" end
    act = function() flags[c] = "soak fault #" .. k end
  elseif kind == "restart" then
    act = function() n:restart() end
  elseif kind == "stop" then
    act = function() n:stop() end
  elseif kind == "swap" or kind == "swap_restart" then
    act = function()
      if s.role == "proc" or s.role == "execer" then
        s.program = s.program == "sh" and "perl" or "sh"
      end
      n:swap(make(s), {restart = kind == "swap_restart"})
    end
  elseif kind == "policy" then
    act = function()
      local pool = s.head and HEAD_POLICIES or MEMBER_POLICIES
      s.policy = pool[math.floor(r * #pool) + 1]
      n:set_policy(policies[s.policy]())
    end
  else
    return "skip unknown-kind"
  end
  if act then
    local ok, err = pcall(act)
    if not ok then return "skip refused: " .. tostring(err) end
  end
  if TERMINAL[kind] then
    faulted[c] = k
    outstanding[dn] = {inc = inc, k = k}
  end
  return string.format("ok %d %d%s", inc, seq, pid)
end

--- The terminal faults whose incarnation has not ended yet: "N dn#inc ...".
function SOAK.pending()
  local t = {}
  for dn, o in pairs(outstanding) do t[#t + 1] = dn .. "#" .. o.inc end
  table.sort(t)
  return #t .. " " .. table.concat(t, " ", 1, math.min(#t, 10))
end

--- The seq of the last event.
SOAK.last_seq = last_seq

-- ---- the event stream --------------------------------------------------------

local events = assert(io.open(dir .. "/events", "w"))
local flushed = 0
local ENDS = {DEAD = true, CANCELED = true, DONE = true}

local function on_event(ev)
  local reason = ev.reason and tostring(ev.reason):gsub("[\t\n]", " ") or ""
  events:write(ev.seq, "\t", ev.kind, "\t", ev.dn, "\t", ev.incarnation, "\t",
    ev.from or "", "\t", ev.to or "", "\t", reason, "\n")
  if ev.kind == "state" and ENDS[ev.to] and ev.from ~= ev.to then
    local o = outstanding[ev.dn]
    if o and o.inc == ev.incarnation then outstanding[ev.dn] = nil end
  end
  if ev.time - flushed > 1 then
    events:flush()
    flushed = ev.time
  end
end

-- ---- run ---------------------------------------------------------------------

local layout = assert(io.open(dir .. "/layout", "w"))
for _, dn in ipairs(order) do
  local s = nodes[dn]
  layout:write(dn, "\t", s.unit, "\t", s.role, "\n")
end
layout:close()

arbor.run(function(ctx)
  SOAK.engine = core.current()   -- for SOAK.inject's engine:fail
  start_children(ctx, root)
  ctx:signal("healthy")
  ctx:wait()
end, {seed = seed, on_event = on_event})

events:close()
local f = assert(io.open(dir .. "/counts", "w"))
for dn, n in pairs(count) do f:write(dn, "\t", n, "\n") end
f:close()
-- arbor run's exit status says how the run ended (arbor.run's result)
