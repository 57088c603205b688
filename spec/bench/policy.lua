-- Policy benchmarks (issue 4): the cost of a policy call and its
-- bookkeeping in a restart storm. Prints each figure next to its target.
-- Run by scripts/bench: build/arbor run --quiet spec/bench/policy.lua [--small]
local arbor = require "arbor"
local core = require "arbor.core"
local policy = arbor.policy

local bench = dofile((arg[0]:match("^(.*/)") or "") .. "support/common.lua")
local size, median, report = bench.size, bench.median, bench.report

-- Restart storm: n nodes that fail as soon as they start, for `seconds`,
-- under the policy made by make() for each node. The rate is per second of
-- the process's CPU time: the development machine is shared, and the other
-- processes' load only moves wall-clock figures.
local function storm(n, seconds, make)
  local restarts, elapsed
  bench.measure(function(ctx)
    for i = 1, n do
      ctx:run("f" .. i, function() error("boom") end, {policy = make()})
    end
  end, function(c)
    local e = core.current()
    local r0, t0 = e:stats().restarts, os.clock()
    c:sleep(seconds)
    restarts = e:stats().restarts - r0
    elapsed = os.clock() - t0
  end)
  return restarts / elapsed
end

-- One policy for every node, as a tree usually has (its state is per
-- node, in the engine), and, for comparison, one instance per node.
local function immediate() return policy.immediate end
local shared = policy.chain(policy.intensity{max = 1e9, period = 1}, policy.immediate)
local function limited() return shared end
local function limited_each()
  return policy.chain(policy.intensity{max = 1e9, period = 1}, policy.immediate)
end

bench.banner("policy")

-- Alternate them in short rounds: the two storms of a round run back to
-- back, under the same load from other processes, and the figure is the
-- median of the rounds' ratios (the rates shown are medians too).

local secs, rounds = size(0.5, 0.1), size(15, 1)
storm(1000, secs / 4, immediate) -- warm up
local imm, lim, each, r_lim, r_each = {}, {}, {}, {}, {}
for i = 1, rounds do
  imm[i] = storm(1000, secs, immediate)
  lim[i] = storm(1000, secs, limited)
  each[i] = storm(1000, secs, limited_each)
  r_lim[i], r_each[i] = lim[i] / imm[i], each[i] / imm[i]
end
local ratio, ratio_each = median(r_lim), median(r_each)
report("storm, 1000 nodes, immediate (per CPU second)", median(imm), "/s", "(reference)", true)
report("storm, 1000 nodes, chain(intensity{1e9, 1}, immediate)", median(lim), "/s",
  ">= 90% of it", ratio >= 0.9)
report("  ratio (median of rounds)", ratio, "x", ">= 0.9", ratio >= 0.9)
report("  the same, one policy instance per node", median(each), "/s", "", true)
report("  ratio (median of rounds)", ratio_each, "x", "", true)
