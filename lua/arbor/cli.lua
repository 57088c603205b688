--- arbor.cli: what the arbor binary (src/main.c) and the arbor module say
-- to each other about `arbor run`: the command line's options before the
-- script runs, and the exit status once it ran.
local M = {}

--- Under `arbor run`: {quiet, control, script, default}; nil elsewhere.
M.options = nil

local last_run -- {ok, reason} of the last arbor.run

--- setup(quiet, control, script): called by the binary before the script.
-- control: the socket path, false for none, nil for the default: then
-- $ARBOR_CONTROL (a path, or "none"), else the default path, which may fail
-- with a warning unless another arbor is serving it.
function M.setup(quiet, control, script)
  local default = false
  if control == nil then
    local env = os.getenv("ARBOR_CONTROL")
    if env == "none" then
      control = false
    elseif env and env ~= "" then
      control = env
    else
      control = require("arbor.control").default_path(script)
      default = true
    end
  end
  M.options = {quiet = quiet, control = control, script = script, default = default}
end

--- What `arbor run` printed on stderr: once a write failed (EPIPE: the
-- reader of a pipe went away; EIO: the terminal was closed) printing stops
-- for good, and the lines not printed are counted (`lost`, with the first
-- error in `error`); supervision goes on (`arbor ctl status` shows them).
M.stderr = {lost = 0, error = nil}

--- print_line(text): writes text and a newline on stderr, or counts it.
function M.print_line(text)
  local st = M.stderr
  if st.error then
    st.lost = st.lost + 1
    return
  end
  local ok, err = io.stderr:write(text, "\n")
  if not ok then
    st.error, st.lost = err or "write failed", st.lost + 1
  end
end

--- Called by arbor.run with what it returns.
function M.ran(ok, reason) last_run = {ok = ok, reason = reason} end

--- The exit status of `arbor run` and, unless 0, a message.
function M.exit_status()
  if not last_run then
    return 2, "the script neither called arbor.run nor returned a root runnable"
  end
  if last_run.ok then return 0 end
  if last_run.reason == "interrupted" then return 130, "interrupted" end
  return 1, last_run.reason
end

return M
