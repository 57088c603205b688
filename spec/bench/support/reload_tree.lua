-- The tree spec/bench/reload.lua reloads: `supervisors` supervisors of
-- `leaves` Lua leaves each, and `procs` sleep processes; the root logs the
-- version read from the file `arg[1]` when the script runs, so changing the
-- file changes the root's definition (and nothing else).
local arbor = require "arbor"
local path, supervisors, leaves, procs = arg[1], tonumber(arg[2]), tonumber(arg[3]), tonumber(arg[4])
local f = assert(io.open(path))
local version = f:read("l")
f:close()

local function leaf(ctx) ctx:signal("healthy") ctx:wait() end

local function supervisor(ctx)
  for i = 1, leaves do ctx:run("l" .. i, leaf) end
  ctx:signal("healthy")
  ctx:wait()
end

arbor.run(function(ctx)
  for i = 1, supervisors do ctx:run("s" .. i, supervisor) end
  for i = 1, procs do ctx:run("p" .. i, arbor.exec{"sleep", "100000"}) end
  ctx:log("version " .. version)
  ctx:signal("healthy")
  ctx:wait()
end)
