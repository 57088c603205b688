--- arbor.policy: stock restart policies (P1-P6), and tools to see what a
-- policy will do before deploying it (simulate, curve, plot).
--
-- A policy is a plain Lua function of one table (P1: dn, err, consecutive,
-- restarts, failures, failure, uptime, healthy, returned, memory, now)
-- returning a decision (P2): a number of seconds >= 0 to restart after,
-- "stop", or "escalate". Inside chain(), a policy that is followed by
-- another one is called with a second argument `pass` = true, and may return
-- nil to let the next one decide (intensity and transient do).
-- docs/policies.md describes each of them.
local core = require "arbor.core"

local M = {}

local sim_random -- the seeded generator of a simulate() in progress

--- A number in [0, 1) from the engine deciding now (seeded, P5), from the
-- simulation in progress, or from math.random outside both.
function M.random()
  if sim_random then return sim_random() end
  local e = core.current()
  if e then return e:random() end
  return math.random()
end

local function bad_number(v)
  return type(v) ~= "number" or v ~= v or v == math.huge or v == -math.huge
end

-- opts[key], or default; raises naming the parameter unless it is a finite
-- number >= min (> min when `above`) and <= max.
local function check_number(fname, opts, key, default, min, max, above)
  local v = opts[key]
  if v == nil then return default end
  if bad_number(v) or v < min or (above and v == min) or (max and v > max) then
    error(string.format("arbor.policy.%s: '%s' must be a finite number %s%s, got %s",
      fname, key, (above and "> " or ">= ") .. min,
      max and (" and <= " .. max) or "", core.cut(v)), 3)
  end
  return v
end

local function check_keys(fname, opts, allowed)
  if opts == nil then return {} end
  if type(opts) ~= "table" then
    error(string.format("arbor.policy.%s: options must be a table, got %s",
      fname, type(opts)), 3)
  end
  for k in pairs(opts) do
    if not allowed[k] then
      error(string.format("arbor.policy.%s: unknown option '%s'", fname,
        core.cut(k)), 3)
    end
  end
  return opts
end

local function check_policy(fname, what, p)
  if type(p) ~= "function" then
    error(string.format("arbor.policy.%s: %s must be a policy (a function), got %s",
      fname, what, type(p)), 3)
  end
  return p
end

--- The memory of stock policies called by hand, on a plain table without
-- `memory` (a spec calling one): by dn. It lives in the module, which a
-- definition's text writes by its name: calling a policy by hand changes
-- no definition (docs/restore.md).
M.hand_memory = {}

-- Policies that keep state per node do it in ev.memory (kept by the engine
-- with the node, across restarts and policy swaps); called on a plain
-- table without one, in M.hand_memory.
local function memory_of(ev)
  local m = ev.memory
  if m then return m end
  local dn = ev.dn or ""
  m = M.hand_memory[dn]
  if not m then
    m = {}
    M.hand_memory[dn] = m
  end
  return m
end

-- The key of a stock policy's state in a node's memory: its kind and
-- parameters, nothing else. The same policy made again (by a reload, by a
-- parent that restarted, by the new arbor of a reexec) has the same key,
-- so it is the same definition and goes on with the same state.
local function state_key(kind, ...)
  local parts = {kind}
  for i = 1, select("#", ...) do
    local v = select(i, ...)
    parts[i + 1] = v == nil and "nil" or string.format("%.17g", v)
  end
  return table.concat(parts, "/")
end

