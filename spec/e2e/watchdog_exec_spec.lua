-- End-to-end: the real arbor supervises a program that talks to its
-- watchdog with systemd-notify, the real client (issue 15, point 3). The
-- program pings a few times, then goes silent: its node fails with the
-- reason and the default policy restarts it.
local support = require "e2e.support"
local bin, q = support.bin, support.q

local script = [[
local arbor = require "arbor"
return function(ctx)
  ctx:run("w", arbor.exec({"sh", "-c", "systemd-notify --ready; for i in 1 2 3; do "
    .. "systemd-notify WATCHDOG=1; echo ping $i; sleep 0.1; done; echo silent; exec sleep 1000"},
    {ready = "systemd", watchdog = 0.5, grace = 1}))
  ctx:signal("healthy")
  ctx:wait()
end
]]

local function alive(pid) return os.execute("kill -0 " .. pid .. " 2>/dev/null") == true end

describe("arbor.exec{watchdog = S} under the real arbor", function()
  local dir
  before_each(function() dir = support.mktemp() end)
  after_each(function() os.execute("rm -rf " .. q(dir)) end)

  it("fails a program whose WATCHDOG=1 stop, with the reason, and restarts it", function()
    local f = assert(io.open(dir .. "/watchdog.lua", "w"))
    f:write(script)
    f:close()
    local out = dir .. "/out"
    local pid = support.capture(string.format("sh -c 'echo $$; exec %s run %s > %s 2>&1' & ",
      bin, q(dir .. "/watchdog.lua"), q(out))):match("%d+")
    local function text() return support.read(out) or "" end
    local function count(pattern)
      local n = 0
      for _ in text():gmatch(pattern) do n = n + 1 end
      return n
    end
    local ok = support.eventually(function()
      return count("root%.w +HEALTHY %-> DEAD +watchdog timeout after 0%.5 s\n") >= 2
    end)
    os.execute("kill -TERM " .. pid)
    assert.is_true(support.eventually(function() return not alive(pid) end))
    assert.is_true(ok, text())
    local log = text()
    -- it pinged, went silent, failed, and was started again
    assert.matches("root%.w +NEW %-> HEALTHY", log)
    assert.matches("root%.w +DEAD %-> NEW +restart", log)
    assert.is_true(count("stdout: ping 3") >= 2, log)
    assert.is_true(count("stdout: silent") >= 2, log)
  end)
end)
