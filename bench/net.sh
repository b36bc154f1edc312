#!/usr/bin/env bash
# net.sh — strata's transport (runtime/net) against UCX's own ucx_perftest,
# two processes on this machine, in one run (docs/benchmarks.md,
# "Transport: strata's messages and collectives vs ucx_perftest").
#
#   bench/net.sh [BUILD_DIR]      (default: build)
#
# For each message size (NET_SIZES, default 4 KiB, 64 KiB, 1 MiB, 8 MiB)
# and each transport (NET_TRANSPORTS, default "shm tcp tcp-e tcp-none"): NET_REPEAT
# (default 3) pairs, back to back so that both halves of a pair see the
# same load, of ucx_perftest tag_bw and bench_net's p2p bandwidth (P = 2)
# on the same transport, each with the same number of messages K (512 MiB
# / size within [20, 20000]). shm: UCX's own choice on one machine
# (sysv/posix + cma), which strata's endpoints get by default
# (docs/distributed.md "Messages"); tcp: UCX_TLS=tcp,self for
# ucx_perftest and STRATA_NET_SHM=0 for strata, the transport between
# hosts. Two more rows over TCP: tcp-e pairs strata as built with
# ucx_perftest -e, whose endpoints have peer error handling as strata's
# network endpoints do (UCX 1.13 then moves a TCP rendezvous as active
# messages, copied out by the receiver, instead of a zero-copy put:
# docs/benchmarks.md, "What a framed message costs over TCP"); tcp-none
# pairs strata with STRATA_NET_CHECKSUM=none (no frame hashed, messages
# of one piece frameless) with plain ucx_perftest.
# The 8-byte latency the same way: ucx_perftest tag_lat against
# bench_net's ping-pong, per transport. Then bench_net's allreduce_f32 at
# P = 2 and 4 (NET_PROCS), once each, on the default (shm).
#
# Prints medians over the pairs, the median of the pairs' ratios strata /
# ucx_perftest (same transport) and their range (a noisy machine shows there). GB/s are
# 1e9 bytes/s; ucx_perftest's "MB/s" are MiB/s and are converted here.
# ucx_perftest stops its clock when the sender's last send completes;
# bench_net when rank 0 has rank 1's ack for the last message (stricter).
# Exits 77 when ucx_perftest or a UCX build of bench_net is missing, 1 when
# a run fails. The allreduce against OpenMPI's: bench/coll_mpi.sh.
set -eu
build=${1:-build}
sizes=${NET_SIZES:-"4096 65536 1048576 8388608"}
procs=${NET_PROCS:-"2 4"}
reps=${NET_REPEAT:-3}
transports=${NET_TRANSPORTS:-"shm tcp tcp-e tcp-none"}
root=$(cd "$(dirname "$0")/.." && pwd)
bn=$build/bench/bench_net
# A build folder is rebuilt first; a folder of binaries alone (bench/device.sh's
# pack) is used as it is.
if [ -f "$build/build.ninja" ] && ! ninja -C "$build" bench/bench_net >/dev/null || [ ! -x "$bn" ]; then
	echo "net.sh: cannot build bench/bench_net in $build (a build without UCX has none)" >&2
	exit 77
fi
command -v ucx_perftest >/dev/null || { echo "net.sh: ucx_perftest not found" >&2; exit 77; }
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)," \
	"load average $(cut -d' ' -f1-3 /proc/loadavg) at start"
echo "commit:  $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet || echo +dirty)"
echo "ucx:     $(ucx_info -v | awk '/Version/ {print $3}')"

iters() { # size -> K
	local k=$((536870912 / $1))
	[ $k -lt 20 ] && k=20
	[ $k -gt 20000 ] && k=20000
	echo $k
}

perftest() { # UCX_TLS value ("" = UCX's choice), ucx_perftest args... -> its "Final:" line
	local tls=$1 port=$((20000 + RANDOM % 20000)) srv line
	shift
	env ${tls:+UCX_TLS=$tls} timeout 60 ucx_perftest -p $port "$@" >/dev/null 2>&1 &
	srv=$!
	sleep 1
	line=$(env ${tls:+UCX_TLS=$tls} timeout 60 ucx_perftest -p $port 127.0.0.1 "$@" 2>&1 |
		awk '/Final:/')
	wait $srv 2>/dev/null || true
	echo "${line:-Final: failed}"
}
mib_to_gb() { # ucx_perftest's MB/s (MiB/s) -> GB/s
	awk -v x="$1" 'BEGIN { if (x == "") print "-"; else printf "%.3f", x * 1048576 / 1e9 }'
}
ratio() { # a b -> a / b, "-" unless both are numbers > 0
	awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else print "-" }'
}
median() { # numbers... ("-" ignored) -> median
	printf '%s\n' "$@" | grep -v '^-$' | sort -g |
		awk '{ v[NR] = $1 } END { if (!NR) print "-"; else if (NR % 2) print v[(NR + 1) / 2];
			else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
range() { # numbers... -> min-max
	printf '%s\n' "$@" | grep -v '^-$' | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 }
		END { if (NR) print lo "-" hi; else print "-" }'
}

strata() { # bench_net args... -> its output (in $out); ends the script when bench_net fails
	if ! out=$("$bn" "$@"); then
		echo "net.sh: bench_net $* failed:" >&2
		echo "$out" >&2
		exit 1
	fi
}

