-- Issue 15 (8): arbor.policy.never is OTP's temporary child. A never member
-- is not restarted when a sibling's death makes its group stop it, its own
-- death does not spread to the group, and a significant never child that
-- ends by itself (DONE or DEAD, not stopped by hand) counts for
-- auto_shutdown. On the virtual clock.
local policy = require "arbor.policy"
local support = require "support"
local new, idle = support.new, support.idle

after_each(support.close_all)

local function incarnations(h, dn) return h:node(dn).incarnation end

-- A group a, b, c; `bad` fails once at t = 1; `temporary` members use never.
local function group(strategy, bad, temporary)
  local h = new()
  local failed = false
  local function member(name)
    return function(c)
      c:signal("healthy")
      if name == bad and not failed then
        c:sleep(1)
        failed = true
        error(name .. " broke")
      end
      c:wait()
    end
  end
  h:start(function(ctx)
    ctx:group({a = member("a"), b = member("b"), c = member("c")},
      {strategy = strategy, policy = policy.constant(2)})
    idle(ctx)
  end)
  for _, m in ipairs(temporary) do h:node("root." .. m):set_policy(policy.never) end
  return h
end

describe("arbor.policy.never: OTP's temporary child", function()
  it("a never member canceled by one_for_all stays CANCELED; the others restart", function()
    local h = group("one_for_all", "a", {"b"})
    h:advance(1)
    assert.equal("DEAD", h:state("root.a"))
    assert.equal("CANCELED", h:state("root.b"))
    h:advance(10)
    assert.equal("HEALTHY", h:state("root.a"))
    assert.equal("CANCELED", h:state("root.b"))
    assert.equal(1, incarnations(h, "root.b"))
    assert.equal("HEALTHY", h:state("root.c"))
    assert.equal(2, incarnations(h, "root.c"))
  end)

  it("a never member canceled by rest_for_one stays CANCELED", function()
    local h = group("rest_for_one", "a", {"c"})
    h:advance(11)
    assert.equal(2, incarnations(h, "root.a"))
    assert.equal(2, incarnations(h, "root.b"))
    assert.equal("CANCELED", h:state("root.c"))
    assert.equal(1, incarnations(h, "root.c"))
  end)

  it("a never member's death does not spread to its group", function()
    local h = group("one_for_all", "b", {"b"})
    h:advance(10)
    assert.equal("DEAD", h:state("root.b"))
    assert.equal("HEALTHY", h:state("root.a"))
    assert.equal(1, incarnations(h, "root.a"))
    assert.equal("HEALTHY", h:state("root.c"))
    assert.equal(1, incarnations(h, "root.c"))
  end)

  it("a restart by hand brings a canceled never member back", function()
    local h = group("one_for_all", "a", {"b"})
    h:advance(10)
    h:node("root.b"):restart()
    h:advance(1)
    assert.equal("HEALTHY", h:state("root.b"))
    assert.equal(2, incarnations(h, "root.b"))
  end)
end)

describe("a significant never child and auto_shutdown", function()
  local function sup(child, mode, extra)
    local h = new()
    h:start(function(ctx)
      ctx:run("sup", function(c)
        c:run("job", child, {significant = true, policy = policy.never})
        if extra then c:run("other", extra, {significant = true}) end
        c:run("helper", idle)
        idle(c)
      end, {auto_shutdown = mode or "any_significant"})
      idle(ctx)
    end)
    return h
  end

  it("dying counts: the parent ends DONE, its other children stopped", function()
    local h = sup(function(c) c:signal("healthy") c:sleep(2) error("job broke") end)
    h:advance(2)
    assert.equal("DEAD", h:state("root.sup.job"))
    assert.equal("DONE", h:state("root.sup"))
    assert.equal("CANCELED", h:state("root.sup.helper"))
    assert.matches("significant child root.sup.job ended", h:node("root.sup").explanation, 1, true)
    h:advance(100)
    assert.equal(1, incarnations(h, "root.sup"))
  end)

  it("dying before it was healthy counts too", function()
    local h = sup(function() error("no config") end)
    h:advance(0)
    assert.equal("DONE", h:state("root.sup"))
  end)

  it("all_significant: a dead never child counts as ended", function()
    local h = sup(function() error("no config") end, "all_significant",
      function(c) c:signal("healthy") c:sleep(4) c:signal("done") end)
    h:advance(1)
    assert.equal("HEALTHY", h:state("root.sup"))
    h:advance(3)
    assert.equal("DONE", h:state("root.sup"))
  end)

  it("stopped by hand it does not count", function()
    local h = sup(idle)
    h:advance(1)
    h:node("root.sup.job"):stop()
    h:advance(10)
    assert.equal("CANCELED", h:state("root.sup.job"))
    assert.equal("HEALTHY", h:state("root.sup"))
  end)

  it("a significant child with another policy that dies still restarts (only DONE counts)", function()
    local h = new()
    local n = 0
    h:start(function(ctx)
      ctx:run("sup", function(c)
        c:run("job", function(x)
          n = n + 1
          x:signal("healthy")
          if n == 1 then error("once") end
          x:wait()
        end, {significant = true, policy = policy.immediate()})
        idle(c)
      end, {auto_shutdown = "any_significant"})
      idle(ctx)
    end)
    h:advance(1)
    assert.equal("HEALTHY", h:state("root.sup"))
    assert.equal(2, incarnations(h, "root.sup.job"))
  end)
end)
