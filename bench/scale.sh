#!/usr/bin/env bash
# scale.sh — the scaling model's inputs, measured on this machine, and the
# model (bench/scale_model.py) checked against them and projected to
# P = 1, 2, 4, 8 on a machine with more cores (docs/benchmarks.md,
# "Scaling model"). For a 2-core machine, where more processes cannot be
# faster; on a machine with the cores, run bench/dist.sh with "1 2 4 8".
#
#   bench/scale.sh [BUILD_DIR] [ROWS] [TARGET_CORES]   (build 400000 16)
#
# SCALE_X1=N also projects with one process at N examples/s (a quiet
# machine's measurement) where this run's own is slowed by other load.
#
# Measures, in this order:
#   - one process (allreduce of one worker, bench/dist.sh's job and data):
#     examples/s and the cores it keeps busy ((user + sys) / wall of the
#     whole `strata run`, under /usr/bin/time);
#   - 2 processes of allreduce, hybrid{staleness=4}, async, gba{global_batch
#     = 2048}: examples/s, bytes sent per example, round trips per step
#     (the job's "network" line);
#   - bench_net (shared memory, 2 processes): 8-byte one-way latency
#     (median), p2p bandwidth at the dense gradient's size, allreduce busbw
#     of the dense gradient's floats;
# writes them to $TMPDIR/distbench-out/scale.json and runs the model.
# Exits 77 without a UCX build (no bench_net).
set -eu
build=${1:-build}
rows=${2:-400000}
target=${3:-16}
. "$(dirname "$0")/dist_common.sh"
ninja -C "$build" bench/bench_net >/dev/null 2>&1 || {
	echo "scale.sh: no bench/bench_net in $build (needs UCX)" >&2
	exit 77
}
bn=$build/bench/bench_net
echo "data:    $rows rows, $dir; load average $(cut -d' ' -f1-3 /proc/loadavg) at start"
# The standard model's dense parameters (bench/ctr_strata.lua: 26 x 16
# embeddings + 13 dense inputs = 429, MLP 400-400-400, one output): weights
# and biases.
D=$(( (429 * 400 + 400) + 2 * (400 * 400 + 400) + (400 + 1) ))

run() { # P policy -> "eps bpe rt cpu_cores cpu_us_per_example"
	local P=$1 pol=$2
	local args=(bench/ctr_strata.lua --quiet --no-pin
		--set "data.train.path=\"$dir/train-*.tsv\"" --set "data.eval.path=\"$dir/eval.tsv\""
		--set stages.read.threads=1 --set stages.train.workers=1
		--set stages.read.batch_size=1024 --set stages.train.minibatch=1024
		--set "sync=$pol")
	local log=$out/scale-$P-$(echo "$pol" | tr -c 'a-z0-9' '_').log cmd=(run)
	[ "$P" = 1 ] || cmd=(launch -n "$P")
	(cd "$root" && /usr/bin/time -f "time %U %S %e" "$strata" "${cmd[@]}" "${args[@]}") \
		>"$log" 2>&1 || { echo "scale.sh: $P x $pol failed, see $log" >&2; exit 1; }
	local eps bpe rt cpu
	eps=$(grep -o '([0-9.]*[kM]* ex/s)' "$log" | tail -1 | tr -d '()' | cut -d' ' -f1)
	case $eps in
	*k) eps=$(echo "$eps" | tr -d k | awk '{printf "%.0f", $1 * 1000}') ;;
	*M) eps=$(echo "$eps" | tr -d M | awk '{printf "%.0f", $1 * 1000000}') ;;
	esac
	bpe=$(grep -o '[0-9.]* bytes per example' "$log" | cut -d' ' -f1)
	rt=$(grep -o '[0-9.]* round trips per step' "$log" | cut -d' ' -f1)
	cpu=$(awk '$1 == "time" { printf "%.3f", ($2 + $3) / $4 }' "$log")
	cpx=$(awk -v n="$rows" '$1 == "time" { printf "%.2f", ($2 + $3) / n * 1e6 }' "$log")
	echo "$eps ${bpe:-0} ${rt:-0} $cpu $cpx"
}

read -r x1 _ _ cpu1 w1 < <(run 1 'st.sync.allreduce{}')
echo "1 process: $x1 ex/s, $cpu1 cores busy, $w1 CPU us per example"
runs=""
for pol in 'allreduce{}' 'hybrid{staleness=4}' 'async{}' 'gba{global_batch=2048}'; do
	read -r eps bpe rt _ w < <(run 2 "st.sync.$pol")
	echo "2 processes, $pol: $eps ex/s, $bpe bytes/example, $rt round trips/step, $w CPU us/example"
	runs="$runs${runs:+, }\"${pol%%\{*}\": {\"x\": $eps, \"bpe\": $bpe, \"rt\": $rt, \"w\": $w}"
done

lat=$(STRATA_NET_SHM=1 "$bn" -n 2 --what lat --lat-iters 10000 | awk '$1 == "lat" {print $7}')
# The p2p run also gives the transport's CPU cost per byte moved (both
# processes' user + sys over the bytes, 200 measured + 20 warm-up messages).
p2p_out=$(STRATA_NET_SHM=1 /usr/bin/time -f "time %U %S" "$bn" -n 2 --what bw --size $((4 * D)) \
	--iters 200 2>&1)
p2p=$(echo "$p2p_out" | awk '$1 == "p2p" {print $5}')
cpb=$(echo "$p2p_out" | awk -v b=$((220 * 4 * D)) '$1 == "time" { printf "%.4g", ($2 + $3) / b }')
bus=$(STRATA_NET_SHM=1 "$bn" -n 2 --what allreduce --floats $D | awk '$1 == "allreduce" {print $7}')
echo "transport (shm, 2 processes): latency $lat us, p2p $p2p GB/s, allreduce busbw $bus GB/s"

json=$out/scale.json
cat >"$json" <<EOF
{"batch": 1024, "cores_here": $(nproc), "x1": $x1, "cpu1": $cpu1, "w1_us": $w1,
 "cpu_per_byte_s": $cpb, "dense_floats": $D,
 "runs": {$runs},
 "lat_s": $(awk -v v="$lat" 'BEGIN{print v * 1e-6}'),
 "p2p_Bps": $(awk -v v="$p2p" 'BEGIN{print v * 1e9}'),
 "ar_busbw_Bps": $(awk -v v="$bus" 'BEGIN{print v * 1e9}'),
 "t_apply_s": 0.0014, "t_add_s": 0.0006}
EOF
echo "load average $(cut -d' ' -f1-3 /proc/loadavg) at the end; inputs in $json"
echo
/usr/bin/python3 "$(dirname "$0")/scale_model.py" "$json" --target-cores "$target" ${SCALE_X1:+--x1 $SCALE_X1}
