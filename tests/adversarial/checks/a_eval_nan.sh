#!/usr/bin/env bash
# A diverging learning rate makes every score NaN. The exact AUC used to spin
# forever on a NaN (its tie walk never stepped past one), so both the eval
# at the end of `strata run` and `strata eval` on the export hung at 100%
# CPU. Both must finish, count the non-finite scores and say so.
# Usage: bash a_eval_nan.sh STRATA TMPDIR
set -u
strata=$1
tmp=$2
"$strata" gen --rows 20000 --eval-rows 2000 --seed 7 --out "$tmp/d" >/dev/null || exit 1
cat >"$tmp/nan.lua" <<JOB
local st = require "strata"
return st.job {
  name = "nan",
  data = {
    train = st.data.criteo { path = "$tmp/d/train-*.tsv" },
    eval = st.data.criteo { path = "$tmp/d/eval.tsv" },
  },
  -- 1e38 is finite, so the job is valid, but the weights overflow at once.
  model = st.model.lr { optimizer = st.optim.adagrad { lr = 1e38, lr_dense = 1e38 } },
  -- "warn": train on to the end, so the eval and the export see a NaN model
  -- (the default, "fail", stops at the first non-finite loss).
  stages = { read = { batch_size = 4096 }, train = { minibatch = 256, on_nonfinite = "warn" } },
  export = { dir = "$tmp/exp" },
}
JOB
fail=0
timeout -k 5 60 "$strata" run "$tmp/nan.lua" --quiet >"$tmp/run.out" 2>&1
rc=$?
cat "$tmp/run.out"
if [ "$rc" -ne 0 ]; then echo "FAIL: strata run exited $rc (124: it hung in the eval)"; fail=1
elif ! grep -Eq "eval: 2000 of 2000 scores are not finite" "$tmp/run.out" ||
     ! grep -Eq "eval +auc nan" "$tmp/run.out"; then
  echo "FAIL: strata run did not report the non-finite eval scores"; fail=1
fi
timeout -k 5 30 "$strata" eval "$tmp/exp" "$tmp/d/eval.tsv" >"$tmp/eval.out" 2>&1
rc=$?
cat "$tmp/eval.out"
if [ "$rc" -ne 0 ]; then echo "FAIL: strata eval exited $rc (124: it hung)"; fail=1
elif ! grep -Eq "^auc nan  logloss nan  examples 2000  \(2000 non-finite scores, left out of the AUC\)$" "$tmp/eval.out" ||
     ! grep -Eq "warning: 2000 of 2000 scores are not finite" "$tmp/eval.out"; then
  echo "FAIL: strata eval did not report the non-finite scores"; fail=1
fi
exit $fail
