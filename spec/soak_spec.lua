-- The soak's checks (spec/soak/check.lua) on small made-up runs: each check
-- passes on a sound run and fails on the defect it is there to catch. The
-- soak itself runs in scripts/test (stages "soak"); see docs/testing.md.
local check = require "soak.check"

-- A sound run of one unit: root.u (a head) and root.u.w (a worker); fault #1
-- kills w's first incarnation, which restarts; then the tree is stopped.
local function run()
  local evs = {
    {"state", "root.u", 1, "NEW", "NEW", "start"},
    {"state", "root.u.w", 1, "NEW", "NEW", "start"},
    {"state", "root.u", 1, "NEW", "HEALTHY", ""},
    {"state", "root.u.w", 1, "NEW", "HEALTHY", ""},
    {"state", "root.u.w", 1, "HEALTHY", "DEAD", "sh killed by signal 9 (SIGKILL)"}, -- 5
    {"policy", "root.u.w", 1, "", "", "restart in 0.1s"},
    {"state", "root.u.w", 2, "DEAD", "NEW", "restart"},
    {"state", "root.u.w", 2, "NEW", "HEALTHY", ""},
    {"state", "root.u.w", 2, "HEALTHY", "CANCELED", ""},                           -- 9: the stop
    {"state", "root.u", 1, "HEALTHY", "CANCELED", ""},
  }
  local d = {layout = {["root.u"] = {unit = "u", role = "head"},
    ["root.u.w"] = {unit = "u", role = "proc"}},
    events = {}, ctl = {}, reports = {}, counts = {["root.u"] = 2},
    ledgers = {["root.u.w#1"] = 3, ["root.u.w#2"] = 1}, samples = {},
    faults = {check.parse_fault("1\t1.0\tkill\troot.u.w\tok 1 4 999\tsent")},
    logs = {
      {dn = "root.u", writer = "root.u", n = 1}, {dn = "root.u.w", writer = "root.u.w#1", n = 1},
      {dn = "root.u.w", writer = "root.u.w#1", n = 2}, {dn = "root.u.w", writer = "root.u.w#1", n = 3},
      {dn = "root.u.w", writer = "root.u.w#2", n = 1}, {dn = "root.u", writer = "root.u", n = 2},
    },
    driver = {stop_seq = "8", zombie_max_age = "0.01", zombies_at_end = "0", zombies_seen = "1",
      flood_bad = "0", flood_replies = "10", child_fd_checks = "4", child_fd_leaks = "0"},
    run = {exit = "0", orphans_term = "0", kill9_before = "5", kill9_left = "0",
      guard_replaced = "0.1", guard_before = "5", guard_left = "0"}}
  for i, e in ipairs(evs) do
    d.events[i] = {seq = i, kind = e[1], dn = e[2], inc = e[3], from = e[4], to = e[5], reason = e[6]}
    d.ctl[i] = d.events[i]
  end
  for i = 1, 60 do d.samples[i] = {t = i, rss = 8000 + i % 3, fds = 40, zombies = 0} end
  return d
end

