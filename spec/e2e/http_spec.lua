-- Issue 16, end to end: `arbor run --http` serves /metrics (checked by
-- promtool and scraped with curl), /healthz, /readyz and /tree; clients
-- that misbehave do not disturb the tree.
local json = require "arbor.json"
local support = require "e2e.support"
local bin, q, sh, read, eventually = support.bin, support.q, support.sh, support.read, support.eventually

local function curl(e, path, extra)
  local code, out = sh("curl -s -i --max-time 10 " .. (extra or "") .. " http://127.0.0.1:" .. e.port .. path)
  local status = tonumber(out:match("^HTTP/1%.1 (%d+)"))
  return status, out:match("\r\n\r\n(.*)$") or "", code, out
end

local function value(text, name, labels)
  return tonumber(text:match("\n" .. name:gsub("%p", "%%%0") .. (labels or ""):gsub("%p", "%%%0") .. " (%S+)"))
end

describe("arbor run --http", function()
  local e
  before_each(function()
    local dir = support.mktemp()
    e = {dir = dir, ready = dir .. "/ready"}
    e.sock = dir .. "/ctl.sock"
    local p = io.popen(string.format("READY_FILE=%s sh -c 'echo $$; exec %s run --control %s --http 127.0.0.1:0 %s' 2> %s/err > /dev/null & echo $!",
      q(e.ready), bin, q(e.sock), "spec/e2e/fixtures/http.lua", q(dir)))
    e.pid = tonumber(p:read("l"))
    p:close()
    assert.is_true(eventually(function()
      e.port = (read(dir .. "/err") or ""):match("serving http://127%.0%.0%.1:(%d+)")
      return e.port
    end))
  end)

  after_each(function()
    os.execute("kill " .. e.pid .. " 2>/dev/null")
    eventually(function() return os.execute("kill -0 " .. e.pid .. " 2>/dev/null") ~= true end)
    os.execute("rm -rf " .. q(e.dir))
  end)

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
    local idle = io.popen("bash -c " .. q("for i in $(seq 20); do (exec 3<>/dev/tcp/127.0.0.1/"
      .. e.port .. "; sleep 3) & done; wait"), "r")
    assert.is_true(eventually(function() return curl(e, "/healthz") == 503 end))
    idle:close()
    assert.is_true(eventually(function() return curl(e, "/healthz") == 200 end))
    os.execute("touch " .. q(e.ready))
    assert.is_true(eventually(function() return curl(e, "/readyz") == 200 end))
  end)
end)
