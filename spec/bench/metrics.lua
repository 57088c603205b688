-- Metrics benchmarks (issue 16): prints each figure next to its target.
-- Run by scripts/bench: build/arbor run --quiet spec/bench/metrics.lua [--small]
local arbor = require "arbor"
local core = require "arbor.core"
local http = require "arbor.http"
local metrics = require "arbor.metrics"

local bench = dofile((arg[0]:match("^(.*/)") or "") .. "support/common.lua")
local size, median, report = bench.size, bench.median, bench.report

-- Restart storm: 1000 nodes that fail as soon as they start, for `seconds`;
-- with `scrape`, /metrics is served and curl fetches it every 100 ms (the
-- scraper's own CPU time counts: this machine has few cores).
local function storm(seconds, scrape)
  local rate
  bench.measure(function(ctx)
    for i = 1, 1000 do
      ctx:run("f" .. i, function() error("boom") end, {policy = arbor.policy.immediate})
    end
  end, function(c)
    local e = core.current()
    local web, poller
    if scrape then
      web = assert(http.serve(e, "127.0.0.1:0"))
      -- one scraper process, as Prometheus is: curl paced at 10 requests/s
      poller = bench.sh("curl -s --rate 10/s -o /dev/null 'http://127.0.0.1:" .. web.port
        .. "/metrics?[1-100000]' > /dev/null 2>&1 & echo $!"):match("%d+")
    end
    local r0, t0 = e:stats().restarts, core.hrtime()
    c:sleep(seconds)
    rate = (e:stats().restarts - r0) / ((core.hrtime() - t0) / 1e9)
    if poller then os.execute("kill " .. poller) end
    if web then web.close() end
  end)
  return rate
end

-- Seconds to write the metrics of a tree of n idle nodes (100 parents of
-- n/100 children), every node with its own series: the body of /metrics
-- (chunks) and the one string of arbor.metrics_text(); and /metrics with
-- the default bound of 10,000 series. The median of `times` scrapes each.
local function scrape(n, times)
  local full, text, bounded, bytes = {}, {}, {}, nil
  bench.measure(function(ctx)
    for p = 1, 100 do
      ctx:run("p" .. p, function(c)
        for i = 1, n // 100 do
          c:run("n" .. i, function(x) x:signal("healthy") x:wait() end)
        end
        c:signal("healthy")
        c:wait()
      end)
    end
  end, function(c)
    c:sleep(0.1) -- every node has started
    local e = core.current()
    local function time(xs, f)
      collectgarbage() -- the previous scrape's garbage is not this one's cost
      local t0 = core.hrtime()
      f()
      xs[#xs + 1] = (core.hrtime() - t0) / 1e9
    end
    for _ = 1, times do
      time(full, function() bytes = select(2, metrics.chunks(e, {max_series = n * 2})) end)
      time(text, function() metrics.text(e, {max_series = n * 2}) end)
      time(bounded, function() metrics.chunks(e) end)
    end
  end)
  return median(full), median(text), median(bounded), bytes
end

bench.banner("metrics")
local rounds, seconds = size(3, 1), size(2, 0.2)
local off, on = {}, {}
for _ = 1, rounds do -- alternated: this machine's speed drifts
  off[#off + 1] = storm(seconds, false)
  on[#on + 1] = storm(seconds, true)
end
local ratio = median(on) / median(off)
report("restart storm, metrics off (median)", median(off), "/s", "")
report("restart storm, scraped every 100 ms (median)", median(on), "/s", "")
report("  ratio scraped / off", ratio, "x", ">= 0.95", ratio >= 0.95)
local n = size(100000, 2000)
local full, text, bounded, bytes = scrape(n, size(3, 1))
report(string.format("scrape, %d nodes, every node a series", n), full, "s", "< 0.5 s", full < 0.5)
report(string.format("  exposition size"), bytes / 1e6, "MB", "")
report(string.format("  as one string (arbor.metrics_text)"), text, "s", "")
report(string.format("scrape, %d nodes, 10,000 series (folded)", n), bounded, "s", "< 0.5 s", bounded < 0.5)
