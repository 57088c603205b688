-- Issue 16, end to end: `arbor run --http` serves /metrics (checked by
-- promtool and scraped with curl), /healthz, /readyz and /tree; clients
-- that misbehave do not disturb the tree.
local json = require "arbor.json"
local http = require "arbor.http"
local support = require "e2e.support"
local uv = require "luv"
local bin, q, sh, read, eventually = support.bin, support.q, support.sh, support.read, support.eventually

local function curl(e, path, extra)
  local code, out = sh(support.plain .. "curl -s -i --max-time 10 " .. (extra or "") .. " http://127.0.0.1:" .. e.port .. path)
  local status = tonumber(out:match("^HTTP/1%.1 (%d+)"))
  return status, out:match("\r\n\r\n(.*)$") or "", code, out
end

local function value(text, name, labels)
  return tonumber(text:match("\n" .. name:gsub("%p", "%%%0") .. (labels or ""):gsub("%p", "%%%0") .. " (%S+)"))
end

-- Starts arbor on the fixture (env: more variables for it), serving HTTP
-- on a free port: e.port.
local function start(env)
  local e = support.run_arbor("--http 127.0.0.1:0 spec/e2e/fixtures/http.lua",
    function(dir) return (env or "") .. " READY_FILE=" .. q(dir .. "/ready") end)
  e.ready = e.dir .. "/ready"
  assert.is_true(eventually(function()
    e.port = (read(e.dir .. "/err") or ""):match("serving http://127%.0%.0%.1:(%d+)")
    return e.port
  end))
  return e
end

local stop = support.stop_arbor

-- Raw TCP clients on this process's own luv loop, to hold connections open
-- (half-open, or not reading) and to see in which order answers arrive:
-- each event gets the next number of one sequence.
local seq = 0
local function tick() seq = seq + 1 return seq end

