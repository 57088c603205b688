-- End-to-end: arbor as installed (cmake --install into a prefix, LuaRocks)
-- and the tools around the binary: --help of every command, the man pages,
-- the bash completion, `arbor ctl status --ready`, the systemd unit.
local support = require "e2e.support"
local bin, q, sh, read, mktemp = support.bin, support.q, support.sh, support.read, support.mktemp

local build_dir = bin:match("^(.*)/[^/]*$") or "."
-- Other programs run without the sanitizer runtime scripts/test preloads
-- for lua5.4 (groff, cmake are C++ programs it aborts).
local function tool(cmd) return "env -u LD_PRELOAD " .. cmd end
local root_dir = support.capture("pwd"):gsub("%s+$", "")

local function poll(fn, what)
  if not support.eventually(fn) then error("timed out waiting for " .. what, 2) end
end

-- The environment of a command that must not find the source tree: no
-- ARBOR_LUA_DIR, LUA_PATH or LUA_CPATH, run from a fresh directory.
local function clean(dir, cmd)
  return string.format("cd %s && env -u ARBOR_LUA_DIR -u LUA_PATH -u LUA_CPATH sh -c %s",
    q(dir), q(cmd))
end

-- A tree that reports where its Lua files came from, then stops itself.
local where = [[
local arbor = require "arbor"
io.stdout:write("arbor from ", debug.getinfo(arbor.run, "S").source:sub(2), "\n")
io.stdout:write("client from ", package.searchpath("arbor.client", package.path), "\n")
return function(ctx)
  ctx:run("w", function(c) c:signal("healthy") c:sleep(0.01) end)
  ctx:signal("healthy")
  ctx:sleep(0.05)
  arbor.stop()
  ctx:wait()
end
]]

local function write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

-- Starts `BIN run --control DIR/ctl.sock SCRIPT` in the background; returns
-- the socket once it answers.
local function serve(dir, script)
  local sock = dir .. "/ctl.sock"
  os.execute(string.format("%s run --quiet --control %s %s > %s/out 2>&1 &", bin, q(sock),
    q(script), q(dir)))
  poll(function() return sh(bin .. " ctl " .. q(sock) .. " status") == 0 end, "the control socket")
  return sock
end

describe("cmake --install --prefix P", function()
  local dir
  setup(function() dir = mktemp() end)
  teardown(function() os.execute("rm -rf " .. q(dir)) end)

  it("gives a binary that runs a tree on the Lua files installed next to it", function()
    local code, out = sh(tool("cmake --install ") .. q(build_dir) .. " --prefix " .. q(dir .. "/p"))
    assert.equal(0, code, out)
    os.execute("mkdir -p " .. q(dir .. "/work"))
    write(dir .. "/work/where.lua", where)
    code, out = sh(clean(dir .. "/work", q(dir .. "/p/bin/arbor") .. " run --no-control where.lua"))
    assert.equal(0, code, out)
    assert.matches("arbor from " .. dir .. "/p/share/lua/5.4/arbor/init.lua\n", out, 1, true)
    assert.matches("client from " .. dir .. "/p/share/lua/5.4/arbor/client.lua\n", out, 1, true)
    assert.matches("root.w +NEW %-> HEALTHY", out)
  end)

  it("installs the module where lua5.4 finds it under the prefix", function()
    local p = dir .. "/p"
    local code, out = sh(clean(dir, string.format(
      "LUA_PATH=%s LUA_CPATH=%s lua5.4 -e %s",
      q(p .. "/share/lua/5.4/?.lua;" .. p .. "/share/lua/5.4/?/init.lua;;"),
      q(p .. "/lib/lua/5.4/?.so;;"),
      q([[local a = require "arbor"
        print(package.searchpath("arbor.core", package.cpath))
        print(a.run(function(ctx) ctx:signal("healthy") a.stop() ctx:wait() end))]]))))
    assert.equal(0, code, out)
    assert.equal(p .. "/lib/lua/5.4/arbor/core.so\ntrue\tnil\n", out)
  end)

  it("installs the man pages, the bash completion and the systemd unit", function()
    for _, f in ipairs{"share/man/man1/arbor.1.gz", "share/man/man1/arbor-run.1.gz",
      "share/man/man1/arbor-ctl.1.gz", "share/man/man1/arbor-repl.1.gz",
      "share/bash-completion/completions/arbor", "lib/systemd/system/arbor@.service",
      "share/doc/arbor/deploy.md", "share/doc/arbor/examples/service.lua"} do
      assert.is_truthy(read(dir .. "/p/" .. f), f)
    end
  end)
end)

