-- A web server supervised with a readiness probe: run it with
-- `arbor run docs/examples/web.lua [PORT]`, stop it with Ctrl-C.
--
--   root
--   |-- web      python3's http.server (or busybox httpd): HEALTHY once its
--   |            port accepts connections, restarted with a backoff
--   `-- checker  once the server is HEALTHY, fetches / every 5 s over luv
--
-- (With the lifecycle gates, a database migration would run as the web
-- node's prestart gate; this example starts the server directly.)
local arbor = require "arbor"

local port = tonumber(arg and arg[1]) or 8080
local dir = os.getenv("TMPDIR") or "/tmp"

local server
if os.execute("command -v python3 >/dev/null 2>&1") then
  server = {"python3", "-m", "http.server", tostring(port), "--bind", "127.0.0.1"}
else
  server = {"busybox", "httpd", "-f", "-p", "127.0.0.1:" .. port}
end

-- Reads the first line of http://127.0.0.1:port/ with luv on arbor's loop.
local function fetch(ctx)
  local uv = require "luv"
  local tcp = uv.new_tcp()
  local guard <close> = setmetatable({}, {__close = function()
    if not tcp:is_closing() then tcp:close() end
  end})
  return ctx:await(function(cb)
    tcp:connect("127.0.0.1", port, function(err)
      if err then return cb(nil, err) end
      tcp:write("GET / HTTP/1.0\r\n\r\n")
      tcp:read_start(function(rerr, data)
        cb(data and data:match("^[^\r\n]*") or nil, rerr or "closed")
      end)
    end)
  end)
end

return function(ctx)
  ctx:run("web", arbor.exec(server, {
    cwd = dir,
    ready = {probe = arbor.probe.tcp("127.0.0.1", port), interval = 0.2},
    grace = 5,
  }), {policy = arbor.policy.exponential{initial = 1, max = 30}})
  ctx:run("checker", function(c)
    c:signal("healthy")
    while true do
      local web = arbor.node("root.web")
      if web and web.state == "HEALTHY" then
        c:log("GET / ->", fetch(c))
      end
      c:sleep(5)
    end
  end)
  ctx:signal("healthy")
  ctx:wait()
end
