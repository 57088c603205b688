-- End-to-end: what an evaluation cannot do to the engine (C2, issue 13).
-- Its instruction budget holds whatever the code does: it catches the
-- budget's error with pcall, loops in a coroutine it made or in a Lua
-- function called by a C function, loops in a <close> variable or in its
-- error's __tostring; and os.exit fails the evaluation instead of ending
-- arbor. Each evaluation runs under timeout(1), so one that froze the
-- engine fails instead of hanging.
local support = require "e2e.support"
local bin, q, sh = support.bin, support.q, support.sh

local SPIN = "pcall(function() while true do end end) "

describe("an evaluation", function()
  local dir, sock, pid

  local function ctl(args)
    return sh("timeout -s KILL 60 " .. bin .. " ctl " .. q(sock) .. " " .. args)
  end

  local function eval(code)
    return ctl("eval --budget 2000000 " .. q(code))
  end

  -- a fresh arbor for each test: one that froze would fail the next ones
  before_each(function()
    dir = support.mktemp()
    sock = dir .. "/ctl.sock"
    os.execute(string.format("%s run --quiet --control %s %s > %s/out 2>&1 & echo $! > %s/pid",
      bin, q(sock), "spec/e2e/fixtures/live.lua", q(dir), q(dir)))
    assert.is_true(support.eventually(function() return ctl("status") == 0 end))
    pid = support.read(dir .. "/pid"):match("%d+")
  end)

  after_each(function()
    os.execute("kill -KILL " .. pid .. " 2>/dev/null")
    os.execute("rm -rf " .. q(dir))
  end)

  local function stopped(code, out)
    assert.equal(1, code, out)
    assert.matches("instruction budget of 2000000 exceeded", out, 1, true)
    assert.equal(0, (ctl("status")))
  end

  it("cannot end arbor with os.exit", function()
    local code, out = eval("os.exit(0)")
    assert.equal(1, code, out)
    assert.matches("os.exit is refused inside the tree", out, 1, true)
    assert.equal(0, (ctl("status")))
  end)

  it("stops at its budget when the code catches the error in a coroutine it made", function()
    stopped(eval("coroutine.wrap(function() while true do " .. SPIN
      .. "end end)()"))
  end)

  it("stops at its budget in a Lua function called by a C function", function()
    stopped(eval("table.sort({3, 2, 1}, function() while true do " .. SPIN
      .. "end end)"))
  end)

  it("counts against its budget what runs where the code cannot yield", function()
    stopped(eval("while true do pcall(string.gsub, 'aaaa', 'a', function() "
      .. "for i = 1, 1e6 do end end) end"))
  end)

  it("has its <close> variables bounded when it is stopped", function()
    stopped(eval("local x <close> = setmetatable({}, {__close = function() "
      .. "while true do " .. SPIN .. "end end})\nwhile true do end"))
  end)

  it("has the __tostring of its error bounded", function()
    local code, out = eval("error(setmetatable({}, {__tostring = function() "
      .. "while true do " .. SPIN .. "end end}))")
    assert.equal(1, code, out)
    assert.matches("(error object is a table value whose __tostring failed)",
      out, 1, true)
    assert.equal(0, (ctl("status")))
  end)
end)

describe("os.exit at the script's top level", function()
  it("exits as usual after arbor.run returned", function()
    local dir = support.mktemp()
    local f = assert(io.open(dir .. "/exits.lua", "w"))
    f:write([[
      local arbor = require "arbor"
      arbor.run(function(ctx) ctx:signal("healthy") arbor.stop() ctx:wait() end)
      os.exit(5)
    ]])
    f:close()
    local code, out = sh(bin .. " run --quiet " .. q(dir .. "/exits.lua"))
    os.execute("rm -rf " .. q(dir))
    assert.equal(5, code, out)
  end)
end)
