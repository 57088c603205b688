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
    local _, err, code = json.decode("{{{")
    assert.matches("^EINVAL: invalid JSON at byte 2: ", err)
    assert.equal("EINVAL", code)
    _, err = json.decode(string.rep("[", 300) .. string.rep("]", 300))
    assert.matches("^EINVAL: invalid JSON at byte %d+: .*nest", err)
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

  describe("encode", function()
    local enc = json.encode
    it("writes integers whole and floats with 14 digits, as Lua's tostring", function()
      assert.equal("[1,-7,0,9223372036854775807,-9223372036854775808,9007199254740993,100000000000000]",
        enc({1, -7, 0, math.maxinteger, math.mininteger, (1 << 53) + 1, math.tointeger(10^14)}))
      assert.equal("[0.5,0.33333333333333,3,1e+300,-0]", enc({0.5, 1 / 3, 3.0, 1e300, -0.0}))
      assert.equal(tostring(1 / 3), enc(1 / 3))
      assert.equal("123456789012345678", enc(123456789012345678))
      -- a key past 10^14 keeps its digits too
      assert.equal('{"123456789012345678":1}', enc({[123456789012345678] = 1}))
    end)

    it("writes what JSON cannot hold as strings, and cycles as <cycle>", function()
      local t = {a = 1}
      t.self = t
      local v = json.decode(enc({t, print, 0 / 0, math.huge, -math.huge, json.null, true}))
      assert.same({a = 1, self = "<cycle>"}, v[1])
      assert.matches("^<function: ", v[2])
      assert.matches("nan$", v[3])
      assert.same({"inf", "-inf", json.null, true}, {v[4], v[5], v[6], v[7]})
      assert.equal("null", enc(json.null))
      assert.equal("null", enc(nil))
      -- a table met twice, not inside itself, is written twice
      local shared = {1}
      assert.equal("[[1],[1]]", enc({shared, shared}))
    end)

    it("writes [] for an empty table, {} with object_mt, objects for sparse or mixed keys", function()
      assert.equal("[]", enc({}))
      assert.equal("{}", enc(setmetatable({}, json.object_mt)))
      local s = enc({a = {}, b = setmetatable({}, json.object_mt)})
      assert.is_true(s == '{"a":[],"b":{}}' or s == '{"b":{},"a":[]}', s)
      assert.same({["1"] = 1, ["3"] = 3}, json.decode(enc({[1] = 1, [3] = 3})))
      assert.same({["1"] = "x", y = 2}, json.decode(enc({"x", y = 2})))
      assert.same({["true"] = 1}, json.decode(enc({[true] = 1})))
      assert.same({["0"] = 1, ["-2"] = 2}, json.decode(enc({[0] = 1, [-2] = 2})))
      -- "{}" in a string stays as it is next to an empty array
      local t = enc({a = {}, s = "x{}y", n = {{}, "{}"}})
      assert.matches('"a":[]', t, 1, true)
      assert.matches('"s":"x{}y"', t, 1, true)
      assert.matches('"n":[[],"{}"]', t, 1, true)
      assert.equal([["a\\b\"\n\u0001\/"]], enc('a\\b"\n\1/'))
    end)

    it("writes deep nesting and long arrays whole", function()
      local deep = {}
      local c = deep
      for _ = 1, 5000 do c[1] = {} c = c[1] end
      local s = enc(deep)
      assert.equal(string.rep("[", 5001) .. string.rep("]", 5001), s)
      local big, mixed = {}, {}
      for i = 1, 100000 do
        big[i] = i
        mixed[i] = i % 3 == 0 and {n = i, s = "x" .. i} or i % 3 == 1 and "s" .. i or i
      end
      mixed[50000] = json.null
      assert.same(big, json.decode(enc(big)))
      local back = json.decode(enc(mixed))
      assert.equal(100000, #back)
      assert.same({n = 3, s = "x3"}, back[3])
      assert.equal("s4", back[4])
      assert.equal(json.null, back[50000])
      assert.equal(99998, back[99998])
    end)

    it("gives back what it was given, through decode, for random data", function()
      local rnd = require("support").generator(7)
      local function value(depth)
        local k = rnd(8)
        if k == 1 then return rnd(1000) - 500 end
        if k == 2 then return (rnd(1000) - 500) / 8 end
        if k == 3 then return ("s%d\n\"\\"):format(rnd(99)) end
        if k == 4 then return rnd(2) == 1 end
        if depth > 4 or k == 5 then return rnd(1 << 40) * 1000 end
        local t = {}
        if k == 6 then
          for i = 1, rnd(6) - 1 do t[i] = value(depth + 1) end
        else
          for _ = 1, rnd(6) - 1 do t["k" .. rnd(20)] = value(depth + 1) end
        end
        return t
      end
      for _ = 1, 300 do
        local v = value(0)
        assert.same(v, json.decode(json.encode(v)))
      end
    end)
  end)
end)
