--- arbor.term: text for terminals. Log lines, process output and error
-- messages come from the tree and may carry control characters: escape
-- sequences that recolor, move the cursor, retitle the window or answer
-- back. On a terminal arbor shows them escaped (ESC as \x1b); to a pipe or
-- a file it writes the bytes as they are (docs/repl.md).
local core = require "arbor.core"

local M = {}

local function hex(c) return string.format("\\x%02x", c:byte()) end

--- s with its control characters written as \xHH: C0 controls but tab and
-- newline, DEL, and the C1 controls U+0080..U+009F encoded in UTF-8 (as
-- \xc2\x9b). Returns s itself when it has none.
function M.escape(s)
  if not s:find("[\0-\8\11-\31\127\194]") then return s end
  s = s:gsub("[\0-\8\11-\31\127]", hex)
  return (s:gsub("\194[\128-\159]", function(c) return hex(c) .. hex(c:sub(2)) end))
end

local function as_is(s) return s end

--- The function that readies text for file descriptor fd: M.escape when fd
-- is a terminal, else one returning the text unchanged.
function M.filter(fd)
  return core.isatty(fd) and M.escape or as_is
end

return M
