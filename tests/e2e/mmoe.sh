#!/usr/bin/env bash
# MMoE end to end (issue 19): jobs/mmoe_graph.lua (st.layer.mmoe, a slice
# and a tower per task, the towers' logits added into one head) on generated
# rows, with a deterministic setup (allreduce, one worker, one read thread,
# fixed seed):
#  - it trains two epochs and evaluates (an eval AUC is printed);
#  - a checkpoint after epoch 1 resumes to the model of two epochs in one go
#    (the checkpoint's model config carries the mmoe and slice node lines);
#  - its export, read back by `strata eval` (the node lines rebuild the
#    graph), gives the job's eval AUC;
#  - `strata check` accepts the job and `strata plan` prints the mmoe layer
#    with its parameters and FLOPs, and the slices;
#  - jobs/mmoe.lua (st.model.mmoe: a task, tower and head per label) on
#    two-label data (gen --labels 2) learns both labels (each eval AUC
#    above 0.6) and its export predicts one score column per head.
# Usage: mmoe.sh PATH/TO/strata
set -u
strata=$1
root=${ST_SOURCE_ROOT:?}
tmp=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
cd "$root"
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; for f in "$tmp"/out*; do [ -f "$f" ] && { echo "     == $f"; tail -n 8 "$f" | sed 's/^/     | /'; }; done; }
auc() { grep -o 'eval *auc [0-9.]*' "$1" | grep -o '[0-9.]*$'; }
# Same sgemm kernels for every run of the comparison (see predict.sh).
export STRATA_KEEP_OPENBLAS_CORETYPE=1

"$strata" gen --rows 4000 --eval-rows 1000 --files 1 --vocab 2000 --seed 5 --out "$tmp/d" \
  >/dev/null 2>&1 || { echo "FAIL gen"; exit 1; }
job=(jobs/mmoe_graph.lua --no-pin --set 'data.generate=nil'
  --set "data.train.path=\"$tmp/d/train-*.tsv\"" --set "data.eval.path=\"$tmp/d/eval.tsv\""
  --set 'sync=st.sync.allreduce{}' --set stages.read.threads=1 --set stages.train.workers=1
  --set stages.read.batch_size=1024 --set stages.train.minibatch=256 --set seed=7)

STRATA_DIGEST=1 "$strata" run "${job[@]}" --set epochs=2 >"$tmp/out_two" 2>&1; trc=$?
if [ $trc = 0 ] && [ -n "$(auc "$tmp/out_two")" ] && grep -q digest "$tmp/out_two"; then
  ok "jobs/mmoe_graph.lua trains two epochs (eval auc $(auc "$tmp/out_two"))"
else bad "jobs/mmoe_graph.lua trains (exit $trc)"; fi

STRATA_DIGEST=1 "$strata" run "${job[@]}" --set epochs=1 \
  --set "checkpoint={dir=\"$tmp/c\",every=1000}" >"$tmp/out_one" 2>&1
STRATA_DIGEST=1 "$strata" run "${job[@]}" --set epochs=2 \
  --set "checkpoint={dir=\"$tmp/c\",every=1000}" --set "export={dir=\"$tmp/x\"}" \
  --resume >"$tmp/out_res" 2>&1; rrc=$?
if [ $rrc = 0 ] && grep -q "resuming from" "$tmp/out_res" &&
   [ "$(grep digest "$tmp/out_two")" = "$(grep digest "$tmp/out_res")" ]; then
  ok "an MMoE checkpoint resumes to the uninterrupted model (same digest)"
else bad "an MMoE checkpoint resumes to the uninterrupted model (exit $rrc)"; fi

"$strata" eval "$tmp/x" "$tmp/d/eval.tsv" >"$tmp/out_e" 2>&1; erc=$?
ea=$(grep -o '^auc [0-9.]*' "$tmp/out_e"); ea=${ea#auc }
# The trainer prints 4 decimals; eval's value rounds to the same.
if [ $erc = 0 ] && [ -n "$ea" ] &&
   awk -v x="$ea" -v y="$(auc "$tmp/out_res")" 'BEGIN { d = x - y; exit !(y != "" && d <= 0.0000506 && d >= -0.0000506) }'; then
  ok "the MMoE export: strata eval rebuilds the graph and gives the job's eval auc ($ea)"
else bad "the MMoE export (eval exit $erc, auc '$ea' vs '$(auc "$tmp/out_res")')"; fi

# d_in = 26 × 8 + 13 = 221; experts 4 × (64·222 + 32·65), gates 2 × 4·222;
# FLOPs 6·in·out per map plus 2 × (6·4·32 + 8·4) for the gated sums.
if "$strata" check "${job[@]:0:1}" >"$tmp/out_check" 2>&1 &&
   "$strata" plan "${job[@]:0:1}" "${job[@]:2}" >"$tmp/out_plan" 2>&1 &&
   grep -Eq "^ +3  m +mmoe +h +64 +66928 +400816$" "$tmp/out_plan" &&
   grep -Eq "^ +4  t1 +slice +m +32 +0 +0$" "$tmp/out_plan" &&
   grep -Eq "^ +5  t2 +slice +m +32 +0 +0$" "$tmp/out_plan"; then
  ok "strata check accepts the job; plan prints the mmoe layer (66928 parameters, 400816 FLOPs) and its slices"
else bad "strata check / plan of jobs/mmoe_graph.lua"; fi

# The preset on two labels.
"$strata" gen --rows 20000 --eval-rows 4000 --files 1 --vocab 2000 --seed 5 --labels 2 \
  --out "$tmp/d2" >/dev/null 2>&1 || bad "gen --labels 2"
pjob=(jobs/mmoe.lua --no-pin --set 'data.generate=nil'
  --set "data.train.path=\"$tmp/d2/train-*.tsv\"" --set "data.eval.path=\"$tmp/d2/eval.tsv\""
  --set stages.read.batch_size=1024 --set stages.train.minibatch=256 --set epochs=2)
"$strata" run "${pjob[@]}" --set "export={dir=\"$tmp/px\"}" >"$tmp/out_preset" 2>&1; prc=$?
ca=$(grep -o 'eval *auc [0-9.]*' "$tmp/out_preset" | grep -o '[0-9.]*$')
va=$(grep -o 'eval *auc_conversion [0-9.]*' "$tmp/out_preset" | grep -o '[0-9.]*$')
if [ $prc = 0 ] && [ -n "$ca" ] && [ -n "$va" ] &&
   awk -v c="$ca" -v v="$va" 'BEGIN { exit !(c > 0.6 && v > 0.6) }'; then
  ok "st.model.mmoe learns both labels (eval auc click $ca, conversion $va)"
else bad "st.model.mmoe on two labels (exit $prc, auc '$ca' / '$va')"; fi
"$strata" predict "$tmp/px" "$tmp/d2/eval.tsv" --job jobs/mmoe.lua >"$tmp/pred" \
  2>"$tmp/out_pred"; qrc=$?
rows=$(awk -F'\t' 'NR > 1 && NF == 2' "$tmp/pred" | wc -l)
if [ $qrc = 0 ] && [ "$rows" = 4000 ] && head -n 1 "$tmp/pred" | grep -q conversion; then
  ok "its export predicts two score columns (click, conversion) for all 4000 rows"
else bad "mmoe predict (exit $qrc, $rows two-column rows; header '$(head -n 1 "$tmp/pred")')"; fi

echo "mmoe: $pass passed, $fail failed"
[ $fail -eq 0 ]