--- Capped exponential backoff with jitter, the default policy (P4).
-- The n-th failure of a streak waits initial * multiplier^(n-1) seconds,
-- capped at max, then spread uniformly by +-jitter of itself. The streak
-- is ev.consecutive (it starts again after an incarnation that stayed
-- HEALTHY for the node's min_uptime, default 1 s, or ended DONE);
-- with reset_after, it resets only after an incarnation that stayed
-- HEALTHY for reset_after seconds (Kubernetes: 600).
-- @param opts {initial=0.5, multiplier=1.5, max=60, jitter=0.5, reset_after=nil}
function M.exponential(opts)
  opts = check_keys("exponential", opts,
    {initial = true, multiplier = true, max = true, jitter = true, reset_after = true})
  local initial = check_number("exponential", opts, "initial", 0.5, 0)
  local multiplier = check_number("exponential", opts, "multiplier", 1.5, 1)
  local max = check_number("exponential", opts, "max", 60, 0)
  local jitter = check_number("exponential", opts, "jitter", 0.5, 0, 1)
  local reset_after = check_number("exponential", opts, "reset_after", nil, 0)
  if max < initial then
    error("arbor.policy.exponential: 'max' must be >= 'initial'", 2)
  end
  local key = state_key("exponential", initial, multiplier, max, jitter, reset_after)
  local function streak(ev)
    if not reset_after then return ev.consecutive or 1 end
    local m = memory_of(ev)
    local s = m[key]
    if not s then
      s = {n = (ev.consecutive or 1) - 1}
      m[key] = s
    end
    if s.failure == nil or s.failure ~= ev.failure then
      s.failure = ev.failure
      if (ev.healthy or 0) >= reset_after then s.n = 0 end
      s.n = s.n + 1
    end
    return s.n
  end
  return function(ev)
    local d = initial * multiplier ^ (streak(ev) - 1)
    if d > max then d = max end
    if jitter > 0 then d = d * (1 - jitter + 2 * jitter * M.random()) end
    return d
  end
end

--- Always restart after the same delay.
function M.constant(seconds)
  if bad_number(seconds) or seconds < 0 then
    error("arbor.policy.constant(seconds): want a finite number >= 0, got "
      .. tostring(seconds), 2)
  end
  return function() return seconds end
end

-- A stock policy without parameters: p() makes the policy, like every
-- other constructor here; p itself is that policy too (the older spelling,
-- `policy = arbor.policy.immediate`), as the engine always calls a policy
-- with its event.
local function constructor(decision)
  local function policy(ev)
    if ev == nil then return policy end
    return decision
  end
  return policy
end

--- immediate(): restart at once.
M.immediate = constructor(0)

--- never(): never restart: the node stays DEAD; its parent is not affected.
M.never = constructor("stop")

-- ---- intensity ------------------------------------------------------------

-- Beyond this many failures in the window the engine's exact failure ring
-- (ARBOR_FAILURES times) no longer holds the window: a bucketed count is
-- kept in ev.memory instead.
local EXACT = 16

local count = core.intensity_count

local function exceeded(give_up, ev, pass)
  if type(give_up) == "function" then return give_up(ev, pass) end
  return give_up
end

-- Called on a plain table without `memory` (a test calling the policy by
-- hand): the windows of such calls are kept in M.hand_memory, by dn.
local function count_plain(ev, key, period)
  local copy = setmetatable({memory = memory_of(ev)}, {__index = ev})
  return count(copy, key, period)
end

--- OTP's restart intensity: more than `max` failures within `period`
-- seconds (the failure being decided included) and the policy gives up the
-- way `exceeded` says: "escalate" (the default), "stop", or another policy
-- that decides instead (a long pause, say); `["then"]` is its older
-- spelling. Within the limit it lets the next
-- policy of a chain decide, or, used alone, restarts at once (as OTP does).
-- O(1) per decision whatever the rate: exact from the engine's failure ring
-- for max < 16; above, counted in 16 buckets of period/16 seconds
-- (docs/policies.md).
function M.intensity(opts)
  if type(opts) ~= "table" then
    error("arbor.policy.intensity: options must be a table {max =, period =}, got "
      .. type(opts), 2)
  end
  check_keys("intensity", opts, {max = true, period = true, exceeded = true,
    ["then"] = true})
  if opts.exceeded ~= nil and opts["then"] ~= nil then
    error("arbor.policy.intensity: give 'exceeded' or its older spelling 'then', not both", 2)
  end
  if opts.max == nil then error("arbor.policy.intensity: 'max' is required", 2) end
  if opts.period == nil then
    error("arbor.policy.intensity: 'period' is required", 2)
  end
  local max = check_number("intensity", opts, "max", nil, 0)
  local period = check_number("intensity", opts, "period", nil, 0, nil, true)
  local option = opts["then"] ~= nil and "then" or "exceeded"
  local give_up = opts[option]
  if give_up == nil then give_up = "escalate" end
  if give_up ~= "escalate" and give_up ~= "stop" and type(give_up) ~= "function" then
    error("arbor.policy.intensity: '" .. option .. "' must be \"escalate\", \"stop\" "
      .. "or a policy (a function), got " .. core.cut(give_up), 2)
  end
  if max < EXACT then
    local need = math.floor(max) + 1 -- failures that exceed the limit
    return function(ev, pass)
      local fs = ev.failures
      local n = fs and #fs or 1
      local now = ev.now or 0
      if n >= need and (need == 1 or now - fs[n - need + 1] <= period) then
        return exceeded(give_up, ev, pass)
      end
      if pass then return nil end
      return 0
    end
  end
  -- The engine keeps the window with the node's failure history, under its
  -- period, so a new intensity of the same period (a swap, T13) counts the
  -- failures the old one saw; another period starts from the engine's ring.
  -- One closure per instance: a tree may have one per node.
  local key = "intensity/" .. period
  return function(ev, pass)
    local total = count(ev, key, period) or count_plain(ev, key, period)
    if total > max then return exceeded(give_up, ev, pass) end
    if pass then return nil end
    return 0
  end
end

--- suture's decaying failure counter: every failure adds 1 to a count that
-- halves every half_life seconds; while the count is <= threshold the node
-- restarts at once, above it waits `pause` seconds and the count starts
-- over. Defaults are suture's: threshold 5, half_life 30, pause 15.
function M.decaying(opts)
  opts = check_keys("decaying", opts,
    {threshold = true, half_life = true, pause = true})
  local threshold = check_number("decaying", opts, "threshold", 5, 0)
  local half_life = check_number("decaying", opts, "half_life", 30, 0, nil, true)
  local pause = check_number("decaying", opts, "pause", 15, 0)
  local key = state_key("decaying", threshold, half_life, pause)
  return function(ev)
    local m = memory_of(ev)
    local now = ev.now or 0
    local s = m[key]
    if not s then
      s = {count = 0, last = now}
      m[key] = s
    end
    if s.failure == nil or s.failure ~= ev.failure then
      s.failure = ev.failure
      s.count = s.count * 0.5 ^ ((now - s.last) / half_life) + 1
      s.last = now
      s.paused = s.count > threshold
      if s.paused then s.count = 0 end
    end
    return s.paused and pause or 0
  end
end

--- chain(p1, p2, ...): the first policy that does not return nil decides.
-- Every policy but the last is called with pass = true; the last gets the
-- chain's own pass, so chains nest.
function M.chain(...)
  local ps = table.pack(...)
  if ps.n == 0 then error("arbor.policy.chain: want at least one policy", 2) end
  for i = 1, ps.n do check_policy("chain", "argument #" .. i, ps[i]) end
  local n = ps.n
  if n == 2 then
    local a, b = ps[1], ps[2]
    return function(ev, pass)
      local d = a(ev, true)
      if d ~= nil then return d end
      return b(ev, pass)
    end
  end
  return function(ev, pass)
    for i = 1, n - 1 do
      local d = ps[i](ev, true)
      if d ~= nil then return d end
    end
    return ps[n](ev, pass)
  end
end

--- transient(policy): OTP's transient restart type. After an error the
-- policy decides; after a clean return without done (ev.returned) the node
-- is left DEAD ("stop").
function M.transient(p)
  check_policy("transient", "its argument", p)
  return function(ev, pass)
    if ev.returned then return "stop" end
    return p(ev, pass)
  end
end

-- ---- simulate, curve, plot (P6) --------------------------------------------

-- The engine's generator (xorshift64*, src/loop.c) and its draw
-- (l_engine.c): simulate(p, trace, {seed = s}) draws the same jitter as a
-- harness made with testing.new{seed = s} whose only random draws are that
-- policy's.
local function xorshift(seed)
  local x = seed ~= 0 and seed or 0x9E3779B97F4A7C15
  return function()
    x = x ~ (x >> 12)
    x = x ~ (x << 25)
    x = x ~ (x >> 27)
    return ((x * 2685821657736338717) >> 11) * 0x1.0p-53
  end
end

local function sim_error(msg) error("arbor.policy.simulate: " .. msg, 3) end

local sim_options = {seed = true, dn = true, start = true, err = true, min_uptime = true}

-- The seconds a node stays HEALTHY to count as up when its min_uptime is
-- not set: the engine's (ARBOR_MIN_UPTIME, src/engine/engine.h).
local MIN_UPTIME = 1

--- simulate(policy, failures [, opts]): the decisions `policy` makes for a
-- trace of failures, without an engine. `failures` is a list of failure
-- times (seconds, increasing), or {uptimes = {...}}: each incarnation runs
-- that many seconds and fails, and restarts when the policy said. An entry
-- may be a table {time = | uptime =, healthy = seconds HEALTHY before the
-- failure, returned = true (a clean return), err = message}. Returns a list
-- of {n, time, decision, delay, restart_at, consecutive}; it ends at the
-- first "stop" or "escalate". opts: seed (jitter, default 1), dn, start
-- (time of the first start, default 0), err, min_uptime (the node's: an
-- entry HEALTHY that long starts the streak again, as in the engine;
-- default 1).
function M.simulate(p, failures, opts)
  if type(p) ~= "function" then sim_error("the policy must be a function, got " .. type(p)) end
  if type(failures) ~= "table" then
    sim_error("failures must be a list of times or {uptimes = {...}}, got " .. type(failures))
  end
  opts = opts or {}
  if type(opts) ~= "table" then sim_error("opts must be a table, got " .. type(opts)) end
  for k in pairs(opts) do
    if not sim_options[k] then sim_error("unknown option '" .. core.cut(k) .. "'") end
  end
  local list, by_uptime = failures, false
  if failures.uptimes ~= nil then
    if type(failures.uptimes) ~= "table" then
      sim_error("'uptimes' must be a list, got " .. type(failures.uptimes))
    end
    list, by_uptime = failures.uptimes, true
  end
  local seed = opts.seed or 1
  if math.type(seed) ~= "integer" then sim_error("'seed' must be an integer") end
  local min_uptime = opts.min_uptime or MIN_UPTIME
  if bad_number(min_uptime) or min_uptime < 0 then
    sim_error("'min_uptime' must be a finite number >= 0, got " .. core.cut(min_uptime))
  end
  local memory, ring, out = {}, {}, {}
  local started = opts.start or 0
  local consecutive, restarts = 0, 0
  local saved = sim_random
  sim_random = xorshift(seed)
  local ok, err = pcall(function()
    for i, entry in ipairs(list) do
      local spec = type(entry) == "table" and entry or nil
      local v = spec and (by_uptime and spec.uptime or spec.time) or entry
      if bad_number(v) or (by_uptime and v < 0) then
        sim_error(string.format("failure %d: want a finite %s, got %s", i,
          by_uptime and "uptime >= 0" or "time", tostring(v)))
      end
      local t = by_uptime and started + v or v
      if not by_uptime and t < started then
        sim_error(string.format("failure %d at %g comes before the restart at %g",
          i, t, started))
      end
      local healthy = spec and spec.healthy
      -- up for min_uptime: the streak starts again (a plain entry was
      -- never HEALTHY)
      consecutive = healthy and healthy > 0 and healthy >= min_uptime and 1
        or consecutive + 1
      healthy = healthy or 0
      ring[#ring + 1] = t
      if #ring > EXACT then table.remove(ring, 1) end
      local ev = {dn = opts.dn or "root.sim", err = spec and spec.err or opts.err or "simulated failure",
        consecutive = consecutive, restarts = restarts, failures = table.move(ring, 1, #ring, 1, {}),
        failure = i, uptime = t - started, healthy = healthy,
        returned = spec and spec.returned or false, memory = memory, now = t}
      local d = p(ev)
      local r = {n = i, time = t, decision = d, consecutive = consecutive}
      out[#out + 1] = r
      if type(d) == "number" and d >= 0 and not bad_number(d) then
        r.delay = d
        r.restart_at = t + d
        started = t + d
        restarts = restarts + 1
      elseif d == "stop" or d == "escalate" then
        return
      else
        sim_error(string.format("failure %d: the policy returned %s (want a number "
          .. ">= 0, \"stop\" or \"escalate\")", i, tostring(d)))
      end
    end
  end)
  sim_random = saved
  if not ok then error(err, 0) end
  return out
end

--- curve(policy, n [, opts]): the first n delays for a node that fails as
-- soon as it starts; when the policy gives up first, the list ends with
-- its "stop" or "escalate".
function M.curve(p, n, opts)
  if math.type(n) ~= "integer" or n < 0 then
    error("arbor.policy.curve(policy, n): n must be an integer >= 0, got " .. core.cut(n), 2)
  end
  local uptimes = {}
  for i = 1, n do uptimes[i] = 0 end
  local ok, res = pcall(M.simulate, p, {uptimes = uptimes}, opts)
  if not ok then error(res, 2) end
  local out = {}
  for i, r in ipairs(res) do out[i] = r.delay or r.decision end
  return out
end

--- plot(policy_or_delays [, n]): a text chart of a curve, one line per
-- failure: its number, a bar, the delay. A policy is plotted with curve(p,
-- n or 12).
function M.plot(x, n, width)
  local ys = x
  if type(x) == "function" then ys = M.curve(x, n or 12) end
  if type(ys) ~= "table" then
    error("arbor.policy.plot: want a policy or a list of delays, got " .. type(x), 2)
  end
  width = width or 40
  local top = 0
  for _, y in ipairs(ys) do
    if type(y) == "number" and y > top then top = y end
  end
  local lines = {}
  for i, y in ipairs(ys) do
    if type(y) == "number" then
      local bar = top > 0 and math.floor(y / top * width + 0.5) or 0
      lines[i] = string.format("%3d | %-" .. width .. "s %.3fs", i, string.rep("#", bar), y)
    else
      lines[i] = string.format("%3d | %s", i, tostring(y))
    end
  end
  return table.concat(lines, "\n")
end

return M
