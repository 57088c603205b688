-- End-to-end: the real arbor binary on real scripts.
local support = require "e2e.support"
local bin, fixtures, sh = support.bin, support.fixtures, support.sh

local function tmpname()
  local n = os.tmpname()
  os.remove(n)
  return n
end

-- Polls (bounded) until the file exists.
local function wait_for_file(path, tries)
  for _ = 1, tries or 500 do
    local f = io.open(path)
    if f then f:close() return true end
    support.sleep(0.01)
  end
  return false
end

describe("arbor binary", function()
  it("prints its version and help", function()
    local code, out = sh(bin .. " --version")
    assert.equal(0, code)
    assert.matches("^arbor %d+%.%d+%.%d+", out)
    code, out = sh(bin .. " --help")
    assert.equal(0, code)
    assert.matches("usage: arbor run", out)
  end)

  it("exits 0 when the root's significant child finished (auto_shutdown)", function()
    local code, out = sh(bin .. " run " .. fixtures .. "auto_shutdown.lua")
    assert.equal(0, code)
    assert.matches("auto_shutdown (any_significant): significant child root.job done", out, 1, true)
    assert.matches("root.helper%s+HEALTHY %-> CANCELED", out)
  end)

  it("exits 2 on usage errors", function()
    local code, out = sh(bin)
    assert.equal(2, code)
    assert.matches("usage", out)
    code, out = sh(bin .. " frobnicate")
    assert.equal(2, code)
    assert.matches("unknown command 'frobnicate'", out)
    code, out = sh(bin .. " run")
    assert.equal(2, code)
    assert.matches("missing SCRIPT", out)
  end)

  it("names a missing script and exits 2", function()
    local code, out = sh(bin .. " run /nonexistent/sup.lua")
    assert.equal(2, code)
    assert.matches("cannot open /nonexistent/sup.lua", out, 1, true)
  end)

  it("reports a syntax error with file:line and exits 2", function()
    local code, out = sh(bin .. " run " .. fixtures .. "syntax_error.lua")
    assert.equal(2, code)
    assert.matches("syntax_error.lua:1:", out, 1, true)
  end)

  it("reports a runtime error at load with file:line and exits 2", function()
    local code, out = sh(bin .. " run " .. fixtures .. "load_error.lua")
    assert.equal(2, code)
    assert.matches("load_error.lua:2:", out, 1, true)
    assert.matches("stack traceback", out, 1, true)
  end)

  it("exits 2 when the script neither runs a tree nor returns one", function()
    local code, out = sh(bin .. " run " .. fixtures .. "nothing.lua")
    assert.equal(2, code)
    assert.matches("neither called arbor.run nor returned", out, 1, true)
  end)

  it("runs a returned root runnable that stops itself, exit 0", function()
    local code, out = sh(bin .. " run " .. fixtures .. "restarts.lua")
    assert.equal(0, code)
    assert.matches("root.b", out, 1, true)
    assert.matches("flaky failure 1", out, 1, true)
  end)

  it("--quiet prints no events", function()
    local code, out = sh(bin .. " run --quiet " .. fixtures .. "restarts.lua")
    assert.equal(0, code)
    assert.equal("", out)
  end)

  it("exits 1 when the tree gives up", function()
    local code, out = sh(bin .. " run " .. fixtures .. "gives_up.lua")
    assert.equal(1, code)
    assert.matches("root gave up", out, 1, true)
    assert.matches("root fails too", out, 1, true)
  end)

  it("exits 1 when a node had to be closed at its shutdown deadline", function()
    local marker = tmpname()
    local p = io.popen("sh -c 'echo $$; exec " .. bin .. " run --quiet " .. fixtures
      .. "stubborn.lua " .. marker .. " 2>&1'; echo \"exit:$?\"")
    local pid = p:read("l")
    assert.is_true(wait_for_file(marker))
    os.execute("kill -TERM " .. pid)
    local rest = p:read("a")
    p:close()
    os.remove(marker)
    assert.matches("exit:1", rest, 1, true)
    assert.matches("1 node(s) were closed at their shutdown deadline (the first: root.stubborn)",
      rest, 1, true)
  end)

  it("stops the tree in order on SIGTERM and exits 0", function()
    local marker = tmpname()
    local out = tmpname()
    local p = io.popen("sh -c 'echo $$; exec " .. bin .. " run " .. fixtures
      .. "serve.lua " .. marker .. " 2>" .. out .. "'; echo \"exit:$?\"")
    local pid = p:read("l")
    assert.truthy(tonumber(pid))
    assert.is_true(wait_for_file(marker))
    os.execute("kill -TERM " .. pid)
    local rest = p:read("a")
    p:close()
    assert.matches("exit:0", rest, 1, true)
    local f = io.open(out)
    local log = f:read("a")
    f:close()
    os.remove(marker)
    os.remove(out)
    assert.matches("SIGTERM: stopping the tree", log, 1, true)
    -- children stop before the root, siblings in reverse start order
    local order = {}
    for dn in log:gmatch("(root[%w%.%-_]*)%s+%u+ %-> CANCELED") do
      order[#order + 1] = dn
    end
    assert.same({"root.reporter", "root.two", "root.one", "root"}, order)
  end)
end)
