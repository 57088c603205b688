-- End-to-end: mistakes fail fast (issue 15, point 2): `arbor check` builds
-- the tree on the virtual clock without starting any process and exits 0
-- or 2; a root that fails in its first start ends `arbor run` with exit 2.
local support = require "e2e.support"
local bin, q, sh, mktemp, read = support.bin, support.q, support.sh, support.mktemp, support.read

describe("arbor check", function()
  local dir
  before_each(function() dir = mktemp() end)
  after_each(function() os.execute("rm -rf " .. q(dir)) end)

  it("prints the tree of a good script and exits 0", function()
    local code, out = sh(bin .. " check spec/e2e/fixtures/check_good.lua")
    assert.equal(0, code, out)
    assert.equal([[
arbor check spec/e2e/fixtures/check_good.lua: the tree after 5s (virtual; no process started):
root [HEALTHY] up 5.0s
|-- web [HEALTHY] up 5.0s
|   |-- h1 [HEALTHY] up 5.0s
|   `-- h2 [HEALTHY] up 5.0s
|-- tick [HEALTHY] up 5.0s
`-- sleeper [HEALTHY] up 5.0s
no errors
]], out)
  end)

  it("prints every error of a bad script with its DN and file:line, starts no process, and exits 2", function()
    local file = dir .. "/touched"
    local code, out = sh(bin .. " check spec/e2e/fixtures/check_bad.lua " .. q(file))
    assert.equal(2, code, out)
    assert.matches("\n|%-%- touch %[HEALTHY%]", out) -- checked, not run
    assert.matches("\n`%-%- missing %[DEAD%]", out)
    assert.matches("\n  root%.missing: ENOENT: no%-such%-program%-arbor: not found in PATH", out)
    assert.matches("error%(s%):\n", out)
    assert.matches("\n  root%.web: spec/e2e/fixtures/check_bad%.lua:8: root%.web: ctx:run: unknown option 'polcy' %(did you mean 'policy'%?%); known: [%w_, ]+ %(%d+ times%)\n", out)
    assert.matches("\n  root%.later: spec/e2e/fixtures/check_bad%.lua:15: broke after 2 s %(%d+ times%)\n", out)
    assert.is_nil(read(file)) -- touch never ran
  end)

  it("exits 2 on a script error", function()
    local f = dir .. "/syntax.lua"
    local h = io.open(f, "w")
    h:write("local x = = 1\n")
    h:close()
    local code, out = sh(bin .. " check " .. q(f))
    assert.equal(2, code)
    assert.matches("unexpected symbol", out, 1, true)
  end)
end)

describe("arbor run", function()
  it("exits 2 with the message when the root fails in its first start", function()
    local dir = mktemp()
    local starts = dir .. "/starts"
    local code, out = sh("ARBOR_CONTROL=none timeout 20 " .. bin
      .. " run --quiet spec/e2e/fixtures/first_start.lua " .. q(starts))
    assert.equal(2, code, out)
    assert.equal("arbor: the root failed in its first start, before it was HEALTHY "
      .. "(a mistake in the script; not restarted): spec/e2e/fixtures/first_start.lua:9: "
      .. "root: ctx:run: unknown option 'grce'; known: policy, shutdown, min_uptime, "
      .. "ready_timeout, watchdog, strategy, ordered, significant, auto_shutdown, stop, "
      .. "lifecycle, sidecar, log_lines\n", out)
    assert.equal("start\n", read(starts)) -- started once
    os.execute("rm -rf " .. q(dir))
  end)
end)
