# The {"phase": ...} lines of the metrics file: a phase named with a quote,
# a backslash, a newline and a tab gives one valid JSON line per phase with
# the name intact; and a metrics file on a full disk (/dev/full) fails the
# run (exit 1, the path named) instead of passing silently.
# Usage: bash b2_phase_json.sh STRATA TMPDIR
set -u
strata=$1 tmp=$2
command -v python3 >/dev/null || { echo "python3 is needed to parse the JSON"; exit 77; }
"$strata" gen --rows 3000 --vocab 100 --seed 5 --out "$tmp/d" >/dev/null || exit 1
cat >"$tmp/job.lua" <<LUA
local st = require "strata"
return st.job {
  name = "b2_phase_json",
  data = { train = st.data.criteo { path = "$tmp/d/train-00000.tsv" } },
  model = st.model.lr {},
  stages = { read = { batch_size = 512 }, train = { minibatch = 128 } },
  phases = {
    { name = "q\"b\\\\s\nn\tt", rows = 1000, sync = st.sync.async {} },
    { name = "rest", sync = st.sync.allreduce {} },
  },
}
LUA
"$strata" run "$tmp/job.lua" --quiet --metrics "$tmp/m.jsonl" >"$tmp/out" 2>&1 || {
  echo "FAIL run with phases (exit $?)"; cat "$tmp/out"; exit 1; }
python3 - "$tmp/m.jsonl" <<'PY' || exit 1
import json, sys
names = []
for n, line in enumerate(open(sys.argv[1], encoding="utf-8"), 1):
    try:
        rec = json.loads(line)
    except ValueError as e:
        sys.exit("FAIL line %d is not JSON (%s): %r" % (n, e, line))
    if "phase" in rec:
        names.append(rec["phase"])
want = ['q"b\\s\nn\tt', "rest"]
if names != want:
    sys.exit("FAIL phase names %r, wanted %r" % (names, want))
print("ok: %d phase lines, names intact" % len(names))
PY
"$strata" run "$tmp/job.lua" --quiet --metrics /dev/full >"$tmp/out" 2>&1
rc=$?
if [ "$rc" -ne 1 ] || ! grep -q "cannot write the metrics file /dev/full: No space left on device" "$tmp/out" ||
   ! grep -q "the metrics file /dev/full is incomplete" "$tmp/out"; then
  echo "FAIL phases with --metrics /dev/full: exit $rc, wanted 1 and the path named"; cat "$tmp/out"; exit 1
fi
exit 0
