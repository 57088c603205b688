-- Randomized reloads on the virtual clock (issue 17): random trees of
-- supervisors, leaves, groups and lifecycle children; between reloads,
-- random faults (failures, stops, restarts) and random changes to the
-- script (a node's code, a child added or removed, a group's members).
-- Checked after each reload, once time has let every policy act: the
-- reload ended (no node still adopting), the tree is exactly the new
-- script's (every DN it makes, no other), every service runs and every job
-- ran, and a node the reload kept that no fault touched kept its
-- incarnation. At the end the tree stops completely. Deterministic: the
-- generator is seeded (SEED=N runs one seed, ARBOR_RANDOM_SEEDS=N seeds
-- 1 to N, as the other random specs).
local cli = require "arbor.cli"
local policy = require "arbor.policy"
local reload = require "arbor.reload"
local support = require "support"
local generator = support.generator

after_each(support.close_all)

-- A script is a tree of specs: {name, kind = "leaf" | "sup" | "job",
-- tag = n (the code's captured value: changing it changes the definition),
-- lc = lifecycle (children of a sup), group = true (its leaves are one
-- ctx:group), children = {...}}.
local function runnable(spec)
  local tag = spec.tag
  if spec.kind == "job" then
    return function(ctx) local _ = tag ctx:signal("healthy") ctx:signal("done") end
  elseif spec.kind == "leaf" then
    return function(ctx) local _ = tag ctx:signal("healthy") ctx:wait() end
  end
  local children = spec.children
  return function(ctx)
    local members = {}
    for _, c in ipairs(children) do
      if c.member then
        members[c.name] = runnable(c)
      else
        ctx:run(c.name, runnable(c), {lifecycle = c.lc, sidecar = c.sidecar,
          policy = policy.constant(0.5)})
      end
    end
    if next(members) then ctx:group(members, {strategy = "one_for_all", policy = policy.constant(0.5)}) end
    local _ = tag
    ctx:signal("healthy")
    ctx:wait()
  end
end

local function copy(spec)
  local c = {}
  for k, v in pairs(spec) do c[k] = v end
  if spec.children then
    c.children = {}
    for i, ch in ipairs(spec.children) do c.children[i] = copy(ch) end
  end
  return c
end

-- Every DN a spec makes, with its kind; gated: the DNs whose parent
-- orders its children by lifecycle gates.
local function dns(spec, prefix, out, gated)
  out, gated = out or {}, gated or {}
  local dn = prefix and prefix .. "." .. spec.name or spec.name
  out[dn] = spec.kind
  local lc = false
  for _, c in ipairs(spec.children or {}) do lc = lc or c.lc ~= nil end
  for _, c in ipairs(spec.children or {}) do
    if lc then gated[dn .. "." .. c.name] = true end
    dns(c, dn, out, gated)
  end
  return out, gated
end

local function scenario(seed)
  local rnd = generator(seed)
  local names = 0
  local function name()
    names = names + 1
    return "n" .. names
  end

  local function make(depth)
    local kind = depth < 3 and rnd(3) == 1 and "sup" or "leaf"
    local spec = {name = name(), kind = kind, tag = rnd(1000)}
    if kind == "sup" then
      spec.children = {}
      for _ = 1, rnd(4) do spec.children[#spec.children + 1] = make(depth + 1) end
      local r = rnd(6)
      if r == 1 then -- a group of two leaves
        for _ = 1, 2 do
          spec.children[#spec.children + 1] = {name = name(), kind = "leaf", tag = rnd(1000), member = true}
        end
      elseif r == 2 then -- a prestart job and a poststart sidecar
        table.insert(spec.children, 1, {name = name(), kind = "job", tag = rnd(1000), lc = "prestart"})
        spec.children[#spec.children + 1] = {name = name(), kind = "leaf", tag = rnd(1000),
          lc = "poststart", sidecar = true}
      end
    end
    return spec
  end

  -- The supervisors of spec, depth first.
  local function sups(spec, out)
    out = out or {}
    if spec.kind == "sup" then
      out[#out + 1] = spec
      for _, c in ipairs(spec.children) do sups(c, out) end
    end
    return out
  end

  -- A random change to spec (in place).
  local function mutate(spec)
    local all = sups(spec)
    local s = all[rnd(#all)]
    local r = rnd(5)
    if r == 1 then
      s.tag = rnd(1000)
    elseif r == 2 and #s.children > 0 then
      local c = s.children[rnd(#s.children)]
      c.tag = rnd(1000)
    elseif r == 3 then
      s.children[#s.children + 1] = make(3)
    elseif r == 4 and #s.children > 1 then
      local i = rnd(#s.children)
      if not s.children[i].lc then table.remove(s.children, i) end
    else
      for _, c in ipairs(s.children) do
        if c.member then c.member = nil break end -- a group loses a member
      end
    end
  end

  local root = {name = "root", kind = "sup", tag = 0, children = {}}
  for _ = 1, 2 + rnd(3) do root.children[#root.children + 1] = make(1) end
  local h = support.new{seed = seed}
  local current = runnable(root)
  h:start(current)
  h:advance(5)

  for round = 1, 6 do
    -- faults
    local touched = {}
    local before = {}
    for dn in pairs(dns(root)) do
      local v = h:node(dn)
      if v then before[dn] = v.incarnation end
    end
    for _ = 1, rnd(4) - 1 do
      -- (not the children of a gated parent: stopping one of them by hand
      -- finishes it for good, as the lifecycle rules say)
      local list = {}
      local all, gated = dns(root)
      for dn, kind in pairs(all) do
        if dn ~= "root" and kind ~= "job" and not gated[dn] then list[#list + 1] = dn end
      end
      table.sort(list)
      local dn = list[rnd(#list)]
      local a = rnd(3)
      if a == 1 then pcall(h.fail, h, dn, "boom")
      elseif a == 2 then pcall(function() h:node(dn):restart() end)
      else pcall(function() h:node(dn):stop() h:settle() h:node(dn):restart() end) end
      touched[dn] = true
      h:advance(rnd(3) / 2)
    end
    -- a change, applied while the faults' restarts may still be pending
    local new = copy(root)
    for _ = 1, rnd(3) do mutate(new) end
    new.tag = round
    local fresh = runnable(new)
    local check, errors, kept = reload.build(h.engine, fresh, {})
    assert.same({}, errors, "seed " .. seed)
    local plan = reload.plan(h.engine, check, {fn = current, opts = {}},
      {fn = fresh, opts = {}}, kept)
    cli.close_built(check)
    assert(reload.apply(h.engine, plan, fresh, nil))
    local action = {}
    for _, s in ipairs(plan.steps) do action[s.dn] = s.action end
    h:settle()
    h:advance(30)
    -- the reload ended and the tree is the new script's, all of it running
    local where = string.format("seed %d round %d", seed, round)
    assert.is_false(h.engine:reloading(), where)
    local want = dns(new)
    for _, v in ipairs(support.each_node(h:tree())) do
      assert.is_truthy(want[v.dn], where .. ": " .. v.dn .. " is not in the new script")
      local expect = want[v.dn] == "job" and "DONE" or "HEALTHY"
      if not (want[v.dn] == "job" and v.state == "HEALTHY") then
        assert.equal(expect, v.state, where .. ": " .. v.dn)
      end
      want[v.dn] = nil
    end
    assert.same({}, want, where .. ": missing")
    -- what the reload kept and no fault touched kept its incarnation
    for dn, a in pairs(action) do
      local parent_touched = false
      for t in pairs(touched) do
        if dn == t or dn:sub(1, #t + 1) == t .. "." then parent_touched = true end
      end
      if a == "keep" and before[dn] and not parent_touched then
        local kept_ok = true
        for d in pairs(touched) do -- a group's strategy restarts siblings
          if d:match("^(.*)%.[^.]+$") == dn:match("^(.*)%.[^.]+$") then kept_ok = false end
        end
        if kept_ok then assert.equal(before[dn], h:node(dn).incarnation, where .. ": kept " .. dn) end
      end
    end
    root, current = new, fresh
  end
  h:stop()
  h:advance(60)
  assert.is_true(h.engine:finished(), "seed " .. seed .. ": the tree did not stop")
end

describe("random reloads", function()
  for seed = tonumber(os.getenv("SEED") or 1), tonumber(os.getenv("SEED") or os.getenv("ARBOR_RANDOM_SEEDS") or 200) do
    it("seed " .. seed, function() scenario(seed) end)
  end
end)
