#!/bin/sh
# run.sh — the sync-policy experiment, in one run: every policy with and
# without a straggler on synthetic and real Criteo data, the k-step traffic
# sweep, and the policy-switch experiment (phases). Writes one directory of
# runs and prints the markdown tables of docs/benchmarks.md "Sync policies"
# and docs/policies.md (bench/policies/table.py).
#
#   bench/policies/run.sh [BUILD_DIR]                     (default build)
#
# Model: bench/policies/policy_dnn.lua (dnn, emb 8, MLP {64, 32}, AdaGrad
# rows, Adam dense), 4 train workers × minibatch 256 = global minibatch 1024.
# Data:
#   syn    `strata gen --rows $ROWS --eval-rows $EVAL_ROWS --files 8
#          --vocab 100000 --seed 7` (hidden logistic model, Zipf keys), one
#          pass ($SYN_EPOCHS), seeds $SYN_SEEDS;
#   criteo ../shared/data/criteo/Lapis-Hong_Wide-ResDNN train.csv (7,200
#          rows), dev.csv (409 rows) as eval, $CRITEO_EPOCHS epochs, seeds
#          $CRITEO_SEEDS (409 eval rows: one AUC has a standard error near
#          0.03, so several seeds).
# Straggler: $STRAGGLER (a --set assignment), one worker of four slowed 3×.
# syn2: the straggler policies again with 2 workers × 512 ($STRAGGLER2),
# so that the train workers do not outnumber the 2 cores.
#
# Environment (defaults): ROWS=1000000 EVAL_ROWS=200000 SYN_EPOCHS=1
# SYN_SEEDS="1" CRITEO_EPOCHS=10 CRITEO_SEEDS="1 2 3 4 5"
# OUT=${TMPDIR:-/tmp}/policies/out DATA=${TMPDIR:-/tmp}/policies/syn-$ROWS
# ONLY="syn syn2 criteo switch" (which parts run) POLICIES (labels to run, all
# when empty) POLICIES2 (labels of the syn2 part; default allreduce async
# gba-1024-2 hybrid-2) EXTRA_POLICIES (more "label|policy" lines). A policy
# whose job does not pass `strata check` is recorded as not available (its
# error in OUT/NAME.out) and not run; one that check accepts but run refuses
# shows its error in the table.
#
# Timing repeats: run again with OUT=another dir, ONLY="syn syn2" and a few
# POLICIES, then `python3 bench/policies/table.py OUT OUT2 OUT3` pools them
# (mean, sd and min-max per cell); `table.py --summary OUT` prints the
# one-line-per-policy table of docs/policies.md. Full matrix: about 5
# minutes on 2 free cores (docs/benchmarks.md "Sync policies").
set -eu
build=${1:-build}
root=$(cd "$(dirname "$0")/../.." && pwd)
here="$root/bench/policies"
job="$here/policy_dnn.lua"
strata="$build/cli/strata"
rows=${ROWS:-1000000}
eval_rows=${EVAL_ROWS:-200000}
syn_epochs=${SYN_EPOCHS:-1}
syn_seeds=${SYN_SEEDS:-1}
criteo_epochs=${CRITEO_EPOCHS:-10}
criteo_seeds=${CRITEO_SEEDS:-1 2 3 4 5}
out=${OUT:-${TMPDIR:-/tmp}/policies/out}
data=${DATA:-${TMPDIR:-/tmp}/policies/syn-$rows}
only=${ONLY:-syn syn2 criteo switch}
straggler=${STRAGGLER:-stragglers=st.stragglers{worker=3, slowdown=3}}
straggler2=${STRAGGLER2:-stragglers=st.stragglers{worker=1, slowdown=3}}
criteo="$root/../shared/data/criteo/Lapis-Hong_Wide-ResDNN"
# strata picks its OpenBLAS kernels itself; one BLAS thread per worker.
export OPENBLAS_NUM_THREADS=1

[ -x "$strata" ] || ninja -C "$build" cli/strata
mkdir -p "$out"
index="$out/index.tsv"
printf 'data\tlabel\tstraggler\tseed\trc\twall_s\tname\tsync\n' > "$index"

# label|policy expression — the matrix. kstep-1/10/100 are the traffic
# sweep; shadow-fr-* the fixed-rate variant when the policy has one.
policies='allreduce|st.sync.allreduce{}
async|st.sync.async{}
hop_bs-2|st.sync.hop_bs{b=2}
bsp-4|st.sync.bsp{b=4}
hop_bw-1|st.sync.hop_bw{b=1}
gba-1024-2|st.sync.gba{global_batch=1024, tolerance=2}
kstep-1|st.sync.kstep{k=1}
kstep-10|st.sync.kstep{k=10}
kstep-100|st.sync.kstep{k=100}
shadow-easgd|st.sync.shadow{algo="easgd", alpha=0.5}
shadow-ma|st.sync.shadow{algo="ma", alpha=0.5}
shadow-bmuf|st.sync.shadow{algo="bmuf", alpha=0.5}
hybrid-2|st.sync.hybrid{staleness=2}
shadow-fr-easgd-1|st.sync.shadow{algo="easgd", alpha=0.5, every=1}
shadow-fr-easgd-5|st.sync.shadow{algo="easgd", alpha=0.5, every=5}
shadow-fr-ma-5|st.sync.shadow{algo="ma", alpha=0.5, every=5}
auto-gba|st.sync.auto{sync=st.sync.allreduce{}, async=st.sync.gba{global_batch=1024, tolerance=2}}'
policies="$policies${EXTRA_POLICIES:+
$EXTRA_POLICIES}"

