-- A shop whose payments node crash-loops: the tree of docs/repl.md.
-- Run it with `arbor run docs/examples/shop.lua`, then `arbor repl`.
--
--   root
--   |-- web          two request handlers
--   |   |-- h1
--   |   `-- h2
--   |-- payments     fails on every order without an amount (a bug)
--   `-- stock        counts the stock every second
local arbor = require "arbor"

local function handler(ctx)
  ctx:signal("healthy")
  while true do ctx:sleep(1) end
end

local orders = {{id = 1, amount = 30}, {id = 2}, {id = 3, amount = 12}}

local function payments(ctx)
  ctx:signal("healthy")
  for _, order in ipairs(orders) do
    ctx:sleep(0.5)
    ctx:log("charging order", order.id, order.amount * 100, "cents")
  end
  ctx:wait()
end

local function stock(ctx)
  ctx:signal("healthy")
  local n = 0
  while true do
    n = n + 1
    if n % 10 == 0 then ctx:log("stock counted", n, "times") end
    ctx:sleep(1)
  end
end

arbor.run(function(ctx)
  ctx:run("web", function(c)
    c:group({h1 = handler, h2 = handler})
    c:signal("healthy")
    c:wait()
  end)
  ctx:run("payments", payments,
    {policy = arbor.policy.exponential{initial = 1, max = 60}})
  ctx:run("stock", stock)
  ctx:signal("healthy")
  ctx:wait()
end)
