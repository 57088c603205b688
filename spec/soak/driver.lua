-- The soak's driver (scripts/soak starts it next to `arbor run
-- spec/soak/tree.lua`): injects faults at random from a seed, floods the
-- control socket (spec/soak/flood.lua), samples arbor's RSS, descriptors and
-- zombie children, then waits until every fault it injected has taken
-- effect and exits; scripts/soak then stops arbor and spec/soak/check.lua
-- reads what everyone wrote.
--
--   lua5.4 spec/soak/driver.lua SOCKET ARBOR_PID DIR SEED SECONDS [RATE [FLOOD]]
--
-- It writes in DIR:
--   faults   one line per fault: k, time, kind, dn, and SOAK.inject's answer
--            ("ok <inc> <seq> [pid]" or "skip <why>"), then "sent" or
--            "missed <why>" for a signal
--   samples  every 0.5 s: time, RSS (KiB), open descriptors, zombie
--            children, pipes, sockets
--   fds-first, fds-last   arbor's descriptors at the first and last sample
--   fd-leaks  arbor's descriptors found open in its processes
--   driver   key=value figures: the last event's seq before the stop, eval
--            round trips, zombies, descriptor looks, the flood's counts
local uv = require "luv"
local wire = require "soak.wire"
local flood = require "soak.flood"
local look = require "soak.look"

local sock, pid, dir = arg[1], tonumber(arg[2]), arg[3]
local seed, seconds = tonumber(arg[4]), tonumber(arg[5])
local rate = tonumber(arg[6] or "8")
local nflood = tonumber(arg[7] or "4")

local t0 = uv.hrtime()
local function now() return (uv.hrtime() - t0) / 1e9 end

local out = {}         -- figures for the driver file
local function figure(k, v) out[#out + 1] = k .. "=" .. tostring(v) end

-- ---- the layout: what may be targeted --------------------------------------

local targets = {any = {}, signal = {}, flag = {}}   -- pool -> {dn, unit}
for line in io.lines(dir .. "/layout") do
  local dn, unit, role = line:match("^(%S+)\t(%S+)\t(%S+)$")
  if unit ~= "stub" then
    local t = {dn = dn, unit = unit}
    table.insert(targets.any, t)
    if role == "proc" or role == "execer" then table.insert(targets.signal, t) end
    if role == "head" or role == "worker" then table.insert(targets.flag, t) end
  end
end

-- kind, weight, target pool
local KINDS = {
  {"kill", 18, "signal"}, {"term", 10, "signal"}, {"stopcont", 8, "signal"},
  {"fail", 14, "any"}, {"flag", 14, "flag"}, {"restart", 8, "any"},
  {"stop", 3, "any"}, {"revive", 6, "any"}, {"swap", 5, "any"},
  {"swap_restart", 4, "any"}, {"policy", 8, "any"},
}
local total_weight = 0
for _, k in ipairs(KINDS) do total_weight = total_weight + k[2] end

local SIGNALS = {kill = "sigkill", term = "sigterm", stopcont = "sigstop"}

-- ---- evaluations over one connection -----------------------------------------

local conn
local next_id = 0
local rtt_max, rtt_sum, rtt_n = 0, 0, 0
local EVAL_TIMEOUT = 60000

-- Evaluates code in the engine; returns its first value, or nil and why.
local function eval(code)
  next_id = next_id + 1
  local t = uv.hrtime()
  local f, err = conn:request({id = next_id, op = "eval", code = code, json = true},
    EVAL_TIMEOUT)
  local dt = (uv.hrtime() - t) / 1e9
  rtt_max = math.max(rtt_max, dt)
  rtt_sum, rtt_n = rtt_sum + dt, rtt_n + 1
  if not f then
    if err == "timeout" then conn:close() end -- a frozen engine: stop asking
    return nil, err
  end
  if not f.ok then return nil, tostring(f.error) end
  return f.values and f.values[1]
end

-- ---- sampling ------------------------------------------------------------------

local zombies = {}       -- "pid:starttime" -> first seen
local zombie_max_age, zombie_seen = 0, 0
local sampling = true

local function read(path)
  local f = io.open(path)
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

-- arbor's open descriptors: how many, how many pipes and sockets, and
-- what each one is ("fd target" lines).
local function fds()
  local n, pipes, socks, list = 0, 0, 0, {}
  local base = "/proc/" .. pid .. "/fd/"
  local h = uv.fs_scandir(base)
  if not h then return nil end
  while true do
    local fd = uv.fs_scandir_next(h)
    if not fd then break end
    local target = uv.fs_readlink(base .. fd) or "?"
    n = n + 1
    if target:match("^pipe:") then pipes = pipes + 1 end
    if target:match("^socket:") then socks = socks + 1 end
    list[#list + 1] = fd .. " " .. target
  end
  return n, pipes, socks, list
end

-- arbor's children now (the pids of every thread's children).
local function children()
  local found = {}
  local h = uv.fs_scandir("/proc/" .. pid .. "/task")
  while h do
    local task = uv.fs_scandir_next(h)
    if not task then break end
    for child in (read("/proc/" .. pid .. "/task/" .. task .. "/children") or ""):gmatch("%d+") do
      found[#found + 1] = child
    end
  end
  return found
end

-- Looks at arbor's children's descriptors for arbor's (spec/soak/look.lua).
local looker = look.new(pid)
local fd_checks, fd_leaks, leaked = 0, 0, {}

local function check_child_fds(child, mine)
  local leaks = looker:look(child, mine)
  if not leaks then return end
  fd_checks = fd_checks + 1
  for _, what in ipairs(leaks) do
    fd_leaks = fd_leaks + 1
    if not leaked[what] then
      leaked[what] = true
      leaked[#leaked + 1] = what
    end
  end
end

-- Zombie children of arbor now: a list of "pid:starttime".
local function zombie_children()
  local found = {}
  for _, child in ipairs(children()) do
    local rest = (read("/proc/" .. child .. "/stat") or ""):match("%) (.*)$")
    if rest then
      local fields = {}
      for w in rest:gmatch("%S+") do fields[#fields + 1] = w end
      -- after the comm: state is field 3, starttime field 22 of stat(5)
      if fields[1] == "Z" then found[#found + 1] = child .. ":" .. fields[20] end
    end
  end
  return found
end

local samples = assert(io.open(dir .. "/samples", "w"))

local first_fds, last_fds

local function sample()
  local status = read("/proc/" .. pid .. "/status")
  if not status then return false end
  local rss = tonumber(status:match("VmRSS:%s*(%d+)"))
  local nfds, pipes, socks, list = fds()
  first_fds = first_fds or list
  last_fds = list
  local t = now()
  local zs = zombie_children()
  local still = {}
  for _, z in ipairs(zs) do
    local first = zombies[z] or t
    if not zombies[z] then zombie_seen = zombie_seen + 1 end
    still[z] = first
    zombie_max_age = math.max(zombie_max_age, t - first)
  end
  zombies = still
  samples:write(string.format("%.2f\t%d\t%d\t%d\t%d\t%d\n", t, rss or 0,
    nfds or 0, #zs, pipes or 0, socks or 0))
  return true
end

-- Writes a list of descriptors to a file of the run.
local function write_list(name, list)
  local f = assert(io.open(dir .. "/" .. name, "w"))
  f:write(table.concat(list or {}, "\n"), "\n")
  f:close()
end

local function sampler()
  local n = 0
  while sampling do
    if not sample() then break end
    n = n + 1
    if n % 4 == 0 then
      local mine = {}
      for _, l in ipairs(last_fds or {}) do mine[l:match("^%d+ (.*)$")] = true end
      for _, child in ipairs(children()) do check_child_fds(child, mine) end
    end
    wire.sleep(500)
  end
end

-- ---- faults ----------------------------------------------------------------------

local faults = assert(io.open(dir .. "/faults", "w"))
local pending_cont = {}   -- pid -> true while a SIGSTOP waits for its SIGCONT
local counts = {}

local function choose_kind()
  local x = math.random() * total_weight
  for _, k in ipairs(KINDS) do
    x = x - k[2]
    if x < 0 then return k end
  end
  return KINDS[#KINDS]
end

local function cont_later(p, ms)
  pending_cont[p] = true
  local t = uv.new_timer()
  t:start(ms, 0, function()
    t:close()
    if pending_cont[p] then
      pending_cont[p] = nil
      uv.kill(p, "sigcont")
    end
  end)
end

-- Injects fault k; with `unit`, into that unit when it has a target for
-- the kind (a burst). Returns whether to go on, and the unit it hit.
local function inject(k, deadline, unit)
  local kind = choose_kind()
  local pool = targets[kind[3]]
  if unit then
    local near = {}
    for _, t in ipairs(pool) do
      if t.unit == unit then near[#near + 1] = t end
    end
    if #near > 0 then pool = near end
  end
  local target = pool[math.random(#pool)]
  local dn = target.dn
  local r = math.random()
  local cont_ms = 100 + math.random(1900)   -- drawn always: the schedule
                                            -- does not depend on outcomes
  local res, err = eval(string.format("return SOAK.inject(%d, %q, %q, %.6f)",
    k, kind[1], dn, r))
  res = res or ("error " .. tostring(err))
  if err == "timeout" or conn.closed then
    -- a frozen or vanished engine: no use going on
    io.stderr:write("soak: the engine stopped answering (", tostring(err), ")\n")
    figure("lost_engine", tostring(err))
    deadline = 0
  end
  local line = string.format("%d\t%.3f\t%s\t%s\t%s", k, now(), kind[1], dn, res)
  local p = tonumber(res:match("^ok %d+ %d+ (%d+)$"))
  if p then
    local ok, kerr = uv.kill(p, SIGNALS[kind[1]])
    if ok then
      line = line .. "\tsent"
      if kind[1] == "stopcont" then cont_later(p, cont_ms) end
    else
      line = line .. "\tmissed " .. tostring(kerr)
    end
  end
  faults:write(line, "\n")
  local key = kind[1] .. (res:match("^ok") and "" or "-skipped")
  counts[key] = (counts[key] or 0) + 1
  if not res:match("^ok") and not res:match("^skip") then
    io.stderr:write("soak: fault ", k, " ", kind[1], " ", dn, ": ", res, "\n")
  end
  return now() < deadline, target.unit
end

local function injector()
  math.randomseed(seed)
  local deadline = seconds
  local k, unit, go = 0, nil, true
  while go do
    -- exponential intervals around 1/rate; a third of the time the next
    -- fault follows at once in the same unit, racing the one before
    if unit and math.random() < 1 / 3 then
      wire.sleep(0)
    else
      unit = nil
      wire.sleep(-math.log(1 - math.random()) / rate * 1000)
    end
    k = k + 1
    go, unit = inject(k, deadline, unit)
  end
  for p in pairs(pending_cont) do uv.kill(p, "sigcont") end
  pending_cont = {}
  figure("faults", k)
  -- every terminal fault must have ended its incarnation; wait for it
  local left
  for _ = 1, 300 do
    if conn.closed then break end
    left = eval("return SOAK.pending()") or "?"
    if left:match("^0 ") then break end
    wire.sleep(200)
  end
  figure("pending", (left:gsub(" ", ",")))
  figure("stop_seq", not conn.closed and eval("return SOAK.last_seq()") or "?")
  sample()
  figure("zombies_at_end", #zombie_children())
  sampling = false
end

-- ---- main --------------------------------------------------------------------------

wire.spawn(function()
  local err
  conn, err = wire.connect(sock)
  if not conn then
    io.stderr:write("soak: cannot connect to ", sock, ": ", tostring(err), "\n")
    os.exit(3)
  end
  local dns = {}
  for i, t in ipairs(targets.any) do dns[i] = t.dn end
  local stop_flood = flood.start(sock, nflood, seed, dns)
  wire.spawn(sampler)
  injector()
  local f = stop_flood()
  for k, v in pairs(f) do figure("flood_" .. k, v) end
  figure("eval_max", string.format("%.3f", rtt_max))
  figure("eval_mean", string.format("%.4f", rtt_sum / math.max(1, rtt_n)))
  figure("zombie_max_age", string.format("%.2f", zombie_max_age))
  figure("zombies_seen", zombie_seen)
  figure("child_fd_checks", fd_checks)
  figure("child_fd_leaks", fd_leaks)
  write_list("fd-leaks", leaked)
  local ks = {}
  for k, v in pairs(counts) do ks[#ks + 1] = k .. ":" .. v end
  table.sort(ks)
  figure("kinds", table.concat(ks, ","))
  conn:close()
  faults:close()
  samples:close()
  write_list("fds-first", first_fds)
  write_list("fds-last", last_fds)
  local f2 = assert(io.open(dir .. "/driver", "w"))
  f2:write(table.concat(out, "\n"), "\n")
  f2:close()
  uv.stop()
end)

uv.run()
