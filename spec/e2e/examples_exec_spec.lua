-- The process examples of docs/examples/ run under the real binary: each
-- comes up (a line in its output), then stops cleanly on SIGTERM.
local support = require "e2e.support"
local bin, read, eventually = support.bin, support.read, support.eventually
local sh = support.capture

-- Runs `arbor run ARGS`, waits for pattern in its output, sends SIGTERM
-- and returns the exit status and the output.
local function run_until(args, pattern)
  local dir = support.mktemp()
  local out = dir .. "/out"
  local pid = tonumber(sh(string.format(
    "(TMPDIR=%s %s run %s > %s 2>&1; echo $? > %s.exit.tmp; mv %s.exit.tmp %s.exit) >/dev/null 2>&1 & echo $!",
    dir, bin, args, out, out, out, out)))
  local up = eventually(function() return (read(out) or ""):find(pattern) end)
  -- the subshell's child is arbor
  local children = read("/proc/" .. pid .. "/task/" .. pid .. "/children") or ""
  os.execute("kill -TERM " .. (children:match("%d+") or pid))
  eventually(function() return read(out .. ".exit") end)
  local status, text = read(out .. ".exit"), read(out)
  os.execute("rm -rf " .. dir)
  assert(up, "never saw " .. pattern .. " in:\n" .. text)
  return tonumber(status), text
end

describe("process examples", function()
  it("pool.lua: workers run, the pool stops cleanly", function()
    local status = run_until("docs/examples/pool.lua 3",
      "root%.pool%.w3 +| stdout: worker 3: job 1")
    assert.equal(0, status)
  end)

  it("backup.lua: the oneshot job ends DONE", function()
    local status = run_until("docs/examples/backup.lua spec/e2e/fixtures",
      "root%.scheduler%.backup +HEALTHY %-> DONE")
    assert.equal(0, status)
  end)

  it("entrypoint.lua: the app becomes HEALTHY under --init", function()
    local status = run_until("--init docs/examples/entrypoint.lua",
      "root%.app +NEW %-> HEALTHY")
    assert.equal(0, status)
  end)

  it("web.lua: after its prestart migration, the server becomes HEALTHY by its TCP probe", function()
    -- scripts/setup installs busybox (httpd) for this example
    local port = 20000 + (tonumber(sh("echo $$")) % 20000)
    local status = run_until("docs/examples/web.lua " .. port,
      "root%.site%.web +NEW %-> HEALTHY")
    assert.equal(0, status)
  end)
end)
