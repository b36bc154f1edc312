#!/usr/bin/env bash
# Multi-process async keeps one process's accuracy whatever the read batch
# (issue 15). jobs/quickstart.lua (LR, st.sync.async) on 100k synthetic
# rows: 2 processes x 1 worker must come within 0.005 eval AUC of one
# process x 2 workers, with calibration in [0.9, 1.1], at read batches of
# 2048, 4096 and 8192 rows (8 to 32 minibatches of 256 each); and the same
# for st.sync.shadow, whose rows are pushed the same way, at 8192, within
# 0.01: its 2-process runs land near one of two AUCs 0.003 apart, and one
# process's runs move by 0.002, so pairs measured 0.000-0.0051 apart in 7
# rounds (session 22; CI failed once on 0.0051). The bug this guards
# against cost shadow 0.06.
#
# Before the fix (a batch trained on row copies pulled for the whole read
# batch, ahead of training: ops/dist/steprows.c says why) the 2-process run
# came 0.01-0.04 AUC short with calibration 0.05-3.7 on this data (shadow:
# 0.06 short, calibration 3.9); now the gap is within about 0.002 and
# calibration 1.00-1.06 (docs/benchmarks.md,
# "Async across processes: accuracy by read batch"). The bounds leave room
# for the run-to-run spread of a small data set, mostly from which rank
# trains its last batches alone.
# Usage: bash e_async_accuracy.sh STRATA TMPDIR (from the source root);
# exit 0 pass, 77 skip (no UCX), 1 fail.
set -u
strata=$1
tmp=$2
"$strata" gen --rows 100000 --eval-rows 10000 --out "$tmp/d" >/dev/null 2>&1 ||
  { echo "FAIL strata gen"; exit 1; }
args=(jobs/quickstart.lua --quiet --no-pin --set 'data.generate=nil'
  --set "data.train.path=\"$tmp/d/train-*.tsv\"" --set "data.eval.path=\"$tmp/d/eval.tsv\"")
# "auc calibration" of the eval line in file $1.
evalline() { grep -E '^ *eval +auc' "$1" | tail -n 1 | awk '{ print $3, $7 }'; }
fail=0
for c in async:2048 async:4096 async:8192 shadow:8192; do
  pol=${c%:*} b=${c#*:}
  "$strata" run "${args[@]}" --set "sync=st.sync.$pol{}" --set stages.read.batch_size=$b \
    --set stages.train.workers=2 >"$tmp/one" 2>&1 ||
    { echo "FAIL one process, $pol, batch $b"; tail -n 5 "$tmp/one"; exit 1; }
  timeout 100 "$strata" launch -n 2 "${args[@]}" --set "sync=st.sync.$pol{}" \
    --set stages.read.batch_size=$b --set stages.train.workers=1 >"$tmp/two" 2>&1
  st=$?
  if grep -q 'built without UCX' "$tmp/two"; then
    echo "strata was built without UCX: skipped"; exit 77
  fi
  [ $st = 0 ] || { echo "FAIL launch -n 2, $pol, batch $b (status $st)"; tail -n 5 "$tmp/two"; exit 1; }
  read -r a1 c1 < <(evalline "$tmp/one")
  read -r a2 c2 < <(evalline "$tmp/two")
  tol=0.005
  [ "$pol" = shadow ] && tol=0.01
  if /usr/bin/python3 -c "import sys; a1, a2, c2 = float('$a1'), float('$a2'), float('$c2');
sys.exit(0 if abs(a2 - a1) <= $tol and 0.9 <= c2 <= 1.1 else 1)" 2>/dev/null; then
    echo "ok   $pol, batch $b: 2 processes auc $a2 calibration $c2, 1 process auc $a1 calibration $c1"
  else
    echo "FAIL $pol, batch $b: 2 processes auc $a2 calibration $c2, 1 process auc $a1 calibration $c1" \
      "(wanted within $tol auc, calibration 0.9-1.1)"
    fail=1
  fi
done
exit $fail
