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
"$strata" run "$root/jobs/online_days.lua" --quiet --set data.generate.rows=160000 --resume \
  >"$tmp/log" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q "phases is not supported yet" "$tmp/log"; then
  ok "resume of a job with phases is refused, not done wrong"
else
  bad "resume with phases (exit $rc)"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
