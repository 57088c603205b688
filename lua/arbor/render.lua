--- arbor.render: the text of trees, events and log lines, one form for
-- every place that shows them: `arbor run`'s printer on stderr, the REPL's
-- helpers (tree, events, watch, logs), `arbor ctl` and arbor.render().
-- It returns text; escaping control characters for a terminal is the
-- writer's business (arbor.term).
local M = {}

--- Seconds as a short duration: 4.2s, 3m07s, 5h02m, 2d03h; "-" for nil.
function M.duration(s)
  if not s then return "-" end
  if s < 60 then return string.format("%.1fs", s) end
  if s < 3600 then return string.format("%dm%02ds", s // 60, math.floor(s % 60)) end
  if s < 86400 then return string.format("%dh%02dm", s // 3600, math.floor(s % 3600) // 60) end
  return string.format("%dd%02dh", s // 86400, math.floor(s % 86400) // 3600)
end

-- The first line of s, cut at 120 bytes: what a tree line shows of an error.
local function first_line(s)
  local l = tostring(s):match("^[^\n]*")
  if #l > 120 then l = l:sub(1, 117) .. "..." end
  return l
end

--- note(n) -> text | nil: why the node of a snapshot (or e:node fields) is
-- down, as `arbor ctl status` and the drawn tree say it: "restart in 4.2s",
-- "crash-looping, restart in 4.2s" (DEAD, waiting for a restart after 2 or
-- more failures in a row: Kubernetes' CrashLoopBackOff), "given up (policy
-- stop)", "held" (stopped by hand); nil for a node that runs or ended DONE.
function M.note(n)
  local again = n.restart_in and "restart in " .. M.duration(math.max(0, n.restart_in))
  if n.note and again then return n.note .. ", " .. again end
  return n.note or again
end

-- One node of a snapshot: its name and state, its lifecycle when not main,
-- whether it is blocked at its gate, its coordinator's state (a gated
-- parent, until it is running), uptime, restarts and last error (while not
-- healthy or done).
local function label(n)
  local s = string.format("%s [%s]", n.name, n.state)
  if n.lifecycle and n.lifecycle ~= "main" then
    s = s .. " " .. n.lifecycle .. (n.sidecar and " sidecar" or "")
  end
  if n.blocked then s = s .. " blocked" end
  if n.gated and n.coordinator ~= "running" then
    s = s .. " {" .. tostring(n.coordinator) .. "}"
  end
  if n.pid then s = s .. " pid " .. n.pid end
  if n.uptime then s = s .. " up " .. M.duration(n.uptime) end
  if n.restarts and n.restarts > 0 then
    s = s .. string.format(" restarts=%d", n.restarts)
  end
  local note = M.note(n)
  if note then s = s .. " " .. note end
  if n.overridden then s = s .. " (swapped at runtime)" end
  if n.error and n.state ~= "HEALTHY" and n.state ~= "DONE" then
    s = s .. "  last error: " .. first_line(n.error)
  end
  return s
end

--- tree(snapshot) -> text: a snapshot (arbor.tree(), h:tree()) drawn one
-- node a line, children indented under their parent.
function M.tree(t)
  local lines = {}
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

--- status_rows(snapshot) -> rows: the nodes of a snapshot (arbor.tree(),
-- e:tree()) depth first, one row each: {dn, state, pid, pids, uptime,
-- restarts, note, restart_in, last_exit, error}, as `arbor ctl status
-- --json` gives them.
function M.status_rows(t)
  local rows, stack = {}, {t}
  while #stack > 0 do
    local n = table.remove(stack)
    rows[#rows + 1] = {dn = n.dn, state = n.state, pid = n.pid, pids = n.pids,
      uptime = n.uptime, restarts = n.restarts, note = n.note,
      restart_in = n.restart_in, last_exit = n.last_exit, error = n.error}
    local kids = n.children or {}
    for i = #kids, 1, -1 do stack[#stack + 1] = kids[i] end
  end
  return rows
end

--- status(rows) -> text: the rows of status_rows as a table, one node a
-- line, as `supervisorctl status` prints its programs: DN, STATE, PID,
-- UPTIME (since HEALTHY), RESTARTS, then why a node is down (note) and
-- its last error while it is not HEALTHY or DONE.
function M.status(rows)
  local w = 2
  for _, r in ipairs(rows) do w = math.max(w, #r.dn) end
  local fmt = "%-" .. w .. "s  %-8s  %-7s  %-7s  %8s  %s"
  local lines = {(fmt:format("DN", "STATE", "PID", "UPTIME", "RESTARTS", "")
    :gsub("%s+$", ""))}
  for _, r in ipairs(rows) do
    local why = M.note(r) or ""
    if r.error and r.state ~= "HEALTHY" and r.state ~= "DONE" then
      why = why .. (why ~= "" and "; " or "") .. "last error: " .. first_line(r.error)
    end
    lines[#lines + 1] = (fmt:format(r.dn, r.state, r.pid or "-",
      r.uptime and M.duration(r.uptime) or "-", r.restarts, why):gsub("%s+$", ""))
  end
  return table.concat(lines, "\n")
end

--- clock(t) -> text: a time as people read it: a wall-clock time
-- (seconds since the epoch: "15:04:05.123", local time) or, under the
-- virtual clock (engine seconds), "    12.345".
function M.clock(t)
  if t >= 1e9 then
    local s = math.floor(t)
    return os.date("%H:%M:%S", s) .. string.format(".%03d", math.min(999, math.floor((t - s) * 1000)))
  end
  return string.format("%10.3f", t)
end
local clock = M.clock

--- rfc3339(wall) -> "2006-01-02T15:04:05.000Z": a wall-clock time (UTC,
-- milliseconds), as log files and --log-format json write it.
function M.rfc3339(wall)
  local s = math.floor(wall)
  return os.date("!%Y-%m-%dT%H:%M:%S", s) .. string.format(".%03dZ", math.min(999, math.floor((wall - s) * 1000)))
end

--- event(ev [, wall0]) -> text: one event (or gap) of the ring or a
-- subscription; with wall0 (wall-clock seconds at engine time 0, > 0 under
-- the real clock) its time is shown as a wall-clock time: ev.wall, the wall
-- clock when it happened, else (a gap) estimated from wall0.
function M.event(ev, wall0)
  if wall0 and wall0 > 0 then
    ev = setmetatable({time = ev.wall or ev.time + wall0}, {__index = ev})
  end
  if ev.kind == "gap" then -- T14: the subscriber missed these
    return string.format("%s %-24s gap: %d event(s) missed (seq %d-%d)",
      clock(ev.time), "(events)", ev.missed, ev.first, ev.last)
  elseif ev.kind == "state" and ev.from == ev.to then -- a first start
    return string.format("%s %-24s -> %s  (%s)", clock(ev.time), ev.dn, ev.to,
      ev.reason or "")
  elseif ev.kind == "state" then
    return string.format("%s %-24s %s -> %s%s", clock(ev.time), ev.dn, ev.from,
      ev.to, ev.reason and ("  " .. ev.reason) or "")
  elseif ev.kind == "coordinator" then
    return string.format("%s %-24s coordinator %s -> %s  (%s)", clock(ev.time),
      ev.dn, ev.from, ev.to, ev.reason or "")
  end
  return string.format("%s %-24s %s: %s", clock(ev.time), ev.dn, ev.kind,
    ev.reason or "")
end

--- log(dn, line, time [, level [, wall]]) -> text: one log line of the
-- node (or sub-logger) at dn, at its wall-clock time when wall is given;
-- a level other than info is written before the text ("WARN ...").
function M.log(dn, line, time, level, wall)
  local lv = level and level ~= "info" and level:upper() .. " " or ""
  return string.format("%s %-24s | %s%s", clock(wall or time), dn, lv, line)
end

--- json_log(dn, line, level, wall) -> the line as one JSON object,
-- {time, level, dn, msg} (--log-format json: what journald, Docker and
-- Kubernetes collectors ingest).
function M.json_log(dn, line, level, wall)
  local json = require "arbor.json"
  return json.encode{time = M.rfc3339(wall), level = level or "info", dn = dn, msg = line}
end

--- json_event(ev, wall0) -> an event as one JSON object: {time, level,
-- dn, msg} and the event's kind, from, to, reason; level warn for a death
-- or a gap, info otherwise.
function M.json_event(ev, wall0)
  local json = require "arbor.json"
  local dead = ev.to == "DEAD" or ev.kind == "gap"
  local text = M.event(ev):gsub("^%s*[%d%.]+ ", "")
  return json.encode{time = M.rfc3339(ev.wall or (wall0 or 0) + ev.time), level = dead and "warn" or "info",
    dn = ev.dn or "(events)", msg = (text:gsub("^%S+%s+", "", 1)), kind = ev.kind, from = ev.from,
    to = ev.to, reason = ev.reason}
end

--- The text of a list: fn(item) for each item, one a line, or `none` when
-- the list is empty.
function M.lines(list, fn, none)
  if #list == 0 then return none end
  local out = {}
  for i, x in ipairs(list) do out[i] = fn(x) end
  return table.concat(out, "\n")
end

return M
