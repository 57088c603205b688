--- arbor.control.session: a REPL session of the control plane (C2): the
-- environment one connection evaluates in, with its helpers (docs/repl.md),
-- and how its input is compiled. Used by arbor.control.server and ops.
local core = require "arbor.core"
local render = require "arbor.render"
local node = require "arbor.node"

local M = {}

local help_text = [[
helpers (this session's environment; `arbor` is the arbor module):
  tree([dn])            draw the tree: states, uptimes, restarts, last errors
  node(dn)              the node's fields (state, error, traceback, ...)
  restart(dn)           restart a node now (starts a held or pending one)
  stop(dn)              stop a node and hold it down until restart(dn)
  swap(dn, fn [, {restart = true}])   the node's next start runs fn (and a
                        node made again at dn, until unswap)
  unswap(dn [, {restart = true}])     back to the script's runnable
  policy(dn, p)         p decides the node's restarts (nil: the script's)
  logs(dn [, n])        the node's last log lines
  events([n])           the last n events (default 20)
  watch([dn])           follow events (of dn's subtree) until Ctrl-C
  reload(module [, {restart = true}])  re-require a module, swap its runnables
  explain(dn)           why the node was (not) restarted (arbor.explain)
  budget([n])           this session's instruction budget per evaluation
  help()                this text
An expression prints its value; `x = 1` keeps x in this session only
(`_G.x = 1` sets a global of the tree). Ctrl-C interrupts an evaluation.]]

local function node_or_error(e, dn, level, what)
  if type(dn) ~= "string" then
    error(what .. ": want a DN string (like \"root.web\"), got " .. type(dn), level + 1)
  end
  local f, err = e:node(dn)
  if not f then error(what .. ": " .. err, level + 1) end
  return f
end