wanted() {   # is label $1 in $POLICIES (or is POLICIES empty)?
	[ -z "${POLICIES:-}" ] && return 0
	for p in $POLICIES; do [ "$p" = "$1" ] && return 0; done
	return 1
}

# one DATA LABEL STRAGGLER(0|1) SEED SYNC [more --set args...]
one() {
	d=$1 label=$2 strag=$3 seed=$4 sync=$5
	shift 5
	name="$d-$label-s$strag-$seed"
	set -- --set "sync=$sync" --set "seed=$seed" "$@"
	st_set=$straggler
	if [ "$d" = syn ] || [ "$d" = syn2 ]; then
		set -- "$@" --set "data.train.path=$data/train-*.tsv" \
			--set "data.eval.path=$data/eval.tsv" --set "epochs=$syn_epochs"
	else
		set -- "$@" --set "data.train.path=$criteo/train.csv" \
			--set "data.eval.path=$criteo/dev.csv" --set "epochs=$criteo_epochs"
	fi
	if [ "$d" = syn2 ]; then
		# 2 workers × 512 (same global minibatch): the workers no longer
		# outnumber the cores
		set -- "$@" --set stages.train.workers=2 --set stages.train.minibatch=512
		st_set=$straggler2
	fi
	[ "$strag" = 1 ] && set -- "$@" --set "$st_set"
	if ! "$strata" check "$job" "$@" > "$out/$name.out" 2>&1; then
		printf '%s\t%s\t%s\t%s\tNA\t\t%s\t%s\n' "$d" "$label" "$strag" "$seed" \
			"$name" "$sync" >> "$index"
		echo "-- $name: not available ($(grep -m1 -v '^strata: info' "$out/$name.out" | cut -c1-160))"
		return 0
	fi
	t0=$(date +%s.%N)
	rc=0
	"$strata" run "$job" "$@" --quiet --metrics "$out/$name.jsonl" \
		> "$out/$name.out" 2>&1 || rc=$?
	t1=$(date +%s.%N)
	wall=$(echo "$t1 - $t0" | bc -l)
	printf '%s\t%s\t%s\t%s\t%s\t%.2f\t%s\t%s\n' "$d" "$label" "$strag" "$seed" "$rc" \
		"$wall" "$name" "$sync" >> "$index"
	printf -- '-- %s: rc %s, %.1f s, %s\n' "$name" "$rc" "$wall" \
		"$(grep -E '^ +eval ' "$out/$name.out" | sed 's/  */ /g' | cut -c1-60)"
}

matrix() {   # DATA SEEDS
	echo "$policies" | while IFS='|' read -r label sync; do
		wanted "$label" || continue
		for seed in $2; do
			# straggler and no-straggler runs back to back, so both see
			# about the same load from the rest of the machine
			one "$1" "$label" 0 "$seed" "$sync"
			one "$1" "$label" 1 "$seed" "$sync"
		done
	done
}

echo "== machine: $(nproc) cores,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $(. /etc/os-release && echo "$PRETTY_NAME")"
echo "== commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown) (plus uncommitted work: $(git -C "$root" status --short 2>/dev/null | wc -l) paths)"
echo "== load before: $(cut -d' ' -f1-3 /proc/loadavg)"
start=$(date +%s)

