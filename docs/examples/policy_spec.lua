-- A spec to copy: test a restart policy before deploying it.
-- Run from the repository root: busted docs/examples/policy_spec.lua
-- (spec/docs_spec.lua runs it too, so it keeps working).
local policy = require "arbor.policy"
local testing = require "arbor.testing"

-- The policy under test: at most 3 failures in 30 s, backing off from 1 s
-- meanwhile; past that the parent decides (escalate).
local my_policy = policy.chain(
  policy.intensity{max = 3, period = 30},
  policy.exponential{initial = 1, multiplier = 2, max = 5, jitter = 0})

describe("my restart policy", function()
  it("draws the curve I expect (no engine needed)", function()
    -- fails at 0, 1, 3 and 7: the 4th failure within 30 s escalates
    assert.same({1, 2, 4, "escalate"}, policy.curve(my_policy, 10))
  end)

  it("forgives failures that are far apart", function()
    -- one failure a minute: never 4 within 30 s
    local times = {}
    for i = 1, 20 do times[i] = 60 * i end
    local r = policy.simulate(my_policy, times)
    assert.equal(20, #r)
    for _, d in ipairs(r) do assert.is_number(d.decision) end
  end)

  it("escalates to the parent in a real tree, on a virtual clock", function()
    local h = testing.new{seed = 1}
    h:start(function(ctx)
      ctx:run("sup", function(s)
        s:run("worker", function(w)
          w:signal("healthy")
          w:sleep(0.5)
          error("lost the database")
        end, {policy = my_policy})
        s:signal("healthy")
        s:wait()
      end, {policy = policy.constant(10)})
      ctx:signal("healthy")
      ctx:wait()
    end)
    -- fails at 0.5, 2, 4.5 (restarting after 1, 2, 4) and 9: escalates
    h:advance(10)
    local decisions = h:events{dn = "root.sup.worker", kind = "policy"}
    assert.equal("escalate", decisions[#decisions].reason)
    assert.equal("root.sup is waiting for a backoff", (h:explain("root.sup")):match("^[^:]+"))
    h:close()
  end)
end)
