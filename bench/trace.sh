#!/usr/bin/env bash
# trace.sh — what `strata run --trace` costs: examples/s of the same job with
# and without it, runs interleaved (off on off on ...) so that drift of the
# machine hits both alike; the median of each and their ratio (target: the
# traced run keeps > 97% of the untraced examples/s, issue 22).
#
#   bench/trace.sh [BUILD_DIR] [ROWS] [REPS]   (defaults: build, 1000000, 5)
#   CASES="lr dnn" bench/trace.sh ...          (default: lr)
#
# Cases:
#   lr   jobs/quickstart.lua (logistic regression, the cheapest batches, so
#        the per-batch cost of recording weighs most)
#   dnn  bench/ctr_strata.lua (the standard model, 2 workers: worker spans)
# Data: `strata gen` of ROWS rows into $TMPDIR/strata-trace-data-ROWS (made
# once). Each run writes its metrics file (the quickstart's) and, traced, its
# trace into $TMPDIR/strata-trace-out. Prints each repetition's numbers on
# stderr, the medians, the ratio on/off, and the trace file's size.
#
# Threads: OPENBLAS_NUM_THREADS=1 and OPENBLAS_CORETYPE=SkylakeX where the
# CPU has AVX-512, as bench/ctr.sh. This is a benchmark, not a test.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
rows=${2:-1000000}
reps=${3:-5}
case $build in /*) ;; *) build=$root/$build ;; esac
bin=$build/cli/strata
tmp=${TMPDIR:-/tmp}
data=$tmp/strata-trace-data-$rows
out=$tmp/strata-trace-out
mkdir -p "$out"
export OPENBLAS_NUM_THREADS=1
grep -qw avx512f /proc/cpuinfo && export OPENBLAS_CORETYPE=SkylakeX
[ -x "$bin" ] || { echo "trace.sh: no $bin (build first)" >&2; exit 2; }
if [ ! -f "$data/eval.tsv" ]; then
	"$bin" gen --rows "$rows" --eval-rows $((rows / 10)) --files 2 --out "$data" >/dev/null
fi
cat "$data"/*.tsv >/dev/null   # warm the page cache
sets=(--set 'data.generate=nil' --set "data.train.path=\"$data/train-*.tsv\""
	--set "data.eval.path=\"$data/eval.tsv\"" --set "output.dir=\"$out\""
	--set "output.metrics=\"$out/metrics.jsonl\"")

# run CASE on|off -> examples/s of the training pass as strata prints it
run_case() {
	local c=$1 mode=$2 log=$out/$1-$2.log n job
	case $c in
	lr) job=$root/jobs/quickstart.lua ;;
	dnn) job=$root/bench/ctr_strata.lua ;;
	*) echo "trace.sh: unknown case $c" >&2; exit 2 ;;
	esac
	local extra=()
	[ "$mode" = on ] && extra=(--trace "$out/$c.json")
	if ! "$bin" run "$job" "${sets[@]}" --quiet "${extra[@]}" >"$log" 2>&1; then
		echo failed; return
	fi
	n=$(sed -n 's/.*trained .* examples in .*(\([0-9.]*[kM]*\) ex\/s).*/\1/p' "$log" | tail -1)
	case $n in *M) n=$(echo "${n%M} * 1000000" | bc -l) ;; *k) n=$(echo "${n%k} * 1000" | bc -l) ;; esac
	echo "${n:-failed}"
}

med() { printf '%s\n' "$@" | grep -v failed | sort -g | awk '{v[NR]=$1} END{if(NR==0)print "nan"; else print v[int((NR+1)/2)]}'; }

echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
echo "== commit $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet || echo '+dirty'), $rows rows, $reps reps, interleaved off/on, load $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-5s %12s %12s %7s %7s %10s\n" case "off ex/s" "on ex/s" "on/off" spread "trace kB"
for c in ${CASES:-lr}; do
	off=() on=()
	for ((i = 0; i < reps; i++)); do
		off+=("$(run_case "$c" off)")
		on+=("$(run_case "$c" on)")
	done
	echo "   $c reps: off ${off[*]} | on ${on[*]}" >&2
	mo=$(med "${off[@]}"); mn=$(med "${on[@]}")
	# Spread of the untraced runs (max/min - 1): an overhead smaller than
	# this is below what the machine can resolve.
	spread=$(printf '%s\n' "${off[@]}" | grep -v failed | sort -g |
		awk 'NR==1{lo=$1} {hi=$1} END{ if (lo > 0) printf "%.1f%%", 100 * (hi / lo - 1); else print "-" }')
	mb=$(awk -v s="$(stat -c %s "$out/$c.json" 2>/dev/null || echo 0)" 'BEGIN{printf "%.0f", s / 1e3}')
	ratio=$(awk -v a="$mo" -v b="$mn" 'BEGIN{ if (a+0 > 0) printf "%.3f", b/a; else print "-" }')
	printf "%-5s %12.0f %12.0f %7s %7s %10s\n" "$c" "$mo" "$mn" "$ratio" "$spread" "$mb"
done
