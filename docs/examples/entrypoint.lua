-- A container entrypoint: arbor as PID 1 supervising the container's
-- services. In a Dockerfile:
--
--   COPY entrypoint.lua /etc/arbor/entrypoint.lua
--   ENTRYPOINT ["arbor", "run", "--init", "/etc/arbor/entrypoint.lua"]
--
-- As PID 1 (or with --init as a subreaper), arbor reaps orphaned processes
-- (the zombies a container's PID 1 must collect), turns SIGTERM (docker
-- stop) into an ordered stop of the tree, forwards SIGHUP, SIGUSR1 and
-- SIGUSR2 to the process groups, and exits 0 after a clean stop. Try it
-- without a container: `unshare --pid --fork --mount-proc arbor run --init
-- docs/examples/entrypoint.lua` (as root).
--
--   root
--   |-- app      the main service: HEALTHY when it says so (s6 style)
--   `-- cron     a sidecar that leaves orphans behind on purpose
local arbor = require "arbor"

local app = [[
  echo "app: loading"
  sleep 0.5
  echo ready >&$ARBOR_NOTIFY_FD   # tells arbor it is ready
  trap 'echo "app: reloading"' HUP
  while :; do sleep 1 & wait $!; done
]]

-- Starts a daemon that double-forks out of its group and exits: without a
-- reaper, each one would stay a zombie under PID 1.
local cron = [[
  while :; do
    setsid sh -c 'sleep 1' &
    sleep 5
  done
]]

return function(ctx)
  ctx:run("app", arbor.exec({"sh", "-c", app}, {ready = "notify", grace = 10}),
    {shutdown = 15})
  ctx:run("cron", arbor.exec({"sh", "-c", cron}))
  ctx:signal("healthy")
  ctx:wait()
end
