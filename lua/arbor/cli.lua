--- arbor.cli: what the arbor binary (src/main.c) and the arbor module say
-- to each other about `arbor run`: the command line's options before the
-- script runs, and the exit status once it ran.
local M = {}

--- Under `arbor run`: {quiet, control, script, default, http}; nil
-- elsewhere.
M.options = nil

local last_run -- {ok, reason} of the last arbor.run

--- setup(quiet, control, script, extra): called by the binary before the
-- script; extra: {http = "ADDR:PORT"} as given.
-- control: the socket path, false for none, nil for the default: then
-- $ARBOR_CONTROL (a path, or "none"), else the default path, which may fail
-- with a warning unless another arbor is serving it.
function M.setup(quiet, control, script, extra)
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
  M.options = {quiet = quiet, control = control, script = script, default = default,
    http = extra and extra.http}
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
