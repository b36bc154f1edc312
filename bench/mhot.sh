#!/bin/sh
# mhot.sh — strata against PyTorch (nn.EmbeddingBag) on multi-hot data, in
# one run (issue 18).
#
#   bench/mhot.sh [BUILD_DIR] [ROWS] [EVAL_ROWS]       (defaults: build 200000 20000)
#
# Data: `strata gen --multi-hot 19 --rows ROWS --eval-rows EVAL_ROWS` into
# $TMPDIR/mhotbench-ROWS (made once): 26 fields of 1..19 keys (10 on
# average; missing fields empty). Model and settings: bench/mhot_strata.lua
# = bench/torch_mhot.py (26 slots x 16 sum-pooled, 13 dense, MLP
# 400-400-400, minibatch 1024, AdaGrad rows, Adam dense, one epoch).
# Measures end to end from the TSV files (strata run wall time; the torch
# script's whole run, numpy loader included) and the training loop alone for
# torch, examples/s, eval AUC, and the embedding bytes moved per example
# (torch_mhot.py prints both systems'). Results: docs/benchmarks.md,
# "Multi-hot fields against nn.EmbeddingBag".
set -eu
build=${1:-build}
rows=${2:-200000}
eval_rows=${3:-20000}
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${TMPDIR:-/tmp}/mhotbench-$rows
grep -qw avx512f /proc/cpuinfo && export OPENBLAS_CORETYPE=SkylakeX
/usr/bin/python3 -c 'import torch, pandas' 2>/dev/null || {
	echo "mhot.sh: the PyTorch side needs Debian's python3-torch and python3-pandas" \
		"(apt-get install python3-torch python3-pandas)" >&2
	exit 1
}

[ -x "$build/cli/strata" ] || ninja -C "$build" cli/strata
if [ ! -f "$dir/eval.tsv" ]; then
	"$build/cli/strata" gen --rows "$rows" --eval-rows "$eval_rows" --multi-hot 19 --out "$dir"
fi
cat "$dir"/*.tsv > /dev/null
out=${TMPDIR:-/tmp}/mhotbench-out
mkdir -p "$out"
echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
echo "== commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"

echo "== strata: strata run (end to end)"
t0=$(date +%s.%N)
OPENBLAS_NUM_THREADS=1 "$build/cli/strata" run "$root/bench/mhot_strata.lua" \
	--set "data.train.path=\"$dir/train-*.tsv\"" --set "data.eval.path=\"$dir/eval.tsv\"" \
	> "$out/strata_run.txt" 2>&1
t1=$(date +%s.%N)
s_e2e=$(echo "$t1 - $t0" | bc -l)
s_auc=$(sed -n 's/.*eval *auc \([0-9.]*\).*/\1/p' "$out/strata_run.txt" | tail -1)
tail -5 "$out/strata_run.txt"

echo "== torch: torch_mhot.py (end to end, EmbeddingBag)"
OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 "$root/bench/torch_mhot.py" \
	--train "$dir/train-*.tsv" --eval "$dir/eval.tsv" --threads 2 > "$out/torch.txt" 2>&1
cat "$out/torch.txt"
t_e2e=$(tail -1 "$out/torch.txt" | sed -n 's/.*"total_s": \([0-9.]*\).*/\1/p')
t_auc=$(tail -1 "$out/torch.txt" | sed -n 's/.*"eval_auc": \([0-9.]*\).*/\1/p')

echo "== summary ($rows train rows)"
printf 'strata end to end %.2f s (%.0f ex/s), eval auc %s\n' "$s_e2e" "$(echo "$rows / $s_e2e" | bc -l)" "$s_auc"
printf 'torch  end to end %.2f s (%.0f ex/s), eval auc %s\n' "$t_e2e" "$(echo "$rows / $t_e2e" | bc -l)" "$t_auc"
printf 'ratio strata / torch (end to end): %.2fx\n' "$(echo "$t_e2e / $s_e2e" | bc -l)"
