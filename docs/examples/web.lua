-- A web site supervised with lifecycle gates and a readiness probe: run it
-- with `arbor run docs/examples/web.lua [PORT]`, stop it with Ctrl-C.
--
--   root
--   `-- site         its coordinator orders the three children below
--       |-- migrate  prestart job: a one-shot process that writes the
--       |            site's content (standing in for a schema migration);
--       |            the server does not start until it exits 0
--       |-- web      main: busybox httpd (or python3's http.server),
--       |            HEALTHY once its port accepts connections (TCP probe),
--       |            restarted with a backoff
--       `-- checker  poststart sidecar: starts once web is HEALTHY and
--                    fetches / every 5 s over luv on arbor's loop
local arbor = require "arbor"

local port = tonumber(arg and arg[1]) or 8080
local dir = os.getenv("TMPDIR") or "/tmp"

local server
if os.execute("busybox httpd --help >/dev/null 2>&1") then
  server = {"busybox", "httpd", "-f", "-p", "127.0.0.1:" .. port, "-h", dir}
else
  server = {"python3", "-m", "http.server", tostring(port), "--bind", "127.0.0.1"}
end

-- The "migration": a one-shot process that must exit 0 before web starts.
local migrate = {"sh", "-c", [[
echo "migrating $0"
printf '<h1>site v2</h1>\n' > "$0/index.html"
echo migrated]], dir}

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
  ctx:run("site", function(site)
    site:run("migrate", arbor.exec(migrate, {oneshot = true}),
      {lifecycle = "prestart", policy = arbor.policy.constant(2)})
    site:run("web", arbor.exec(server, {
      cwd = dir,
      ready = {probe = arbor.probe.tcp("127.0.0.1", port), interval = 0.2},
      grace = 5,
    }), {policy = arbor.policy.exponential{initial = 1, max = 30}})
    site:run("checker", function(c)
      c:signal("healthy")
      while true do
        c:log("GET / ->", fetch(c))
        c:sleep(5)
      end
    end, {lifecycle = "poststart", sidecar = true})
    site:signal("healthy")
    site:wait()
  end)
  ctx:signal("healthy")
  ctx:wait()
end
