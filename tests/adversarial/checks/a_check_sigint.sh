#!/usr/bin/env bash
# `strata check` on a job file that never ends must stop on SIGINT, also
# when started in the background, where the shell makes it ignore SIGINT
# (strata run takes SIGINT with sigwait there; check held on for the whole
# 10 s watchdog). Exit 0 pass, 1 fail.
# Usage: bash a_check_sigint.sh STRATA TMPDIR
set -u
strata=$1
tmp=$2
printf 'local st = require "strata"\nwhile true do end\n' >"$tmp/loop.lua"
start=$(date +%s%N)
"$strata" check "$tmp/loop.lua" >"$tmp/out" 2>&1 &
pid=$!
# Until the child has exec'd strata (its SIGINT then ignored, as the shell
# sets it for a background command), a SIGINT would kill the forked shell
# itself before it even opened the output file.
for _ in $(seq 100); do
  [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$(readlink -f "$strata")" ] && break
  sleep 0.02
done
# Repeated: one sent before the loader set its handler is ignored, the next
# lands; the result does not depend on when the first one arrives.
for _ in $(seq 40); do
  kill -INT "$pid" 2>/dev/null || break
  sleep 0.2
done
wait "$pid"
rc=$?
secs=$(( ($(date +%s%N) - start) / 1000000000 ))
cat "$tmp/out"
echo "exit $rc after ${secs}s"
grep -q "loop.lua:2: interrupted while the job file ran" "$tmp/out" || { echo "FAIL: no 'interrupted'"; exit 1; }
grep -q "stopped by signal" "$tmp/out" || { echo "FAIL: no 'stopped by signal'"; exit 1; }
[ "$rc" -eq 1 ] || { echo "FAIL: exit $rc, wanted 1"; exit 1; }
[ "$secs" -lt 9 ] || { echo "FAIL: took ${secs}s: the watchdog stopped it, not SIGINT"; exit 1; }
exit 0
