-- Issue 15 (7): runtime changes last and can add services. A swap or
-- set_policy made at runtime stays in force for that DN when its parent
-- restarts and re-creates it, until undone; node:run adds a child to a live
-- node, node:remove stops and removes one. On the virtual clock.
local policy = require "arbor.policy"
local support = require "support"
local new, idle = support.new, support.idle

after_each(support.close_all)

-- root > sup > worker; worker logs "script" or what a swap makes it log.
local function tree(h, worker_opts)
  h:start(function(ctx)
    ctx:run("sup", function(c)
      c:run("worker", function(w) w:log("script") idle(w) end, worker_opts)
      idle(c)
    end, {policy = policy.immediate()})
    idle(ctx)
  end)
end

local function last_log(h, dn)
  local lines = h:logs(dn)
  return lines[#lines] and lines[#lines].line
end

describe("runtime swaps last", function()
  it("a swap survives the parent's restart, which re-creates the node", function()
    local h = new()
    tree(h)
    h:node("root.sup.worker"):swap(function(w) w:log("swapped") idle(w) end, {restart = true})
    assert.equal("swapped", last_log(h, "root.sup.worker"))
    h:node("root.sup"):restart()
    assert.equal(2, h:node("root.sup").incarnation)
    assert.equal(1, h:node("root.sup.worker").incarnation) -- a new node
    assert.equal("swapped", last_log(h, "root.sup.worker"))
    assert.same({runnable = true}, h:node("root.sup.worker").overridden)
    -- the tree marks it, and only it
    local t = h:tree()
    assert.is_true(t.children[1].children[1].overridden)
    assert.is_nil(t.children[1].overridden)
    assert.matches("worker %[HEALTHY%].- %(swapped at runtime%)", require("arbor.render").tree(t))
  end)

  it("node:unswap() restores the script's runnable, also after the parent's restart", function()
    local h = new()
    tree(h)
    h:node("root.sup.worker"):swap(function(w) w:log("swapped") idle(w) end)
    h:node("root.sup"):restart()
    h:node("root.sup.worker"):unswap{restart = true}
    assert.equal("script", last_log(h, "root.sup.worker"))
    assert.is_nil(h:node("root.sup.worker").overridden)
    assert.is_nil(h:tree("root.sup.worker").overridden)
    h:node("root.sup"):restart()
    assert.equal("script", last_log(h, "root.sup.worker"))
  end)

  it("unswap without a swap is an error naming the DN", function()
    local h = new()
    tree(h)
    local ok, err = pcall(function() h:node("root.sup.worker"):unswap() end)
    assert.is_false(ok)
    assert.matches("unswap root.sup.worker: no runnable swapped in", err, 1, true)
  end)

  it("set_policy lasts across the parent's restart; set_policy(nil) restores the script's, not the default", function()
    local h = new()
    tree(h, {policy = policy.constant(7)})
    local w = "root.sup.worker"
    h:node(w):set_policy(policy.constant(3))
    h:node("root.sup"):restart()
    assert.same({policy = true}, h:node(w).overridden)
    h:fail(w, "boom")
    assert.equal(h:now() + 3, h:node(w).restart_at)
    h:advance(3)
    h:node(w):set_policy(nil)
    assert.is_nil(h:node(w).overridden)
    h:fail(w, "boom")
    assert.equal(h:now() + 7, h:node(w).restart_at)
  end)

  it("the root's swap and policy are overrides too", function()
    local h = new()
    h:start(function(ctx) ctx:log("script") idle(ctx) end)
    h:node("root"):swap(function(ctx) ctx:log("swapped") idle(ctx) end, {restart = true})
    assert.equal("swapped", last_log(h, "root"))
    assert.same({runnable = true}, h:node("root").overridden)
  end)
end)

describe("node:run and node:remove", function()
  it("node:run adds a child to a live node; it lasts until that node restarts", function()
    local h = new()
    tree(h)
    h:node("root.sup"):run("extra", function(x) x:log("extra up") idle(x) end)
    assert.equal("HEALTHY", h:state("root.sup.extra"))
    assert.equal("extra up", last_log(h, "root.sup.extra"))
    h:fail("root.sup.extra", "boom") -- restarted by its policy like any child
    h:advance(10)
    assert.equal("HEALTHY", h:state("root.sup.extra"))
    h:node("root.sup"):restart()
    assert.is_nil(h:node("root.sup.extra"))
    assert.equal("HEALTHY", h:state("root.sup.worker"))
  end)

  it("node:run takes ctx:run's options and checks them", function()
    local h = new()
    tree(h)
    h:node("root.sup"):run("once", function(x) x:signal("healthy") error("no") end,
      {policy = policy.never()})
    assert.equal("DEAD", h:state("root.sup.once"))
    local ok, err = pcall(function() h:node("root.sup"):run("worker", idle) end)
    assert.is_false(ok)
    assert.matches("duplicate child name 'worker'", err, 1, true)
    ok, err = pcall(function() h:node("root.sup"):run("x", idle, {polcy = 1}) end)
    assert.is_false(ok)
    assert.matches("unknown option 'polcy'", err, 1, true)
  end)

  it("node:run on a node that is not running is an error naming it", function()
    local h = new()
    tree(h)
    h:node("root.sup"):stop()
    local ok, err = pcall(function() h:node("root.sup"):run("x", idle) end)
    assert.is_false(ok)
    assert.matches("run root.sup: the node is not running (state CANCELED)", err, 1, true)
  end)

  it("node:remove stops a child in order and removes it", function()
    local h = new()
    local stopped = {}
    tree(h)
    h:node("root.sup"):run("extra", function(x)
      x:run("inner", function(i) idle(i) end)
      x:signal("healthy")
      local ok = pcall(x.wait, x)
      stopped[#stopped + 1] = ok
      x:shield(function() x:sleep(2) end)
    end)
    h:node("root.sup.extra"):remove()
    assert.is_not_nil(h:node("root.sup.extra")) -- still stopping (2 s)
    h:advance(2)
    assert.is_nil(h:node("root.sup.extra"))
    assert.is_nil(h:node("root.sup.extra.inner"))
    assert.same({false}, stopped)
    h:node("root.sup"):run("extra", idle) -- the name is free again
    assert.equal("HEALTHY", h:state("root.sup.extra"))
  end)

  it("node:remove drops the node's overrides", function()
    local h = new()
    tree(h)
    h:node("root.sup.worker"):swap(function(w) w:log("swapped") idle(w) end)
    h:node("root.sup.worker"):remove()
    assert.is_nil(h:node("root.sup.worker"))
    h:node("root.sup"):restart()
    assert.equal("script", last_log(h, "root.sup.worker"))
  end)

  it("refuses the root, group members and children behind lifecycle gates", function()
    local h = new()
    h:start(function(ctx)
      ctx:group({a = idle, b = idle})
      ctx:run("pre", function(x) x:signal("healthy") x:signal("done") end, {lifecycle = "prestart"})
      ctx:run("main", idle)
      idle(ctx)
    end)
    for dn, msg in pairs{
      ["root"] = "the root cannot be removed",
      ["root.a"] = "it is a member of a group",
      ["root.main"] = "its parent orders its children with lifecycle gates",
    } do
      local ok, err = pcall(function() h:node(dn):remove() end)
      assert.is_false(ok)
      assert.matches("remove " .. dn .. ": " .. msg, err, 1, true)
    end
  end)
end)