describe("luarocks make", function()
  it("builds and installs the module against Debian's lua5.4", function()
    if os.getenv("ARBOR_BUILD_SPECS") == "no" then
      return pending("ARBOR_BUILD_SPECS=no: scripts/test builds the rock in its first busted stage only")
    end
    local tree = mktemp()
    local code, out = sh(string.format(
      tool("luarocks --lua-version 5.4 --tree %s make dist/arbor-0.1.0-1.rockspec"), q(tree)))
    assert.equal(0, code, out)
    code, out = sh(clean(tree, string.format(
      [[eval "$(luarocks --lua-version 5.4 --tree %s path)" && lua5.4 -e %s]], q(tree),
      q([[local a = require "arbor"
        print(package.searchpath("arbor.core", package.cpath))
        print(a.run(function(ctx) ctx:signal("healthy") a.stop() ctx:wait() end))]]))))
    os.execute("rm -rf " .. q(tree))
    assert.equal(0, code, out)
    assert.equal(tree .. "/lib/lua/5.4/arbor/core.so\ntrue\tnil\n", out)
  end)
end)

describe("--help", function()
  it("of every command prints its usage and exits 0", function()
    for _, args in ipairs{"--help", "-h", "run --help", "run -h", "repl --help",
      "ctl --help", "ctl -h"} do
      local code, out = sh(bin .. " " .. args)
      assert.equal(0, code, args)
      assert.is_truthy(out:match("^usage: arbor"), args)
    end
    for _, cmd in ipairs{"status", "tree", "node", "restart", "stop", "logs", "events",
      "eval", "shutdown", "reload", "reexec"} do
      local code, out = sh(bin .. " ctl " .. cmd .. " --help")
      assert.equal(0, code, cmd)
      assert.matches("^usage: arbor ctl %[SOCKET%] " .. cmd, out)
      assert.equal(1, select(2, out:gsub("\n  %l", "")), cmd .. ": one command's line")
    end
  end)
end)

describe("man pages", function()
  it("render without warnings, each with its name and synopsis", function()
    for _, page in ipairs{"arbor", "arbor-run", "arbor-ctl", "arbor-repl"} do
      local file = "docs/man/" .. page .. ".1"
      local code, out = sh(tool("groff -man -Tutf8 -ww -z ") .. file)
      assert.equal(0, code, out)
      assert.equal("", out, page)
      code, out = sh(tool("MANWIDTH=80 man -l ") .. file .. " | cat")
      assert.equal(0, code, out)
      assert.matches("NAME\n +" .. page:gsub("%-", "%%-") .. "%s+%-%s", out)
      assert.matches("SYNOPSIS\n +arbor", out)
    end
  end)
end)

