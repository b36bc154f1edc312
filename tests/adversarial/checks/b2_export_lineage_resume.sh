# Export lineage across --resume: a run killed mid-way and resumed from its
# checkpoint goes on with the lineage its first full export made (the
# checkpoint carries it), so every export of the job names one lineage.
# Usage: bash b2_export_lineage_resume.sh STRATA TMPDIR
set -u
strata=$1 tmp=$2
"$strata" gen --rows 16000 --vocab 500 --seed 5 --out "$tmp/d" >/dev/null || exit 1
cat >"$tmp/job.lua" <<LUA
local st = require "strata"
return st.job {
  name = "b2_lineage_resume",
  data = { train = st.data.criteo { path = "$tmp/d/train-00000.tsv" } },
  model = st.model.dnn { emb_dim = 4, hidden = { 16 } },
  stages = { read = { batch_size = 256 }, train = { minibatch = 256 } },
  stragglers = st.stragglers { worker = 0, slowdown = 40 },
  phases = {
    { name = "one", rows = 256, sync = st.sync.async {} },
    { name = "two", rows = 256, sync = st.sync.async {} },
    { name = "three", rows = 12000, sync = st.sync.async {} },
    { name = "four", rows = 256, sync = st.sync.async {} },
  },
  export = { dir = "$tmp/export", delta = true },
  checkpoint = { dir = "$tmp/ckpt", keep = 0 },
}
LUA
"$strata" run "$tmp/job.lua" --quiet >"$tmp/a.out" 2>&1 &
pid=$!
# Two checkpoints: the second is taken after the first export whichever of
# export and checkpoint comes first at the end of a phase.
for _ in $(seq 1 600); do
  [ "$(ls "$tmp/ckpt" 2>/dev/null | grep -c '^ckpt-[0-9]*$')" -ge 2 ] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.05
done
kill -STOP "$pid" 2>/dev/null
if [ -e "$tmp/export/export-000000000003-delta" ] || ! kill -KILL "$pid" 2>/dev/null; then
  wait "$pid"; echo "the run ended before it could be killed mid-way; the machine is too slow for this check"
  exit 77
fi
wait "$pid" 2>/dev/null
"$strata" run "$tmp/job.lua" --quiet --resume >"$tmp/b.out" 2>&1 || {
  echo "FAIL the resumed run"; sed 's/^/  | /' "$tmp/b.out"; exit 1; }
grep -q "resuming from" "$tmp/b.out" || { echo "FAIL the run did not resume"; cat "$tmp/b.out"; exit 1; }
lins=$(for d in "$tmp"/export/export-*; do "$strata" inspect "$d" | sed -n 's/^  lineage  //p'; done | sort | uniq -c)
n=$(ls "$tmp/export" | wc -l)
if [ "$(echo "$lins" | wc -l)" -ne 1 ] || ! echo "$lins" | grep -Eq "^ *$n [0-9a-f]{16}$"; then
  echo "FAIL the $n exports name these lineages (count id):"; echo "$lins"; ls "$tmp/export"; exit 1
fi
# The chain the resumed run ends with loads.
"$strata" eval "$tmp/export" "$tmp/d/train-00000.tsv" >"$tmp/out" 2>&1 || {
  echo "FAIL eval of the resumed run's exports"; cat "$tmp/out"; exit 1; }
exit 0
