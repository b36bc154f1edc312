#!/usr/bin/env bash
# coll_mpi.sh — strata's allreduce (st_net_allreduce_f32, bench_net) against
# OpenMPI's MPI_Allreduce (bench_mpi), interleaved in one run on this
# machine (docs/benchmarks.md, "Collectives against OpenMPI").
#
#   bench/coll_mpi.sh [BUILD_DIR]      (default: build)
#
# Needs: a UCX build (bench_net), MPI headers at setup time (bench_mpi;
# Debian: `apt-get install -y openmpi-bin libopenmpi-dev`, then `meson
# setup` finds them), ucx_perftest (ucx-utils). Exits 77 when one is
# missing, 1 when a run fails.
#
# For each repetition (COLL_REPEAT, default 3), process count (COLL_PROCS,
# default "2 4") and size (COLL_FLOATS, default 256k 1m 2m 8m floats), back
# to back so that they see the same load:
#   strata shm   bench_net, default endpoints (shared memory on one host:
#                UCX's sysv/posix + cma)
#   mpi ucx shm  mpirun --mca pml ucx, UCX_TLS unset (UCX's own choice, the
#                same shared memory)
#   strata tcp   bench_net with STRATA_NET_SHM=0 (the endpoints between
#                hosts; UCX picks TCP)
#   mpi ucx tcp  mpirun --mca pml ucx -x UCX_TLS=tcp,self
#   mpi default  mpirun with OpenMPI's own choice (here ob1 + the vader
#                shared-memory BTL with CMA single copy, coll/tuned): the
#                peer at its best
#   strata mpi   bench_net --env under the same mpirun with
#                STRATA_NET_COLL=mpi: strata's allreduce call going through
#                MPI_Allreduce (runtime/net/coll_mpi.c) plus its identity
#                check, what a job under mpirun gets with that setting
# pml ucx disqualifies itself on a machine without an InfiniBand-class
# device, so it is forced with pml_ucx_tls=any and pml_ucx_devices=any.
# Both programs: one checked call, 3 unmeasured, then K measured calls
# (bench_net's rule: 100 up to 512Ki floats, else 20), the slowest rank's
# time. busbw = 2(P-1)/P x 4N / time (GB/s, 1e9 B/s).
#
# Also per repetition and transport: ucx_perftest tag_bw at 4 MiB messages
# (shm: UCX's choice; tcp: UCX_TLS=tcp,self), the transport's bandwidth the
# issue's "0.7 of the transport" refers to.
#
# Prints the medians over the repetitions, the medians and ranges of the
# per-repetition ratios strata / mpi (same transport) and strata / mpi's
# default, and busbw / ucx_perftest of the same transport.
set -eu
build=${1:-build}
reps=${COLL_REPEAT:-3}
procs=${COLL_PROCS:-"2 4"}
sizes=${COLL_FLOATS:-"256k 1m 2m 8m"}
root=$(cd "$(dirname "$0")/.." && pwd)
bn=$build/bench/bench_net
bm=$build/bench/bench_mpi
for t in bench/bench_net bench/bench_mpi; do
	if ! ninja -C "$build" "$t" >/dev/null 2>&1; then
		echo "coll_mpi.sh: cannot build $t in $build (needs UCX and MPI at meson setup)" >&2
		exit 77
	fi
done
for c in mpirun ucx_perftest; do
	command -v $c >/dev/null || { echo "coll_mpi.sh: $c not found" >&2; exit 77; }
done
# mpirun refuses root unless told; containers often run as root.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)," \
	"load average $(cut -d' ' -f1-3 /proc/loadavg) at start"
echo "commit:  $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet || echo +dirty)"
echo "ucx:     $(ucx_info -v | awk '/Version/ {print $3}'), mpi: $(mpirun --version | head -1)"