describe("bash completion", function()
  local dir, sock
  setup(function()
    dir = mktemp()
    write(dir .. "/tree.lua", [[
return function(ctx)
  ctx:run("web", function(c)
    c:run("h1", function(h) h:signal("healthy") h:wait() end)
    c:signal("healthy")
    c:wait()
  end)
  ctx:run("worker", function(c) c:signal("healthy") c:wait() end)
  ctx:signal("healthy")
  ctx:wait()
end
]])
    sock = serve(dir, dir .. "/tree.lua")
  end)
  teardown(function()
    sh(bin .. " ctl " .. q(sock) .. " shutdown")
    os.execute("rm -rf " .. q(dir))
  end)

  -- What _arbor offers for the words (the last one being completed).
  local function complete(...)
    local words = {bin, ...}
    local quoted = {}
    for i, w in ipairs(words) do quoted[i] = q(w) end
    local code, out = sh(string.format(
      [[bash -c 'source dist/arbor.bash-completion && COMP_WORDS=("$@") && COMP_CWORD=$(($# - 1)) && { _arbor; printf "%%s\n" "${COMPREPLY[@]}"; }' _ %s]],
      table.concat(quoted, " ")))
    assert.equal(0, code, out)
    local got = {}
    for w in out:gmatch("[^\n]+") do got[#got + 1] = w end
    table.sort(got)
    return got
  end

  it("completes commands, options and ctl commands", function()
    assert.same({"--help", "--version", "check", "ctl", "repl", "run"}, complete(""))
    assert.same({"--control", "--help", "--http", "--init", "--log-dir", "--log-format", "--log-keep",
      "--log-max-bytes", "--log-mode", "--no-control", "--quiet"}, complete("run", "--"))
    assert.same({"json", "text"}, complete("run", "--log-format", ""))
    assert.same({"docs/examples/service.lua"}, complete("run", "--log-dir", "/tmp", "docs/examples/serv"))
    assert.same({"start", "status", "stop"}, complete("ctl", sock, "st"))
    assert.same({"--help", "--json", "--ready"}, complete("ctl", sock, "status", "-"))
    assert.same({"--budget", "--help", "--json"}, complete("ctl", sock, "eval", "-"))
    assert.same({"docs/examples/service.lua"}, complete("run", "docs/examples/serv"))
  end)

  it("completes the DNs of the running tree", function()
    assert.same({"root", "root.web", "root.web.h1", "root.worker"}, complete("ctl", sock, "restart", ""))
    assert.same({"root.web", "root.web.h1"}, complete("ctl", sock, "logs", "root.we"))
    assert.same({}, complete("ctl", sock, "restart", "root.web", "ro"))
  end)
end)

describe("arbor ctl status --ready", function()
  it("exits 0 only while the root is HEALTHY", function()
    local dir = mktemp()
    write(dir .. "/tree.lua", string.format([[
local flag = %q
return function(ctx)
  while not io.open(flag) do ctx:sleep(0.01) end
  ctx:signal("healthy")
  ctx:wait()
end
]], dir .. "/flag"))
    local sock = serve(dir, dir .. "/tree.lua")
    local code, out = sh(bin .. " ctl " .. q(sock) .. " status --ready")
    assert.equal(1, code)
    assert.equal("not ready: root NEW\n", out)
    os.execute("touch " .. q(dir .. "/flag"))
    poll(function() return sh(bin .. " ctl " .. q(sock) .. " status --ready") == 0 end, "ready")
    code, out = sh(bin .. " ctl " .. q(sock) .. " status --ready --json")
    assert.equal(0, code)
    assert.matches('"root":"HEALTHY"', out, 1, true)
    assert.matches('"stop_bound":5', out, 1, true)
    sh(bin .. " ctl " .. q(sock) .. " shutdown")
    assert.equal(3, (sh(bin .. " ctl " .. q(sock) .. " status --ready")))
    os.execute("rm -rf " .. q(dir))
  end)
end)

describe("the systemd unit", function()
  it("passes systemd-analyze verify", function()
    if not os.execute("command -v systemd-analyze > /dev/null") then
      pending("systemd-analyze is not installed here (Debian package systemd)")
      return
    end
    local dir = mktemp()
    -- the unit as configured, but running this build's binary
    local unit = read(build_dir .. "/arbor@.service")
    assert.matches("ExecStart=/[^\n]*/arbor run /etc/arbor/%%i%.lua\n", unit)
    local abs = bin:sub(1, 1) == "/" and bin or root_dir .. "/" .. bin
    unit = unit:gsub("ExecStart=%S+", "ExecStart=" .. abs)
    write(dir .. "/arbor@spec.service", unit)
    local code, out = sh("cd " .. q(dir) .. " && " .. tool("systemd-analyze verify --man=no ./arbor@spec.service"))
    os.execute("rm -rf " .. q(dir))
    assert.equal(0, code, out)
    assert.equal("", out)
  end)
end)
