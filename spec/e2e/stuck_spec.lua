-- End-to-end: a second SIGINT or SIGTERM ends arbor even while its one
-- thread is stuck in a call that no hook can interrupt (T12, issue 13),
-- with status 130 or 143; the process guard then kills what it supervised.
local support = require "e2e.support"
local bin, fixtures, q = support.bin, support.fixtures, support.q

local function alive(pid)
  return os.execute("kill -0 " .. pid .. " 2>/dev/null") == true
end

-- Starts the stuck fixture (in a FIFO's open, or in a __gc with `gc`),
-- sends `sig` twice once it is stuck; returns the exit status, the output
-- and the supervised process's pid.
local function stuck_then(sig, gc)
  local dir = support.mktemp()
  local marker, fifo = dir .. "/marker", gc and "gc" or dir .. "/fifo"
  if not gc then assert(os.execute("mkfifo " .. q(fifo))) end
  local p = io.popen("sh -c 'echo $$; exec " .. bin .. " run --quiet "
    .. fixtures .. "stuck.lua " .. q(marker) .. " " .. q(fifo)
    .. " 2>&1'; echo \"exit:$?\"")
  local pid = p:read("l")
  assert.is_true(support.eventually(function() return support.read(marker) end))
  local child = support.read(marker .. ".child"):match("%d+")
  -- Two signals sent back to back can reach arbor as one (a pending
  -- signal is not queued twice): the signal is sent again until arbor is
  -- gone, so a second one always comes after the first was handled.
  os.execute("kill -" .. sig .. " " .. pid)
  local ended = support.eventually(function()
    os.execute("kill -" .. sig .. " " .. pid .. " 2>/dev/null")
    return not alive(pid)
  end, 300)
  if not ended then os.execute("kill -KILL " .. pid) end
  local rest = p:read("a")
  p:close()
  os.execute("rm -rf " .. q(dir))
  assert(ended, "arbor did not exit:\n" .. rest)
  return tonumber(rest:match("exit:(%d+)")), rest, child
end

describe("a stuck engine", function()
  it("exits 143 on a second SIGTERM, and its processes are killed", function()
    local code, out, child = stuck_then("TERM")
    assert.equal(143, code, out)
    assert.matches("a second stop signal while the engine is stuck", out, 1, true)
    assert.is_true(support.eventually(function() return not alive(child) end))
  end)

  it("exits 143 on a second SIGTERM while a __gc loops", function()
    local code, out = stuck_then("TERM", true)
    assert.equal(143, code, out)
  end)

  it("exits 130 on a second SIGINT", function()
    local code, out, child = stuck_then("INT")
    assert.equal(130, code, out)
    assert.is_true(support.eventually(function() return not alive(child) end))
  end)
end)
