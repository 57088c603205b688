--- A look at a process's descriptors for arbor's (issue 13, defect 3): the
-- soak's driver looks at each of arbor's children every 2 s. `proc` reads
-- /proc (the real one by default; the soak's spec gives a made-up one).
local M = {}

local function real_proc()
  local uv = require "luv"
  return {
    readlink = function(path) return (uv.fs_readlink(path)) end,
    read = function(path)
      local f = io.open(path)
      if not f then return nil end
      local s = f:read("a")
      f:close()
      return s
    end,
    scandir = function(path)
      local h = uv.fs_scandir(path)
      if not h then return nil end
      local names = {}
      while true do
        local name = uv.fs_scandir_next(h)
        if not name then break end
        names[#names + 1] = name
      end
      return names
    end,
  }
end

-- The memory image of a process, from /proc/PID/stat: its start time
-- (field 22), where its code and stack are (fields 26-28: a forked child
-- shares arbor's until its exec swaps them, and a new image is laid out
-- anew) and env_end (field 51: 0 until exec set up the new stack); nil when
-- the process is gone.
local function image(proc, pid)
  local rest = (proc.read("/proc/" .. pid .. "/stat") or ""):match("%) (.*)$")
  if not rest then return nil end
  local f = {}
  for w in rest:gmatch("%S+") do f[#f + 1] = w end -- f[n - 2] is field n
  if #f < 49 then return nil end
  return {start = f[20], code = f[24] .. " " .. f[25] .. " " .. f[26], env_end = f[49]}
end

--- new(arbor_pid [, proc]) -> a looker: looker:look(child, mine) looks at
-- child's descriptors; `mine` is the set of what arbor's descriptors point
-- to. It returns nil when it did not look, else the list of arbor's
-- descriptors it found beyond those the process may hold ("comm fd target"
-- strings). It looks only at a process whose exec has finished, and counts
-- the look only when the process is the same image after it: inside
-- execve, the kernel shows the new program's exe while the descriptors
-- marked close-on-exec are still open (and, on older kernels, arbor's
-- memory and environment still mapped), then closes them, then shows an
-- empty environment until the new stack is set up, where
-- ARBOR_NOTIFY_FD is read; a look in between raised 127 false alarms in
-- 60 s.
function M.new(arbor_pid, proc)
  proc = proc or real_proc()
  local arbor_exe = proc.readlink("/proc/" .. arbor_pid .. "/exe")
  local arbor = image(proc, arbor_pid)
  local looker = {}

  -- Descriptors of arbor's that a child holds beyond 0, 1, 2 and its
  -- notify descriptor. Left out: /dev/null (programs open it themselves),
  -- the copies of stdout and stderr a shell keeps while it redirects (the
  -- same pipe at another fd, or at fd 10 and above while fd 1 or 2 points
  -- elsewhere), and children still running arbor's code (the guard, a
  -- process between fork and exec, or inside its exec).
  function looker.look(_, child, mine)
    local base = "/proc/" .. child
    local before = image(proc, child)
    if not before or not arbor or before.code == arbor.code or before.env_end == "0"
        or proc.readlink(base .. "/exe") == arbor_exe then
      return nil
    end
    local fds = proc.scandir(base .. "/fd")
    if not fds then return nil end
    local env = proc.read(base .. "/environ") or ""
    local allowed = {["0"] = true, ["1"] = true, ["2"] = true}
    local nfd = env:match("%zARBOR_NOTIFY_FD=(%d+)%z") or env:match("^ARBOR_NOTIFY_FD=(%d+)%z")
    if nfd then allowed[nfd] = true end
    local out = proc.readlink(base .. "/fd/1")
    local err = proc.readlink(base .. "/fd/2")
    -- a shell running `cmd > file`, `cmd >&2` or `echo >&$ARBOR_NOTIFY_FD`
    -- keeps its own stdout or stderr at fd 10 or above meanwhile: while its
    -- fd 1 or 2 points elsewhere than a pipe of its own, such a copy is its
    -- own pipe, not one of arbor's leaking (a leak stays, and a later look
    -- finds it)
    local notify = nfd and proc.readlink(base .. "/fd/" .. nfd)
    local function own_pipe(t) return t and t:match("^pipe:") and t ~= notify end
    local redirecting = not own_pipe(out) or not own_pipe(err) or out == err
    local leaks = {}
    for _, fd in ipairs(fds) do
      local target = proc.readlink(base .. "/fd/" .. fd)
      if target and mine[target] and not allowed[fd] and target ~= out and target ~= err
          and target ~= "/dev/null" and not (redirecting and tonumber(fd) >= 10) then
        local comm = (proc.read(base .. "/comm") or "?"):gsub("%s+$", "")
        leaks[#leaks + 1] = comm .. " fd " .. fd .. " " .. target
      end
    end
    -- the same process in the same image all along (not another exec, not
    -- a pid used again), or the look does not count
    local after = image(proc, child)
    if not after or after.start ~= before.start or after.code ~= before.code
        or after.env_end ~= before.env_end then
      return nil
    end
    return leaks
  end
  return looker
end

return M
