--- arbor.http: the HTTP endpoints of a running tree (`arbor run --http
-- ADDR:PORT`, arbor.run's `http` option): GET /metrics, /healthz, /readyz
-- and /tree (docs/observability.md). A small HTTP/1.1 server on luv, in
-- the engine's own loop: one request per connection (Connection: close),
-- a request head of at most 8 KiB sent within a deadline. A client takes
-- one of the MAX_CLIENTS slots only once its head is complete, and only for
-- /metrics and /tree: the probes (/healthz, /readyz) and errors are
-- answered at once, whatever the other clients do. /metrics and /tree are
-- made in slices (renders, src/lua/l_render.c) and written a piece a loop
-- turn by an idle handle, so a big tree never holds the loop. A client
-- that misbehaves loses its connection; the tree never notices.
local metrics = require "arbor.metrics"
local core = require "arbor.core"

local M = {}

M.MAX_HEAD = 8192     -- bytes of request line and headers
M.MAX_CLIENTS = 16    -- /metrics and /tree answered at once; more get 503
M.MAX_PENDING = 64    -- connections still sending their head; past it
                      -- the oldest is dropped
M.HEAD_TIMEOUT = 2    -- seconds a client has to send its request head
M.TIMEOUT = 10        -- seconds to answer it (render and write)
M.READY_LINES = 100   -- nodes /readyz lists when not ready
M.SLICE = 0.002       -- seconds of rendering per loop turn (/metrics, /tree)
M.WRITE_BYTES = 1 << 20 -- bytes of answers handed to the kernel per turn

local reasons = {[200] = "OK", [400] = "Bad Request", [404] = "Not Found",
  [405] = "Method Not Allowed", [413] = "Request Header Fields Too Large",
  [500] = "Internal Server Error", [503] = "Service Unavailable"}

--- parse_addr("127.0.0.1:9100" | "[::1]:9100" | ":9100") -> host, port |
-- nil, message. Without a host, the loopback address.
function M.parse_addr(s)
  if type(s) ~= "string" then return nil, "want ADDR:PORT, got " .. type(s) end
  local host, port = s:match("^%[([%x:.]+)%]:(%d+)$")
  if not host then host, port = s:match("^([^:]*):(%d+)$") end
  port = tonumber(port)
  if not port or port > 65535 then
    return nil, "want ADDR:PORT (127.0.0.1:9100, [::1]:9100), got '" .. s .. "'"
  end
  if host == "" then host = "127.0.0.1" end
  return host, port
end

-- The routes: each returns status, content type, body (a string, or a
-- render: l_render.h, made in slices). A probe's route is cheap whatever
-- the tree.
local function routes(e, opts)
  return {
    ["/metrics"] = function(req)
      local om = metrics.wants_openmetrics(req.headers.accept)
      return 200, om and metrics.OPENMETRICS or metrics.PROMETHEUS,
        metrics.render(e, {openmetrics = om, max_series = opts.max_series})
    end,
    ["/healthz"] = function() return 200, "text/plain", "ok\n" end,
    ["/readyz"] = function()
      if e:node("root", "state") == "HEALTHY" then return 200, "text/plain", "ready\n" end
      local lines, n = core.not_ready(e, M.READY_LINES)
      if n > M.READY_LINES then
        lines = lines .. string.format("... and %d more\n", n - M.READY_LINES)
      end
      return 503, "text/plain", "not ready:\n" .. lines
    end,
    ["/tree"] = function() return 200, "application/json", core.tree_render(e) end,
  }
end

-- The paths answered without a slot.
local probes = {["/healthz"] = true, ["/readyz"] = true}

-- The request head in buf, parsed: {method, path, headers} or nil, status.
local function parse(head)
  local method, target = head:match("^(%u+) (%S+) HTTP/1%.[01]\r?\n")
  if not method then return nil, 400 end
  local req = {method = method, path = target:match("^[^?#]*"), headers = {}}
  for k, v in head:gmatch("\n([%w%-]+):[ \t]*([^\r\n]*)") do
    req.headers[k:lower()] = v
  end
  return req
end

--- serve(e, addr [, opts]) -> server ({host, port, close()}) | nil,
-- message. Port 0 picks a free one (server.port says which).
-- opts: max_series (of /metrics).
function M.serve(e, addr, opts)
  opts = opts or {}
  local uv = require "luv"
  local host, port = M.parse_addr(addr)
  if not host then return nil, port end
  local server = uv.new_tcp()
  local handlers = routes(e, opts)
  local conns = {}   -- client -> {timer, slot = true while it holds one;
                     -- render = {r}, status, ctype, head_only while its
                     -- answer is made; out, next, head while written}
  local pending = {} -- the clients still sending their head, oldest first
  local busy = 0     -- slots held
  local renders = {} -- the clients whose answer is being made, next first
  local writers = {} -- the clients with a piece of their answer to write
  local idle = uv.new_idle() -- active while renders or writers wait

  local function unlist(list, client)
    for i, x in ipairs(list) do
      if x == client then return table.remove(list, i) end
    end
  end

  local function finish(client)
    local c = conns[client]
    if c then
      conns[client] = nil
      if c.slot then busy = busy - 1 end
      unlist(pending, client)
      unlist(writers, client)
      if c.render then
        unlist(renders, client)
        c.render.r:close()
      end
      if not c.timer:is_closing() then c.timer:close() end
    end
    if not client:is_closing() then client:close() end
  end

  local turn -- the idle callback, below

  local function busy_loop()
    if not idle:is_active() then idle:start(turn) end
  end

  -- Writes the head and the body: a string at once, or a render's chunks
  -- (256 KB each) by the idle callback, WRITE_BYTES a loop turn for all
  -- clients, so that big answers do not hold the loop while the kernel
  -- copies them.
  local function respond(client, status, ctype, body, head_only, len)
    local head = string.format("HTTP/1.1 %d %s\r\nContent-Type: %s\r\n"
      .. "Content-Length: %d\r\nConnection: close\r\n\r\n",
      status, reasons[status] or "", ctype or "text/plain", len or #body)
    client:read_stop()
    if head_only then body = "" end
    if type(body) == "string" then
      return client:write(head .. body, function() finish(client) end)
    end
    local c = conns[client]
    c.out, c.next, c.head = body, 1, head
    writers[#writers + 1] = client
    busy_loop()
  end

  -- Writes the next piece of the answer of client (a writer); the write's
  -- callback, in a later turn, lists it again, or ends it. Returns the
  -- bytes handed over.
  local function write_piece(client)
    local c = conns[client]
    local i = c.next
    local piece = c.out[i] or ""
    if i == 1 then piece = {c.head, piece} end
    c.next = i + 1
    client:write(piece, function(werr)
      -- (a write done as the client was dropped calls back without error)
      if werr or conns[client] ~= c or c.next > #c.out then return finish(client) end
      writers[#writers + 1] = client
      busy_loop()
    end)
    return #(c.out[i] or "")
  end

  -- Each loop turn while there is work: the renders for up to SLICE
  -- seconds in all, each from where it was, round robin (a step makes at
  -- least a batch of nodes), answering those done; then pieces of answers,
  -- WRITE_BYTES in all.
  function turn()
    local deadline = uv.hrtime() + math.floor(M.SLICE * 1e9)
    for _ = 1, #renders do
      local client = table.remove(renders, 1)
      local c = conns[client]
      local r = c.render.r
      local ok, done = pcall(r.step, r, math.max(0, deadline - uv.hrtime()))
      if not ok or done then
        local chunks, len
        if ok then chunks, len = r:result() end
        r:close()
        c.render = nil
        if ok then
          respond(client, c.status, c.ctype, chunks, c.head_only, len)
        else
          respond(client, 500, "text/plain", tostring(done) .. "\n")
        end
      else
        renders[#renders + 1] = client -- to the back
      end
      if uv.hrtime() >= deadline then break end
    end
    local bytes = 0
    while writers[1] and bytes < M.WRITE_BYTES do
      bytes = bytes + write_piece(table.remove(writers, 1))
    end
    if #renders == 0 and #writers == 0 then idle:stop() end
  end

  -- The client's head is in (or too long): it has TIMEOUT seconds to be
  -- answered.
  local function headed(client)
    local c = conns[client]
    unlist(pending, client)
    c.timer:stop()
    c.timer:start(math.floor(M.TIMEOUT * 1000), 0, function() finish(client) end)
    return c
  end

  local function handle(client, head)
    local c = headed(client)
    local req, bad = parse(head)
    if not req then return respond(client, bad, "text/plain", "bad request\n") end
    if req.method ~= "GET" and req.method ~= "HEAD" then
      return respond(client, 405, "text/plain", "only GET and HEAD\n")
    end
    local route = handlers[req.path]
    if not route then return respond(client, 404, "text/plain", "not found\n") end
    if not probes[req.path] then
      if busy >= M.MAX_CLIENTS then
        return respond(client, 503, "text/plain", "too many clients\n")
      end
      busy = busy + 1
      c.slot = true
    end
    local okr, status, ctype, body = pcall(route, req)
    if not okr then return respond(client, 500, "text/plain", tostring(status) .. "\n") end
    if type(body) == "string" then
      return respond(client, status, ctype, body, req.method == "HEAD")
    end
    -- a render: made in slices between loop turns, answered when done
    c.render, c.status, c.ctype, c.head_only = {r = body}, status, ctype, req.method == "HEAD"
    client:read_stop()
    renders[#renders + 1] = client
    busy_loop()
  end

  local function on_connection(lerr)
    if lerr then return end
    local client = uv.new_tcp()
    if not server:accept(client) then return client:close() end
    if #pending >= M.MAX_PENDING then finish(pending[1]) end
    local timer = uv.new_timer()
    conns[client] = {timer = timer}
    pending[#pending + 1] = client
    timer:start(math.floor(M.HEAD_TIMEOUT * 1000), 0, function() finish(client) end)
    local buf = ""
    client:read_start(function(rerr, data)
      if rerr or not data then return finish(client) end
      local from = math.max(1, #buf - 2) -- the end may straddle two reads
      buf = buf .. data
      local _, stop = buf:find("\r?\n\r?\n", from)
      if stop and stop <= M.MAX_HEAD then return handle(client, buf:sub(1, stop)) end
      if stop or #buf > M.MAX_HEAD then
        headed(client)
        respond(client, 413, "text/plain", "request head over 8 KiB\n")
      end
    end)
  end

  local ok, err = server:bind(host, port)
  if ok then ok, err = server:listen(64, on_connection) end
  if not ok then
    server:close()
    return nil, string.format("cannot serve HTTP on %s: %s", addr, err)
  end
  local bound = server:getsockname()
  return {
    host = host:find(":", 1, true) and "[" .. host .. "]" or host,
    port = bound and bound.port,
    close = function()
      for client in pairs(conns) do finish(client) end
      if not idle:is_closing() then idle:close() end
      if not server:is_closing() then server:close() end
    end,
  }
end

return M
