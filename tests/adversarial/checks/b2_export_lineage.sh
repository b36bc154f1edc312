# Export lineage: every export carries its run's lineage (made by the run's
# first full export, kept by its deltas), and exports of two runs never mix
# in one chain. Before, a run's delta numbered after another run's full
# export in a shared export directory was applied to that other model
# silently by `strata predict` / `strata eval`.
#  1. Writer: run A writes its full export and is paused (SIGSTOP) while
#     run B of another job writes into the same directory; resumed, A must
#     refuse to write its next delta there (exit 1, both runs named), and
#     B's chain stays whole.
#  2. Loader: a delta of another run put after B's chain (as a writer
#     without the check would have done) is refused by eval (exit 1) and
#     flagged by inspect; each run's exports name one 16-hex lineage.
# Usage: bash b2_export_lineage.sh STRATA TMPDIR
set -u
strata=$1 tmp=$2
fail=0
"$strata" gen --rows 24000 --eval-rows 500 --vocab 500 --seed 5 --out "$tmp/d" >/dev/null || exit 1
# job NAME EXPORT_DIR: three phases, each exported (delta); a straggler makes
# the second phase last a few seconds.
job() {
  cat <<LUA
local st = require "strata"
return st.job {
  name = "$1",
  data = { train = st.data.criteo { path = "$tmp/d/train-00000.tsv" },
           eval = st.data.criteo { path = "$tmp/d/eval.tsv" } },
  model = st.model.dnn { emb_dim = 4, hidden = { 16 } },
  stages = { read = { batch_size = 256 }, train = { minibatch = 256 } },
  stragglers = st.stragglers { worker = 0, slowdown = 40 },
  phases = {
    { name = "one", rows = 256, sync = st.sync.async {} },
    { name = "two", rows = 12000, sync = st.sync.async {} },
    { name = "three", rows = 256, sync = st.sync.async {} },
  },
  export = { dir = "$2", delta = true },
}
LUA
}
job a "$tmp/export" >"$tmp/a.lua"
job b "$tmp/export" | sed 's/stragglers = .*//' >"$tmp/b.lua"
job c "$tmp/export-c" | sed 's/stragglers = .*//' >"$tmp/c.lua"

# 1. The writer.
"$strata" run "$tmp/a.lua" --quiet >"$tmp/a.out" 2>&1 &
apid=$!
for _ in $(seq 1 600); do
  [ -d "$tmp/export/export-000000000000-full" ] && break
  kill -0 "$apid" 2>/dev/null || break
  sleep 0.05
done
if ! kill -STOP "$apid" 2>/dev/null || [ -e "$tmp/export/export-000000000001-delta" ]; then
  kill -CONT "$apid" 2>/dev/null; wait "$apid"
  echo "run A ended its second phase before it could be paused; the machine is too slow for this check"
  exit 77
fi
"$strata" run "$tmp/b.lua" --quiet >"$tmp/b.out" 2>&1 || { echo "FAIL run B"; cat "$tmp/b.out"; fail=1; }
kill -CONT "$apid"
wait "$apid"
rc=$?
if [ "$rc" -ne 1 ] || ! grep -Eq "export 1: .*/export-000000000001-full was written by another run \(job 'b', lineage [0-9a-f]{16}; this run is job 'a', lineage [0-9a-f]{16}\)" "$tmp/a.out" ||
   ! grep -q "give each run its own export.dir" "$tmp/a.out"; then
  echo "FAIL run A wrote after run B's export: exit $rc (wanted 1 and both runs named)"
  sed 's/^/  | /' "$tmp/a.out"; ls "$tmp/export" | sed 's/^/  ls | /'; fail=1
fi
"$strata" eval "$tmp/export" "$tmp/d/eval.tsv" >"$tmp/out" 2>&1 ||
  { echo "FAIL run B's chain does not load"; sed 's/^/  | /' "$tmp/out"; fail=1; }

# 2. The loader: run C's second export (a delta) placed after B's chain.
"$strata" run "$tmp/c.lua" --quiet >"$tmp/c.out" 2>&1 || { echo "FAIL run C"; cat "$tmp/c.out"; fail=1; }
last=$(ls "$tmp/export" | sed -n 's/^export-\([0-9]*\)-.*/\1/p' | sort -n | tail -n 1)
next=$(printf 'export-%012d-delta' $((10#$last + 1)))
cp -r "$tmp/export-c/export-000000000001-delta" "$tmp/export/$next"
"$strata" eval "$tmp/export" "$tmp/d/eval.tsv" >"$tmp/out" 2>&1
rc=$?
if [ "$rc" -ne 1 ] || ! grep -Eq "export $next was written by another run than export-000000000001-full \(job 'c', lineage [0-9a-f]{16}; export-000000000001-full has job 'b', lineage [0-9a-f]{16}\)" "$tmp/out"; then
  echo "FAIL eval over a chain mixing two runs: exit $rc (wanted 1 and both runs named)"
  sed 's/^/  | /' "$tmp/out"; fail=1
fi
"$strata" inspect "$tmp/export" >"$tmp/out" 2>&1
rc=$?
if [ "$rc" -ne 1 ] || ! grep -q "note: export $next was written by another run" "$tmp/out"; then
  echo "FAIL inspect of the mixed chain: exit $rc"; sed 's/^/  | /' "$tmp/out"; fail=1
fi
la=$("$strata" inspect "$tmp/export/export-000000000000-full" | sed -n 's/^  lineage  //p')
lb=$("$strata" inspect "$tmp/export/export-000000000001-full" | sed -n 's/^  lineage  //p')
lb2=$("$strata" inspect "$tmp/export/export-000000000002-delta" | sed -n 's/^  lineage  //p')
if ! [[ "$la" =~ ^[0-9a-f]{16}$ ]] || ! [[ "$lb" =~ ^[0-9a-f]{16}$ ]] || [ "$la" = "$lb" ] || [ "$lb" != "$lb2" ]; then
  echo "FAIL lineages: A '$la', B '$lb' and '$lb2' (wanted B's two equal, A's another)"; fail=1
fi
exit $fail
