local testing = require "arbor.testing"
describe("smoke", function()
  it("starts a tree", function()
    local h = testing.new()
    h:start(function(ctx) ctx:signal("healthy") ctx:wait() end)
    assert.equal("HEALTHY", h:state("root"))
  end)
end)
