--- arbor.policy: stock restart policies (P1-P5).
--
-- A policy is a plain Lua function of one table (P1: dn, err, consecutive,
-- restarts, failures, uptime, now) returning a decision (P2): a number of
-- seconds >= 0 to restart after, "stop", or "escalate".
local core = require "arbor.core"

local M = {}

--- A number in [0, 1) from the engine deciding now (seeded, P5), or from
-- math.random outside an engine.
function M.random()
  local e = core.current()
  if e then return e:random() end
  return math.random()
end

local function check_number(fname, opts, key, default, min, max)
  local v = opts[key]
  if v == nil then return default end
  if type(v) ~= "number" or v ~= v or v == math.huge or v == -math.huge
      or v < min or (max and v > max) then
    error(string.format("arbor.policy.%s: '%s' must be a finite number %s%s, got %s",
      fname, key, ">= " .. min, max and (" and <= " .. max) or "",
      tostring(v)), 3)
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
        tostring(k)), 3)
    end
  end
  return opts
end

--- Capped exponential backoff with jitter, the default policy (P4).
-- The n-th failure in a row waits initial * multiplier^(n-1) seconds, capped
-- at max, then spread uniformly by +-jitter of itself. The count resets when
-- the node becomes HEALTHY or DONE.
-- @param opts {initial=0.5, multiplier=1.5, max=60, jitter=0.5}
function M.exponential(opts)
  opts = check_keys("exponential", opts,
    {initial = true, multiplier = true, max = true, jitter = true})
  local initial = check_number("exponential", opts, "initial", 0.5, 0)
  local multiplier = check_number("exponential", opts, "multiplier", 1.5, 1)
  local max = check_number("exponential", opts, "max", 60, 0)
  local jitter = check_number("exponential", opts, "jitter", 0.5, 0, 1)
  if max < initial then
    error("arbor.policy.exponential: 'max' must be >= 'initial'", 2)
  end
  return function(ev)
    local d = initial * multiplier ^ ((ev.consecutive or 1) - 1)
    if d > max then d = max end
    if jitter > 0 then d = d * (1 - jitter + 2 * jitter * M.random()) end
    return d
  end
end

--- Always restart after the same delay.
function M.constant(seconds)
  if type(seconds) ~= "number" or seconds ~= seconds or seconds < 0
      or seconds == math.huge then
    error("arbor.policy.constant(seconds): want a finite number >= 0, got "
      .. tostring(seconds), 2)
  end
  return function() return seconds end
end

--- Restart at once.
function M.immediate() return 0 end

--- Never restart: the node stays DEAD; its parent is not affected.
function M.never() return "stop" end

return M
