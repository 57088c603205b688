--- arbor.pretty: the REPL's printer. Tables are printed with sorted keys,
-- one line when short, indented otherwise; a table met again inside itself
-- prints as <cycle>, nesting past `depth` as {...}, and a table's entries past
-- `items` as "... (N more)". The text is cut at about `max` bytes (1 MiB),
-- ending with a line that says it was truncated. Its cost is linear in the
-- entries of the tables it meets (it never sorts all the keys of a large
-- table), so the control server can run it in slices (docs/repl.md).
local M = {}

--- The longest text pretty and values return (then cut, with a marker).
M.max = 1 << 20

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

-- The order of keys: numbers, strings, booleans, then the rest.
local function before(a, b)
  local ta, tb = type(a), type(b)
  if ta ~= tb then return (order[ta] or 9) < (order[tb] or 9) end
  if ta == "number" or ta == "string" then return a < b end
  return tostring(a) < tostring(b)
end

-- The first k keys of t in order, and how many keys t has. A max-heap
-- keeps the k smallest keys met so far, so a table of a million entries
-- costs about a million comparisons, not a sort of all its keys.
local function first_keys(t, k)
  local heap, n = {}, 0
  for key in next, t do
    n = n + 1
    if n <= k then
      local i = n
      heap[i] = key
      while i > 1 and before(heap[i // 2], heap[i]) do
        heap[i // 2], heap[i] = heap[i], heap[i // 2]
        i = i // 2
      end
    elseif k > 0 and before(key, heap[1]) then
      heap[1] = key
      local i = 1
      while true do
        local l, r, m = 2 * i, 2 * i + 1, i
        if l <= k and before(heap[m], heap[l]) then m = l end
        if r <= k and before(heap[m], heap[r]) then m = r end
        if m == i then break end
        heap[i], heap[m] = heap[m], heap[i]
        i = m
      end
    end
  end
  table.sort(heap, before)
  return heap, n
end

-- A printer: fmt(v) formats v while the state's room (bytes) lasts.
local function printer(opts)
  opts = opts or {}
  local max_depth, max_items = opts.depth or 4, opts.items or 100
  local width = opts.width or 78
  local st = {room = opts.max or M.max, cut = false}
  local open = {} -- tables on the current path (cycle detection)

  local function leaf(x)
    if type(x) == "string" and #x > st.room then
      x = x:sub(1, st.room)
      st.cut = true
    end
    local s = scalar(x)
    st.room = st.room - #s
    return s
  end

  local function fmt(x, depth, indent)
    if type(x) ~= "table" then return leaf(x) end
    local mt = getmetatable(x)
    if type(mt) == "table" and rawget(mt, "__tostring") then return leaf(x) end
    if open[x] then return "<cycle>" end
    if next(x) == nil then return "{}" end
    if depth >= max_depth then return "{...}" end
    open[x] = true
    local keys, n = first_keys(x, max_items)
    local parts, seq = {}, 1
    for i = 1, #keys do
      if st.room <= 0 then
        st.cut = true
        parts[i] = "..."
        break
      end
      st.room = st.room - #indent - 4 -- the indent and separator it may get
      local k = keys[i]
      local val = fmt(x[k], depth + 1, indent .. "  ")
      if k == seq then
        parts[i] = val
        seq = seq + 1
      elseif is_ident(k) then
        parts[i] = k .. " = " .. val
      else
        parts[i] = "[" .. leaf(k) .. "] = " .. val
      end
    end
    if n > #keys and not st.cut then
      parts[#parts + 1] = string.format("... (%d more)", n - #keys)
    end
    open[x] = nil
    local one = "{" .. table.concat(parts, ", ") .. "}"
    if #one + #indent <= width and not one:find("\n") then return one end
    local inner = indent .. "  "
    return "{\n" .. inner .. table.concat(parts, ",\n" .. inner) .. "\n" .. indent .. "}"
  end

  -- the marker ending a text that was cut
  local function finish(text)
    if not st.cut then return text end
    return text .. string.format(
      "\n(truncated: the text of the result is limited to %d bytes)", opts.max or M.max)
  end
  return fmt, finish, st
end

--- pretty(v [, {depth = 4, items = 100, width = 78, max = M.max}]) -> string
function M.pretty(v, opts)
  local fmt, finish = printer(opts)
  return finish(fmt(v, 0, ""))
end

--- Formats the values of an evaluation, tab-separated as lua.c prints them.
function M.values(t, n, opts)
  local fmt, finish, st = printer(opts)
  local parts = {}
  for i = 1, n do
    if st.room <= 0 then
      st.cut = true
      break
    end
    parts[i] = fmt(t[i], 0, "")
  end
  return finish(table.concat(parts, "\t"))
end

return M
