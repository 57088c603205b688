-- Coroutines on a luv loop and control-socket connections for the soak's
-- driver and flood clients: each actor is a coroutine; a call that waits
-- (connect, recv, sleep) yields until its luv callback resumes it.
-- Frames are those of docs/control-protocol.md: a 4-byte big-endian length
-- and a JSON object.
local uv = require "luv"
local json = require "arbor.json"

local M = {}

--- Runs fn(...) as an actor; an error in it is printed and ends the driver.
function M.spawn(fn, ...)
  local co = coroutine.create(fn)
  local ok, err = coroutine.resume(co, ...)
  if not ok then error(debug.traceback(co, err), 0) end
  return co
end

-- Resumes co with the values, raising what it raised.
local function wake(co, ...)
  local ok, err = coroutine.resume(co, ...)
  if not ok then
    io.stderr:write("soak: ", debug.traceback(co, err), "\n")
    os.exit(3)
  end
end

--- Parks the calling actor for ms milliseconds.
function M.sleep(ms)
  local co = coroutine.running()
  local t = uv.new_timer()
  t:start(math.max(0, math.floor(ms)), 0, function()
    t:close()
    wake(co)
  end)
  coroutine.yield()
end

local Conn = {}
Conn.__index = Conn

--- connect(path) -> conn | nil, message (from an actor).
function M.connect(path)
  local co = coroutine.running()
  local pipe = uv.new_pipe(false)
  pipe:connect(path, function(err) wake(co, err) end)
  local err = coroutine.yield()
  if err then
    pipe:close()
    return nil, err
  end
  local c = setmetatable({pipe = pipe, buf = "", frames = {}, received = 0,
    closed = false}, Conn)
  c:resume()
  return c
end

-- Cuts whole frames off the buffer; wakes a waiting reader.
function Conn:_input(data)
  self.received = self.received + #data
  self.buf = self.buf .. data
  while #self.buf >= 4 do
    local len = string.unpack(">I4", self.buf)
    if #self.buf < 4 + len then break end
    self.frames[#self.frames + 1] = self.buf:sub(5, 4 + len)
    self.buf = self.buf:sub(5 + len)
  end
  self:_notify()
end

function Conn:_notify()
  local co = self.waiter
  if co and (#self.frames > 0 or self.closed or self.received >= (self.want or math.huge)) then
    self.waiter = nil
    wake(co)
  end
end

--- Starts (again) reading from the socket.
function Conn:resume()
  if self.closed then return end
  self.pipe:read_start(function(err, data)
    if err or not data then
      self.closed = true
      self.eof = err or "closed"
      if not self.pipe:is_closing() then self.pipe:close() end
      self:_notify()
    else
      self:_input(data)
    end
  end)
end

--- Stops reading: what the engine sends stays in its queue (a slow reader).
function Conn:pause()
  if not self.closed then self.pipe:read_stop() end
end

--- Writes raw bytes; true, or nil and a message.
function Conn:send_raw(bytes)
  if self.closed then return nil, "closed" end
  local ok, err = self.pipe:write(bytes)
  if not ok then return nil, err end
  return true
end

--- Sends one request (a table) as a frame.
function Conn:send(req)
  local payload = json.encode(req)
  return self:send_raw(string.pack(">I4", #payload) .. payload)
end

--- The next frame, decoded; nil and "closed" or "timeout". While waiting
-- the connection reads (a paused one too).
function Conn:recv(timeout_ms)
  while #self.frames == 0 do
    if self.closed then return nil, "closed" end
    local co = coroutine.running()
    self.waiter = co
    local t
    if timeout_ms then
      t = uv.new_timer()
      t:start(timeout_ms, 0, function()
        self.waiter = nil
        self.timed_out = true
        wake(co)
      end)
    end
    coroutine.yield()
    if t then t:stop() t:close() end
    if self.timed_out then
      self.timed_out = false
      return nil, "timeout"
    end
  end
  local payload = table.remove(self.frames, 1)
  local f, err = json.decode(payload)
  if type(f) ~= "table" then return nil, "bad frame: " .. tostring(err) end
  return f
end

--- Waits until at least n bytes have arrived in all (or the end).
function Conn:recv_bytes(n)
  self.want = n
  while self.received < n and not self.closed do
    self.waiter = coroutine.running()
    coroutine.yield()
  end
  self.want = nil
end

--- Sends req and reads frames until its final one: returns it, or nil and
-- a message. on_frame sees the others.
function Conn:request(req, timeout_ms, on_frame)
  local ok, err = self:send(req)
  if not ok then return nil, err end
  while true do
    local f, rerr = self:recv(timeout_ms)
    if not f then return nil, rerr end
    if f.id == req.id and f["end"] then return f end
    if f.id == json.null then return nil, "refused: " .. tostring(f.error) end
    if on_frame then on_frame(f) end
  end
end

function Conn:close()
  if not self.closed then
    self.closed = true
    if not self.pipe:is_closing() then self.pipe:close() end
  end
  self:_notify()
end

return M
