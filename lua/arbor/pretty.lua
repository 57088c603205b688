--- arbor.pretty: the REPL's printer. Tables are printed with sorted keys,
-- one line when short, indented otherwise; a table met again inside itself
-- prints as <cycle>, nesting past `depth` as {...}, and a table's entries past
-- `items` as "... (N more)".
local M = {}

local idents = {}
for w in ([[and break do else elseif end false for function goto if in
  local nil not or repeat return then true until while]]):gmatch("%a+") do
  idents[w] = true
end

local function is_ident(k)
  return type(k) == "string" and k:match("^[%a_][%w_]*$") and not idents[k]
end

local function scalar(v)
  local t = type(v)
  if t == "string" then return string.format("%q", v):gsub("\\\n", "\\n") end
  if t == "number" or t == "boolean" or t == "nil" then return tostring(v) end
  local mt = getmetatable(v)
  if type(mt) == "table" and rawget(mt, "__tostring") then
    local ok, s = pcall(tostring, v)
    if ok then return s end
  end
  return tostring(v)
end

local order = {number = 1, string = 2, boolean = 3}

local function sorted_keys(t)
  local keys, n = {}, 0
  for k in next, t do n = n + 1; keys[n] = k end
  table.sort(keys, function(a, b)
    local ta, tb = type(a), type(b)
    if ta ~= tb then return (order[ta] or 9) < (order[tb] or 9) end
    if ta == "number" or ta == "string" then return a < b end
    return tostring(a) < tostring(b)
  end)
  return keys, n
end

--- pretty(v [, {depth = 4, items = 100, width = 78}]) -> string
function M.pretty(v, opts)
  opts = opts or {}
  local max_depth, max_items = opts.depth or 4, opts.items or 100
  local width = opts.width or 78
  local open = {} -- tables on the current path (cycle detection)

  local function fmt(x, depth, indent)
    if type(x) ~= "table" then return scalar(x) end
    local mt = getmetatable(x)
    if type(mt) == "table" and rawget(mt, "__tostring") then return scalar(x) end
    if open[x] then return "<cycle>" end
    if next(x) == nil then return "{}" end
    if depth >= max_depth then return "{...}" end
    open[x] = true
    local keys, n = sorted_keys(x)
    local parts, seq = {}, 1
    local shown = math.min(n, max_items)
    for i = 1, shown do
      local k = keys[i]
      local val = fmt(x[k], depth + 1, indent .. "  ")
      if k == seq then
        parts[i] = val
        seq = seq + 1
      elseif is_ident(k) then
        parts[i] = k .. " = " .. val
      else
        parts[i] = "[" .. scalar(k) .. "] = " .. val
      end
    end
    if n > shown then parts[#parts + 1] = string.format("... (%d more)", n - shown) end
    open[x] = nil
    local one = "{" .. table.concat(parts, ", ") .. "}"
    if #one + #indent <= width and not one:find("\n") then return one end
    local inner = indent .. "  "
    return "{\n" .. inner .. table.concat(parts, ",\n" .. inner) .. "\n" .. indent .. "}"
  end

  return fmt(v, 0, "")
end

--- Formats the values of an evaluation, tab-separated as lua.c prints them.
function M.values(t, n, opts)
  local parts = {}
  for i = 1, n do parts[i] = M.pretty(t[i], opts) end
  return table.concat(parts, "\t")
end

return M