-- Connects to e's port and writes data (if any); reads only with `read`.
-- c.connected, c.got (the bytes read), c.first (the sequence number of the
-- first byte), c.eof (of the end: the server closed).
local function client(e, data, read)
  local c = {tcp = uv.new_tcp(), got = {}}
  c.tcp:connect("127.0.0.1", tonumber(e.port), function(err)
    if err then c.err, c.eof = err, tick() return end
    c.connected = true
    if data then c.tcp:write(data) end
    if read ~= false then
      c.tcp:read_start(function(rerr, chunk)
        if rerr or not chunk then
          c.eof = c.eof or tick()
          return c.tcp:read_stop()
        end
        c.first = c.first or tick()
        c.got[#c.got + 1] = chunk
      end)
    end
  end)
  return c
end

-- Runs this process's loop until pred() holds (false after 20 s).
local function pump(pred)
  for _ = 1, 20000 do
    uv.run("nowait")
    if pred() then return true end
    uv.sleep(1)
  end
  return false
end

-- Turns the loop for about s seconds.
local function pump_for(s)
  local t = uv.hrtime() + s * 1e9
  pump(function() return uv.hrtime() >= t end)
end

local function close_all(cs)
  for _, c in ipairs(cs) do
    if not c.tcp:is_closing() then c.tcp:close() end
  end
  uv.run("nowait")
end

-- A client's whole answer: status, body (nil until the server closed).
local function answer(c)
  if not c.eof then return nil end
  local all = table.concat(c.got)
  return tonumber(all:match("^HTTP/1%.1 (%d+)")), all:match("\r\n\r\n(.*)$"), all
end

local function all_of(cs, pred)
  for _, c in ipairs(cs) do
    if not pred(c) then return false end
  end
  return true
end

describe("arbor run --http, a wide tree", function()
  it("/metrics of a few MB (many chunks) is whole: its length, promtool, the last node", function()
    local e = start("WIDE=5000")
    finally(function() stop(e) end)
    local body
    assert.is_true(eventually(function()
      local _, out = sh(support.plain .. "curl -s --max-time 10 -D - -o " .. q(e.dir .. "/scrape")
        .. " http://127.0.0.1:" .. e.port .. "/metrics")
      body = read(e.dir .. "/scrape") or ""
      local len = tonumber(out:match("Content%-Length: (%d+)"))
      local ok = out:match("^HTTP/1%.1 200") and len == #body
      return ok and value(body, "arbor_node_state", '{dn="root.wide.w5000",state="HEALTHY"}') == 1
    end))
    assert.is_true(#body > 2 * 1024 * 1024, #body)
    local code, out = sh("promtool check metrics < " .. q(e.dir .. "/scrape"))
    assert.equal(0, code, out)
  end)
end)

describe("arbor run --http", function()
  local e
  before_each(function() e = start() end)
  after_each(function() stop(e) end)

  it("/readyz is 503 naming the DN until the root is HEALTHY, then 200", function()
    local status, body = curl(e, "/readyz")
    assert.equal(503, status)
    assert.matches("root NEW", body, 1, true)
    assert.equal(200, (curl(e, "/healthz")))
    os.execute("touch " .. q(e.ready))
    assert.is_true(eventually(function() return curl(e, "/readyz") == 200 end))
    -- the root was HEALTHY by then: the tree agrees
    local _, tree = curl(e, "/tree")
    assert.equal("HEALTHY", json.decode(tree).state)
  end)

  it("/metrics passes promtool and matches the tree after restarts", function()
    os.execute("touch " .. q(e.ready))
    local body
    assert.is_true(eventually(function()
      local status
      status, body = curl(e, "/metrics")
      return status == 200 and value(body, "arbor_node_restarts_total", '{dn="root.flaky"}') == 3
        and value(body, "arbor_node_state", '{dn="root.flaky",state="HEALTHY"}') == 1
    end))
    local f = io.open(e.dir .. "/scrape", "w")
    f:write(body)
    f:close()
    local code, out = sh("promtool check metrics < " .. q(e.dir .. "/scrape"))
    assert.equal(0, code, out)
    assert.equal(3, value(body, "arbor_node_transitions_total", '{dn="root.flaky",from="HEALTHY",to="DEAD"}'))
    assert.is_true(value(body, "fixture_jobs_total") >= 1)
    local _, headers = select(3, curl(e, "/metrics"))
    assert.matches("Content-Type: text/plain; version=0.0.4", headers, 1, true)
    local _, om, _, omh = curl(e, "/metrics", "-H 'Accept: application/openmetrics-text; version=1.0.0'")
    assert.matches("Content-Type: application/openmetrics-text", omh, 1, true)
    assert.equal("# EOF\n", om:sub(-6))
  end)

  it("`arbor ctl metrics` prints the exposition: promtool passes it, restarts match the tree", function()
    os.execute("touch " .. q(e.ready))
    local out
    assert.is_true(eventually(function()
      local code
      code, out = sh(bin .. " ctl " .. q(e.sock) .. " metrics")
      return code == 0 and value(out, "arbor_node_restarts_total", '{dn="root.flaky"}') == 3
    end))
    local code, check = sh(bin .. " ctl " .. q(e.sock) .. " metrics | promtool check metrics")
    assert.equal(0, code, check)
    local tree = json.decode(select(2, sh(bin .. " ctl " .. q(e.sock) .. " tree --json")))
    for _, n in ipairs(tree.children) do
      assert.equal(n.restarts, value(out, "arbor_node_restarts_total", '{dn="' .. n.dn .. '"}'), n.dn)
    end
    assert.equal(1, value(out, "arbor_control_clients")) -- arbor ctl itself
    assert.equal("\n", out:sub(-1))
    assert.is_nil(out:find("\n\n", 1, true))
    local _, om = sh(bin .. " ctl " .. q(e.sock) .. " metrics --openmetrics")
    assert.equal("# EOF\n", om:sub(-6))
    assert.matches("# TYPE arbor_node_restarts counter\n", om, 1, true)
    local _, js = sh(bin .. " ctl " .. q(e.sock) .. " metrics --json")
    assert.equal("counter", json.decode(js).arbor_node_restarts_total.type)
    local bad, usage = sh(bin .. " ctl " .. q(e.sock) .. " status --openmetrics")
    assert.equal(2, bad)
    assert.matches("--openmetrics is an option of metrics", usage, 1, true)
  end)

  it("/metrics has the CPU seconds and resident memory of a node's processes, read from /proc", function()
    local body, pids
    assert.is_true(eventually(function()
      local _, node = sh(bin .. " ctl " .. q(e.sock) .. " node root.proc --json")
      pids = (json.decode(node) or {}).pids
      local _, logs = sh(bin .. " ctl " .. q(e.sock) .. " logs root.proc")
      return pids and #pids == 3 and logs:find("idle", 1, true)
    end))
    local _, tck = sh("getconf CLK_TCK")
    local _, page = sh("getconf PAGESIZE")
    local function usage()
      local ticks, pages = 0, 0
      for _, pid in ipairs(pids) do
        local stat = read("/proc/" .. pid .. "/stat")
        local f = {}
        for w in stat:match("%) (.*)$"):gmatch("%S+") do f[#f + 1] = w end
        ticks = ticks + f[12] + f[13] -- utime and stime: fields 14 and 15
        pages = pages + read("/proc/" .. pid .. "/statm"):match("^%d+ (%d+)")
      end
      return ticks, pages
    end
    -- the sleeps may still fault their pages in: scrape until /proc says
    -- the same before and after
    local ticks, pages
    assert.is_true(eventually(function()
      ticks, pages = usage()
      local _
      _, body = curl(e, "/metrics")
      local t2, p2 = usage()
      return t2 == ticks and p2 == pages
    end))
    local cpu = value(body, "arbor_node_process_cpu_seconds_total", '{dn="root.proc"}')
    local rss = value(body, "arbor_node_process_resident_memory_bytes", '{dn="root.proc"}')
    assert.is_true(cpu > 0, body)
    assert.near(ticks / tonumber(tck), cpu, 0.05)
    assert.equal(pages * tonumber(page), rss)
    -- only nodes with processes have them
    assert.is_nil(value(body, "arbor_node_process_resident_memory_bytes", '{dn="root.jobs"}'))
    local f = io.open(e.dir .. "/scrape", "w")
    f:write(body)
    f:close()
    local code, out = sh("promtool check metrics < " .. q(e.dir .. "/scrape"))
    assert.equal(0, code, out)
  end)

  it("/healthz answers again once a runaway evaluation is interrupted", function()
    local code, out = sh(bin .. " ctl " .. q(e.sock) .. " eval --budget 300000000 "
      .. q("while true do end"))
    assert.equal(1, code)
    assert.matches("budget", out)
    assert.equal(200, (curl(e, "/healthz")))
    local _, body = curl(e, "/metrics")
    assert.is_number(value(body, "arbor_loop_turn_seconds_count"))
  end)

  it("misbehaving clients get an error or lose their connection; the tree goes on", function()
    -- an oversized request head, a garbage request line, a wrong method, an unknown path
    local status = curl(e, "/metrics", "-H 'X-Big: " .. string.rep("a", 9000) .. "'")
    assert.equal(413, status)
    local _, out = sh("timeout 10 bash -c " .. q("exec 3<>/dev/tcp/127.0.0.1/" .. e.port
      .. "; printf 'NONSENSE\\r\\n\\r\\n' >&3; cat <&3"))
    assert.matches("^HTTP/1.1 400", out)
    assert.equal(405, (curl(e, "/metrics", "-X POST")))
    assert.equal(404, (curl(e, "/nope")))
    os.execute("touch " .. q(e.ready))
    assert.is_true(eventually(function() return curl(e, "/readyz") == 200 end))
  end)

  it("answers GET /healthz HTTP/1.0 with no header line (HAProxy's check)", function()
    local function raw(request)
      local _, out = sh("timeout 10 bash -c " .. q("exec 3<>/dev/tcp/127.0.0.1/" .. e.port
        .. "; printf '" .. request .. "' >&3; cat <&3"))
      return out
    end
    assert.matches("^HTTP/1%.1 200 OK\r\n.*\r\n\r\nok\n$", raw("GET /healthz HTTP/1.0\\r\\n\\r\\n"))
    assert.matches("^HTTP/1%.1 200 OK\r\n.*\r\n\r\nok\n$", raw("GET /healthz HTTP/1.0\\n\\n"))
    assert.matches("^HTTP/1%.1 503 .*not ready", raw("GET /readyz HTTP/1.0\\r\\n\\r\\n"))
    local head = raw("HEAD /healthz HTTP/1.0\\r\\n\\r\\n")
    assert.matches("^HTTP/1%.1 200 OK\r\n.*Content%-Length: 3\r\n", head)
    assert.matches("\r\n\r\n$", head)
    -- HEAD of a rendered answer: its length, no body
    for _, path in ipairs{"/tree", "/metrics"} do
      head = raw("HEAD " .. path .. " HTTP/1.0\\r\\n\\r\\n")
      assert.is_true(tonumber(head:match("Content%-Length: (%d+)\r\n")) > 100, head)
      assert.matches("\r\n\r\n$", head)
    end
  end)
end)

describe("arbor run --http, clients holding connections", function()
  local e, cs
  after_each(function()
    close_all(cs or {})
    cs = nil
    stop(e)
  end)

  it("connections that send a byte and stop take no probe's place; each goes at its head deadline", function()
    e = start()
    cs = {}
    local t0 = uv.hrtime()
    for i = 1, 40 do cs[i] = client(e, "G") end
    assert.is_true(pump(function() return all_of(cs, function(c) return c.connected end) end))
    pump_for(0.2) -- arbor has accepted them
    for _ = 1, 25 do
      local status, body = curl(e, "/healthz")
      assert.equal(200, status)
      assert.equal("ok\n", body)
    end
    assert.not_equal(nil, (curl(e, "/readyz"))) -- answered (503: not ready yet)
    -- each is dropped at its head deadline, about 2 s (far less than this bound)
    assert.is_true(pump(function() return all_of(cs, function(c) return c.eof end) end))
    assert.is_true((uv.hrtime() - t0) / 1e9 < 9, "head-less clients lasted " .. (uv.hrtime() - t0) / 1e9 .. " s")
    for _, c in ipairs(cs) do assert.equal("", table.concat(c.got)) end
  end)

  it("past the bound of head-less connections, the oldest one is dropped", function()
    e = start("HTTP_HEAD_TIMEOUT=600")
    local max = http.MAX_PENDING or 64
    cs = {client(e, "G")}
    assert.is_true(pump(function() return cs[1].connected end))
    pump_for(0.2)
    for i = 2, max + 1 do cs[i] = client(e, "G") end
    assert.is_true(pump(function() return cs[1].eof ~= nil end), "the oldest was not dropped")
    pump_for(0.5)
    for i = 2, max + 1 do assert.is_nil(cs[i].eof, "client " .. i .. " was dropped") end
    cs[#cs + 1] = client(e, "G")
    assert.is_true(pump(function() return cs[2].eof ~= nil end), "the next oldest was not dropped")
    pump_for(0.5)
    for i = 3, #cs do assert.is_nil(cs[i].eof, "client " .. i .. " was dropped") end
    local status = curl(e, "/healthz")
    assert.equal(200, status)
  end)

  it("/healthz and /readyz answer while slow /metrics readers hold every client slot", function()
    -- answers of 9 MB: more than the socket buffers take (4 MB for the
    -- sender on Linux, after autotuning) while the client reads nothing
    e = start("WIDE=20000 MAX_SERIES=100000 HTTP_TIMEOUT=600")
    local max = http.MAX_CLIENTS or 16
    assert.is_true(eventually(function()
      local status, body = curl(e, "/metrics")
      return status == 200 and #body > 8 * 1024 * 1024
    end))
    cs = {}
    for i = 1, max do cs[i] = client(e, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", false) end
    assert.is_true(pump(function() return all_of(cs, function(c) return c.connected end) end))
    assert.is_true(eventually(function()
      pump_for(0.05)
      return curl(e, "/metrics") == 503
    end, 100), "the slow readers did not fill the slots")
    for _ = 1, 10 do
      local status, body = curl(e, "/healthz")
      assert.equal(200, status)
      assert.equal("ok\n", body)
      local rstatus, rbody = curl(e, "/readyz")
      assert.equal(503, rstatus) -- not ready yet, and said so
      assert.matches("not ready", rbody)
    end
    local status, body = curl(e, "/tree")
    assert.equal(503, status)
    assert.matches("too many clients", body)
    close_all(cs)
    assert.is_true(eventually(function() return curl(e, "/metrics") == 200 end))
  end)

  it("a slow reader is dropped at its answer's deadline, mid-write: its slot is free again", function()
    e = start("WIDE=20000 MAX_SERIES=100000 HTTP_TIMEOUT=3")
    local max = http.MAX_CLIENTS or 16
    assert.is_true(eventually(function() return curl(e, "/metrics") == 200 end))
    cs = {}
    for i = 1, max do cs[i] = client(e, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", false) end
    assert.is_true(pump(function() return all_of(cs, function(c) return c.connected end) end))
    assert.is_true(eventually(function()
      pump_for(0.05)
      return curl(e, "/metrics") == 503
    end, 100), "the slow readers did not fill the slots")
    -- they still hold their connections (this side never closes them)
    assert.is_true(eventually(function() return curl(e, "/metrics") == 200 end))
    for _, c in ipairs(cs) do
      c.tcp:read_start(function(rerr, chunk)
        if rerr or not chunk then c.eof = c.eof or tick() return c.tcp:read_stop() end
        c.got[#c.got + 1] = chunk
      end)
    end
    assert.is_true(pump(function() return all_of(cs, function(c) return c.eof end) end))
    for _, c in ipairs(cs) do -- dropped mid-write (or, on a slow machine, before)
      local all = table.concat(c.got)
      local len = tonumber(all:match("Content%-Length: (%d+)"))
      assert.is_true(len == nil or #all < len, "an answer was whole")
    end
  end)

  -- Sliced rendering: requests for a big /metrics and /tree, and a
  -- /healthz written right after them (on connections opened before, so
  -- the writes follow each other at once); /healthz is answered before the
  -- first byte of any of them (made in slices, between which the loop
  -- serves the others), where a render in one go answered the probe only
  -- after every render.
  it("big /tree and /metrics scrapes are rendered in slices: /healthz is answered meanwhile", function()
    e = start("WIDE=30000 MAX_SERIES=100000 HTTP_TIMEOUT=600")
    assert.is_true(eventually(function()
      local status, body = curl(e, "/metrics")
      return status == 200 and value(body, "arbor_node_state", '{dn="root.wide.w30000",state="HEALTHY"}') == 1
    end))
    cs = {}
    for i = 1, 9 do cs[i] = client(e) end
    assert.is_true(pump(function() return all_of(cs, function(c) return c.connected end) end))
    for i = 1, 8 do -- the heaviest first: /metrics of 14 MB, then /tree of 5 MB
      cs[i].tcp:write("GET " .. (i <= 4 and "/metrics" or "/tree") .. " HTTP/1.1\r\nHost: x\r\n\r\n")
    end
    local probe = cs[9]
    probe.tcp:write("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert.is_true(pump(function() return all_of(cs, function(c) return c.eof end) end))
    assert.equal(200, (answer(probe)))
    for i = 1, #cs - 1 do
      assert.is_true(probe.eof < cs[i].first, "a render was answered before /healthz")
      local status, body, all = answer(cs[i])
      assert.equal(200, status)
      assert.equal(tonumber(all:match("Content%-Length: (%d+)")), #body)
      if i > 4 then
        local wide
        for _, n in ipairs(json.decode(body).children) do
          if n.dn == "root.wide" then wide = n end
        end
        assert.equal(30000, #wide.children)
      else
        assert.equal(1, value(body, "arbor_node_state", '{dn="root.wide.w30000",state="HEALTHY"}'))
      end
    end
  end)
end)
