-- Control-plane benchmarks (issue 6): prints each figure next to its target.
-- Run by scripts/bench: build/arbor run --quiet spec/bench/control.lua [--small]
-- It starts an engine (spec/bench/support/big_tree.lua) and is its client.
local arbor = require "arbor"
local core = require "arbor.core"
local json = require "arbor.json"

local bench = dofile((arg[0]:match("^(.*/)") or "") .. "support/common.lua")
local size, median, report, sh = bench.size, bench.median, bench.report, bench.sh
local bin = arg[-1] and arg[-1]:find("arbor$") and arg[-1] or "build/arbor"

local request = bench.request

local function measure()
  local nodes = size(100000, 2000)
  local c, pid, dir = bench.serve("spec/bench/support/big_tree.lua " .. nodes, nodes)
  local sock = dir .. "/bench.sock"

  -- eval round trip over one connection
  local samples = {}
  local n = size(20000, 500)
  local req = json.encode({op = "eval", code = "return 1", id = 1})
  for i = 1, n + 100 do
    local t0 = core.hrtime()
    c:send(req)
    local reply = c:recv()
    local dt = core.hrtime() - t0
    if i > 100 then samples[#samples + 1] = dt end -- warmed up
    assert(reply:find('"text":"1"', 1, true), reply)
  end
  local us = median(samples) / 1000
  report("ctl eval \"return 1\" round trip, median", us, "us", "<= 100 us", us <= 100)

  -- tree --json of the whole tree: the request alone, then `arbor ctl`
  local t0 = core.hrtime()
  c:send(json.encode({op = "tree", json = true, id = 2}))
  local f = assert(c:recv())
  local req_s = (core.hrtime() - t0) / 1e9
  assert(f:find('^{"id":2,"end":true,"ok":true,"data":{"dn":"root"'), f:sub(1, 200))
  report(string.format("tree --json of %d nodes, request", nodes + nodes // 1000 + 1),
    req_s, "s", "", true)
  t0 = core.hrtime()
  local out = sh(string.format("%s ctl %s tree --json", bin, sock))
  local cmd_s = (core.hrtime() - t0) / 1e9
  assert(#out > nodes * 50, "tree --json printed " .. #out .. " bytes")
  report(string.format("`arbor ctl tree --json`, %d nodes (%.0f MB)", nodes,
    #out / 1e6), cmd_s, "s", "<= 1 s", cmd_s <= 1)

  bench.unserve(c, pid, dir)
end

-- The measurement blocks: it is this tree's only job.
arbor.run(function()
  measure()
  arbor.stop()
end, {control = false, runaway = 0})
