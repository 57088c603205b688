--- arbor.control.ops: the operations of the control protocol
-- (docs/control-protocol.md), one function each: op(S, cid, rid, req),
-- where S is what arbor.control.server gives them (the engine `e`, and
-- send, finish, fail, follow, unfollow, client, evaluate, ...). The list of
-- operations that an unknown op's error names is made from this table.
local core = require "arbor.core"
local json = require "arbor.json"
local pretty = require "arbor.pretty"
local render = require "arbor.render"
local session = require "arbor.control.session"
local explain = require("arbor.explain").explain

local M = {}

local handlers, names, schemas = {}, {}, {}

-- The types of request fields: a test of the value and the words the
-- error uses for what was wanted.
local TYPES = {
  boolean = {function(v) return type(v) == "boolean" end, "a boolean"},
  string = {function(v) return type(v) == "string" end, "a string"},
  count = {function(v) return math.type(v) == "integer" and v >= 0 end, "an integer >= 0"},
  seconds = {function(v) return type(v) == "number" and v >= 0 and v < math.huge end,
    "a number of seconds >= 0"},
  id = {function(v) return math.type(v) == "integer" or type(v) == "string" end,
    "a request id (an integer or a string)"},
  signal = {function(v) return math.type(v) == "integer" or type(v) == "string" end,
    "a signal (a name like \"HUP\", or a number)"},
}

-- Fields every request may have: its id and op (checked by the server),
-- and json (data instead of text, where the operation has data).
local COMMON = {id = true, op = true, json = "boolean"}

