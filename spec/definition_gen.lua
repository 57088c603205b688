-- Random supervisor scripts for spec/definition_random_spec.lua (issue 25):
-- gen(seed) -> root, opts, as a script gives them to arbor.run. A tree of
-- Lua supervisors whose children are `arbor.exec` services (argv, env,
-- options, readiness and liveness probes), Lua leaves and supervisors again, each with node options and a
-- stock policy with random parameters (every stock policy, chains and
-- transient ones included). Every value a node is defined by is made
-- inside its parent's runnable, as a script makes it, so a parent that
-- restarts makes them anew. Deterministic: the same seed, the same script.
local arbor = require "arbor"

local P = arbor.policy

-- A small xorshift generator: rnd(n) in 1..n.
local function generator(seed)
  local x = seed * 2654435761 % 4294967296 + 1
  return function(n)
    x = x ~ (x << 13)
    x = x ~ (x >> 7)
    x = x ~ (x << 17)
    return (x & 0x7fffffff) % n + 1
  end
end

-- A description of a policy, made into one by make_policy (the description
-- is plain data: the runnables capture it, and make the policy each time
-- they run).
local function policy_spec(rnd, depth)
  local k = rnd(depth > 1 and 9 or 11)
  if k == 1 then return nil end
  if k == 2 then return {"exponential"} end
  if k == 3 then
    return {"exponential", {initial = rnd(4) / 4, multiplier = 1 + rnd(3) / 2, max = 10 + rnd(50),
      jitter = (rnd(5) - 1) / 4, reset_after = rnd(2) == 1 and 60 * rnd(10) or nil}}
  end
  if k == 4 then return {"decaying", rnd(2) == 1 and {threshold = rnd(8), half_life = 10 * rnd(6), pause = rnd(20)} or nil} end
  if k == 5 then return {"intensity", {max = rnd(40) - 1, period = rnd(100), exceeded = ({"stop", "escalate"})[rnd(2)]}} end
  if k == 6 then return {"constant", rnd(30) / 10} end
  if k == 7 then return {({"immediate", "never"})[rnd(2)]} end
  if k == 8 then return {"bare_immediate"} end
  if k == 9 then return {"decaying"} end
  if k == 10 then return {"chain", policy_spec(rnd, depth + 1) or {"immediate"}, policy_spec(rnd, depth + 1) or {"exponential"}} end
  return {"transient", policy_spec(rnd, depth + 1) or {"decaying"}}
end

local function make_policy(s)
  if s == nil then return nil end
  local kind = s[1]
  if kind == "bare_immediate" then return P.immediate end
  if kind == "chain" then return P.chain(make_policy(s[2]), make_policy(s[3])) end
  if kind == "transient" then return P.transient(make_policy(s[2])) end
  if kind == "intensity" and s[2].max >= 16 then -- the bucketed kind
    return P.chain(P.intensity(s[2]), P.exponential())
  end
  return P[kind](s[2])
end

-- The options a parent gives a child (ctx:run's), policy included.
local function node_options(rnd)
  local o = {}
  local p = policy_spec(rnd, 1)
  if p then o.policy = p end
  if rnd(3) == 1 then o.shutdown = rnd(20) end
  if rnd(3) == 1 then o.min_uptime = rnd(4) / 2 end
  return o
end

local function made_options(o)
  local out = {}
  for k, v in pairs(o) do out[k] = v end
  out.policy = make_policy(o.policy)
  return out
end

local SIGNALS = {"TERM", "QUIT", "INT", "HUP"}

-- A child: {name, kind = "exec" | "leaf" | "sup", ...}.
local function child(rnd, name, depth)
  local c = {name = name, opts = node_options(rnd)}
  local k = rnd(depth < 3 and 3 or 2)
  if k == 1 then
    c.kind = "exec"
    c.argv = {"sleep", tostring(1000 + rnd(100))}
    local eo = {}
    if rnd(2) == 1 then eo.env = {PORT = tostring(8000 + rnd(100)), MODE = rnd(2) == 1 and "a" or "b"} end
    if rnd(2) == 1 then eo.stop_signal = SIGNALS[rnd(#SIGNALS)] end
    if rnd(2) == 1 then eo.grace = rnd(30) end
    local r = rnd(5)
    if r == 1 then eo.ready = {probe = {tcp = "127.0.0.1:" .. (8000 + rnd(100))}, interval = rnd(3)}
    elseif r == 2 then eo.ready = {stdout = "listening on %d+"}
    elseif r == 3 then eo.ready = ({"notify", "systemd"})[rnd(2)] end
    if rnd(3) == 1 then eo.liveness = {probe = {"true"}, every = rnd(20), failures = rnd(3)} end
    c.exec = eo
  elseif k == 2 then
    c.kind = "leaf"
    c.tag = rnd(5)
  else
    c.kind = "sup"
    c.children = {}
    for i = 1, rnd(4) do c.children[i] = child(rnd, name .. "_" .. i, depth + 1) end
  end
  return c
end

local runnable

-- The runnable of a child spec, made as a script makes it.
function runnable(c)
  if c.kind == "exec" then
    local eo = {}
    for k, v in pairs(c.exec) do eo[k] = v end
    return arbor.exec(c.argv, eo)
  elseif c.kind == "leaf" then
    local tag = c.tag
    return function(ctx)
      local _ = tag
      ctx:signal("healthy")
      ctx:wait()
    end
  end
  local children = c.children
  return function(ctx)
    for _, ch in ipairs(children) do
      ctx:run(ch.name, runnable(ch), made_options(ch.opts))
    end
    ctx:signal("healthy")
    ctx:wait()
  end
end

--- gen(seed) -> root, opts, and the DNs of the supervisors (the nodes a
-- spec restarts).
return function(seed)
  local rnd = generator(seed)
  local top = {name = "root", kind = "sup", children = {}}
  for i = 1, 1 + rnd(4) do top.children[i] = child(rnd, "n" .. i, 1) end
  local sups = {}
  local function walk(c, dn)
    if c.kind == "sup" then
      sups[#sups + 1] = dn
      for _, ch in ipairs(c.children) do walk(ch, dn .. "." .. ch.name) end
    end
  end
  walk(top, "root")
  local dp = policy_spec(rnd, 1)
  return runnable(top), {default_policy = make_policy(dp) or P.exponential()}, sups
end
