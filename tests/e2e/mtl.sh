#!/usr/bin/env bash
# Several labels, one head per label, end to end (issue 19): jobs/mtl.lua (a
# shared-bottom graph with a click head and a conversion head) on `strata
# gen --labels 2` data, with a deterministic setup (allreduce, one worker,
# one read thread, fixed seed):
#  - it trains and evaluates; both heads' eval AUCs are printed and well
#    above 0.5 on the planted data;
#  - a checkpoint after epoch 1 resumes to the model of two epochs in one go
#    (the checkpoint's model config carries the heads);
#  - its export, read back by `strata eval --job`, gives both of the job's
#    eval AUCs, and `strata predict --job` writes a header naming the heads
#    and two score columns for every row;
#  - a head on a label the data does not have is refused at the job's line;
#  - with UCX: allreduce on 2 processes of one worker trains exactly the
#    two-head model (digest, both eval AUCs) of 1 process of 2 workers.
# Usage: mtl.sh PATH/TO/strata [HAVE_UCX(0|1)]
set -u
strata=$1
have_ucx=${2:-0}
root=${ST_SOURCE_ROOT:?}
tmp=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
cd "$root"
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; for f in "$tmp"/out*; do [ -f "$f" ] && { echo "     == $f"; tail -n 8 "$f" | sed 's/^/     | /'; }; done; }
auc() { grep -o 'eval *auc [0-9.]*' "$1" | grep -o '[0-9.]*$'; }
cauc() { grep -o 'eval *auc_conversion [0-9.]*' "$1" | grep -o '[0-9.]*$'; }
# |x - y| within the 4-decimal rounding of the trainer's line
near() { awk -v x="$1" -v y="$2" 'BEGIN { d = x - y; exit !(x != "" && y != "" && d <= 0.0000506 && d >= -0.0000506) }'; }
above() { awk -v x="$1" -v m="$2" 'BEGIN { exit !(x != "" && x + 0 > m + 0) }'; }
# Same sgemm kernels for every run of the comparison (see predict.sh).
export STRATA_KEEP_OPENBLAS_CORETYPE=1

"$strata" gen --rows 40000 --eval-rows 5000 --vocab 5000 --labels 2 --seed 3 \
  --threads 1 --out "$tmp/d" >/dev/null 2>&1 || { echo "FAIL gen --labels 2"; exit 1; }
# The planted conversion: only on clicked rows, and not on all of them.
if awk -F'\t' '$2 == 1 && $1 != 1 { bad = 1 } { c += $1; v += $2 }
    END { exit !(bad == 0 && v > 0 && v < c) }' "$tmp/d/train-00000.tsv"; then
  ok "gen --labels 2 writes a conversion column on clicked rows only"
else bad "gen --labels 2 writes a conversion column on clicked rows only"; fi

job=(jobs/mtl.lua --no-pin
  --set "data.train.path=\"$tmp/d/train-*.tsv\"" --set "data.eval.path=\"$tmp/d/eval.tsv\""
  --set 'sync=st.sync.allreduce{}' --set stages.read.threads=1 --set stages.train.workers=1
  --set stages.read.batch_size=1024 --set stages.train.minibatch=256 --set seed=7)

STRATA_DIGEST=1 "$strata" run "${job[@]}" --set epochs=2 >"$tmp/out_two" 2>&1; trc=$?
a=$(auc "$tmp/out_two"); c=$(cauc "$tmp/out_two")
if [ $trc = 0 ] && above "$a" 0.6 && above "$c" 0.6 && grep -q digest "$tmp/out_two" &&
   grep -q "progressive  auc_conversion" "$tmp/out_two"; then
  ok "jobs/mtl.lua trains two heads (eval auc $a, auc_conversion $c)"
else bad "jobs/mtl.lua trains two heads (exit $trc, auc '$a', auc_conversion '$c')"; fi

STRATA_DIGEST=1 "$strata" run "${job[@]}" --set epochs=1 \
  --set "checkpoint={dir=\"$tmp/c\",every=1000}" >"$tmp/out_one" 2>&1
STRATA_DIGEST=1 "$strata" run "${job[@]}" --set epochs=2 \
  --set "checkpoint={dir=\"$tmp/c\",every=1000}" --set "export={dir=\"$tmp/x\"}" \
  --resume >"$tmp/out_res" 2>&1; rrc=$?
