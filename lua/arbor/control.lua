--- arbor.control: the live control plane (docs/control-protocol.md):
-- where its socket is by default, and serve(), the engine's side of it
-- (arbor.control.server; its operations are arbor.control.ops, a REPL
-- session arbor.control.session). The clients are arbor.client.
local M = {}

--- Where `arbor run` listens by default (C1): $XDG_RUNTIME_DIR/arbor, or
-- /run/arbor as root, or /tmp/arbor-UID.
function M.default_dir()
  local xdg = os.getenv("XDG_RUNTIME_DIR")
  if xdg and xdg ~= "" then return xdg .. "/arbor" end
  local uid = M.uid()
  if uid == 0 then return "/run/arbor" end
  return "/tmp/arbor-" .. uid
end

--- The real uid of this process, -1 when it cannot be read.
function M.uid()
  local f = io.open("/proc/self/status")
  local uid = f and f:read("a"):match("\nUid:%s*%d+%s+(%d+)")
  if f then f:close() end
  return tonumber(uid) or -1
end

--- The default socket of a script: in default_dir(), the script's file
-- name without .lua, and .sock.
function M.default_path(script)
  local base = (script or "arbor"):match("([^/]*)$"):gsub("%.lua$", "")
  if base == "" then base = "arbor" end
  return M.default_dir() .. "/" .. base .. ".sock"
end

--- serve(e, path, opts) -> server | nil, "ENAME: message", "ENAME": see
-- arbor.control.server.
function M.serve(e, path, opts)
  return require("arbor.control.server").serve(e, path, opts)
end

return M
