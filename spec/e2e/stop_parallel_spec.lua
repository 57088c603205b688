-- Issue 15 (6), end to end: stop = "parallel" tells ten real services to
-- stop at once. Each takes a second to exit after SIGTERM: every "term"
-- line comes before any "exit" line (in the default order each would exit
-- before the next is told).
local support = require "e2e.support"
local bin, fixtures, read, eventually = support.bin, support.fixtures, support.read, support.eventually

describe("stop = \"parallel\", end to end", function()
  it("SIGTERM to arbor tells ten services at once; all exit and arbor exits 0", function()
    local dir = support.mktemp()
    local log = dir .. "/stop.log"
    local p = io.popen("STOP_LOG=" .. log .. " sh -c 'echo $$; exec " .. bin
      .. " run --quiet " .. fixtures .. "stop_parallel.lua' 2>&1; echo \"exit:$?\"")
    local pid = tonumber(p:read("l"))
    assert.is_true(eventually(function()
      local _, n = (read(log) or ""):gsub("ready", "")
      return n == 10
    end))
    os.execute("kill -TERM " .. pid)
    local out = p:read("a")
    p:close()
    assert.matches("exit:0", out, 1, true)
    local lines = {}
    for l in read(log):gmatch("[^\n]+") do
      if not l:find("^ready") then lines[#lines + 1] = l end
    end
    assert.equal(20, #lines)
    for i = 1, 10 do assert.matches("^term", lines[i]) end
    for i = 11, 20 do assert.matches("^exit", lines[i]) end
    os.execute("rm -rf " .. dir)
  end)
end)
