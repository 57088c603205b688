-- The real-clock engine (arbor.run on libuv) under random trees: nodes that
-- sleep, fail, spawn, use channels and steer the tree; each tree stops itself
-- after a short real time. Only termination and the outcome are checked,
-- never timings.
local arbor = require "arbor"
local policy = require "arbor.policy"

local generator = require("support").generator

local function scenario(seed)
  local rnd = generator(seed)
  local ch = arbor.channel(rnd(3) - 1)
  local function make(depth)
    local steps = {}
    for i = 1, rnd(5) do steps[i] = rnd(8) end
    return function(ctx)
      for i, step in ipairs(steps) do
        if step == 1 then
          pcall(ctx.signal, ctx, "healthy")
        elseif step == 2 then
          ctx:sleep(rnd(5) / 1000)
        elseif step == 3 and depth < 3 then
          pcall(ctx.run, ctx, "c" .. rnd(3), make(depth + 1),
            {policy = policy.constant(rnd(3) / 1000), shutdown = 0.05})
        elseif step == 4 then
          error("random failure " .. i)
        elseif step == 5 then
          ch:send(i)
        elseif step == 6 then
          ch:recv()
        elseif step == 7 then
          local view = arbor.node(ctx.dn)
          pcall(view.cancel, view)
        else
          coroutine.yield()
        end
      end
      pcall(ctx.signal, ctx, "healthy")
      ctx:wait()
    end
  end
  local events = 0
  local ok, err = arbor.run(function(ctx)
    ctx:run("tree", make(0), {policy = policy.constant(0.002)})
    ctx:run("timer", function(c)
      c:signal("healthy")
      c:sleep(0.05 + rnd(10) / 100)
      arbor.stop()
      c:wait()
    end)
    ctx:signal("healthy")
    ctx:wait()
  end, {signals = false, on_event = function() events = events + 1 end,
    runaway = 5})
  return ok, err, events
end

describe("the real-clock engine under random trees", function()
  for seed = 1, tonumber(os.getenv("ARBOR_REALCLOCK_SEEDS") or 20) do
    it("seed " .. seed, function()
      local ok, err, events = scenario(seed)
      -- a clean stop, or one that had to force a stuck node down
      if not ok then
        assert.matches("closed at their shutdown deadline", err, 1, true)
      end
      assert.is_true(events > 0)
    end)
  end
end)
