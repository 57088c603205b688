--- arbor.control: the engine side of the live control plane (C1-C4).
--
-- src/control.c owns the socket, the frames and the clients; this module
-- answers the requests (docs/control-protocol.md): one-shot operations for
-- `arbor ctl`, evaluations and completions for `arbor repl`, and streams of
-- events and logs. Each connection has its own REPL session: an environment
-- whose variables persist between evaluations and do not leak into the
-- tree's globals. Evaluations run as coroutines on the engine's loop in
-- slices of QUANTUM instructions, so a runaway one never freezes the tree;
-- it is stopped at its instruction budget or by an interrupt (Ctrl-C).
local core = require "arbor.core"
local json = require "arbor.json"
local pretty = require "arbor.pretty"
local session = require "arbor.session"

local M = {}

local QUANTUM = 10000        -- instructions per slice
local SLICE_NS = 2000000     -- evaluation time per loop turn (2 ms)
-- Instructions for the <close> variables of an evaluation that ended, and
-- for the __tostring of an evaluation's error: user code too.
local CLEANUP = 1000000
--- Instructions one evaluation may run, unless the request or the session
-- sets another budget.
M.default_budget = 100000000

local WAIT = setmetatable({}, {__tostring = function() return "<wait>" end})

--- Where `arbor run` listens by default (C1): $XDG_RUNTIME_DIR/arbor, or
-- /run/arbor as root, or /tmp/arbor-UID; the file is the script's name
-- without .lua.
function M.default_dir()
  local xdg = os.getenv("XDG_RUNTIME_DIR")
  if xdg and xdg ~= "" then return xdg .. "/arbor" end
  local uid = M.uid()
  if uid == 0 then return "/run/arbor" end
  return "/tmp/arbor-" .. uid
end

function M.uid()
  local f = io.open("/proc/self/status")
  local uid = f and f:read("a"):match("\nUid:%s*%d+%s+(%d+)")
  if f then f:close() end
  return tonumber(uid) or -1
end

function M.default_path(script)
  local base = (script or "arbor"):match("([^/]*)$"):gsub("%.lua$", "")
  if base == "" then base = "arbor" end
  return M.default_dir() .. "/" .. base .. ".sock"
end

-- ---- rendering --------------------------------------------------------------

