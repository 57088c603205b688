#!/usr/bin/env bash
# Runs `arbor run` on the control fixture under a checker (valgrind, or an
# ASan build with leak detection), drives its control socket through
# evaluations, errors, a runaway, large results, the REPL, a follower, bad
# frames, a reply past the output limit and a client that vanishes
# mid-evaluation, then shuts it down: exits with the
# engine's status, so the checker's error exit code fails the run.
# usage: spec/e2e/drive_control.sh CLIENT_ARBOR ENGINE_COMMAND...
set -uo pipefail
client=$1; shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
sock=$dir/ctl.sock
"$@" run --quiet --control "$sock" spec/e2e/fixtures/live.lua > "$dir/engine.out" 2>&1 &
engine=$!
for _ in $(seq 600); do
  "$client" ctl "$sock" status > /dev/null 2>&1 && break
  sleep 0.05
done
c() { "$client" ctl "$sock" "$@" > /dev/null 2>&1; }
c status; c tree; c tree --json; c node root.heart --json; c logs root.heart -n 5
c eval 'return 1, {a = {1, 2}}, print'; c eval 'error("x")'; c eval 'return ('
c eval --budget 2000000 'while true do end'; c restart root.workers.w1; c node root.nope
c eval 'local t = {} for i = 1, 3e4 do t[i] = {i} end return t, ("z"):rep(2 << 20)'
c eval --json 'local t = {} for i = 1, 3e4 do t[i] = {i, "x"} end return t'
c eval --budget 100000 'local t = {} for i = 1, 3e4 do t[i] = i end return t'
printf 'x = 1\nx + 1\nt = {} t.t = t\nt\ntree()\nhelp()\nreload("liveworker")\n' |
  "$client" repl "$sock" > /dev/null 2>&1
"$client" ctl "$sock" events -f > /dev/null 2>&1 &
follower=$!
lua5.4 - "$sock" "${LUA_CPATH_DIR:-build/lua}" <<'LUA'
local sock, cdir = arg[1], arg[2]
package.cpath = cdir .. "/?.so;" .. package.cpath
local core = require "arbor.core"
for _, bytes in ipairs({"GET / HTTP/1.1\r\n\r\n", "\0\0\0\0", "\0\0\0\3{{{",
    "\0\0\0\100truncated"}) do
  local c = core.connect(sock)
  c:send_raw(bytes)
  c:shutdown_write()
  while c:recv(5000) do end
  c:close()
end
local c = core.connect(sock) -- reads a reply past the 64 MiB output limit
c:send('{"id":1,"op":"eval","json":true,"code":"return (\'x\'):rep(65 << 20)"}')
assert(#assert(c:recv()) > 65 << 20)
c:close()
c = core.connect(sock) -- leaves in the middle of an evaluation
c:send('{"id":1,"op":"eval","code":"while true do end","budget":1000000000}')
c:close()
c = core.connect(sock) -- and of a watch
c:send('{"id":1,"op":"eval","code":"watch()"}')
c:close()
LUA
sleep 0.5
kill "$follower" 2> /dev/null
"$client" ctl "$sock" shutdown > /dev/null 2>&1
wait "$engine"
status=$?
cat "$dir/engine.out"
echo "engine exit status: $status"
exit "$status"
