-- A oneshot backup job every minute: run it with
-- `arbor run docs/examples/backup.lua [SOURCE_DIR]`, stop it with Ctrl-C.
-- The job node is DONE after tar exits 0; a failure ("tar exited with
-- status 2") is retried by its policy; every minute the scheduler restarts
-- the DONE job for the next run.
--
--   root
--   `-- scheduler
--       `-- backup   tar czf ..., oneshot
local arbor = require "arbor"

local source = arg and arg[1] or "/etc"
local dest = (os.getenv("TMPDIR") or "/tmp") .. "/arbor-backups"
os.execute("mkdir -p " .. dest)

local function archive()
  return string.format("%s/backup-%d.tar.gz", dest, os.time())
end

return function(ctx)
  ctx:run("scheduler", function(s)
    s:signal("healthy")
    s:run("backup", function(c) -- a fresh archive name for each run
      return arbor.exec({"tar", "czf", archive(), "--ignore-failed-read", source},
        {oneshot = true, umask = "077", grace = 30})(c)
    end, {policy = arbor.policy.constant(10)})
    while true do
      s:sleep(60)
      local job = arbor.node(s.dn .. ".backup")
      if job.state == "DONE" then job:restart() end -- else: still running
    end
  end)
  ctx:signal("healthy")
  ctx:wait()
end