local function duration(s)
  if not s then return "-" end
  if s < 60 then return string.format("%.1fs", s) end
  if s < 3600 then return string.format("%dm%02ds", s // 60, math.floor(s % 60)) end
  if s < 86400 then return string.format("%dh%02dm", s // 3600, math.floor(s % 3600) // 60) end
  return string.format("%dd%02dh", s // 86400, math.floor(s % 86400) // 3600)
end
M.duration = duration

local function first_line(s)
  s = tostring(s)
  local l = s:match("^[^\n]*")
  if #l > 120 then l = l:sub(1, 117) .. "..." end
  return l
end

--- A drawn tree: one node a line with its state, lifecycle (when not main),
-- whether it is blocked at its gate, its coordinator's state (for a parent
-- of lifecycle children, until it is running), uptime, restarts and last error (shown while not healthy).
function M.render_tree(t)
  local lines = {}
  local function label(n)
    local s = string.format("%s [%s]", n.name, n.state)
    if n.lifecycle and n.lifecycle ~= "main" then
      s = s .. " " .. n.lifecycle .. (n.sidecar and " sidecar" or "")
    end
    if n.blocked then s = s .. " blocked" end
    if n.gated and n.coordinator ~= "running" then
      s = s .. " coordinator=" .. tostring(n.coordinator)
    end
    if n.uptime then s = s .. " up " .. duration(n.uptime) end
    if n.restarts and n.restarts > 0 then
      s = s .. string.format(" restarts=%d", n.restarts)
    end
    if n.error and n.state ~= "HEALTHY" and n.state ~= "DONE" then
      s = s .. "  last error: " .. first_line(n.error)
    end
    return s
  end
  -- iterative, so deep trees do not overflow
  local stack = {{t, "", true, true}}
  while #stack > 0 do
    local n, prefix, last, top = table.unpack(table.remove(stack))
    lines[#lines + 1] = top and label(n) or
      (prefix .. (last and "`-- " or "|-- ") .. label(n))
    local kids = n.children or {}
    local sub = top and "" or prefix .. (last and "    " or "|   ")
    for i = #kids, 1, -1 do stack[#stack + 1] = {kids[i], sub, i == #kids} end
  end
  return table.concat(lines, "\n")
end

local function clock(t) return string.format("%10.3f", t) end

function M.render_event(ev)
  if ev.kind == "gap" then -- T14: the subscriber missed these
    return string.format("%s %-24s gap: %d event(s) missed (seq %d-%d)",
      clock(ev.time), "(events)", ev.missed, ev.first, ev.last)
  elseif ev.kind == "state" and ev.from == ev.to then
    return string.format("%s %-24s -> %s  (%s)", clock(ev.time), ev.dn, ev.to,
      ev.reason or "")
  elseif ev.kind == "state" then
    return string.format("%s %-24s %s -> %s%s", clock(ev.time), ev.dn, ev.from,
      ev.to, ev.reason and ("  " .. first_line(ev.reason)) or "")
  elseif ev.kind == "coordinator" then
    return string.format("%s %-24s coordinator %s -> %s  (%s)", clock(ev.time),
      ev.dn, ev.from, ev.to, ev.reason or "")
  end
  return string.format("%s %-24s %s: %s", clock(ev.time), ev.dn, ev.kind,
    ev.reason or "")
end

function M.render_log(dn, l)
  return string.format("%s %-24s | %s", clock(l.time), dn, l.line)
end

-- ---- the server -------------------------------------------------------------

--- serve(e, path, opts) -> server | nil, message. e is the engine object;
-- opts.arbor is the arbor module (helpers), opts.script the script name.
function M.serve(e, path, opts)
  opts = opts or {}
  local arbor = opts.arbor or require "arbor"
  local clients = {}     -- client id -> {sessions state}
  local runq = {}        -- evaluations ready to run, in order
  local followers = {}   -- key -> {cid, rid, what = "events"|"logs", dn, json}
  local nfollowers = 0
  local sub_id           -- the engine subscription while someone follows
  local current          -- the evaluation running now
  local srv              -- the C server
  local started = e:now()

  local function send(cid, rid, t)
    t.id = rid
    return srv:send(cid, json.encode(t))
  end

  local function finish(cid, rid, t)
    t["end"] = true
    if t.ok == nil then t.ok = true end
    return send(cid, rid, t)
  end

  local function fail(cid, rid, msg, extra)
    local t = extra or {}
    t.ok = false
    t.error = msg
    return finish(cid, rid, t)
  end

  -- ---- following events and logs ----

  local function on_event(ev)
    local line
    for _, f in pairs(followers) do
      if f.what == "events" and (not f.dn or ev.kind == "gap" or
          ev.dn == f.dn or ev.dn:sub(1, #f.dn + 1) == f.dn .. ".") and
          not (f.after and ev.seq and ev.seq <= f.after) then
        if f.json then
          send(f.cid, f.rid, {event = ev})
        else
          line = line or M.render_event(ev)
          send(f.cid, f.rid, {out = line .. "\n"})
        end
      end
    end
  end

  -- after: the newest event the client has already seen (a replay), so
  -- that events of the ring not delivered to subscribers yet do not reach
  -- it twice.
  local function follow(cid, rid, what, dn, as_json, after)
    followers[cid .. "/" .. tostring(rid)] = {cid = cid, rid = rid, what = what,
      dn = dn, json = as_json, after = after}
    nfollowers = nfollowers + 1
    if what == "events" and not sub_id then
      sub_id = e:subscribe(function(ev)
        local ok, err = pcall(on_event, ev)
        if not ok then io.stderr:write("arbor: control: ", tostring(err), "\n") end
      end)
    end
  end

  local function unfollow(key)
    if not followers[key] then return end
    followers[key] = nil
    nfollowers = nfollowers - 1
    local any = false
    for _, f in pairs(followers) do
      if f.what == "events" then any = true break end
    end
    if not any and sub_id then
      e:unsubscribe(sub_id)
      sub_id = nil
    end
  end

  local server = {}

  --- Called by arbor.run's log sink: streams the line to `logs -f` clients.
  function server.on_log(dn, line, time)
    if nfollowers == 0 or server.closed then return end
    for _, f in pairs(followers) do
      if f.what == "logs" and (dn == f.dn) then
        if f.json then
          send(f.cid, f.rid, {log = {dn = dn, line = line, time = time}})
        else
          send(f.cid, f.rid, {out = M.render_log(dn, {line = line, time = time}) .. "\n"})
        end
      end
    end
  end

  -- ---- evaluations ----

  local function unqueue(ev)
    for i, x in ipairs(runq) do
      if x == ev then table.remove(runq, i) break end
    end
  end

  local function close_eval(ev)
    clients[ev.cid].evals[ev.rid] = nil
    unqueue(ev)
    if ev.follow_key then unfollow(ev.follow_key) end
    core.slice_close(ev.co, CLEANUP)
  end

  -- An evaluation's values, rendered for its reply (r as step() has it):
  -- the text the REPL prints, or the JSON array of the values.
  local function render(as_json, r)
    local n = r.n - 1
    if as_json then
      local vals = {}
      for i = 1, n do vals[i] = r[i + 1] == nil and json.null or r[i + 1] end
      return n, json.encode(vals)
    end
    return n, n > 0 and pretty.values(table.move(r, 2, r.n, 1, {}), n) or nil
  end

  -- When the evaluation returns, its values are rendered by a coroutine of
  -- their own that step() resumes in the evaluation's slices and budget
  -- (printing a million entries must not freeze the tree); when that one
  -- returns, the reply is sent.
  local function eval_done(ev, r)
    if not ev.rendering then
      ev.rendering = true
      ev.co = coroutine.create(function() return render(ev.json, r) end)
      for _, x in ipairs(runq) do
        if x == ev then return end
      end
      runq[#runq + 1] = ev
      return srv:busy()
    end
    local n, text = r[2], r[3]
    close_eval(ev)
    if not ev.json then return finish(ev.cid, ev.rid, {n = n, text = text}) end
    local frame = '{"id":' .. json.encode(ev.rid) .. ',"end":true,"ok":true,"n":' .. n
      .. ',"values":' .. text .. "}"
    local limit = srv:info().reply_limit
    if #frame > limit then
      return fail(ev.cid, ev.rid, string.format("the result is too large for a reply "
        .. "(%d bytes of JSON, limit %d)", #frame, limit))
    end
    srv:send(ev.cid, frame)
  end

  -- The text of an evaluation's error: a string, else the value printed,
  -- its __tostring run under a budget of its own.
  local function error_text(err)
    if type(err) == "string" then return err end
    local co, left, kind, used, text = coroutine.create(pretty.pretty), CLEANUP
    repeat
      kind, used, text = core.slice(co, QUANTUM, left, err)
      left = left - used
    until kind ~= "slice"
    core.slice_close(co, CLEANUP)
    if kind == "return" then return text end
    return "(error object is a " .. type(err) .. " value whose __tostring failed)"
  end

  local function eval_error(ev, msg, extra)
    if ev.rendering then msg = "printing the result: " .. msg end
    local t = extra or {}
    t.traceback = t.traceback or debug.traceback(ev.co, msg)
    close_eval(ev)
    fail(ev.cid, ev.rid, msg, t)
  end

  -- Runs ev for up to SLICE_NS; returns true while it still wants to run.
  local function step(ev, deadline)
    while true do
      current = ev
      local r = table.pack(core.slice(ev.co, QUANTUM, ev.budget - ev.used))
      current = nil
      ev.used = ev.used + r[2]
      r = table.move(r, 3, r.n, 2, {r[1], n = r.n - 1}) -- kind, values...
      local kind = r[1]
      if kind == "budget" then
        eval_error(ev, string.format(
          "evaluation stopped: instruction budget of %d exceeded (a runaway "
          .. "loop? budget(n) raises it for this session)", ev.budget),
          {budget = true})
        return false
      elseif kind == "yield" then
        if r[2] == WAIT then -- watch(): parked until interrupted
          unqueue(ev)
          return false
        end
        -- a bare coroutine.yield() at the top of an evaluation: go on
      elseif kind == "return" then
        eval_done(ev, r)
        return false
      elseif kind == "error" then
        eval_error(ev, error_text(r[2]))
        return false
      end
      if core.hrtime() >= deadline then return true end
    end
  end

  local function on_idle()
    local deadline = core.hrtime() + SLICE_NS
    local i = 1
    while i <= #runq do
      local ev = runq[i]
      if step(ev, deadline) then
        i = i + 1
      end
      -- a finished evaluation removed itself from runq
      if core.hrtime() >= deadline then break end
    end
    -- round robin: the one that ran first goes last
    if #runq > 1 then table.insert(runq, table.remove(runq, 1)) end
    return #runq > 0
  end

  -- ---- sessions ----

  -- Prints to the client of the running evaluation; a function made in a
  -- session and called later by the tree (a swapped runnable) prints on
  -- the engine's stdout.
  local function out(text)
    if current then
      send(current.cid, current.rid, {out = text})
    else
      io.stdout:write(text)
      io.stdout:flush()
    end
  end

  local function follow_eval(ev, dn)
    ev.follow_key = ev.cid .. "/" .. tostring(ev.rid)
    follow(ev.cid, ev.rid, "events", dn, false)
  end

  local function client_state(cid)
    local c = clients[cid]
    if not c then
      c = {evals = {}, session = session.new{e = e, arbor = arbor, out = out,
        current = function() return current end, follow = follow_eval, WAIT = WAIT,
        quantum = QUANTUM, budget = M.default_budget,
        render = {tree = M.render_tree, log = M.render_log, event = M.render_event}}}
      clients[cid] = c
    end
    return c
  end

  -- ---- operations ----

  local ops = {}

  function ops.eval(cid, rid, req)
    if type(req.code) ~= "string" then return fail(cid, rid, "eval: want code (a string)") end
    local c = client_state(cid)
    if c.evals[rid] then return fail(cid, rid, "eval: request id " .. tostring(rid) .. " is in use") end
    local fn, err = session.compile(req.code, c.session.env)
    if not fn then
      return fail(cid, rid, err, {incomplete = err:sub(-5) == "<eof>" or nil,
        syntax = true})
    end
    local budget = c.session.budget
    if req.budget ~= nil then
      if math.type(req.budget) ~= "integer" or req.budget < QUANTUM then
        return fail(cid, rid, "eval: budget must be an integer >= " .. QUANTUM)
      end
      budget = req.budget
    end
    local ev = {cid = cid, rid = rid, co = coroutine.create(fn), used = 0,
      budget = budget, json = req.json == true}
    c.evals[rid] = ev
    if step(ev, core.hrtime() + SLICE_NS) then
      runq[#runq + 1] = ev
      srv:busy()
    end
  end

  function ops.interrupt(cid, rid, req)
    local c = client_state(cid)
    local ev = c.evals[req.target]
    if ev then
      if ev.follow_key then -- watch(): Ctrl-C is its normal end
        close_eval(ev)
        finish(cid, ev.rid, {ok = true, interrupted = true})
      else
        eval_error(ev, "interrupted", {interrupted = true})
      end
    end
    local key = cid .. "/" .. tostring(req.target)
    if followers[key] then
      unfollow(key)
      finish(cid, req.target, {ok = true, interrupted = true})
    end
    finish(cid, rid, {ok = true, found = ev ~= nil})
  end

  local function want_dn(cid, rid, req, op)
    if type(req.dn) ~= "string" then
      fail(cid, rid, op .. ": want a DN (like \"root.web\")")
      return nil
    end
    local f, err = e:node(req.dn)
    if not f then fail(cid, rid, err) return nil end
    return f
  end

  function ops.status(cid, rid, req)
    local st = e:stats()
    local root = e:node("root")
    local data = {version = arbor.version, pid = core.getpid(), script = opts.script,
      socket = path, uptime = e:now() - started, nodes = st.nodes, running = st.live,
      restarts = st.restarts, root = root and root.state, clients = srv:info().clients,
      evaluations = #runq}
    if req.json then return finish(cid, rid, {data = data}) end
    finish(cid, rid, {text = string.format(
      "arbor %s, pid %d, script %s\nsocket %s\nup %s, %d node(s), %d running, %d restart(s), root %s\n%d client(s) connected, %d evaluation(s) running",
      data.version, data.pid, tostring(data.script), path, duration(data.uptime),
      data.nodes, data.running, data.restarts, tostring(data.root), data.clients,
      data.evaluations)})
  end

  function ops.tree(cid, rid, req)
    if req.dn ~= nil and not want_dn(cid, rid, req, "tree") then return end
    if req.json then -- built in C: trees can be large (docs/control-protocol.md)
      return srv:send(cid, '{"id":' .. json.encode(rid) .. ',"end":true,"ok":true,"data":'
        .. core.tree_json(e, req.dn) .. "}")
    end
    finish(cid, rid, {text = M.render_tree(e:tree(req.dn))})
  end

  function ops.node(cid, rid, req)
    local f = want_dn(cid, rid, req, "node")
    if not f then return end
    if req.json then return finish(cid, rid, {data = f}) end
    finish(cid, rid, {text = pretty.pretty(f)})
  end

  -- ops[name]: the engine's method on req.dn, then `done` is said.
  local function node_action(name, method, done)
    ops[name] = function(cid, rid, req)
      if not want_dn(cid, rid, req, name) then return end
      local ok, err = pcall(method, e, req.dn)
      if not ok then return fail(cid, rid, tostring(err)) end
      finish(cid, rid, {text = req.dn .. ": " .. done})
    end
  end
  node_action("restart", e.restart, "restarted")
  node_action("stop", e.hold, "stopped (held until restarted)")

  local function want_count(cid, rid, req, default)
    local n = req.n
    if n == nil then return default end
    if math.type(n) ~= "integer" or n < 0 then
      fail(cid, rid, "n must be an integer >= 0")
      return nil
    end
    return n
  end

  function ops.logs(cid, rid, req)
    if not want_dn(cid, rid, req, "logs") then return end
    local n = want_count(cid, rid, req, 20)
    if not n then return end
    local lines = e:logs(req.dn, n)
    if req.json then
      for _, l in ipairs(lines) do l.dn = req.dn end
    end
    if req.follow then
      for _, l in ipairs(lines) do
        if req.json then send(cid, rid, {log = l})
        else send(cid, rid, {out = M.render_log(req.dn, l) .. "\n"}) end
      end
      return follow(cid, rid, "logs", req.dn, req.json)
    end
    if req.json then return finish(cid, rid, {data = lines}) end
    local text = {}
    for _, l in ipairs(lines) do text[#text + 1] = M.render_log(req.dn, l) end
    finish(cid, rid, {text = table.concat(text, "\n")})
  end

  function ops.events(cid, rid, req)
    local n = want_count(cid, rid, req, 20)
    if not n then return end
    local evs = e:events(n)
    if req.follow then
      for _, ev in ipairs(evs) do
        if req.json then send(cid, rid, {event = ev})
        else send(cid, rid, {out = M.render_event(ev) .. "\n"}) end
      end
      local newest = e:events(1)[1]
      return follow(cid, rid, "events", nil, req.json, newest and newest.seq)
    end
    if req.json then return finish(cid, rid, {data = evs}) end
    local text = {}
    for _, ev in ipairs(evs) do text[#text + 1] = M.render_event(ev) end
    finish(cid, rid, {text = table.concat(text, "\n")})
  end

  function ops.shutdown(cid, rid)
    finish(cid, rid, {text = "stopping the tree"})
    e:stop()
  end

  -- Completion runs no code of the session's values: it reads tables raw
  -- and follows only __index tables (a __index or __pairs function could
  -- loop, and completion runs outside any evaluation's budget).
  local function index_table(v)
    local mt = debug.getmetatable(v)
    local idx = type(mt) == "table" and rawget(mt, "__index")
    return type(idx) == "table" and idx or nil
  end

  local function raw_field(v, k)
    for _ = 1, 8 do
      if type(v) == "table" then
        local x = rawget(v, k)
        if x ~= nil then return x end
      end
      v = index_table(v)
      if not v then return nil end
    end
  end

  -- Completion: names (helpers, the session's variables, globals, fields of
  -- tables after a dot or colon) or, inside a string, DNs.
  function ops.complete(cid, rid, req)
    local text = type(req.text) == "string" and req.text or ""
    local c = client_state(cid)
    local seen, matches = {}, {}
    local function add(m)
      if not seen[m] and #matches < 500 then
        seen[m] = true
        matches[#matches + 1] = m
      end
    end
    if req.quoted then
      local stack = {e:tree()}
      while #stack > 0 do
        local n = table.remove(stack)
        if n.dn:sub(1, #text) == text then add(n.dn) end
        for _, ch in ipairs(n.children) do stack[#stack + 1] = ch end
      end
    else
      local path, sep, last = text:match("^(.*)([%.:])([%w_]*)$")
      if not path then
        last = text
        for _, t in ipairs({c.session.helpers, c.session.env, _G}) do
          for k in next, t do
            if type(k) == "string" and k:sub(1, #last) == last then add(k) end
          end
        end
      else
        local v, first = nil, true
        for part in path:gmatch("[^%.:]+") do
          if first then
            v = rawget(c.session.env, part)
            if v == nil then v = rawget(c.session.helpers, part) end
            if v == nil then v = rawget(_G, part) end
            first = false
          else
            v = raw_field(v, part)
          end
          if v == nil then break end
        end
        -- the fields of v, then of its __index tables (methods)
        for _ = 1, 8 do
          if type(v) == "table" then
            for k, x in next, v do
              if type(k) == "string" and k:sub(1, #last) == last and
                  (sep == "." or type(x) == "function") then
                add(path .. sep .. k)
              end
            end
          end
          v = index_table(v)
          if not v then break end
        end
      end
    end
    table.sort(matches)
    finish(cid, rid, {matches = matches})
  end

  -- ---- the handler called by control.c ----

  local handler = {}

  function handler.on_frame(cid, payload)
    local req, err = json.decode(payload, true)
    if type(req) ~= "table" or not payload:find("^%s*{") then
      send(cid, json.null, {["end"] = true, ok = false,
        error = "protocol error: " .. (err or "a request must be a JSON object")})
      return srv:drop(cid, "malformed request")
    end
    local rid = req.id
    if not (math.type(rid) == "integer" or type(rid) == "string") then
      send(cid, json.null, {["end"] = true, ok = false,
        error = "protocol error: a request needs an id (an integer or a string)"})
      return srv:drop(cid, "malformed request")
    end
    local op = ops[req.op]
    if not op then
      return fail(cid, rid, "unknown op '" .. tostring(req.op) .. "' (want one of "
        .. "eval, complete, interrupt, status, tree, node, restart, stop, logs, "
        .. "events, shutdown)")
    end
    local ok, perr = pcall(op, cid, rid, req)
    if not ok then fail(cid, rid, tostring(perr)) end
  end

  function handler.on_close(cid)
    local c = clients[cid]
    if c then
      for _, ev in pairs(c.evals) do close_eval(ev) end
      clients[cid] = nil
    end
    for key, f in pairs(followers) do
      if f.cid == cid then unfollow(key) end
    end
  end

  handler.on_idle = on_idle

  local err
  srv, err = core.control_listen(e, path, handler)
  if not srv then return nil, err end

  server.path = path
  function server.close()
    if server.closed then return end
    server.closed = true
    if sub_id then e:unsubscribe(sub_id) sub_id = nil end
    srv:close()
  end
  return server
end

return M
