-- Helpers shared by the end-to-end specs, which drive the real arbor binary
-- through the shell: run commands, read files, poll for a condition.
local M = {}

--- The binary under test ($ARBOR_BIN, as scripts/test sets it).
M.bin = os.getenv("ARBOR_BIN") or "build/arbor"
M.fixtures = "spec/e2e/fixtures/"

--- Prefix for outside tools the specs run (curl): the ASan stage of
-- scripts/test preloads the sanitizer runtime into lua5.4, and curl, which
-- would inherit it, deadlocks under it.
M.plain = "env -u LD_PRELOAD -u ASAN_OPTIONS "

--- s quoted for the shell.
function M.q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

--- Runs a shell command; returns its exit code and combined output.
function M.sh(cmd)
  local p = io.popen(cmd .. " 2>&1; echo \"exit:$?\"")
  local out = p:read("a")
  p:close()
  local code = tonumber(out:match("exit:(%d+)%s*$"))
  return code, (out:gsub("exit:%d+%s*$", ""))
end

--- Runs a shell command; returns its standard output.
function M.capture(cmd)
  local p = io.popen(cmd)
  local out = p:read("a")
  p:close()
  return out
end

--- A fresh temporary directory.
function M.mktemp() return (M.capture("mktemp -d"):gsub("%s+$", "")) end

--- The contents of the file at path, or nil.
function M.read(path)
  local f = io.open(path)
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

--- Polls every 10 ms until pred() holds; false after `tries` polls (default
-- 2000: 20 s, a failure guard, never a timing the specs rely on).
function M.eventually(pred, tries)
  for _ = 1, tries or 2000 do
    if pred() then return true end
    os.execute("sleep 0.01")
  end
  return false
end

return M
