-- Events (T14): what subscribers get when a step emits more than the outbox
-- holds, subscribers that come and go during a delivery, and the bytes the
-- event ring may hold. All on the virtual clock.
local support = require "support"
local new = support.new
local idle = support.idle

after_each(support.close_all)

local function parked(c) c:wait() end

-- Subscribes a counter to h from now on: .seen events, .missed by gaps,
-- .gaps the gap markers, .seqs the seqs seen in order.
local function counter(h)
  local c = {seen = 0, missed = 0, gaps = {}, seqs = {}}
  c.id = h:on_event(function(ev)
    if ev.kind == "gap" then
      c.missed = c.missed + ev.missed
      c.gaps[#c.gaps + 1] = ev
    else
      c.seen = c.seen + 1
      c.seqs[#c.seqs + 1] = ev.seq
    end
  end)
  return c
end

-- The seq the next event will get.
local function next_seq(h)
  local last = h.engine:events(1)[1]
  return last and last.seq + 1 or 1
end

-- A started tree with an idle node root.w to swap.
local function tree(opts)
  local h = new(opts)
  h:start(function(ctx)
    ctx:run("w", idle)
    idle(ctx)
  end)
  return h
end

describe("T14 subscribers", function()
  it("get a gap marker counting what one step emitted past the outbox (65536)", function()
    local h = tree{seed = 1}
    local c = counter(h)
    local first = next_seq(h)
    for _ = 1, 70000 do h.engine:swap("root.w", parked) end
    h:settle()
    local emitted = next_seq(h) - first
    assert.equal(70000, emitted)
    assert.equal(emitted, c.seen + c.missed)
    assert.equal(70000 - 65536, c.missed)
    assert.equal(1, #c.gaps)
  end)

  it("get the gap first, with the exact seq range, then the newest events", function()
    local h = tree{seed = 1, outbox = 100}
    local c = counter(h)
    local first = next_seq(h)
    for _ = 1, 250 do h.engine:swap("root.w", parked) end
    h:settle()
    assert.equal(1, #c.gaps)
    local gap = c.gaps[1]
    assert.same({kind = "gap", missed = 150, first = first, last = first + 149,
      time = h:now()}, gap)
    assert.equal(100, c.seen)
    for i, seq in ipairs(c.seqs) do assert.equal(first + 149 + i, seq) end
    -- the next step starts afresh: nothing missed
    h.engine:swap("root.w", parked)
    h:settle()
    assert.equal(1, #c.gaps)
    assert.equal(101, c.seen)
  end)

  it("count events their own calls emit past the outbox, delivered in the same pass", function()
    local h = tree{seed = 1, outbox = 50}
    local c = counter(h)
    local burst = true
    h:on_event(function()
      if burst then
        burst = false
        for _ = 1, 500 do h.engine:swap("root.w", parked) end
      end
    end)
    local first = next_seq(h)
    h.engine:swap("root.w", parked)
    h:settle()
    assert.is_false(burst)
    local emitted = next_seq(h) - first
    assert.equal(501, emitted)
    assert.equal(emitted, c.seen + c.missed)
    assert.equal(450, c.missed)
    -- a gap names the seqs that left the outbox, never a seen one
    local seen = {}
    for _, s in ipairs(c.seqs) do seen[s] = true end
    for _, g in ipairs(c.gaps) do
      for s = g.first, g.last do assert.is_nil(seen[s]) end
    end
  end)

  it("added during a delivery see only later events; removed ones see no more", function()
    local h = tree{seed = 1}
    local b = counter(h)
    local late, removed_at
    h:on_event(function(ev)
      if not late then
        removed_at = ev.seq
        h.engine:unsubscribe(b.id)
        late = counter(h)
      end
    end)
    for _ = 1, 3 do h.engine:swap("root.w", parked) end
    h:settle()
    assert.same({removed_at}, b.seqs) -- b came before: it had that one
    assert.equal(0, late.seen)        -- the other two were emitted before
    local seq = next_seq(h)
    h.engine:swap("root.w", parked)
    h:settle()
    assert.same({seq}, late.seqs)
    assert.same({removed_at}, b.seqs)
  end)

  it("subscribed and removed many times leave nothing to walk", function()
    -- What is left is counted, not weighed: heap bytes depend on when the
    -- collector ran (a fresh clone's full run saw 383 and 767 KB). The
    -- engine's array of subscribers, which a delivery walks, holds the live
    -- ones only (stats().subscribers is its length, removed entries not yet
    -- swept included), and each removal gives its registry reference back
    -- (luaL_ref hands out the registry's length plus one when none was
    -- given back, so that length is the most references ever held).
    local h = tree{seed = 1}
    local c = counter(h)
    local registry = debug.getregistry()
    local refs = rawlen(registry)
    for i = 1, 100000 do
      h.engine:unsubscribe(h:on_event(function() end))
      if h:stats().subscribers ~= 1 then
        error("after " .. i .. " removals a delivery walks "
          .. h:stats().subscribers .. " subscribers")
      end
    end
    assert.is_true(rawlen(registry) - refs <= 2,
      "the registry grew by " .. rawlen(registry) - refs .. " references")
    -- removed while a delivery walks the array (each raises): swept after it
    for _ = 1, 100 do h:on_event(function() error("broken subscriber") end) end
    assert.equal(101, h:stats().subscribers)
    h.engine:swap("root.w", parked)
    h:settle()
    assert.equal(1, h:stats().subscribers)
    assert.equal(1, c.seen)
    assert.matches("on_event subscriber removed: .*broken subscriber",
      h:logs("root")[1].line)
  end)
end)

describe("T14 ring bytes", function()
  local MiB = 1024 * 1024

  -- A node failing `n` times, each time with a unique 1 MiB error.
  local function crash_loop(opts, n)
    local h = new(opts)
    local i = 0
    h:start(function(ctx)
      ctx:run("w", function(c)
        i = i + 1
        c:sleep(1)
        error(("%08d"):format(i) .. string.rep(string.char(64 + i % 26), MiB - 8), 0)
      end, {policy = function() return 0 end})
      idle(ctx)
    end)
    for _ = 1, n do h:advance(1) end
    return h
  end

  it("keep a cut copy of a long reason, saying how long it was", function()
    local h = crash_loop({seed = 1}, 40)
    local deaths = h:events{dn = "root.w", to = "DEAD"}
    assert.equal(40, #deaths)
    for _, ev in ipairs(deaths) do
      assert.is_true(#ev.reason <= 4096, "a reason of " .. #ev.reason .. " bytes")
      assert.matches("... (1048576 bytes)", ev.reason, 1, true)
    end
    -- the node keeps its whole last error
    assert.equal(MiB, #h:node("root.w").error)
    assert.is_true(h:stats().event_bytes < MiB)
  end)

  it("hold at most ring_bytes of reasons, dropping the oldest events", function()
    local h = crash_loop({seed = 1, ring_bytes = 16384}, 40)
    local st = h:stats()
    assert.is_true(st.event_bytes <= 16384, st.event_bytes .. " bytes held")
    local deaths = h:events{dn = "root.w", to = "DEAD"}
    assert.is_true(#deaths >= 3 and #deaths < 40)
    assert.matches("^00000040.*%.%.%. %(1048576 bytes%)$", deaths[#deaths].reason)
    -- still consecutive, newest last
    local evs = h:events()
    for k = 2, #evs do assert.equal(evs[k - 1].seq + 1, evs[k].seq) end
    assert.equal(next_seq(h) - 1, evs[#evs].seq)
  end)
end)
