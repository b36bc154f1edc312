#!/usr/bin/env bash
# net.sh — strata's transport (runtime/net) against UCX's own ucx_perftest,
# two processes on this machine, in one run (docs/benchmarks.md,
# "Transport: strata's messages and collectives vs ucx_perftest").
#
#   bench/net.sh [BUILD_DIR]      (default: build)
#
# For each message size (NET_SIZES, default 4 KiB, 64 KiB, 1 MiB, 8 MiB):
# ucx_perftest tag_bw with UCX's own choice of transport (shared memory),
# once; then NET_REPEAT (default 3) pairs, back to back so that both halves
# of a pair see the same load, of ucx_perftest tag_bw over TCP loopback
# (UCX_TLS=tcp,self: the transport strata's endpoints get on one machine,
# docs/distributed.md "Messages") and bench_net's p2p bandwidth (P = 2),
# each with the same number of messages K (512 MiB / size within
# [20, 20000]). The 8-byte latency the same way: ucx_perftest tag_lat
# (UCX's choice once, TCP in pairs with bench_net's ping-pong). Then
# bench_net's allreduce_f32 at P = 2 and 4 (NET_PROCS), once each.
#
# Prints medians over the pairs, the median of the pairs' ratios strata /
# ucx_perftest(tcp) and their range (a noisy machine shows there). GB/s are
# 1e9 bytes/s; ucx_perftest's "MB/s" are MiB/s and are converted here.
# ucx_perftest stops its clock when the sender's last send completes;
# bench_net when rank 0 has rank 1's ack for the last message (stricter).
# Exits 77 when ucx_perftest or a UCX build of bench_net is missing, 1 when
# a run fails.
set -eu
build=${1:-build}
sizes=${NET_SIZES:-"4096 65536 1048576 8388608"}
procs=${NET_PROCS:-"2 4"}
reps=${NET_REPEAT:-3}
root=$(cd "$(dirname "$0")/.." && pwd)
bn=$build/bench/bench_net
if ! ninja -C "$build" bench/bench_net >/dev/null; then
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

echo
echo "p2p bandwidth, 2 processes, K messages of SIZE bytes, GB/s (1e9 B/s);"
echo "tcp and strata: medians of $reps back-to-back pairs, ratio: median (range) of the pairs' ratios:"
printf '%10s %6s %12s %8s %8s %11s %12s\n' bytes K "ucx default" "ucx tcp" strata "strata/tcp" "(range)"
declare -A tcp_bw
for s in $sizes; do
	k=$(iters "$s")
	w=$((k / 10 > 2 ? k / 10 : 2))
	d=$(mib_to_gb "$(perftest "" -t tag_bw -s "$s" -n "$k" -w "$w" | awk '{print $7}')")
	ts=() bs=() rs=()
	for ((i = 0; i < reps; i++)); do
		t=$(mib_to_gb "$(perftest tcp,self -t tag_bw -s "$s" -n "$k" -w "$w" | awk '{print $7}')")
		strata -n 2 --what bw --size "$s" --iters "$k"
		b=$(echo "$out" | awk -v s="$s" '$1 == "p2p" && $2 == s {print $5}')
		ts+=("$t") bs+=("$b") rs+=("$(ratio "$b" "$t")")
	done
	tcp_bw[$s]=$(median "${ts[@]}")
	printf '%10s %6s %12s %8s %8s %11s %12s\n' "$s" "$k" "$d" "${tcp_bw[$s]}" \
		"$(median "${bs[@]}")" "$(median "${rs[@]}")" "($(range "${rs[@]}"))"
done

echo
echo "8-byte latency, one way (round trip / 2), microseconds, of 10000 round trips;"
echo "tcp and strata: medians over $reps back-to-back pairs:"
ld=$(perftest "" -t tag_lat -s 8 -n 10000 -w 1000)
tmean=() tmed=() smean=() smed=() rmean=() rmed=()
for ((i = 0; i < reps; i++)); do
	lt=$(perftest tcp,self -t tag_lat -s 8 -n 10000 -w 1000)
	strata -n 2 --what lat --lat-iters 10000
	sl=$(echo "$out" | awk '$1 == "lat"')
	tmean+=("$(echo "$lt" | awk '{print $4}')") tmed+=("$(echo "$lt" | awk '{print $3}')")
	smean+=("$(echo "$sl" | awk '{print $6}')") smed+=("$(echo "$sl" | awk '{print $7}')")
	rmean+=("$(ratio "${smean[i]}" "${tmean[i]}")") rmed+=("$(ratio "${smed[i]}" "${tmed[i]}")")
done
printf '%-22s %8s %8s\n' "" mean median
printf '%-22s %8s %8s\n' "ucx_perftest default" "$(echo "$ld" | awk '{print $4}')" \
	"$(echo "$ld" | awk '{print $3}')"
printf '%-22s %8s %8s\n' "ucx_perftest tcp" "$(median "${tmean[@]}")" "$(median "${tmed[@]}")"
printf '%-22s %8s %8s\n' "strata" "$(median "${smean[@]}")" "$(median "${smed[@]}")"
printf '%-22s %8s %8s   (ranges %s, %s)\n' "strata / tcp" "$(median "${rmean[@]}")" \
	"$(median "${rmed[@]}")" "$(range "${rmean[@]}")" "$(range "${rmed[@]}")"

# The allreduce's physical reference: one TCP stream's bandwidth at 1 MiB
# from above (each rank sends and receives 2(P-1)/P x 4N bytes at once, so
# busbw = that stream's bandwidth would be a good transport).
ref=${tcp_bw[1048576]:-}
echo
echo "allreduce_f32 (st_net_allreduce_f32: direct reduce-scatter + allgather, rank-order sums):"
printf '%3s %9s %6s %10s %9s %9s %16s\n' P floats K ms algbw busbw "busbw/tcp 1MiB"
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