-- Defines the operation `name` and its request fields ({field = type name
-- of TYPES}); the error for an unknown op lists them in this order.
local function op(name, fields, fn)
  handlers[name] = fn
  names[#names + 1] = name
  schemas[name] = fields
end

--- The function of the operation named name, or nil.
function M.find(name)
  if type(name) ~= "string" then return nil end
  return handlers[name]
end

--- fields(name) -> {field = type}: the fields operation name takes besides
-- id, op and json (docs/control-protocol.md lists them).
function M.fields(name)
  local t = {}
  for k, v in pairs(schemas[name] or {}) do t[k] = v end
  return t
end

-- What a value is, in an error: its JSON type.
local function json_type(v)
  if v == json.null then return "null" end
  local t = type(v)
  if t == "table" then return (next(v) == nil or v[1] ~= nil) and "an array" or "an object" end
  if t == "number" then return math.type(v) == "integer" and "the number " .. v or "the number " .. core.cut(v) end
  if t == "string" then return "the string " .. core.cut(string.format("%q", v)) end
  return t
end

--- check(req) -> nil | error, field: every field of the request req (of a
-- known op) is one its operation takes, of its type; null is as absent.
-- The error names the operation and the field.
function M.check(req)
  local name = req.op
  local fields = schemas[name]
  local keys = {}
  for k in pairs(req) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  for _, k in ipairs(keys) do
    local v = req[k]
    local want = COMMON[k] or fields[k]
    if want == nil then
      local known = {"json"}
      for f in pairs(fields) do known[#known + 1] = f end
      table.sort(known)
      return string.format("%s: unknown field '%s' (the fields of %s: %s)", name,
        core.cut(tostring(k)), name, table.concat(known, ", ")), tostring(k)
    end
    if want ~= true and v ~= json.null then
      local t = TYPES[want]
      if not t[1](v) then
        return string.format("%s: field '%s' must be %s, got %s", name, k, t[2], json_type(v)), k
      end
    end
  end
end

--- strip_nulls(req): null fields are as absent (checked by M.check first).
function M.strip_nulls(req)
  for k, v in pairs(req) do
    if v == json.null then req[k] = nil end
  end
end

--- The names of the operations, in the order of docs/control-protocol.md.
function M.names() return table.move(names, 1, #names, 1, {}) end

--- The error for an operation that does not exist.
function M.unknown(name)
  return "unknown op '" .. tostring(name) .. "' (want one of "
    .. table.concat(names, ", ") .. ")"
end

-- The node at req.dn's fields; else fails the request and returns nil.
local function want_dn(S, cid, rid, req, name)
  if type(req.dn) ~= "string" then
    S.fail(cid, rid, name .. ": want a DN (like \"root.web\")")
    return nil
  end
  local f, err = S.e:node(req.dn)
  if not f then S.fail(cid, rid, err) return nil end
  return f
end

-- req.n, else default; fails the request and returns nil when it is bad.
local function want_count(S, cid, rid, req, default)
  local n = req.n
  if n == nil then return default end
  if math.type(n) ~= "integer" or n < 0 then
    S.fail(cid, rid, "n must be an integer >= 0")
    return nil
  end
  return n
end

-- ---- one-shot operations (`arbor ctl`) ----

op("status", {dn = "string", ready = "boolean"}, function(S, cid, rid, req)
  if req.dn ~= nil and not want_dn(S, cid, rid, req, "status") then return end
  local e = S.e
  local st = e:stats()
  local root = e:node("root")
  local data = {version = S.arbor.version, pid = core.getpid(), script = S.script,
    socket = S.path, uptime = e:now() - S.started, nodes = st.nodes, running = st.live,
    restarts = st.restarts, root = root and root.state, clients = S.info().clients,
    evaluations = S.evaluations(), stop_bound = core.stop_bound(e)}
  local printed = require("arbor.cli").stderr -- under `arbor run`
  if printed.error then data.stderr_lost, data.stderr_error = printed.lost, printed.error end
  -- the node table (`supervisorctl status`); not for a readiness probe
  if not req.ready then data.table = render.status_rows(e:tree(req.dn)) end
  if req.json then return S.finish(cid, rid, {data = data}) end
  S.finish(cid, rid, {text = string.format(
    "arbor %s, pid %d, script %s\nsocket %s\nup %s, %d node(s), %d running, %d restart(s), root %s\nstop bound %gs (the longest an ordered stop may take)\n%d client(s) connected, %d evaluation(s) running\n%s\n%s",
    data.version, data.pid, tostring(data.script), S.path, render.duration(data.uptime),
    data.nodes, data.running, data.restarts, tostring(data.root), data.stop_bound,
    data.clients, data.evaluations,
    data.stderr_lost and string.format("stderr: %s; %d line(s) not printed\n",
      data.stderr_error, data.stderr_lost) or "", render.status(data.table))})
end)

op("tree", {dn = "string"}, function(S, cid, rid, req)
  if req.dn ~= nil and not want_dn(S, cid, rid, req, "tree") then return end
  if req.json then -- written in C: trees can be large (docs/control-protocol.md)
    return S.send_raw(cid, '{"id":' .. json.encode(rid) .. ',"end":true,"ok":true,"data":'
      .. core.tree_json(S.e, req.dn) .. "}")
  end
  S.finish(cid, rid, {text = render.tree(S.e:tree(req.dn))})
end)

op("node", {dn = "string"}, function(S, cid, rid, req)
  local f = want_dn(S, cid, rid, req, "node")
  if not f then return end
  if req.json then return S.finish(cid, rid, {data = f}) end
  S.finish(cid, rid, {text = pretty.pretty(f)})
end)

-- The operation `name`: the engine's method on req.dn, then `done` is said.
local function node_action(name, method, done)
  op(name, {dn = "string"}, function(S, cid, rid, req)
    if not want_dn(S, cid, rid, req, name) then return end
    local ok, err = pcall(S.e[method], S.e, req.dn)
    if not ok then return S.fail(cid, rid, tostring(err)) end
    S.finish(cid, rid, {text = req.dn .. ": " .. done})
  end)
end
node_action("restart", "restart", "restarted")
node_action("stop", "hold", "stopped (held until restarted)")

-- logs: the last n lines of req.dn and every node (and sub-logger) under
-- it, interleaved in the order they were logged; req.since: only those of
-- the last since seconds; req.follow: then the new ones as they come,
-- across restarts, until interrupted.
op("logs", {dn = "string", n = "count", since = "seconds", follow = "boolean"},
    function(S, cid, rid, req)
  local dn = req.dn
  if type(dn) ~= "string" then
    return S.fail(cid, rid, "logs: want a DN (like \"root.web\")")
  end
  local n = want_count(S, cid, rid, req, 20)
  if not n then return end
  local since = req.since
  if since ~= nil and (type(since) ~= "number" or not (since >= 0)) then
    return S.fail(cid, rid, "since must be a number of seconds >= 0")
  end
  local e = S.e
  local ok, lines = pcall(e.logs, e, dn, n, {subtree = true, since = since and e:now() - since})
  if not ok then -- not a node nor a sub-logger: the node's error
    if want_dn(S, cid, rid, req, "logs") then S.fail(cid, rid, tostring(lines)) end
    return
  end
  local function text(l) return render.log(l.dn, l.line, l.time, l.level, l.wall) end
  if req.follow then
    for _, l in ipairs(lines) do
      if req.json then S.send(cid, rid, {log = l})
      else S.send(cid, rid, {out = text(l) .. "\n"}) end
    end
    return S.follow(cid, rid, "logs", dn, req.json)
  end
  if req.json then return S.finish(cid, rid, {data = lines}) end
  S.finish(cid, rid, {text = render.lines(lines, text, "")})
end)

op("events", {n = "count", follow = "boolean"}, function(S, cid, rid, req)
  local n = want_count(S, cid, rid, req, 20)
  if not n then return end
  local e = S.e
  local evs = e:events(n)
  if req.follow then
    for _, ev in ipairs(evs) do
      if req.json then S.send(cid, rid, {event = ev})
      else S.send(cid, rid, {out = render.event(ev) .. "\n"}) end
    end
    local newest = e:events(1)[1]
    return S.follow(cid, rid, "events", nil, req.json, newest and newest.seq)
  end
  if req.json then return S.finish(cid, rid, {data = evs}) end
  S.finish(cid, rid, {text = render.lines(evs, render.event, "")})
end)

-- ---- the REPL: evaluations, interrupts, completion ----

op("eval", {code = "string", budget = "count"}, function(S, cid, rid, req)
  if type(req.code) ~= "string" then return S.fail(cid, rid, "eval: want code (a string)") end
  local c = S.client(cid)
  if c.evals[rid] then return S.fail(cid, rid, "eval: request id " .. tostring(rid) .. " is in use") end
  local fn, err = session.compile(req.code, c.session.env)
  if not fn then
    return S.fail(cid, rid, err, {incomplete = err:sub(-5) == "<eof>" or nil,
      syntax = true})
  end
  local budget = c.session.budget
  if req.budget ~= nil then
    if math.type(req.budget) ~= "integer" or req.budget < S.QUANTUM then
      return S.fail(cid, rid, "eval: budget must be an integer >= " .. S.QUANTUM)
    end
    budget = req.budget
  end
  S.evaluate({cid = cid, rid = rid, co = coroutine.create(fn), used = 0,
    budget = budget, json = req.json == true})
end)

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
op("complete", {text = "string", quoted = "boolean"}, function(S, cid, rid, req)
  local text = type(req.text) == "string" and req.text or ""
  local c = S.client(cid)
  local seen, matches = {}, {}
  local function add(m)
    if not seen[m] and #matches < 500 then
      seen[m] = true
      matches[#matches + 1] = m
    end
  end
  if req.quoted then
    local stack = {S.e:tree()}
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
  S.finish(cid, rid, {matches = matches})
end)

op("interrupt", {target = "id"}, function(S, cid, rid, req)
  local c = S.client(cid)
  local ev = c.evals[req.target]
  if ev then
    if ev.follow_key then -- watch(): Ctrl-C is its normal end
      S.close_eval(ev)
      S.finish(cid, ev.rid, {ok = true, interrupted = true})
    else
      S.eval_error(ev, "interrupted", {interrupted = true})
    end
  end
  if S.unfollow(cid .. "/" .. tostring(req.target)) then
    S.finish(cid, req.target, {ok = true, interrupted = true})
  end
  S.finish(cid, rid, {ok = true, found = ev ~= nil})
end)

op("shutdown", {}, function(S, cid, rid)
  S.finish(cid, rid, {text = "stopping the tree"})
  S.e:stop()
end)

-- ---- reload (`arbor ctl reload`, docs/restore.md) ----

op("reload", {dry_run = "boolean"}, function(S, cid, rid, req)
  local r, err = require("arbor.reload").reload{dry_run = req.dry_run}
  if not r then return S.fail(cid, rid, err) end
  if req.json then
    return S.finish(cid, rid, {data = {script = r.script, dry_run = r.dry_run,
      steps = r.steps, counts = r.counts, unapplied = r.unapplied, seconds = r.seconds}})
  end
  S.finish(cid, rid, {text = r.text})
end)

-- reexec: arbor replaces itself (same pid) and the new one takes the tree
-- over; the reply comes only when that could not be done (the binary's
-- version is checked off the loop first). The connection ends with the
-- exec: the client reconnects (arbor.client).
op("reexec", {binary = "string"}, function(S, cid, rid, req)
  local current = require("arbor.reload").current()
  if not current then return S.fail(cid, rid, "reexec: no tree is running") end
  require("arbor.restore").reexec(current, {binary = req.binary}, function(err)
    S.fail(cid, rid, err)
  end)
end)

-- ---- seeing and signalling services (`arbor ctl explain|start|signal`) ----

-- start: a node that does not run (stopped, held, given up, waiting for a
-- delayed restart) starts now; a running one is an error.
op("start", {dn = "string"}, function(S, cid, rid, req)
  local f = want_dn(S, cid, rid, req, "start")
  if not f then return end
  if f.running then
    return S.fail(cid, rid, string.format("%s is running (%s): restart "
      .. "restarts it", req.dn, f.state))
  end
  local ok, err = pcall(S.e.restart, S.e, req.dn)
  if not ok then return S.fail(cid, rid, tostring(err)) end
  S.finish(cid, rid, {text = req.dn .. ": started"})
end)

-- signal: req.signal (a name or a number) to the process group of each of
-- the node's processes.
op("signal", {dn = "string", signal = "signal"}, function(S, cid, rid, req)
  if not want_dn(S, cid, rid, req, "signal") then return end
  local sig = req.signal
  if type(sig) ~= "string" and math.type(sig) ~= "integer" then
    return S.fail(cid, rid, "signal " .. req.dn .. ": want a signal (a name like \"HUP\", or a number)")
  end
  local ok, n, name = pcall(S.e.kill, S.e, req.dn, sig)
  if not ok then return S.fail(cid, rid, tostring(n)) end
  if not n then return S.fail(cid, rid, (name:gsub("^%u+: ", ""))) end
  if req.json then return S.finish(cid, rid, {data = {dn = req.dn, signal = name, groups = n}}) end
  S.finish(cid, rid, {text = string.format("%s: sent %s to %d process group(s)", req.dn, name, n)})
end)

-- explain: arbor.explain(dn), the sentence and its code.
op("explain", {dn = "string"}, function(S, cid, rid, req)
  if not want_dn(S, cid, rid, req, "explain") then return end
  local sentence, code = explain(S.e, req.dn)
  if req.json then return S.finish(cid, rid, {data = {dn = req.dn, why = code, explanation = sentence}}) end
  S.finish(cid, rid, {text = sentence})
end)

-- metrics: the exposition /metrics serves (docs/observability.md); json:
-- the families of arbor.metrics().
op("metrics", {openmetrics = "boolean"}, function(S, cid, rid, req)
  local metrics = require "arbor.metrics"
  local opts = {openmetrics = req.openmetrics == true}
  if req.json then return S.finish(cid, rid, {data = metrics.table(S.e, opts)}) end
  S.finish(cid, rid, {text = metrics.text(S.e, opts)})
end)

return M
