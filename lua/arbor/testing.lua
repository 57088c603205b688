--- arbor.testing: trees on a virtual clock for busted specs (H1-H3).
--
--   local testing = require "arbor.testing"
--   local h = testing.new{seed = 1}
--   h:start(function(ctx) ... end)
--   h:advance(10)
--   assert.equal("HEALTHY", h:state("root.worker"))
--
-- Time moves only when the spec calls advance; every harness action settles
-- the tree (runs it until nothing can progress without time moving), so a
-- spec reads a stable tree after each step.
local core = require "arbor.core"
require "arbor" -- the ctx methods written in Lua, arbor.* inside runnables
local policy = require "arbor.policy"
local node = require "arbor.node"
local explain = require("arbor.explain").explain

local M = {}

local Harness = {}
Harness.__index = Harness

local new_options = {seed = true, ring = true, ring_bytes = true, outbox = true,
  default_policy = true, policy = true, runaway = true}

--- Creates a harness. opts: seed (jitter and arbor.random, default 1), ring
-- (events kept, default 100000), ring_bytes and outbox (as arbor.run's,
-- T14), default_policy (of the nodes given none, default
-- arbor.policy.exponential(); `policy` is its older spelling: the root's
-- policy is h:start's, as arbor.run's `policy` is), runaway (seconds of the
-- engine thread's own time, real ones, a runnable may run without yielding
-- before it is failed, default 10).
function M.new(opts)
  opts = opts or {}
  if type(opts) ~= "table" then
    error("testing.new(opts): opts must be a table, got " .. type(opts), 2)
  end
  for k in pairs(opts) do
    if not new_options[k] then
      error("testing.new: unknown option '" .. core.cut(k) .. "'", 2)
    end
  end
  if opts.default_policy ~= nil and opts.policy ~= nil then
    error("testing.new: give 'default_policy' or its older spelling 'policy', not both", 2)
  end
  local default = opts.default_policy
  if default == nil then default = opts.policy end
  if default ~= nil and type(default) ~= "function" then
    error("testing.new: option 'default_policy' must be a function, got " .. type(default), 2)
  end
  local e = core.engine{virtual = true, seed = opts.seed or 1,
    ring = opts.ring or 100000, ring_bytes = opts.ring_bytes,
    outbox = opts.outbox, runaway = opts.runaway}
  e:set_default_policy(default or policy.exponential())
  return setmetatable({engine = e}, Harness)
end

--- Starts the root runnable and settles. opts: policy, shutdown,
-- auto_shutdown, stop.
function Harness:start(root, opts)
  if type(root) ~= "function" then
    error("h:start(root): the root runnable must be a function, got " .. type(root), 2)
  end
  opts = opts or {}
  node.check_root("h:start", opts)
  self.engine:start(root, opts.policy, opts.shutdown, opts.auto_shutdown, opts.stop)
  self:settle()
  return self
end

--- Runs until nothing can progress without time moving.
function Harness:settle() self.engine:settle() end

--- Moves virtual time forward, firing every timer due on the way in order.
function Harness:advance(seconds) self.engine:advance(seconds) end

--- Virtual seconds since the harness was created.
function Harness:now() return self.engine:now() end

--- The state of the node at dn ("NEW", "HEALTHY", ...), or nil.
function Harness:state(dn)
  return (self.engine:node(dn, "state"))
end

--- The node view of arbor.node(dn) (T13a), methods included.
function Harness:node(dn)
  return node.view(self.engine, dn, function() self:settle() end)
end

--- Events, oldest first; filter: {dn=, kind=, to=, from=} keeps matches.
function Harness:events(filter)
  local all = self.engine:events()
  if not filter then return all end
  local out = {}
  for _, ev in ipairs(all) do
    local keep = true
    for k, v in pairs(filter) do
      if ev[k] ~= v then keep = false break end
    end
    if keep then out[#out + 1] = ev end
  end
  return out
end

--- The running incarnation of dn raises err at its current yield point.
function Harness:fail(dn, err)
  self.engine:fail(dn, err == nil and "injected failure" or err)
  self:settle()
end

--- Stops the tree in order (T12), advancing time through shutdown deadlines
-- as needed. Returns the virtual seconds the stop took.
function Harness:stop()
  local t0 = self:now()
  self.engine:stop()
  self:settle()
  while not self.engine:finished() do
    local due = self.engine:next_timer()
    if not due then break end
    self:advance(math.max(0, due - self:now()))
  end
  return self:now() - t0
end

--- Advances in steps until pred() is true or `limit` seconds passed.
-- Returns true when pred held.
function Harness:run_until(pred, limit)
  local deadline = self:now() + (limit or 3600)
  while not pred() do
    local due = self.engine:next_timer()
    if not due or due > deadline then
      self:advance(math.max(0, deadline - self:now()))
      return pred() and true or false
    end
    self:advance(math.max(0, due - self:now()))
  end
  return true
end

function Harness:tree(dn) return self.engine:tree(dn) end
--- arbor.explain on this harness's tree: a sentence and a code.
function Harness:explain(dn) return explain(self.engine, dn) end
function Harness:logs(dn, n, opts) return self.engine:logs(dn, n, opts) end
function Harness:stuck() return self.engine:stuck() end
function Harness:stats() return self.engine:stats() end
-- h.engine:unsubscribe(h:on_event(fn)) is the older spelling of
-- h:on_event(fn)(), from when h:on_event returned the engine's subscription
-- id: the engine's unsubscribe takes the harness's handles too.
local handles = setmetatable({}, {__mode = "k"})
do
  local methods = debug.getregistry()["arbor.Engine"].__index
  local unsubscribe = methods.unsubscribe
  function methods.unsubscribe(e, id)
    if handles[id] then return id() end
    return unsubscribe(e, id)
  end
end

--- Subscribes fn to the harness's events; returns a function that
-- unsubscribes (as arbor.on_event does).
function Harness:on_event(fn)
  if type(fn) ~= "function" then
    error("h:on_event(fn): want a function, got " .. type(fn), 2)
  end
  local sub = node.subscription(fn)
  sub.attach(self.engine)
  handles[sub.unsubscribe] = true
  return sub.unsubscribe
end

--- Frees the engine now (it is also freed when collected).
function Harness:close() self.engine:close() end

return M
