-- Lifecycle gate benchmark (issue 3): parents with five lifecycle children
-- each (a prestart job, a prestart sidecar, a main child, a poststart job,
-- a poststop job) reach steady state, then stop. Gates add no polling: the
-- coordinators are evaluated once per child state change at most, and no
-- timer is armed once the tree is steady.
-- Run by scripts/bench: build/arbor run --quiet spec/bench/lifecycle.lua [--small]
local arbor = require "arbor"
local core = require "arbor.core"
local testing = require "arbor.testing"

local bench = dofile((arg[0]:match("^(.*/)") or "") .. "support/common.lua")
local size, report = bench.size, bench.report
local parents = size(10000, 500)

local function count(name, value, note)
  print(string.format("%-52s %12d %s", name, value, note or ""))
end

local function job(c)
  c:signal("healthy")
  c:signal("done")
end

local function service(c)
  c:signal("healthy")
  c:wait()
end

local function parent(p)
  p:run("migrate", job, {lifecycle = "prestart"})
  p:run("proxy", service, {lifecycle = "prestart", sidecar = true})
  p:run("app", service)
  p:run("warm", job, {lifecycle = "poststart"})
  p:run("flush", job, {lifecycle = "poststop"})
  p:signal("healthy")
  p:wait()
end

bench.banner("lifecycle")

local h = testing.new{ring = 1024}
-- state changes of the lifecycle children (depth 2 below the root)
local changes, running = 0, 0
h:on_event(function(ev)
  local depth = select(2, ev.dn:gsub("%.", ""))
  if ev.kind == "state" and depth == 2 then
    changes = changes + 1
  elseif ev.kind == "coordinator" and ev.to == "running" and depth == 1 then
    running = running + 1
  end
end)
local t0 = core.hrtime()
h:start(function(ctx)
  for i = 1, parents do ctx:run("p" .. i, parent) end
  ctx:signal("healthy")
  ctx:wait()
end)
local secs = (core.hrtime() - t0) / 1e9
local st = h:stats()
count(string.format("steady: parents in state running (of %d)", parents), running)
count("steady: child state changes", changes)
count("steady: FSM evaluations", st.lifecycle_evaluations,
  string.format("(%.3f per child state change; coordinator moves %d)",
    st.lifecycle_evaluations / changes, st.lifecycle_moves))
report("steady: FSM evaluations per child state change",
  st.lifecycle_evaluations / changes, "", "<= 1", st.lifecycle_evaluations <= changes)
report(string.format("steady: %d nodes built and coordinated", parents * 6), secs,
  "s", "", true)
local timers = h.engine:next_timer() and 1 or 0
report("steady: timers armed (no polling)", timers, "", "0", timers == 0)
assert(running == parents, "not every parent reached running")

-- Stop: every parent's sidecar and main stop, then its poststop runs.
local e0, c0 = st.lifecycle_evaluations, changes
t0 = core.hrtime()
h:stop()
secs = (core.hrtime() - t0) / 1e9
st = h:stats()
count("stop: child state changes", changes - c0)
count("stop: FSM evaluations", st.lifecycle_evaluations - e0)
report("stop: FSM evaluations per child state change",
  (st.lifecycle_evaluations - e0) / (changes - c0), "", "<= 1",
  st.lifecycle_evaluations - e0 <= changes - c0)
report(string.format("stop: %d parents through poststop", parents), secs, "s",
  "", true)
h:close()

-- The same tree on the real clock: once steady, nothing runs: no resume,
-- no evaluation, and the loop sleeps (the measuring sleep itself accounts
-- for one wakeup; a loaded machine can add one when that timer fires a
-- millisecond early).
local n = size(1000, 100)
local secs_idle = size(2, 0.2)
local wakeups, work
bench.measure(function(ctx)
  for i = 1, n do ctx:run("p" .. i, parent) end
end, function(c)
  c:sleep(0.5) -- let the others settle
  local e = core.current()
  local s0 = e:stats()
  c:sleep(secs_idle)
  local s1 = e:stats()
  wakeups = s1.wakeups - s0.wakeups - 1
  -- the measuring node's own resume is the one expected
  work = (s1.resumes - s0.resumes - 1)
    + (s1.lifecycle_evaluations - s0.lifecycle_evaluations)
end)
report(string.format("idle: resumes + FSM evaluations, %d parents, %gs", n,
  secs_idle), work, "", "0", work == 0)
report(string.format("idle: loop wakeups, %d parents, %gs", n, secs_idle),
  wakeups, "", "0", wakeups == 0)
