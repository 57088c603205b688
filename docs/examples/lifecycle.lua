-- A service with a lifecycle: run it with `arbor run docs/examples/lifecycle.lua`
-- (or `scripts/run docs/examples/lifecycle.lua`). It ends by itself after
-- the app has handled its orders; Ctrl-C stops it earlier, and the flush
-- runs then too. The work is simulated with Lua runnables.
--
--   root
--   `-- shop         the parent: its coordinator orders the children
--       |-- migrate  prestart: a one-shot job, DONE before main starts
--       |-- proxy    prestart sidecar: must be HEALTHY before main starts,
--       |            canceled once main finished
--       |-- app      main: handles orders, then finishes
--       |-- warmup   poststart: fills the cache once app is HEALTHY
--       `-- flush    poststop: runs after all the others exited
local arbor = require "arbor"

local ORDERS = 5
local handled = {}   -- orders handled but not yet flushed to "disk"

local function migrate(ctx)
  for i = 1, 3 do
    ctx:sleep(0.3)
    ctx:log("migration", i, "of 3 applied")
  end
  ctx:signal("healthy")
  ctx:signal("done")
end

local function proxy(ctx)
  ctx:log("proxy: binding port 8080")
  ctx:sleep(0.5)                       -- not ready yet: main waits (L1)
  ctx:signal("healthy")
  ctx:log("proxy: ready")
  ctx:wait()                           -- until canceled (L4, or Ctrl-C)
end

local function app(ctx)
  ctx:sleep(0.2)
  ctx:signal("healthy")                -- poststart may start now (L2)
  for order = 1, ORDERS do
    ctx:sleep(0.5)
    handled[#handled + 1] = order
    ctx:log("handled order", order)
  end
  ctx:signal("done")                   -- main finished: wind down (L4)
end

local function warmup(ctx)
  ctx:log("warming the cache")
  ctx:sleep(0.4)
  ctx:signal("healthy")
  ctx:signal("done")
end

local function flush(ctx)
  ctx:log("flushing", #handled, "orders")
  ctx:sleep(0.3)
  handled = {}
  ctx:log("flushed; the shop closes")
  ctx:signal("healthy")
  ctx:signal("done")
end

local function shop(ctx)
  ctx:run("migrate", migrate, {lifecycle = "prestart"})
  ctx:run("proxy", proxy, {lifecycle = "prestart", sidecar = true})
  ctx:run("app", app)
  ctx:run("warmup", warmup, {lifecycle = "poststart"})
  ctx:run("flush", flush, {lifecycle = "poststop", shutdown = 2})
  ctx:signal("healthy")
  ctx:signal("done")                   -- its children go on (T5)
end

return function(ctx)
  ctx:run("shop", shop)
  ctx:signal("healthy")
  ctx:signal("done")                   -- the tree ends when everything exited
end
