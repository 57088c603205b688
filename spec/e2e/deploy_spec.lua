-- The deployments of docs/deploy.md: its examples are the files of
-- docs/examples/deploy/, they parse, they run the tree the way arbor wants
-- to run (arbor run --init, the readiness probe), and every scheduler's
-- time before SIGKILL covers the stop bound that `arbor ctl status` reports
-- for docs/examples/service.lua.
local json = require "arbor.json"
local lyaml = require "lyaml"
local support = require "e2e.support"
local bin, q, sh, read, mktemp = support.bin, support.q, support.sh, support.read, support.mktemp

local deploy = assert(read("docs/deploy.md"))
local dir = "docs/examples/deploy/"

-- The fenced block of docs/deploy.md in language lang.
local function block(lang)
  return deploy:match("\n```" .. lang .. "\n(.-)```\n")
end

local function seconds(s) return tonumber((tostring(s):match("^(%d+)s?$"))) end

describe("docs/deploy.md", function()
  local bound
  setup(function()
    -- the example's stop bound, as arbor reports it
    local tmp = mktemp()
    local sock = tmp .. "/ctl.sock"
    os.execute(string.format("%s run --quiet --control %s docs/examples/service.lua > %s/out 2>&1 &",
      bin, q(sock), q(tmp)))
    assert(support.eventually(function()
      return sh(bin .. " ctl " .. q(sock) .. " status --ready") == 0
    end), "the service example did not become ready")
    local _, out = sh(bin .. " ctl " .. q(sock) .. " status --json")
    bound = json.decode(out).stop_bound
    sh(bin .. " ctl " .. q(sock) .. " shutdown")
    os.execute("rm -rf " .. q(tmp))
  end)

  it("shows the files of docs/examples/deploy/ as they are", function()
    assert.equal(read(dir .. "Containerfile"), block("dockerfile"))
    assert.equal(read(dir .. "pod.yaml"), block("yaml"))
    assert.equal(read(dir .. "service.nomad"), block("hcl"))
  end)

  it("says the stop bound the example has", function()
    assert.equal(25, bound)
    assert.matches("stop bound 25s", deploy, 1, true)
    assert.matches("`arbor ctl status`: 25 s", read(dir .. "pod.yaml"), 1, true)
    assert.matches("`arbor ctl status`: 25 s", read(dir .. "service.nomad"), 1, true)
  end)

  it("Containerfile: the package, arbor as PID 1, the readiness probe, a stop timeout past the bound", function()
    local c = read(dir .. "Containerfile")
    assert.matches("\nFROM debian:bookworm", c, 1, true)
    assert.matches("apt-get install -y --no-install-recommends /tmp/arbor_*.deb", c, 1, true)
    assert.matches("\nCOPY service.lua /etc/arbor/service.lua\n", c, 1, true)
    assert.same({"arbor", "run", "--init", "/etc/arbor/service.lua"},
      json.decode(c:match("\nENTRYPOINT (%b[])\n")))
    assert.same({"arbor", "ctl", "status", "--ready"},
      json.decode(c:match("\nHEALTHCHECK [^\n]*CMD (%b[])\n")))
    assert.is_true(seconds(c:match("%-%-stop%-timeout (%d+)")) > bound)
  end)

  it("pod.yaml: a pod with the exec probes and a grace period past the bound", function()
    local pod = lyaml.load(read(dir .. "pod.yaml"))
    assert.equal("Pod", pod.kind)
    assert.is_true(pod.spec.terminationGracePeriodSeconds > bound)
    local c = pod.spec.containers[1]
    assert.same({"arbor", "run", "--init", "/etc/arbor/service.lua"}, c.command)
    assert.same({"arbor", "ctl", "status", "--ready"}, c.readinessProbe.exec.command)
    assert.same({"arbor", "ctl", "status"}, c.livenessProbe.exec.command)
  end)

  it("service.nomad: arbor run --init under the exec driver, a kill_timeout past the bound", function()
    local job = read(dir .. "service.nomad")
    assert.matches('driver = "exec"', job, 1, true)
    assert.matches('command = "/usr/bin/arbor"', job, 1, true)
    assert.matches('args    = ["run", "--init", "/etc/arbor/service.lua"]', job, 1, true)
    assert.matches('kill_signal  = "SIGTERM"', job, 1, true)
    assert.is_true(seconds(job:match('kill_timeout = "(%d+s)"')) > bound)
    -- balanced braces: the one syntax check there is without nomad
    local depth = 0
    for ch in job:gsub("#[^\n]*", ""):gmatch("[{}]") do
      depth = depth + (ch == "{" and 1 or -1)
      assert.is_true(depth >= 0)
    end
    assert.equal(0, depth)
  end)

  it("the systemd unit: Type=notify, KillMode=mixed, a TimeoutStopSec arbor extends to the bound", function()
    local unit = read("dist/arbor@.service.in")
    assert.matches("\nType=notify\n", unit, 1, true)
    assert.matches("\nKillMode=mixed\n", unit, 1, true)
    assert.matches("\nExecStart=@CMAKE_INSTALL_FULL_BINDIR@/arbor run /etc/arbor/%i.lua\n", unit, 1, true)
    assert.is_truthy(seconds(unit:match("\nTimeoutStopSec=(%d+)\n")))
    assert.is_truthy(seconds(unit:match("\nWatchdogSec=(%d+)\n")))
  end)
end)
