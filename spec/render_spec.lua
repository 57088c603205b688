-- Issue 25 point 5: what the HTTP listener answers from, cheap or in
-- slices. core.not_ready is /readyz's body: the nodes neither HEALTHY nor
-- DONE, the first few listed and the rest counted.
local core = require "arbor.core"
local support = require "support"
local new, idle = support.new, support.idle

after_each(support.close_all)

describe("core.not_ready", function()
  it("lists the first max nodes neither HEALTHY nor DONE, in pre-order, and counts them all", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("up", idle)
      ctx:run("pending", function(c)
        for i = 1, 5 do c:run("n" .. i, function(x) x:wait() end) end
        c:wait()
      end)
      ctx:wait()
    end)
    h:advance(1)
    local text, n = core.not_ready(h.engine, 3)
    assert.equal(7, n) -- root, pending and its five children
    assert.equal("root NEW\nroot.pending NEW\nroot.pending.n1 NEW\n", text)
    local all = select(1, core.not_ready(h.engine, 100))
    assert.equal(7, select(2, all:gsub("\n", "")))
    assert.matches("root.pending.n5 NEW\n$", all)
    assert.same({"", 7}, {core.not_ready(h.engine, 0)})
  end)
end)

-- Renders in slices (l_render.h): /metrics and /tree are made a batch of
-- nodes at a time between loop turns. r:step(0) makes one batch.
local json = require "arbor.json"
local metrics = require "arbor.metrics"

-- A root with `parents` children of `kids` idle children each.
local function wide(parents, kids)
  local h = new()
  h:start(function(ctx)
    for p = 1, parents do
      ctx:run("p" .. p, function(c)
        for i = 1, kids do c:run("k" .. i, idle) end
        idle(c)
      end)
    end
    idle(ctx)
  end)
  h:advance(1)
  return h
end

-- Steps r one batch at a time, calling between(i) before each step;
-- returns the result as one string and the number of steps.
local function slices(r, between)
  local steps = 0
  repeat
    steps = steps + 1
    if between then between(steps) end
  until r:step(0)
  local chunks, len = r:result()
  r:close()
  local s = table.concat(chunks)
  assert.equal(len, #s)
  return s, steps
end

-- The value of the sample `name{labels}` in an exposition.
local function sample(text, name, labels)
  return tonumber(text:match("\n" .. (name .. labels):gsub("%p", "%%%0") .. " (%S+)"))
end

describe("a render in slices", function()
  it("makes the same bytes as one call when the tree does not change, in many steps", function()
    local h = wide(10, 100)
    -- but for Lua's memory, read at the end of each
    local function same(a, b)
      local pat = "arbor_lua_memory_bytes %d+"
      assert.equal(a:gsub(pat, ""), (b:gsub(pat, "")))
    end
    local text, steps = slices(metrics.render(h.engine, {max_series = 5000}))
    same(metrics.text(h.engine, {max_series = 5000}), text)
    assert.is_true(steps >= 1011 * 2 // 64, steps) -- nodes gathered, then written
    local folded = slices(metrics.render(h.engine, {max_series = 100}))
    same(metrics.text(h.engine, {max_series = 100}), folded)
    assert.equal(1000, sample(folded, "arbor_node_series_folded", ""))
    local tree, tsteps = slices(core.tree_render(h.engine))
    assert.equal(core.tree_json(h.engine), tree)
    assert.is_true(tsteps >= 1011 // 64, tsteps)
    assert.equal(core.tree_json(h.engine, "root.p3"), (slices(core.tree_render(h.engine, "root.p3"))))
  end)

  it("reads each node when its slice comes: discarded nodes are left out, new ones wait, counters never go back", function()
    local h = wide(10, 100)
    local mr, tr = metrics.render(h.engine, {max_series = 5000}), core.tree_render(h.engine)
    local restarts = h:node("root.p9.k100").restarts
    -- the first batch (the root, root.p1 and its first children) is read
    -- before the tree changes, the rest after
    local churned
    local function churn(i)
      if i ~= 2 or churned then return end
      churned = true
      h:node("root.p5"):restart() -- its 100 children are discarded
      h:node("root.p10"):run("late", idle) -- not in these renders
      h:node("root.p9.k100"):restart()
      h:node("root.p1.k10"):restart() -- read already
      h:advance(1)
    end
    assert.is_false(tr:step(0)) -- its first batch before the change too
    local text = slices(mr, churn)
    local tree = json.decode((slices(tr)))
    assert.equal("root", tree.dn)
    assert.equal(10, #tree.children)
    for _, p in ipairs(tree.children) do
      assert.equal(p.dn == "root.p5" and 0 or 100, #p.children, p.dn)
    end
    assert.is_nil(text:find('dn="root.p10.late"', 1, true))
    assert.is_nil(text:find('dn="root.p5.k', 1, true))
    assert.equal(1, sample(text, "arbor_node_restarts_total", '{dn="root.p5"}'))
    assert.equal(restarts + 1, sample(text, "arbor_node_restarts_total", '{dn="root.p9.k100"}'))
    assert.equal(1, sample(text, "arbor_node_state", '{dn="root.p9.k100",state="HEALTHY"}'))
    assert.equal(0, sample(text, "arbor_node_restarts_total", '{dn="root.p1.k10"}'))
    -- the next render has them all again
    local again = metrics.text(h.engine, {max_series = 5000})
    assert.equal(0, sample(again, "arbor_node_restarts_total", '{dn="root.p5.k50"}'))
    assert.equal(0, sample(again, "arbor_node_restarts_total", '{dn="root.p10.late"}'))
    assert.equal(1, sample(again, "arbor_node_restarts_total", '{dn="root.p1.k10"}'))
  end)

  it("stops with an error once the engine is closed; closing it then is harmless", function()
    local h = wide(2, 200)
    local r, t = metrics.render(h.engine, {max_series = 5000}), core.tree_render(h.engine)
    assert.is_false(r:step(0))
    assert.is_false(t:step(0))
    h:close()
    assert.has_error(function() r:step(0) end, "engine is closed")
    assert.has_error(function() t:step() end, "engine is closed")
    r:close()
    r:close()
    assert.has_error(function() r:step(0) end, "render is closed")
    t = nil -- collected with its nodes' references
    collectgarbage()
    collectgarbage()
  end)
end)
