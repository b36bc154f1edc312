#!/usr/bin/env bash
# pull.sh — step reads issued ahead across processes (dist.prefetch;
# docs/distributed.md, "Prefetched step reads"): async on 2 processes x 1
# worker at dist.prefetch = 0, 1, 2 and 4 against 1 process x 2 workers,
# same job, data and cores, interleaved (one round of every configuration,
# REPEATS times), so that a load change on a shared machine hits all of
# them alike (docs/benchmarks.md, "Prefetched step reads").
#
#   bench/pull.sh [BUILD_DIR] [ROWS] [REPEATS]   (build 1000000 3)
#
# The job is jobs/quickstart.lua (logistic regression, AdaGrad rows, batch
# 8192, minibatch 256): a cheap step, where the round trip of a step read
# weighs most. Per run: examples/s (the job's summary line), round trips
# per step (its "network" line), and, from rank 1's metrics, the step reads
# that went to rank 0, those issued ahead and those the worker still
# waited for. Prints one line per run and the median examples/s of each
# configuration with its ratio to one process.
set -eu
build=${1:-build}
rows=${2:-1000000}
reps=${3:-3}
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=${TMPDIR:-/tmp}
dir=$tmp/pullbench-$rows
out=$tmp/pullbench-out
mkdir -p "$out"
strata=$build/cli/strata
[ -x "$strata" ] || ninja -C "$build" cli/strata
case $strata in /*) ;; *) strata=$PWD/$strata ;; esac
if [ ! -f "$dir/eval.tsv" ]; then
	"$strata" gen --rows "$rows" --eval-rows 50000 --vocab 1000000 --zipf 1.1 --seed 7 \
		--files 4 --out "$dir" >/dev/null
fi
cat "$dir"/*.tsv >/dev/null
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "commit:  $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet || echo +dirty)"
echo "data:    $rows rows, $dir; load average $(cut -d' ' -f1-3 /proc/loadavg) at start"

metric() { tail -n 1 "$1" | grep -o "\"$2\":[0-9.e+-]*" | cut -d: -f2; }
run() { # name P workers [args...] -> "eps rt reads ahead waits"
	local name=$1 P=$2 W=$3
	shift 3
	local log=$out/$name.log m=$out/$name.json cmd=(run)
	[ "$P" = 1 ] || cmd=(launch -n "$P")
	rm -f "$m"*
	(cd "$root" && "$strata" "${cmd[@]}" jobs/quickstart.lua --quiet --no-pin \
		--set 'data.generate=nil' --set "data.train.path=\"$dir/train-*.tsv\"" \
		--set "data.eval.path=\"$dir/eval.tsv\"" --set 'output=nil' --metrics "$m" \
		--set stages.read.threads=1 --set stages.train.workers="$W" \
		--set 'sync=st.sync.async{}' "$@") >"$log" 2>&1 ||
		{ echo "pull.sh: $name failed, see $log" >&2; exit 1; }
	local eps rt f=$m
	eps=$(grep -o '([0-9.]*[kM]* ex/s)' "$log" | tail -1 | tr -d '()' | cut -d' ' -f1)
	case $eps in
	*k) eps=$(echo "$eps" | tr -d k | awk '{printf "%.0f", $1 * 1000}') ;;
	*M) eps=$(echo "$eps" | tr -d M | awk '{printf "%.0f", $1 * 1000000}') ;;
	esac
	rt=$(grep -o '[0-9.]* round trips per step' "$log" | cut -d' ' -f1)
	[ "$P" = 1 ] || f=$m.rank1
	echo "$eps ${rt:-0} $(metric "$f" net_step_reads) $(metric "$f" net_step_reads_ahead) $(metric "$f" net_step_waits)"
}

configs=("1p-2w" "2p-pf0" "2p-pf1" "2p-pf2" "2p-pf4")
declare -A all
printf '%-8s %-4s %10s %8s %8s %8s %8s\n' config rep 'ex/s' 'rt/step' reads ahead waits
for ((i = 1; i <= reps; i++)); do
	for c in "${configs[@]}"; do
		case $c in
		1p-2w) r=$(run "$c" 1 2) ;;
		2p-pf*) r=$(run "$c" 2 1 --set "dist.prefetch=${c#2p-pf}") ;;
		esac
		read -r eps rt rd ah wt <<<"$r"
		printf '%-8s %-4s %10s %8s %8s %8s %8s\n' "$c" "$i" "$eps" "$rt" "${rd:--}" "${ah:--}" "${wt:--}"
		all[$c]="${all[$c]:-} $eps"
	done
done
echo "load average $(cut -d' ' -f1-3 /proc/loadavg) at the end"
med() { tr ' ' '\n' | grep . | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
one=$(echo "${all[1p-2w]}" | med)
for c in "${configs[@]}"; do
	m=$(echo "${all[$c]}" | med)
	awk -v c="$c" -v m="$m" -v o="$one" 'BEGIN { printf "%-8s median %9.0f ex/s  %.2f x one process\n", c, m, m / o }'
done
