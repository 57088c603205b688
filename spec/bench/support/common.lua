-- What the benchmarks in spec/bench share: sizes, reporting, and running a
-- tree with a node that measures it. Loaded with dofile by each bench (scripts/bench runs spec/bench/*.lua).
local arbor = require "arbor"
-- the shell helpers of the end-to-end specs (plain Lua, no busted)
local e2e = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "") ..
  "../../e2e/support.lua")

local M = {}

M.small = arg[1] == "--small"

function M.size(full, reduced) return M.small and reduced or full end

-- The median of xs (xs is left as it is).
function M.median(xs)
  local c = {table.unpack(xs)}
  table.sort(c)
  return c[(#c + 1) // 2]
end

-- One line: the figure, its target, and ok / MISSED (nothing when ok is nil).
function M.report(name, value, unit, target, ok)
  print(string.format("%-52s %12.3f %-8s target %-14s %s", name, value, unit,
    target, ok == nil and "" or ok and "ok" or "MISSED"))
end

function M.banner(what)
  print(string.format("arbor %s %s benchmarks%s", arbor.version, what,
    M.small and " (small sizes: figures are not meaningful)" or ""))
end

-- The output of a shell command; a fresh temporary directory.
M.sh, M.mktemp = e2e.capture, e2e.mktemp

-- Runs a tree: build(ctx) adds its nodes, then a node "timer" becomes
-- HEALTHY, calls measure(c) and stops the tree.
function M.measure(build, measure)
  arbor.run(function(ctx)
    build(ctx)
    ctx:run("timer", function(c)
      c:signal("healthy")
      measure(c)
      arbor.stop()
      c:wait()
    end)
    ctx:signal("healthy")
    ctx:wait()
  end, {signals = false})
end

return M
