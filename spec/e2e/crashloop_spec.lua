-- Issue 15, end to end, with real programs and arbor's defaults: a program
-- that exits at once backs off (its delays grow: min_uptime keeps its
-- streak) and `arbor ctl status` calls it crash-looping; a program that
-- never sends READY=1 fails with "not ready after S s".
local json = require "arbor.json"
local support = require "e2e.support"
local bin, q, sh, eventually = support.bin, support.q, support.sh, support.eventually

describe("crash loops and stuck starts under the defaults", function()
  local e
  setup(function() e = support.run_arbor("--quiet spec/e2e/fixtures/crashloop.lua") end)
  teardown(function() support.stop_arbor(e) end)

  local function ctl(args) return sh(bin .. " ctl " .. q(e.sock) .. " " .. args) end

  it("a program exiting at once restarts with growing delays, shown as crash-looping", function()
    local delays = {}
    assert.is_true(eventually(function()
      local code, out = ctl("events -n 1000 --json")
      if code ~= 0 then return false end
      delays = {}
      for _, ev in ipairs(json.decode(out)) do
        if ev.dn == "root.loop" and ev.kind == "policy" and ev.delay then
          delays[#delays + 1] = ev.delay
        end
      end
      return #delays >= 4
    end, 3000))
    -- the default policy: exponential from 0.5 s, times 1.5, jitter 0.5: the
    -- k-th delay lies within half of 0.5 * 1.5^(k-1) either way. Had the
    -- streak restarted at each spawn, the fourth would be at most 0.75 s.
    for k = 1, 4 do
      local base = 0.5 * 1.5 ^ (k - 1)
      assert.is_true(delays[k] >= 0.5 * base - 1e-9 and delays[k] <= 1.5 * base + 1e-9,
        json.encode(delays))
    end
    assert.is_true(eventually(function()
      local _, out = ctl("status")
      return out:match("root%.loop%s+DEAD[^\n]*crash%-looping") ~= nil
    end, 3000))
  end)

  it("a program that never sends READY=1 fails with 'not ready after 0.3 s'", function()
    assert.is_true(eventually(function()
      local code, out = ctl("node root.silent --json")
      local n = code == 0 and json.decode(out)
      return n and n.state == "DEAD" and n.error and n.error:find("not ready after 0.3 s", 1, true)
    end))
  end)
end)
