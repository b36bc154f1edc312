#!/bin/sh
# din.sh — DIN's attention against sum pooling on data with a planted
# target-dependent signal, strata and PyTorch side by side (issue 19).
#
#   bench/din.sh [BUILD_DIR] [ROWS] [EVAL_ROWS] [SEEDS]   (defaults: build 1000000 100000 "1 2 3")
#
# Data: `strata gen --history 20 --vocab 100000` (gen.h: the click logit
# rises with the share of the history in the candidate's category, a
# signal in the match alone) into $TMPDIR/dinbench-ROWS (made once).
# Models: jobs/din.lua (st.layer.attention over the history, the candidate
# as the query) and jobs/din_sum.lua (the same, history sum-pooled), and
# their PyTorch twins bench/torch_din.py --model din|sum; one epoch each,
# one train worker, the model seed varied over SEEDS. Prints each run's
# eval AUC and logloss. Results: docs/benchmarks.md, "DIN's attention on a
# planted target signal".
set -eu
build=${1:-build}
rows=${2:-1000000}
eval_rows=${3:-100000}
seeds=${4:-1 2 3}
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${TMPDIR:-/tmp}/dinbench-$rows
/usr/bin/python3 -c 'import torch, pandas' 2>/dev/null || {
	echo "din.sh: the PyTorch side needs Debian's python3-torch and python3-pandas" >&2
	exit 1
}
[ -x "$build/cli/strata" ] || ninja -C "$build" cli/strata
if [ ! -f "$dir/eval.tsv" ]; then
	"$build/cli/strata" gen --rows "$rows" --eval-rows "$eval_rows" --vocab 100000 \
		--history 20 --out "$dir"
fi
echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
echo "== commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "== data: $rows train rows, $eval_rows eval rows, gen --history 20 --vocab 100000"
for seed in $seeds; do
	for job in din din_sum; do
		r=$("$build/cli/strata" run "$root/jobs/$job.lua" --no-pin --set seed="$seed" \
			--set "data.train.path=\"$dir/train-*.tsv\"" \
			--set "data.eval.path=\"$dir/eval.tsv\"" 2>&1 | grep -E '^ +eval ' |
			sed 's/^ *//')
		echo "strata $job seed $seed: $r"
	done
	for m in din sum; do
		/usr/bin/python3 "$root/bench/torch_din.py" --train "$dir/train-*.tsv" \
			--eval "$dir/eval.tsv" --model "$m" --seed "$seed" | grep '^torch' |
			sed "s/^/seed $seed: /"
	done
done
