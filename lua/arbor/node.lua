--- arbor.node: what arbor.* and the harness hand out about a tree: live
-- views of nodes (T13a, T13), as arbor.node(dn) and h:node(dn) return them
-- (each field is read from the engine when used, and the methods act on the
-- node at that DN), and event subscriptions (arbor.on_event, h:on_event).
local core = require "arbor.core"
local explain = require("arbor.explain").explain
local fail = require("arbor.failure").fail

local M = {}

local NodeMethods = {}

local function view_engine(self)
  return rawget(self, "_engine"), rawget(self, "dn")
end

-- The harness settles after each method, like after its other actions.
local function acted(self)
  local after = rawget(self, "_after")
  if after then after() end
end

--- node:restart(): cancels a running node so it restarts at once; starts a
-- node waiting for a delayed restart, or one that was given up or held.
function NodeMethods.restart(self)
  local e, dn = view_engine(self)
  e:restart(dn)
  acted(self)
end

--- node:start(): starts a node that does not run: one stopped (held),
-- given up by its policy, or waiting for a delayed restart (which then
-- happens now). A running node is left alone: nil, "EALREADY: <dn> is
-- running (<state>)", "EALREADY". Returns true when started.
function NodeMethods.start(self)
  local e, dn = view_engine(self)
  if e:node(dn, "running") then
    return fail("EALREADY", "%s is running (%s)", dn, e:node(dn, "state"))
  end
  e:restart(dn)
  acted(self)
  return true
end

--- node:signal(sig) -> n, name | nil, "ESRCH: <dn> runs no process to
-- signal", "ESRCH": sends sig (a name, "HUP" or "SIGHUP", or a number) to
-- the process group of each process the node's running incarnation
-- started (`kill -SIG -PGID`: the program and what it forked); n is how
-- many groups were signaled, name the signal's ("SIGHUP"). An unknown
-- signal raises. Not ctx:signal("healthy"), the runnable's own.
function NodeMethods.signal(self, sig)
  local e, dn = view_engine(self)
  local ok, n, name, code = pcall(e.kill, e, dn, sig)
  if not ok then error(n, 2) end
  acted(self)
  return n, name, code
end

--- node:cancel(): cancels the current incarnation (children first, T12);
-- by T8 it then restarts, as a CANCELED node does.
function NodeMethods.cancel(self)
  local e, dn = view_engine(self)
  e:cancel(dn)
  acted(self)
end

--- node:stop(): cancels the node and holds it down until node:restart().
function NodeMethods.stop(self)
  local e, dn = view_engine(self)
  e:hold(dn)
  acted(self)
end

-- The {restart = true} option of swap and unswap, checked.
local function restart_option(what, dn, opts)
  if opts ~= nil and type(opts) ~= "table" then
    error(what .. " " .. dn .. ": options must be a table, got " .. type(opts), 3)
  end
  for k in pairs(opts or {}) do
    if k ~= "restart" then
      error(what .. " " .. dn .. ": unknown option '" .. core.cut(k) .. "'", 3)
    end
  end
  return opts and opts.restart
end

-- An error of the engine's (it names the DN) raised at the caller of the
-- node method, without the position inside this file.
local function raise(err)
  error((tostring(err):gsub("^[^\n]-:%d+: ", "")), 3)
end

--- node:swap(fn [, {restart = true}]): the next start runs fn (T13). The
-- swap lasts: a node created again at this DN (its parent restarted) runs
-- fn too, until node:unswap().
function NodeMethods.swap(self, fn, opts)
  local e, dn = view_engine(self)
  if type(fn) ~= "function" then
    error("swap " .. dn .. ": the runnable must be a function, got " .. type(fn), 2)
  end
  e:swap(dn, fn, restart_option("swap", dn, opts))
  acted(self)
end

--- node:unswap([{restart = true}]): the next start runs the script's
-- runnable again.
function NodeMethods.unswap(self, opts)
  local e, dn = view_engine(self)
  local ok, err = pcall(e.unswap, e, dn, restart_option("unswap", dn, opts))
  if not ok then raise(err) end
  acted(self)
end

--- node:run(name, fn [, opts]): adds a child to this running node, as its
-- ctx:run would; it lasts until this node's next restart.
function NodeMethods.run(self, name, fn, opts)
  local e, dn = view_engine(self)
  local ok, err = pcall(e.add_child, e, dn, name, fn, opts)
  if not ok then raise(err) end
  acted(self)
end

--- node:remove(): stops the node in order (T12) and removes it from the tree
-- once it has exited; its swaps and policy go with it.
function NodeMethods.remove(self)
  local e, dn = view_engine(self)
  local ok, err = pcall(e.remove, e, dn)
  if not ok then raise(err) end
  acted(self)
end

--- node:set_policy(p): p decides this node's next restart; the failure
-- history is kept (T13). It lasts as a swap does; nil restores the policy
-- the script gave (or the default when it gave none).
function NodeMethods.set_policy(self, p)
  local e, dn = view_engine(self)
  if p ~= nil and type(p) ~= "function" then
    error("set_policy " .. dn .. ": the policy must be a function, got " .. type(p), 2)
  end
  e:set_policy(dn, p)
  acted(self)
end

--- node:logs([n]): the node's last log lines, {time=, line=} oldest first.
function NodeMethods.logs(self, n)
  local e, dn = view_engine(self)
  return e:logs(dn, n)
end

local NodeView = {
  -- Each field is read from the engine alone, when used (T13a): reading
  -- `state` does not build `children`.
  __index = function(self, k)
    local m = NodeMethods[k]
    if m then return m end
    local e, dn = view_engine(self)
    if k == "overridden" then return e:overridden(dn) end
    if k == "why" or k == "explanation" then
      local sentence, why = explain(e, dn)
      if not sentence then return nil end
      return k == "why" and why or sentence
    end
    return e:node(dn, k)
  end,
  __tostring = function(self)
    local e, dn = view_engine(self)
    return string.format("node(%s %s)", dn, e:node(dn, "state") or "gone")
  end,
}

--- view(e, dn [, after]) -> a live view of the node at dn of engine e, or
-- nil, "ENOENT: no node <dn>", "ENOENT"; `after` runs after each method
-- (the harness settles there).
function M.view(e, dn, after)
  if type(dn) ~= "string" then
    error("node(dn): dn must be a string, got " .. type(dn), 3)
  end
  local _, err = e:node(dn, "dn")
  if err then return fail("ENOENT", "%s", err) end
  return setmetatable({_engine = e, dn = dn, _after = after}, NodeView)
end

--- subscription(fn) -> {attach(e), unsubscribe}: fn's subscription to the
-- events of the engine it is attached to. unsubscribe is the handle
-- arbor.on_event and h:on_event return: it may be called before attach (then
-- attach does nothing), twice, or after the engine closed.
function M.subscription(fn)
  local e, id, gone
  local sub = {}
  function sub.attach(engine)
    if not gone then e, id = engine, engine:subscribe(fn) end
  end
  function sub.unsubscribe()
    if gone then return end
    gone = true
    -- the only error e:unsubscribe(id) raises is "engine is closed"
    if e then pcall(e.unsubscribe, e, id) end
  end
  return sub
end

--- Raises when opts give the root a lifecycle: the root has no parent,
-- so no coordinator orders it (L0). what names the caller.
function M.check_root(what, opts)
  for _, k in ipairs{"lifecycle", "sidecar"} do
    if opts[k] ~= nil then
      error(string.format("%s: root: option '%s' is not allowed on the root "
        .. "(L0: the root has no parent coordinator to order it)", what, k), 3)
    end
  end
end

return M
