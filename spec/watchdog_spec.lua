-- Runaway code never freezes the engine (T7, P1, T14, issue 13): a
-- runnable, a policy, a subscriber, a ctx:defer, a <close> variable, the log
-- sink or an error's __tostring that loops is stopped even when it catches
-- the error with pcall and loops again. Each case runs in a child lua5.4
-- on the virtual-clock harness, under timeout(1): a regression that freezes
-- fails here instead of hanging the suite. The limits are real time; no
-- test asserts a duration.

-- The spin that catches the watchdog's first error and loops again.
local ESCAPE = "pcall(function() while true do end end) while true do end"

local support = require "support"

-- Runs src in a child lua5.4 (with ESCAPE, testing, policy and arbor
-- defined); returns its output.
local function isolated(src)
  return support.isolated(string.format("ESCAPE = %q\n", ESCAPE)
    .. "testing = require 'arbor.testing'\npolicy = require 'arbor.policy'\n"
    .. "arbor = require 'arbor'\n" .. src)
end

-- The value printed by the child as `key=value`.
local function field(out, key)
  return out:match("\n" .. key .. "=([^\n]*)") or out:match("^" .. key .. "=([^\n]*)")
end

describe("the watchdog cannot be escaped", function()
  it("stops a runnable that catches the runaway error and loops again, "
    .. "every time it does so", function()
    local out = isolated([[
      local h = testing.new{seed = 1, runaway = 0.2}
      h:start(function(ctx)
        ctx:run("spin", function(c)
          c:signal("healthy")
          c:sleep(1)
          load(ESCAPE)()
        end, {policy = policy.constant(1)})
        ctx:run("steady", function(c) c:signal("healthy") c:wait() end)
        ctx:signal("healthy")
        ctx:wait()
      end)
      -- three incarnations in a row: each reuses a thread the last one
      -- left, and each must be stopped again
      for i = 1, 3 do
        h:advance(1)
        print("state" .. i .. "=" .. h:state("root.spin"))
        print("error" .. i .. "=" .. h:node("root.spin").error)
        h:advance(1)
      end
      print("trace=" .. (h:node("root.spin").traceback or ""):gsub("\n", " "))
      print("steady=" .. h:state("root.steady"))
      h:close()
    ]])
    for i = 1, 3 do
      assert.equal("DEAD", field(out, "state" .. i))
      assert.matches("^runaway runnable: ran %d+ ms without yielding %(limit 200 ms%)$",
        field(out, "error" .. i))
    end
    assert.matches("stack traceback:", field(out, "trace"), 1, true)
    assert.equal("HEALTHY", field(out, "steady"))
  end)

  it("stops a runnable looping in a Lua function called by a C function", function()
    local out = isolated([[
      local h = testing.new{seed = 1, runaway = 0.2}
      h:start(function(ctx)
        ctx:run("spin", function(c)
          c:signal("healthy")
          c:sleep(1)
          -- table.sort cannot yield: the comparator is stopped by errors
          while true do
            pcall(table.sort, {3, 2, 1}, function() load(ESCAPE)() end)
          end
        end, {policy = policy.never})
        ctx:signal("healthy")
        ctx:wait()
      end)
      h:advance(1)
      print("state=" .. h:state("root.spin"))
      print("error=" .. h:node("root.spin").error)
      h:close()
    ]])
    assert.equal("DEAD", field(out, "state"))
    assert.matches("runaway runnable: ran %d+ ms", field(out, "error"))
  end)

  it("stops a runnable that blocks in system calls over and over: the "
    .. "engine's time blocked counts, only its wait for a CPU does not", function()
    local out = isolated([[
      local h = testing.new{seed = 1, runaway = 0.2}
      h:start(function(ctx)
        ctx:run("sleeper", function(c)
          c:signal("healthy")
          c:sleep(1)
          local uv = require "luv"
          while true do uv.sleep(20) end -- nanosleep(2): no CPU time
        end, {policy = policy.never})
        ctx:signal("healthy")
        ctx:wait()
      end)
      h:advance(1)
      print("state=" .. h:state("root.sleeper"))
      print("error=" .. h:node("root.sleeper").error)
      h:close()
    ]])
    assert.equal("DEAD", field(out, "state"))
    assert.matches("^runaway runnable: ran %d+ ms without yielding %(limit 200 ms%)$",
      field(out, "error"))
  end)

  it("stops a runnable that spends its time in calls watched on their own "
    .. "(the log sink): their time counts for the runnable", function()
    local out = isolated([[
      local h = testing.new{seed = 1, runaway = 0.2}
      -- each line takes 30 ms of the sink, within the budget of user code
      h.engine:set_log(function()
        local t = os.clock()
        while os.clock() - t < 0.03 do end
      end)
      h:start(function(ctx)
        ctx:run("chatty", function(c)
          c:signal("healthy")
          c:sleep(1)
          while true do c:log("line") end
        end, {policy = policy.never})
        ctx:signal("healthy")
        ctx:wait()
      end)
      h:advance(1)
      print("state=" .. h:state("root.chatty"))
      print("error=" .. h:node("root.chatty").error)
      h:close()
    ]])
    assert.equal("DEAD", field(out, "state"))
    assert.matches("^runaway runnable: ran %d+ ms without yielding %(limit 200 ms%)$",
      field(out, "error"))
  end)

  it("stops a runnable looping in a coroutine it made and resumed", function()
    local out = isolated([[
      local cases = {
        wrap = function() coroutine.wrap(function() load(ESCAPE)() end)() end,
        resume = function()
          local co = coroutine.create(function() load(ESCAPE)() end)
          coroutine.resume(co)
          load(ESCAPE)()
        end,
        nested = function()
          coroutine.wrap(function()
            coroutine.wrap(function() load(ESCAPE)() end)()
          end)()
        end,
        generator = function()
          local gen = coroutine.wrap(function()
            while true do pcall(coroutine.yield, 1) end
          end)
          while true do pcall(gen) end
        end,
      }
      local h = testing.new{seed = 1, runaway = 0.2}
      h:start(function(ctx)
        for name, spin in pairs(cases) do
          ctx:run(name, function(c)
            c:signal("healthy")
            c:sleep(1)
            spin()
          end, {policy = policy.never})
        end
        ctx:run("steady", function(c) c:signal("healthy") c:wait() end)
        ctx:signal("healthy")
        ctx:wait()
      end)
      h:advance(1)
      for name in pairs(cases) do
        print(name .. "=" .. h:state("root." .. name) .. " "
          .. h:node("root." .. name).error)
      end
      print("steady=" .. h:state("root.steady"))
      h:close()
    ]])
    for _, name in ipairs({"wrap", "resume", "nested", "generator"}) do
      assert.matches("^DEAD .*runaway runnable: ran %d+ ms", field(out, name))
    end
    assert.equal("HEALTHY", field(out, "steady"))
  end)

  it("stops every incarnation that dies of the watchdog's error in a C call",
    function()
    -- such a thread has its hooks off for good (Lua 5.4): it must not serve
    -- the next incarnation
    local out = isolated([[
      local h = testing.new{seed = 1, runaway = 0.2}
      h:start(function(ctx)
        ctx:run("spin", function(c)
          c:sleep(1)
          table.sort({3, 2, 1}, function() while true do end end)
        end, {policy = policy.constant(1)})
        ctx:signal("healthy")
        ctx:wait()
      end)
      for i = 1, 4 do h:advance(2) end
      print("restarts=" .. h:node("root.spin").restarts)
      print("error=" .. h:node("root.spin").error)
      h:close()
    ]])
    assert.equal("4", field(out, "restarts"))
    assert.matches("runaway runnable: ran %d+ ms", field(out, "error"))
  end)

  it("stops a policy, also inside a coroutine it resumed, and the default "
    .. "decides", function()
    local out = isolated([[
      local h = testing.new{seed = 1}
      h:start(function(ctx)
        ctx:run("w", function(c) c:sleep(1) error("boom") end,
          {policy = function() load(ESCAPE)() end})
        ctx:run("v", function(c) c:sleep(1) error("boom") end,
          {policy = function()
            coroutine.wrap(function() load(ESCAPE)() end)()
          end})
        ctx:signal("healthy")
        ctx:wait()
      end)
      h:advance(1)
      for _, name in ipairs({"w", "v"}) do
        print(name .. ".log=" .. h:logs("root." .. name)[1].line)
        print(name .. ".pending=" .. tostring(h:node("root." .. name).restart_at ~= nil))
      end
      h:close()
    ]])
    for _, name in ipairs({"w", "v"}) do
      assert.matches("^faulty policy: .*time budget exceeded: ran %d+ ms %(limit 100 ms%); "
        .. "the default decides$", field(out, name .. ".log"))
      assert.equal("true", field(out, name .. ".pending"))
    end
  end)

  it("removes a subscriber that loops, and logs it", function()
    local out = isolated([[
      local h = testing.new{seed = 1}
      local later = 0
      h:start(function(ctx)
        arbor.on_event(function() load(ESCAPE)() end)
        arbor.on_event(function() later = later + 1 end)
        ctx:signal("healthy")
        ctx:sleep(1)
        ctx:run("w", function(c) c:signal("healthy") c:wait() end)
        ctx:wait()
      end)
      h:advance(1)
      print("log=" .. h:logs("root")[1].line)
      print("later=" .. later)
      print("w=" .. h:state("root.w"))
      h:close()
    ]])
    assert.matches("^on_event subscriber removed: time budget exceeded: ran %d+ ms",
      field(out, "log"))
    assert.is_true(tonumber(field(out, "later")) >= 2)
    assert.equal("HEALTHY", field(out, "w"))
  end)

  it("stops a ctx:defer function, and the other defers still run", function()
    local out = isolated([[
      local h = testing.new{seed = 1}
      local ran = false
      h:start(function(ctx)
        ctx:run("w", function(c)
          c:defer(function() ran = true end)
          c:defer(function() load(ESCAPE)() end)
          c:signal("healthy")
          c:sleep(1)
          error("boom")
        end, {policy = policy.never})
        ctx:signal("healthy")
        ctx:wait()
      end)
      h:advance(1)
      print("log=" .. h:logs("root.w")[1].line)
      print("ran=" .. tostring(ran))
      h:close()
    ]])
    assert.matches("^ctx:defer: time budget exceeded: ran %d+ ms", field(out, "log"))
    assert.equal("true", field(out, "ran"))
  end)

  it("stops a <close> variable of a failed runnable, which then restarts", function()
    local out = isolated([[
      local h = testing.new{seed = 1, runaway = 0.2}
      local starts = 0
      h:start(function(ctx)
        ctx:run("w", function(c)
          starts = starts + 1
          local guard <close> = setmetatable({}, {__close = function()
            load(ESCAPE)()
          end})
          c:signal("healthy")
          c:sleep(1)
          error("boom")
        end, {policy = policy.constant(1)})
        ctx:signal("healthy")
        ctx:wait()
      end)
      h:advance(2)
      h:advance(2)
      print("starts=" .. starts)
      print("error=" .. h:node("root.w").error)
      print("log=" .. h:logs("root.w")[1].line)
      h:close()
    ]])
    assert.equal("3", field(out, "starts"))
    assert.matches("boom", field(out, "error"), 1, true)
    assert.matches("^a <close> variable was stopped: ran %d+ ms %(limit 200 ms%)$",
      field(out, "log"))
  end)

  it("formats an error whose __tostring loops or raises with a fixed text", function()
    local out = isolated([[
      local h = testing.new{seed = 1}
      h:start(function(ctx)
        ctx:run("loops", function(c)
          c:sleep(1)
          error(setmetatable({}, {__tostring = function() load(ESCAPE)() end}))
        end, {policy = policy.never})
        ctx:run("raises", function(c)
          c:sleep(1)
          error(setmetatable({}, {__tostring = function() error("no") end}))
        end, {policy = policy.never})
        ctx:signal("healthy")
        ctx:wait()
      end)
      h:advance(1)
      print("loops=" .. h:node("root.loops").error)
      print("raises=" .. h:node("root.raises").error)
      h:close()
    ]])
    assert.equal("(error object is a table value whose __tostring failed)",
      field(out, "loops"))
    assert.equal("(error object is a table value whose __tostring failed)",
      field(out, "raises"))
  end)

  it("formats the error of a faulty policy or subscriber that raises a table", function()
    local out = isolated([[
      local h = testing.new{seed = 1}
      h:start(function(ctx)
        arbor.on_event(function()
          error(setmetatable({}, {__tostring = function() load(ESCAPE)() end}))
        end)
        ctx:run("w", function(c) c:sleep(1) error("boom") end,
          {policy = function() error({}) end})
        ctx:signal("healthy")
        ctx:wait()
      end)
      h:advance(1)
      print("sub=" .. h:logs("root")[1].line)
      print("policy=" .. h:logs("root.w")[1].line)
      h:close()
    ]])
    assert.equal("on_event subscriber removed: (error object is a table value "
      .. "whose __tostring failed)", field(out, "sub"))
    assert.equal("faulty policy: (error object is a table value); the default decides",
      field(out, "policy"))
  end)

  it("stops a luv callback under arbor.run", function()
    local out = isolated([[
      local ok, err = arbor.run(function(ctx)
        ctx:run("timer", function(c)
          local uv = require "luv"
          local t = uv.new_timer()
          c:defer(function() t:close() end)
          t:start(1, 0, function() load(ESCAPE)() end)
          c:signal("healthy")
          c:sleep(0.05)
          arbor.stop()
          c:wait()
        end)
        ctx:signal("healthy")
        ctx:wait()
      end, {signals = false, runaway = 0.2})
      print("ok=" .. tostring(ok) .. " " .. tostring(err))
    ]])
    assert.equal("true nil", field(out, "ok"))
    -- on stderr: the callback ran between two steps of the tree
    assert.matches("arbor: luv callback error: luv callback stopped: ran %d+ ms "
      .. "%(limit 200 ms%)", out)
  end)

  it("stops the log sink", function()
    local out = isolated([[
      local h = testing.new{seed = 1}
      h.engine:set_log(function() load(ESCAPE)() end)
      h:start(function(ctx)
        ctx:log("one")
        ctx:log("two")
        ctx:signal("healthy")
        ctx:wait()
      end)
      print("root=" .. h:state("root"))
      print("logs=" .. #h:logs("root"))
      h:close()
    ]])
    assert.equal("HEALTHY", field(out, "root"))
    assert.equal("2", field(out, "logs"))
  end)
end)
