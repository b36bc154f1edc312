#!/usr/bin/env bash
# device.sh — the multi-process benchmarks on a lent machine with more cores
# than this one (the device tool's 16-core H100 machine; CPU only), from the
# pack scripts/device-pack.sh made here: bench/dist.sh's scaling curve at
# 1, 2, 4 and 8 processes for allreduce, hybrid, async and gba, with the
# in-process reference of each P (DIST_INPROC=1); bench/pull.sh; bench/net.sh
# (transport against ucx_perftest, allreduce at P = 2, 4, 8). Issue 21's
# "scaling curve, honestly"; results in docs/benchmarks.md, "Scale-out on 16
# cores".
#
#   bash bench/device.sh [ROWS] [PROCS]     (1000000 "1 2 4 8")
#
# Each bench's output goes to $OUT (the device tool's folder that comes
# back) or $TMPDIR/device-out. DEVICE_BENCHES (default "dist pull net")
# picks benches; also: topo (lscpu), ceiling (P independent one-process
# jobs at once: the machine's own scaling), inproc (one process of P
# workers), trace (where a step's time goes, per policy).
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
rows=${1:-1000000}
procs=${2:-"1 2 4 8"}
out=${OUT:-${TMPDIR:-/tmp}/device-out}
mkdir -p "$out"
dev=${TMPDIR:-/tmp}/strata-dev
rm -rf "$dev"
mkdir -p "$dev"
tar -C "$dev" -xzf "$root/.dev/dev.tar.gz" || exit 1
export LD_LIBRARY_PATH=$dev/lib UCX_MODULE_DIR=$dev/lib/ucx STRATA_STDLIB=$root/stdlib
export PATH=$dev/bin:$PATH
[ -x /usr/bin/time ] || cp "$dev/bin/time" /usr/bin/time
{
	echo "pack: $(tr '\n' ' ' <"$dev/COMMIT")"
	echo "cores: $(nproc); $(grep -m1 'model name' /proc/cpuinfo)"
	grep -m1 -o 'avx512[a-z_0-9]*' /proc/cpuinfo | head -1
	grep -m1 flags /proc/cpuinfo | tr ' ' '\n' | grep -c . | sed 's/^/cpu flags: /'
	grep -o -w 'avx512f\|avx512_bf16\|amx_tile\|amx_bf16' /proc/cpuinfo | sort | uniq -c
	free -g | head -2
	uname -r
} 2>&1 | tee "$out/machine.txt"
if ! "$dev/build/cli/strata" --version; then
	echo "device.sh: strata does not run here"
	ldd "$dev/build/cli/strata"
	exit 1
fi
cd "$root"
strata=$dev/build/cli/strata
tmp=${TMPDIR:-/tmp}
gen() { # rows -> the data folder (bench/dist.sh's data, made once)
	local d=$tmp/distbench-$1
	[ -f "$d/eval.tsv" ] || "$strata" gen --rows "$1" --eval-rows 50000 --vocab 1000000 \
		--out "$d" >/dev/null
	echo "$d"
}
job() { # data folder, then sets: bench/dist.sh's job of one worker and one read thread
	local d=$1
	shift
	echo bench/ctr_strata.lua --quiet --no-pin --set "data.train.path=\"$d/train-*.tsv\"" \
		--set "data.eval.path=\"$d/eval.tsv\"" --set stages.read.threads=1 \
		--set stages.train.workers=1 --set stages.read.batch_size=1024 \
		--set stages.train.minibatch=1024 "$@"
}
eps() { grep -o '([0-9.]*[kM]* ex/s)' "$1" | tail -1 | tr -d '()' | cut -d' ' -f1 |
	awk '/k$/ { sub("k", ""); printf "%.0f", $1 * 1000; next }
	     /M$/ { sub("M", ""); printf "%.0f", $1 * 1e6; next } { print }'; }
# ceiling: P independent one-process jobs at once, each its own copy of the
# job on the same 250k rows: the machine's own scaling (cores, hyperthreads,
# memory bandwidth, clocks), with no communication at all: the ceiling of
# what P processes of one job can reach here.
ceiling() {
	local d
	d=$(gen 250000)
	for P in $procs; do
		for i in $(seq "$P"); do
			# shellcheck disable=SC2046
			eval "\"$strata\" run $(job "$d")" >"$tmp/ceil-$P-$i.log" 2>&1 &
		done
		wait
		local sum=0 each=""
		for i in $(seq "$P"); do
			e=$(eps "$tmp/ceil-$P-$i.log")
			each="$each ${e:-FAILED}"
			sum=$((sum + ${e:-0}))
		done
		echo "ceiling P=$P: $sum ex/s together (each:$each)"
	done
}
# inproc: one process of P workers and P read threads on the global batch of
# P processes (read batches of P x 1024: one minibatch per worker), allreduce.
inproc() {
	local d
	d=$(gen "$rows")
	for P in $procs; do
		[ "$P" = 1 ] && continue   # bench/dist.sh's first line
		eval "\"$strata\" run $(job "$d" --set stages.train.workers=$P \
			--set stages.read.threads=$P --set stages.read.batch_size=$((P * 1024)))" \
			>"$tmp/inproc-$P.log" 2>&1
		echo "inproc 1 process x $P workers: $(eps "$tmp/inproc-$P.log") ex/s"
	done
}
# trace: where a step's time goes (bench/trace_agg.py of rank 0's trace).
trace() {
	local d
	d=$(gen 250000)
	eval "\"$strata\" run $(job "$d") --trace $tmp/tr1.json" >"$tmp/tr1.log" 2>&1
	python3 bench/trace_agg.py "$tmp/tr1.json" --top 14
	for c in "2 allreduce{}" "4 allreduce{}" "4 hybrid{staleness=4}" "4 async{}"; do
		set -- $c
		eval "\"$strata\" launch -n $1 $(job "$d" --set "sync=st.sync.$2") \
			--trace $tmp/tr$1.json" >"$tmp/tr$1.log" 2>&1
		echo "== $1 processes, $2: $(eps "$tmp/tr$1.log") ex/s"
		python3 bench/trace_agg.py "$tmp/tr$1.rank0.json" --top 16
	done
}
for b in ${DEVICE_BENCHES:-dist pull net}; do
	echo "== $b: $(date +%T)"
	case $b in
	dist) DIST_INPROC=1 BENCH_POLICIES="allreduce hybrid async gba" \
		bash bench/dist.sh "$dev/build" "$rows" "$procs" ;;
	pull) bash bench/pull.sh "$dev/build" 1000000 1 ;;
	ceiling | inproc | trace) "$b" ;;
	topo) lscpu; cat /sys/devices/system/cpu/cpu0/topology/thread_siblings_list ;;
	net) NET_REPEAT=2 NET_SIZES="65536 1048576 8388608" NET_PROCS="2 4 8" \
		bash bench/net.sh "$dev/build" ;;
	esac 2>&1 | tee "$out/$b.txt"
done
echo "== done: $(date +%T)"