ucx_mca=(--mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any)
busbw_of() { # program output -> busbw column of its allreduce row
	awk '$1 == "allreduce" || $1 == "mpi_allreduce" { print $7 }'
}
strata() { # transport floats P -> busbw
	local o
	if ! o=$(STRATA_NET_SHM=$([ "$1" = shm ] && echo 1 || echo 0) \
		"$bn" -n "$3" --what allreduce --floats "$2" 2>&1); then
		echo "coll_mpi.sh: bench_net -n $3 --floats $2 ($1) failed:" >&2
		echo "$o" >&2
		exit 1
	fi
	echo "$o" | busbw_of
}
mpi() { # mode(shm|tcp|default) floats P -> busbw
	local o args=()
	case $1 in
	shm) args=("${ucx_mca[@]}") ;;
	tcp) args=("${ucx_mca[@]}" -x UCX_TLS=tcp,self) ;;
	esac
	if ! o=$(timeout 300 mpirun --oversubscribe -np "$3" "${args[@]}" "$bm" --floats "$2" 2>&1); then
		echo "coll_mpi.sh: mpirun -np $3 ${args[*]} bench_mpi --floats $2 failed:" >&2
		echo "$o" >&2
		exit 1
	fi
	echo "$o" | busbw_of
}
strata_mpi() { # floats P -> busbw (bench_net --env under mpirun, STRATA_NET_COLL=mpi)
	local o
	if ! o=$(STRATA_NET_COLL=mpi STRATA_COORDINATOR=127.0.0.1:$((20000 + RANDOM % 20000)) \
		STRATA_TOKEN=coll timeout 300 mpirun --oversubscribe -np "$2" -x STRATA_NET_COLL \
		-x STRATA_COORDINATOR -x STRATA_TOKEN "$bn" --env --what allreduce --floats "$1" 2>&1); then
		echo "coll_mpi.sh: STRATA_NET_COLL=mpi mpirun -np $2 bench_net --env --floats $1 failed:" >&2
		echo "$o" >&2
		exit 1
	fi
	echo "$o" | busbw_of
}
perftest() { # transport -> ucx_perftest tag_bw GB/s at 4 MiB
	local tls port=$((20000 + RANDOM % 20000)) srv line
	[ "$1" = tcp ] && tls=tcp,self || tls=
	env ${tls:+UCX_TLS=$tls} timeout 60 ucx_perftest -p $port -t tag_bw -s 4194304 -n 128 \
		-w 12 >/dev/null 2>&1 &
	srv=$!
	sleep 1
	line=$(env ${tls:+UCX_TLS=$tls} timeout 60 ucx_perftest -p $port 127.0.0.1 -t tag_bw \
		-s 4194304 -n 128 -w 12 2>&1 | awk '/Final:/')
	wait $srv 2>/dev/null || true
	echo "$line" | awk '{ if ($7 == "") print "-"; else printf "%.3f\n", $7 * 1048576 / 1e9 }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else print "-" }'; }
median() {
	printf '%s\n' "$@" | grep -v '^-$' | sort -g |
		awk '{ v[NR] = $1 } END { if (!NR) print "-"; else if (NR % 2) print v[(NR + 1) / 2];
			else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
range() {
	printf '%s\n' "$@" | grep -v '^-$' | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 }
		END { if (NR) print lo "-" hi; else print "-" }'
}

declare -A v   # v[key] = space-separated values over the repetitions
add() { v[$1]="${v[$1]:-} $2"; }
for ((i = 0; i < reps; i++)); do
	for tl in shm tcp; do add "pt.$tl" "$(perftest $tl)"; done
	for P in $procs; do
		for f in $sizes; do
			a=$(strata shm "$f" "$P") b=$(mpi shm "$f" "$P")
			c=$(strata tcp "$f" "$P") d=$(mpi tcp "$f" "$P") e=$(mpi default "$f" "$P")
			add "st.shm.$P.$f" "$a"; add "mpi.shm.$P.$f" "$b"; add "r.shm.$P.$f" "$(ratio "$a" "$b")"
			add "st.tcp.$P.$f" "$c"; add "mpi.tcp.$P.$f" "$d"; add "r.tcp.$P.$f" "$(ratio "$c" "$d")"
			add "mpi.def.$P.$f" "$e"; add "r.def.$P.$f" "$(ratio "$a" "$e")"
			g=$(strata_mpi "$f" "$P")
			add "st.mpi.$P.$f" "$g"; add "r.smpi.$P.$f" "$(ratio "$g" "$e")"
		done
	done
	echo "repetition $((i + 1)) of $reps done, load average $(cut -d' ' -f1 /proc/loadavg)" >&2
done

echo
echo "ucx_perftest tag_bw, 4 MiB messages, GB/s: shm $(median ${v[pt.shm]}) ($(range ${v[pt.shm]})), tcp $(median ${v[pt.tcp]}) ($(range ${v[pt.tcp]}))"
echo
echo "allreduce busbw GB/s = 2(P-1)/P x 4N / time, medians of $reps repetitions;"
echo "st/mpi: median (range) of the repetitions' ratios; /pt: strata busbw / ucx_perftest"
printf '%2s %6s %4s %7s %7s %17s %7s %6s\n' P floats tl strata mpi_ucx "st/mpi (range)" mpi_def "/pt"
for P in $procs; do
	for f in $sizes; do
		for tl in shm tcp; do
			st=$(median ${v[st.$tl.$P.$f]})
			printf '%2s %6s %4s %7s %7s %17s %7s %6s\n' "$P" "$f" "$tl" "$st" \
				"$(median ${v[mpi.$tl.$P.$f]})" \
				"$(median ${v[r.$tl.$P.$f]}) ($(range ${v[r.$tl.$P.$f]}))" \
				"$([ $tl = shm ] && median ${v[mpi.def.$P.$f]} || echo -)" \
				"$(ratio "$st" "$(median ${v[pt.$tl]})")"
		done
		echo "$P $f strata shm / mpi default: $(median ${v[r.def.$P.$f]}) ($(range ${v[r.def.$P.$f]}))"
		echo "$P $f strata through MPI (STRATA_NET_COLL=mpi): busbw $(median ${v[st.mpi.$P.$f]})," \
			"/ mpi default: $(median ${v[r.smpi.$P.$f]}) ($(range ${v[r.smpi.$P.$f]}))"
	done
done
echo
echo "load average $(cut -d' ' -f1-3 /proc/loadavg) at the end"
