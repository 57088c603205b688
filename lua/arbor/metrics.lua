--- arbor.metrics: the engine's metrics in the Prometheus text format (or
-- OpenMetrics), users' own counters and gauges, and the same figures as a
-- Lua table (docs/observability.md). The engine's part is written in C at
-- scrape time (src/lua/l_metrics.c); this module adds the users' metrics.
local M = {}

local registered = {} -- name -> metric, in the order of registration
local order = {}

local Metric = {}
Metric.__index = Metric

local function number(what, v)
  if type(v) ~= "number" or v ~= v then
    error(what .. ": want a number, got " .. tostring(v), 3)
  end
  return v
end

--- counter:inc([n]): adds n (default 1, >= 0).
function Metric:inc(n)
  n = n == nil and 1 or number(self.name .. ":inc", n)
  if self.type == "counter" and n < 0 then
    error(self.name .. ":inc: a counter only goes up, got " .. n, 2)
  end
  self.value = self.value + n
end

--- gauge:set(v), gauge:dec([n]).
function Metric:set(v)
  if self.type ~= "gauge" then error(self.name .. ": set is for gauges", 2) end
  self.value = number(self.name .. ":set", v)
end

function Metric:dec(n)
  if self.type ~= "gauge" then error(self.name .. ": dec is for gauges", 2) end
  self.value = self.value - (n == nil and 1 or number(self.name .. ":dec", n))
end

function Metric:get() return self.value end

local function register(kind, name, help)
  local what = "arbor." .. kind .. "(name, help)"
  if type(name) ~= "string" or not name:match("^[%a_:][%w_:]*$") then
    error(what .. ": name must match [a-zA-Z_:][a-zA-Z0-9_:]*, got " .. tostring(name), 3)
  end
  if name:sub(1, 6) == "arbor_" then
    error(what .. ": names starting with arbor_ are arbor's own: " .. name, 3)
  end
  if kind == "counter" and name:sub(-6) ~= "_total" then
    error(what .. ": a counter's name ends in _total (Prometheus' convention): " .. name, 3)
  end
  if help ~= nil and type(help) ~= "string" then
    error(what .. ": help must be a string, got " .. type(help), 3)
  end
  local m = registered[name]
  if m then
    if m.type ~= kind then
      error(what .. ": " .. name .. " is already a " .. m.type, 3)
    end
    return m
  end
  m = setmetatable({name = name, type = kind, help = help or name, value = 0}, Metric)
  registered[name] = m
  order[#order + 1] = m
  return m
end

--- arbor.counter(name [, help]) -> counter (inc); the same one for the
-- same name. Exported with arbor's metrics for as long as the process runs.
function M.counter(name, help) return register("counter", name, help) end

--- arbor.gauge(name [, help]) -> gauge (set, inc, dec).
function M.gauge(name, help) return register("gauge", name, help) end

local function escape_help(s) return (s:gsub("\\", "\\\\"):gsub("\n", "\\n")) end

local function value(v)
  if v == math.huge then return "+Inf" elseif v == -math.huge then return "-Inf" end
  if math.type(v) == "integer" or v == math.floor(v) and math.abs(v) < 2^53 then
    return string.format("%d", v)
  end
  return string.format("%.17g", v)
end

-- What arbor.run (max_series) and the control server (control_clients, a
-- function: the clients connected now) tell about an engine.
local engines = setmetatable({}, {__mode = "k"})

--- configure(e, {max_series = n, control_clients = fn}): sets those of
-- e's settings that are given (false clears one).
function M.configure(e, t)
  local cfg = engines[e] or {}
  engines[e] = cfg
  for k, v in pairs(t) do
    if v == false then cfg[k] = nil else cfg[k] = v end
  end
end

-- The exposition: one string, (chunked) a table of strings and the length
-- of their concatenation, or (chunked == "render") a render of it.
local function exposition(e, opts, chunked)
  opts = opts or {}
  local cfg = engines[e] or {}
  local clients = cfg.control_clients and cfg.control_clients() or 0
  local out = {string.format("# HELP arbor_control_clients Clients connected to the "
    .. "control socket\n# TYPE arbor_control_clients gauge\narbor_control_clients %d\n",
    clients)}
  for _, m in ipairs(order) do
    local family = m.name
    if opts.openmetrics and m.type == "counter" then family = family:sub(1, -7) end
    out[#out + 1] = string.format("# HELP %s %s\n# TYPE %s %s\n%s %s\n", family,
      escape_help(m.help), family, m.type, m.name, value(m.value))
  end
  if opts.openmetrics then out[#out + 1] = "# EOF\n" end
  if chunked == "render" then
    return e:metrics_render(opts.openmetrics, opts.max_series or cfg.max_series,
      table.concat(out))
  end
  return e:metrics_text(opts.openmetrics, opts.max_series or cfg.max_series,
    table.concat(out), chunked)
end

--- text(e [, {openmetrics = bool, max_series = n}]) -> the exposition;
-- max_series defaults to arbor.run's (else 10,000).
function M.text(e, opts) return exposition(e, opts, false) end

--- chunks(e [, opts]) -> the same as a list of strings, and its length in
-- bytes: what /metrics writes (a large exposition is never copied whole).
function M.chunks(e, opts) return exposition(e, opts, true) end

--- render(e [, opts]) -> the same made in slices (what /metrics serves):
-- r:step(ns) renders for about ns nanoseconds and says whether it is done,
-- then r:result() -> the list of strings and its length; r:close(). The
-- nodes are read as the slices come (docs/observability.md: what a sliced
-- scrape shows); users' metrics and arbor_control_clients are read now.
function M.render(e, opts) return exposition(e, opts, "render") end

--- The content types of the two formats.
M.PROMETHEUS = "text/plain; version=0.0.4; charset=utf-8"
M.OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"

--- wants_openmetrics(accept): the scraper's Accept header asks for it.
function M.wants_openmetrics(accept)
  return accept ~= nil and accept:find("application/openmetrics-text", 1, true) ~= nil
end

--- table(e [, opts]) -> {[family] = {type, help, samples = {{name, labels,
-- value}, ...}}}: arbor.metrics(), the same figures as the text.
function M.table(e, opts)
  local families, current = {}, nil
  for line in M.text(e, opts):gmatch("[^\n]+") do
    local kind, name, rest = line:match("^# (%u+) (%S+) ?(.*)$")
    if kind then
      families[name] = families[name] or {samples = {}}
      current = families[name]
      if kind == "HELP" then current.help = rest end
      if kind == "TYPE" then current.type = rest end
    else
      local sname, labels, v = line:match("^([%w_:]+)(%b{}) (%S+)$")
      if not sname then sname, v = line:match("^([%w_:]+) (%S+)$") end
      local t = {}
      for k, lv in (labels or ""):gmatch('([%w_]+)="([^"]*)"') do t[k] = lv end
      current.samples[#current.samples + 1] = {name = sname, labels = t,
        value = v == "+Inf" and math.huge or tonumber(v)}
    end
  end
  return families
end

return M
