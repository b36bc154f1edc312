#!/bin/sh
# cross.sh — dcnv2 against dnn at (about) equal dense parameter budget on
# data with planted pairwise cross terms, strata and PyTorch side by side
# (issue 19's DCNv2 quality criterion).
#
#   bench/cross.sh [BUILD_DIR] [ROWS] [EVAL_ROWS] [SEEDS] [K] [EPOCHS] [VOCAB]
#       (defaults: build 300000 50000 "1 2" 4 3 1000)
#
# Data: `strata gen --cross K --vocab VOCAB` (ops/gen/cross.h: the click
# logit gains beta z_a z_b for the slot pairs (C1,C2) .. (C2K-1,C2K), per-value
# latents z; K = 0 is the plain generator, the control) into
# $TMPDIR/crossbench-ROWS-K-VOCAB (made once). bench_gen_bayes prints the
# eval AUC of the true logit (the ceiling) and of the true logit without the
# cross terms (about what per-field terms can reach).
# Models: bench/cross_strata.lua (dnn, MLP 256-128, 89,857 dense parameters)
# and the same job with model = dcnv2 (2 cross layers of rank 32, MLP
# 176-128, 90,587), both emb_dim 8, counted by `strata plan` (printed below);
# their PyTorch twins are bench/torch_ctr.py --model dnn|dcnv2 with the same
# sizes (tests/reference/models.py's CTRModel; it prints its own count).
# EPOCHS passes in file order (one is too few for either model to find the
# latents of the cross: docs/benchmarks.md), one train worker / 2 torch
# threads, minibatch 512, the model seed varied over SEEDS. Prints each run's eval AUC. Results:
# docs/benchmarks.md, "DCNv2 on a planted cross".
set -eu
build=${1:-build}
rows=${2:-300000}
eval_rows=${3:-50000}
seeds=${4:-1 2}
k=${5:-4}
epochs=${6:-3}
vocab=${7:-1000}
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${TMPDIR:-/tmp}/crossbench-$rows-$k-$vocab
job=$root/bench/cross_strata.lua
/usr/bin/python3 -c 'import torch, pandas' 2>/dev/null || {
	echo "cross.sh: the PyTorch side needs Debian's python3-torch and python3-pandas" >&2
	exit 1
}
[ -x "$build/cli/strata" ] || ninja -C "$build" cli/strata
[ -x "$build/bench/bench_gen_bayes" ] || ninja -C "$build" bench/bench_gen_bayes
cross=
[ "$k" -gt 0 ] && cross="--cross $k"
if [ ! -f "$dir/eval.tsv" ]; then
	# shellcheck disable=SC2086
	"$build/cli/strata" gen --rows "$rows" --eval-rows "$eval_rows" --vocab "$vocab" \
		$cross --out "$dir"
fi
dcn='st.model.dcnv2{emb_dim=8,hidden={176,128},cross_layers=2,cross_rank=32,'
dcn=$dcn'activation="relu",init_scale=0.01,'
dcn=$dcn'sparse_optimizer=st.optim.adagrad{lr=0.05,init_accum=0.1},'
dcn=$dcn'dense_optimizer=st.optim.adam{lr=0.001}}'
echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
echo "== commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "== data: $rows train rows, $eval_rows eval rows, gen --vocab $vocab ${cross:-(no --cross)}; $epochs epochs"
"$build/bench/bench_gen_bayes" "$eval_rows" "$vocab" 0 1 "$k"
"$build/cli/strata" plan "$job" | grep '^model'
"$build/cli/strata" plan "$job" --set "model=$dcn" | grep '^model'
for seed in $seeds; do
	for m in dnn dcnv2; do
		set -- --set seed="$seed" --set epochs="$epochs" --set "data.train.path=\"$dir/train-*.tsv\"" \
			--set "data.eval.path=\"$dir/eval.tsv\""
		[ "$m" = dcnv2 ] && set -- "$@" --set "model=$dcn"
		r=$("$build/cli/strata" run "$job" --no-pin "$@" 2>&1 | grep -E '^ +eval ' |
			tail -n 1 | sed 's/^ *//')
		echo "strata $m seed $seed: $r"
	done
	for m in dnn dcnv2; do
		if [ "$m" = dnn ]; then h=256,128; else h=176,128; fi
		OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 "$root/bench/torch_ctr.py" --threads 2 \
			--train "$dir/train-*.tsv" --eval "$dir/eval.tsv" --model "$m" \
			--epochs "$epochs" --emb-dim 8 --hidden "$h" --cross-layers 2 --cross-rank 32 \
			--minibatch 512 --seed "$seed" | grep 'eval auc' | sed "s/^ */torch $m seed $seed: /"
	done
done
