#!/usr/bin/env bash
# device.sh — the multi-process benchmarks on a lent machine with more cores
# than this one (the device tool's 16-core H100 machine; CPU only), from the
# pack scripts/device-pack.sh made here: bench/dist.sh's scaling curve at
# 1, 2, 4 and 8 processes for allreduce, hybrid, async and gba; bench/pull.sh; bench/net.sh
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
# workers), trace (where a step's time goes, per policy), curve (the
# scaling curve, unbound and --bind, with the ceiling, on one data set),
# netq (bench/net.sh on shared memory only, 1 and 8 MiB, once), flat (the
# large-message layouts A/B; curve then uses the faster), gpu (issue 23's
# device checks: the GPU parity tests of tests/gpu; bench/gpu.sh on
# DEVICE_GPU_ROWS rows, 500k, is gpubench; DEVICE_GPU_SANITIZE=1 runs the
# tests under compute-sanitizer too). curve's knobs: DEVICE_CURVE_POLICIES,
# DEVICE_CURVE_BIND=0 (unbound runs only), DEVICE_CURVE_PROCS ("2 4 8").
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
ceil_run() { # P data -> "sum each..." of P independent one-process jobs at once
	local P=$1 d=$2 sum=0 each="" e
	for i in $(seq "$P"); do
		eval "\"$strata\" run $(job "$d")" >"$tmp/ceil-$P-$i.log" 2>&1 &
	done
	wait
	for i in $(seq "$P"); do
		e=$(eps "$tmp/ceil-$P-$i.log")
		each="$each ${e:-FAILED}"
		sum=$((sum + ${e:-0}))
	done
	echo "$sum$each"
}
ceiling() {
	local d r
	d=$(gen 250000)
	for P in $procs; do
		r=$(ceil_run "$P" "$d")
		echo "ceiling P=$P: ${r%% *} ex/s together (each: ${r#* })"
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
# flat: the two layouts of large messages (runtime/net/net.c, FLAT) A/B:
# bench_net's p2p bandwidth at 1 and 8 MiB and allreduce of the standard
# model's 2M dense floats at P = 4 and 8, with STRATA_NET_FLAT_MIN = 0
# (iov) and 65536 (flat), and ucx_perftest's tag_bw at the same sizes; the
# layout with the faster allreduce (sum of both P) is written to
# $tmp/flat_min for the benches after it.
flat() {
	local bn=$dev/build/bench/bench_net best="" bt=""
	for F in 0 65536; do
		local t=0 line
		for sz in 1048576 8388608; do
			line=$(STRATA_NET_FLAT_MIN=$F STRATA_NET_SHM=1 "$bn" -n 2 --what bw --size $sz \
				--iters $((536870912 / sz)) | awk '$1 == "p2p"')
			echo "flat_min=$F $line"
		done
		for P in 4 8; do
			line=$(STRATA_NET_FLAT_MIN=$F STRATA_NET_SHM=1 "$bn" -n $P --what allreduce \
				--floats 2097152 | awk '$1 == "allreduce"')
			echo "flat_min=$F P=$P $line"
			t=$(awk -v a="$t" -v b="$(echo "$line" | awk '{print $5}')" 'BEGIN{print a + b}')
		done
		if [ -z "$bt" ] || awk -v a="$t" -v b="$bt" 'BEGIN{exit !(a < b)}'; then
			best=$F bt=$t
		fi
	done
	for sz in 1048576 8388608; do
		local port=$((20000 + RANDOM % 20000))
		ucx_perftest -p $port -t tag_bw -s $sz -n $((536870912 / sz)) >/dev/null 2>&1 &
		sleep 1
		echo "ucx_perftest tag_bw $sz: $(ucx_perftest -p $port 127.0.0.1 -t tag_bw -s $sz \
			-n $((536870912 / sz)) 2>&1 | awk '/Final:/ {print $6 " MB/s"}')"
		wait
	done
	echo "$best" >"$tmp/flat_min"
	echo "chosen: STRATA_NET_FLAT_MIN=$best (allreduce ms at P = 4 + 8: $bt)"
}
# curve: the scaling curve in one run on the same data (DEVICE_CURVE_ROWS,
# 300k; the large-message layout bench flat chose, if it ran): one process, then allreduce, hybrid and async on 2, 4 and 8
# processes, each unbound and with `launch --bind` (a slice of the CPUs per
# rank), and the ceiling (P independent one-process jobs) at 4 and 8.
curve() {
	local d one
	d=$(gen "${DEVICE_CURVE_ROWS:-300000}")
	if [ -f "$tmp/flat_min" ]; then
		export STRATA_NET_FLAT_MIN
		STRATA_NET_FLAT_MIN=$(cat "$tmp/flat_min")
		echo "STRATA_NET_FLAT_MIN=$STRATA_NET_FLAT_MIN (bench flat's choice)"
	fi
	eval "\"$strata\" run $(job "$d")" >"$tmp/c1.log" 2>&1
	one=$(eps "$tmp/c1.log")
	echo "1 process: $one ex/s"
	printf '%-22s %3s %10s %7s %10s %7s\n' policy P unbound ratio "--bind" ratio
	for pol in ${DEVICE_CURVE_POLICIES:-'allreduce{}' 'hybrid{staleness=4}' 'async{}'}; do
		for P in ${DEVICE_CURVE_PROCS:-2 4 8}; do
			local u b=""
			eval "\"$strata\" launch -n $P $(job "$d" --set "sync=st.sync.$pol")" \
				>"$tmp/cu.log" 2>&1
			u=$(eps "$tmp/cu.log")
			if [ "${DEVICE_CURVE_BIND:-1}" = 1 ]; then
				eval "\"$strata\" launch -n $P --bind $(job "$d" \
					--set "sync=st.sync.$pol")" >"$tmp/cb.log" 2>&1
				b=$(eps "$tmp/cb.log")
			fi
			printf '%-22s %3s %10s %7s %10s %7s\n' "$pol" "$P" "${u:-FAILED}" \
				"$(awk -v a="${u:-0}" -v o="$one" 'BEGIN{printf "%.2f", a / o}')" \
				"${b:-FAILED}" "$(awk -v a="${b:-0}" -v o="$one" 'BEGIN{printf "%.2f", a / o}')"
		done
	done
	for P in 4 8; do
		local sum
		sum=$(ceil_run "$P" "$d" | cut -d' ' -f1)
		echo "ceiling P=$P: $sum ex/s together, $(awk -v a="$sum" -v o="$one" 'BEGIN{printf "%.2f", a / o}') x one process"
	done
}
# gpu: the CUDA build's parity tests (tests/gpu, each against its CPU twin);
# gpubench: bench/gpu.sh (strata's kernels against PyTorch on the same GPU).
# The binaries load this machine's own CUDA runtime, cuBLAS and NCCL,
# looked up where CUDA's toolkit and PyTorch's wheels put them.
gpu_libs() {
	local d l libs=""
	for l in libcudart.so.13 libcublasLt.so.13 libcublas.so.13 libnccl.so.2 libcuda.so.1; do
		d=$(find -H /usr/local/cuda*/lib64 /usr/local/cuda*/targets/x86_64-linux/lib \
			/usr/local/nvidia/lib64 /usr/lib/x86_64-linux-gnu /opt -name "$l" \
			2>/dev/null | head -1)
		echo "$l: ${d:-NOT FOUND}" >&2
		[ -n "$d" ] && libs="$libs:$(dirname "$d")"
	done
	echo "$libs"
}
gpu() {
	local t rc
	LD_LIBRARY_PATH=$LD_LIBRARY_PATH$(gpu_libs)
	export LD_LIBRARY_PATH
	nvidia-smi -L
	ldd "$dev/build/tests/gpu/test_gpu_model" | grep -E 'cuda|cublas|nccl|not found'
	for t in table embed optim dense route model; do
		timeout "${DEVICE_GPU_TEST_TIMEOUT:-45}" "$dev/build/tests/gpu/test_gpu_$t"
		rc=$?
		echo "== test_gpu_$t: exit $rc"
	done
	# DEVICE_GPU_SANITIZE=1: each again under compute-sanitizer's memcheck
	# (out-of-bounds and misaligned device accesses, leaks of device memory).
	[ "${DEVICE_GPU_SANITIZE:-0}" = 1 ] || return 0
	for t in table embed optim dense route model; do
		timeout "${DEVICE_GPU_TEST_TIMEOUT:-45}" compute-sanitizer --tool memcheck \
			--leak-check full --error-exitcode 9 "$dev/build/tests/gpu/test_gpu_$t" \
			2>&1 | grep -v '^\[ \|^\[==\|^\[  ' | tail -15
		echo "== memcheck test_gpu_$t: exit ${PIPESTATUS[0]}"
	done
}
gpubench() {
	LD_LIBRARY_PATH=$LD_LIBRARY_PATH$(gpu_libs)
	export LD_LIBRARY_PATH
	PYTHON=python3 timeout "${DEVICE_GPU_TIMEOUT:-200}" bash bench/gpu.sh "$dev/build" \
		"${DEVICE_GPU_ROWS:-500000}" 50000
	echo "== gpu.sh: exit $?"
}
for b in ${DEVICE_BENCHES:-dist pull net}; do
	echo "== $b: $(date +%T)"
	case $b in
	dist) BENCH_POLICIES="allreduce hybrid async gba" \
		bash bench/dist.sh "$dev/build" "$rows" "$procs" ;;
	pull) bash bench/pull.sh "$dev/build" 1000000 1 ;;
	ceiling | inproc | trace | curve | flat | gpu | gpubench) "$b" ;;
	netq) NET_REPEAT=1 NET_SIZES="1048576 8388608" NET_TRANSPORTS=shm NET_PROCS="2 4 8" \
		bash bench/net.sh "$dev/build" ;;
	topo) lscpu; cat /sys/devices/system/cpu/cpu0/topology/thread_siblings_list ;;
	net) NET_REPEAT=2 NET_SIZES="65536 1048576 8388608" NET_PROCS="2 4 8" \
		bash bench/net.sh "$dev/build" ;;
	esac 2>&1 | tee "$out/$b.txt"
done
echo "== done: $(date +%T)"
