-- End-to-end: the lifecycle example under the real arbor binary.
local support = require "e2e.support"
local bin, sh = support.bin, support.sh

describe("arbor run docs/examples/lifecycle.lua", function()
  it("runs the sequence and ends by itself, exit 0", function()
    local code, out = sh(bin .. " run docs/examples/lifecycle.lua")
    assert.equal(0, code)
    local order = {}
    for _, pat in ipairs{
      "root.shop.migrate%s+| migration 3 of 3 applied",
      "root.shop%s+coordinator prestart %-> main",
      "root.shop.app%s+%-> NEW",
      "root.shop.warmup%s+%-> NEW",
      "root.shop.app%s+| handled order 5",
      "root.shop.proxy%s+HEALTHY %-> CANCELED",
      "root.shop%s+coordinator running %-> poststop",
      "root.shop.flush%s+| flushing 5 orders",
    } do
      local at = out:find(pat)
      assert(at, "missing in the output: " .. pat .. "\n" .. out)
      order[#order + 1] = at
    end
    for i = 2, #order do assert.is_true(order[i] > order[i - 1]) end
  end)
end)
