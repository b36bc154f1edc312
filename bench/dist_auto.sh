#!/usr/bin/env bash
# dist_auto.sh — st.sync.auto across processes against the policies it
# switches between, with a straggling worker on every rank, in one run
# (docs/distributed.md "auto across processes"; docs/benchmarks.md).
#
#   bench/dist_auto.sh [BUILD_DIR] [ROWS] [P]     (defaults: build 400000 2)
#
# Model: bench/ctr_strata.lua (26 slots x 16, MLP 400-400-400); P processes
# of 2 train workers, minibatch 512, batch 1024 per process. Worker 1 of
# every rank is slowed 4x — for the whole run ("straggler"), or only for its
# first 100 minibatches ("recovers") — so the workers of each rank diverge
# and auto should leave allreduce for the asynchronous policy (and come
# back once the straggler recovers). Prints for each policy and case:
# examples/s of the job, its ratio to allreduce in the same case, eval AUC,
# the switches auto made.
set -eu
build=${1:-build}
rows=${2:-400000}
P=${3:-2}
. "$(dirname "$0")/dist_common.sh"
echo "data:    $rows rows, $P processes x 2 workers"

run() { # policy straggler -> prints "eps auc switches"
	local args=(bench/ctr_strata.lua --no-pin
		--set "data.train.path=\"$dir/train-*.tsv\"" --set "data.eval.path=\"$dir/eval.tsv\""
		--set stages.read.threads=1 --set stages.train.workers=2
		--set stages.read.batch_size=1024 --set stages.train.minibatch=512
		--set "sync=$1" --set "stragglers=$2")
	local log=$out/auto-$(echo "$1$2" | tr -c 'a-z0-9' '_').log
	(cd "$root" && "$strata" launch -n "$P" "${args[@]}") >"$log" 2>&1
	local eps sw
	eps=$(grep -o '([0-9.]* ex/s)' "$log" | tr -d '()' | cut -d' ' -f1)
	sw=$(grep -m1 -o '[0-9]* switches' "$log" | cut -d' ' -f1)
	echo "${eps:-0} $(grep -o 'eval *auc [0-9.]*' "$log" | awk '{print $3}') ${sw:--}"
}

printf '\n%-10s %-44s %10s %8s %8s %9s\n' case policy "ex/s" "vs allr" "eval auc" switches
for c in "straggler:st.stragglers{worker=1, slowdown=4}" \
	 "recovers:st.stragglers{worker=1, slowdown=4, steps=100}"; do
	name=${c%%:*} strag=${c#*:}
	ref=
	for pol in 'st.sync.allreduce{}' 'st.sync.async{}' 'st.sync.gba{global_batch=@G}' \
		'st.sync.auto{}' 'st.sync.auto{async=st.sync.gba{global_batch=@G}}'; do
		p=${pol//@G/$((P * 1024))}
		read -r eps auc sw < <(run "$p" "$strag")
		[ -z "$ref" ] && ref=$eps
		printf '%-10s %-44s %10s %8s %8s %9s\n' "$name" "${p#st.sync.}" "$eps" \
			"$(awk -v a="$eps" -v b="$ref" 'BEGIN{printf "%.2f", a / b}')" "$auc" "$sw"
	done
done
