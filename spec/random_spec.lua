-- Randomized trees on the virtual clock: random runnables (that sleep, fail,
-- spawn children and groups, signal, use channels, shield, catch their
-- cancellation) and random outside actions (fail, cancel, stop, restart,
-- swap, set_policy, advance). Checked after each step: the engine's own
-- invariants hold (live counts, states of running nodes), and at the end the
-- tree stops completely. Deterministic: the generator is seeded.
local testing = require "arbor.testing"
local arbor = require "arbor"
local policy = require "arbor.policy"

local support = require "support"
local generator, each_node = support.generator, support.each_node

-- (no `immediate`: a runnable that fails at once under it never lets the
-- virtual clock settle)
local policies = {
  function() return policy.constant(0.25) end,
  function() return policy.constant(0.5) end,
  function() return policy.never end,
  function() return function() return "escalate" end end,
  function() return nil end,
  function() return function() error("faulty policy") end end,
}

local function scenario(seed)
  local rnd = generator(seed)
  local ch = arbor.channel(rnd(3) - 1)
  local make

  -- A random runnable: a list of steps chosen now, replayed by each
  -- incarnation.
  function make(depth)
    local steps = {}
    for i = 1, rnd(6) do steps[i] = rnd(14) end
    return function(ctx)
      for i, step in ipairs(steps) do
        if step == 1 then
          if ctx.name ~= "root" or i > 1 then pcall(ctx.signal, ctx, "healthy") end
        elseif step == 2 then
          ctx:sleep(rnd(4) / 2)
        elseif step == 3 and depth < 3 then
          pcall(ctx.run, ctx, "c" .. rnd(4), make(depth + 1),
            {policy = policies[rnd(#policies)](), shutdown = rnd(3) - 1})
        elseif step == 4 and depth < 3 then
          pcall(ctx.group, ctx, {ga = make(depth + 1), gb = make(depth + 1)},
            {policy = policies[rnd(#policies)]()})
        elseif step == 5 then
          error("random failure " .. i)
        elseif step == 6 then
          pcall(ctx.signal, ctx, "done")
        elseif step == 7 then
          ch:send(i)
        elseif step == 8 then
          ch:recv()
        elseif step == 9 then
          ctx:shield(function() ctx:sleep(1) end)
        elseif step == 10 then
          local ok, err = pcall(ctx.wait, ctx)
          if not ok and rnd(2) == 1 then error(err, 0) end
          return
        elseif step == 11 then
          coroutine.yield()
        elseif step == 12 or step == 13 then
          -- steer the tree from inside a runnable, even its own ancestors
          local nodes = each_node(arbor.tree())
          local view = arbor.node(nodes[rnd(#nodes)].dn)
          local op = ({"restart", "cancel", "stop", "set_policy"})[rnd(4)]
          if op == "set_policy" then
            pcall(view.set_policy, view, policies[rnd(#policies)]())
          else
            pcall(view[op], view)
          end
        else
          ctx:log("step", i)
        end
      end
      pcall(ctx.signal, ctx, "healthy")
      ctx:wait()
    end
  end

  local h = testing.new{seed = seed, ring = 1000}
  h:start(make(0), {policy = policy.constant(1)})
  for _ = 1, 40 do
    local nodes = each_node(h:tree())
    local pick = nodes[rnd(#nodes)].dn
    local action = rnd(9)
    local view = h:node(pick)
    if action == 1 and view.running then
      h:fail(pick, "injected")
    elseif action == 2 then
      view:cancel()
    elseif action == 3 then
      pcall(view.restart, view)
    elseif action == 4 and pick ~= "root" then
      view:stop()
    elseif action == 5 then
      pcall(view.swap, view, make(2), {restart = rnd(2) == 1})
    elseif action == 6 then
      view:set_policy(policies[rnd(#policies)]())
    else
      h:advance(rnd(8) / 4)
    end
    -- invariants: a running node is NEW, HEALTHY or DONE; live counts the
    -- node itself running and its children whose subtrees run
    for _, n in ipairs(each_node(h:tree())) do
      local v = h.engine:node(n.dn)
      if v.running then
        assert.is_true(v.state == "NEW" or v.state == "HEALTHY" or
          v.state == "DONE" or v.state == "DEAD", n.dn .. " " .. v.state)
      end
      local live = v.running and 1 or 0
      for _, c in ipairs(v.children) do
        live = live + math.min(1, h.engine:node(n.dn .. "." .. c).live)
      end
      assert.equal(live, v.live, n.dn)
    end
  end
  h:stop()
  local finished = h.engine:finished()
  assert.is_true(finished, "tree did not stop (seed " .. seed .. ")")
  assert.equal(0, h.engine:node("root").live)
  h:close()
end

describe("random trees", function()
  for seed = 1, tonumber(os.getenv("ARBOR_RANDOM_SEEDS") or 500) do
    it("seed " .. seed, function() scenario(seed) end)
  end
end)
