--- arbor.json: the JSON of the control protocol (docs/control-protocol.md).
--
-- encode(v) turns Lua data into JSON: tables with keys 1..n are arrays,
-- other tables objects (keys made strings), json.null is null; values JSON
-- cannot hold (functions, userdata, threads, NaN) and cycles are written as
-- descriptive strings, so a reply is always valid JSON.
-- decode(s) returns the value, or nil and a message naming the position
-- (lua-cjson parses).
local M = {}

--- The JSON null (decoding gives it too, so null survives a round trip).
M.null = setmetatable({}, {__tostring = function() return "null" end})
local null = M.null

local quote = require("arbor.core").json_quote -- in C: fast on long strings
M.quote = quote

local mtype, format, tostring, type, next = math.type, string.format,
  tostring, type, next

local function encode_number(v)
  if mtype(v) == "integer" then return tostring(v) end
  if v ~= v or v == math.huge or v == -math.huge then
    return quote(tostring(v))
  end
  local s = format("%.14g", v)
  if tonumber(s) ~= v then s = format("%.17g", v) end
  return s
end

--- encode(v) -> string
function M.encode(v)
  local out, n = {}, 0
  local seen = {}
  local function enc(x)
    local t = type(x)
    if t == "string" then
      n = n + 1; out[n] = quote(x)
    elseif t == "number" then
      n = n + 1; out[n] = encode_number(x)
    elseif t == "boolean" then
      n = n + 1; out[n] = x and "true" or "false"
    elseif t == "nil" or x == null then
      n = n + 1; out[n] = "null"
    elseif t == "table" then
      if seen[x] then n = n + 1; out[n] = '"<cycle>"'; return end
      seen[x] = true
      local len = #x
      if len == 0 and next(x) == nil then
        n = n + 1; out[n] = (getmetatable(x) == M.object_mt) and "{}" or "[]"
        seen[x] = nil
        return
      end
      local count = 0
      if len > 0 then for _ in next, x do count = count + 1 end end
      if len > 0 and count == len then -- an array: keys 1..len
        n = n + 1; out[n] = "["
        for i = 1, len do
          if i > 1 then n = n + 1; out[n] = "," end
          enc(x[i])
        end
        n = n + 1; out[n] = "]"
        seen[x] = nil
        return
      end
      n = n + 1; out[n] = "{"
      local first = true
      for k, val in next, x do
        if not first then n = n + 1; out[n] = "," end
        first = false
        n = n + 1; out[n] = quote(type(k) == "string" and k or tostring(k))
        n = n + 1; out[n] = ":"
        enc(val)
      end
      n = n + 1; out[n] = "}"
      seen[x] = nil
    else
      n = n + 1; out[n] = quote("<" .. tostring(x) .. ">")
    end
  end
  enc(v)
  return table.concat(out)
end

--- Tables with this metatable encode as {} when empty.
M.object_mt = {}

-- ---- decoding -------------------------------------------------------------

-- lua-cjson decodes in C: a request of 1 MiB costs the engine a few
-- milliseconds, not a second of Lua. An instance of our own, so settings
-- made elsewhere do not change it.
local cjson = require("cjson").new()
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

--- decode(s [, shallow]) -> value | nil, message naming the byte where it
-- failed. Objects and arrays are plain tables (an empty object decodes as
-- an empty table, which encodes as []). With shallow, only the values of
-- the top table are fixed up (the engine's requests: no op reads a nested
-- value), so decoding costs no Lua instructions per nested value.
function M.decode(s, shallow)
  if type(s) ~= "string" then return nil, "invalid JSON: not a string" end
  local ok, v = pcall(cdecode, s)
  if not ok then
    local what, at = tostring(v):match("^(.-) at character (%d+)$")
    if not what then return nil, "invalid JSON: " .. tostring(v) end
    return nil, format("invalid JSON at byte %s: %s", at, (what:gsub("^%u", string.lower)))
  end
  if type(v) ~= "table" then return fix(v) end
  if not shallow then return fix_all(v) end
  for k, x in next, v do v[k] = fix(x) end
  return v
end

return M
