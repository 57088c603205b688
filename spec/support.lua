-- Helpers shared by arbor's own specs (required as "support").
local testing = require "arbor.testing"

local M = {}

-- Harnesses made by a test are closed after it (support.close_all in
-- after_each): an engine left with a running incarnation would otherwise be
-- finalized at interpreter exit.
local open = {}

--- A harness (seed 1 unless opts say otherwise), closed after the test.
function M.new(opts)
  local h = testing.new(opts or {seed = 1})
  open[#open + 1] = h
  return h
end

function M.close_all()
  for i = #open, 1, -1 do
    open[i]:close()
    open[i] = nil
  end
end

--- A runnable that becomes HEALTHY and parks until canceled.
function M.idle(ctx)
  ctx:signal("healthy")
  ctx:wait()
end

--- State events of dn (or of every node), as "FROM>TO" strings; kind
-- "coordinator" gives its coordinator's moves instead.
function M.transitions(h, dn, kind)
  local out = {}
  for _, ev in ipairs(h:events{kind = kind or "state", dn = dn}) do
    out[#out + 1] = ev.from .. ">" .. ev.to
  end
  return out
end

--- A small deterministic generator (xorshift), independent of math.random:
-- gen(n) is an integer in 1..n.
function M.generator(seed)
  local x = seed
  return function(n)
    x = x ~ (x << 13)
    x = x ~ (x >> 7)
    x = x ~ (x << 17)
    return (x & 0x7fffffff) % n + 1
  end
end

-- Every node of a tree snapshot (arbor.tree(), h:tree()), depth first.
function M.each_node(tree, out)
  out = out or {}
  out[#out + 1] = tree
  for _, c in ipairs(tree.children) do M.each_node(c, out) end
  return out
end

--- Runs the Lua chunk src in a fresh lua5.4 that finds the same modules as
-- this busted, under timeout(1), so code that could freeze or end the
-- process fails a spec instead of hanging or ending the suite. Returns its
-- output (stdout and stderr); raises when it froze or exited with another
-- status than `status` (default 0).
function M.isolated(src, status)
  local path = os.tmpname()
  local f = assert(io.open(path, "w"))
  f:write(string.format("package.path = %q\npackage.cpath = %q\n",
    package.path, package.cpath))
  f:write(src)
  f:close()
  local p = io.popen("timeout 60 lua5.4 " .. path .. " 2>&1; echo \"exit:$?\"")
  local out = p:read("a")
  p:close()
  os.remove(path)
  local code = tonumber(out:match("exit:(%d+)%s*$"))
  out = out:gsub("exit:%d+%s*$", "")
  assert(code ~= 124, "the engine froze (killed by timeout):\n" .. out)
  assert(code == (status or 0), "the child exited " .. tostring(code) .. ":\n" .. out)
  return out
end

-- Runs body(ctx, root) in node root.t of a real tree (arbor.run, the
-- real clock) and returns what arbor.run returned; errors (assertions)
-- raised by the body are raised here.
function M.scenario(body)
  local arbor = require "arbor"
  local ok, err
  local run_ok, reason = arbor.run(function(root)
    root:run("t", function(c)
      c:signal("healthy")
      ok, err = pcall(body, c, root)
      arbor.stop()
      c:wait()
    end, {policy = arbor.policy.never})
    root:signal("healthy")
    root:wait()
  end, {signals = false, runaway = 5})
  if not ok then error(err, 0) end
  return run_ok, reason
end

return M
