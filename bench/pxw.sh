#!/usr/bin/env bash
# pxw.sh — processes or workers: the same job on 2 processes x 1 worker
# (`strata launch -n 2`) against 1 process x 2 workers (`strata run`), same
# data, same cores, one configuration after the other, REPEATS rounds, so a
# load change on a shared machine hits every configuration alike (issue 21:
# async and hybrid at >= 0.8 of one process, allreduce at >= 0.9;
# docs/benchmarks.md, "Processes or workers").
#
#   bench/pxw.sh [BUILD_DIR] [ROWS] [REPEATS]     (build 200000 3)
#
# JOB (default bench/ctr_strata.lua, the standard model: 26 slots x 16, MLP
# 400-400-400) and POLICIES (default "async hybrid allreduce") pick what
# runs (gba and bsp work too); JOB=jobs/quickstart.lua measures logistic regression, the cheapest
# step there is, where distribution weighs most. Minibatch 512; the read
# batch is one step's examples (512 per worker), which allreduce across
# processes requires and the others do not mind. Data: bench/dist_common.sh's
# (`strata gen --rows ROWS --vocab 1000000` into $TMPDIR/distbench-ROWS).
#
# Prints each run (examples/s of training, eval AUC, CPU seconds of every
# process: user + sys) and, per policy, the median examples/s of each side
# and their ratio, and the median (range) of the rounds' own ratios: the two
# sides of a round run back to back, so a load change between rounds moves
# both (on the 2-core VM a round's speed swings up to 1.5x over minutes,
# which moves the ratio of medians as much as anything strata does).
set -eu
build=${1:-build}
rows=${2:-200000}
reps=${3:-3}
job=${JOB:-bench/ctr_strata.lua}
policies=${POLICIES:-"async hybrid allreduce"}
. "$(dirname "$0")/dist_common.sh"   # root, dir (the data), out, strata; machine, commit
case $strata in /*) ;; *) strata=$PWD/$strata ;; esac
echo "job:     $job, $rows rows ($dir), load average $(cut -d' ' -f1-3 /proc/loadavg) at start"

policy() { # name -> the sync table
	case $1 in
	hybrid) echo 'st.sync.hybrid{staleness=4}' ;;
	gba) echo 'st.sync.gba{global_batch=1024}' ;;   # one step of 2 x 512, as allreduce
	*) echo "st.sync.$1{}" ;;
	esac
}
run() { # P W policy -> "eps auc cpu_s"
	local P=$1 W=$2 pol=$3 cmd=(run)
	[ "$P" = 1 ] || cmd=(launch -n "$P")
	local log=$out/pxw-$P-$W-$pol.log
	(cd "$root" && /usr/bin/time -f "time %U %S" "$strata" "${cmd[@]}" "$job" --quiet --no-pin \
		--set 'data.generate=nil' --set 'output=nil' \
		--set "data.train.path=\"$dir/train-*.tsv\"" --set "data.eval.path=\"$dir/eval.tsv\"" \
		--set stages.read.threads=1 --set stages.train.workers="$W" \
		--set stages.train.minibatch=512 --set stages.read.batch_size=$((512 * W)) \
		--set "sync=$(policy "$pol")") >"$log" 2>&1 ||
		{ echo "pxw.sh: $P x $W $pol failed, see $log" >&2; exit 1; }
	local eps
	eps=$(grep -o '([0-9.]*[kM]* ex/s)' "$log" | tail -1 | tr -d '()' | cut -d' ' -f1)
	case $eps in
	*k) eps=$(echo "$eps" | tr -d k | awk '{printf "%.0f", $1 * 1000}') ;;
	*M) eps=$(echo "$eps" | tr -d M | awk '{printf "%.0f", $1 * 1000000}') ;;
	esac
	echo "$eps $(grep -o 'eval *auc [0-9.]*' "$log" | awk '{print $3}') $(awk '$1 == "time" { printf "%.2f", $2 + $3 }' "$log")"
}
median() { tr ' ' '\n' | grep . | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

declare -A eps rat
printf '%-10s %-6s %4s %10s %8s %7s\n' policy config rep 'ex/s' auc cpu_s
for ((i = 1; i <= reps; i++)); do
	for pol in $policies; do
		for pw in "1 2" "2 1"; do
			set -- $pw
			r=$(run "$1" "$2" "$pol")
			printf '%-10s %-6s %4d %10s %8s %7s\n' "$pol" "${1}px${2}w" "$i" $r
			eps[$pol-$1]="${eps[$pol-$1]:-} ${r%% *}"
		done
		set -- ${eps[$pol-1]}; a=${!#}
		set -- ${eps[$pol-2]}; b=${!#}
		rat[$pol]="${rat[$pol]:-} $(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", b / a }')"
	done
done
echo
printf '%-10s %14s %14s %8s %18s\n' policy '1p x 2w ex/s' '2p x 1w ex/s' ratio 'rounds: median (range)'
for pol in $policies; do
	a=$(echo "${eps[$pol-1]}" | median)
	b=$(echo "${eps[$pol-2]}" | median)
	r=$(echo "${rat[$pol]}" | tr ' ' '\n' | grep . | sort -n |
		awk '{ v[NR] = $1 } END { printf "%.2f (%.2f-%.2f)", v[int((NR + 1) / 2)], v[1], v[NR] }')
	printf '%-10s %14s %14s %8s %18s\n' "$pol" "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f", b / a }')" "$r"
done
