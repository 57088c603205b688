-- arbor.json: the control protocol's JSON (docs/control-protocol.md).
local json = require "arbor.json"

describe("arbor.json", function()
  it("decodes integers as integers, null as json.null, and names where it failed", function()
    local v = assert(json.decode('{"id":7,"n":1e3,"f":0.5,"x":null,"a":[1,[2,null]],"s":"\\u00e9\\n"}'))
    assert.equal("integer", math.type(v.id))
    assert.equal("integer", math.type(v.n))
    assert.equal(1000, v.n)
    assert.equal("float", math.type(v.f))
    assert.equal(json.null, v.x)
    assert.equal("integer", math.type(v.a[2][1]))
    assert.equal(json.null, v.a[2][2])
    assert.equal("é\n", v.s)
    local _, err = json.decode("{{{")
    assert.matches("^invalid JSON at byte 2: ", err)
    _, err = json.decode(string.rep("[", 300) .. string.rep("]", 300))
    assert.matches("^invalid JSON at byte %d+: .*nest", err)
    assert.is_nil(json.decode("[NaN]"))
    assert.is_nil(json.decode('{"a":1} x'))
  end)

  it("decodes a request of 1 MiB in C, not in Lua instructions", function()
    local nums = {}
    for i = 1, 260000 do nums[i] = i % 1000 end
    local payload = '{"id":1,"op":"status","pad":' .. json.encode(nums) .. "}"
    assert.is_true(#payload > 1e6 and #payload <= 1 << 20)
    local count = 0
    debug.sethook(function() count = count + 1 end, "", 100)
    local req = json.decode(payload, true) -- as the engine decodes requests
    debug.sethook()
    assert.equal(1, req.id)
    assert.equal("integer", math.type(req.id))
    assert.is_true(count < 10, "ran about " .. count * 100 .. " Lua instructions")
  end)
end)
