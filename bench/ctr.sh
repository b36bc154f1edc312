#!/bin/sh
# ctr.sh — strata against PyTorch on the standard CTR model, in one run.
#
#   bench/ctr.sh [BUILD_DIR] [ROWS] [EVAL_ROWS]       (defaults: build 2000000 200000)
#
# Model and settings: bench/ctr_strata.lua = bench/torch_ctr.py (26 slots ×
# 16, 13 dense, MLP 400-400-400, global minibatch 1024, AdaGrad rows, Adam
# dense, one epoch). Data: `strata gen --rows ROWS --eval-rows EVAL_ROWS`
# into $TMPDIR/ctrbench-ROWS (made once). Measures
#   (a) end to end from the TSV files: `strata run` wall time, and
#       torch_ctr.py's whole run (loader + training + eval), the fastest of
#       its configurations: numpy or pandas loader, fp32 or (where the CPU
#       has avx512_bf16 or AMX) bf16 autocast;
#   (b) training only, data already in memory: bench_ctr (the job's
#       pipeline with an in-memory source) and torch_ctr.py's training loop
#       over pre-tensorized minibatches;
# and prints examples/s, the ratios and the held-out AUC of both.
# Results go to docs/benchmarks.md, "Training speed against PyTorch".
#
# Threads (2 cores): OpenBLAS 0.3.21 detects these CPUs as Haswell (AVX2);
# OPENBLAS_CORETYPE=SkylakeX selects its AVX-512 kernels, for both systems.
# strata: 2 train workers x 512 with allreduce (one step of 1024, as torch),
# OPENBLAS_NUM_THREADS=1, threads unpinned on 2 cores (the CLI decides) — see
# STRATA_WORKERS / STRATA_MB / STRATA_BLAS_THREADS to change it.
# torch: torch.set_num_threads(2); libblas.so.3 is Debian's
# openblas-pthread 0.3.21 (alternatives); OMP_WAIT_POLICY=PASSIVE, without
# which torch's OpenMP threads spin against OpenBLAS's on 2 cores (3-6×
# slower).
set -eu
build=${1:-build}
rows=${2:-2000000}
eval_rows=${3:-200000}
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${TMPDIR:-/tmp}/ctrbench-$rows
workers=${STRATA_WORKERS:-2}
mb=${STRATA_MB:-512}
blas_threads=${STRATA_BLAS_THREADS:-1}
# AVX-512 kernels only where the CPU has AVX-512 (SIGILL otherwise).
grep -qw avx512f /proc/cpuinfo && export OPENBLAS_CORETYPE=SkylakeX
/usr/bin/python3 -c 'import torch, pandas' 2>/dev/null || {
	echo "ctr.sh: the PyTorch side needs Debian's python3-torch and python3-pandas" \
		"(apt-get install python3-torch python3-pandas)" >&2
	exit 1
}

[ -x "$build/cli/strata" ] || ninja -C "$build" cli/strata
[ -x "$build/bench/bench_ctr" ] || ninja -C "$build" bench/bench_ctr
if [ ! -f "$dir/eval.tsv" ]; then
	"$build/cli/strata" gen --rows "$rows" --eval-rows "$eval_rows" --out "$dir"
fi
cat "$dir"/*.tsv > /dev/null   # warm the page cache for both
sets="--set data.train.path=\"$dir/train-*.tsv\" --set data.eval.path=\"$dir/eval.tsv\"
      --set stages.train.workers=$workers --set stages.train.minibatch=$mb"
out=${TMPDIR:-/tmp}/ctrbench-out
mkdir -p "$out"

echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
echo "== commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"

echo "== strata (a) end to end: strata run"
t0=$(date +%s.%N)
if eval OPENBLAS_NUM_THREADS=$blas_threads "$build/cli/strata" run "$root/bench/ctr_strata.lua" $sets \
	> "$out/strata_run.txt" 2>&1; then
	t1=$(date +%s.%N)
	s_a=$(echo "$t1 - $t0" | bc -l)
	s_auc_a=$(sed -n 's/.*eval *auc \([0-9.]*\).*/\1/p' "$out/strata_run.txt" | tail -1)
	tail -3 "$out/strata_run.txt"
else
	s_a=""
	echo "strata run failed:"; tail -3 "$out/strata_run.txt"
fi

echo "== strata (b) from memory: bench_ctr"
eval OPENBLAS_NUM_THREADS=$blas_threads "$build/bench/bench_ctr" "$root/bench/ctr_strata.lua" $sets \
	| tee "$out/strata_mem.txt"
s_b=$(sed -n 's/.*"train_ex_per_s": \([0-9.]*\).*/\1/p' "$out/strata_mem.txt")
s_auc=$(sed -n 's/.*"eval_auc": \([0-9.]*\).*/\1/p' "$out/strata_mem.txt")
s_gf=$(sed -n 's/.*"gflops": \([0-9.]*\).*/\1/p' "$out/strata_mem.txt")

# PyTorch at its best: both loaders, fp32, and bf16 autocast where the CPU
# has it (avx512_bf16 or AMX; elsewhere torch emulates bf16, ~12x slower);
# the fastest configuration of each measure is the one compared.
cfgs="numpy pandas"
grep -Eqw 'avx512_bf16|amx_bf16' /proc/cpuinfo && cfgs="$cfgs numpy-bf16 pandas-bf16"
t_a=0 t_b=0 t_auc= t_cfg_a= t_cfg_b=
for c in $cfgs; do
	echo "== torch (a) and (b): bench/torch_ctr.py, $c"
	OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 "$root/bench/torch_ctr.py" --threads 2 \
		--loader "${c%-bf16}" $(case $c in *-bf16) echo --bf16 ;; esac) \
		--train "$dir/train-*.tsv" --eval "$dir/eval.tsv" | tee "$out/torch-$c.txt"
	a=$(sed -n 's/.*"e2e_ex_per_s": \([0-9.]*\).*/\1/p' "$out/torch-$c.txt")
	b=$(sed -n 's/.*"train_ex_per_s": \([0-9.]*\).*/\1/p' "$out/torch-$c.txt")
	if [ "$(echo "$a > $t_a" | bc -l)" = 1 ]; then
		t_a=$a t_cfg_a=$c
		t_auc=$(sed -n 's/.*"eval_auc": \([0-9.]*\).*/\1/p' "$out/torch-$c.txt")
	fi
	[ "$(echo "$b > $t_b" | bc -l)" = 1 ] && t_b=$b t_cfg_b=$c
done

echo "== summary ($rows train rows, $eval_rows eval rows)"
if [ -n "$s_a" ]; then
	s_a_exs=$(echo "$rows / $s_a" | bc -l)
	printf '(a) end to end: strata %.0f ex/s, torch %.0f ex/s (%s), ratio %.2f (target >= 3)\n' \
		"$s_a_exs" "$t_a" "$t_cfg_a" "$(echo "$s_a_exs / $t_a" | bc -l)"
	printf '    strata run eval auc %s\n' "$s_auc_a"
else
	printf '(a) end to end: strata run not available; torch %.0f ex/s\n' "$t_a"
fi
printf '(b) from memory: strata %.0f ex/s, torch %.0f ex/s (%s), ratio %.2f (target >= 1.5)\n' \
	"$s_b" "$t_b" "$t_cfg_b" "$(echo "$s_b / $t_b" | bc -l)"
printf 'held-out auc: strata %s, torch %s (target |diff| <= 0.002)\n' "$s_auc" "$t_auc"
printf 'strata dense GFLOP/s in (b): %s\n' "$s_gf"
