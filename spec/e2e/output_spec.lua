-- End-to-end: what `arbor run` and `arbor ctl` print. Subscribers that miss
-- events (more than the outbox holds in one step) see a gap line.
local core = require "arbor.core"
local json = require "arbor.json"
local client = require "arbor.client"

local support = require "e2e.support"
local bin, q, sh, mktemp, read = support.bin, support.q, support.sh, support.mktemp, support.read
local fixture = support.fixtures .. "output.lua"

local function request(sock, req)
  local conn = assert(client.open(sock))
  local reply = conn:request(req)
  conn:close()
  return reply
end

-- Starts arbor on the fixture with its stderr on a terminal (tty = true) or
-- in a file; waits for its socket and for root.crash to be down.
local function start(tty)
  local dir = mktemp()
  local e = {dir = dir, sock = dir .. "/ctl.sock", out = dir .. "/out"}
  local cmd = string.format("%s run --control %s %s", bin, q(e.sock), fixture)
  if tty then
    cmd = string.format("TERM=dumb script -qfec %s /dev/null", q(cmd))
  end
  os.execute(string.format("(%s) > %s 2>&1 &", cmd, q(e.out)))
  assert(support.eventually(function()
    local c = core.connect(e.sock)
    if not c then return false end
    c:close()
    local r = request(e.sock, {op = "node", dn = "root.crash", json = true})
    return r and r.ok and r.data.state == "DEAD"
  end), "arbor did not come up")
  e.pid = request(e.sock, {op = "status", json = true}).data.pid
  return e
end

local function finish(e)
  sh(bin .. " ctl " .. q(e.sock) .. " shutdown")
  assert(support.eventually(function()
    return os.execute("kill -0 " .. e.pid .. " 2>/dev/null") ~= true
  end))
  local out = read(e.out) or ""
  os.execute("rm -rf " .. q(e.dir))
  return (out:gsub("\r\n", "\n"))
end

describe("arbor ctl", function()
  local e
  setup(function() e = start(false) end)
  teardown(function() finish(e) end)

  it("events -f: a gap line when more events came than the outbox holds", function()
    local text, js = e.dir .. "/events", e.dir .. "/events.json"
    local ctl = bin .. " ctl " .. q(e.sock) .. " events -n 1 -f"
    os.execute(string.format("(%s > %s 2>&1 &) ; (%s --json > %s 2>&1 &)", ctl, q(text), ctl, q(js)))
    assert(support.eventually(function()
      return (read(text) or "") ~= "" and (read(js) or "") ~= ""
    end), "the followers did not start")
    -- root.burst's new incarnation emits 201 events in one step
    assert.equal(0, (sh(bin .. " ctl " .. q(e.sock) .. " restart root.burst")))
    local function burst_done(evs) -- its NEW -> HEALTHY is its last event
      for line in evs:gmatch("[^\n]+") do
        local ev = json.decode(line)
        if ev.dn == "root.burst" and ev.incarnation == 2 and ev.to == "HEALTHY" then
          return true
        end
      end
    end
    assert(support.eventually(function()
      local shown = read(text) or ""
      local gap = shown:find("gap:", 1, true)
      return gap and shown:find("root.burst               NEW -> HEALTHY", gap, true)
        and burst_done(read(js) or "")
    end), "no gap line")
    local missed = read(text):match("gap: (%d+) event%(s%) missed %(seq %d+%-%d+%)\n")
    assert.is_true(tonumber(missed) >= 151)
    -- --json: seqs follow each other, or a gap names those missed
    local last, gaps = nil, 0
    for line in read(js):gmatch("[^\n]+") do
      local ev = json.decode(line)
      if ev.kind == "gap" then
        gaps = gaps + 1
        assert.equal(ev.last - ev.first + 1, ev.missed)
        assert.equal(last + 1, ev.first)
        last = ev.last
      else
        if last then assert.equal(last + 1, ev.seq) end
        last = ev.seq
      end
    end
    assert.is_true(gaps >= 1)
    -- and arbor run's printer says so on its stderr
    assert.matches("%(events%) +gap: %d+ event%(s%) missed %(seq %d+%-%d+%)\n", read(e.out))
  end)
end)
