--- arbor.probe: readiness probes for arbor.exec{ready = {probe = fn}}.
-- A probe is a function(ctx) -> true when the service is ready; it runs in
-- the node's coroutine and may block (ctx:await, ctx:sleep).
local M = {}

local function is_ip(host)
  return host:match("^%d+%.%d+%.%d+%.%d+$") or host:find(":", 1, true)
end

--- arbor.probe.tcp(host, port [, timeout]) -> probe: true once a TCP
-- connection to host:port succeeds (within timeout seconds, default 1).
-- Uses luv on arbor's loop; the socket is closed whatever happens.
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
    local uv = require "luv"
    local ip = host
    if not is_ip(host) then
      local res = ctx:await(function(cb)
        uv.getaddrinfo(host, nil, {socktype = "stream"}, function(err, r)
          cb(not err and r and r[1] and r[1].addr)
        end)
      end)
      if not res then return false end
      ip = res
    end
    local tcp = uv.new_tcp()
    local timer = uv.new_timer()
    local guard <close> = setmetatable({}, {__close = function()
      if not tcp:is_closing() then tcp:close() end
      if not timer:is_closing() then timer:close() end
    end})
    return ctx:await(function(cb)
      timer:start(math.floor(timeout * 1000), 0, function() cb(false) end)
      tcp:connect(ip, port, function(err) cb(err == nil) end)
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
