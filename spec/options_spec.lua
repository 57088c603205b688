-- Issue 15, point 2 (ctx:run and ctx:group): a misspelt or unknown option
-- raises when ctx:run / ctx:group is called, naming every bad option at
-- once (with the name it was probably meant to be), at the user's
-- file:line; a bad value names its option. On the virtual clock.
local support = require "support"
local new, idle = support.new, support.idle

after_each(support.close_all)

-- Runs body(ctx) in a node's first step; returns what it raised (nil when
-- it did not raise).
local function raised(body)
  local err
  local h = new()
  h:start(function(ctx)
    local ok, e = pcall(body, ctx)
    if not ok then err = e end
    idle(ctx)
  end)
  return err
end

local here = "spec/options_spec.lua"

-- "spec/options_spec.lua:N:" for the line after the caller's.
local function next_line()
  return here .. ":" .. (debug.getinfo(2, "l").currentline + 1) .. ": "
end

describe("unknown options", function()
  it("ctx:run names every bad one at once, at the caller's line", function()
    local where
    local err = raised(function(ctx)
      where = next_line()
      ctx:run("w", idle, {polcy = function() return 0 end, grce = 2, shutdown = 1})
    end)
    assert.is_string(err)
    assert.equal(where, err:sub(1, #where))
    assert.equal(where .. "root: ctx:run: unknown options 'grce', 'polcy' (did you mean "
      .. "'policy'?); known: policy, shutdown, min_uptime, ready_timeout, watchdog, "
      .. "strategy, ordered, significant, auto_shutdown, stop, lifecycle, sidecar, log_lines", err)
  end)

  it("one unknown option reads in the singular, with its suggestion", function()
    local err = raised(function(ctx) ctx:run("w", idle, {shutdwn = 1}) end)
    assert.matches("ctx:run: unknown option 'shutdwn' %(did you mean 'shutdown'%?%); known: ", err)
    err = raised(function(ctx) ctx:run("w", idle, {readytimeout = 1}) end)
    assert.matches("unknown option 'readytimeout' %(did you mean 'ready_timeout'%?%)", err)
    err = raised(function(ctx) ctx:run("w", idle, {watchdgo = 1}) end)
    assert.matches("unknown option 'watchdgo' %(did you mean 'watchdog'%?%)", err)
  end)

  it("suggests nothing for a name far from every option", function()
    local err = raised(function(ctx) ctx:run("w", idle, {color = "red"}) end)
    assert.matches("unknown option 'color'; known: ", err)
  end)

  it("names keys that are not strings", function()
    local err = raised(function(ctx)
      ctx:run("w", idle, {function() return 0 end, [true] = 1})
    end)
    assert.matches("unknown options %[1%], %[boolean%]; known: ", err)
  end)

  it("ctx:group names them too, at the caller's line, before any member is made", function()
    local where, made = nil, false
    local err = raised(function(ctx)
      where = next_line()
      ctx:group({a = function() made = true end, b = idle}, {stratgy = "one_for_one", orderd = true})
    end)
    assert.equal(where .. "root: ctx:group: unknown options 'orderd' (did you mean 'ordered'?), "
      .. "'stratgy' (did you mean 'strategy'?); known: policy, shutdown, min_uptime, "
      .. "ready_timeout, watchdog, strategy, ordered, significant, auto_shutdown, "
      .. "stop, lifecycle, sidecar, log_lines", err)
    assert.is_false(made)
  end)

  it("unprotected, it fails the calling node with the user's line as its error", function()
    local h = new()
    local where
    h:start(function(ctx)
      ctx:run("parent", function(c)
        where = next_line()
        c:run("w", idle, {polcy = 1})
      end, {policy = function() return "stop" end})
      idle(ctx)
    end)
    assert.equal("DEAD", h:state("root.parent"))
    assert.is_nil(h:state("root.parent.w"))
    local err = h:node("root.parent").error
    assert.equal(where .. "root.parent: ctx:run: unknown option 'polcy' (did you mean 'policy'?)",
      err:match("^[^;]*"))
  end)
end)

describe("bad option values", function()
  local cases = {
    {{policy = 5}, "option 'policy' must be a function, got number"},
    {{shutdown = "5"}, "option 'shutdown' must be a finite number >= 0 %(seconds%), got string"},
    {{shutdown = -1}, "option 'shutdown' must be a finite number >= 0 %(seconds%), got %-1"},
    {{min_uptime = {}}, "option 'min_uptime' must be a finite number >= 0 %(seconds%), got table"},
    {{ready_timeout = "90"}, "option 'ready_timeout' must be a finite number > 0 %(seconds%) or false, got string"},
    {{watchdog = 0}, "option 'watchdog' must be a finite number > 0 %(seconds%) or false, got 0"},
    {{lifecycle = "pre"}, "option 'lifecycle' must be \"prestart\", \"poststart\", \"poststop\" or \"main\", got \"pre\""},
    {{sidecar = "yes"}, "option 'sidecar' must be a boolean, got string"},
    {{significant = 1}, "option 'significant' must be a boolean, got number"},
    {{auto_shutdown = "any"}, "option 'auto_shutdown' must be one of \"never\", \"any_significant\", \"all_significant\", got \"any\""},
  }
  for _, c in ipairs(cases) do
    local opts, want = c[1], c[2]
    local k = next(opts)
    it("names the option: " .. k .. " = " .. tostring(opts[k]), function()
      local where
      local err = raised(function(ctx)
        where = next_line()
        ctx:run("w", idle, opts)
      end)
      assert.equal(where, err:sub(1, #where))
      assert.matches("root: ctx:run: " .. want, err)
    end)
  end

  it("ctx:group: a bad strategy names the option", function()
    local where
    local err = raised(function(ctx)
      where = next_line()
      ctx:group({a = idle}, {strategy = "one4all"})
    end)
    assert.equal(where .. "root: ctx:group: option 'strategy' must be one of \"one_for_all\", "
      .. "\"rest_for_one\", \"one_for_one\", got \"one4all\"", err)
  end)

  it("options that are not a table", function()
    local err = raised(function(ctx) ctx:run("w", idle, "fast") end)
    assert.matches("ctx:run: options must be a table, got string", err)
  end)
end)

describe("core.unknown_options (for arbor.exec)", function()
  it("reports as ctx:run does, or nil", function()
    local core = require "arbor.core"
    local known = {"cwd", "env", "grace", "ready", "stop_signal"}
    assert.is_nil(core.unknown_options({cwd = "/", grace = 2}, known))
    assert.equal("unknown options 'grce' (did you mean 'grace'?), 'redy' (did you mean "
      .. "'ready'?); known: cwd, env, grace, ready, stop_signal",
      core.unknown_options({grce = 1, redy = "notify", cwd = "/"}, known))
  end)
end)
