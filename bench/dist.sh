#!/usr/bin/env bash
# dist.sh — scale-out on one machine, in one run (docs/distributed.md).
#
#   bench/dist.sh [BUILD_DIR] [ROWS] [PROCS]     (defaults: build 400000 "1 2 4")
#
# Data: `strata gen --rows ROWS` into $TMPDIR/distbench-ROWS, made once and
# read from the page cache. Model: bench/ctr_strata.lua (the standard model:
# 26 slots x 16, MLP 400-400-400), one worker and one read thread per
# process, batch 1024 per process (so P processes train a global batch of
# P x 1024, as data parallelism does).
#
# Prints, for each process count P and policy:
#   examples/s of the whole job, its ratio to one process (target: 3.5 at
#   P = 4 where there are cores for them), bytes sent per example, eval AUC;
# for allreduce with dist.compress = true at the largest P: bytes and AUC;
# and UCX's own ucx_perftest bandwidth between two processes on this
# machine (tag bandwidth, 1 MiB messages), the physical reference.
# Results go to docs/benchmarks.md, "Scale-out".
set -eu
build=${1:-build}
rows=${2:-400000}
procs=${3:-"1 2 4"}
. "$(dirname "$0")/dist_common.sh"
echo "data:    $rows rows, $dir"

run() { # P policy extra-sets... -> prints "eps bytes_per_ex auc"
	local P=$1 pol=$2; shift 2
	local args=(bench/ctr_strata.lua --quiet --no-pin
		--set "data.train.path=\"$dir/train-*.tsv\"" --set "data.eval.path=\"$dir/eval.tsv\""
		--set stages.read.threads=1 --set stages.train.workers=1
		--set stages.read.batch_size=1024 --set stages.train.minibatch=1024
		--set "sync=$pol" "$@")
	local log=$out/run-$P-$(echo "$pol$*" | tr -c 'a-z0-9' '_').log
	if [ "$P" = 1 ]; then
		(cd "$root" && "$strata" run "${args[@]}") >"$log" 2>&1
		local n s
		n=$(grep -o 'trained [0-9.]*[kM]* examples in [0-9.]* s' "$log")
		s=$(grep -o '([0-9.]*[kM]* ex/s)' "$log" | tr -d '()' | cut -d' ' -f1)
		echo "$(to_num "$s") 0 $(grep -o 'eval *auc [0-9.]*' "$log" | awk '{print $3}')"
	else
		(cd "$root" && "$strata" launch -n "$P" "${args[@]}") >"$log" 2>&1
		local eps bpe
		eps=$(grep -o '([0-9.]* ex/s)' "$log" | tr -d '()' | cut -d' ' -f1)
		bpe=$(grep -o '[0-9.]* bytes per example' "$log" | cut -d' ' -f1)
		echo "${eps:-0} ${bpe:-0} $(grep -o 'eval *auc [0-9.]*' "$log" | awk '{print $3}')"
	fi
}
to_num() { # 41.2k -> 41200
	case $1 in
	*k) echo "$1" | tr -d k | awk '{printf "%.0f", $1 * 1000}' ;;
	*M) echo "$1" | tr -d M | awk '{printf "%.0f", $1 * 1000000}' ;;
	*) echo "$1" ;;
	esac
}

printf '\n%-28s %3s %12s %8s %14s %8s\n' policy P "ex/s" "vs P=1" "bytes/example" "eval auc"
base=   # one process (allreduce of one worker): the reference of every ratio
# @G is the global batch of P processes (P x 1024), @P the process count:
# gba and bsp aggregate one gradient per process per global step, the
# global batch allreduce trains. BENCH_POLICIES (space-separated names)
# runs a subset, e.g. BENCH_POLICIES="gba bsp hop_bs".
for pol in 'st.sync.allreduce{}' 'st.sync.hybrid{staleness=4}' 'st.sync.kstep{k=4}' \
	'st.sync.async{}' 'st.sync.shadow{algo="ma"}' 'st.sync.shadow{algo="easgd"}' \
	'st.sync.shadow{algo="bmuf"}' 'st.sync.gba{global_batch=@G}' 'st.sync.bsp{b=@P}' \
	'st.sync.hop_bs{b=1}' 'st.sync.hop_bw{b=1}'; do
	name=${pol#st.sync.}
	if [ -n "${BENCH_POLICIES:-}" ] && ! [[ " $BENCH_POLICIES allreduce " == *" ${name%%\{*} "* ]]; then
		continue
	fi
	for P in $procs; do
		[ "$P" = 1 ] && [ "$pol" != 'st.sync.allreduce{}' ] && continue
		p=${pol//@G/$((P * 1024))}
		p=${p//@P/$P}
		read -r eps bpe auc < <(run "$P" "$p")
		[ "$P" = 1 ] && base=$eps
		ratio=$( [ -n "$base" ] && awk -v a="$eps" -v b="$base" 'BEGIN{printf "%.2f", a / b}' || echo -)
		printf '%-28s %3s %12s %8s %14s %8s\n' "${p#st.sync.}" "$P" "$eps" "$ratio" "$bpe" "$auc"
	done
done
Pmax=$(echo $procs | awk '{print $NF}')
read -r eps bpe auc < <(run "$Pmax" 'st.sync.allreduce{}' --set 'dist={compress=true}')
printf '%-28s %3s %12s %8s %14s %8s   (dist.compress = true)\n' 'allreduce{}'  "$Pmax" "$eps" - "$bpe" "$auc"

perftest() { # label, UCX_TLS value ("" = UCX's choice)
	local port=$((20000 + RANDOM % 20000)) srv bw
	env ${2:+UCX_TLS=$2} ucx_perftest -p $port -t tag_bw -s 1048576 -n 2000 >/dev/null 2>&1 &
	srv=$!
	sleep 1
	bw=$(env ${2:+UCX_TLS=$2} ucx_perftest -p $port 127.0.0.1 -t tag_bw -s 1048576 -n 2000 2>&1 |
		awk '/Final:/ {print $0}')
	kill $srv 2>/dev/null || true
	echo "  $1: $bw"
}
if command -v ucx_perftest >/dev/null; then
	echo
	echo "ucx_perftest tag_bw 1 MiB, two processes on this machine"
	echo "(columns: iterations, latency typical/avg/overall usec, bandwidth avg/overall MB/s, msg rate):"
	perftest "UCX's choice (shared memory)" ""
	perftest "TCP loopback (what strata's transport uses)" "tcp,self"
fi
