#!/bin/sh
# gpu.sh — strata on one GPU against PyTorch on the same GPU, in one run.
#
#   bench/gpu.sh [BUILD_DIR] [ROWS] [EVAL_ROWS]     (defaults: build-gpu 2000000 200000)
#
# The standard CTR model of bench/ctr.sh (bench/ctr_strata.lua = 26 slots x
# 16, 13 dense, MLP 400-400-400, AdaGrad rows, Adam dense, one epoch,
# minibatch 1024) on strata's synthetic Criteo TSV (`strata gen`, made once
# in $TMPDIR/ctrbench-ROWS, shared with ctr.sh), data in memory for both:
#   (1) the model in GPU memory:
#       strata: bench_gpu (cuda/ kernels: device hash table over the host
#               tier, pooling, cuBLAS MLP, row AdaGrad, dense Adam)
#       torch:  torch_gpu.py, nn.EmbeddingBag + the same MLP on the GPU
#   (2) a model 4x larger than the GPU budget:
#       strata: bench_gpu --gpu-frac 0.25 (the device table gets a quarter of
#               the model's bytes and caches the batches' working sets)
#       torch:  torch_gpu.py --emb-on cpu (the embedding and its AdaGrad on
#               the host, the MLP on the GPU: PyTorch's usual answer)
# and prints examples/s, the ratios and the held-out AUCs. FP32 on both
# sides (no TF32); pass STRATA_GPU_TF32=1 to allow TF32 on both.
#
# Needs a CUDA build (meson setup build-gpu -Dcuda=enabled) and a GPU; on a
# machine without one it says so and exits 77. The strata side is a driver
# of the kernels, not the trainer: the GPU pipeline is not integrated into
# `strata run` yet (docs/gpu.md). Results belong in docs/benchmarks.md once
# measured on a GPU machine.
set -eu
build=${1:-build-gpu}
rows=${2:-2000000}
eval_rows=${3:-200000}
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${TMPDIR:-/tmp}/ctrbench-$rows
out=${TMPDIR:-/tmp}/gpubench-out
mkdir -p "$out"
tf32=""
[ "${STRATA_GPU_TF32:-0}" = 1 ] && tf32="--tf32"

[ -x "$build/bench/bench_gpu" ] || ninja -C "$build" bench/bench_gpu cli/strata || {
	echo "gpu.sh: $build has no bench_gpu (configure it with -Dcuda=enabled)"; exit 77; }
set +e
"$build/bench/bench_gpu" --check
rc=$?
set -e
[ $rc -eq 77 ] && { echo "gpu.sh: no CUDA device: skipped"; exit 77; }
[ $rc -eq 0 ] || exit 1
if [ ! -f "$dir/eval.tsv" ]; then
	"$build/cli/strata" gen --rows "$rows" --eval-rows "$eval_rows" --out "$dir"
fi
cat "$dir"/*.tsv > /dev/null
job="$root/bench/ctr_strata.lua"
sets="--set data.train.path=\"$dir/train-*.tsv\" --set data.eval.path=\"$dir/eval.tsv\"
      --set stages.train.workers=1 --set stages.train.minibatch=1024"
tdata="--train $dir/train-*.tsv --eval $dir/eval.tsv"

echo "== machine: $(nproc) cores, $(nvidia-smi -L 2>/dev/null | head -1)"
echo "== commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"

field() { sed -n "s/.*\"$1\": \"*\([0-9.]*\).*/\1/p" "$2" | tail -1; }

run_strata() { # name, extra args
	name=$1; shift
	echo "== strata: $name"
	set +e
	eval "$build/bench/bench_gpu" "$job" $sets $tf32 "$@" > "$out/strata_$name.txt" 2>&1
	rc=$?
	set -e
	cat "$out/strata_$name.txt"
	[ $rc -eq 77 ] && { echo "gpu.sh: no CUDA device: skipped"; exit 77; }
	[ $rc -eq 0 ] || { echo "gpu.sh: bench_gpu failed ($rc)"; exit 1; }
}

run_torch() { # name, extra args
	name=$1; shift
	echo "== torch: $name"
	"${PYTHON:-/usr/bin/python3}" "$root/bench/torch_gpu.py" $tdata $tf32 \
		--threads "$(nproc)" "$@" | tee "$out/torch_$name.txt"
}

run_strata fit
run_torch fit
# PyTorch at its best: also with the whole data set on the GPU (no copy per
# batch); the summary takes the faster of the two.
run_torch fit_dev --data cuda
run_strata big --gpu-frac 0.25
run_torch big --emb-on cpu

echo "== summary ($rows train rows, $eval_rows eval rows)"
for case in fit big; do
	s=$(field train_ex_per_s "$out/strata_$case.txt")
	tc=$case
	[ $case = fit ] && awk -v a="$(field train_ex_per_s "$out/torch_fit_dev.txt")" \
		-v b="$(field train_ex_per_s "$out/torch_fit.txt")" 'BEGIN { exit !(a > b) }' &&
		tc=fit_dev
	t=$(field train_ex_per_s "$out/torch_$tc.txt")
	sa=$(field eval_auc "$out/strata_$case.txt")
	ta=$(field eval_auc "$out/torch_$tc.txt")
	label="model in GPU memory          "
	[ $case = big ] && label="model 4x the GPU budget      "
	printf '%s strata %.0f ex/s, torch (%s) %.0f ex/s, ratio %.2f; auc strata %s torch %s\n' \
		"$label" "$s" "$tc" "$t" "$(awk -v s="$s" -v t="$t" 'BEGIN { print s / t }')" "$sa" "$ta"
done
