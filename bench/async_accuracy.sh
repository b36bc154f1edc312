#!/usr/bin/env bash
# async_accuracy.sh — multi-process async against one process, by read batch
# size (issue 15; docs/benchmarks.md, "Async across processes: accuracy by
# read batch"). jobs/quickstart.lua (LR, st.sync.async) on `strata gen
# --rows $ROWS --eval-rows $ROWS/10`: one process of 2 workers and 2
# processes of 1 worker (`strata launch -n 2`), RUNS runs of each at every
# batch size in BATCHES; prints the mean, spread (sample sd) and range of
# the eval AUC and calibration, and the mean training speed (the job's own
# examples/s line). POLICY (default async) picks st.sync.POLICY{}.
#
#   bench/async_accuracy.sh [BUILD]     (default: build)
#   ROWS=200000 RUNS=5 BATCHES="256 1024 4096 8192" POLICY=async bench/async_accuracy.sh build
#
# Takes about RUNS x |BATCHES| x 8 s at 200k rows on 2 cores. The ranks
# split the stream batch by batch and go at their own pace, so which rank
# trains its last batches alone varies from run to run; at large batches
# that data order alone moves the eval AUC by about ±0.001
# (docs/benchmarks.md).
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
case $build in /*) ;; *) build=$root/$build ;; esac
rows=${ROWS:-200000}
runs=${RUNS:-5}
batches=${BATCHES:-256 1024 4096 8192}
policy=${POLICY:-async}
strata=$build/cli/strata
[ -x "$strata" ] || ninja -C "$build" cli/strata || exit 1
dir=${TMPDIR:-/tmp}/asyncacc-$rows
if [ ! -f "$dir/eval.tsv" ]; then
	"$strata" gen --rows "$rows" --eval-rows $((rows / 10)) --out "$dir" >/dev/null || exit 1
fi
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "commit:  $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet || echo +dirty)"
echo "binary:  $strata; $rows rows, st.sync.$policy{}, $runs runs each"
cd "$root" || exit 1
args=(jobs/quickstart.lua --quiet --no-pin --set 'data.generate=nil' --set "sync=st.sync.$policy{}"
	--set "data.train.path=\"$dir/train-*.tsv\"" --set "data.eval.path=\"$dir/eval.tsv\"")
one() { # mode batch: prints "auc calibration examples/s"
	local o
	if [ "$1" = 1p ]; then
		o=$("$strata" run "${args[@]}" --set stages.read.batch_size="$2" \
			--set stages.train.workers=2 2>&1)
	else
		o=$(timeout 600 "$strata" launch -n 2 "${args[@]}" --set stages.read.batch_size="$2" \
			--set stages.train.workers=1 2>&1)
	fi
	local e x
	e=$(echo "$o" | grep -E '^ *eval +auc' | tail -n 1)
	x=$(echo "$o" | grep -o '([0-9.]*k* ex/s)' | tail -n 1 | tr -d '(' |
		awk '{ v = $1; if (v ~ /k$/) { sub(/k$/, "", v); v *= 1000 } print v }')
	echo "$(echo "$e" | awk '{print $3}') $(echo "$e" | awk '{print $7}') $x"
}
stats() { # reads "auc cal ex/s" lines
	awk '{ n++; a += $1; aa += $1 * $1; c += $2; cc += $2 * $2; s += $3
	       if (n == 1 || $1 < amin) amin = $1; if (n == 1 || $1 > amax) amax = $1
	       if (n == 1 || $2 < cmin) cmin = $2; if (n == 1 || $2 > cmax) cmax = $2 }
	     END { ma = a / n; mc = c / n
	           sa = n > 1 ? sqrt((aa - n * ma * ma) / (n - 1)) : 0
	           sc = n > 1 ? sqrt((cc - n * mc * mc) / (n - 1)) : 0
	           if (sa != sa) sa = 0; if (sc != sc) sc = 0
	           printf "| %.4f ± %.4f (%.4f–%.4f) | %.3f ± %.3f (%.3f–%.3f) | %.1fk |\n",
	                  ma, sa, amin, amax, mc, sc, cmin, cmax, s / n / 1000 }'
}
echo
echo "| setup | batch | eval AUC mean ± sd (range) | calibration mean ± sd (range) | train ex/s |"
echo "|---|---|---|---|---|"
for b in $batches; do
	for m in 1p 2p; do
		label=$([ $m = 1p ] && echo "1 process × 2 workers" || echo "2 processes × 1 worker")
		r=$(for ((i = 0; i < runs; i++)); do one $m "$b"; done | grep -E '^[0-9.]+ [0-9.]+ ' | stats)
		echo "| $label | $b $r"
	done
done
