-- The soak's checks: reads what the supervisor (spec/soak/tree.lua), the
-- driver (spec/soak/driver.lua), `arbor ctl events -f --json`, arbor's
-- stderr and scripts/soak wrote in the run's directory and prints one line
-- per check, PASS or FAIL with its figures, and a few examples under a FAIL.
--
--   lua5.4 spec/soak/check.lua DIR      exit 0 when every check passed
--
-- As a module (spec/soak_spec.lua): M.read(dir) -> data, M.run(data) ->
-- results {{name, ok, text, examples}}; data's parts are documented at
-- M.read.
local M = {}

local ENDS = {DEAD = true, CANCELED = true, DONE = true}
local TERMINAL = {kill = true, term = true, fail = true, flag = true,
  restart = true, stop = true, swap_restart = true}
local CANCELING = {restart = true, stop = true, swap_restart = true}

local function unit_of(dn) return dn:match("^root%.([^.]+)") end

-- ---- reading -------------------------------------------------------------------

local function lines(path)
  local f = io.open(path)
  if not f then return function() return nil end end
  return function()
    local l = f:read("l")
    if not l then f:close() end
    return l
  end
end

local function split(line)
  local t = {}
  for field in (line .. "\t"):gmatch("([^\t]*)\t") do t[#t + 1] = field end
  return t
end

local function keyvals(path)
  local t = {}
  for l in lines(path) do
    local k, v = l:match("^([%w_]+)=(.*)$")
    if k then t[k] = v end
  end
  return t
end

--- Parses a fault line of the driver.
function M.parse_fault(line)
  local f = split(line)
  local t = {k = tonumber(f[1]), time = tonumber(f[2]), kind = f[3], dn = f[4],
    result = f[5], signal = f[6]}
  local rest = t.result:match("^ok (.*)$")
  if rest then
    if t.kind == "revive" then
      local dn, inc, seq = rest:match("^(%S+) (%d+) (%d+)$")
      t.dn, t.inc, t.seq = dn, tonumber(inc), tonumber(seq)
    else
      local inc, seq, pid = rest:match("^(%d+) (%d+) ?(%d*)$")
      t.inc, t.seq, t.pid = tonumber(inc), tonumber(seq), tonumber(pid)
    end
    -- a signal the driver could not send is no fault
    t.ok = t.seq ~= nil and not (t.signal and t.signal:match("^missed"))
  end
  return t
end

--- Parses arbor run's stderr: log lines of numbered writers, in order,
-- as {dn = printed DN, writer = id, n = number}, and sanitizer reports.
function M.parse_stderr(path)
  local logs, reports = {}, {}
  for l in lines(path) do
    -- the wall-clock time (15:08:11.058) arbor run prints, or engine seconds
    local dn, text = l:match("^%s*[%d:]+%.%d+ (%S+)%s+| (.*)$")
    if dn then
      local w, n = text:match("^L (%S+) (%d+)$")
      if not w then w, n = text:match("^stdout: L (%S+) (%d+)$") end
      if w then logs[#logs + 1] = {dn = dn, writer = w, n = tonumber(n)} end
    elseif l:match("ERROR: AddressSanitizer") or l:match("ERROR: LeakSanitizer")
        or l:match("runtime error: ") then
      reports[#reports + 1] = l
    end
  end
  return logs, reports
end

--- Reads a run's directory. data:
--   layout   {[dn] = {unit, role}}
--   events   the in-tree subscriber's events, in file order:
--            {seq, kind, dn, inc, from, to, reason}
--   ctl      the events of `arbor ctl events -f --json` (same fields)
--   faults   the driver's faults (M.parse_fault)
--   logs     numbered log lines in stderr order (M.parse_stderr)
--   reports  sanitizer report lines
--   counts   {[dn] = last number a Lua writer logged}
--   ledgers  {[process writer id] = last number it wrote}
--   samples  {{t, rss, fds, zombies}}
--   driver   the driver's figures; run: scripts/soak's (key = value)
function M.read(dir)
  local json = require "arbor.json"
  local d = {layout = {}, events = {}, ctl = {}, faults = {}, counts = {},
    ledgers = {}, samples = {}}
  for l in lines(dir .. "/layout") do
    local f = split(l)
    d.layout[f[1]] = {unit = f[2], role = f[3]}
  end
  for l in lines(dir .. "/events") do
    local f = split(l)
    d.events[#d.events + 1] = {seq = tonumber(f[1]), kind = f[2], dn = f[3],
      inc = tonumber(f[4]), from = f[5], to = f[6], reason = f[7]}
  end
  for l in lines(dir .. "/ctl-events") do
    local ev = json.decode(l)
    if type(ev) == "table" and ev.seq then
      d.ctl[#d.ctl + 1] = {seq = ev.seq, kind = ev.kind, dn = ev.dn,
        inc = ev.incarnation, from = ev.from, to = ev.to}
    end
  end
  for l in lines(dir .. "/faults") do d.faults[#d.faults + 1] = M.parse_fault(l) end
  d.logs, d.reports = M.parse_stderr(dir .. "/stderr")
  for l in lines(dir .. "/counts") do
    local f = split(l)
    d.counts[f[1]] = tonumber(f[2])
  end
  local ls = io.popen("ls -1 " .. dir .. "/led 2>/dev/null")
  for id in ls:lines() do
    local f = io.open(dir .. "/led/" .. id)
    d.ledgers[id] = f and tonumber(f:read("a"):match("%d+")) or 0
    if f then f:close() end
  end
  ls:close()
  for l in lines(dir .. "/samples") do
    local f = split(l)
    d.samples[#d.samples + 1] = {t = tonumber(f[1]), rss = tonumber(f[2]),
      fds = tonumber(f[3]), zombies = tonumber(f[4]), pipes = tonumber(f[5]),
      sockets = tonumber(f[6])}
  end
  d.driver = keyvals(dir .. "/driver")
  d.fd_leaks = {}
  for l in lines(dir .. "/fd-leaks") do
    if l ~= "" then d.fd_leaks[#d.fd_leaks + 1] = l end
  end
  d.run = keyvals(dir .. "/run")
  return d
end

-- ---- incarnations ----------------------------------------------------------

-- Cuts the event stream into incarnations: a start (-> NEW) opens one for its
-- DN, an end (NEW or HEALTHY -> DEAD, CANCELED, DONE) closes it. Returns the
-- incarnations ({dn, inc, start, stop, ends = {end events}}), by DN too, the
-- ends of nodes that never started, the changes of exited nodes (DEAD ->
-- CANCELED: a delayed restart dropped when the parent was canceled, T8) as
-- {ev, after = the end of its incarnation}, and anomalies (text).
local function incarnations(events)
  local open, last, by_dn = {}, {}, {}
  local all, unstarted, drops, anomalies = {}, {}, {}, {}
  for _, ev in ipairs(events) do
    if ev.kind == "state" and ev.to == "NEW" then
      if open[ev.dn] then
        anomalies[#anomalies + 1] = string.format("%s#%d started again (seq %d) before #%d ended",
          ev.dn, ev.inc, ev.seq, open[ev.dn].inc)
      end
      local c = {dn = ev.dn, inc = ev.inc, start = ev.seq, ends = {}}
      open[ev.dn] = c
      all[#all + 1] = c
      by_dn[ev.dn] = by_dn[ev.dn] or {}
      table.insert(by_dn[ev.dn], c)
    elseif ev.kind == "state" and ENDS[ev.to] and ENDS[ev.from] and ev.from ~= ev.to then
      local c = last[ev.dn]
      drops[#drops + 1] = {ev = ev, after = c and c.inc == ev.inc and c.stop or nil}
    elseif ev.kind == "state" and ENDS[ev.to] and ev.from ~= ev.to then
      local c = open[ev.dn]
      if c then
        if c.inc ~= ev.inc then
          anomalies[#anomalies + 1] = string.format("%s#%d ended as incarnation %d (seq %d)",
            ev.dn, c.inc, ev.inc, ev.seq)
        end
        c.ends[1], c.stop, c.last = ev, ev.seq, ev
        open[ev.dn], last[ev.dn] = nil, c
      elseif last[ev.dn] and last[ev.dn].inc == ev.inc then
        table.insert(last[ev.dn].ends, ev)
        anomalies[#anomalies + 1] = string.format("%s#%d ended again (seq %d, %s)",
          ev.dn, ev.inc, ev.seq, ev.to)
      else
        unstarted[#unstarted + 1] = ev
      end
    end
  end
  return all, by_dn, unstarted, drops, anomalies
end

-- The incarnation of dn numbered inc that was running after event seq.
local function running_at(by_dn, dn, inc, seq)
  for _, c in ipairs(by_dn[dn] or {}) do
    if c.inc == inc and c.start <= seq and (not c.stop or c.stop > seq) then
      return c
    end
  end
end

-- Sorted seqs per unit, and a query: is there one in (lo, hi)?
local function index(items)
  local t = {}
  for _, it in ipairs(items) do
    local u = unit_of(it.dn)
    if u then
      t[u] = t[u] or {}
      table.insert(t[u], it.seq)
    end
  end
  for _, s in pairs(t) do table.sort(s) end
  return function(unit, lo, hi)
    local s = t[unit]
    if not s then return false end
    local a, b = 1, #s + 1        -- first index with s[i] > lo
    while a < b do
      local m = (a + b) // 2
      if s[m] > lo then b = m else a = m + 1 end
    end
    return s[a] ~= nil and s[a] < hi
  end
end

-- Whether fault f's kind would end its incarnation with event ev.
local function signature(f, ev)
  if f.kind == "kill" then return ev.to == "DEAD" and ev.reason:find("signal 9", 1, true) ~= nil end
  if f.kind == "term" then return ev.to == "DEAD" and ev.reason:find("signal 15", 1, true) ~= nil end
  if f.kind == "fail" or f.kind == "flag" then
    return ev.to == "DEAD" and ev.reason == "soak fault #" .. f.k
  end
  return ev.to == "CANCELED"
end

-- ---- the checks ------------------------------------------------------------

local function result(name, ok, text, examples)
  return {name = name, ok = ok, text = text, examples = examples or {}}
end

local function example(t, s) if #t < 5 then t[#t + 1] = s end end

-- Consecutive seqs, from 1 when `from_one`.
local function check_seq(name, events, from_one)
  local gaps, ex = 0, {}
  local first = events[1] and events[1].seq
  if from_one and first ~= 1 then
    gaps = gaps + 1
    example(ex, "starts at seq " .. tostring(first))
  end
  for i = 2, #events do
    if events[i].seq ~= events[i - 1].seq + 1 then
      gaps = gaps + 1
      example(ex, string.format("seq %d after %d", events[i].seq, events[i - 1].seq))
    end
  end
  local last = events[#events] and events[#events].seq
  return result(name, #events > 0 and gaps == 0, string.format("%d events, seq %s..%s, %d gaps",
    #events, tostring(first), tostring(last), gaps), ex), last
end

local function check_ctl(d, stop_seq)
  local r, last = check_seq("event stream (arbor ctl events -f --json)", d.ctl, false)
  local by_seq = {}
  for _, ev in ipairs(d.events) do by_seq[ev.seq] = ev end
  local differ = 0
  for _, ev in ipairs(d.ctl) do
    local e = by_seq[ev.seq]
    if not e or e.dn ~= ev.dn or e.kind ~= ev.kind or e.inc ~= ev.inc
        or (e.to or "") ~= (ev.to or "") then
      differ = differ + 1
      example(r.examples, "seq " .. ev.seq .. " differs from the subscriber's")
    end
  end
  local covers = last ~= nil and last >= (stop_seq or math.huge)
  if not covers then example(r.examples, "ends before the stop (seq " .. tostring(stop_seq) .. ")") end
  r.ok = r.ok and differ == 0 and covers
  r.text = r.text .. string.format(", %d differing from the subscriber's", differ)
  return r
end

local function check_faults(d, by_dn, dead, escalated)
  local cancel_faults = {}
  for _, f in ipairs(d.faults) do
    if f.ok and CANCELING[f.kind] then
      cancel_faults[#cancel_faults + 1] = {dn = f.dn, seq = f.seq, k = f.k}
    end
  end
  local n, own, preempted, unmatched, twice = 0, 0, 0, 0, 0
  local skipped, errors, by_kind = 0, 0, {}
  local ex = {}
  local matched = {}    -- incarnation -> fault
  local swaps, policies, revives = {}, {}, {}
  for _, f in ipairs(d.faults) do
    if not f.ok then
      if f.result:match("^skip") or (f.signal or ""):match("^missed") then
        skipped = skipped + 1
      else
        errors = errors + 1
        example(ex, string.format("fault #%d %s %s: %s", f.k, f.kind, f.dn, f.result))
      end
    else
      n = n + 1
      by_kind[f.kind] = (by_kind[f.kind] or 0) + 1
      if TERMINAL[f.kind] then
        local c = running_at(by_dn, f.dn, f.inc, f.seq)
        if not c then
          unmatched = unmatched + 1
          example(ex, string.format("fault #%d %s %s#%d at seq %d: no such running incarnation in the events",
            f.k, f.kind, f.dn, f.inc, f.seq))
        elseif #c.ends == 0 then
          unmatched = unmatched + 1
          example(ex, string.format("fault #%d %s %s#%d at seq %d: no end event", f.k, f.kind, f.dn, f.inc, f.seq))
        elseif #c.ends > 1 then
          twice = twice + 1
          example(ex, string.format("fault #%d %s %s#%d: %d end events", f.k, f.kind, f.dn, f.inc, #c.ends))
        else
          local ev = c.ends[1]
          matched[c] = f
          if signature(f, ev) then
            own = own + 1
          else
            -- another cause came first: a death in its unit, a later fault
            -- canceling part of it, or an escalation
            local u = unit_of(f.dn)
            local cause = dead(u, f.seq, ev.seq) or escalated(u, f.seq, ev.seq)
            for _, g in ipairs(cancel_faults) do
              if g.k > f.k and unit_of(g.dn) == u and g.seq < ev.seq then cause = true break end
            end
            if cause then
              preempted = preempted + 1
            else
              unmatched = unmatched + 1
              example(ex, string.format("fault #%d %s %s#%d at seq %d: ended %s (%s) at seq %d, not by it and with no other cause",
                f.k, f.kind, f.dn, f.inc, f.seq, ev.to, ev.reason, ev.seq))
            end
          end
        end
      end
      if f.kind == "swap" or f.kind == "swap_restart" then table.insert(swaps, f) end
      if f.kind == "policy" then table.insert(policies, f) end
      if f.kind == "revive" then table.insert(revives, f) end
    end
  end
  -- a swap is one "runnable swapped" event and a policy replacement one
  -- "policy replaced", after the fault; none comes without a fault
  local function pair(list, want, what)
    local evs = {}
    for _, ev in ipairs(d.events) do
      if want(ev) then
        evs[ev.dn] = evs[ev.dn] or {}
        table.insert(evs[ev.dn], ev)
      end
    end
    local used = {}
    for _, f in ipairs(list) do
      local hit
      for _, ev in ipairs(evs[f.dn] or {}) do
        if not used[ev] and ev.seq > f.seq then hit = ev break end
      end
      if hit then
        used[hit] = true
        own = own + 1
      else
        unmatched = unmatched + 1
        example(ex, string.format("fault #%d %s %s at seq %d: no %s event", f.k, f.kind, f.dn, f.seq, what))
      end
    end
    for _, list2 in pairs(evs) do
      for _, ev in ipairs(list2) do
        if not used[ev] then
          twice = twice + 1
          example(ex, string.format("seq %d: %s %s without a fault", ev.seq, ev.dn, what))
        end
      end
    end
  end
  pair(swaps, function(ev) return ev.kind == "policy" and ev.reason == "runnable swapped" end, "runnable swapped")
  pair(policies, function(ev) return ev.kind == "policy" and ev.reason == "policy replaced" end, "policy replaced")
  -- a revival starts the next incarnation at once: the node's next start
  for _, f in ipairs(revives) do
    local c
    for _, x in ipairs(by_dn[f.dn] or {}) do
      if x.start > f.seq then c = x break end
    end
    if c and c.inc == f.inc + 1 then
      own = own + 1
    else
      unmatched = unmatched + 1
      example(ex, string.format("fault #%d revive %s#%d at seq %d: %s", f.k, f.dn, f.inc, f.seq,
        c and ("the next start is incarnation " .. c.inc) or "no start after it"))
    end
  end
  local kinds = {}
  for k, v in pairs(by_kind) do kinds[#kinds + 1] = k .. " " .. v end
  table.sort(kinds)
  return result("every fault matched by exactly one event",
    n > 0 and unmatched == 0 and twice == 0 and errors == 0,
    string.format("%d injected (%s), %d by their own event, %d preempted by another cause, "
      .. "%d unmatched, %d matched twice, %d skipped (target not running), %d evaluations failed",
      n, table.concat(kinds, ", "), own, preempted, unmatched, twice, skipped, errors), ex), matched
end

-- Every end of an incarnation has a reason: its own fault, a cause in its
-- unit between its start and its end (a death, a canceling fault, an
-- escalation), the final stop, or it is a job's DONE.
local function check_ends(d, all, unstarted, drops, matched, dead, escalated, canceled_by, stop_seq)
  local faults, caused, stopped, jobs, unexplained, forced = 0, 0, 0, 0, 0, 0
  local ex = {}
  for _, c in ipairs(all) do
    local ev = c.ends[1]
    if ev then
      local u = unit_of(c.dn)
      local role = (d.layout[c.dn] or {}).role
      if ev.reason == "forced" then forced = forced + 1 end
      if matched[c] then
        faults = faults + 1
      elseif ev.to == "DONE" and (role == "job" or role == "oneshot") then
        jobs = jobs + 1
      elseif ev.to == "CANCELED" and ev.seq > stop_seq then
        stopped = stopped + 1
      elseif ev.to == "CANCELED" and (dead(u, c.start, ev.seq)
          or canceled_by(u, c.start - 1, ev.seq) or escalated(u, c.start, ev.seq)) then
        caused = caused + 1
      elseif ev.to == "DEAD" and ev.reason:find("escalated", 1, true)
          and escalated(u, c.start, ev.seq) then
        caused = caused + 1
      else
        unexplained = unexplained + 1
        example(ex, string.format("%s#%d %s -> %s (%s) at seq %d", c.dn, c.inc,
          ev.from, ev.to, ev.reason, ev.seq))
      end
    end
  end
  local never = 0
  for _, ev in ipairs(unstarted) do
    if ev.to == "CANCELED" then never = never + 1
    else
      unexplained = unexplained + 1
      example(ex, string.format("%s#%d ended %s at seq %d without starting", ev.dn, ev.inc, ev.to, ev.seq))
    end
  end
  local dropped = 0
  for _, x in ipairs(drops) do
    local ev, u = x.ev, unit_of(x.ev.dn)
    if ev.to == "CANCELED" and (ev.seq > stop_seq or x.after and (dead(u, x.after, ev.seq)
        or canceled_by(u, x.after - 1, ev.seq) or escalated(u, x.after, ev.seq))) then
      dropped = dropped + 1
    else
      unexplained = unexplained + 1
      example(ex, string.format("%s#%d %s -> %s (%s) at seq %d after it exited", ev.dn, ev.inc,
        ev.from, ev.to, ev.reason, ev.seq))
    end
  end
  return result("every end of an incarnation explained", unexplained == 0,
    string.format("%d by their fault, %d by a cause in their unit, %d jobs done, %d by the final stop, "
      .. "%d never started, %d delayed restarts dropped, %d forced closed, %d unexplained",
      faults, caused, jobs, stopped, never, dropped, forced, unexplained), ex)
end

local function check_incarnations(all, anomalies)
  local left, ex = 0, {}
  for _, a in ipairs(anomalies) do example(ex, a) end
  for _, c in ipairs(all) do
    if not c.stop then
      left = left + 1
      example(ex, string.format("%s#%d (started at seq %d) never ended", c.dn, c.inc, c.start))
    end
  end
  return result("each incarnation starts once and ends once", #anomalies == 0 and left == 0,
    string.format("%d incarnations, %d anomalies, %d still running after the stop",
      #all, #anomalies, left), ex)
end

local function check_logs(d)
  local last, ex = {}, {}
  local lost, disorder, wrong_node = 0, 0, 0
  for _, l in ipairs(d.logs) do
    local owner = l.writer:match("^(.-)#%d+$") or l.writer
    if owner ~= l.dn then
      wrong_node = wrong_node + 1
      example(ex, string.format("%s %d printed under %s", l.writer, l.n, l.dn))
    end
    local prev = last[l.writer] or 0
    if l.n <= prev then
      disorder = disorder + 1
      example(ex, string.format("%s: %d after %d", l.writer, l.n, prev))
    else
      if l.n > prev + 1 then
        lost = lost + l.n - prev - 1
        example(ex, string.format("%s: lines %d..%d lost", l.writer, prev + 1, l.n - 1))
      end
      last[l.writer] = l.n
    end
  end
  -- a process may die between its first line and its ledger's creation:
  -- a ledger only says how many lines were written at least
  local procs, luas = 0, 0
  local function tail(id, n)
    local got = last[id] or 0
    if n > got then
      lost = lost + n - got
      example(ex, string.format("%s: wrote up to %d, %d arrived", id, n, got))
    end
  end
  for id, n in pairs(d.ledgers) do procs = procs + 1 tail(id, n) end
  for id, n in pairs(d.counts) do luas = luas + 1 tail(id, n) end
  return result("no lost log line", #d.logs > 0 and lost == 0 and disorder == 0 and wrong_node == 0,
    string.format("%d lines from %d writers (%d processes, %d Lua), %d lost, %d out of order, %d under another node",
      #d.logs, procs + luas, procs, luas, lost, disorder, wrong_node), ex)
end

local function median(t)
  if #t == 0 then return 0 end
  local s = table.move(t, 1, #t, 1, {})
  table.sort(s)
  return s[(#s + 1) // 2]
end

M.WARMUP = 5   -- seconds of samples left out while the tree starts

-- The first and last thirds of the samples' field, after the warm-up.
local function thirds(samples, field)
  local run = {}
  for _, s in ipairs(samples) do
    if s.t >= M.WARMUP then run[#run + 1] = s[field] end
  end
  local n = #run
  return table.move(run, 1, n // 3, 1, {}), table.move(run, n - n // 3 + 1, n, 1, {})
end

M.RSS_SLACK_KIB = 4096   -- growth allowed, or RSS_SLACK_RATIO if more
M.RSS_SLACK_RATIO = 0.10
M.QUARANTINE_KIB = 16384 -- ASan's quarantine under scripts/soak, filling up
M.FD_SLACK = 8

local function check_rss(d)
  local a, b = thirds(d.samples, "rss")
  local first, last, top = median(a), median(b), 0
  for _, s in ipairs(d.samples) do top = math.max(top, s.rss) end
  local bound = math.max(M.RSS_SLACK_KIB, first * M.RSS_SLACK_RATIO)
    + (d.run.sanitizer and M.QUARANTINE_KIB or 0)
  return result("RSS flat", #a >= 2 and last - first <= bound,
    string.format("median %.1f MiB in the first third of the run, %.1f MiB in the last "
      .. "(%+.1f MiB, bound +%.1f MiB), max %.1f MiB, %d samples",
      first / 1024, last / 1024, (last - first) / 1024, bound / 1024, top / 1024, #d.samples))
end

local function check_fds(d)
  local a, b = thirds(d.samples, "fds")
  local first, last = median(a), median(b)
  return result("open descriptors flat", #a >= 2 and last - first <= M.FD_SLACK,
    string.format("median %d in the first third, %d in the last (%+d, bound +%d)",
      first, last, last - first, M.FD_SLACK))
end

M.ZOMBIE_LINGER = 5   -- seconds a zombie child may wait to be reaped

local function check_zombies(d)
  local age = tonumber(d.driver.zombie_max_age or "")
  local at_end = tonumber(d.driver.zombies_at_end or "")
  return result("no zombie", age ~= nil and age <= M.ZOMBIE_LINGER and at_end == 0,
    string.format("%s zombie children seen in samples, the oldest %s s old (bound %d s), %s at the end",
      d.driver.zombies_seen or "?", d.driver.zombie_max_age or "?", M.ZOMBIE_LINGER,
      d.driver.zombies_at_end or "?"))
end

local function check_orphans(name, count, list)
  local n = tonumber(count or "")
  local ex = {}
  for p in (list or ""):gmatch("[^;]+") do example(ex, p) end
  return result(name, n == 0, string.format("%s processes of the tree left", count or "?"), ex)
end

local function check_exit(d, by_dn, stop_seq)
  -- the stubborn process ignores SIGTERM: running at the stop, it needs a
  -- SIGKILL, and such a stop is not clean (T12, issue 13)
  local stub
  for _, c in ipairs(by_dn["root.stub.s"] or {}) do
    if c.start <= stop_seq and (not c.stop or c.stop > stop_seq) then stub = c end
  end
  local forced = false
  for _, ev in ipairs(d.events) do
    if ev.seq > stop_seq and ev.kind == "state" and ev.reason == "forced" then forced = true end
  end
  local want = (stub or forced) and 1 or 0
  local got = tonumber(d.run.exit or "")
  return result("exit status after SIGTERM as documented (T12)", got == want,
    string.format("%s, expected %d (%s)", tostring(d.run.exit), want,
      want == 1 and (stub and "a process needed SIGKILL" or "a node was forced closed")
        or "everything stopped cleanly"))
end

-- No process of the tree left after kill -9 of arbor (key "kill9"), or of
-- its guard and then of arbor (key "guard": a new guard must have come).
local function check_kill9(d, key, name)
  local r = check_orphans(name, d.run[key .. "_left"], d.run[key .. "_list"])
  r.ok = r.ok and (tonumber(d.run[key .. "_before"] or "") or 0) > 0
  r.text = string.format("%s processes of the tree before, %s left %s s after",
    d.run[key .. "_before"] or "?", d.run[key .. "_left"] or "?", d.run[key .. "_wait"] or "?")
  if key == "guard" then
    local t = d.run.guard_replaced
    r.ok = r.ok and t ~= nil and t ~= ""
    r.text = (t and t ~= "" and ("a new guard after " .. t .. " s, ") or "no new guard, ") .. r.text
  end
  return r
end

local function check_flood(d)
  local f = d.driver
  local bad = tonumber(f.flood_bad or "")
  return result("control socket under flood",
    bad == 0 and (tonumber(f.flood_replies or "") or 0) > 0,
    string.format("%s requests, %s answered, %s refused (no node), %s bad or dropped, %s hang-ups, "
      .. "%s malformed frames refused, %s streamed frames; evaluations: mean %s s, max %s s",
      f.flood_requests or "?", f.flood_replies or "?", f.flood_refused or "?", f.flood_bad or "?",
      f.flood_hangups or "?", f.flood_malformed or "?", f.flood_streamed or "?",
      f.eval_mean or "?", f.eval_max or "?"))
end

local function check_child_fds(d)
  local leaks = tonumber(d.driver.child_fd_leaks or "")
  local checks = tonumber(d.driver.child_fd_checks or "") or 0
  return result("no descriptor leaks into a process", leaks == 0 and checks > 0,
    string.format("%d looks at a process's descriptors, %s of arbor's found beyond 0, 1, 2 and the notify one",
      checks, d.driver.child_fd_leaks or "?"), d.fd_leaks)
end

--- Runs every check on data; returns the results in print order.
function M.run(d)
  local stop_seq = tonumber(d.driver.stop_seq or "") or math.huge
  local all, by_dn, unstarted, drops, anomalies = incarnations(d.events)
  local deaths, escalations = {}, {}
  for _, ev in ipairs(d.events) do
    if ev.kind == "state" and ev.to == "DEAD" then deaths[#deaths + 1] = ev end
    if ev.kind == "policy" and ev.reason == "escalate" then escalations[#escalations + 1] = ev end
  end
  local cancels = {}
  for _, f in ipairs(d.faults) do
    if f.ok and CANCELING[f.kind] then cancels[#cancels + 1] = {dn = f.dn, seq = f.seq} end
  end
  local dead, escalated, canceled_by = index(deaths), index(escalations), index(cancels)
  local faults, matched = check_faults(d, by_dn, dead, escalated)
  local r = {
    (check_seq("event stream (in-tree subscriber)", d.events, true)),
    check_ctl(d, stop_seq ~= math.huge and stop_seq or nil),
    faults,
    check_ends(d, all, unstarted, drops, matched, dead, escalated, canceled_by, stop_seq),
    check_incarnations(all, anomalies),
    check_logs(d),
    check_rss(d),
    check_fds(d),
    check_zombies(d),
    check_child_fds(d),
    check_orphans("no orphan after SIGTERM", d.run.orphans_term, d.run.orphans_term_list),
    check_exit(d, by_dn, stop_seq),
    check_kill9(d, "kill9", "no orphan after kill -9 of arbor"),
    check_kill9(d, "guard", "no orphan after kill -9 of the guard, then of arbor"),
    check_flood(d),
    result("no sanitizer report", #d.reports == 0,
      string.format("%d report lines in arbor's stderr", #d.reports), d.reports),
  }
  return r
end

--- Prints the results; returns the number of failed checks.
function M.print(results)
  local failed = 0
  for _, r in ipairs(results) do
    if not r.ok then failed = failed + 1 end
    print(string.format("%s  %s: %s", r.ok and "PASS" or "FAIL", r.name, r.text))
    if not r.ok then
      for _, e in ipairs(r.examples) do print("        " .. e) end
    end
  end
  return failed
end

if arg and arg[0] and arg[0]:match("check%.lua$") then
  local failed = M.print(M.run(M.read(assert(arg[1], "usage: check.lua DIR"))))
  os.exit(failed == 0 and 0 or 1)
end

return M
