-- End-to-end: what `arbor run` and `arbor ctl` print. Control characters
-- from the tree (process output, log lines, error messages) are escaped on a
-- terminal (a pseudo-terminal made by script(1)) and written as they are to
-- a pipe or a file; subscribers that miss events (more than the outbox holds
-- in one step) see a gap line.
local core = require "arbor.core"
local json = require "arbor.json"
local client = require "arbor.client"
local term = require "arbor.term"

local support = require "e2e.support"
local bin, q, sh, mktemp, read = support.bin, support.q, support.sh, support.mktemp, support.read
local fixture = support.fixtures .. "output.lua"

local LOGGED = "red \27[31mALERT\27[0m bell \7 cr \r tab \t c1 \194\155 end"
local LOGGED_ESCAPED = [[red \x1b[31mALERT\x1b[0m bell \x07 cr \x0d tab ]]
  .. "\t" .. [[ c1 \xc2\x9b end]]

local PROC = "stdout: proc \27[1mBOLD\27[0m"
local PROC_ESCAPED = [[stdout: proc \x1b[1mBOLD\x1b[0m]]

local have_script = sh("command -v script") == 0

-- Runs cmd on a pseudo-terminal; returns what the terminal showed, its
-- line ends as "\n".
local function on_tty(cmd, out_file)
  os.execute(string.format("TERM=dumb timeout 60 script -qfec %s /dev/null > %s 2>&1",
    q(cmd), q(out_file)))
  return (read(out_file) or ""):gsub("\r\n", "\n")
end

local function request(sock, req)
  local conn = assert(client.open(sock))
  local reply = conn:request(req)
  conn:close()
  return reply
end

-- Starts arbor on the fixture with its stderr on a terminal (tty = true) or
-- in a file; waits for its socket, for root.crash to be down and root.proc
-- done.
local function start(tty)
  local dir = mktemp()
  local e = {dir = dir, sock = dir .. "/ctl.sock", out = dir .. "/out"}
  local cmd = string.format("%s run --control %s %s", bin, q(e.sock), fixture)
  if tty then
    cmd = string.format("TERM=dumb script -qfec %s /dev/null", q(cmd))
  end
  os.execute(string.format("(%s) > %s 2>&1 &", cmd, q(e.out)))
  assert(support.eventually(function()
    local c = core.connect(e.sock)
    if not c then return false end
    c:close()
    local r = request(e.sock, {op = "node", dn = "root.crash", json = true})
    local p = request(e.sock, {op = "node", dn = "root.proc", json = true})
    return r and r.ok and r.data.state == "DEAD" and p.ok and p.data.state == "DONE"
  end), "arbor did not come up")
  e.pid = request(e.sock, {op = "status", json = true}).data.pid
  return e
end

local function finish(e)
  sh(bin .. " ctl " .. q(e.sock) .. " shutdown")
  assert(support.eventually(function()
    return os.execute("kill -0 " .. e.pid .. " 2>/dev/null") ~= true
  end))
  local out = read(e.out) or ""
  os.execute("rm -rf " .. q(e.dir))
  return (out:gsub("\r\n", "\n"))
end

describe("term.escape", function()
  it("escapes control characters but tab and newline", function()
    assert.equal(LOGGED_ESCAPED, term.escape(LOGGED))
    assert.equal([[\x00\x01\x08\x0b\x0c\x0d\x1b\x1f\x7f]],
      term.escape("\0\1\8\11\12\13\27\31\127"))
    assert.equal("a\tb\nc", term.escape("a\tb\nc"))
  end)

  it("escapes C1 controls encoded in UTF-8, not other characters", function()
    assert.equal([[\xc2\x80\xc2\x9f]], term.escape("\194\128\194\159"))
    assert.equal("é ü ¡ € 日本", term.escape("é ü ¡ € 日本"))
    assert.equal("\194\160", term.escape("\194\160")) -- no-break space
  end)

  it("leaves plain text as it is (the same string)", function()
    local s = "  12.000 root.w    HEALTHY -> DEAD  boom"
    assert.equal(s, term.escape(s))
  end)
end)

describe("arbor run", function()
  it("escapes control characters on a terminal", function()
    if not have_script then return print("\n  SKIPPED: script(1) is missing") end
    local out = finish(start(true))
    assert.matches("root.noisy               | " .. LOGGED_ESCAPED, out, 1, true)
    assert.matches([[\x1b]0;pwned\x07boom]], out, 1, true)
    assert.matches("root.proc                | " .. PROC_ESCAPED .. "\n", out, 1, true)
    assert.is_nil(out:find("\27", 1, true))
  end)

  it("writes them as they are to a file", function()
    local out = finish(start(false))
    assert.matches("root.noisy               | " .. LOGGED, out, 1, true)
    assert.matches("\27]0;pwned\7boom", out, 1, true)
    assert.matches("root.proc                | " .. PROC .. "\n", out, 1, true)
  end)
end)

describe("arbor ctl", function()
  local e
  setup(function() e = start(false) end)
  teardown(function() finish(e) end)

  it("logs and events: escaped on a terminal, as they are in a pipe", function()
    local ctl = bin .. " ctl " .. q(e.sock) .. " logs root.noisy"
    if have_script then
      local shown = on_tty(ctl, e.dir .. "/tty")
      assert.matches("root.noisy               | " .. LOGGED_ESCAPED .. "\n", shown, 1, true)
      shown = on_tty(ctl .. " -f & sleep 0.5; kill $!", e.dir .. "/tty")
      assert.matches("root.noisy               | " .. LOGGED_ESCAPED .. "\n", shown, 1, true)
    end
    local events = bin .. " ctl " .. q(e.sock) .. " events -n 100"
    if have_script then
      local shown = on_tty(events, e.dir .. "/tty")
      assert.matches([[HEALTHY -> DEAD  \x1b]0;pwned\x07boom]], shown, 1, true)
    end
    local code, out = sh(ctl)
    assert.equal(0, code)
    assert.matches("root.noisy               | " .. LOGGED .. "\n", out, 1, true)
    code, out = sh(events)
    assert.equal(0, code)
    assert.matches("HEALTHY -> DEAD  \27]0;pwned\7boom", out, 1, true)
  end)

  it("events -f: a gap line when more events came than the outbox holds", function()
    local text, js = e.dir .. "/events", e.dir .. "/events.json"
    local ctl = bin .. " ctl " .. q(e.sock) .. " events -n 1 -f"
    os.execute(string.format("(%s > %s 2>&1 &) ; (%s --json > %s 2>&1 &)", ctl, q(text), ctl, q(js)))
    assert(support.eventually(function()
      return (read(text) or "") ~= "" and (read(js) or "") ~= ""
    end), "the followers did not start")
    -- root.burst's new incarnation emits 201 events in one step
    assert.equal(0, (sh(bin .. " ctl " .. q(e.sock) .. " restart root.burst")))
    local function burst_done(evs) -- its NEW -> HEALTHY is its last event
      for line in evs:gmatch("[^\n]+") do
        local ev = json.decode(line)
        if ev.dn == "root.burst" and ev.incarnation == 2 and ev.to == "HEALTHY" then
          return true
        end
      end
    end
    assert(support.eventually(function()
      local shown = read(text) or ""
      local gap = shown:find("gap:", 1, true)
      return gap and shown:find("root.burst               NEW -> HEALTHY", gap, true)
        and burst_done(read(js) or "")
    end), "no gap line")
    local missed = read(text):match("gap: (%d+) event%(s%) missed %(seq %d+%-%d+%)\n")
    assert.is_true(tonumber(missed) >= 151)
    -- --json: seqs follow each other, or a gap names those missed
    local last, gaps = nil, 0
    for line in read(js):gmatch("[^\n]+") do
      local ev = json.decode(line)
      if ev.kind == "gap" then
        gaps = gaps + 1
        assert.equal(ev.last - ev.first + 1, ev.missed)
        assert.equal(last + 1, ev.first)
        last = ev.last
      else
        if last then assert.equal(last + 1, ev.seq) end
        last = ev.seq
      end
    end
    assert.is_true(gaps >= 1)
    -- and arbor run's printer says so on its stderr
    assert.matches("%(events%) +gap: %d+ event%(s%) missed %(seq %d+%-%d+%)\n", read(e.out))
  end)
end)
