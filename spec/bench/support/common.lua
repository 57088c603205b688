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

-- A request on the control connection c: its final frame (decoded).
function M.request(c, req)
  local json = require "arbor.json"
  assert(c:send(json.encode(req)))
  while true do
    local f = json.decode(assert(c:recv()))
    if f["end"] then return f end
  end
end

-- Starts `build/arbor run --quiet --control DIR/bench.sock ARGS` in the
-- background in a fresh directory DIR and connects once `running` nodes
-- run: returns the connection, arbor's pid and DIR.
function M.serve(args, running)
  local core = require "arbor.core"
  local dir = M.mktemp()
  local sock = dir .. "/bench.sock"
  os.execute(string.format("build/arbor run --quiet --control %s %s > %s/out 2>&1 &",
    sock, args, dir))
  local c
  for _ = 1, 6000 do
    c = core.connect(sock)
    if c then
      local st = M.request(c, {op = "status", json = true, id = 0})
      if st.data.running >= running then break end
      c:close()
      c = nil
    end
    os.execute("sleep 0.01")
  end
  assert(c, "the engine did not come up")
  return c, M.request(c, {op = "status", json = true, id = 0}).data.pid, dir
end

-- Closes c, ends the arbor M.serve started and removes its directory.
function M.unserve(c, pid, dir)
  c:close()
  os.execute("kill " .. pid)
  for _ = 1, 3000 do
    if os.execute("kill -0 " .. pid .. " 2>/dev/null") ~= true then break end
    os.execute("sleep 0.01")
  end
  os.execute("rm -rf " .. dir)
end

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
