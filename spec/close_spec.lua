-- T3, T5: a failed incarnation's pending <close> variables run as it ends,
-- before its policy is asked and before its next incarnation starts
-- (issue 13, defect 5); its traceback is kept.
local support = require "support"
local policy = require "arbor.policy"

describe("a failed incarnation's <close> variables", function()
  after_each(support.close_all)

  -- A runnable holding a resource in a <close> variable; `held` tells
  -- whether it is still open. It fails at its first incarnation.
  local function tree(h, seen, p)
    local held = false
    h:start(function(ctx)
      ctx:run("w", function(c)
        if c.incarnation > 1 then
          seen.next = held
          c:signal("healthy")
          return c:wait()
        end
        held = true
        local port <close> = setmetatable({}, {__close = function() held = false end})
        c:sleep(1)
        error("boom")
      end, {policy = function(ev)
        seen.policy = held
        return p
      end})
      ctx:signal("healthy")
      ctx:wait()
    end)
  end

  it("run before its policy and its next incarnation", function()
    local h, seen = support.new(), {}
    tree(h, seen, 0)
    h:advance(1)
    assert.equal("HEALTHY", h:state("root.w"))
    assert.is_false(seen.policy)
    assert.is_false(seen.next)
    local trace = h:node("root.w").traceback
    assert.matches("^stack traceback:", trace)
    assert.matches("close_spec.lua:%d+: in function", trace)
  end)

  it("run at once when the restart is delayed", function()
    local h, seen = support.new(), {}
    tree(h, seen, 10)
    h:advance(1)
    assert.equal("DEAD", h:state("root.w"))
    assert.is_false(seen.policy)
    h:advance(10)
    assert.is_false(seen.next)
  end)

  it("run after a runaway stop, which keeps its traceback", function()
    local h, seen = support.new{seed = 1, runaway = 0.2}, {}
    local held = false
    h:start(function(ctx)
      ctx:run("spin", function(c)
        held = true
        local port <close> = setmetatable({}, {__close = function() held = false end})
        c:sleep(1)
        while true do end
      end, {policy = function() seen.policy = held return "stop" end})
      ctx:signal("healthy")
      ctx:wait()
    end)
    h:advance(1)
    assert.is_false(seen.policy)
    assert.matches("close_spec.lua:%d+: in function", h:node("root.spin").traceback)
  end)

  it("run before the defers, last deferred first", function()
    local h, order = support.new(), {}
    h:start(function(ctx)
      ctx:run("w", function(c)
        c:defer(function() order[#order + 1] = "defer" end)
        local x <close> = setmetatable({}, {__close = function()
          order[#order + 1] = "close"
        end})
        c:sleep(1)
        error("boom")
      end, {policy = policy.never})
      ctx:signal("healthy")
      ctx:wait()
    end)
    h:advance(1)
    assert.same({"close", "defer"}, order)
  end)
end)
