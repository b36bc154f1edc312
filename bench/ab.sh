#!/usr/bin/env bash
# ab.sh — two revisions of strata on the same machine, in one run, runs
# interleaved (A B A B ...) so drift of the machine hits both alike.
#
#   bench/ab.sh REV_A REV_B [ROWS] [REPS]      (defaults: 1000000 rows, 3 reps)
#   CASES="ssd dist2" bench/ab.sh ...           (only those cases)
#
# Builds each revision (git worktree in $TMPDIR/strata-ab-<rev>, meson
# buildtype=release, -Dcuda=disabled) and times, per repetition:
#   e2e        `strata run` of bench/ctr_strata.lua from the TSV files
#              (read -> pull -> train -> push -> dump, then eval)
#   mem        bench_ctr: the same job's pipeline from an in-memory source
#   async2     the quickstart LR model, 2 workers, st.sync.async
#   gba2       the standard model, 2 workers x 256, st.sync.gba
#   ssd        the standard model with storage.mem at 10% of its rows
#              (the SSD tier in $TMPDIR/strata-ab-ssd)
#   dist2      2 processes x 1 worker, allreduce, when built with UCX
# Prints examples/s per case and revision (median of REPS), B/A, and the
# eval AUC of each (the same revision must give the same AUC every rep for
# the deterministic cases). What the redesign of ops/ (issue 16) recorded
# in docs/benchmarks.md, "Before and after the ops/ redesign", came from here.
#
# Threads: as bench/ctr.sh (OPENBLAS_NUM_THREADS=1, OPENBLAS_CORETYPE=SkylakeX
# where the CPU has AVX-512, for both revisions; this is a benchmark, not a test).
set -eu
a=${1:?usage: ab.sh REV_A REV_B [ROWS] [REPS]}
b=${2:?usage: ab.sh REV_A REV_B [ROWS] [REPS]}
rows=${3:-1000000}
reps=${4:-3}
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=${TMPDIR:-/tmp}
data=$tmp/strata-ab-data-$rows
out=$tmp/strata-ab-out
mkdir -p "$out"
export OPENBLAS_NUM_THREADS=1
# OpenBLAS 0.3.21 takes these CPUs for Haswell; its AVX-512 kernels where
# the CPU has AVX-512 (they die of SIGILL on a CPU without it).
grep -qw avx512f /proc/cpuinfo && export OPENBLAS_CORETYPE=SkylakeX

build_rev() { # rev -> prints build dir
	local rev=$1 sha wt
	sha=$(git -C "$root" rev-parse --short "$rev")
	wt=$tmp/strata-ab-$sha
	if [ ! -d "$wt" ]; then
		git -C "$root" worktree add -f --detach "$wt" "$sha" >/dev/null 2>&1
	fi
	if [ ! -f "$wt/build-ab/build.ninja" ]; then
		meson setup "$wt/build-ab" "$wt" -Dbuildtype=release -Dcuda=disabled >/dev/null
	fi
	ninja -C "$wt/build-ab" cli/strata bench/bench_ctr >/dev/null
	echo "$wt"
}

wa=$(build_rev "$a")
wb=$(build_rev "$b")
sa=$(git -C "$root" rev-parse --short "$a")
sb=$(git -C "$root" rev-parse --short "$b")
if [ ! -f "$data/eval.tsv" ]; then
	"$wa/build-ab/cli/strata" gen --rows "$rows" --eval-rows $((rows / 10)) --out "$data" >/dev/null
