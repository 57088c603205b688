-- Reload benchmark (issue 17): prints each figure next to its target.
-- Run by scripts/bench: build/arbor run --quiet spec/bench/reload.lua [--small]
-- It starts an engine (spec/bench/support/reload_tree.lua: supervisors of
-- Lua leaves and sleep processes) and reloads it through the control
-- socket: once with nothing changed, once with the root changed (a new root
-- incarnation adopts every child). The figures: the time the engine's loop
-- (and so its control socket) waited for the reload, as the reply says,
-- and, with the root changed, from the request until an eval that follows
-- it sees the adoptions done; the processes keep their pids and the leaves
-- their incarnations.
local arbor = require "arbor"
local core = require "arbor.core"
local json = require "arbor.json"

local bench = dofile((arg[0]:match("^(.*/)") or "") .. "support/common.lua")
local size, median, report = bench.size, bench.median, bench.report

local request = bench.request

local function write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text, "\n")
  f:close()
end

-- dn -> {pid, incarnation-ish restarts} of every node
local function snapshot(c)
  local t = {}
  for _, row in ipairs(request(c, {op = "status", json = true, id = 0}).data.table) do
    t[row.dn] = (row.pid or "-") .. "/" .. row.restarts
  end
  return t
end

local function bench_reload()
  local supervisors, leaves, procs = size(10, 2), size(100, 10), size(50, 5)
  local nodes = supervisors * (leaves + 1) + procs + 1
  local vdir = bench.mktemp()
  local version = vdir .. "/version"
  write(version, "1")
  local c, pid, dir = bench.serve(string.format("spec/bench/support/reload_tree.lua %s %d %d %d",
    version, supervisors, leaves, procs), nodes)
  local before = snapshot(c)

  local same, changed = {}, {}
  for i = 1, size(5, 1) do
    local r = request(c, {op = "reload", json = true, id = 1})
    assert(r.ok, r.error)
    assert(r.data.counts.keep == nodes, json.encode(r.data.counts))
    same[#same + 1] = r.data.seconds
    write(version, tostring(i + 1))
    local t0 = core.hrtime()
    r = request(c, {op = "reload", json = true, id = 2})
    assert(r.ok, r.error)
    assert(r.data.counts.reload == 1 and r.data.counts.keep == nodes - 1, json.encode(r.data.counts))
    -- the adoptions run in the root's new incarnation's first step, in the
    -- loop's next turn: the eval that follows sees them done
    local seen = request(c, {op = "eval", code = "return arbor.node('root').incarnation", id = 3})
    assert(seen.text == tostring(i + 1), seen.text)
    changed[#changed + 1] = (core.hrtime() - t0) / 1e9
  end
  local after = snapshot(c)
  local moved = 0
  for dn, v in pairs(before) do
    if dn ~= "root" and after[dn] ~= v then moved = moved + 1 end
  end
  local label = string.format("%d Lua nodes, %d processes", supervisors * (leaves + 1), procs)
  local s = median(same) * 1000
  report("reload, nothing changed (" .. label .. "), median", s, "ms", "<= 100 ms", s <= 100)
  local r = median(changed) * 1000
  report("reload, root changed, until every child is adopted, median", r, "ms", "<= 100 ms", r <= 100)
  report("  nodes restarted or processes replaced by the reloads", moved, "", "0", moved == 0)
  bench.unserve(c, pid, dir)
  os.execute("rm -rf " .. vdir)
end

bench.banner("reload")
arbor.run(function()
  bench_reload()
  arbor.stop()
end, {control = false, runaway = 0})
