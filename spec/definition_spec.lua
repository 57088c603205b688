-- What "the same definition" of a node means (arbor.definition, issue 17):
-- the basis of restore and reload, docs/architecture.md#definitions.
local arbor = require "arbor"
local definition = require "arbor.definition"

local text, of = definition.text, definition.of

-- A runnable made by a chunk of source, as a script would make it.
local function made(src, ...) return assert(load(src))(...) end

describe("a runnable's definition", function()
  local src = [[
local port, opts = ...
return function(ctx)
  local t = {1, 2.5, "s", true}
  local function inner(y) return function() return y + port end end
  ctx:log(inner(3)(), t, opts.name)
end]]

  it("is its code and captured values, not where the code stands in its file", function()
    local a = made(src, 8080, {name = "web"})
    local moved = made("-- a comment\n\n\n" .. src:gsub("local t", "\n\nlocal t"), 8080, {name = "web"})
    assert.equal(text(a), text(moved))
  end)

  it("changes with its code: a constant, an operator, a nested function", function()
    local a = text(made(src, 8080, {name = "web"}))
    assert.not_equal(a, text(made((src:gsub("2%.5", "2.75")), 8080, {name = "web"})))
    assert.not_equal(a, text(made((src:gsub("y %+ port", "y - port")), 8080, {name = "web"})))
    assert.not_equal(a, text(made((src:gsub("return y", "return 1 + y")), 8080, {name = "web"})))
  end)

  it("changes with a captured value, also deep in a captured table", function()
    local a = text(made(src, 8080, {name = "web"}))
    assert.not_equal(a, text(made(src, 8081, {name = "web"})))
    assert.not_equal(a, text(made(src, 8080, {name = "api"})))
    assert.not_equal(a, text(made(src, 8080.0, {name = "web"}))) -- 8080 and 8080.0 differ
    assert.equal(a, text(made(src, 8080, {name = "web"})))
  end)

  it("reads captured values as they are now: a counter that moved is another definition", function()
    local n = 0
    local function counting() n = n + 1 return n end
    local before = text(counting)
    counting()
    assert.not_equal(before, text(counting))
  end)

  it("writes a module by its name, the global table as such, a C function by its name in a module", function()
    local a = made("local arbor = ... return function(ctx) return arbor, print, _G end", arbor)
    local t = text(a)
    assert.matches("m5:arbor", t, 1, true)
    assert.is_nil(t:find("exponential", 1, true)) -- the module's contents are not in it
    assert.equal(t, text(made("local arbor = ... return function(ctx) return arbor, print, _G end", arbor)))
    assert.equal(text(print), text(print))
    assert.not_equal(text(print), text(io.write))
    assert.equal("C8:_G.print", text(print))
    assert.equal("C13:string.format", text(string.format))
    assert.equal("C26:arbor.core.intensity_count", text(require("arbor.core").intensity_count))
  end)

  it("reads tables raw: their metatable's __pairs and __index do not run", function()
    local calls = 0
    local t = setmetatable({a = 1}, {__pairs = function() calls = calls + 1 return next, {} end,
      __index = function() calls = calls + 1 return 2 end})
    assert.equal(text({a = 1}), text(t))
    assert.equal(0, calls)
  end)

  it("survives cycles and shared values, whatever the order of pairs", function()
    local t = {}
    t.self, t.again = t, t
    local shared = {1}
    local a = text({x = shared, y = shared, t = t})
    assert.equal(a, text({y = shared, x = shared, t = t}))
    assert.not_equal(a, text({x = shared, y = {1}, t = t})) -- shared is not the same as equal
    -- tables as keys: the same text however pairs orders them
    local k1, k2 = {"a"}, {"b"}
    local u = {[k1] = 1, [k2] = 2}
    local v = {}
    v[k2] = 2
    v[k1] = 1
    assert.equal(text(u), text(v))
  end)
end)

describe("an arbor.exec runnable's definition", function()
  it("is its argv, environment and options", function()
    local function exec(argv, opts) return arbor.exec(argv, opts) end
    local a = of(exec({"sleep", "10"}, {env = {A = "1"}, grace = 2}))
    assert.equal(a, of(exec({"sleep", "10"}, {env = {A = "1"}, grace = 2})))
    assert.not_equal(a, of(exec({"sleep", "11"}, {env = {A = "1"}, grace = 2})))
    assert.not_equal(a, of(exec({"sleep", "10"}, {env = {A = "2"}, grace = 2})))
    assert.not_equal(a, of(exec({"sleep", "10"}, {env = {A = "1"}, grace = 3})))
    assert.not_equal(a, of(exec({"sleep", "10"}, {env = {A = "1"}, grace = 2, ready = "systemd"})))
  end)
end)

