--- arbor.client: `arbor repl` and `arbor ctl`, the client side of the
-- control socket (docs/repl.md, docs/control-protocol.md).
--
-- Exit codes: 0 success; 1 the engine answered with an error (unknown DN,
-- an evaluation that raised, ...); 2 usage; 3 no engine to talk to (no
-- socket, a stale one, the connection was refused, or a socket another
-- user could be serving: core.connect checks it). Failures are returned as
-- nil, "ENAME: message", "ENAME" (arbor.failure) and printed without the
-- name.
local core = require "arbor.core"
local json = require "arbor.json"
local control = require "arbor.control"
local failure = require "arbor.failure"
local fail, message = failure.fail, failure.message
local render = require "arbor.render"
local term = require "arbor.term"

local M = {}

local function errf(fmt, ...)
  io.stderr:write(string.format(fmt, ...), "\n")
end

local function shell_quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

--- resolve([sock]) -> path | nil, "ENAME: message", "ENAME": the socket to
-- use: SOCKET as given (a path, or a name in the default directory), else
-- the only socket in the default directory (ENOENT: none; EAMBIGUOUS:
-- several).
function M.resolve(sock)
  local dir = control.default_dir()
  if sock then
    if sock:find("/", 1, true) then return sock end
    if not sock:find("%.sock$") then sock = sock .. ".sock" end
    return dir .. "/" .. sock
  end
  local p = io.popen("ls -1 " .. shell_quote(dir) .. " 2>/dev/null")
  local found = {}
  for name in p:lines() do
    if name:find("%.sock$") then found[#found + 1] = dir .. "/" .. name end
  end
  p:close()
  if #found == 1 then return found[1] end
  if #found == 0 then
    return fail("ENOENT", "no engine running: no control socket in %s", dir)
  end
  table.sort(found)
  return fail("EAMBIGUOUS", "several engines are running; name one:\n  %s",
    table.concat(found, "\n  "))
end

--- connect(path) -> connection (core.connect's) | nil, "ENAME: message",
-- "ENAME", in words for people: ENOENT and ECONNREFUSED (a stale socket)
-- say that no engine runs there.
function M.connect(path)
  local c, err, code = core.connect(path)
  if c then return c end
  if code == "ENOENT" then return fail(code, "no engine running: no socket at %s", path) end
  if code == "ECONNREFUSED" then
    return fail(code, "no engine running at %s (a stale socket)", path)
  end
  if code == "EUNTRUSTED" then return nil, err, code end
  return fail(code, "cannot connect: %s", message(err, code))
end

local Conn = {}
Conn.__index = Conn

--- open(path) -> conn | nil, "ENAME: message", "ENAME" (as connect).
function M.open(path)
  local c, err, code = M.connect(path)
  if not c then return nil, err, code end
  return setmetatable({c = c, next_id = 0, path = path}, Conn)
end

--- The connection to SOCKET (resolved as M.resolve does), or nil after
-- printing why on stderr, prefixed with `who`.
local function open_socket(who, sock)
  local path, err, code = M.resolve(sock)
  local conn
  if path then conn, err, code = M.open(path) end
  if not conn then errf("%s: %s", who, message(err, code)) end
  return conn
end

--- Sends a request; returns its id, or nil, "ENAME: message", "ENAME"
-- (EACCES: the engine refused this client; else why the send failed).
function Conn:send(req)
  self.next_id = self.next_id + 1
  req.id = self.next_id
  local ok, err, code = self.c:send(json.encode(req))
  if not ok then
    -- the engine may have refused us and closed: its reason is still
    -- readable
    local p = self.c:recv(1000)
    local f = p and json.decode(p)
    if type(f) == "table" and f.error then return fail("EACCES", "%s", f.error) end
    return fail(code, "lost the engine: %s", message(err, code))
  end
  return req.id
end

--- Reads frames until the end of request id: on_frame(frame) sees every
-- other frame of it. Returns the end frame, or nil, "ENAME: message",
-- "ENAME" (EOF: the engine closed the connection; EPROTO: a bad reply);
-- on_signal() is called when a signal interrupts the wait.
function Conn:wait(id, on_frame, on_signal)
  while true do
    local payload, err, code = self.c:recv(nil, self.wake_fd)
    if not payload then
      if code == "EINTR" then
        if on_signal then on_signal() end
      elseif code == "EOF" then
        return fail(code, "connection closed by the engine")
      else
        return nil, err, code
      end
    else
      -- a large result comes as {"id":N,"end":true,"ok":true,"data":...}:
      -- handed on without decoding (ctl --json prints it as it is)
      local rid, at = payload:match('^{"id":(%d+),"end":true,"ok":true,"data":()')
      if rid and tonumber(rid) == id and #payload > 65536 then
        return {id = id, ["end"] = true, ok = true, data_json = payload:sub(at, -2)}
      end
      local f, jerr, jcode = json.decode(payload)
      if type(f) ~= "table" then
        return fail("EPROTO", "bad reply from the engine: %s",
          jerr and message(jerr, jcode) or "not a JSON object")
      end
      if f.id == json.null and f["end"] then return f end -- refused, protocol error
      if f.id == id then
        if f["end"] then return f end
        if on_frame then on_frame(f) end
      end
    end
  end
end

--- request(req [, on_frame [, on_signal]]) -> the end frame | nil,
-- "ENAME: message", "ENAME": send, then wait.
function Conn:request(req, on_frame, on_signal)
  local id, err, code = self:send(req)
  if not id then return nil, err, code end
  return self:wait(id, on_frame, on_signal)
end

function Conn:close() self.c:close() end

-- The printer of streamed frames: text through show (arbor.term), JSON as
-- it is (its encoder escapes control characters).
local function stream_printer(show)
  return function(f)
    if f.out then
      io.stdout:write(show(f.out))
    elseif f.event then
      io.stdout:write(json.encode(f.event), "\n")
    elseif f.log then
      io.stdout:write(json.encode(f.log), "\n")
    end
    io.stdout:flush()
  end
end

-- ---- arbor ctl --------------------------------------------------------------

--- duration(text) -> seconds | nil: "30s", "5m", "2h", "1d", "1.5h" or a
-- number of seconds (`arbor ctl logs --since`).
function M.duration(text)
  local num, unit = tostring(text or ""):match("^(%d+%.?%d*)([smhd]?)$")
  if not num then return nil end
  return tonumber(num) * ({[""] = 1, s = 1, m = 60, h = 3600, d = 86400})[unit]
end

-- The commands: name, arguments, what it does; and how many positional
-- arguments it takes (-1: zero or one).
local command_list = {
  {"status", "[DN] [--ready]", "the engine (pid, script, uptime, restarts, stop bound)\n"
    .. "                         and a table of the nodes (or DN's subtree): state, pid,\n"
    .. "                         uptime, restarts, why one is down; --ready: exit 0 only\n"
    .. "                         when the root is HEALTHY", -1},
  {"tree", "[DN]", "the tree (or DN's subtree): states, pids, uptimes, restarts", -1},
  {"node", "DN", "a node's fields", 1},
  {"explain", "DN", "why a node is (or is not) running now", 1},
  {"restart", "DN", "restart a node now", 1},
  {"start", "DN", "start a node that does not run (stopped, given up, in backoff)", 1},
  {"stop", "DN", "stop a node and hold it down until started", 1},
  {"signal", "DN SIG", "send SIG (HUP, SIGUSR1, 10...) to the process group of\n"
    .. "                         each of DN's processes", 2},
  {"logs", "DN [-n N] [-f] [--since D]", "the last N log lines of DN and every node under it,\n"
    .. "                         by time (-f: then follow, across restarts;\n"
    .. "                         --since 5m: only the last 5 minutes' (s, m, h, d))", 1},
  {"events", "[-n N] [-f]", "the last N events (-f: follow)", 0},
  {"metrics", "[--openmetrics]", "the metrics /metrics serves (Prometheus text format)", 0},
  {"eval", "CODE [--budget N]", "evaluate Lua in the engine; prints the values", 1},
  {"shutdown", "", "stop the tree in order and wait for the engine to exit", 0},
  {"reload", "[--dry-run]", "read the script again and apply it: unchanged services\n"
    .. "                         keep running, changed ones restart, removed ones stop,\n"
    .. "                         new ones start (--dry-run: print the plan only)", 0},
  {"reexec", "[--binary PATH]", "replace arbor in place (same pid) by PATH (default:\n"
    .. "                         its own file) without stopping the services", 0},
}
local commands, command_line = {}, {}
for _, c in ipairs(command_list) do
  commands[c[1]] = c[4]
  command_line[c[1]] = string.format("  %-22s %s", c[1] .. (c[2] ~= "" and " " .. c[2] or ""), c[3])
end

local function lines(names)
  local out = {}
  for _, c in ipairs(command_list) do
    if not names or names[c[1]] then out[#out + 1] = command_line[c[1]] end
  end
  return table.concat(out, "\n")
end

local ctl_tail = [[
--json prints JSON (one object, or one per line when following).
SOCKET is a path, or a name in the default directory (the only socket
there when omitted). Exit: 0 ok, 1 the engine refused (unknown DN, error;
status --ready: the root is not HEALTHY), 2 usage, 3 no engine running,
connection refused or socket not trusted.]]

local ctl_usage = "usage: arbor ctl [SOCKET] COMMAND [ARGS...] [--json]\ncommands:\n"
  .. lines() .. "\n" .. ctl_tail

--- The usage of one command (arbor ctl COMMAND --help).
local function command_usage(cmd)
  local c
  for _, x in ipairs(command_list) do if x[1] == cmd then c = x end end
  return string.format("usage: arbor ctl [SOCKET] %s%s [--json]\n%s\n%s", cmd,
    c[2] ~= "" and " " .. c[2] or "", lines({[cmd] = true}), ctl_tail)
end

function M.ctl(args)
  local pos, flags = {}, {}
  local i = 1
  while i <= #args do
    local a = args[i]
    if a == "--json" then flags.json = true
    elseif a == "-f" or a == "--follow" then flags.follow = true
    elseif a == "-n" or a == "--budget" then
      local v = math.tointeger(tonumber(args[i + 1] or ""))
      if not v or v < 0 then
        errf("arbor ctl: %s needs a whole number", a)
        return 2
      end
      flags[a == "-n" and "n" or "budget"] = v
      i = i + 1
    elseif a == "-h" or a == "--help" then flags.help = true
    elseif a == "--ready" then flags.ready = true
    elseif a == "--openmetrics" then flags.openmetrics = true
    elseif a == "--dry-run" then flags.dry_run = true
    elseif a == "--binary" then
      if not args[i + 1] then
        errf("arbor ctl: --binary needs a path")
        return 2
      end
      flags.binary = args[i + 1]
      i = i + 1
    elseif a == "--since" then
      flags.since = M.duration(args[i + 1])
      if not flags.since then
        errf("arbor ctl: --since needs a duration (30s, 5m, 2h, 1d or seconds)")
        return 2
      end
      i = i + 1
    elseif a:sub(1, 1) == "-" and #a > 1 and not (pos[1] == "eval" or pos[2] == "eval") then
      errf("arbor ctl: unknown option '%s'\n%s", a, ctl_usage)
      return 2
    else
      pos[#pos + 1] = a
    end
    i = i + 1
  end
  local sock
  if pos[1] and not commands[pos[1]] then sock = table.remove(pos, 1) end
  local cmd = table.remove(pos, 1)
  if flags.help then
    print(commands[cmd] and command_usage(cmd) or ctl_usage)
    return 0
  end
  if not cmd then
    errf("arbor ctl: missing COMMAND\n%s", ctl_usage)
    return 2
  end
  local want = commands[cmd]
  if not want then
    errf("arbor ctl: unknown command '%s'\n%s", cmd, ctl_usage)
    return 2
  end
  -- the options of some commands only (the engine refuses a request field
  -- its operation does not take)
  for _, o in ipairs{{"ready", "status"}, {"openmetrics", "metrics"}, {"since", "logs"},
      {"dry_run", "reload"}, {"binary", "reexec"}, {"follow", "logs", "events"},
      {"n", "logs", "events"}, {"budget", "eval"}} do
    local ok = false
    for i = 2, #o do ok = ok or cmd == o[i] end
    if flags[o[1]] and not ok then
      local spelled = o[1] == "n" and "-n" or o[1] == "follow" and "-f" or "--" .. o[1]:gsub("_", "-")
      errf("arbor ctl %s: %s is an option of %s\n%s", cmd, spelled,
        table.concat(o, " and ", 2), command_usage(cmd))
      return 2
    end
  end
  if (want >= 0 and #pos ~= want) or (want < 0 and #pos > 1) then
    errf("arbor ctl %s: wrong number of arguments\n%s", cmd, ctl_usage)
    return 2
  end
  local conn = open_socket("arbor ctl", sock)
  if not conn then return 3 end
  local req = {op = cmd, json = flags.json or flags.ready, follow = flags.follow, n = flags.n,
    ready = flags.ready, openmetrics = flags.openmetrics, since = flags.since,
    dry_run = flags.dry_run, binary = flags.binary}
  if cmd == "eval" then
    req.code, req.budget = pos[1], flags.budget
  elseif pos[1] then
    req.dn = pos[1]
  end
  if cmd == "signal" then req.signal = math.tointeger(tonumber(pos[2])) or pos[2] end
  if cmd == "reexec" then
    req.json = nil -- its reply is the client's own
    return M.reexec(conn, req, flags, sock)
  end
  local show = term.filter(1)
  local reply, err, code = conn:request(req, stream_printer(show))
  if not reply then
    conn:close()
    if req.follow and code == "EOF" then return 0 end
    errf("arbor ctl: %s", message(err, code))
    return 3
  end
  if reply.id == json.null then -- refused or a protocol error
    conn:close()
    errf("arbor ctl: %s", reply.error)
    return 3
  end
  if not reply.ok then
    conn:close()
    if flags.json then
      print(json.encode({ok = false, error = reply.error, traceback = reply.traceback}))
    end
    errf("arbor ctl %s: %s", cmd, (not flags.json and reply.traceback) or reply.error)
    return 1
  end
  if flags.ready then -- a readiness probe: 0 only when the root is HEALTHY
    local root = reply.data and reply.data.root
    if flags.json then
      print(json.encode(reply.data))
    else
      print(string.format("%s: root %s", root == "HEALTHY" and "ready" or "not ready",
        tostring(root)))
    end
    conn:close()
    return root == "HEALTHY" and 0 or 1
  end
  if flags.json then
    if cmd == "eval" then print(json.encode(reply.values or {}))
    elseif reply.data_json then
      io.stdout:write(reply.data_json, "\n")
    elseif reply.data ~= nil then print(json.encode(reply.data))
    else print(json.encode({ok = true})) end
  elseif cmd == "metrics" and reply.text then -- as it is: it ends in a newline
    io.stdout:write(show(reply.text))
  elseif reply.text and reply.text ~= "" then
    print(show(reply.text))
  end
  if cmd == "shutdown" then
    -- wait for the engine to go: it closes the connection when it exits
    while conn.c:recv() do end
  end
  conn:close()
  return 0
end

-- `arbor ctl reexec`: the engine answers only when it could not exec;
-- otherwise the connection ends, and the new arbor is polled (same socket,
-- same pid) until it answers. Prints what took the tree over and how long
-- the control socket did not answer.
function M.reexec(conn, req, flags, sock)
  local core = require "arbor.core"
  local before = conn:request({op = "status", json = true})
  local pid = before and before.ok and before.data.pid
  local t0 = core.hrtime()
  local reply, err, code = conn:request(req)
  conn:close()
  if reply and not reply.ok then
    if flags.json then print(json.encode({ok = false, error = reply.error})) end
    errf("arbor ctl reexec: %s", reply.error)
    return 1
  end
  if not reply and code ~= "EOF" then
    errf("arbor ctl reexec: %s", message(err, code))
    return 3
  end
  for _ = 1, 3000 do -- 30 s
    local path = M.resolve(sock)
    local c = path and M.open(path)
    local st = c and c:request({op = "status", json = true})
    if c then c:close() end
    if st and st.ok then
      local ms = (core.hrtime() - t0) / 1e6
      if st.data.pid ~= pid then
        errf("arbor ctl reexec: another arbor (pid %d) answers on the socket", st.data.pid)
        return 1
      end
      if flags.json then
        print(json.encode({pid = st.data.pid, version = st.data.version, seconds = ms / 1000}))
      else
        print(string.format("reexec: arbor %s (pid %d) took the tree over; the control socket "
          .. "did not answer for %.0f ms", st.data.version, st.data.pid, ms))
      end
      return 0
    end
    local gone = pid and pid > 1 and not io.open("/proc/" .. pid .. "/stat")
    if gone then
      errf("arbor ctl reexec: arbor (pid %d) exited after the exec: the new arbor could not "
        .. "take the tree over (its error is on its stderr); the process guard killed the "
        .. "services", pid)
      return 1
    end
    os.execute("sleep 0.01")
  end
  errf("arbor ctl reexec: no arbor answered on the socket for 30 s after the exec")
  return 3
end

-- ---- arbor repl -------------------------------------------------------------

local function incomplete(code)
  if load("return " .. code, "=repl") then return false end
  local _, err = load(code, "=repl")
  return err ~= nil and err:sub(-5) == "<eof>"
end

function M.repl(args)
  local sock, echo
  for _, a in ipairs(args) do
    if a == "--echo" then echo = true
    elseif a == "-h" or a == "--help" then
      print("usage: arbor repl [--echo] [SOCKET]\n"
        .. "A Lua REPL inside the running engine (docs/repl.md). Reads lines from\n"
        .. "a terminal with line editing and history (~/.arbor_history), or from\n"
        .. "a pipe (--echo prints each line read, as a transcript).")
      return 0
    elseif a:sub(1, 1) == "-" then
      errf("arbor repl: unknown option '%s'", a)
      return 2
    elseif sock then
      errf("arbor repl: more than one SOCKET")
      return 2
    else sock = a end
  end
  local conn = open_socket("arbor repl", sock)
  if not conn then return 3 end
  local st, err, code = conn:request({op = "status", json = true})
  if not st or st.id == json.null or not st.ok then
    errf("arbor repl: %s", st and st.error or message(err, code))
    return 3
  end
  local rl = require "arbor.readline"
  local tty = rl.isatty(0)
  local print_stream = stream_printer(term.filter(1))
  conn.wake_fd = rl.catch_sigint()
  local history = (os.getenv("HOME") or ".") .. "/.arbor_history"
  if tty then
    rl.read_history(history)
    rl.set_completer(function(text, quoted)
      local r = conn:request({op = "complete", text = text, quoted = quoted})
      return r and r.matches or {}
    end)
    print(string.format("arbor %s, pid %d, %s: %d node(s), up %s. help() lists the "
      .. "helpers; Ctrl-D quits.", st.data.version, st.data.pid,
      tostring(st.data.script), st.data.nodes, render.duration(st.data.uptime)))
  end

  local function read(prompt)
    if tty then return rl.readline(prompt) end
    while true do
      local line = io.stdin:read("l")
      if line or not rl.sigint() then -- Ctrl-C while reading: read on
        if line and echo then io.stdout:write(prompt, line, "\n") end
        return line
      end
    end
  end

  local status = 0
  local buf
  while true do
    local line = read(buf and ">> " or "> ")
    if line == nil then break end
    if line == false then
      buf = nil -- Ctrl-C at the prompt drops the input
    else
      buf = buf and (buf .. "\n" .. line) or line
      if not incomplete(buf) then
        local code = buf
        buf = nil
        if code:find("%S") then
          if tty then
            rl.add_history(code)
            rl.append_history(history)
          end
          local id, ecode
          id, err, ecode = conn:send({op = "eval", code = code})
          local reply
          if id then
            reply, err, ecode = conn:wait(id, print_stream, function()
              if rl.sigint() then -- not another signal (a terminal resize)
                conn.c:send(json.encode({op = "interrupt", target = id, id = "int" .. id}))
              end
            end)
          end
          if not reply then
            errf("arbor repl: %s", message(err, ecode))
            return 1
          end
          if reply.ok then
            if reply.text then print(reply.text) end
            if reply.interrupted then print("(stopped)") end
          else
            io.stdout:flush()
            if reply.syntax then
              io.stderr:write(reply.error, "\n")
            else
              io.stderr:write(reply.traceback or reply.error, "\n")
            end
            io.stderr:flush()
            status = 1
          end
        end
      end
    end
  end
  if buf then
    errf("arbor repl: input ended inside an incomplete chunk:\n%s", buf)
    status = 1
  end
  if tty then io.stdout:write("\n") end
  conn:close()
  return tty and 0 or status
end

return M
