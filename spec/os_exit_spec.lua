-- os.exit inside the tree (issue 13, defect 11): it would end arbor at once,
-- with no ordered stop, so while the engine runs user code it raises an
-- error naming the node and the alternative; the node fails as for any
-- error. Outside the tree (before arbor.run, after it returns, after the
-- harness closed) it exits as usual. Each case runs in a child lua5.4:
-- before the fix, os.exit ended it.
local support = require "support"

local PRELUDE = "testing = require 'arbor.testing'\npolicy = require 'arbor.policy'\n"
  .. "arbor = require 'arbor'\n"

local function isolated(src, status)
  return support.isolated(PRELUDE .. src, status)
end

-- the message, as a pattern
local REFUSED = ("os.exit is refused inside the tree: it would end arbor "
  .. "at once, without stopping the tree in order; call arbor.stop()"):gsub("%p", "%%%0")

describe("os.exit inside the tree", function()
  it("fails the runnable that calls it, naming it, and the tree runs on", function()
    local out = isolated([[
      local h = testing.new{seed = 1}
      h:start(function(ctx)
        ctx:run("quitter", function(c)
          c:sleep(1)
          os.exit(true)
        end, {policy = policy.never})
        ctx:run("steady", function(c) c:signal("healthy") c:wait() end)
        ctx:signal("healthy")
        ctx:wait()
      end)
      h:advance(1)
      print(h:state("root.quitter"), h:state("root.steady"))
      print(h:node("root.quitter").error)
      h:close()
      os.exit(7) -- outside the tree: exits as usual
    ]], 7)
    assert.matches("DEAD\tHEALTHY", out, 1, true)
    -- the file:line of the call, the node, the alternative
    assert.matches("lua_%w+:10: root.quitter: " .. REFUSED, out)
  end)

  it("is refused in a policy, a subscriber and a ctx:defer", function()
    local out = isolated([[
      local h = testing.new{seed = 1}
      h:start(function(ctx)
        arbor.on_event(function() os.exit(3) end)
        ctx:run("w", function(c)
          c:defer(function() os.exit(4) end)
          c:sleep(1)
          error("boom")
        end, {policy = function() os.exit(5) end})
        ctx:signal("healthy")
        ctx:wait()
      end)
      h:advance(1)
      for _, l in ipairs(h:logs("root")) do print("root| " .. l.line) end
      for _, l in ipairs(h:logs("root.w")) do print("w| " .. l.line) end
      h:close()
    ]])
    assert.matches("root| on_event subscriber removed: [^\n]*" .. REFUSED, out)
    assert.matches("w| ctx:defer: [^\n]*" .. REFUSED, out)
    assert.matches("w| faulty policy: [^\n]*" .. REFUSED, out)
  end)

  it("exits as usual before arbor.run and after it returns", function()
    isolated([[
      arbor.run(function(ctx) ctx:signal("healthy") arbor.stop() ctx:wait() end,
        {signals = false})
      os.exit(true)
    ]])
    isolated("os.exit(false)", 1)
  end)
end)
