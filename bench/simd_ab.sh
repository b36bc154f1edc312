#!/usr/bin/env bash
# simd_ab.sh — the whole training step with the AVX2 element-wise paths
# (default) against the plain-loop references (ST_SIMD=ref, runtime/simd.h),
# one build, runs interleaved (ref fast ref fast ...) so that load from
# other processes hits both alike (docs/benchmarks.md "Cutting what is not
# the GEMM").
#
#   bench/simd_ab.sh [BUILD] [ROWS] [REPS]    (defaults: build, 300000, 3)
#
# Model: bench/ctr_strata.lua (the standard model: 26 slots × 16, MLP
# 400-400-400, AdaGrad rows, Adam dense) at 1 worker × 1024, from memory
# (bench_ctr), OPENBLAS_NUM_THREADS=1. Data: `strata gen --rows ROWS
# --eval-rows ROWS/10` in $TMPDIR/strata-simd-ab-ROWS (kept for reruns).
# Prints ex/s per run, the median per side, the median over repetitions of
# fast/ref within a repetition (the figure to quote on a loaded machine),
# and each run's eval
# AUC: the two sides must print the same AUC (the fast paths give the
# references' bits), and the script fails if they do not.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
rows=${2:-300000}
reps=${3:-3}
tmp=${TMPDIR:-/tmp}
dir=$tmp/strata-simd-ab-$rows
export OPENBLAS_NUM_THREADS=1
if [ ! -f "$dir/eval.tsv" ]; then
	mkdir -p "$dir"
	"$build/cli/strata" gen --rows "$rows" --eval-rows $((rows / 10)) --out "$dir" >/dev/null
fi
run() { # side -> prints "ex/s auc"
	local env=()
	[ "$1" = ref ] && env=(ST_SIMD=ref)
	env "${env[@]}" "$build/bench/bench_ctr" "$root/bench/ctr_strata.lua" \
		--set "data.train.path=$dir/train-*.tsv" --set "data.eval.path=$dir/eval.tsv" \
		--set stages.train.workers=1 --set stages.train.minibatch=1024 2>/dev/null |
		tail -1 | python3 -c 'import json,sys; j=json.loads(sys.stdin.read()); print(j["train_ex_per_s"], j["eval_auc"])'
}
ref=() fast=() aucs=()
for r in $(seq 1 "$reps"); do
	for side in ref fast; do
		# Alternate which side goes first each repetition.
		[ $((r % 2)) = 0 ] && side=$([ $side = ref ] && echo fast || echo ref)
		read -r exs auc < <(run "$side")
		echo "rep $r $side: $exs ex/s, eval AUC $auc"
		if [ "$side" = ref ]; then ref+=("$exs"); else fast+=("$exs"); fi
		aucs+=("$auc")
	done
done
python3 - "${ref[*]}" "${fast[*]}" "${aucs[*]}" <<'PY'
import statistics, sys
ref = [float(x) for x in sys.argv[1].split()]
fast = [float(x) for x in sys.argv[2].split()]
aucs = set(sys.argv[3].split())
mr, mf = statistics.median(ref), statistics.median(fast)
pairs = [f / r for r, f in zip(ref, fast)]
print(f"median ex/s: ref {mr:.0f}, fast {mf:.0f}, fast/ref {mf / mr:.3f}")
print("fast/ref per repetition: " + " ".join(f"{p:.3f}" for p in pairs) +
      f"; median {statistics.median(pairs):.3f}")
print(f"eval AUCs printed: {sorted(aucs)}")
sys.exit(0 if len(aucs) == 1 else 1)
PY
