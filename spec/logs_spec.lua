-- Issue 16, logs: levels, sub-loggers (their names reserved against
-- children's), the log_lines option, reading a subtree's lines in order,
-- and what the log sink is given. On the virtual clock (wall-clock times
-- are engine seconds there: wall0 is 0).
local support = require "support"
local render = require "arbor.render"
local new, idle = support.new, support.idle

after_each(support.close_all)

local function lines_of(list)
  local out = {}
  for i, l in ipairs(list) do out[i] = l.dn .. " " .. l.level .. " " .. l.line end
  return out
end

describe("leveled logs", function()
  it("ctx:log is info; ctx:debug/info/warn/error and ctx:log{level=} set the level", function()
    local h = new()
    h:start(function(ctx)
      ctx:log("plain", 1)
      ctx:debug("d")
      ctx:info("i")
      ctx:warn("w")
      ctx:error("e")
      ctx:log{level = "warn", "table form"}
      ctx:log{level = "error", text = "text field"}
      ctx:signal("healthy")
      ctx:wait()
    end)
    assert.same({"root info plain 1", "root debug d", "root info i", "root warn w",
      "root error e", "root warn table form", "root error text field"},
      lines_of(h:logs("root")))
  end)

  it("each line carries its engine time and its wall-clock time", function()
    local h = new()
    h:start(function(ctx)
      ctx:sleep(2.5)
      ctx:log("later")
      ctx:wait()
    end)
    h:advance(3)
    local l = h:logs("root")[1]
    assert.equal(2.5, l.time)
    assert.equal(2.5, l.wall) -- wall0 is 0 under the virtual clock
    assert.is_true(l.seq > 0)
  end)

  it("refuses an unknown level, naming it and the node", function()
    local h = new()
    local err
    h:start(function(ctx)
      err = select(2, pcall(ctx.log, ctx, {level = "loud", "x"}))
      ctx:wait()
    end)
    assert.matches("root: log{level = ...}: want \"debug\", \"info\", \"warn\" or \"error\", got loud", err, 1, true)
  end)

  it("gives the sink the DN, line, time, level and wall-clock time", function()
    local h = new()
    local got = {}
    h.engine:set_log(function(dn, line, time, level, wall)
      got[#got + 1] = {dn, line, time, level, wall}
    end)
    h:start(function(ctx)
      ctx:warn("w")
      ctx:logger("db"):error("e")
      ctx:wait()
    end)
    assert.same({{"root", "w", 0, "warn", 0}, {"root.db", "e", 0, "error", 0}}, got)
  end)

  it("renders a level other than info before the text", function()
    assert.equal("     1.000 root                     | WARN x", render.log("root", "x", 1, "warn", 1))
    assert.equal("     1.000 root                     | x", render.log("root", "x", 1, "info", 1))
    assert.matches("^%d%d:%d%d:%d%d%.%d%d%d root", render.log("root", "x", 1, "info", 1.7e9))
  end)
end)

describe("sub-loggers", function()
  it("write to <dn>.<name>, nested ones to <dn>.<a>.<b>, with all the methods", function()
    local h = new()
    h:start(function(ctx)
      local http = ctx:logger("http")
      http:info("req")
      http:log("plain")
      http:log{level = "debug", "dbg"}
      http:logger("db"):error("slow")
      assert(tostring(http) == "arbor.Logger(root.http)")
      ctx:wait()
    end)
    assert.same({"root.http info req", "root.http info plain", "root.http debug dbg",
      "root.http.db error slow"}, lines_of(h:logs("root")))
    assert.same({"root.http info req", "root.http info plain", "root.http debug dbg",
      "root.http.db error slow"}, lines_of(h:logs("root.http")))
    assert.same({"root.http.db error slow"}, lines_of(h:logs("root.http.db")))
  end)

  it("reserve their name against a child's, and a child's against theirs", function()
    local h = new()
    local e1, e2, e3
    h:start(function(ctx)
      ctx:logger("http")
      e1 = select(2, pcall(ctx.run, ctx, "http", idle))
      e3 = select(2, pcall(ctx.group, ctx, {http = idle}))
      ctx:run("kid", idle)
      e2 = select(2, pcall(ctx.logger, ctx, "kid"))
      ctx:logger("http") -- the same name again: the same logger
      ctx:wait()
    end)
    assert.matches("root: child name 'http' is a sub-logger of the node (ctx:logger): its name is reserved", e1, 1, true)
    assert.matches("root: child name 'http' is a sub-logger", e3, 1, true)
    assert.matches("root: ctx:logger('kid'): a child has that name", e2, 1, true)
    assert.equal("HEALTHY", h:state("root.kid"))
    assert.is_nil(h:node("root.http"))
  end)

  it("refuse a bad name at the caller's line", function()
    local h = new()
    local err
    h:start(function(ctx)
      err = select(2, pcall(function() ctx:logger("no spaces") end))
      ctx:wait()
    end)
    assert.matches("logs_spec.lua:%d+: root: ctx:logger%('no spaces'%): invalid name", err)
  end)

  it("keep their name across the node's restarts", function()
    local h, n = new(), 0
    local err
    h:start(function(ctx)
      ctx:run("w", function(c)
        n = n + 1
        if n == 1 then
          c:logger("x"):info("first")
          c:sleep(1)
          error("again")
        end
        err = select(2, pcall(c.run, c, "x", idle))
        c:wait()
      end)
      ctx:wait()
    end)
    h:advance(5)
    assert.equal(2, n)
    assert.matches("child name 'x' is a sub-logger", err, 1, true)
    assert.same({"root.w.x info first"}, lines_of(h:logs("root.w.x")))
  end)
end)

describe("the in-memory ring", function()
  it("keeps 64 lines by default, log_lines of them when set, none for 0", function()
    local h = new()
    h:start(function(ctx)
      for i = 1, 100 do ctx:log("r", i) end
      ctx:run("small", function(c) for i = 1, 10 do c:log("s", i) end c:wait() end, {log_lines = 3})
      ctx:run("big", function(c) for i = 1, 300 do c:log("b", i) end c:wait() end, {log_lines = 200})
      ctx:run("none", function(c) c:log("n") c:wait() end, {log_lines = 0})
      ctx:wait()
    end)
    local r = h:logs("root")
    assert.equal(64 + 3 + 200, #h:logs("root", nil, {subtree = true}))
    assert.equal(64, #r)
    assert.equal("r 37", r[1].line)
    assert.same({"s 8", "s 9", "s 10"}, (function()
      local t = {}
      for i, l in ipairs(h:logs("root.small")) do t[i] = l.line end
      return t
    end)())
    assert.equal(200, #h:logs("root.big"))
    assert.same({}, h:logs("root.none"))
  end)

  it("refuses a bad log_lines, naming the option", function()
    local h = new()
    local err
    h:start(function(ctx)
      err = select(2, pcall(ctx.run, ctx, "x", idle, {log_lines = -1}))
      ctx:wait()
    end)
    assert.matches("option 'log_lines' must be an integer from 0 to 1000000", err, 1, true)
  end)
end)

describe("a subtree's lines", function()
  it("come interleaved in the order they were logged, the last n of them, since a time", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("a", function(c)
        for i = 1, 3 do c:log("a", i) c:sleep(1) end
        c:wait()
      end)
      ctx:run("b", function(c)
        c:sleep(0.5)
        for i = 1, 3 do c:log("b", i) c:sleep(1) end
        c:wait()
      end)
      ctx:log("root")
      ctx:wait()
    end)
    h:advance(5)
    local all = {}
    for i, l in ipairs(h:logs("root", nil, {subtree = true})) do all[i] = l.line end
    assert.same({"root", "a 1", "b 1", "a 2", "b 2", "a 3", "b 3"}, all)
    local last = {}
    for i, l in ipairs(h:logs("root", 2, {subtree = true})) do last[i] = l.line end
    assert.same({"a 3", "b 3"}, last)
    local since = {}
    for i, l in ipairs(h:logs("root", nil, {subtree = true, since = 1.5})) do since[i] = l.line end
    assert.same({"b 2", "a 3", "b 3"}, since)
  end)

  it("of a subtree with no line at all are an empty list (under UBSan: no sort of a null array)", function()
    local h = new()
    h:start(function(ctx)
      ctx:run("quiet", idle)
      ctx:wait()
    end)
    assert.same({}, h:logs("root", nil, {subtree = true}))
    assert.same({}, h:logs("root", nil, {subtree = true, since = 1}))
  end)

  it("of an unknown DN raise, naming it", function()
    local h = new()
    h:start(idle)
    assert.has_error(function() h:logs("root.nope") end, "no node root.nope")
  end)
end)
