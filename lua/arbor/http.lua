--- arbor.http: the HTTP endpoints of a running tree (`arbor run --http
-- ADDR:PORT`, arbor.run's `http` option): GET /metrics, /healthz, /readyz
-- and /tree (docs/observability.md). A small HTTP/1.1 server on luv, in
-- the engine's own loop: one request per connection (Connection: close),
-- a request head of at most 8 KiB, a few clients at a time, a deadline per
-- client. A client that misbehaves loses its connection; the tree never
-- notices.
local metrics = require "arbor.metrics"
local core = require "arbor.core"

local M = {}

M.MAX_HEAD = 8192     -- bytes of request line and headers
M.MAX_CLIENTS = 16    -- connections at once; more are answered 503
M.TIMEOUT = 10        -- seconds a client has to send its request

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
local function routes(e, opts)
  local function ready_body()
    local lines = {}
    local function walk(t)
      if t.state ~= "HEALTHY" and t.state ~= "DONE" then
        lines[#lines + 1] = t.dn .. " " .. t.state
      end
      for _, c in ipairs(t.children or {}) do walk(c) end
    end
    walk(e:tree())
    return table.concat(lines, "\n") .. "\n"
  end
  return {
    ["/metrics"] = function(req)
      local om = metrics.wants_openmetrics(req.headers.accept)
      return 200, om and metrics.OPENMETRICS or metrics.PROMETHEUS,
        metrics.chunks(e, {openmetrics = om, max_series = opts.max_series})
    end,
    ["/healthz"] = function() return 200, "text/plain", "ok\n" end,
    ["/readyz"] = function()
      if e:node("root", "state") == "HEALTHY" then return 200, "text/plain", "ready\n" end
      return 503, "text/plain", "not ready:\n" .. ready_body()
    end,
    ["/tree"] = function() return 200, "application/json", core.tree_json(e) end,
  }
end

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
  local clients = 0
  local open = {} -- client -> its deadline timer

  local function finish(client)
    local timer = open[client]
    if timer then
      open[client] = nil
      clients = clients - 1
      if not timer:is_closing() then timer:close() end
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

  local function handle(client, head)
    local req, bad = parse(head)
    if not req then return respond(client, bad, "text/plain", "bad request\n") end
    if req.method ~= "GET" and req.method ~= "HEAD" then
      return respond(client, 405, "text/plain", "only GET and HEAD\n")
    end
    local route = handlers[req.path]
    if not route then return respond(client, 404, "text/plain", "not found\n") end
    local okr, status, ctype, body, len = pcall(route, req)
    if not okr then return respond(client, 500, "text/plain", tostring(status) .. "\n") end
    respond(client, status, ctype, body, req.method == "HEAD", len)
  end

  local function on_connection(lerr)
    if lerr then return end
    local client = uv.new_tcp()
    if not server:accept(client) then return client:close() end
    if clients >= M.MAX_CLIENTS then
      local body = "too many clients\n"
      client:write(string.format("HTTP/1.1 503 Service Unavailable\r\nContent-Length: %d\r\n"
        .. "Connection: close\r\n\r\n%s", #body, body), function() client:close() end)
      return
    end
    clients = clients + 1
    local timer = uv.new_timer()
    open[client] = timer
    timer:start(math.floor(M.TIMEOUT * 1000), 0, function() finish(client) end)
    local buf = ""
    client:read_start(function(rerr, data)
      if rerr or not data then return finish(client) end
      buf = buf .. data
      local stop = buf:find("\r?\n\r?\n")
      if stop and stop <= M.MAX_HEAD then return handle(client, buf:sub(1, stop)) end
      if stop or #buf > M.MAX_HEAD then
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
      for client in pairs(open) do finish(client) end
      if not server:is_closing() then server:close() end
    end,
  }
end

return M
