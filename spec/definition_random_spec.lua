-- Randomized (issue 25): the same script defines the same nodes, whatever
-- the state of the Lua state that builds it. Random scripts
-- (spec/definition_gen.lua: `arbor.exec` services, Lua leaves and
-- supervisors, every stock policy with random parameters) are built on a
-- check engine in a fresh lua5.4, as the new arbor of a reexec builds them,
-- and here, in a state that ran long: after thousands of policies were
-- made, after every supervisor restarted twice (its children made anew,
-- their policies too) and after the nodes failed and their policies kept
-- state. Every node's canonical text (arbor.definition) must be the same,
-- so neither a reload nor a reexec restarts a node that did not change.
-- Deterministic: SEED=N runs one seed, ARBOR_RANDOM_SEEDS=N seeds 1 to N.
local cli = require "arbor.cli"
local definition = require "arbor.definition"
local policy = require "arbor.policy"
local support = require "support"

local function seeds()
  local one = tonumber(os.getenv("SEED") or "")
  if one then return one, one end
  return 1, tonumber(os.getenv("ARBOR_RANDOM_SEEDS") or "") or 60
end

-- The canonical text of every node of the tree seed's script builds on a
-- check engine, by DN; `age(e, sups)` runs on the engine first.
local function texts(seed, age)
  local gen = require "definition_gen"
  local root, opts, sups = gen(seed)
  local e, errors = cli.build(root, opts)
  assert(#errors == 0, "seed " .. seed .. ": " .. (errors[1] and errors[1].reason or ""))
  if age then age(e, sups) end
  local out = {}
  local function walk(v)
    local d = e:definition(v.dn)
    out[v.dn] = definition.of(d.fn, d.opts)
    for _, c in ipairs(v.children) do walk(c) end
  end
  walk(e:tree("root"))
  cli.close_built(e)
  return out
end

-- Where a and b first differ, with what surrounds it.
local function difference(a, b)
  local i = 1
  while i <= #a and a:byte(i) == b:byte(i) do i = i + 1 end
  local function around(s) return (s:sub(math.max(1, i - 40), i + 40):gsub("[^%w%p ]", "?")) end
  return string.format("at byte %d:\n  %s\n  %s", i, around(a), around(b))
end

describe("the same script", function()
  it("defines the same nodes in a fresh lua5.4 and after restarts, failures and many policies", function()
    local first, last = seeds()
    -- the fresh side: a new Lua state per run of the scripts, as after exec
    local path = os.tmpname()
    finally(function() os.remove(path) end)
    support.isolated(string.format([[
local definition = require "arbor.definition"
local cli = require "arbor.cli"
local gen = require "definition_gen"
local f = assert(io.open(%q, "w"))
f:write("return {\n")
for seed = %d, %d do
  local root, opts = gen(seed)
  local e = cli.build(root, opts)
  f:write("[", seed, "] = {\n")
  local function walk(v)
    local d = e:definition(v.dn)
    f:write(string.format("[%%q] = %%q,\n", v.dn, definition.of(d.fn, d.opts)))
    for _, c in ipairs(v.children) do walk(c) end
  end
  walk(e:tree("root"))
  f:write("},\n")
  cli.close_built(e)
end
f:write("}\n")
f:close()
]], path, first, last))
    local fresh = dofile(path)
    -- this state runs long: many policies made (and called by hand) before
    for i = 1, 3000 do
      local p = ({policy.exponential, policy.decaying})[i % 2 + 1]({})
      p({dn = "root.x", consecutive = i, failure = i, now = i})
      policy.intensity{max = 20, period = 10}({dn = "root.x", now = i})
    end
    for seed = first, last do
      local long = texts(seed, function(e, sups)
        for round = 1, 2 do
          for i = #sups, 1, -1 do
            if sups[i] ~= "root" or round == 2 then
              pcall(e.restart, e, sups[i])
              e:advance(1)
            end
          end
        end
        -- failures: the policies decide, and keep state in the nodes'
        -- memory
        local v = e:tree("root")
        for _, c in ipairs(v.children) do
          if #c.children == 0 then pcall(e.fail, e, c.dn, "injected") end
        end
        e:advance(120)
      end)
      local want = fresh[seed]
      for dn, text in pairs(want) do
        if long[dn] ~= text then
          error(string.format("seed %d: %s is another definition %s", seed, dn,
            long[dn] and difference(text, long[dn]) or "(missing)"), 0)
        end
      end
      for dn in pairs(long) do assert(want[dn], "seed " .. seed .. ": " .. dn .. " only here") end
    end
  end)
end)
