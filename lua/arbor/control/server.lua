--- arbor.control.server: the engine side of the live control plane (C1-C4).
--
-- The C server (core.control_listen) owns the socket, the frames and the
-- clients; this module keeps what the requests need between frames: each
-- client's REPL session and evaluations, the run queue of evaluations, and
-- the followers of events and logs. The operations themselves are in
-- arbor.control.ops. Evaluations run as coroutines on the engine's loop in
-- slices of QUANTUM instructions, so a runaway one never freezes the tree;
-- it is stopped at its instruction budget or by an interrupt (Ctrl-C).
local core = require "arbor.core"
local json = require "arbor.json"
local message = require("arbor.failure").message
local pretty = require "arbor.pretty"
local render = require "arbor.render"
local session = require "arbor.control.session"
local ops = require "arbor.control.ops"

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

--- Bytes a `logs -f` follower may leave unread before its lines are
-- dropped (counted, in the engine's log_lines_dropped, and told by a
-- marker line "... N lines dropped" once it reads again).
M.follow_backlog = 1 << 20

--- serve(e, path, opts) -> server | nil, "ENAME: message", "ENAME" (as
-- core.control_listen: EADDRINUSE when another arbor serves path, ...).
-- e is the engine object; opts.arbor is the arbor module (helpers),
-- opts.script the script name. The server has on_log(dn, line, time)
-- (arbor.run's log sink calls it), close() and path.
function M.serve(e, path, opts)
  opts = opts or {}
  local arbor = opts.arbor or require "arbor"
  -- What the operations use: the engine and the functions below.
  local S = {e = e, path = path, script = opts.script, arbor = arbor,
    started = e:now(), QUANTUM = QUANTUM}
  local clients = {}     -- client id -> {evals = {rid -> ev}, session}
  local runq = {}        -- evaluations ready to run, in order
  local followers = {}   -- key -> {cid, rid, what = "events"|"logs", dn, json}
  local nfollowers = 0
  local sub_id           -- the engine subscription while someone follows
  local current          -- the evaluation running now
  local srv              -- the C server

  function S.send(cid, rid, t)
    t.id = rid
    return srv:send(cid, json.encode(t))
  end
  local send = S.send

  --- Sends a frame already encoded (a reply built around C-made JSON).
  function S.send_raw(cid, frame) return srv:send(cid, frame) end

  function S.finish(cid, rid, t)
    t["end"] = true
    if t.ok == nil then t.ok = true end
    return send(cid, rid, t)
  end
  local finish = S.finish

  function S.fail(cid, rid, msg, extra)
    local t = extra or {}
    t.ok = false
    t.error = msg
    return finish(cid, rid, t)
  end
  local fail = S.fail

  function S.info() return srv:info() end
  function S.evaluations() return #runq end

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
          line = line or render.event(ev)
          send(f.cid, f.rid, {out = line .. "\n"})
        end
      end
    end
  end

  --- Streams events (what = "events", of dn's subtree when dn is given) or
  -- the log lines of dn (what = "logs") to the client's request rid, until
  -- unfollow. after: the newest event the client has already seen (a
  -- replay), so that events of the ring not delivered to subscribers yet do
  -- not reach it twice.
  function S.follow(cid, rid, what, dn, as_json, after)
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
  local follow = S.follow

  --- Ends the stream of the request whose key is cid .. "/" .. rid; true
  -- when there was one.
  function S.unfollow(key)
    if not followers[key] then return false end
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
    return true
  end
  local unfollow = S.unfollow

  local server = {path = path}

  --- Called by arbor.run's log sink: streams the line to `logs -f` clients
  -- following its DN or a DN above it.
  function server.on_log(dn, line, time, level, wall)
    if nfollowers == 0 or server.closed then return end
    for _, f in pairs(followers) do
      if f.what == "logs" and (dn == f.dn or dn:sub(1, #f.dn + 1) == f.dn .. ".") then
        if srv:unsent(f.cid) > M.follow_backlog then -- it does not keep up
          f.dropped = (f.dropped or 0) + 1
          core.log_dropped(e, 1)
          goto next
        elseif f.dropped then -- said before what comes next
          local text = string.format("... %d lines dropped (this follower did not keep up)", f.dropped)
          f.dropped = nil
          if f.json then
            send(f.cid, f.rid, {log = {dn = f.dn, line = text, time = time, level = "warn", wall = wall}})
          else
            send(f.cid, f.rid, {out = render.log(f.dn, text, time, "warn", wall) .. "\n"})
          end
        end
        if f.json then
          send(f.cid, f.rid, {log = {dn = dn, line = line, time = time, level = level, wall = wall}})
        else
          send(f.cid, f.rid, {out = render.log(dn, line, time, level, wall) .. "\n"})
        end
      end
      ::next::
    end
  end

  -- ---- evaluations ----

  local function unqueue(ev)
    for i, x in ipairs(runq) do
      if x == ev then table.remove(runq, i) break end
    end
  end

  --- Forgets the evaluation ev and closes its coroutine (its <close>
  -- variables run under the CLEANUP budget).
  function S.close_eval(ev)
    clients[ev.cid].evals[ev.rid] = nil
    unqueue(ev)
    if ev.follow_key then unfollow(ev.follow_key) end
    core.slice_close(ev.co, CLEANUP)
  end
  local close_eval = S.close_eval

  -- An evaluation's values, rendered for its reply (r as step() has it):
  -- the text the REPL prints, or the JSON array of the values.
  local function values_text(as_json, r)
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
      ev.co = coroutine.create(function() return values_text(ev.json, r) end)
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

  --- Ends the evaluation ev with the error msg (extra: more reply fields).
  function S.eval_error(ev, msg, extra)
    if ev.rendering then msg = "printing the result: " .. msg end
    local t = extra or {}
    t.traceback = t.traceback or debug.traceback(ev.co, msg)
    close_eval(ev)
    fail(ev.cid, ev.rid, msg, t)
  end
  local eval_error = S.eval_error

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

  --- Starts the evaluation ev ({cid, rid, co, used, budget, json}): runs
  -- its first slice now, then queues it while it wants to run.
  function S.evaluate(ev)
    clients[ev.cid].evals[ev.rid] = ev
    if step(ev, core.hrtime() + SLICE_NS) then
      runq[#runq + 1] = ev
      srv:busy()
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

  --- The client's state: {evals = {rid -> evaluation}, session}, made at
  -- its first use.
  function S.client(cid)
    local c = clients[cid]
    if not c then
      c = {evals = {}, session = session.new{e = e, arbor = arbor, out = out,
        current = function() return current end, follow = follow_eval, WAIT = WAIT,
        quantum = QUANTUM, budget = M.default_budget}}
      clients[cid] = c
    end
    return c
  end

  -- ---- the handler called by the C server ----

  local handler = {}

  function handler.on_frame(cid, payload)
    local req, err, code = json.decode(payload, true)
    if type(req) ~= "table" or not payload:find("^%s*{") then
      send(cid, json.null, {["end"] = true, ok = false,
        error = "protocol error: " .. (err and message(err, code) or "a request must be a JSON object")})
      return srv:drop(cid, "malformed request")
    end
    local rid = req.id
    if not (math.type(rid) == "integer" or type(rid) == "string") then
      send(cid, json.null, {["end"] = true, ok = false,
        error = "protocol error: a request needs an id (an integer or a string)"})
      return srv:drop(cid, "malformed request")
    end
    local op = ops.find(req.op)
    if not op then return fail(cid, rid, ops.unknown(req.op)) end
    -- every field of the request is one its op takes, of its type: a
    -- field meant otherwise (dry_run = "true") is refused, never ignored
    local bad, field = ops.check(req)
    if bad then return fail(cid, rid, bad, {field = field}) end
    ops.strip_nulls(req)
    local ok, perr = pcall(op, S, cid, rid, req)
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

  local err, code
  srv, err, code = core.control_listen(e, path, handler)
  if not srv then return nil, err, code end
  -- the gauge arbor_control_clients (docs/observability.md)
  require("arbor.metrics").configure(e, {control_clients = function()
    return srv:info().clients
  end})

  function server.close()
    if server.closed then return end
    server.closed = true
    if sub_id then e:unsubscribe(sub_id) sub_id = nil end
    require("arbor.metrics").configure(e, {control_clients = false})
    srv:close()
  end
  return server
end

return M