describe("a node's definition", function()
  it("is its runnable and the options its parent gave, policies included", function()
    local run = made("return function(ctx) ctx:wait() end")
    local a = of(run, {grace = 5, policy = arbor.policy.constant(1)})
    assert.equal(a, of(run, {grace = 5, policy = arbor.policy.constant(1)}))
    assert.not_equal(a, of(run, {grace = 6, policy = arbor.policy.constant(1)}))
    assert.not_equal(a, of(run, {grace = 5, policy = arbor.policy.constant(2)}))
    assert.equal(of(run), of(run, {}))
  end)
end)

describe("a stock policy's definition (issue 25)", function()
  local P = arbor.policy

  it("is its parameters: the same policy made again is the same definition", function()
    local makers = {
      function() return P.exponential() end,
      function() return P.exponential{initial = 1, max = 30, reset_after = 600} end,
      function() return P.decaying() end,
      function() return P.decaying{threshold = 3, half_life = 10, pause = 5} end,
      function() return P.intensity{max = 3, period = 60} end,
      function() return P.intensity{max = 40, period = 60, exceeded = "stop"} end,
      function() return P.constant(2) end,
      function() return P.immediate() end,
      function() return P.never end,
      function() return P.chain(P.intensity{max = 5, period = 10}, P.decaying()) end,
      function() return P.transient(P.exponential{reset_after = 60}) end,
    }
    for i, make in ipairs(makers) do
      local a = make()
      -- many policies made meanwhile, and some called by hand (no memory)
      for j = 1, 50 do
        local p = makers[(i + j) % #makers + 1]()
        pcall(p, {dn = "root.x", consecutive = j, failure = j, now = j, failures = {j}})
      end
      pcall(a, {dn = "root.y", consecutive = 1, failure = 1, now = 1, failures = {1}})
      assert.equal(text(make()), text(a), "policy #" .. i)
    end
    assert.not_equal(text(P.exponential{reset_after = 60}), text(P.exponential{reset_after = 61}))
    assert.not_equal(text(P.decaying{pause = 1}), text(P.decaying{pause = 2}))
  end)

  it("keeps its state in the node's memory, where the same policy made again finds it", function()
    local memory = {}
    local function ev(n, now) return {dn = "root.d", failure = n, now = now, memory = memory} end
    local a = P.decaying{threshold = 2, half_life = 1000, pause = 7}
    assert.equal(0, a(ev(1, 0)))
    assert.equal(0, a(ev(2, 1)))
    local again = P.decaying{threshold = 2, half_life = 1000, pause = 7} -- a reload's
    assert.equal(7, again(ev(3, 2))) -- the third failure: the count went on
  end)
end)

describe("what changed in a definition (issue 25)", function()
  local P = arbor.policy
  local why = definition.why

  it("names the parts: argv, env, an option, the policy, a Lua runnable", function()
    local function web(argv, eo, opts) return arbor.exec(argv, eo), opts end
    local a, ao = web({"nginx"}, {env = {A = "1"}, grace = 5, stop_signal = "QUIT"},
      {policy = P.exponential(), shutdown = 10})
    local function same(argv, eo, opts) return why(a, ao, web(argv, eo, opts)) end
    assert.is_nil(same({"nginx"}, {env = {A = "1"}, grace = 5, stop_signal = "QUIT"},
      {policy = P.exponential(), shutdown = 10}))
    assert.equal("its argv changed", same({"nginx", "-g"}, {env = {A = "1"}, grace = 5,
      stop_signal = "QUIT"}, {policy = P.exponential(), shutdown = 10}))
    assert.equal("its env changed", same({"nginx"}, {env = {A = "2"}, grace = 5,
      stop_signal = "QUIT"}, {policy = P.exponential(), shutdown = 10}))
    assert.equal("its policy changed", same({"nginx"}, {env = {A = "1"}, grace = 5,
      stop_signal = "QUIT"}, {policy = P.exponential{max = 30}, shutdown = 10}))
    assert.equal("its option grace changed", same({"nginx"}, {env = {A = "1"}, grace = 6,
      stop_signal = "QUIT"}, {policy = P.exponential(), shutdown = 10}))
    assert.equal("its argv, policy and options (shutdown, stop_signal) changed",
      same({"nginx", "-g"}, {env = {A = "1"}, grace = 5}, {policy = P.decaying(), shutdown = 11}))
    local run = made("local n = ... return function(ctx) return n end", 1)
    assert.equal("its runnable changed",
      why(run, nil, made("local n = ... return function(ctx) return n end", 2), nil))
    assert.equal("its option min_uptime changed", why(run, {min_uptime = 1}, run, {min_uptime = 2}))
  end)
end)
