#!/usr/bin/env bash
# presets_ab.sh — the dnn preset through its Lua function (the layers of
# stdlib/strata/presets.lua, the default) against its C reference twin
# (bench_ctr --twin, ops/nn/model.c's hand-written builders), in one run,
# interleaved (Lua twin, twin Lua, ...) so drift of the machine hits both
# alike. Both build the same graph for the same executor, so the expected
# ratio is 1; this shows it (docs/benchmarks.md, "Presets as Lua").
#
#   bench/presets_ab.sh [ROWS] [REPS]     (defaults: 300000 rows, 5 reps)
#
# First the model step alone (bench_presets, the same job's model). Then
# the pipeline. Model: bench/ctr_strata.lua (26 slots × emb_dim 16, 13 dense, MLP
# 400-400-400) with 1 worker × minibatch 1024, as bench/ctr.sh runs it;
# data: `strata gen --rows ROWS --eval-rows ROWS/10` in $TMPDIR. Prints
# each run's training examples/s (bench_ctr: data already in memory), the
# median and the best run per path, Lua/twin, and the eval AUC of each (must be equal: the
# models are bit-identical). OPENBLAS_NUM_THREADS=1.
set -eu
rows=${1:-300000}
reps=${2:-5}
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$root/build}
dir=${TMPDIR:-/tmp}/strata-presets-ab-$rows
export OPENBLAS_NUM_THREADS=1
ninja -C "$build" cli/strata bench/bench_ctr bench/bench_presets >/dev/null
# The model step alone (bench_presets: min and median of 60 alternated
# steps of each, minibatch 512), then the whole pipeline.
"$build/bench/bench_presets" "$root/bench/ctr_strata.lua" 60
[ -f "$dir/eval.tsv" ] ||
	"$build/cli/strata" gen --rows "$rows" --eval-rows $((rows / 10)) --out "$dir" >/dev/null
sets=(--set "data.train.path=\"$dir/train-*.tsv\"" --set "data.eval.path=\"$dir/eval.tsv\""
      --set stages.train.workers=1 --set stages.train.minibatch=1024)
lua=() twin=() auc_l='' auc_t=''
field() { sed -n "s/.*\"$1\": \([0-9.]*\).*/\1/p"; }
run_lua() {
	out=$("$build/bench/bench_ctr" "$root/bench/ctr_strata.lua" "${sets[@]}" | tail -1)
	lua+=("$(field train_ex_per_s <<<"$out")"); auc_l=$(field eval_auc <<<"$out")
}
run_twin() {
	out=$("$build/bench/bench_ctr" "$root/bench/ctr_strata.lua" "${sets[@]}" --twin | tail -1)
	twin+=("$(field train_ex_per_s <<<"$out")"); auc_t=$(field eval_auc <<<"$out")
}
# A B B A ...: neither path always runs first (page cache, CPU boost).
for r in $(seq "$reps"); do
	if [ $((r % 2)) -eq 1 ]; then run_lua; run_twin; else run_twin; run_lua; fi
	echo "rep $r: lua ${lua[-1]} ex/s, twin ${twin[-1]} ex/s"
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
best() { printf '%s\n' "$@" | sort -g | tail -1; }
ml=$(median "${lua[@]}") mt=$(median "${twin[@]}")
bl=$(best "${lua[@]}") bt=$(best "${twin[@]}")
echo "median train ex/s: lua $ml, twin $mt, lua/twin $(awk "BEGIN {printf \"%.3f\", $ml/$mt}")"
# The best run of each: on a shared machine, the run least slowed by others.
echo "best train ex/s: lua $bl, twin $bt, lua/twin $(awk "BEGIN {printf \"%.3f\", $bl/$bt}")"
echo "eval auc: lua $auc_l, twin $auc_t"
[ "$auc_l" = "$auc_t" ] || { echo "presets_ab: the AUCs differ: the two paths are not the same model" >&2; exit 1; }
