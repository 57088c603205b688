-- Control-plane benchmarks (issue 6): prints each figure next to its target.
-- Run by scripts/bench: build/arbor run --quiet spec/bench/control.lua [--small]
-- It starts an engine (spec/bench/support/big_tree.lua) and is its client.
local arbor = require "arbor"
local core = require "arbor.core"
local json = require "arbor.json"

local bench = dofile((arg[0]:match("^(.*/)") or "") .. "support/common.lua")
local size, median, report, sh = bench.size, bench.median, bench.report, bench.sh
local mktemp = bench.mktemp
local bin = arg[-1] and arg[-1]:find("arbor$") and arg[-1] or "build/arbor"

local function request(c, req)
  assert(c:send(json.encode(req)))
  while true do
    local f = json.decode(assert(c:recv()))
    if f["end"] then return f end
  end
end

local function bench()
  local nodes = size(100000, 2000)
  local dir = mktemp()
  local sock = dir .. "/bench.sock"
  os.execute(string.format("build/arbor run --quiet --control %s spec/bench/support/big_tree.lua %d > %s/out 2>&1 &",
    sock, nodes, dir))
  local c
  for _ = 1, 6000 do
    c = core.connect(sock)
    if c then
      local st = request(c, {op = "status", json = true, id = 0})
      if st.data.running >= nodes then break end
      c:close()
      c = nil
    end
    os.execute("sleep 0.01")
  end
  assert(c, "the engine did not come up")
  local pid = request(c, {op = "status", json = true, id = 0}).data.pid

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

  c:close()
  os.execute("kill " .. pid)
  for _ = 1, 3000 do
    if os.execute("kill -0 " .. pid .. " 2>/dev/null") ~= true then break end
    os.execute("sleep 0.01")
  end
  os.execute("rm -rf " .. dir)
end

-- The measurement blocks: it is this tree's only job.
arbor.run(function()
  bench()
  arbor.stop()
end, {control = false, runaway = 0})
