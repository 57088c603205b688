-- The engine measured by spec/bench/control.lua: a tree of about N idle
-- nodes (groups of 1000 leaves), serving its control socket.
local arbor = require "arbor"
local n = tonumber(arg[1]) or 100000
local function idle(c) c:signal("healthy") c:wait() end
arbor.run(function(ctx)
  local groups = math.max(1, n // 1000)
  for g = 1, groups do
    ctx:run("g" .. g, function(c)
      for i = 1, math.min(1000, n) do c:run("n" .. i, idle) end
      c:signal("healthy")
      c:wait()
    end)
  end
  ctx:signal("healthy")
  ctx:wait()
end)
