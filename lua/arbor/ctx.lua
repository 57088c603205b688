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

-- ---- sub-loggers ----------------------------------------------------------

local log_sub, log_write = core.log_sub, core.log_write
local LEVELS = {debug = 0, info = 1, warn = 2, error = 3}

local Logger = {}
Logger.__index = Logger
Logger.__name = "arbor.Logger"
function Logger.__tostring(lg) return "arbor.Logger(" .. lg.dn .. ")" end

for name, level in pairs(LEVELS) do
  Logger[name] = function(lg, ...) return log_write(lg.ctx, lg.sub, level, ...) end
end

--- logger:log(...) at level info, or logger:log{level = ..., text}.
function Logger.log(lg, ...)
  if select("#", ...) == 1 and type(...) == "table" then
    local t = ...
    local level = t.level == nil and 1 or LEVELS[t.level]
    if not level then
      error(lg.dn .. ": log{level = ...}: want \"debug\", \"info\", \"warn\" or "
        .. "\"error\", got " .. tostring(t.level), 2)
    end
    return log_write(lg.ctx, lg.sub, level, t.text == nil and t[1] or t.text)
  end
  return log_write(lg.ctx, lg.sub, 1, ...)
end

local function logger(ctx, name, dn)
  if type(name) ~= "string" then
    error(dn .. ": ctx:logger(name): name must be a string, got " .. type(name), 3)
  end
  local ok, sub = pcall(log_sub, ctx, name)
  if not ok then -- said at the user's line, not this file's
    error((tostring(sub):gsub("^[^\n]-ctx%.lua:%d+: ", "")), 3)
  end
  return setmetatable({ctx = ctx, sub = sub, name = name, dn = ctx.dn .. "." .. name}, Logger)
end

--- logger:logger(name): a sub-logger of the sub-logger (<dn>.<a>.<b>).
function Logger.logger(lg, name)
  if type(name) ~= "string" then
    error(lg.dn .. ": logger(name): name must be a string, got " .. type(name), 2)
  end
  local inner = logger(lg.ctx, lg.name .. "." .. name, lg.dn)
  return inner
end

--- ctx:logger(name) -> a sub-logger whose lines go to <dn>.<name>, with
-- the methods log, debug, info, warn, error and logger. name is reserved
-- against a child of the node of that name, for the node's life.
function methods.logger(ctx, name)
  local lg = logger(ctx, name, ctx.dn) -- not a tail call: errors at level 3
  return lg
end

--- ctx:exec(argv [, opts]) -> proc | nil, "ENAME: message", "ENAME": a
-- program in its own process group (arbor.exec, docs/processes.md).
methods.exec = require("arbor.exec").exec

return methods