# A transport's settings: for ucx_perftest (UCX_TLS; "" = UCX's own
# choice, shared memory between two processes here) and for strata
# (STRATA_NET_SHM: 1 = endpoints without peer error handling on one host,
# so UCX picks shared memory; 0 = TCP, as between hosts).
ucx_tls() { [ "$1" = shm ] && echo "" || echo tcp,self; }
ucx_eh() { [ "$1" = tcp-e ] && echo -e || true; }   # ucx_perftest's peer error handling
net_shm() { [ "$1" = shm ] && echo 1 || echo 0; }
net_ck() { [ "$1" = tcp-none ] && echo none || echo links; }   # STRATA_NET_CHECKSUM

echo
echo "p2p bandwidth, 2 processes, K messages of SIZE bytes, GB/s (1e9 B/s), per transport"
echo "(shm: UCX's choice on one machine; tcp: UCX_TLS=tcp,self and STRATA_NET_SHM=0;"
echo " tcp-e: ucx_perftest -e, with peer error handling as strata's TCP endpoints;"
echo " tcp-none: strata with STRATA_NET_CHECKSUM=none);"
echo "medians of $reps back-to-back pairs, ratio: median (range) of the pairs' ratios:"
printf '%10s %6s %8s %8s %8s %12s %12s\n' bytes K tl ucx strata "strata/ucx" "(range)"
declare -A ucx_bw
for s in $sizes; do
	k=$(iters "$s")
	w=$((k / 10 > 2 ? k / 10 : 2))
	for tl in $transports; do
		us=() bs=() rs=()
		for ((i = 0; i < reps; i++)); do
			u=$(mib_to_gb "$(perftest "$(ucx_tls $tl)" -t tag_bw -s "$s" -n "$k" -w "$w" \
				$(ucx_eh $tl) | awk '{print $7}')")
			STRATA_NET_SHM=$(net_shm $tl) STRATA_NET_CHECKSUM=$(net_ck $tl) \
				strata -n 2 --what bw --size "$s" --iters "$k"
			b=$(echo "$out" | awk -v s="$s" '$1 == "p2p" && $2 == s {print $5}')
			us+=("$u") bs+=("$b") rs+=("$(ratio "$b" "$u")")
		done
		ucx_bw[$tl.$s]=$(median "${us[@]}")
		printf '%10s %6s %8s %8s %8s %12s %12s\n' "$s" "$k" "$tl" "${ucx_bw[$tl.$s]}" \
			"$(median "${bs[@]}")" "$(median "${rs[@]}")" "($(range "${rs[@]}"))"
	done
done

echo
echo "8-byte latency, one way (round trip / 2), microseconds, of 10000 round trips;"
echo "medians over $reps back-to-back pairs, ratio: median (range) of the pairs' ratios:"
printf '%8s %9s %9s %9s %9s %11s %14s\n' tl "ucx mean" "ucx med" "st mean" "st med" \
	"st/ucx med" "(range)"
for tl in $transports; do
	umean=() umed=() smean=() smed=() rmed=()
	for ((i = 0; i < reps; i++)); do
		lt=$(perftest "$(ucx_tls $tl)" -t tag_lat -s 8 -n 10000 -w 1000 $(ucx_eh $tl))
		STRATA_NET_SHM=$(net_shm $tl) STRATA_NET_CHECKSUM=$(net_ck $tl) \
			strata -n 2 --what lat --lat-iters 10000
		sl=$(echo "$out" | awk '$1 == "lat"')
		umean+=("$(echo "$lt" | awk '{print $4}')") umed+=("$(echo "$lt" | awk '{print $3}')")
		smean+=("$(echo "$sl" | awk '{print $6}')") smed+=("$(echo "$sl" | awk '{print $7}')")
		rmed+=("$(ratio "${smed[i]}" "${umed[i]}")")
	done
	printf '%8s %9s %9s %9s %9s %11s %14s\n' "$tl" "$(median "${umean[@]}")" \
		"$(median "${umed[@]}")" "$(median "${smean[@]}")" "$(median "${smed[@]}")" \
		"$(median "${rmed[@]}")" "($(range "${rmed[@]}"))"
done

# The allreduce's physical reference: ucx_perftest's shared-memory
# bandwidth at 1 MiB from above (each rank sends and receives 2(P-1)/P x 4N
# bytes at once, so busbw = that stream's bandwidth would be a good
# transport).
ref=${ucx_bw[shm.1048576]:-}
echo
echo "allreduce_f32 (st_net_allreduce_f32: direct reduce-scatter + allgather in 1 MiB segments, rank-order sums):"
printf '%3s %9s %6s %10s %9s %9s %16s\n' P floats K ms algbw busbw "busbw/shm 1MiB"
for P in $procs; do
	strata -n "$P" --what allreduce
	echo "$out" | awk '$1 == "allreduce"' |
		while read -r _ n k _ ms alg bus; do
			printf '%3s %9s %6s %10s %9s %9s %16s\n' "$P" "$n" "$k" "$ms" "$alg" "$bus" \
				"$(ratio "$bus" "$ref")"
		done
done
echo
echo "load average $(cut -d' ' -f1-3 /proc/loadavg) at the end"
