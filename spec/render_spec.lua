-- Issue 25 point 5: what the HTTP listener answers from, cheap or in
-- slices. core.not_ready is /readyz's body: the nodes neither HEALTHY nor
-- DONE, the first few listed and the rest counted.
local core = require "arbor.core"
local support = require "support"
local new, idle = support.new, support.idle

after_each(support.close_all)

describe("core.not_ready", function()
  it("lists the first max nodes neither HEALTHY nor DONE, in pre-order, and counts them all", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("up", idle)
      ctx:run("pending", function(c)
        for i = 1, 5 do c:run("n" .. i, function(x) x:wait() end) end
        c:wait()
      end)
      ctx:wait()
    end)
    h:advance(1)
    local text, n = core.not_ready(h.engine, 3)
    assert.equal(7, n) -- root, pending and its five children
    assert.equal("root NEW\nroot.pending NEW\nroot.pending.n1 NEW\n", text)
    local all = select(1, core.not_ready(h.engine, 100))
    assert.equal(7, select(2, all:gsub("\n", "")))
    assert.matches("root.pending.n5 NEW\n$", all)
    assert.same({"", 7}, {core.not_ready(h.engine, 0)})
  end)
end)
