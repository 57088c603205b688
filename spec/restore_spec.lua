-- Issue 17: the state a reexec hands over is versioned and checked
-- (arbor.restore.load): the current format and older ones are read, a
-- newer one, or one that is not a state, is refused with what is wrong.
local core = require "arbor.core"
local json = require "arbor.json"
local restore = require "arbor.restore"

local function memfd(text) return assert(core.memfd("spec", text)) end

describe("the reexec state", function()
  it("is read in this arbor's format", function()
    local state = assert(restore.load(memfd(json.encode{format = core.state_format,
      nodes = {root = {restarts = 2}}})))
    assert.equal(2, state.nodes.root.restarts)
  end)

  it("refuses a newer format, naming both", function()
    local state, err = restore.load(memfd(json.encode{format = core.state_format + 1}))
    assert.is_nil(state)
    assert.equal(string.format("the state's format %d is newer than this arbor reads (%d)",
      core.state_format + 1, core.state_format), err)
  end)

  it("refuses what is not a state", function()
    local state, err = restore.load(memfd("{not json"))
    assert.is_nil(state)
    assert.matches("^the state is not JSON", err)
    state, err = restore.load(memfd(json.encode{nodes = {}}))
    assert.is_nil(state)
    assert.equal("the state has no format", err)
    state, err = restore.load(999999)
    assert.is_nil(state)
    assert.matches("reading the state", err)
  end)

  it("is announced by --version, which a reexec reads first", function()
    local p = io.popen((os.getenv("ARBOR_BIN") or "build/arbor") .. " --version")
    local out = p:read("a")
    p:close()
    assert.matches("\nreexec state format " .. core.state_format .. "\n", out, 1, true)
  end)
end)

describe("the exec window (issue 25)", function()
  it("holds the signals arbor answers, pending, and gives them back when the exec is not done", function()
    local support = require "support"
    local out = support.isolated([[
local core = require "arbor.core"
local uv = require "luv"
local got = {}
local handles = {}
for _, name in ipairs{"sighup", "sigterm", "sigusr1", "sigusr2", "sigint"} do
  local s = uv.new_signal()
  s:start(name, function() got[#got + 1] = name end)
  handles[#handles + 1] = s
end
core.hold_signals()
for _, sig in ipairs{"HUP", "TERM", "USR1", "USR2", "INT"} do
  os.execute("kill -" .. sig .. " " .. core.getpid())
end
for _ = 1, 5 do uv.run("nowait") end
print("held: " .. #got)
local mask = io.open("/proc/self/status"):read("a"):match("SigBlk:%s*(%x+)")
print("blocked: " .. mask)
core.release_signals()
for _ = 1, 5 do uv.run("nowait") end
table.sort(got)
print("after: " .. table.concat(got, " "))
for _, s in ipairs(handles) do s:close() end
uv.run("nowait")
]])
    assert.matches("held: 0\n", out, 1, true)
    -- HUP 1, INT 2, USR1 10, USR2 12, TERM 15: bits 0, 1, 9, 11, 14
    assert.matches("blocked: %x*4a03\n", out)
    assert.matches("after: sighup sigint sigterm sigusr1 sigusr2\n", out, 1, true)
  end)
end)
