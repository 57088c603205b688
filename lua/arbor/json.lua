--- arbor.json: the JSON of the control protocol (docs/control-protocol.md).
--
-- encode(v) turns Lua data into JSON: tables with keys 1..n are arrays,
-- other tables objects (keys made strings), json.null is null; values JSON
-- cannot hold (functions, userdata, threads, NaN) and cycles are written as
-- descriptive strings, so a reply is always valid JSON.
-- decode(s) returns the value, or nil and a message naming the position.
local M = {}

--- The JSON null (decoding gives it too, so null survives a round trip).
M.null = setmetatable({}, {__tostring = function() return "null" end})
local null = M.null

local escapes = {
  ['"'] = '\\"', ["\\"] = "\\\\", ["\b"] = "\\b", ["\f"] = "\\f",
  ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t",
}
for i = 0, 31 do
  local c = string.char(i)
  if not escapes[c] then escapes[c] = string.format("\\u%04x", i) end
end
escapes["\127"] = "\\u007f"

local function quote(s)
  if s:find('[%c"\\]') then s = s:gsub('[%c"\\]', escapes) end
  return '"' .. s .. '"'
end
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

local byte, sub, find, char = string.byte, string.sub, string.find, string.char
local utf8char = utf8.char

local function fail(s, i, what)
  error({json = format("invalid JSON at byte %d: %s", i, what)}, 0)
end

local decode_value

local function skip(s, i)
  local _, e = find(s, "^[ \t\r\n]*", i)
  return e + 1
end

local unescape = {
  ['"'] = '"', ["\\"] = "\\", ["/"] = "/", b = "\b", f = "\f", n = "\n",
  r = "\r", t = "\t",
}

local function decode_string(s, i)
  -- i is just past the opening quote
  local parts, np = {}, 0
  while true do
    local a, b = find(s, '^[^"\\%c]+', i)
    if a then np = np + 1; parts[np] = sub(s, a, b); i = b + 1 end
    local c = sub(s, i, i)
    if c == '"' then return table.concat(parts), i + 1 end
    if c == "\\" then
      local e = sub(s, i + 1, i + 1)
      if e == "u" then
        local hex = sub(s, i + 2, i + 5)
        if not find(hex, "^%x%x%x%x$") then fail(s, i, "bad \\u escape") end
        local cp = tonumber(hex, 16)
        i = i + 6
        if cp >= 0xD800 and cp <= 0xDBFF and sub(s, i, i + 1) == "\\u" then
          local lo = tonumber(sub(s, i + 2, i + 5), 16)
          if lo and lo >= 0xDC00 and lo <= 0xDFFF then
            cp = 0x10000 + (cp - 0xD800) * 0x400 + (lo - 0xDC00)
            i = i + 6
          end
        end
        np = np + 1; parts[np] = utf8char(cp)
      elseif unescape[e] then
        np = np + 1; parts[np] = unescape[e]
        i = i + 2
      else
        fail(s, i, "bad escape")
      end
    elseif c == "" then
      fail(s, i, "unterminated string")
    else
      fail(s, i, "control character in string")
    end
  end
end

function decode_value(s, i, depth)
  if depth > 200 then fail(s, i, "nested too deeply") end
  i = skip(s, i)
  local c = byte(s, i)
  if c == 34 then -- "
    return decode_string(s, i + 1)
  elseif c == 123 then -- {
    local obj = setmetatable({}, M.object_mt)
    i = skip(s, i + 1)
    if byte(s, i) == 125 then return obj, i + 1 end
    while true do
      i = skip(s, i)
      if byte(s, i) ~= 34 then fail(s, i, "object key must be a string") end
      local k
      k, i = decode_string(s, i + 1)
      i = skip(s, i)
      if byte(s, i) ~= 58 then fail(s, i, "':' expected") end
      local v
      v, i = decode_value(s, i + 1, depth + 1)
      obj[k] = v
      i = skip(s, i)
      c = byte(s, i)
      if c == 125 then return obj, i + 1 end
      if c ~= 44 then fail(s, i, "',' or '}' expected") end
      i = i + 1
    end
  elseif c == 91 then -- [
    local arr, n = {}, 0
    i = skip(s, i + 1)
    if byte(s, i) == 93 then return arr, i + 1 end
    while true do
      local v
      v, i = decode_value(s, i, depth + 1)
      n = n + 1
      arr[n] = v
      i = skip(s, i)
      c = byte(s, i)
      if c == 93 then return arr, i + 1 end
      if c ~= 44 then fail(s, i, "',' or ']' expected") end
      i = i + 1
    end
  elseif c == 116 and sub(s, i, i + 3) == "true" then return true, i + 4
  elseif c == 102 and sub(s, i, i + 4) == "false" then return false, i + 5
  elseif c == 110 and sub(s, i, i + 3) == "null" then return null, i + 4
  else
    local a, b = find(s, "^-?%d+%.?%d*[eE]?[-+]?%d*", i)
    if a then
      local text = sub(s, a, b)
      local v = math.tointeger(tonumber(text)) or tonumber(text)
      if v then return v, b + 1 end
    end
    if c == nil then fail(s, i, "unexpected end") end
    fail(s, i, "unexpected '" .. char(c) .. "'")
  end
end

--- decode(s) -> value | nil, message
function M.decode(s)
  if type(s) ~= "string" then return nil, "invalid JSON: not a string" end
  local ok, v, i = pcall(decode_value, s, 1, 0)
  if not ok then
    if type(v) == "table" and v.json then return nil, v.json end
    return nil, "invalid JSON: " .. tostring(v)
  end
  i = skip(s, i)
  if i <= #s then return nil, format("invalid JSON at byte %d: trailing data", i) end
  return v
end

return M