if [ $rrc = 0 ] && grep -q "resuming from" "$tmp/out_res" &&
   [ "$(grep digest "$tmp/out_two")" = "$(grep digest "$tmp/out_res")" ] &&
   [ "$(cauc "$tmp/out_two")" = "$(cauc "$tmp/out_res")" ]; then
  ok "a two-head checkpoint resumes to the uninterrupted model (same digest, same AUCs)"
else bad "a two-head checkpoint resumes to the uninterrupted model (exit $rrc)"; fi

"$strata" eval "$tmp/x" "$tmp/d/eval.tsv" --job jobs/mtl.lua >"$tmp/out_e" 2>&1; erc=$?
"$strata" predict "$tmp/x" "$tmp/d/eval.tsv" --job jobs/mtl.lua --out "$tmp/p" \
  >"$tmp/out_p" 2>&1; prc=$?
ea=$(grep -o '^auc [0-9.]*' "$tmp/out_e"); ea=${ea#auc }
ec=$(grep -o '^auc_conversion [0-9.]*' "$tmp/out_e"); ec=${ec#auc_conversion }
if [ $erc = 0 ] && near "$ea" "$(auc "$tmp/out_res")" && near "$ec" "$(cauc "$tmp/out_res")"; then
  ok "the export: strata eval --job gives both heads' job AUCs ($ea, $ec)"
else bad "the export: strata eval (exit $erc, auc '$ea' vs '$(auc "$tmp/out_res")', conversion '$ec' vs '$(cauc "$tmp/out_res")')"; fi
if [ $prc = 0 ] && [ "$(head -1 "$tmp/p")" = "$(printf 'click\tconversion')" ] &&
   [ "$(wc -l <"$tmp/p")" = 5001 ] &&
   awk -F'\t' 'NR > 1 && (NF != 2 || $1 <= 0 || $1 >= 1 || $2 <= 0 || $2 >= 1) { exit 1 }' "$tmp/p"; then
  ok "strata predict writes a header naming the heads and two scores for every row"
else bad "strata predict writes two columns (exit $prc, $(wc -l <"$tmp/p" 2>/dev/null) lines)"; fi

# A head on a label the data does not have: the job's line, the head's label.
"$strata" check jobs/mtl.lua --set 'model.heads={{label="click",output="ctr"},{label="purchase",output="cvr"}}' \
  >"$tmp/out_chk" 2>&1; crc=$?
if [ $crc != 0 ] && grep -q "head 'purchase': data.train has no label 'purchase' (its labels: click, conversion)" "$tmp/out_chk"; then
  ok "a head on a label the data lacks is refused, naming it"
else bad "a head on a label the data lacks is refused (exit $crc)"; fi

# Two heads across processes: only the dense graph and the loss grew, so
# the identity of dist.sh holds (P processes x 1 worker = 1 process x P
# workers on the same global batch).
if [ "$have_ucx" = 1 ]; then
  small=(jobs/mtl.lua --no-pin --set "data.train.path=\"$tmp/d/train-*.tsv\""
    --set "data.eval.path=\"$tmp/d/eval.tsv\"" --set seed=7 --set stages.read.threads=1
    --set 'sync=st.sync.allreduce{}' --set stages.train.minibatch=256)
  STRATA_DIGEST=1 "$strata" run "${small[@]}" --set stages.train.workers=2 \
    --set stages.read.batch_size=512 >"$tmp/out_d1" 2>&1; r1=$?
  STRATA_DIGEST=1 timeout 300 "$strata" launch -n 2 "${small[@]}" --set stages.train.workers=1 \
    --set stages.read.batch_size=256 >"$tmp/out_d2" 2>&1; r2=$?
  if [ $r1 = 0 ] && [ $r2 = 0 ] && grep -q digest "$tmp/out_d1" &&
     [ "$(grep digest "$tmp/out_d1")" = "$(grep digest "$tmp/out_d2")" ] &&
     [ -n "$(cauc "$tmp/out_d1")" ] && [ "$(auc "$tmp/out_d1")" = "$(auc "$tmp/out_d2")" ] &&
     [ "$(cauc "$tmp/out_d1")" = "$(cauc "$tmp/out_d2")" ]; then
    ok "two heads on 2 processes = 1 process of 2 workers (digest, both eval AUCs)"
  else bad "two heads on 2 processes (exit $r1, $r2)"; fi
else
  echo "skip two heads across processes: this build has no UCX (not counted)"
fi

echo "mtl: $pass passed, $fail failed"
[ $fail -eq 0 ]
