#!/usr/bin/env bash
# Online learning end to end: jobs/online_days.lua on small synthetic days
# with a drifting hidden model — each day scored before training on it, a
# per-day AUC table, one full export then a delta per day, a checkpoint per
# day, and `strata eval` over the export chain. Usage: online.sh PATH/TO/strata
set -u
strata=$1
root=${ST_SOURCE_ROOT:?}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; [ -f "$tmp/log" ] && sed 's/^/     | /' "$tmp/log" | tail -n 20; }

"$strata" run "$root/jobs/online_days.lua" --quiet --set data.generate.rows=160000 >"$tmp/log" 2>&1
rc=$?
rows=$(sed -n '/slices, each scored before training on it/,$p' "$tmp/log" | grep -c '^  day-')
first=$(grep '^  day-000 ' "$tmp/log" | awk '{print $3}')
last=$(grep '^  day-007 ' "$tmp/log" | awk '{print $3}')
if [ $rc -eq 0 ] && [ "$rows" -eq 8 ] && awk "BEGIN{exit !($last > $first + 0.1)}"; then
  ok "8 days scored before training, per-day table (day 0 auc $first, day 7 auc $last)"
else
  bad "online job (exit $rc, $rows table rows, day0 $first day7 $last)"
fi
full=$(ls out/online/export | grep -c -- '-full$')
delta=$(ls out/online/export | grep -c -- '-delta$')
if [ "$full" -eq 1 ] && [ "$delta" -eq 7 ] && [ "$(ls out/online/ckpt | grep -c '^ckpt-')" -eq 2 ]; then
  ok "one full export, a delta per later day, checkpoints kept per retention"
else
  bad "exports: $full full, $delta delta; ckpts: $(ls out/online/ckpt)"
fi
if [ "$(grep -c '"slice_auc"' out/online/metrics.jsonl)" -eq 8 ]; then
  ok "per-day AUC and logloss in the metrics file"
else
  bad "metrics file: $(grep -c '"slice_auc"' out/online/metrics.jsonl) slice lines"
fi
"$strata" eval out/online/export data/online/day-007.tsv >"$tmp/log" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -Eq '^auc 0\.[5-9][0-9]*  logloss [0-9.]+  examples 20000$' "$tmp/log"; then
  ok "strata eval applies the full export and its 7 deltas"
else
  bad "strata eval over the chain (exit $rc)"
fi
# Killed at random moments and resumed (each resume skips the days that
# ended and redoes the one in progress): the same final parameters.
mkdir -p "$tmp/k" && cd "$tmp/k"
RANDOM=${ST_ONLINE_SEED:-3}
kills=0
for i in 1 2 3 4 5 6; do
  "$strata" run "$root/jobs/online_days.lua" --quiet --set data.generate.rows=160000 --resume \
    >"$tmp/log" 2>&1 &
  pid=$!
  sleep "$((RANDOM % 3)).$((RANDOM % 10))"
  kill -9 "$pid" 2>/dev/null && kills=$((kills + 1))
  wait "$pid" 2>/dev/null
done
"$strata" run "$root/jobs/online_days.lua" --quiet --set data.generate.rows=160000 --resume \
  >"$tmp/log" 2>&1
rc=$?
final=$(ls "$tmp/out/online/ckpt" | tail -n 1)
if [ $rc -eq 0 ] && [ -n "$final" ] &&
   cmp -s "$tmp/out/online/ckpt/$final/dense.safetensors" "out/online/ckpt/$final/dense.safetensors" &&
   cmp -s "$tmp/out/online/ckpt/$final/table-0.rows" "out/online/ckpt/$final/table-0.rows"; then
  ok "an online job killed $kills times and resumed ends with the same parameters"
else
  bad "online resume (exit $rc, $kills kills, final $final: $(ls out/online/ckpt 2>&1))"
fi
cd "$tmp"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
