--- arbor.json: the JSON of the control protocol (docs/control-protocol.md),
-- through lua-cjson.
--
-- encode(v) turns Lua data into JSON: tables whose keys are 1..n are arrays,
-- other tables objects (keys made strings), an empty table [] (or {} with
-- json.object_mt), json.null null; integers are written whole, floats with
-- 14 significant digits (as Lua's tostring); values JSON cannot hold
-- (functions, userdata, threads, NaN, infinities) and cycles are written as
-- descriptive strings, so a reply is always valid JSON.
-- decode(s) returns the value, or nil, "EINVAL: message", "EINVAL" with a
-- message naming the position (arbor.failure's shape).
--
-- cjson does the work; what it lacks is the thin layer below: it writes
-- numbers with 14 digits (integers past 10^14 lose theirs), an empty table
-- as {}, a table of positive integer keys with holes as an array, and
-- raises on cycles, functions and NaN. A walk in Lua finds the subtrees
-- cjson writes as arbor means them and hands each to cjson.encode whole;
-- the rest of the structure is joined here. The walk runs Lua instructions
-- per entry, so an evaluation's result is encoded in its slices and budget;
-- no subtree handed to cjson weighs more than CHUNK (about 2 ms of cjson).
local fail = require("arbor.failure").fail

local M = {}

--- The JSON null (decoding gives it too, so null survives a round trip).
M.null = setmetatable({}, {__tostring = function() return "null" end})
local null = M.null

--- Tables with this metatable encode as {} when empty.
M.object_mt = {}
local object_mt = M.object_mt

-- An instance of our own, so settings made elsewhere do not change it.
local cjson = require("cjson").new()
local cjson_encode = cjson.encode
local MAXDEPTH = 1000     -- tables nested deeper are joined here
cjson.encode_max_depth(MAXDEPTH)
local BIG = 1 << 20

-- cjson.encode, freeing cjson's buffer after a large text: it keeps its
-- buffer between calls (writing into memory already touched is several
-- times faster), but not one of 100 MiB for good.
local function cencode(v)
  local s = cjson_encode(v)
  if #s > BIG then
    cjson.encode_keep_buffer(false) -- frees it
    cjson.encode_keep_buffer(true)
  end
  return s
end

local mtype, format, tostring, type, next, rawget, getmetatable =
  math.type, string.format, tostring, type, next, rawget, getmetatable
local huge, concat, move = math.huge, table.concat, table.move
local LIM = 1e14       -- cjson writes integers below it (in magnitude) whole
local CHUNK = 10000    -- the most work one cjson.encode call gets (entries)
local CYCLE = '"<cycle>"'

-- The JSON text of a value that is not a table (json.null aside).
local function scalar(v)
  local t = type(v)
  if t == "string" then return cencode(v) end
  if t == "boolean" then return v and "true" or "false" end
  if t == "nil" then return "null" end
  if t == "number" then
    if mtype(v) == "integer" then return tostring(v) end
    if v ~= v or v == huge or v == -huge then return cencode(tostring(v)) end
    return format("%.14g", v)
  end
  return cencode("<" .. tostring(v) .. ">")
end

-- The weight of a string entry: cjson escapes about 256 bytes in the time
-- it writes one number.
local function string_weight(s) return 1 + (#s >> 8) end

local walk

-- The JSON text of a table the walk found cjson writes as arbor means it,
-- but for its n empty tables (arrays), which cjson writes {}: as it has no
-- empty table that is an object, each {} of the text is one of them,
-- unless a string holds "{}"; then the table is joined here instead.
local function plain(v, n)
  local s = cencode(v)
  if n == 0 then return s end
  local r, m = s:gsub("{}", "[]")
  if m == n then return r end
  return (walk(v, {}, true))
end

-- x's entries 1..n as a JSON array, given the texts of the entries cjson
-- cannot write as they are and the empty arrays of the others; runs of
-- scalars go to cjson together.
local function join_array(x, n, texts, empties)
  local out, m, i = {}, 0, 1
  while i <= n do
    local v = rawget(x, i)
    local text = texts and texts[i]
    if not text and type(v) == "table" then text = plain(v, empties and empties[i] or 0) end
    if text then
      i = i + 1
    else -- a run of scalars, up to CHUNK of weight
      local j, w = i, 0
      while j <= n and w < CHUNK and not (texts and texts[j]) do
        local u = rawget(x, j)
        local tu = type(u)
        if tu == "table" then break end
        w = w + (tu == "string" and string_weight(u) or 1)
        j = j + 1
      end
      text = j - i == 1 and scalar(v) or cencode(move(x, i, j - 1, 1, {})):sub(2, -2)
      i = j
    end
    m = m + 1
    out[m] = text
  end
  return "[" .. concat(out, ",") .. "]"
end

-- x's entries as a JSON object, as join_array.
local function join_object(x, texts, empties)
  local out, m = {}, 0
  for k, v in next, x do
    local text = texts and texts[k]
    if not text then
      text = type(v) == "table" and plain(v, empties and empties[k] or 0) or scalar(v)
    end
    m = m + 1
    out[m] = cencode(type(k) == "string" and k or tostring(k)) .. ":" .. text
  end
  return "{" .. concat(out, ",") .. "}"
end

-- Walks the table x: when cjson.encode(x) writes it as arbor means it (but
-- for its empty arrays) and it is light enough to hand over whole, nil,
-- its height, weight, and how many empty arrays and empty objects it has;
-- else its JSON text. open holds the tables on the path from the top
-- (cycles). strict: an empty array is never handed to cjson.
function walk(x, open, strict)
  if next(x) == nil then
    if getmetatable(x) == object_mt then return nil, 1, 1, 0, 1 end
    if strict then return "[]" end
    return nil, 1, 1, 1, 0
  end
  open[x] = true
  local texts, empties -- by key: the texts cjson cannot write; empty arrays
  local height, weight, narrays, nobjects = 0, 0, 0, 0
  -- maxk: the largest key while all keys are positive integers, else -1
  local count, maxk, keys_plain = 0, 0, true
  for k, v in next, x do
    count = count + 1
    if mtype(k) == "integer" then
      if k > 0 then
        if maxk >= 0 and k > maxk then maxk = k end
      else
        maxk = -1
      end
      if k <= -LIM or k >= LIM then keys_plain = false end
    else
      maxk = -1
      if type(k) ~= "string" then keys_plain = false end -- named by tostring
    end
    local t, text = type(v), nil
    if t == "string" then
      weight = weight + string_weight(v)
    elseif t == "boolean" then
      weight = weight + 1
    elseif t == "number" then
      weight = weight + 1
      if mtype(v) == "integer" then
        if v <= -LIM or v >= LIM then text = tostring(v) end
      elseif v ~= v or v == huge or v == -huge then
        text = scalar(v)
      end
    elseif t == "table" then
      if v == null then
        text = "null"
      elseif open[v] then
        text = CYCLE
      else
        local h, w, a, o
        text, h, w, a, o = walk(v, open, strict)
        if not text then
          if h > height then height = h end
          weight = weight + w
          if a > 0 then
            empties = empties or {}
            empties[k] = a
            narrays = narrays + a
          end
          nobjects = nobjects + o
        end
      end
    else
      text = scalar(v)
    end
    if text then
      texts = texts or {}
      texts[k] = text
    end
  end
  open[x] = nil
  local array = maxk == count -- the keys are 1..count
  height = height + 1
  weight = weight + count
  if not texts and keys_plain and (array or maxk < 0) and height <= MAXDEPTH
      and weight <= CHUNK and (narrays == 0 or nobjects == 0) then
    return nil, height, weight, narrays, nobjects
  end
  if array then return join_array(x, count, texts, empties) end
  return join_object(x, texts, empties)
end

--- encode(v) -> string
function M.encode(v)
  if type(v) ~= "table" then return scalar(v) end
  if v == null then return "null" end
  local text, _, _, n = walk(v, {}, false)
  return text or plain(v, n)
end

-- ---- decoding -------------------------------------------------------------

-- lua-cjson decodes in C: a request of 1 MiB costs the engine a few
-- milliseconds, not a second of Lua.
cjson.decode_max_depth(200)
cjson.decode_invalid_numbers(false) -- no NaN, Infinity or hex numbers
local cnull, cdecode = cjson.null, cjson.decode
local tointeger = math.tointeger

-- cjson makes every number a float and null a light userdata: integral
-- numbers become integers again (request ids, counts), null json.null.
local function fix(v)
  if type(v) == "number" then return tointeger(v) or v end
  if v == cnull then return null end
  return v
end

local function fix_all(t)
  for k, v in next, t do
    if type(v) == "table" then fix_all(v) else t[k] = fix(v) end
  end
  return t
end

--- decode(s [, shallow]) -> value | nil, "EINVAL: message", "EINVAL"
-- naming the byte where it failed. Objects and arrays are plain tables (an empty object decodes as
-- an empty table, which encodes as []). With shallow, only the values of
-- the top table are fixed up (the engine's requests: no op reads a nested
-- value), so decoding costs no Lua instructions per nested value.
function M.decode(s, shallow)
  if type(s) ~= "string" then return fail("EINVAL", "invalid JSON: not a string") end
  local ok, v = pcall(cdecode, s)
  if not ok then
    local what, at = tostring(v):match("^(.-) at character (%d+)$")
    if not what then return fail("EINVAL", "invalid JSON: %s", tostring(v)) end
    return fail("EINVAL", "invalid JSON at byte %s: %s", at, (what:gsub("^%u", string.lower)))
  end
  if type(v) ~= "table" then return fix(v) end
  if not shallow then return fix_all(v) end
  for k, x in next, v do v[k] = fix(x) end
  return v
end

return M
