--- arbor.explain: why a node is, or is not, running now (issue 4): a code
-- for programs and one sentence for people, read from the node's fields.
-- arbor.explain(dn), node views' `why` and `explanation`, h:explain(dn).
local fail = require("arbor.failure").fail

local M = {}

local function secs(x) return string.format("%.3fs", x) end

-- The code and the sentence for the node whose fields (e:node(dn)) are f.
local function explain_fields(f, e)
  local dn, now = f.dn, e:now()
  if f.blocked then -- behind a closed lifecycle gate (L7)
    local gate = (f.sidecar and f.lifecycle .. " sidecar" or f.lifecycle)
    return "blocked", string.format("%s is not running: its lifecycle gate "
      .. "(%s) is closed while %s's coordinator is in state %s", dn, gate,
      f.parent, tostring(f.parent and e:node(f.parent, "coordinator")))
  end
  if f.running and f.stopping then
    if f.waiting_for and f.waiting_for ~= dn then
      return "stopping", string.format("%s is stopping: canceled, it waits "
        .. "for %s to exit first (children stop first, T12)", dn, f.waiting_for)
    end
    return "stopping", string.format("%s is stopping: canceled, it has %s "
      .. "to exit", dn, secs(f.shutdown))
  end
  if f.running then
    return "running", string.format("%s is running: %s, incarnation %d, "
      .. "started at %s (up %s)", dn, f.state, f.incarnation, secs(f.started),
      secs(now - f.started))
  end
  if f.waiting_member then
    return "waiting_member", string.format("%s waits for group member %s "
      .. "to %s before it starts (members start in order)", dn,
      f.waiting_member, f.ordered and "be HEALTHY" or "start")
  end
  if f.restart_at then
    return "backoff", string.format("%s is waiting for a backoff: its "
      .. "policy restarts it at %s (in %s) after it exited %s: %s", dn,
      secs(f.restart_at), secs(f.restart_at - now), f.state,
      f.error or "")
  end
  if f.waiting_for then
    return "waiting_descendant", string.format("%s exited %s at %s and "
      .. "waits for descendant %s to exit (since %s) before it can restart",
      dn, f.state, secs(f.exited), f.waiting_for, secs(f.exited))
  end
  if f.auto_done then
    return "auto_shutdown", string.format("%s ended DONE by %s", dn,
      f.error or "auto_shutdown")
  end
  if f.held and f.state == "DEAD" and f.decision == "stop" then
    return "given_up", string.format("%s was given up: its policy decided "
      .. "\"stop\" after failure %d in a row: %s", dn, f.consecutive,
      f.error or "")
  end
  if f.held and f.state == "DEAD" and f.decision == "escalate" then
    return "given_up", string.format("%s was given up: its policy decided "
      .. "\"escalate\" (its parent %s was failed) after: %s", dn,
      f.parent or "", f.error or "")
  end
  if f.held then
    return "held", string.format("%s is held down (stopped by hand, "
      .. "state %s): node:restart() starts it again", dn, f.state)
  end
  if f.state == "DONE" then
    return "done", string.format("%s finished: it ended DONE at %s and is "
      .. "not restarted", dn, secs(f.exited or now))
  end
  if f.canceled then
    return "canceled", string.format("%s is %s: its parent is being "
      .. "stopped, so it is not restarted", dn, f.state)
  end
  if f.incarnation == 0 then
    return "not_started", string.format("%s has not started yet", dn)
  end
  return "exited", string.format("%s exited %s", dn, f.state)
end

--- explain(e, dn) -> sentence, code | nil, "ENOENT: no node <dn>",
-- "ENOENT": for the node at dn of the engine e. Each field is read from the
-- engine when used.
function M.explain(e, dn)
  local _, err = e:node(dn, "dn")
  if err then return fail("ENOENT", "%s", err) end
  local lazy = setmetatable({}, {__index = function(_, k) return e:node(dn, k) end})
  local why, sentence = explain_fields(lazy, e)
  return sentence, why
end

return M
