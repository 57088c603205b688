--- arbor.http: the HTTP endpoints of a running tree (`arbor run --http
-- ADDR:PORT`, arbor.run's `http` option): GET /metrics, /healthz, /readyz
-- and /tree (docs/observability.md). A small HTTP/1.1 server on luv, in
-- the engine's own loop: one request per connection (Connection: close),
-- a request head of at most 8 KiB sent within a deadline. A client takes
-- one of the MAX_CLIENTS slots only once its head is complete, and only for
-- /metrics and /tree: the probes (/healthz, /readyz) and errors are
-- answered at once, whatever the other clients do. A client that
-- misbehaves loses its connection; the tree never notices.
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

-- The routes: each returns status, content type, body (a string, or a list
-- of strings and its length).
-- The routes: each returns status, content type, body (a string, or a list
-- of strings and its length). A probe's route is cheap whatever the tree.
local function routes(e, opts)
  return {
    ["/metrics"] = function(req)
      local om = metrics.wants_openmetrics(req.headers.accept)
      return 200, om and metrics.OPENMETRICS or metrics.PROMETHEUS,
        metrics.chunks(e, {openmetrics = om, max_series = opts.max_series})
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
    ["/tree"] = function() return 200, "application/json", core.tree_json(e) end,
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
  local conns = {}   -- client -> {timer, slot = true while it holds one}
  local pending = {} -- the clients still sending their head, oldest first
  local busy = 0     -- slots held

  local function unpend(client)
    for i, c in ipairs(pending) do
      if c == client then return table.remove(pending, i) end
    end
  end

  local function finish(client)
    local c = conns[client]
    if c then
      conns[client] = nil
      if c.slot then busy = busy - 1 end
      unpend(client)
      if not c.timer:is_closing() then c.timer:close() end
    end
    if not client:is_closing() then client:close() end
  end

  local function respond(client, status, ctype, body, head_only, len)
    local head = string.format("HTTP/1.1 %d %s\r\nContent-Type: %s\r\n"
      .. "Content-Length: %d\r\nConnection: close\r\n\r\n",
      status, reasons[status] or "", ctype or "text/plain", len or #body)
    client:read_stop()
    local out = head
    if not head_only then -- the body's chunks as they are (one writev)
      out = type(body) == "table" and table.move(body, 1, #body, 2, {head}) or head .. body
    end
    client:write(out, function() finish(client) end)
  end

  -- The client's head is in (or too long): it has TIMEOUT seconds to be
  -- answered.
  local function headed(client)
    local c = conns[client]
    unpend(client)
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
    local okr, status, ctype, body, len = pcall(route, req)
    if not okr then return respond(client, 500, "text/plain", tostring(status) .. "\n") end
    respond(client, status, ctype, body, req.method == "HEAD", len)
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
      if not server:is_closing() then server:close() end
    end,
  }
end

return M
