-- A pool of worker processes: run it with `arbor run docs/examples/pool.lua
-- [N]`, stop it with Ctrl-C. Each worker is its own node: a crash restarts
-- that worker alone, with its own backoff; the pool itself is a node whose
-- children stop last-started first.
--
--   root
--   `-- pool
--       |-- w1 .. wN   sh loops that sometimes crash
local arbor = require "arbor"

local n = tonumber(arg and arg[1]) or 4

-- A worker that "processes jobs" and crashes now and then (exit 3).
local worker = [[
  i=0
  while :; do
    i=$((i + 1))
    echo "worker $WORKER: job $i"
    [ $((i % 7)) -eq 0 ] && [ $(( $(od -An -N1 -tu1 /dev/urandom) % 3 )) -eq 0 ] && exit 3
    sleep 1
  done
]]

return function(ctx)
  ctx:run("pool", function(pool)
    for i = 1, n do
      pool:run("w" .. i, arbor.exec({"sh", "-c", worker},
        {env = {WORKER = tostring(i)}, grace = 2}),
        {policy = arbor.policy.exponential{initial = 0.5, max = 10}})
    end
    pool:signal("healthy")
    pool:wait()
  end)
  ctx:signal("healthy")
  ctx:wait()
end
