-- Randomized lifecycle trees on the virtual clock: parents add children with
-- random lifecycles (prestart, prestart sidecar, main, poststart, poststart
-- sidecar, poststop) whose runnables succeed, fail, finish or hang at random;
-- random outside actions fail, cancel, stop and restart nodes and move time.
-- Checked after each step: no child runs ahead of its gate (a child runs
-- only in coordinator states where its gate has opened), a blocked child's
-- gate is closed, live counts add up; at the end the tree stops completely.
local testing = require "arbor.testing"
local policy = require "arbor.policy"

local support = require "support"
local generator, each_node = support.generator, support.each_node

local rank = {init = 0, prestart = 1, main = 2, poststart = 3, running = 4,
  poststop = 5}
-- the first coordinator state whose table row opens the gate
local first_open = {prestart = 1, main = 2, poststart = 3, poststop = 5}
-- gate open in a state (the table)
local function open(lc, sidecar, state)
  local r = rank[state]
  if lc == "prestart" then return sidecar and r >= 1 and r <= 4 or r == 1 end
  if lc == "main" then return r >= 2 and r <= 4 end
  if lc == "poststart" then return sidecar and (r == 3 or r == 4) or r == 3 end
  return r == 5
end

local kinds = {
  {lifecycle = "prestart"}, {lifecycle = "prestart", sidecar = true},
  {}, {}, {lifecycle = "poststart"}, {lifecycle = "poststart", sidecar = true},
  {lifecycle = "poststop"},
}

local policies = {
  function() return policy.constant(0.25) end,
  function() return policy.never end,
  function() return function() return "escalate" end end,
  function() return nil end,
}

local function scenario(seed)
  local rnd = generator(seed)
  local make

  function make(depth)
    local steps = {}
    for i = 1, rnd(5) do steps[i] = rnd(9) end
    local kids = {}
    if depth < 2 then
      for i = 1, rnd(5) - 1 do kids[i] = {kinds[rnd(#kinds)], rnd(#policies)} end
    end
    return function(ctx)
      for i, k in ipairs(kids) do
        local opts = {policy = policies[k[2]](), shutdown = rnd(3) - 1}
        for key, v in pairs(k[1]) do opts[key] = v end
        pcall(ctx.run, ctx, "c" .. i, make(depth + 1), opts)
      end
      for i, step in ipairs(steps) do
        if step == 1 then
          pcall(ctx.signal, ctx, "healthy")
        elseif step == 2 then
          ctx:sleep(rnd(4) / 2)
        elseif step == 3 then
          error("random failure " .. i)
        elseif step == 4 then
          pcall(ctx.signal, ctx, "healthy")
          pcall(ctx.signal, ctx, "done")
          return
        elseif step == 5 then
          local ok, err = pcall(ctx.wait, ctx)
          if not ok and rnd(2) == 1 then error(err, 0) end
          return
        elseif step == 6 then
          ctx:shield(function() ctx:sleep(1) end)
        elseif step == 7 and depth < 2 then
          pcall(ctx.run, ctx, "late" .. i, make(2), kinds[rnd(#kinds)])
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
  local function check()
    for _, n in ipairs(each_node(h:tree())) do
      local v = h.engine:node(n.dn)
      local live = v.running and 1 or 0
      for _, name in ipairs(v.children) do
        local c = h.engine:node(n.dn .. "." .. name)
        live = live + math.min(1, c.live)
        local where = string.format("seed %d: %s in coordinator %s",
          seed, c.dn, tostring(v.coordinator))
        if c.running and not c.retired then
          -- a parent of plain main children has no coordinator
          if v.coordinator then
            assert(rank[v.coordinator] >= first_open[c.lifecycle], where)
          else
            assert(c.lifecycle == "main" and not c.sidecar, where)
          end
        end
        if c.blocked and not v.canceled then
          assert(not open(c.lifecycle, c.sidecar, v.coordinator), where)
        end
      end
      assert.equal(live, v.live, n.dn)
    end
  end
  for _ = 1, 30 do
    local nodes = each_node(h:tree())
    local pick = nodes[rnd(#nodes)].dn
    local view = h:node(pick)
    local action = rnd(7)
    if action == 1 and view.running then
      h:fail(pick, "injected")
    elseif action == 2 and not view.retired then
      view:cancel()
    elseif action == 3 and pick ~= "root" then
      view:stop()
    elseif action == 4 and not view.retired then
      pcall(view.restart, view)
    else
      h:advance(rnd(8) / 4)
    end
    check()
  end
  h:stop()
  assert.is_true(h.engine:finished(), "tree did not stop (seed " .. seed
    .. "):\n" .. require("arbor").render(h:tree()))
  assert.equal(0, h.engine:node("root").live)
  h:close()
end

describe("random lifecycle trees", function()
  for seed = 1, tonumber(os.getenv("ARBOR_RANDOM_SEEDS") or 300) do
    it("seed " .. seed, function() scenario(seed) end)
  end
end)