-- The result of the check whose name starts with `name`.
local function result(d, name)
  for _, r in ipairs(check.run(d)) do
    if r.name:sub(1, #name) == name then return r end
  end
  error("no check " .. name)
end

describe("the soak's checks", function()
  it("pass on a sound run", function()
    for _, r in ipairs(check.run(run())) do
      assert.is_true(r.ok, r.name .. ": " .. r.text .. " " .. table.concat(r.examples, "; "))
    end
  end)

  it("see a gap in the event stream", function()
    local d = run()
    table.remove(d.events, 6)
    assert.is_false(result(d, "event stream (in-tree").ok)
    d = run()
    table.remove(d.ctl, 6)
    assert.is_false(result(d, "event stream (arbor ctl").ok)
  end)

  it("see an event the ctl stream has twice", function()
    local d = run()
    table.insert(d.ctl, 4, d.ctl[3])
    assert.is_false(result(d, "event stream (arbor ctl").ok)
  end)

  it("see a fault that no event answers, or two", function()
    local d = run()
    d.events[5].to, d.events[5].reason = "HEALTHY", ""   -- the death never came
    local r = result(d, "every fault")
    assert.is_false(r.ok)
    assert.matches("1 unmatched", r.text)
    d = run()
    table.insert(d.events, 6, {kind = "state", dn = "root.u.w", inc = 1, from = "HEALTHY",
      to = "DEAD", reason = "sh killed by signal 9 (SIGKILL)"})
    for i, ev in ipairs(d.events) do ev.seq = i end
    d.ctl = d.events
    assert.is_false(result(d, "every fault").ok)
    assert.is_false(result(d, "each incarnation").ok)
  end)

  it("see a fault answered by another death with no cause", function()
    local d = run()
    d.events[5].reason = "sh exited with status 1"
    assert.is_false(result(d, "every fault").ok)
  end)

  it("accept a fault preempted by a later cancel in its unit", function()
    local d = run()
    d.events[5].to, d.events[5].reason = "CANCELED", ""
    table.insert(d.faults, check.parse_fault("2\t1.1\trestart\troot.u\tok 1 4"))
    local r = result(d, "every fault")
    assert.is_true(r.ok, r.text)
    assert.matches("1 preempted", r.text)
  end)

  it("see a death nothing explains", function()
    local d = run()
    d.faults = {}
    local r = result(d, "every end")
    assert.is_false(r.ok)
    assert.matches("1 unexplained", r.text)
  end)

  it("see an incarnation still running after the stop", function()
    local d = run()
    d.events[9] = {seq = 9, kind = "state", dn = "root.u.w", inc = 2, from = "HEALTHY", to = "HEALTHY"}
    d.ctl = d.events
    assert.is_false(result(d, "each incarnation").ok)
  end)

  it("see lost, reordered and misattributed log lines", function()
    local d = run()
    table.remove(d.logs, 3)                          -- root.u.w#1 line 2
    assert.is_false(result(d, "no lost log line").ok)
    d = run()
    d.ledgers["root.u.w#2"] = 2                      -- written, never arrived
    assert.is_false(result(d, "no lost log line").ok)
    d = run()
    d.logs[3], d.logs[4] = d.logs[4], d.logs[3]
    assert.is_false(result(d, "no lost log line").ok)
    d = run()
    d.logs[5].dn = "root.u"
    assert.is_false(result(d, "no lost log line").ok)
  end)

  it("see RSS and descriptors that grow", function()
    local d = run()
    for i, s in ipairs(d.samples) do s.rss = 8000 + i * 200 end
    assert.is_false(result(d, "RSS flat").ok)
    d = run()
    for i, s in ipairs(d.samples) do s.fds = 40 + i // 4 end
    assert.is_false(result(d, "open descriptors flat").ok)
  end)

  it("see a lingering zombie, orphans, a wrong exit status and leaked descriptors", function()
    local d = run()
    d.driver.zombie_max_age = "7.5"
    assert.is_false(result(d, "no zombie").ok)
    d = run()
    d.run.orphans_term, d.run.orphans_term_list = "1", "123 sleep 1000;"
    assert.is_false(result(d, "no orphan after SIGTERM").ok)
    d = run()
    d.run.kill9_left = "2"
    assert.is_false(result(d, "no orphan after kill -9").ok)
    d = run()
    d.run.guard_replaced = ""                        -- the guard was not replaced
    assert.is_false(result(d, "no orphan after kill -9 of the guard").ok)
    d = run()
    d.run.exit = "1"
    assert.is_false(result(d, "exit status").ok)
    d = run()
    d.driver.child_fd_leaks = "3"
    assert.is_false(result(d, "no descriptor leaks").ok)
  end)

  it("want exit status 1 when the stubborn process ran at the stop", function()
    local d = run()
    table.insert(d.events, 1, {kind = "state", dn = "root.stub.s", inc = 1, from = "NEW", to = "NEW"})
    for i, ev in ipairs(d.events) do ev.seq = i end
    d.events[#d.events + 1] = {seq = #d.events + 1, kind = "state", dn = "root.stub.s", inc = 1,
      from = "HEALTHY", to = "CANCELED", reason = ""}
    d.ctl, d.driver.stop_seq, d.faults[1].seq = d.events, "9", 5
    assert.is_false(result(d, "exit status").ok)
    d.run.exit = "1"
    assert.is_true(result(d, "exit status").ok)
  end)
end)
