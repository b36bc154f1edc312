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
# picks a subset.
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
for b in ${DEVICE_BENCHES:-dist pull net}; do
	echo "== $b: $(date +%T)"
	case $b in
	dist) DIST_INPROC=1 BENCH_POLICIES="allreduce hybrid async gba" \
		bash bench/dist.sh "$dev/build" "$rows" "$procs" ;;
	pull) bash bench/pull.sh "$dev/build" 1000000 1 ;;
	net) NET_REPEAT=2 NET_SIZES="65536 1048576 8388608" NET_PROCS="2 4 8" \
		bash bench/net.sh "$dev/build" ;;
	esac 2>&1 | tee "$out/$b.txt"
done
echo "== done: $(date +%T)"
