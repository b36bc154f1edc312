#!/usr/bin/env bash
# DIN end to end (issue 19): jobs/din.lua (st.model.din: st.layer.attention
# over a list field kept as a sequence) on `strata gen --history` data, with
# a deterministic setup (allreduce, one worker, one read thread, fixed seed):
#  - it trains and evaluates (an eval AUC is printed);
#  - jobs/din_graph.lua, the same graph written by hand, trains to the same
#    model digest (the preset is that graph bit for bit);
#  - a checkpoint after epoch 1 resumes to the model of two epochs in one go
#    (the checkpoint's model config carries the attention node);
#  - its export, read back by `strata eval --job` (the node lines rebuild the
#    graph, the job's csv columns read the history), gives the job's eval
#    AUC, and `strata predict --job` scores every row;
#  - `strata plan` prints the attention layer with its parameters.
# Usage: din.sh PATH/TO/strata
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

"$strata" gen --rows 20000 --eval-rows 2000 --vocab 5000 --history 12 --seed 3 \
  --threads 1 --out "$tmp/d" >/dev/null 2>&1 || { echo "FAIL gen --history"; exit 1; }
job=(jobs/din.lua --no-pin
  --set "data.train.path=\"$tmp/d/train-*.tsv\"" --set "data.eval.path=\"$tmp/d/eval.tsv\""
  --set 'sync=st.sync.allreduce{}' --set stages.read.threads=1 --set stages.train.workers=1
  --set stages.read.batch_size=1024 --set stages.train.minibatch=256 --set seed=7)

STRATA_DIGEST=1 "$strata" run "${job[@]}" --set epochs=2 >"$tmp/out_two" 2>&1; trc=$?
if [ $trc = 0 ] && [ -n "$(auc "$tmp/out_two")" ] && grep -q digest "$tmp/out_two"; then
  ok "jobs/din.lua trains two epochs (eval auc $(auc "$tmp/out_two"))"
else bad "jobs/din.lua trains (exit $trc)"; fi

STRATA_DIGEST=1 "$strata" run jobs/din_graph.lua "${job[@]:1}" --set epochs=2 \
  >"$tmp/out_graph" 2>&1; grc=$?
if [ $grc = 0 ] && grep -q digest "$tmp/out_graph" &&
   [ "$(grep digest "$tmp/out_two")" = "$(grep digest "$tmp/out_graph")" ] &&
   [ "$(auc "$tmp/out_two")" = "$(auc "$tmp/out_graph")" ]; then
  ok "st.model.din is jobs/din_graph.lua's hand-written graph (same digest and eval auc)"
else bad "st.model.din is jobs/din_graph.lua's hand-written graph (exit $grc)"; fi

STRATA_DIGEST=1 "$strata" run "${job[@]}" --set epochs=1 \
  --set "checkpoint={dir=\"$tmp/c\",every=1000}" >"$tmp/out_one" 2>&1
STRATA_DIGEST=1 "$strata" run "${job[@]}" --set epochs=2 \
  --set "checkpoint={dir=\"$tmp/c\",every=1000}" --set "export={dir=\"$tmp/x\"}" \
  --resume >"$tmp/out_res" 2>&1; rrc=$?
if [ $rrc = 0 ] && grep -q "resuming from" "$tmp/out_res" &&
   [ "$(grep digest "$tmp/out_two")" = "$(grep digest "$tmp/out_res")" ]; then
  ok "a DIN checkpoint resumes to the uninterrupted model (same digest)"
else bad "a DIN checkpoint resumes to the uninterrupted model (exit $rrc)"; fi

"$strata" eval "$tmp/x" "$tmp/d/eval.tsv" --job jobs/din.lua >"$tmp/out_e" 2>&1; erc=$?
"$strata" predict "$tmp/x" "$tmp/d/eval.tsv" --job jobs/din.lua --out "$tmp/p" \
  >"$tmp/out_p" 2>&1; prc=$?
ea=$(grep -o '^auc [0-9.]*' "$tmp/out_e"); ea=${ea#auc }
# The trainer prints 4 decimals; eval's value rounds to the same.
if [ $erc = 0 ] && [ $prc = 0 ] && [ "$(wc -l <"$tmp/p")" = 2000 ] && [ -n "$ea" ] &&
   awk -v x="$ea" -v y="$(auc "$tmp/out_res")" 'BEGIN { d = x - y; exit !(y != "" && d <= 0.0000506 && d >= -0.0000506) }' &&
   awk '$1 <= 0 || $1 >= 1 { exit 1 }' "$tmp/p"; then
  ok "the DIN export: strata eval --job gives the job's eval auc ($ea), predict scores every row"
else
  bad "the DIN export (eval exit $erc, predict exit $prc, auc '$ea' vs '$(auc "$tmp/out_res")')"
fi

if "$strata" plan "${job[@]:0:1}" "${job[@]:2}" >"$tmp/out_plan" 2>&1 &&
   grep -Eq "^ +1  din +attention +- +8 +1225 +9600 \*$" "$tmp/out_plan" &&
   grep -Eq "^ +0  e +embed +- +216 " "$tmp/out_plan"; then
  ok "strata plan prints the attention layer (1225 parameters, FLOPs per key) and embed without the history"
else bad "strata plan prints the attention layer"; fi

echo "din: $pass passed, $fail failed"
[ $fail -eq 0 ]
