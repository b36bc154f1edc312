#!/usr/bin/env bash
# The AVX2 element-wise paths (optimizer loops, pooling, fused ReLU + bias
# backward; runtime/simd.h) give the same model as the plain-loop
# references (ST_SIMD=ref) end to end: the same model digest, progressive
# and eval metrics, for every optimizer on the rows and the dense tensors
# and for sum and mean pooling. The unit tests (test_optim_simd,
# test_nn_simd) pin each loop; this pins the trainer's use of them.
# Exit 77 on a CPU without AVX2 (both runs would take the same path).
# Usage: simd.sh PATH/TO/strata
set -u
strata=$1
root=${ST_SOURCE_ROOT:?}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$root"
grep -qw avx2 /proc/cpuinfo || { echo "skip: this CPU has no AVX2"; exit 77; }
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; [ -f "$tmp/out" ] && sed 's/^/     | /' "$tmp/out" | tail -n 15; }
summary() { grep -E "digest|progressive|eval " "$1" | sed 's/ *([0-9.]* [a-z]*\/s)//'; }
export STRATA_KEEP_OPENBLAS_CORETYPE=1

"$strata" gen --rows 12000 --eval-rows 2000 --files 1 --vocab 5000 --seed 7 --out "$tmp/d" \
  >/dev/null 2>&1 || { echo "FAIL gen"; exit 1; }
args=(tests/e2e/jobs/gen_dnn.lua --no-pin
  --set 'data.generate=nil' --set "data.train.path=\"$tmp/d/train-*.tsv\""
  --set "data.eval.path=\"$tmp/d/eval.tsv\"" --set 'sync=st.sync.allreduce{}'
  --set stages.read.threads=1 --set stages.train.workers=1 --set stages.read.batch_size=512)
# check NAME MODEL: one run per side, the summaries must match.
check() {
  local name=$1 model=$2
  for side in ref avx2; do
    local e=()
    [ $side = ref ] && e=(ST_SIMD=ref)
    env "${e[@]}" STRATA_DIGEST=1 "$strata" run "${args[@]}" --set "model=$model" \
      >"$tmp/out" 2>&1 || { bad "$name: run $side"; return; }
    summary "$tmp/out" >"$tmp/$side"
    grep -q digest "$tmp/$side" || { bad "$name: $side prints a digest"; return; }
  done
  if cmp -s "$tmp/ref" "$tmp/avx2"; then ok "$name"; else
    bad "$name"; diff "$tmp/ref" "$tmp/avx2" | head -n 8 | sed 's/^/     | /'; fi
}
dnn='st.model.dnn{emb_dim=12, hidden={40, 19}, activation="relu"'
check "adagrad rows + adam dense, sum pooling" \
  "$dnn, sparse_optimizer=st.optim.adagrad{lr=0.05}, dense_optimizer=st.optim.adam{lr=0.003}}"
check "rowwise adagrad + sgd dense, mean pooling" \
  "$dnn, pooling=\"mean\", sparse_optimizer=st.optim.adagrad{lr=0.05, rowwise=true}, dense_optimizer=st.optim.sgd{lr=0.05}}"
check "adam rows + adagrad dense" \
  "$dnn, sparse_optimizer=st.optim.adam{lr=0.003}, dense_optimizer=st.optim.adagrad{lr=0.01}}"
check "ftrl (lr model)" "st.model.lr{optimizer=st.optim.ftrl{lr=0.1, l1=0.5}}"
echo "simd.sh: $pass passed, $fail failed"
[ "$fail" = 0 ]
