--- arbor.definition: what "the same definition" of a node means, the basis
-- of reload (docs/restore.md, docs/architecture.md#definitions).
--
-- A node is defined by its runnable and the options its parent gave. Two
-- definitions are the same when their canonical texts are equal. The
-- canonical text of a value:
--   nil, booleans, strings: the value; numbers: the value and whether it is
--     an integer or a float (1 and 1.0 differ, as math.type tells them);
--   a Lua function: its bytecode without debug information
--     (string.dump(f, true): moving a function to another line changes
--     nothing) and the canonical text of each of its upvalues, by position;
--     an upvalue _ENV that is the global table is written as the module _G;
--   a C function: the name it has in a loaded module (`string.format`,
--     `arbor.core.intensity_count`: the same in every arbor process, so a
--     definition written before a reexec is the one the new arbor makes),
--     else its identity (the same C function, nothing else, is the same);
--   a table: its pairs sorted by the canonical text of the keys, read raw;
--     its metatable does not count (no __pairs or __index runs). A module (a table in package.loaded, such
--     as the one `require "arbor"` gives) is written as its name, not its
--     contents: a runnable that reads a setting from a module it captured
--     does not change with the module (capture the value itself, `local
--     port = cfg.port`, to make it part of the definition);
--   a table or function met again inside itself (a cycle, or a value
--     shared by two upvalues): a reference to where it was met first;
--   userdata and coroutines: their type and identity.
-- So an arbor.exec runnable's argv, environment and options, which it
-- keeps as upvalues, are part of its text; a Lua runnable's definition
-- changes when its code or the values it captured change.
--
-- Upvalues are read as they are when the text is made: a runnable that
-- changed a captured counter while it ran is not the definition its script
-- gives any more, and a reload restarts it (docs/restore.md).
local M = {}

local dump, getupvalue = string.dump, debug.getupvalue
local mtype, fmt, concat, sort = math.type, string.format, table.concat, table.sort

-- The names of the tables in package.loaded, made once per text.
local function module_names()
  local names = {}
  for name, mod in next, package.loaded do
    if type(mod) == "table" and names[mod] == nil then names[mod] = name end
  end
  names[_G] = "_G"
  return names
end

local getinfo = debug.getinfo

-- The names of the C functions that are fields of loaded modules
-- ("string.format"): the shortest name, then the first in order, when a
-- function has several.
local function c_function_names(modules)
  local names = {}
  for mod, name in next, modules do
    for k, v in next, mod do
      if type(v) == "function" and type(k) == "string" and getinfo(v, "S").what == "C" then
        local full = name .. "." .. k
        local had = names[v]
        if not had or #full < #had or (#full == #had and full < had) then names[v] = full end
      end
    end
  end
  return names
end

-- The name of the C function f in a loaded module, or nil. The names are
-- made again when modules were loaded since, or f is not among them (a
-- field set since): scanning every module's fields costs a millisecond.
local c_names, c_loaded = nil, -1
local c_missed = setmetatable({}, {__mode = "k"}) -- in none: the count then
local function c_name(f, modules)
  local n = 0
  for _ in next, package.loaded do n = n + 1 end
  if n ~= c_loaded or (not c_names[f] and c_missed[f] ~= n) then
    c_names, c_loaded = c_function_names(modules), n
    if not c_names[f] then c_missed[f] = n end
  end
  return c_names[f]
end

-- ---- bytecode without line numbers ----------------------------------------
-- string.dump(f, true) drops the line of each instruction but keeps where
-- each function (f and the functions inside it) starts and ends. code()
-- writes those as 0, so that moving a function to other lines (a comment
-- added above it) leaves it the same. The format is Lua 5.4's (ldump.c).

local byte, sub = string.byte, string.sub
local HEADER = 4 + 1 + 1 + 6 + 3 + 8 + 8 + 1 -- up to the main upvalue count

-- Reads the size at i (7 bits a byte, the last byte has 0x80): size, next.
local function size_at(s, i)
  local x = 0
  repeat
    local b = byte(s, i)
    x = (x << 7) | (b & 0x7f)
    i = i + 1
  until b >= 0x80
  return x, i
end

-- Copies the function at i into out with its lines as 0; returns the next i.
local function function_at(s, i, out)
  local from, n, _ = i, nil, nil
  n, i = size_at(s, i) -- source: 0 (stripped), else its length + 1
  if n > 0 then i = i + n - 1 end
  out[#out + 1] = sub(s, from, i - 1)
  _, i = size_at(s, i) -- linedefined
  _, i = size_at(s, i) -- lastlinedefined
  out[#out + 1] = "\x80\x80" -- both 0
  from = i
  i = i + 3 -- numparams, is_vararg, maxstacksize
  n, i = size_at(s, i) -- code
  i = i + 4 * n
  n, i = size_at(s, i) -- constants
  for _ = 1, n do
    local tag = byte(s, i)
    i = i + 1
    if tag == 0x03 or tag == 0x13 then -- integer, float
      i = i + 8
    elseif tag == 0x04 or tag == 0x14 then -- short, long string
      local len
      len, i = size_at(s, i)
      if len > 0 then i = i + len - 1 end
    end -- nil, false, true: the tag only
  end
  n, i = size_at(s, i) -- upvalues: instack, idx, kind
  i = i + 3 * n
  n, i = size_at(s, i) -- the functions inside
  out[#out + 1] = sub(s, from, i - 1)
  for _ = 1, n do i = function_at(s, i, out) end
  from = i
  for _ = 1, 4 do -- stripped debug information: four empty lists
    n, i = size_at(s, i)
    if n ~= 0 then error("not stripped", 0) end
  end
  out[#out + 1] = sub(s, from, i - 1)
  return i
end

--- code(f) -> f's bytecode without debug information or line numbers, or
-- nil for a C function.
function M.code(f)
  local ok, s = pcall(dump, f, true)
  if not ok then return nil end
  if byte(s, 5) ~= 0x54 then return s end -- not Lua 5.4's format: as it is
  local out = {sub(s, 1, HEADER)}
  local ok2, last = pcall(function_at, s, HEADER + 1, out)
  if not ok2 or last ~= #s + 1 then return s end -- not understood: lines count
  return concat(out)
end

local function scalar(v)
  local t = type(v)
  if t == "nil" then return "nil" end
  if t == "boolean" then return v and "true" or "false" end
  if t == "number" then
    if mtype(v) == "integer" then return fmt("i%d", v) end
    if v ~= v then return "fnan" end
    return fmt("f%.17g", v)
  end
  if t == "string" then return fmt("s%d:%s", #v, v) end
  return nil
end

--- text(v) -> the canonical text of v (see above).
function M.text(v)
  local out, n = {}, 0
  local seen, count = {}, 0 -- tables and functions met: their order
  local modules -- made on the first table
  local function put(s)
    n = n + 1
    out[n] = s
  end
  local function walk(x)
    local s = scalar(x)
    if s then return put(s) end
    local t = type(x)
    if t == "table" then
      modules = modules or module_names()
      if modules[x] then return put(fmt("m%d:%s", #modules[x], modules[x])) end
    end
    if t == "table" or t == "function" then
      if seen[x] then return put(fmt("r%d", seen[x])) end
      count = count + 1
      seen[x] = count
    end
    if t == "table" then
      -- keys in the order of their texts (a key that is a table or a
      -- function gets a text of its own, so pairs' order changes nothing)
      local keys = {}
      for k in next, x do keys[#keys + 1] = {k = k, text = scalar(k) or M.text(k)} end
      sort(keys, function(a, b)
        if a.text ~= b.text then return a.text < b.text end
        return M.text(rawget(x, a.k)) < M.text(rawget(x, b.k))
      end)
      put(fmt("t%d{", #keys))
      for _, e in ipairs(keys) do
        put("k")
        put(e.text)
        put("=")
        walk(rawget(x, e.k))
        put(";")
      end
      return put("}")
    end
    if t == "function" then
      local code = M.code(x)
      if not code then -- a C function: by its name in a module, else identity
        modules = modules or module_names()
        local name = c_name(x, modules)
        if name then return put(fmt("C%d:%s", #name, name)) end
        return put(fmt("c%s", tostring(x)))
      end
      put(fmt("l%d:", #code))
      put(code)
      local i = 1
      while true do
        local name, value = getupvalue(x, i)
        if name == nil then break end
        put(fmt("u%d(", i))
        walk(value) -- an _ENV that is the global table: as the module _G
        put(")")
        i = i + 1
      end
      return put(".")
    end
    put(fmt("%s:%s", t, tostring(x))) -- userdata, thread: by identity
  end
  walk(v)
  return concat(out)
end

--- of(fn, opts) -> the canonical text of a node defined by its runnable fn
-- and the options opts its parent gave (nil: none).
function M.of(fn, opts)
  return M.text({fn = fn, opts = opts or {}})
end

--- same(fn1, opts1, fn2, opts2) -> true when the two definitions are the
-- same (their texts are equal).
function M.same(fn1, opts1, fn2, opts2)
  if rawequal(fn1, fn2) and rawequal(opts1, opts2) then return true end
  return M.of(fn1, opts1) == M.of(fn2, opts2)
end

-- ---- which part changed ---------------------------------------------------

-- The runnables made by arbor.exec: what they were made of ({argv, opts}),
-- to name the part of a definition that changed.
local made_of = setmetatable({}, {__mode = "k"})

--- exec(fn, argv, opts): fn is the runnable arbor.exec made of argv and
-- opts.
function M.exec(fn, argv, opts) made_of[fn] = {argv = argv, opts = opts or {}} end

--- parts(fn, opts) -> {name = text}: the texts of the parts of a
-- definition a message can name: an arbor.exec runnable's argv ("argv"),
-- environment ("env") and each other option ("exec.NAME"), a Lua
-- runnable as a whole ("runnable"), the node's policy ("policy") and each
-- other option its parent gave ("node.NAME"). Plain data: it crosses a
-- reexec in the state.
function M.parts(fn, opts)
  local out = {}
  local made = made_of[fn]
  if made then
    out.argv = M.text(made.argv)
    out.env = M.text(rawget(made.opts, "env"))
    for k, v in next, made.opts do
      if k ~= "env" and type(k) == "string" then out["exec." .. k] = M.text(v) end
    end
  else
    out.runnable = M.text(fn)
  end
  if type(opts) == "table" then
    for k, v in next, opts do
      if type(k) == "string" then out[k == "policy" and "policy" or "node." .. k] = M.text(v) end
    end
  end
  return out
end

local ORDER = {argv = 1, env = 2, runnable = 3, policy = 4}

--- changed(old, new) -> "its argv and policy changed": what differs
-- between two parts tables (M.parts), in words; "its runnable changed"
-- when no part it names does (the code of the runnable, or of arbor.exec
-- in another arbor version).
function M.changed(old, new)
  local names, options = {}, {}
  local keys = {}
  for k in next, old do keys[k] = true end
  for k in next, new do keys[k] = true end
  for k in next, keys do
    if old[k] ~= new[k] then
      local option = k:match("^exec%.(.*)") or k:match("^node%.(.*)")
      if not option then
        names[#names + 1] = k
      elseif not options[option] then -- arbor.exec's min_uptime and ctx:run's
        options[option] = true
        options[#options + 1] = option
      end
    end
  end
  sort(names, function(a, b) return (ORDER[a] or 9) < (ORDER[b] or 9) end)
  sort(options)
  if #options == 1 then
    names[#names + 1] = "option " .. options[1]
  elseif #options > 1 then
    names[#names + 1] = "options (" .. concat(options, ", ") .. ")"
  end
  if #names == 0 then return "its runnable changed" end
  local last = table.remove(names)
  if #names == 0 then return "its " .. last .. " changed" end
  return "its " .. concat(names, ", ") .. " and " .. last .. " changed"
end

--- why(fn1, opts1, fn2, opts2) -> nil when the definitions are the same,
-- else what changed in words (M.changed).
function M.why(fn1, opts1, fn2, opts2)
  if M.same(fn1, opts1, fn2, opts2) then return nil end
  return M.changed(M.parts(fn1, opts1), M.parts(fn2, opts2))
end

return M
