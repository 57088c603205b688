--- arbor.channel: bounded FIFO channels between runnables.
--
-- `send` blocks the calling runnable while the buffer is full (capacity 0:
-- until a receiver takes the value), `recv` while it is empty. Both raise
-- the cancellation error when the caller's context is canceled (T7); a value
-- handed to a receiver is never lost, a value of a canceled sender is never
-- delivered. Outside a runnable, only calls that need not block work.
local core = require "arbor.core"
local park, park_seq, unpark = core.park, core.park_seq, core.unpark

local Channel = {}
Channel.__index = Channel

local function push(q, v)
  q.last = q.last + 1
  q[q.last] = v
end

local function shift(q)
  if q.first > q.last then return nil end
  local v = q[q.first]
  q[q.first] = nil
  q.first = q.first + 1
  return v
end

local function queue() return {first = 1, last = 0} end
local function size(q) return q.last - q.first + 1 end

local function current(op)
  local ctx = core.self()
  if not ctx then
    error("channel:" .. op .. "() would block outside a runnable", 3)
  end
  return ctx
end

--- Creates a channel holding up to capacity values (default 0).
local function new(capacity)
  capacity = capacity or 0
  if math.type(capacity) ~= "integer" or capacity < 0 then
    error("arbor.channel([capacity]): want an integer >= 0, got "
      .. tostring(capacity), 2)
  end
  return setmetatable({capacity = capacity, buf = queue(), senders = queue(),
    receivers = queue()}, Channel)
end

--- Sends v, blocking while the channel is full.
function Channel:send(v)
  -- hand it to a parked receiver
  while size(self.receivers) > 0 do
    local w = shift(self.receivers)
    if unpark(w.ctx, w.seq, v) then return end
  end
  if size(self.buf) < self.capacity then
    push(self.buf, {v})
    return
  end
  local ctx = current("send")
  push(self.senders, {ctx = ctx, seq = park_seq(ctx), v = v})
  park(ctx)
end

--- Receives the next value, blocking while the channel is empty.
function Channel:recv()
  local boxed = shift(self.buf)
  if boxed then
    -- room in the buffer: take the value of a parked sender
    while size(self.senders) > 0 do
      local w = shift(self.senders)
      if unpark(w.ctx, w.seq) then
        push(self.buf, {w.v})
        break
      end
    end
    return boxed[1]
  end
  while size(self.senders) > 0 do
    local w = shift(self.senders)
    if unpark(w.ctx, w.seq) then return w.v end
  end
  local ctx = current("recv")
  push(self.receivers, {ctx = ctx, seq = park_seq(ctx)})
  return (park(ctx))
end

--- Values buffered now.
function Channel:len() return size(self.buf) end

return new
