-- A small supervisor: run it with `arbor run docs/examples/workers.lua`
-- (or `scripts/run`), stop it with Ctrl-C.
--
--   root
--   |-- consumer          a group (ctx:group): consumer and producer are
--   |-- producer          children of root that share their fate
--   |-- flaky             fails every few seconds, restarted by its policy
--   `-- reporter          draws the tree every 5 seconds
local arbor = require "arbor"

local jobs = arbor.channel(10)

local function producer(ctx)
  ctx:signal("healthy")
  local n = 0
  while true do
    n = n + 1
    jobs:send("job " .. n)  -- blocks while the channel is full
    ctx:sleep(0.5)
  end
end

local function consumer(ctx)
  ctx:signal("healthy")
  while true do
    local job = jobs:recv() -- blocks until a job arrives
    if math.random() < 0.05 then ctx:log("done with", job) end
  end
end

local function flaky(ctx)
  ctx:signal("healthy")
  ctx:sleep(2 + 2 * arbor.random())
  error("lost the connection to the imaginary database")
end

local function reporter(ctx)
  ctx:signal("healthy")
  while true do
    ctx:sleep(5)
    print("\n" .. arbor.render(arbor.tree()) .. "\n")
    io.stdout:flush()
  end
end

return function(ctx)
  ctx:group({producer = producer, consumer = consumer})
  ctx:run("flaky", flaky, {policy = arbor.policy.exponential{initial = 1}})
  ctx:run("reporter", reporter)
  ctx:signal("healthy")
  ctx:wait()
end
