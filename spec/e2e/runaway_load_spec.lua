-- End-to-end: the runaway guard on a loaded machine (T7, issue 25 point 7).
-- arbor is pinned to one CPU beside busy sibling processes and a thread of
-- its own that burns CPU, so its engine thread gets a fraction of the CPU:
-- a job that works less than the limit in CPU time but longer than it in
-- real time finishes, and a loop is still stopped. The job measures its own
-- work in the engine thread's CPU time, so the spec holds under the
-- sanitizers and whatever else loads the machine.
local support = require "e2e.support"
local bin, fixtures, q = support.bin, support.fixtures, support.q

-- The first CPU this process may run on.
local function a_cpu()
  local status = assert(support.read("/proc/self/status"))
  return assert(status:match("Cpus_allowed_list:%s*(%d+)"))
end

-- Runs the runaway_load fixture (mode, limit, work) pinned to one CPU
-- with `burners` busy processes pinned beside it; returns its output.
local function loaded(mode, limit, work, burners)
  local cpu = a_cpu()
  local pids = {}
  for i = 1, burners do
    pids[i] = support.capture(support.plain .. "taskset -c " .. cpu
      .. " sh -c 'while :; do :; done' >/dev/null 2>&1 & echo $!"):match("%d+")
  end
  local ok, out = pcall(support.capture, "timeout 120 taskset -c " .. cpu .. " "
    .. bin .. " run --control none " .. q(fixtures .. "runaway_load.lua") .. " "
    .. mode .. " " .. limit .. " " .. (work or 0) .. " 2>&1; echo \"exit:$?\"")
  os.execute("kill " .. table.concat(pids, " ") .. " 2>/dev/null")
  assert(ok, out)
  return out
end

describe("the runaway guard on a loaded engine", function()
  it("lets a job run that works less than the limit in the engine's CPU time "
    .. "but longer in real time", function()
    local out = loaded("job", 1, 0.5, 3)
    local cpu, wall = out:match("job cpu_ms=(%d+) wall_ms=(%d+)")
    assert(cpu, "the job did not finish:\n" .. out)
    -- the load made the job last longer than the limit in real time (else
    -- this spec would prove nothing)
    assert(tonumber(wall) > 1000, "the load did not slow the job down:\n" .. out)
    assert.matches("exit:0", out, 1, true)
    assert.not_matches("runaway", out, 1, true)
  end)

  it("still stops a runnable that never yields", function()
    local out = loaded("loop", 1, 0, 3)
    local ran = out:match("failed: runaway runnable: ran (%d+) ms without yielding "
      .. "%(limit 1000 ms%)")
    assert(ran, out)
    assert.is_true(tonumber(ran) >= 1000, out)
    assert.matches("exit:0", out, 1, true)
  end)
end)
