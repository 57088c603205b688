-- The tree of docs/deploy.md's deployments: a systemd service
-- (/etc/arbor/service.lua, `systemctl enable --now arbor@service`), a
-- container's entrypoint, a Kubernetes pod, a Nomad task. Run it here with
-- `arbor run docs/examples/service.lua`.
--
--   root     HEALTHY once app is: READY=1 for systemd, and
--   |        `arbor ctl status --ready` exits 0 (a readiness probe)
--   |-- app     a program (a shell loop standing in for yours), HEALTHY
--   |           when it writes to $ARBOR_NOTIFY_FD; 10 s between SIGTERM
--   |           and SIGKILL when stopped
--   `-- ticker  a Lua runnable logging a line every 10 s
--
-- Its stop bound (`arbor ctl status`): root 5 s + app 15 s + ticker 5 s
-- = 25 s, the least TimeoutStopSec, terminationGracePeriodSeconds or
-- kill_timeout that lets a stop finish in order.
local arbor = require "arbor"

local app = [[
  echo "app: starting"
  echo ready >&$ARBOR_NOTIFY_FD
  trap 'echo "app: stopping"; exit 0' TERM
  while :; do sleep 1 & wait $!; done
]]

return function(ctx)
  ctx:run("app", arbor.exec({"sh", "-c", app}, {ready = "notify", grace = 10}),
    {shutdown = 15})
  ctx:run("ticker", function(c)
    c:signal("healthy")
    while true do
      c:sleep(10)
      c:log("tick")
    end
  end)
  while arbor.node("root.app").state ~= "HEALTHY" do ctx:sleep(0.1) end
  ctx:signal("healthy")
  ctx:wait()
end
