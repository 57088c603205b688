--- arbor.probe: probes for arbor.exec{ready = {probe = ...}} and
-- arbor.exec{liveness = {probe = ...}}. A probe is a function(ctx) -> true
-- when the service answers, or false, "why"; it runs in the node's
-- coroutine and may block (ctx:await, ctx:sleep).
local M = {}

local function is_ip(host)
  return host:match("^%d+%.%d+%.%d+%.%d+$") or host:find(":", 1, true)
end

-- host's address: host itself when it is one, else its first address
-- (getaddrinfo on the loop), or nil, "why".
local function address(ctx, uv, host)
  if is_ip(host) then return host end
  local addr, err = ctx:await(function(cb)
    uv.getaddrinfo(host, nil, {socktype = "stream"}, function(e, r)
      cb(not e and r and r[1] and r[1].addr, e)
    end)
  end)
  if not addr then return nil, "cannot resolve " .. host .. ": " .. tostring(err) end
  return addr
end

-- Runs talk(tcp, cb) on a connection to host:port within timeout seconds:
-- cb(ok, why) ends it (the first call counts). The socket and the timer
-- are closed whatever happens (also when the node is canceled).
local function connected(ctx, host, port, timeout, talk)
  local uv = require "luv"
  local ip, err = address(ctx, uv, host)
  if not ip then return false, err end
  local tcp, timer = uv.new_tcp(), uv.new_timer()
  local guard <close> = setmetatable({}, {__close = function()
    if not tcp:is_closing() then tcp:close() end
    if not timer:is_closing() then timer:close() end
  end})
  local where = host .. ":" .. port
  return ctx:await(function(cb)
    timer:start(math.floor(timeout * 1000), 0, function()
      cb(false, string.format("%s: no answer within %g s", where, timeout))
    end)
    tcp:connect(ip, port, function(e)
      if e then return cb(false, "connect to " .. where .. ": " .. e) end
      talk(tcp, cb)
    end)
  end)
end

--- arbor.probe.tcp(host, port [, timeout]) -> probe: true once a TCP
-- connection to host:port succeeds (within timeout seconds, default 1),
-- else false, "why". Uses luv on arbor's loop.
function M.tcp(host, port, timeout)
  if type(host) ~= "string" then
    error("arbor.probe.tcp(host, port): host must be a string, got " .. type(host), 2)
  end
  if math.type(port) ~= "integer" or port < 1 or port > 65535 then
    error("arbor.probe.tcp(host, port): port must be an integer 1-65535, got "
      .. tostring(port), 2)
  end
  timeout = timeout or 1
  return function(ctx)
    return connected(ctx, host, port, timeout, function(_, cb) cb(true) end)
  end
end

--- arbor.probe.http(url [, timeout]) -> probe: GET url (http:// only);
-- true when the status is 2xx or 3xx within timeout seconds (default 1),
-- else false, "why" ("GET http://...: status 503").
function M.http(url, timeout)
  local u, err = M.parse_url(url)
  if not u then error("arbor.probe.http(url): " .. err, 2) end
  timeout = timeout or 1
  local host = u.host:find(":", 1, true) and ("[" .. u.host .. "]") or u.host
  local request = string.format("GET %s HTTP/1.0\r\nHost: %s:%d\r\n"
    .. "User-Agent: arbor-probe\r\nConnection: close\r\n\r\n", u.path, host, u.port)
  return function(ctx)
    return connected(ctx, u.host, u.port, timeout, function(tcp, cb)
      local got = ""
      tcp:write(request)
      tcp:read_start(function(e, data)
        if e then return cb(false, "GET " .. url .. ": " .. e) end
        if data then got = got .. data end
        local status = got:match("^HTTP/%d%.?%d? (%d%d%d)")
        if status then
          local code = tonumber(status)
          if code >= 200 and code < 400 then return cb(true) end
          return cb(false, "GET " .. url .. ": status " .. status)
        elseif not data or #got > 8192 or (got:find("\n") and #got >= 12) then
          return cb(false, "GET " .. url .. ": no HTTP status line")
        end
      end)
    end)
  end
end

--- arbor.probe.parse_url(url) -> {host, port, path} | nil, "why": an
-- http:// URL (no https: the client is plain TCP).
function M.parse_url(url)
  if type(url) ~= "string" or not url:match("^http://") then
    return nil, "want an http:// URL, got " .. tostring(url)
  end
  local host, port, path = url:match("^http://%[([^%]]+)%]:?(%d*)(.*)$")
  if not host then host, port, path = url:match("^http://([^/:?#]+):?(%d*)(.*)$") end
  port = tonumber(port ~= "" and port or "80")
  if not host or not port or port < 1 or port > 65535 or (path ~= "" and path:sub(1, 1) ~= "/") then
    return nil, "bad URL " .. url
  end
  return {host = host, port = port, path = path ~= "" and path or "/"}
end

return M
