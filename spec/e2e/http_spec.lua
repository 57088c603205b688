-- Issue 16, end to end: `arbor run --http` serves /metrics (checked by
-- promtool and scraped with curl), /healthz, /readyz and /tree; clients
-- that misbehave do not disturb the tree.
local json = require "arbor.json"
local support = require "e2e.support"
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
    -- twenty clients that connect and send nothing: the ones past the limit get 503
    -- (they stay 10 s: a loaded machine may take seconds to start them all)
    local idle = io.popen("bash -c " .. q("for i in $(seq 20); do (exec 3<>/dev/tcp/127.0.0.1/"
      .. e.port .. "; sleep 10) & done; wait"), "r")
    assert.is_true(eventually(function() return curl(e, "/healthz") == 503 end))
    idle:close()
    assert.is_true(eventually(function() return curl(e, "/healthz") == 200 end))
    os.execute("touch " .. q(e.ready))
    assert.is_true(eventually(function() return curl(e, "/readyz") == 200 end))
  end)
end)
