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
# PULL_BASE=PATH/TO/strata adds a configuration "base": that binary (an
# older commit's, say) on 2 processes, without dist.prefetch, interleaved
# with the others.
#
# The job is jobs/quickstart.lua (logistic regression, AdaGrad rows, batch
# 8192, minibatch 256): a cheap step, where the round trip of a step read
# weighs most. Per run: examples/s (the job's summary line), round trips
# per step (its "network" line), and, from rank 1's metrics, the step reads
# that went to rank 0, those issued ahead and those the worker still
# waited for; and the CPU the whole run used per example (user + sys of
# every process, /usr/bin/time), which a loaded machine disturbs less than
# examples/s. Prints one line per run and the medians of each
# configuration, examples/s also as a ratio to one process.
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
run() { # name P workers binary [args...] -> "eps rt reads ahead waits cpu_us"
	local name=$1 P=$2 W=$3 bin=$4
	shift 4
	local log=$out/$name.log m=$out/$name.json cmd=(run)
	[ "$P" = 1 ] || cmd=(launch -n "$P")
	rm -f "$m"*
	(cd "$root" && /usr/bin/time -f "time %U %S %e" "$bin" "${cmd[@]}" jobs/quickstart.lua --quiet --no-pin \
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
	local cpu
	cpu=$(awk -v n="$rows" '$1 == "time" { printf "%.2f", ($2 + $3) / n * 1e6 }' "$log")
	local rd ah wt
	rd=$(metric "$f" net_step_reads)
	ah=$(metric "$f" net_step_reads_ahead)
	wt=$(metric "$f" net_step_waits)
	echo "$eps ${rt:-0} ${rd:--} ${ah:--} ${wt:--} $cpu"
}

configs=("1p-2w" "2p-pf0" "2p-pf1" "2p-pf2" "2p-pf4")
[ -z "${PULL_BASE:-}" ] || configs+=(base)
declare -A all allc
printf '%-8s %-4s %10s %8s %8s %8s %8s %10s\n' config rep 'ex/s' 'rt/step' reads ahead waits 'cpu_us/ex'
for ((i = 1; i <= reps; i++)); do
	for c in "${configs[@]}"; do
		case $c in
		1p-2w) r=$(run "$c" 1 2 "$strata") ;;
		2p-pf*) r=$(run "$c" 2 1 "$strata" --set "dist.prefetch=${c#2p-pf}") ;;
		base) r=$(run "$c" 2 1 "$PULL_BASE") ;;
		esac
		read -r eps rt rd ah wt cpu <<<"$r"
		printf '%-8s %-4s %10s %8s %8s %8s %8s %10s\n' "$c" "$i" "$eps" "$rt" "${rd:--}" \
			"${ah:--}" "${wt:--}" "$cpu"
		all[$c]="${all[$c]:-} $eps"
		allc[$c]="${allc[$c]:-} $cpu"
	done
done
echo "load average $(cut -d' ' -f1-3 /proc/loadavg) at the end"
med() { tr ' ' '\n' | grep . | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
one=$(echo "${all[1p-2w]}" | med)
for c in "${configs[@]}"; do
	m=$(echo "${all[$c]}" | med)
	mc=$(echo "${allc[$c]}" | med)
	awk -v c="$c" -v m="$m" -v o="$one" -v mc="$mc" 'BEGIN {
		printf "%-8s median %9.0f ex/s  %.2f x one process  %6.2f CPU us/example\n", c, m, m / o, mc }'
done
