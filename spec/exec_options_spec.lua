-- Mistakes in the options of arbor.exec and ctx:exec fail fast, at the
-- user's line, naming every bad option at once (issue 15, point 2).
local arbor = require "arbor"
local scenario = require("support").scenario

local here = "spec/exec_options_spec.lua"

-- The error raised by fn, which must name this file at `line`.
local function raised_at(line, fn)
  local ok, err = pcall(fn)
  assert.is_false(ok, "no error raised")
  local prefix = here .. ":" .. line .. ": "
  assert.equal(prefix, err:sub(1, #prefix), err)
  return err:sub(#prefix + 1)
end

local function line() return debug.getinfo(2, "l").currentline end

describe("arbor.exec(argv, opts)", function()
  it("names every bad option at once, at the caller's line", function()
    local at = line() + 2
    local err = raised_at(at, function()
      local r = arbor.exec({"true"}, {polcy = arbor.policy.never, grce = 2, ready = "sytemd", stop_signal = "TERMINATE", uid = "no-such-user-x5"})
      return r
    end)
    assert.equal("arbor.exec: "
      .. "unknown option 'grce' (did you mean 'grace'?); "
      .. "unknown option 'polcy' (did you mean 'policy', an option of ctx:run?); "
      .. "unknown readiness mode 'sytemd' (did you mean \"systemd\"?) (want \"spawn\", "
      .. "\"notify\", \"systemd\", {stdout = pattern or function} or {probe = ..., interval = s}); "
      .. "option 'stop_signal': unknown signal TERMINATE (want a name such as \"TERM\", "
      .. "\"SIGINT\", \"HUP\", or a number 1-64); "
      .. "unknown user 'no-such-user-x5' (option 'uid')", err)
  end)

  it("says argv given as a string is a mistake and how to write it", function()
    local at = line() + 1
    local err = raised_at(at, function() local r = arbor.exec("nginx -g 'daemon off;'"); return r end)
    assert.equal("arbor.exec: argv must be a table of strings, got a string "
      .. "(write {\"sh\", \"-c\", \"nginx -g 'daemon off;'\"} for a shell command line)", err)
  end)

  it("says an option written inside argv belongs in the second argument", function()
    local at = line() + 1
    local err = raised_at(at, function() local r = arbor.exec{"sh", "-c", "true", oneshot = true}; return r end)
    assert.equal("arbor.exec: argv has the key 'oneshot', which is not a position (options "
      .. "go in the second argument: arbor.exec({\"sh\", ...}, {oneshot = true}))", err)
  end)

  it("says which options belong to ctx:run", function()
    local at = line() + 1
    local err = raised_at(at, function() local r = arbor.exec({"true"}, {policy = 1, shutdown = 3}); return r end)
    assert.equal("arbor.exec: unknown option 'policy' ('policy' is an option of "
      .. "ctx:run, its third argument); unknown option 'shutdown' ('shutdown' is an "
      .. "option of ctx:run, its third argument)", err)
  end)

  it("checks each option's value", function()
    local cases = {
      {{}, "argv is empty"},
      {{"sh", 3}, "argv[2] must be a string, got number"},
      {{"true"}, "unknown group 'no-such-group-x5' (option 'gid')", {gid = "no-such-group-x5"}},
      {{"true"}, "option 'uid' must be a user name or an integer >= 0, got -1", {uid = -1}},
      {{"true"}, "unknown readiness mode 'telepathy'", {ready = "telepathy"}},
      {{"true"}, "unknown resource limit 'files'", {rlimits = {files = 3}}},
      {{"true"}, "option 'grace' must be a finite number >= 0 (seconds), got -1", {grace = -1}},
      {{"true"}, "option 'env': bad variable name A=B", {env = {["A=B"] = "x"}}},
      {{"true"}, "option 'watchdog' must be a finite number > 0 (seconds), got 0", {watchdog = 0}},
      {{"true"}, "option 'min_uptime' must be a finite number >= 0 (seconds), got x", {min_uptime = "x"}},
      {{"true"}, "option 'ready_timeout' must be a finite number > 0 (seconds) or false, got 0",
        {ready_timeout = 0}},
      {{"true"}, "liveness.probe is missing", {liveness = {}}},
      {{"true"}, "liveness.probe.tcp must be \"host:port\", got localhost", {liveness = {probe = {tcp = "localhost"}}}},
      {{"true"}, "liveness.probe.http: want an http:// URL, got https://x/", {liveness = {probe = {http = "https://x/"}}}},
      {{"true"}, "liveness.failures must be an integer >= 1, got 0", {liveness = {probe = {"true"}, failures = 0}}},
      {{"true"}, "unknown option 'evry' (did you mean 'every'?)", {liveness = {probe = {"true"}, evry = 1}}},
      {{"true"}, "ready.probe must be a command (argv table), {tcp = \"host:port\"}, {http = url} or a function, got number",
        {ready = {probe = 3}}},
      {{"true"}, "option 'log_overflow' must be \"block\" or \"drop\", got dropp", {log_overflow = "dropp"}},
    }
    for _, c in ipairs(cases) do
      local ok, err = pcall(arbor.exec, c[1], c[3])
      assert.is_false(ok)
      assert.matches(c[2], err, 1, true)
    end
  end)

  it("accepts every documented option", function()
    local r = arbor.exec({"true"}, {cwd = "/", env = {A = 1, B = false}, env_replace = false,
      uid = 0, gid = "root", umask = "022", stdin = "null", stop_signal = "HUP", grace = 2,
      ready = {probe = {tcp = "127.0.0.1:80"}, interval = 0.5, timeout = 2}, line_max = 100,
      rlimits = {nofile = 64}, log_overflow = "drop", oneshot = false, watchdog = 5, min_uptime = 0,
      ready_timeout = false, liveness = {probe = {http = "http://127.0.0.1:8080/health"},
      every = 5, failures = 2, timeout = 1}})
    assert.is_function(r)
    assert.is_function(arbor.exec({"true"}, {log_overflow = "block"}))
    assert.is_function(arbor.exec({"true"}, {ready = "systemd", ready_timeout = 30,
      liveness = {probe = function() return true end}}))
  end)
end)

describe("ctx:exec(argv, opts)", function()
  it("names every bad option at once, at the caller's line", function()
    local err, at
    scenario(function(ctx)
      at = line() + 1
      err = raised_at(at, function() local p = ctx:exec({"true"}, {grce = 1, stdin = "tty", watchdog = 1}); return p end)
    end)
    assert.equal("root.t: ctx:exec: unknown option 'grce' (did you mean 'grace'?); "
      .. "unknown option 'watchdog'; option 'stdin' must be \"null\" or \"inherit\", got tty", err)
  end)

  it("raises for argv given as a string at the caller's line", function()
    local err, at
    scenario(function(ctx)
      at = line() + 1
      err = raised_at(at, function() local p = ctx:exec("true"); return p end)
    end)
    assert.matches("root.t: ctx:exec: argv must be a table of strings, got a string", err, 1, true)
  end)
end)

describe("arbor.exec under a wrapped ctx", function()
  -- A supervisor may hand arbor.exec's runnable its own table standing for
  -- the ctx (the soak's tree does, to see the process handle): the runnable
  -- still starts its program, through ctx:exec, which the wrapper sees.
  it("starts the program through the wrapper's exec and applies its defaults", function()
    local arbor = require "arbor"
    local seen, state, err
    local ok, why = pcall(arbor.run, function(ctx)
      ctx:run("w", function(c)
        local wrapper = setmetatable({exec = function(_, argv, o)
          local p, e = c:exec(argv, o)
          seen = p
          return p, e
        end}, {__index = function(_, k)
          local v = c[k]
          if type(v) == "function" then return function(_, ...) return v(c, ...) end end
          return v
        end})
        return arbor.exec({"true"}, {oneshot = true})(wrapper)
      end)
      ctx:signal("healthy")
      while arbor.node("root.w").state ~= "DONE" and arbor.node("root.w").state ~= "DEAD" do
        ctx:sleep(0.01)
      end
      state, err = arbor.node("root.w").state, arbor.node("root.w").error
      arbor.stop()
      ctx:wait()
    end, {signals = false, control = false})
    assert.is_true(ok, why)
    assert.equal("DONE", state, err)
    assert.is_not_nil(seen)
  end)
end)
