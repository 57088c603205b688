--- arbor.ctx: the ctx methods written in Lua (docs/lua-api.md, "The
-- context"). The others (run, group, signal, sleep, wait, canceled, log,
-- defer) are C's (src/l_ctx.c, src/defer.c); all are methods of every ctx.
-- The primitives these stand on (park and unpark, the shield count) are
-- functions of arbor.core taking the ctx, not methods.
local core = require "arbor.core"

local methods = core.ctx_methods
local park, park_seq, unpark = core.park, core.park_seq, core.unpark
local shield_enter, shield_leave = core.shield_enter, core.shield_leave

local Shield = {__close = function(s) shield_leave(s.ctx) end}

--- ctx:shield(fn, ...): runs fn with cancellation held off (T7): blocking
-- calls inside work normally until the shutdown deadline.
function methods.shield(ctx, fn, ...)
  if type(fn) ~= "function" then
    error(ctx.dn .. ": ctx:shield(fn): want a function, got " .. type(fn), 2)
  end
  shield_enter(ctx)
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
  local seq = park_seq(ctx)
  local state, early = "starting", nil
  start(function(...)
    if state == "starting" then
      early, state = table.pack(...), "done"
    elseif state == "parked" then
      state = "done"
      unpark(ctx, seq, ...)
    end
  end)
  if early then return table.unpack(early, 1, early.n) end
  state = "parked"
  return park(ctx)
end

--- ctx:exec(argv [, opts]) -> proc | nil, "ENAME: message", "ENAME": a
-- program in its own process group (arbor.exec, docs/processes.md).
methods.exec = require("arbor.exec").exec

return methods
