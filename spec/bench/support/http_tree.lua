-- The engine measured by spec/bench/http.lua: N idle nodes (groups of
-- 1000 leaves), HTTP served on a free port written to the file arg[2], and
-- a node that sleeps 1 ms over and over, noting the longest the loop made
-- it wait past that, in wall-clock time and in arbor's CPU time over the
-- same wait (what arbor itself did; the rest, other processes had the
-- CPU): `eval "return loop_gap(true)"` returns both in milliseconds and
-- starts over.
local arbor = require "arbor"
local core = require "arbor.core"
local http = require "arbor.http"
local uv = require "luv"
local n, port_file = tonumber(arg[1]) or 30000, assert(arg[2])
local gap, cpu_gap = 0, 0

local function cpu() -- ns
  local r = uv.getrusage()
  return (r.utime.sec + r.stime.sec) * 1e9 + (r.utime.usec + r.stime.usec) * 1e3
end

function _G.loop_gap(reset)
  local g, c = gap, cpu_gap
  if reset then gap, cpu_gap = 0, 0 end
  return g / 1e6, c / 1e6
end

local function idle(c) c:signal("healthy") c:wait() end
arbor.run(function(ctx)
  for g = 1, math.max(1, n // 1000) do
    ctx:run("g" .. g, function(c)
      for i = 1, math.min(1000, n) do c:run("n" .. i, idle) end
      c:signal("healthy")
      c:wait()
    end)
  end
  ctx:run("ticker", function(c)
    c:signal("healthy")
    while true do
      local t0, c0 = core.hrtime(), cpu()
      c:sleep(0.001)
      gap = math.max(gap, core.hrtime() - t0 - 1000000)
      cpu_gap = math.max(cpu_gap, cpu() - c0)
    end
  end)
  local web = assert(http.serve(core.current(), "127.0.0.1:0", {max_series = 2 * n}))
  local f = assert(io.open(port_file, "w"))
  f:write(web.port, "\n")
  f:close()
  ctx:signal("healthy")
  ctx:wait()
end)
