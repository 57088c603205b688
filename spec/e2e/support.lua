-- Helpers shared by the end-to-end specs, which drive the real arbor binary
-- through the shell: run commands, read files, poll for a condition.
local uv = require "luv"
local M = {}

--- The binary under test ($ARBOR_BIN, as scripts/test sets it).
M.bin = os.getenv("ARBOR_BIN") or "build/arbor"
M.fixtures = "spec/e2e/fixtures/"

--- Prefix for outside tools the specs run (curl, pgrep): the ASan stage of
-- scripts/test preloads the sanitizer runtime into lua5.4, and curl and
-- pgrep, which would inherit it, can deadlock under it.
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

--- Starts `arbor run --control SOCK ARGS` in the background in a fresh
-- directory; its stdout and stderr go to DIR/out and DIR/err. env: "K=V ..."
-- set for it, or a function of DIR that returns them; args may be a
-- function of DIR too. Returns {pid, dir, sock}; stop_arbor ends it.
function M.run_arbor(args, env)
  local dir = M.mktemp()
  local e = {dir = dir, sock = dir .. "/ctl.sock"}
  if type(env) == "function" then env = env(dir) end
  if type(args) == "function" then args = args(dir) end
  local p = io.popen(string.format("%s sh -c 'echo $$; exec %s run --control %s %s' > %s/out 2> %s/err & echo $!",
    env or "", M.bin, M.q(e.sock), args, M.q(dir), M.q(dir)))
  e.pid = tonumber(p:read("l"))
  p:close()
  return e
end

--- Ends an arbor that run_arbor started (SIGTERM), and removes its directory.
function M.stop_arbor(e)
  os.execute("kill " .. e.pid .. " 2>/dev/null")
  M.eventually(function() return os.execute("kill -0 " .. e.pid .. " 2>/dev/null") ~= true end)
  os.execute("rm -rf " .. M.q(e.dir))
end

--- Sleeps s seconds in this process: sleep(1) run through the shell costs a
-- third of a second per call in the ASan stage (the preloaded sanitizer
-- runtime starts in sh and in sleep), which made 20 s polls last minutes.
function M.sleep(s) uv.sleep(math.floor(s * 1000 + 0.5)) end

--- Polls every 10 ms until pred() holds; false after `tries` polls (default
-- 2000: 20 s, a failure guard, never a timing the specs rely on).
function M.eventually(pred, tries)
  for _ = 1, tries or 2000 do
    if pred() then return true end
    M.sleep(0.01)
  end
  return false
end

--- Polls until pred() holds; raises "timed out waiting for what" after
-- the failure guard of eventually.
function M.poll(pred, what)
  assert(M.eventually(pred), "timed out waiting for " .. what)
end

--- true while pid exists (signal 0 reaches it).
function M.alive(pid) return os.execute("kill -0 " .. pid .. " 2>/dev/null") == true end

return M
