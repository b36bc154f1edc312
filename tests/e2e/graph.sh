#!/usr/bin/env bash
# Models written layer by layer in the job file (st.model.graph, issue 19),
# end to end: the dnn, deepfm and dcnv2 presets declared as graphs train to
# the same model digest, progressive and eval metrics as the presets; a
# graph's checkpoint resumes bit for bit; its export, read back by
# `strata eval` (the node.<i> lines of its model config rebuild the graph),
# scores the eval data as the trainer did; the presets' Lua functions
# (st.presets.*) give the presets' models. Usage: graph.sh PATH/TO/strata
set -u
strata=$1
root=${ST_SOURCE_ROOT:?}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$root"
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; [ -f "$tmp/out" ] && sed 's/^/     | /' "$tmp/out" | tail -n 15; }
# The lines of a run that must match: digest, progressive and eval metrics.
summary() { grep -E "digest|progressive|eval " "$1" | sed 's/ *([0-9.]* [a-z]*\/s)//'; }
# Same sgemm kernels for every run of the comparison (see predict.sh).
export STRATA_KEEP_OPENBLAS_CORETYPE=1

"$strata" gen --rows 20000 --eval-rows 2000 --files 1 --vocab 5000 --seed 5 --out "$tmp/d" \
  >/dev/null 2>&1 || { echo "FAIL gen"; exit 1; }
args=(tests/e2e/jobs/gen_dnn.lua --no-pin
  --set 'data.generate=nil' --set "data.train.path=\"$tmp/d/train-*.tsv\""
  --set "data.eval.path=\"$tmp/d/eval.tsv\"" --set 'sync=st.sync.allreduce{}'
  --set stages.read.threads=1 --set stages.train.workers=1 --set stages.read.batch_size=512)
run() {   # run NAME MODEL [more args]: STRATA_DIGEST=1 run, summary in $tmp/NAME
  local name=$1 model=$2; shift 2
  STRATA_DIGEST=1 "$strata" run "${args[@]}" --set "model=$model" "$@" >"$tmp/out" 2>&1 ||
    { bad "run $name"; return 1; }
  summary "$tmp/out" >"$tmp/$name"
  grep -q digest "$tmp/$name" || { bad "run $name prints a digest"; return 1; }
}
same() {
  if cmp -s "$tmp/$2" "$tmp/$3"; then ok "$1"; else
    bad "$1"; diff "$tmp/$2" "$tmp/$3" | head -n 8 | sed 's/^/     | /'; fi
}

opt='optimizer = st.optim.adagrad { lr = 0.05 }'
L='st.layer'
deep="{ \"e\", $L.embed {} }, { \"x\", $L.dense {} }, { \"x0\", $L.concat { \"e\", \"x\" } }"

