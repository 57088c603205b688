--- arbor.failure: the one shape of runtime failures (docs/lua-api.md,
-- "Runtime failures"). What a correct program can meet at run time (a
-- program that does not exist, no engine at a socket, a node that is gone)
-- is returned as luv returns it: nil, "ENAME: message", "ENAME". Misuse
-- raises. The C functions say it through arbor_push_fail (src/lua/l_util.c).
local M = {}

--- fail(ename, fmt, ...) -> nil, "ENAME: message", "ENAME"; the message is
-- string.format(fmt, ...).
function M.fail(ename, fmt, ...)
  return nil, ename .. ": " .. fmt:format(...), ename
end

--- message(err, ename) -> err without its leading "ENAME: ": the message
-- for people (`arbor ctl`, `arbor run` print it so).
function M.message(err, ename)
  if ename and err:sub(1, #ename + 2) == ename .. ": " then
    return err:sub(#ename + 3)
  end
  return err
end

return M
