-- The soak's control-socket flood: clients on the driver's luv loop asking
-- status, tree, tree --json, events and logs. "busy" clients read every
-- reply at once and check it; a "slow" client follows events and logs and
-- stops reading for a while; an "abrupt" client hangs up in the middle of
-- replies, sends half frames and malformed ones.
local wire = require "soak.wire"
local json = require "arbor.json"

local M = {}

-- A generator of its own, so the flood does not move the fault schedule.
local function generator(seed)
  local x = (seed * 2654435761 + 1) % 4294967296
  return function(n)
    x = (x * 1103515245 + 12345) % 2147483648
    local r = x / 2147483648
    return n and math.floor(r * n) + 1 or r
  end
end

local stats = {requests = 0, replies = 0, refused = 0, bad = 0, drops = 0,
  hangups = 0, malformed = 0, streamed = 0}
local function bad(what)
  stats.bad = stats.bad + 1
  if stats.bad <= 5 then io.stderr:write("soak: flood: ", what, "\n") end
end

local function requests(rand, dns)
  local dn = dns[rand(#dns)]
  local all = {
    {op = "status"}, {op = "status", json = true},
    {op = "tree"}, {op = "tree", json = true}, {op = "tree", json = true},
    {op = "tree", dn = dn, json = true},
    {op = "events", n = 200, json = true}, {op = "events", n = 50},
    {op = "logs", dn = dn, n = 64, json = true}, {op = "logs", dn = dn},
    {op = "node", dn = dn, json = true},
  }
  return all[rand(#all)]
end

-- Asks one request at a time, reading each reply whole.
local function busy(sock, rand, dns, running)
  while running() do
    local c = wire.connect(sock)
    if not c then bad("busy: cannot connect") wire.sleep(100) goto next end
    for id = 1, 50 do
      if not running() then break end
      local req = requests(rand, dns)
      req.id = id
      stats.requests = stats.requests + 1
      local f, err = c:request(req, 60000)
      if not f then
        stats.drops = stats.drops + 1
        bad("busy: " .. req.op .. ": " .. tostring(err))
        break
      elseif f.ok then
        stats.replies = stats.replies + 1
      elseif tostring(f.error):match("^no node ") then
        stats.refused = stats.refused + 1   -- the node's parent restarted
      else
        bad("busy: " .. req.op .. " refused: " .. tostring(f.error))
      end
      wire.sleep(rand(40))
    end
    c:close()
    ::next::
  end
end

-- Follows events and a node's logs, asks for trees, and stops reading for
-- up to a second at a time.
local function slow(sock, rand, dns, running)
  while running() do
    local c = wire.connect(sock)
    if not c then bad("slow: cannot connect") wire.sleep(100) goto next end
    c:send{id = "ev", op = "events", n = 100, follow = true, json = rand() < 0.5}
    c:send{id = "lg", op = "logs", dn = dns[rand(#dns)], follow = true, json = true}
    for i = 1, 20 do
      if not running() then break end
      c:send{id = i, op = "tree", json = true}
      c:pause()
      wire.sleep(rand(1000))
      c:resume()
      while true do   -- then read what came, until 50 ms pass without a frame
        local f = c:recv(50)
        if not f then break end
        stats.streamed = stats.streamed + 1
      end
      if c.closed then
        stats.drops = stats.drops + 1
        bad("slow: dropped by the engine")
        break
      end
    end
    if rand() < 0.5 then c:send{id = "x", op = "interrupt", target = "ev"} end
    c:close()
    ::next::
  end
end

-- Hangs up mid-reply, sends half a frame, a malformed frame, or nothing.
local function abrupt(sock, rand, running)
  while running() do
    local c = wire.connect(sock)
    if not c then bad("abrupt: cannot connect") wire.sleep(100) goto next end
    local how = rand(5)
    if how == 1 then
      c:send{id = 1, op = "tree", json = true}
    elseif how == 2 then
      c:send{id = 1, op = "events", n = 1000, json = true}
      c:recv_bytes(rand(4096))
    elseif how == 3 then
      c:send_raw(string.pack(">I4", 100) .. '{"id":1,"op":')
    elseif how == 4 then
      c:send_raw(string.pack(">I4", 9) .. "not json!")
      local f = c:recv(60000)
      if f and f.id == json.null and f.ok == false then
        stats.malformed = stats.malformed + 1
      else
        bad("abrupt: a malformed frame got " .. (f and json.encode(f) or "no answer"))
      end
    end
    stats.hangups = stats.hangups + 1
    c:close()
    wire.sleep(20 + rand(100))
    ::next::
  end
end

--- Starts n clients (two thirds busy, a slow and an abrupt one from n = 3);
-- returns a function that stops them, waits for them and returns the counts.
function M.start(sock, n, seed, dns)
  local on = true
  local function running() return on end
  local left = 0
  local waiter
  local function actor(fn, ...)
    left = left + 1
    wire.spawn(function(...)
      fn(...)
      left = left - 1
      if left == 0 and waiter then
        local co = waiter
        waiter = nil
        coroutine.resume(co)
      end
    end, ...)
  end
  for i = 1, n do
    local rand = generator(seed + i)
    if i == 2 then
      actor(slow, sock, rand, dns, running)
    elseif i == 3 then
      actor(abrupt, sock, rand, running)
    else
      actor(busy, sock, rand, dns, running)
    end
  end
  return function()
    on = false
    if left > 0 then
      waiter = coroutine.running()
      coroutine.yield()
    end
    return stats
  end
end

return M