fi
cat "$data"/*.tsv >/dev/null
sets=(--set "data.train.path=\"$data/train-*.tsv\"" --set "data.eval.path=\"$data/eval.tsv\"")
ucx=0
[ "$(grep -c 'ST_HAVE_UCX 1' "$wb/build-ab/st_config.h" 2>/dev/null)" -gt 0 ] && ucx=1

# run CASE WORKTREE -> "ex_per_s auc"
run_case() {
	local c=$1 wt=$2 bin=$2/build-ab/cli/strata log=$out/$1.log t0 t1 n auc
	case $c in
	mem)
		"$wt/build-ab/bench/bench_ctr" "$wt/bench/ctr_strata.lua" "${sets[@]}" >"$log" 2>&1
		n=$(sed -n 's/.*"train_ex_per_s": \([0-9.]*\).*/\1/p' "$log")
		auc=$(sed -n 's/.*"eval_auc": \([0-9.]*\).*/\1/p' "$log")
		echo "$n $auc"; return ;;
	e2e)  set -- run "$wt/bench/ctr_strata.lua" "${sets[@]}" ;;
	async2) set -- run "$wt/jobs/quickstart.lua" "${sets[@]}" --set stages.train.workers=2 \
		--set 'sync=st.sync.async{}' ;;
	gba2) set -- run "$wt/bench/ctr_strata.lua" "${sets[@]}" --set stages.train.minibatch=256 \
		--set 'sync=st.sync.gba{global_batch=1024}' ;;
	ssd)  rm -rf "$tmp/strata-ab-ssd"; mkdir -p "$tmp/strata-ab-ssd"
	      set -- run "$wt/bench/ctr_strata.lua" "${sets[@]}" \
		--set "storage={mem=\"64MiB\",ssd={path=\"$tmp/strata-ab-ssd\"}}" ;;
	dist2) set -- launch -n 2 "$wt/bench/ctr_strata.lua" "${sets[@]}" --set stages.train.workers=1 \
		--set stages.read.batch_size=1024 --set stages.train.minibatch=1024 ;;
	esac
	t0=$(date +%s.%N)
	if ! "$bin" "$@" --quiet >"$log" 2>&1; then echo "failed failed"; return; fi
	t1=$(date +%s.%N)
	# Examples/s of the training pass as strata reports it; whole wall
	# time when the case prints none (launch).
	n=$(sed -n 's/.*trained .* examples in .*(\([0-9.]*[kM]*\) ex\/s).*/\1/p' "$log" | tail -1)
	case $n in *M) n=$(echo "${n%M} * 1000000" | bc -l) ;; *k) n=$(echo "${n%k} * 1000" | bc -l) ;; esac
	[ -n "$n" ] || n=$(echo "$rows / ($t1 - $t0)" | bc -l)
	auc=$(sed -n 's/.*eval *auc \([0-9.]*\).*/\1/p' "$log" | tail -1)
	echo "$n ${auc:--}"
}

cases="e2e mem async2 gba2 ssd"
[ "$ucx" = 1 ] && cases="$cases dist2"
cases=${CASES:-$cases}   # CASES="ssd dist2" reruns some
echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
echo "== A = $sa, B = $sb, $rows rows, $reps reps, interleaved"
printf "%-8s %12s %12s %7s  %-15s %-15s\n" case "A ex/s" "B ex/s" "B/A" "A auc" "B auc"
for c in $cases; do
	ra=() rb=() aa="" ab=""
	for ((i = 0; i < reps; i++)); do
		read -r n u < <(run_case "$c" "$wa"); ra+=("$n"); aa="$aa ${u}"
		read -r n u < <(run_case "$c" "$wb"); rb+=("$n"); ab="$ab ${u}"
	done
	med() { printf '%s\n' "$@" | grep -v failed | sort -g | awk '{v[NR]=$1} END{if(NR==0)print "nan"; else print v[int((NR+1)/2)]}'; }
	ma=$(med "${ra[@]}"); mb=$(med "${rb[@]}")
	echo "   $c reps: A ${ra[*]} | B ${rb[*]}" >&2
	ratio=$(awk -v a="$ma" -v b="$mb" 'BEGIN{ if (a+0 > 0) printf "%.3f", b/a; else print "-" }')
	printf "%-8s %12.0f %12.0f %7s  %-15s %-15s\n" "$c" "$ma" "$mb" "$ratio" \
		"$(echo $aa | tr ' ' '\n' | sort -u | tr '\n' ' ')" "$(echo $ab | tr ' ' '\n' | sort -u | tr '\n' ' ')"
done