case " $only " in *" syn "*|*" switch "*)
	if [ ! -f "$data/eval.tsv" ]; then
		"$strata" gen --rows "$rows" --eval-rows "$eval_rows" --files 8 \
			--vocab 100000 --seed 7 --out "$data"
	fi
	cat "$data"/*.tsv > /dev/null ;;   # warm the page cache
esac

case " $only " in *" syn "*)
	echo "== synthetic: $rows train rows, $eval_rows eval rows, $syn_epochs epoch(s)"
	matrix syn "$syn_seeds" ;;
esac
# The straggler claim again with 2 workers × 512 on the 2 cores
# (straggler: worker 1 of 2), for the policies it is about.
case " $only " in *" syn2 "*)
	echo "== synthetic, 2 workers x 512"
	saved=${POLICIES:-}
	POLICIES=${POLICIES2:-allreduce async gba-1024-2 hybrid-2}
	matrix syn2 "$syn_seeds"
	POLICIES=$saved ;;
esac
case " $only " in *" criteo "*)
	echo "== criteo sample: ${criteo_epochs} epochs, seeds $criteo_seeds"
	matrix criteo "$criteo_seeds" ;;
esac

# Switch experiment (`phases`, one model trained on, eval after every
# phase): syn — phase 1 = train-00000..00003 (first half) with policy A,
# phase 2 = train-00004 (the next 1/8: AUC right after the switch), phase 3
# = train-00005..00007 with policy B; criteo — phase 1 = first 3,600 rows
# of train.csv, phase 2 = the last 3,600 ($CRITEO_EPOCHS epochs each).
# Pairs: allreduce→gba and gba→allreduce against the no-switch controls
# allreduce→allreduce and gba→gba, and allreduce→async / async→allreduce
# for contrast (same learning rates: no re-tuning at the switch).
switch_pairs='allreduce>allreduce|st.sync.allreduce{}|st.sync.allreduce{}
allreduce>gba|st.sync.allreduce{}|st.sync.gba{global_batch=1024, tolerance=2}
gba>gba|st.sync.gba{global_batch=1024, tolerance=2}|st.sync.gba{global_batch=1024, tolerance=2}
gba>allreduce|st.sync.gba{global_batch=1024, tolerance=2}|st.sync.allreduce{}
allreduce>async|st.sync.allreduce{}|st.sync.async{}
async>allreduce|st.sync.async{}|st.sync.allreduce{}'
half="$out/criteo-half"

switch_one() {   # DATA LABEL SEED SYNC_A SYNC_B
	d=$1 label=$2 seed=$3 a=$4 b=$5
	name="switch-$d-$(echo "$label" | tr '>' '_')-$seed"
	if [ "$d" = syn ]; then
		src() { echo "st.data.criteo{path={$1}}"; }
		p1=$(src "\"$data/train-00000.tsv\", \"$data/train-00001.tsv\", \"$data/train-00002.tsv\", \"$data/train-00003.tsv\"")
		p2=$(src "\"$data/train-00004.tsv\"")
		p3=$(src "\"$data/train-00005.tsv\", \"$data/train-00006.tsv\", \"$data/train-00007.tsv\"")
		phases="{ {name=\"first-half\", sync=$a, data=$p1}, {name=\"after-switch\", sync=$b, data=$p2}, {name=\"rest\", sync=$b, data=$p3} }"
		set -- --set "data.train.path=$data/train-*.tsv" --set "data.eval.path=$data/eval.tsv" \
			--set "epochs=$syn_epochs"
	else
		phases="{ {name=\"first-half\", sync=$a, data=st.data.criteo{path=\"$half/first.csv\"}}, {name=\"second-half\", sync=$b, data=st.data.criteo{path=\"$half/second.csv\"}} }"
		set -- --set "data.train.path=$criteo/train.csv" --set "data.eval.path=$criteo/dev.csv" \
			--set "epochs=$criteo_epochs"
	fi
	set -- "$@" --set "seed=$seed" --set "phases=$phases"
	t0=$(date +%s.%N)
	rc=0
	"$strata" run "$job" "$@" --quiet --metrics "$out/$name.jsonl" > "$out/$name.out" 2>&1 || rc=$?
	wall=$(echo "$(date +%s.%N) - $t0" | bc -l)
	# eval AUC / logloss after each phase, from the {"phase": ...} records
	evals=$(/usr/bin/python3 -c '
import json, sys
r = []
for line in open(sys.argv[1]):
    try:
        j = json.loads(line)
    except ValueError:
        continue
    if "phase" in j and "eval_auc" in j:
        r.append((j["eval_auc"], j["eval_logloss"]))
a = [f"{x[0]:.6f}" for x in r] + [""] * (3 - len(r))
print("\t".join(a[:3] + [f"{r[-1][1]:.6f}" if r else ""]))' "$out/$name.jsonl" 2>/dev/null || printf '\t\t\t')
	printf '%s\t%s\t%s\t%s\t%.2f\t%s\t%s\n' "$d" "$label" "$seed" "$rc" "$wall" "$evals" "$name" >> "$out/switch.tsv"
	printf -- '-- %s: rc %s, %.1f s, eval AUC after each phase: %s\n' "$name" "$rc" "$wall" "$evals"
}

case " $only " in *" switch "*)
	echo "== switch (phases)"
	mkdir -p "$half"
	head -n 3600 "$criteo/train.csv" > "$half/first.csv"
	tail -n +3601 "$criteo/train.csv" > "$half/second.csv"
	printf 'data\tlabel\tseed\trc\twall_s\tauc1\tauc2\tauc3\tll_last\tname\n' > "$out/switch.tsv"
	echo "$switch_pairs" | while IFS='|' read -r label a b; do
		for seed in $syn_seeds; do switch_one syn "$label" "$seed" "$a" "$b"; done
		for seed in $criteo_seeds; do switch_one criteo "$label" "$seed" "$a" "$b"; done
	done ;;
esac

echo "== load after: $(cut -d' ' -f1-3 /proc/loadavg); $(( $(date +%s) - start )) s in all"
/usr/bin/python3 "$here/table.py" "$out"
