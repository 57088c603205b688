-- Issue 15 (6): stop = "parallel" on a parent stops its children all at
-- once; by default they stop one at a time, last started first (T12). On
-- the virtual clock.
local core = require "arbor.core"
local support = require "support"
local new, idle = support.new, support.idle

after_each(support.close_all)

-- HEALTHY, then takes `s` seconds to stop (a shielded sleep); its name is
-- added to `began` when its stop begins.
local function slow(s, began)
  return function(x)
    x:signal("healthy")
    local ok = pcall(x.wait, x)
    assert(not ok)
    began[#began + 1] = {x.name}
    x:shield(function() x:sleep(s) end)
  end
end

local function services(ctx, n, began)
  for i = 1, n do ctx:run("svc" .. i, slow(10, began), {shutdown = 20}) end
end

describe("stop = \"parallel\"", function()
  it("by default ten services of 10 s each stop one after another: 100 s", function()
    local h, began = new(), {}
    h:start(function(ctx) services(ctx, 10, began) idle(ctx) end)
    assert.equal(100, h:stop())
    assert.equal("svc10", began[1][1])
    assert.equal("svc1", began[10][1])
  end)

  it("on the root: its ten services stop at once, in about 10 s", function()
    local h, began = new(), {}
    h:start(function(ctx) services(ctx, 10, began) idle(ctx) end, {stop = "parallel"})
    assert.equal(10, h:stop())
    assert.equal(10, #began)
    for i = 1, 10 do assert.equal("CANCELED", h:state("root.svc" .. i)) end
  end)

  it("on a child: its children stop at once, their own children in order", function()
    local h, began = new(), {}
    h:start(function(ctx)
      ctx:run("web", function(c)
        for i = 1, 3 do
          c:run("w" .. i, function(w)
            w:run("a", slow(2, began))
            w:run("b", slow(3, began))
            idle(w)
          end)
        end
        idle(c)
      end, {stop = "parallel"})
      ctx:run("db", slow(4, began))
      idle(ctx)
    end)
    -- db first (started last, 4 s), then web: w1..w3 at once, each b then a (5 s)
    assert.equal(9, h:stop())
  end)

  it("the stop bound takes the largest child of a parallel parent", function()
    local h, began = new(), {}
    h:start(function(ctx)
      ctx:run("web", function(c)
        for i = 1, 3 do c:run("w" .. i, slow(1, began), {shutdown = 10}) end
        idle(c)
      end, {stop = "parallel", shutdown = 1})
      ctx:run("db", slow(1, began), {shutdown = 4})
      idle(ctx)
    end, {shutdown = 2})
    -- root 2 + db 4 + web (1 + max(10, 10, 10))
    assert.equal(17, core.stop_bound(h.engine))
  end)

  it("rejects an unknown stop mode, naming the choices", function()
    local h = new()
    local err
    h:start(function(ctx)
      local ok, e = pcall(ctx.run, ctx, "x", idle, {stop = "all"})
      err = e
      idle(ctx)
    end)
    assert.matches("option 'stop' must be one of \"ordered\", \"parallel\", got \"all\"", err, 1, true)
  end)
end)