--- new(ctx) -> session {env, helpers, budget}. ctx: e (the engine object),
-- arbor (the module), out(text) (prints at the client), current() (the
-- evaluation running), follow(ev, dn) (streams events to ev's client),
-- WAIT (what watch() yields), quantum, budget (the default).
function M.new(ctx)
  local e, arbor, out = ctx.e, ctx.arbor, ctx.out
  local s = {budget = ctx.budget}
  local env = {}
  local h = {}
  h.arbor = arbor
  h.print = function(...)
    local n = select("#", ...)
    local parts = {}
    for i = 1, n do parts[i] = tostring((select(i, ...))) end
    out(table.concat(parts, "\t") .. "\n")
  end
  h.help = function() out(help_text .. "\n") end
  h.tree = function(dn)
    if dn ~= nil then node_or_error(e, dn, 2, "tree") end
    out(render.tree(e:tree(dn)) .. "\n")
  end
  h.node = function(dn) return node_or_error(e, dn, 2, "node") end
  h.restart = function(dn)
    node_or_error(e, dn, 2, "restart")
    e:restart(dn)
    out(dn .. ": restarted\n")
  end
  h.stop = function(dn)
    node_or_error(e, dn, 2, "stop")
    e:hold(dn)
    out(dn .. ": stopped (held until restart(\"" .. dn .. "\"))\n")
  end
  h.swap = function(dn, fn, o)
    node_or_error(e, dn, 2, "swap")
    node.view(e, dn):swap(fn, o)
    out(dn .. ": runnable swapped" .. ((o and o.restart) and ", restarted\n"
      or " (its next start runs it)\n"))
  end
  h.unswap = function(dn, o)
    node_or_error(e, dn, 2, "unswap")
    node.view(e, dn):unswap(o)
    out(dn .. ": the script's runnable restored" .. ((o and o.restart) and ", restarted\n"
      or " (its next start runs it)\n"))
  end
  h.policy = function(dn, p)
    node_or_error(e, dn, 2, "policy")
    node.view(e, dn):set_policy(p)
    out(dn .. ": " .. (p and "policy replaced" or "the script's policy restored") .. "\n")
  end
  h.logs = function(dn, n)
    node_or_error(e, dn, 2, "logs")
    out(render.lines(e:logs(dn, n or 20), function(l)
      return render.log(dn, l.line, l.time)
    end, "(no log lines)") .. "\n")
  end
  h.events = function(n)
    out(render.lines(e:events(n or 20), render.event, "(no events)") .. "\n")
  end
  h.watch = function(dn)
    if dn ~= nil then node_or_error(e, dn, 2, "watch") end
    local ev = ctx.current()
    if not ev or coroutine.running() ~= ev.co or not coroutine.isyieldable() then
      error("watch(): only at the top of a REPL evaluation", 2)
    end
    out("watching events" .. (dn and (" of " .. dn) or "") .. " (Ctrl-C stops)\n")
    ctx.follow(ev, dn)
    coroutine.yield(ctx.WAIT) -- until interrupted
  end
  h.reload = function(name, o)
    if type(name) ~= "string" then
      error("reload(module): want a module name, got " .. type(name), 2)
    end
    local old = package.loaded[name]
    if old == nil then error("reload: module '" .. name .. "' was never loaded", 2) end
    package.loaded[name] = nil
    local ok, new = pcall(require, name)
    if not ok then
      package.loaded[name] = old
      error("reload " .. name .. ": " .. tostring(new) .. " (the old module stays)", 2)
    end
    local by_fn = {}
    if type(old) == "table" then
      for k, v in pairs(old) do if type(v) == "function" then by_fn[v] = k end end
    elseif type(old) == "function" then
      by_fn[old] = true
    end
    local swapped = {}
    local stack = {e:tree()}
    while #stack > 0 do
      local n = table.remove(stack)
      local key = by_fn[core.runnable(e, n.dn)]
      if key ~= nil then
        local fn = key == true and new or (type(new) == "table" and new[key])
        if type(fn) == "function" then
          e:swap(n.dn, fn, o and o.restart)
          swapped[#swapped + 1] = n.dn
        end
      end
      for _, c in ipairs(n.children) do stack[#stack + 1] = c end
    end
    table.sort(swapped)
    out(string.format("reloaded %s; swapped %d node(s)%s%s\n", name, #swapped,
      #swapped > 0 and ": " or "", table.concat(swapped, ", ")))
  end
  h.explain = function(dn)
    node_or_error(e, dn, 2, "explain")
    return arbor.explain(dn)
  end
  h.budget = function(n)
    if n ~= nil then
      if type(n) ~= "number" or n ~= math.floor(n) or n < ctx.quantum then
        error("budget(n): want an instruction count >= " .. ctx.quantum, 2)
      end
      s.budget = math.floor(n)
    end
    return s.budget
  end
  s.helpers = h
  setmetatable(env, {__index = function(_, k)
    local v = h[k]
    if v ~= nil then return v end
    return _G[k]
  end})
  s.env = env
  return s
end

-- `local x = 1` at the start of a line persists in the session: the
-- session keeps it as a variable of its environment.
local function persist_locals(code)
  local rest = code:match("^%s*local%s+function%s+(.*)$")
  if rest then return "function " .. rest end
  rest = code:match("^%s*local%s+([%a_][%w_%s,]*=.*)$")
  if rest and not rest:find("^[^=]*<") then return rest end
  rest = code:match("^%s*local%s+([%a_][%w_%s,]*)$")
  if rest then return rest .. " = nil" end
  return code
end

--- compile(code, env) -> function | nil, message: `return <code>` first.
function M.compile(code, env)
  local fn = load("return " .. code, "=repl", "t", env)
  if fn then return fn end
  local src = persist_locals(code)
  local err
  fn, err = load(src, "=repl", "t", env)
  if fn then return fn end
  if src ~= code then -- report the error of the code as typed
    local _, e2 = load(code, "=repl", "t", env)
    err = e2 or err
  end
  return nil, err
end

return M
