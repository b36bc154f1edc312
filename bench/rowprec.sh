#!/usr/bin/env bash
# rowprec.sh — training speed and held-out AUC with fp32, bf16 and fp16 rows
# (storage.row_precision), RAM tier, in one run.
#
#   bench/rowprec.sh [BUILD_DIR] [ROWS] [REPS]     (defaults: build 1000000 3)
#
# Model: bench/ctr_strata.lua, the standard CTR model (26 slots x 16,
# MLP 400-400-400, AdaGrad rows, Adam dense), 1 worker x 1024 as bench/ctr.sh
# runs it. Data: `strata gen --rows ROWS --eval-rows 100000` into
# $TMPDIR/rowprec-ROWS (made once). Each repetition runs build/bench/bench_ctr
# (the job's pipeline from data already in memory, so reading is not
# counted) once per precision, interleaved (fp32 bf16 fp16 fp32 ...) so that
# drift of a shared machine hits all three alike. Prints examples/s per run,
# the median per precision and its ratio to fp32, and the eval AUC (the same
# precision gives the same AUC every repetition: one worker, allreduce).
# Results go to docs/benchmarks.md, "Compact rows".
set -eu
build=${1:-build}
rows=${2:-1000000}
reps=${3:-3}
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${TMPDIR:-/tmp}/rowprec-$rows
grep -qw avx512f /proc/cpuinfo && export OPENBLAS_CORETYPE=SkylakeX
export OPENBLAS_NUM_THREADS=1
[ -x "$build/bench/bench_ctr" ] || ninja -C "$build" bench/bench_ctr
[ -x "$build/cli/strata" ] || ninja -C "$build" cli/strata
[ -f "$dir/eval.tsv" ] || "$build/cli/strata" gen --rows "$rows" --eval-rows 100000 --out "$dir"
echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for r in $(seq 1 "$reps"); do
	for p in fp32 bf16 fp16; do
		"$build/bench/bench_ctr" "$root/bench/ctr_strata.lua" \
			--set "data.train.path=\"$dir/train-*.tsv\"" --set "data.eval.path=\"$dir/eval.tsv\"" \
			--set stages.train.workers=1 --set stages.train.minibatch=1024 \
			--set "storage.row_precision=\"$p\"" > "$out/$p.$r" 2>&1 ||
			{ echo "bench_ctr ($p) failed:"; tail -5 "$out/$p.$r"; exit 1; }
		echo "rep $r $p: $(tail -n 1 "$out/$p.$r")"
	done
done
python3 - "$out" "$reps" <<'PY'
import json, statistics, sys
out, reps = sys.argv[1], int(sys.argv[2])
res = {}
for p in ("fp32", "bf16", "fp16"):
    runs = [json.loads(open(f"{out}/{p}.{r}").read().strip().splitlines()[-1]) for r in range(1, reps + 1)]
    eps = [x["train_ex_per_s"] for x in runs]
    res[p] = {"ex_per_s": eps, "median": statistics.median(eps),
              "auc": sorted({x.get("eval_auc") for x in runs})}
for p in ("bf16", "fp16"):
    res[p]["ratio_to_fp32"] = res[p]["median"] / res["fp32"]["median"]
print("== summary")
print(json.dumps(res, indent=1))
PY
