-- End-to-end: arbor itself dies only in order (issue 15, point 5): SIGHUP
-- reloads the script (issue 17) and is logged, never kills; a stderr whose reader went away (EPIPE) stops the
-- printing, not the tree.
local json = require "arbor.json"
local support = require "e2e.support"
local bin, q, sh, mktemp, read = support.bin, support.q, support.sh, support.mktemp, support.read
local poll, alive = support.poll, support.alive

local function count(path) return tonumber(read(path) or "") or 0 end

describe("arbor run", function()
  local dir
  before_each(function() dir = mktemp() end)
  after_each(function() -- an arbor a failed test left running goes too
    local pid = tonumber(read(dir .. "/pid") or "")
    if pid then os.execute("kill -9 " .. pid .. " 2>/dev/null") end
    os.execute("rm -rf " .. q(dir))
  end)

  it("reloads on SIGHUP, logs it and supervises on", function()
    local sock, file = dir .. "/ctl.sock", dir .. "/count"
    os.execute(string.format("%s run --control %s spec/e2e/fixtures/ticker.lua %s > %s/out 2>&1 & echo $! > %s/pid",
      bin, q(sock), q(file), q(dir), q(dir)))
    poll(function() return count(file) > 0 end, "the tree to tick")
    local pid = tonumber(read(dir .. "/pid"))
    os.execute("kill -HUP " .. pid)
    poll(function()
      local _, out = sh(bin .. " ctl " .. q(sock) .. " logs root -n 1000")
      return out:find("SIGHUP: reload", 1, true)
    end, "the SIGHUP log line")
    local n = count(file)
    poll(function() return count(file) > n + 5 end, "the tree to tick on")
    assert.is_true(alive(pid))
    os.execute("kill -TERM " .. pid)
    poll(function() return not alive(pid) end, "arbor to stop")
    -- nothing changed: everything kept, the ticker did not restart
    assert.matches("root                     | SIGHUP: reload spec/e2e/fixtures/ticker.lua: 2 keep %([%d.]+ ms%); keep     root; keep     root.tick",
      read(dir .. "/out"))
  end)

  it("supervises on when its stderr is a pipe the reader closed", function()
    local sock, file = dir .. "/ctl.sock", dir .. "/count"
    -- head reads one line and exits: the next writes fail with EPIPE
    os.execute(string.format("(%s run --control %s spec/e2e/fixtures/ticker.lua %s 2>&1 >/dev/null & echo $! > %s/pid) | head -c 10 > /dev/null &",
      bin, q(sock), q(file), q(dir)))
    poll(function() return read(dir .. "/pid") and count(file) > 0 end, "the tree to tick")
    local pid = tonumber(read(dir .. "/pid"))
    local n = count(file)
    poll(function() return count(file) > n + 50 end, "the tree to tick on")
    assert.is_true(alive(pid))
    local code, out = sh(bin .. " ctl " .. q(sock) .. " status --json")
    assert.equal(0, code, out)
    local st = json.decode(out)
    assert.truthy(st.stderr_lost > 0)
    assert.matches("Broken pipe", st.stderr_error)
    local _, text = sh(bin .. " ctl " .. q(sock) .. " status")
    assert.matches("\nstderr: [^\n]*Broken pipe; %d+ line%(s%) not printed\n", text)
    os.execute("kill -TERM " .. pid)
    poll(function() return not alive(pid) end, "arbor to stop")
  end)

  it("is not killed by SIGPIPE when no control socket ignores it", function()
    local file = dir .. "/count"
    os.execute(string.format("(%s run --no-control spec/e2e/fixtures/ticker.lua %s 2>&1 >/dev/null & echo $! > %s/pid) | head -c 10 > /dev/null &",
      bin, q(file), q(dir)))
    poll(function() return read(dir .. "/pid") and count(file) > 0 end, "the tree to tick")
    local pid = tonumber(read(dir .. "/pid"))
    local n = count(file)
    poll(function() return count(file) > n + 50 end, "the tree to tick on")
    assert.is_true(alive(pid))
    os.execute("kill -TERM " .. pid)
    poll(function() return not alive(pid) end, "arbor to stop")
  end)
end)
