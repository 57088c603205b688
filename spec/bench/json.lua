-- JSON benchmarks (issue 14): arbor.json.encode (lua-cjson under a thin
-- Lua layer) on the shapes the control server writes, next to plain
-- cjson.encode (which writes some of them wrongly: it is the floor), and
-- `tree --json` written in C against the snapshot encoded in Lua.
-- Run by scripts/bench: build/arbor run --quiet spec/bench/json.lua [--small]
local core = require "arbor.core"
local json = require "arbor.json"
local testing = require "arbor.testing"
local cjson = require("cjson").new()

local bench = dofile((arg[0]:match("^(.*/)") or "") .. "support/common.lua")
local size, median, report = bench.size, bench.median, bench.report

-- CPU microseconds per call of f(x): the median of 7 rounds of n calls,
-- in the runnable whose ctx is c (it yields between rounds: the watchdog).
local function per_call(c, f, x, n)
  local rounds = {}
  for r = 1, 7 do
    local t0 = os.clock()
    for _ = 1, n do f(x) end
    rounds[r] = (os.clock() - t0) / n * 1e6
    c:sleep(0)
  end
  return median(rounds)
end

-- A harness running a root with `groups` children of `per` leaves each,
-- every one HEALTHY; the fanout ones have failed once (reasons, errors).
local function tree(groups, per)
  local h = testing.new{seed = 1}
  h:start(function(ctx)
    for i = 1, groups do
      ctx:run("g" .. i, function(c)
        for j = 1, per do
          c:run("w" .. j, function(d)
            d:signal("healthy")
            if d.incarnation == 1 and j % 10 == 0 then d:sleep(1) error("boom " .. j) end
            d:wait()
          end)
        end
        c:signal("healthy")
        c:wait()
      end)
    end
    ctx:signal("healthy")
    ctx:wait()
  end)
  h:advance(5)
  return h
end

bench.banner("json")

local small_tree = tree(5, 10)
local big_tree = tree(size(100, 10), size(100, 10))
local ints, floats, records = {}, {}, {}
for i = 1, size(100000, 1000) do
  ints[i] = i
  floats[i] = i / 7
end
for i = 1, size(10000, 100) do records[i] = {name = "n" .. i, n = i, ok = true, tags = {"a", "b"}} end

local cases = {
  {"reply: 20 events", {id = 1, ["end"] = true, ok = true, data = small_tree.engine:events(20)}, 2000},
  {"reply: a node's fields", {id = 1, ["end"] = true, ok = true,
    data = small_tree.engine:node("root.g1.w10")}, 5000},
  {"eval values: " .. #ints .. " integers", {ints}, size(10, 3)},
  {"eval values: " .. #floats .. " floats", {floats}, size(10, 3)},
  {"eval values: " .. #records .. " records", {records}, size(10, 3)},
  {"eval values: a string of 1 MiB", {string.rep("abcdefg\n", 1 << 17)}, 20},
}

bench.measure(function() end, function(c)
  for _, case in ipairs(cases) do
    local name, v, n = case[1], case[2], case[3]
    assert(json.decode(json.encode(v)), name)
    local ours, floor = per_call(c, json.encode, v, n), per_call(c, cjson.encode, v, n)
    report(name .. ": arbor.json", ours, "us", "(figure)", nil)
    report("  plain cjson.encode", floor, "us", "(floor)", nil)
  end
  -- tree --json: in C, against the snapshot table and an encoder
  local e = big_tree.engine
  local nodes = e:stats().nodes
  local in_c = per_call(c, core.tree_json, e, 3)
  local snapshot = per_call(c, function() return json.encode(e:tree()) end, nil, 3)
  local snapshot_cjson = per_call(c, function() return cjson.encode(e:tree()) end, nil, 3)
  report("tree --json, " .. nodes .. " nodes: core.tree_json (C)", in_c / 1000, "ms",
    "< 1/2 of below", in_c < snapshot_cjson / 2)
  report("  e:tree() + plain cjson.encode", snapshot_cjson / 1000, "ms", "(floor in Lua)", nil)
  report("  e:tree() + arbor.json.encode", snapshot / 1000, "ms", "(figure)", nil)
end)