run dnn "st.model.dnn { emb_dim = 8, hidden = { 32, 16 }, $opt }"
run dnn_graph "st.model.graph { emb_dim = 8, $opt, layers = { $deep,
  { \"mlp\", $L.mlp { \"x0\", sizes = { 32, 16 } } }, { \"out\", $L.linear { \"mlp\" } } },
  output = \"out\" }"
same "dnn as a graph: same digest and metrics as the preset" dnn dnn_graph

run deepfm "st.model.deepfm { emb_dim = 8, hidden = { 32 }, $opt }"
run deepfm_graph "st.model.graph { emb_dim = 8, $opt, layers = {
  { \"x\", $L.dense {} }, { \"dense\", $L.linear { \"x\" } }, { \"e\", $L.embed {} },
  { \"x0\", $L.concat { \"e\", \"x\" } }, { \"mlp\", $L.mlp { \"x0\", sizes = { 32 } } },
  { \"out\", $L.linear { \"mlp\" } }, { \"w\", $L.wide {} }, { \"f\", $L.fm { \"e\" } },
  { \"sum\", $L.add { \"out\", \"w\", \"dense\", \"f\" } } }, output = \"sum\" }"
same "deepfm as a graph: same digest and metrics as the preset" deepfm deepfm_graph

run dcnv2 "st.model.dcnv2 { emb_dim = 8, hidden = { 32 }, cross_layers = 2, cross_rank = 4, $opt }"
dcn="st.model.graph { emb_dim = 8, $opt, layers = { $deep,
  { \"cross\", $L.cross { \"x0\", layers = 2, rank = 4 } },
  { \"mlp\", $L.mlp { \"cross\", sizes = { 32 } } }, { \"out\", $L.linear { \"mlp\" } } },
  output = \"out\" }"
run dcnv2_graph "$dcn"
same "dcnv2 as a graph: same digest and metrics as the preset" dcnv2 dcnv2_graph

# Checkpoint after one epoch, resume to two: the same model as two epochs
# in one go (the checkpoint's model config holds the graph).
run two "$dcn" --set epochs=2
run one "$dcn" --set epochs=1 --set "checkpoint={dir=\"$tmp/c\",every=1000}"
run resumed "$dcn" --set epochs=2 --set "checkpoint={dir=\"$tmp/c\",every=1000}" --resume
if grep -q digest "$tmp/two" && [ "$(grep digest "$tmp/two")" = "$(grep digest "$tmp/resumed")" ]; then
  ok "a graph's checkpoint resumes to the uninterrupted model"
else bad "a graph's checkpoint resumes to the uninterrupted model"; fi

# Export; strata eval rebuilds the graph from the export's node lines.
run exp "$dcn" --set "export={dir=\"$tmp/x\"}"
if "$strata" eval "$tmp/x" "$tmp/d/eval.tsv" >"$tmp/out" 2>&1; then
  got=$(awk '/^auc/ { printf "auc %.4f  logloss %.4f", $2, $4 }' "$tmp/out")
  want=$(grep -o 'auc [0-9.]*  logloss [0-9.]*' <(grep '^  eval' "$tmp/exp"))
  if [ -n "$got" ] && [ "$got" = "$want" ]; then
    ok "strata eval on a graph's export: the trainer's eval ($got)"
  else bad "strata eval on a graph's export: '$got', trainer '$want'"; fi
else bad "strata eval on a graph's export"; fi

# strata plan prints the graph: one line per layer, with its parameters.
if "$strata" plan tests/lua/good_graph.lua >"$tmp/out" 2>&1 &&
   grep -q "^model graph: 6 nodes, 30907 dense parameters" "$tmp/out" &&
   grep -Eq "^ +3  c +cross +x0 +221 +14586 +88842$" "$tmp/out" &&
   grep -Eq "^ +5  out +linear +mlp +1 +33 +192$" "$tmp/out"; then
  ok "strata plan prints a graph's layers, parameters and FLOPs"
else bad "strata plan prints a graph's layers, parameters and FLOPs"; fi

# The presets are Lua functions (stdlib/strata/presets.lua): called from
# the job and handed to st.model.graph, dnn's trains to the preset's digest
# and metrics; a preset job's plan names the function's layers.
run dnn_fn "st.model.graph { emb_dim = 8, $opt, layers = st.presets.dnn { hidden = { 32, 16 } }.layers,
  output = \"out\" }"
same "st.presets.dnn in st.model.graph: same digest and metrics as the preset" dnn dnn_fn
if "$strata" plan tests/lua/good_dcnv2.lua >"$tmp/out" 2>&1 &&
   grep -Eq "^model dcnv2: 6 nodes, [0-9]+ dense parameters" "$tmp/out" &&
   grep -Eq "^ +3  cross +cross +x0 " "$tmp/out" &&
   grep -Eq "^ +5  out +linear +mlp +1 " "$tmp/out"; then
  ok "strata plan prints a preset's layers by their names in presets.lua"
else bad "strata plan prints a preset's layers by their names in presets.lua"; fi

echo "graph: $pass passed, $fail failed"
[ $fail -eq 0 ]
