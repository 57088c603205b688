-- Runtime failures (docs/lua-api.md, "Runtime failures"): every function
-- that can fail at run time returns nil, "ENAME: message", "ENAME", as luv
-- does, the message naming what was wrong and where. Real programs and real
-- sockets; the waits are bounded failure guards, not timings.
local arbor = require "arbor"
local core = require "arbor.core"
local client = require "arbor.client"
local control = require "arbor.control"
local failure = require "arbor.failure"
local json = require "arbor.json"
local policy = require "arbor.policy"
local support = require "support"
local e2e = require "e2e.support"
local uv = require "luv"

-- The three values of a call, as a list (nil included).
local function triple(...) return {n = select("#", ...), ...} end

-- Asserts that the values t are the failure ename with message msg.
local function failed(ename, msg, t)
  assert.same({n = 3, nil, ename .. ": " .. msg, ename}, t)
end

local scenario = require("support").scenario

-- Blocks ctx until pred() holds (a failure guard of 20 s).
local function within(ctx, pred)
  local deadline = arbor.now() + 20
  while not pred() do
    assert(arbor.now() < deadline, "condition not met in 20 s")
    ctx:sleep(0.01)
  end
end

describe("runtime failures", function()
  describe("of processes", function()
    it("spawning a program that does not exist, or cannot run", function()
      local garbage = os.tmpname()
      local f = assert(io.open(garbage, "w"))
      f:write("\0\1\2 not a program\n")
      f:close()
      os.execute("chmod +x " .. garbage)
      finally(function() os.remove(garbage) end)
      scenario(function(ctx)
        failed("ENOENT", "no such file or directory: /nonexistent/prog",
          triple(ctx:exec({"/nonexistent/prog"})))
        failed("ENOENT", "no-such-program-x5: not found in PATH /nonexistent-a:/nonexistent-b",
          triple(ctx:exec({"no-such-program-x5"}, {env = {PATH = "/nonexistent-a:/nonexistent-b"}})))
        failed("EACCES", "permission denied: /etc/passwd (not executable)",
          triple(ctx:exec({"/etc/passwd"})))
        failed("EISDIR", "illegal operation on a directory: /tmp", triple(ctx:exec({"/tmp"})))
        -- only exec itself finds out: said by core.spawn
        failed("ENOEXEC", "exec format error: " .. garbage, triple(ctx:exec({garbage})))
        -- through the rlimits shim, the check beforehand names the program
        failed("ENOENT", "no such file or directory: /nonexistent/prog",
          triple(ctx:exec({"/nonexistent/prog"}, {rlimits = {core = 0}})))
      end)
    end)

    it("a bad cwd", function()
      scenario(function(ctx)
        failed("ENOENT", "no such file or directory: cwd /nonexistent-dir",
          triple(ctx:exec({"true"}, {cwd = "/nonexistent-dir"})))
        failed("ENOTDIR", "not a directory: cwd /etc/passwd",
          triple(ctx:exec({"true"}, {cwd = "/etc/passwd"})))
        -- a relative program is looked for in the cwd
        failed("ENOENT", "no such file or directory: /tmp/./nonexistent-x5",
          triple(ctx:exec({"./nonexistent-x5"}, {cwd = "/tmp"})))
      end)
    end)

    it("arbor.exec ends DEAD with the message", function()
      scenario(function(ctx, root)
        root:run("gone", arbor.exec({"/nonexistent/prog"}), {policy = policy.never})
        within(ctx, function() return arbor.node("root.gone").state == "DEAD" end)
        assert.equal("ENOENT: no such file or directory: /nonexistent/prog",
          arbor.node("root.gone").error)
      end)
    end)

    it("proc:kill once the process has exited", function()
      scenario(function(ctx)
        local p = assert(ctx:exec({"true"}))
        p:wait()
        failed("ESRCH", "process " .. p.pid .. " has exited", triple(p:kill("TERM")))
        failed("ESRCH", "process " .. p.pid .. " has exited", triple(p:kill("TERM", "group")))
      end)
    end)
  end)

  describe("of the control socket", function()
    local dir
    before_each(function() dir = e2e.mktemp() end)
    after_each(function() os.execute("rm -rf " .. e2e.q(dir)) end)

    -- A luv server at path that answers each connection with `bytes` and
    -- closes it (nothing: it never answers). Returns a function running
    -- luv's loop until the answers are written, and one closing it.
    local function fake_server(path, bytes)
      local server = uv.new_pipe(false)
      assert(server:bind(path))
      local pending = 0
      assert(server:listen(8, function()
        local c = uv.new_pipe(false)
        server:accept(c)
        if not bytes then return end
        pending = pending + 1
        c:write(bytes, function()
          c:close()
          pending = pending - 1
        end)
      end))
      local function serve()
        uv.run("nowait")
        while pending > 0 do uv.run("once") end
      end
      return serve, function()
        server:close()
        uv.run("nowait")
      end
    end

    it("connecting to a socket path that does not exist", function()
      local path = dir .. "/none.sock"
      failed("ENOENT", "no such file or directory: " .. path, triple(core.connect(path)))
      failed("ENOENT", "no engine running: no socket at " .. path, triple(client.connect(path)))
      failed("ENOENT", "no engine running: no socket at " .. path, triple(client.open(path)))
      local long = dir .. "/" .. string.rep("x", 120) .. ".sock"
      failed("ENAMETOOLONG", "name too long: " .. long, triple(core.connect(long)))
    end)

    it("a stale socket", function()
      -- a process that binds the socket and exits without closing it
      local path = dir .. "/stale.sock"
      assert(os.execute("lua5.4 -e " .. e2e.q(string.format(
        "assert(require('luv').new_pipe(false):bind(%q)) os.exit(0)", path))))
      failed("ECONNREFUSED", "connection refused: " .. path, triple(core.connect(path)))
      failed("ECONNREFUSED", "no engine running at " .. path .. " (a stale socket)",
        triple(client.connect(path)))
    end)

    it("receiving: a timeout, the engine gone, a bad frame", function()
      local path = dir .. "/quiet.sock"
      local serve, close = fake_server(path)
      local c = assert(core.connect(path))
      serve()
      failed("ETIMEDOUT", "no frame from the engine in 20 ms", triple(c:recv(20)))
      c:close()
      close()

      path = dir .. "/gone.sock"
      serve, close = fake_server(path, "")
      c = assert(core.connect(path))
      serve()
      failed("EOF", "the engine closed the connection", triple(c:recv(10000)))
      c:close()
      close()

      path = dir .. "/bad.sock"
      serve, close = fake_server(path, "\0\0\0\0")
      c = assert(core.connect(path))
      serve()
      failed("EPROTO", "bad frame from the engine: empty frame (length 0)", triple(c:recv(10000)))
      c:close()
      -- arbor.client says it in its words: the engine is gone
      local conn = assert(client.open(path))
      serve()
      failed("EPIPE", "lost the engine: broken pipe", triple(conn:request({op = "status"})))
      conn:close()
      close()
    end)

    it("serving where it cannot", function()
      local e = core.engine{virtual = false, seed = 1, signals = false}
      finally(function() e:close() end)
      local file = dir .. "/file"
      assert(io.open(file, "w")):close()
      failed("EEXIST", file .. " exists and is not a socket; not replacing it",
        triple(control.serve(e, file)))
      local path = dir .. "/taken.sock"
      local _, close = fake_server(path)
      finally(close)
      failed("EADDRINUSE", "another arbor is serving " .. path
        .. " (stop it, or pass --control with another path)", triple(control.serve(e, path)))
      local long = dir .. "/" .. string.rep("x", 120) .. ".sock"
      local t = triple(control.serve(e, long))
      assert.equal("ENAMETOOLONG", t[3])
      assert.matches("^ENAMETOOLONG: control socket path too long %(%d+ bytes, limit 107%): "
        .. long:gsub("%p", "%%%0") .. "$", t[2])
      -- arbor.run raises it
      local ok, err = pcall(arbor.run, function() end, {control = file, signals = false})
      assert.is_false(ok)
      assert.matches("arbor.run: control socket: EEXIST: " .. file, err, 1, true)
    end)
  end)

  describe("of the service manager's socket", function()
    -- arbor.notify's values in a fresh lua5.4 started with NOTIFY_SOCKET
    -- (read once, then removed from the environment), one a line.
    local function notify_with(socket)
      local chunk = string.format("package.path = %q package.cpath = %q "
        .. "local t = table.pack(require('arbor').notify('X=1')) "
        .. "for i = 1, t.n do print(t[i]) end", package.path, package.cpath)
      local out = e2e.capture("NOTIFY_SOCKET=" .. e2e.q(socket) .. " lua5.4 -e "
        .. e2e.q(chunk) .. " 2>&1")
      local t = {}
      for l in out:gmatch("[^\n]+") do t[#t + 1] = l end
      return t
    end

    it("arbor.notify to a manager that is not there", function()
      assert.same({"nil", "ENOENT: no such file or directory: NOTIFY_SOCKET", "ENOENT"},
        notify_with("/nonexistent/notify.sock"))
      assert.same({"nil", "EAFNOSUPPORT: address family not supported: NOTIFY_SOCKET",
        "EAFNOSUPPORT"}, notify_with("relative/notify.sock"))
    end)
  end)

  describe("of Lua-side lookups", function()
    after_each(support.close_all)

    it("a node that does not exist", function()
      local h = support.new()
      h:start(support.idle)
      failed("ENOENT", "no node root.nope", triple(h:node("root.nope")))
      failed("ENOENT", "no node root.nope", triple(h:explain("root.nope")))
    end)

    it("invalid JSON", function()
      failed("EINVAL", "invalid JSON at byte 2: expected object key string but found T_OBJ_BEGIN",
        triple(json.decode("{{{")))
    end)

    it("failure.message drops the name, for people", function()
      local _, err, code = failure.fail("EXAMPLE", "%s is %d", "x", 1)
      assert.equal("EXAMPLE: x is 1", err)
      assert.equal("x is 1", failure.message(err, code))
      assert.equal("other", failure.message("other", "EXAMPLE"))
    end)
  end)
end)
