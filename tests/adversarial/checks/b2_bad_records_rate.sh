# Bad records under on_bad_record = "skip": a few are a warning with the
# count and the share (exit 0); more than data.train.max_bad_fraction (0.1 by
# default) fail the pass (exit 1) before any checkpoint, export or eval; the
# job can raise the limit; and the eval source has its own.
# Usage: bash b2_bad_records_rate.sh STRATA TMPDIR
set -u
strata=$1 tmp=$2
root=$PWD
fail=0
"$strata" gen --rows 1000 --vocab 100 --seed 5 --out "$tmp/d" >/dev/null || exit 1
garbage="$root/tests/adversarial/data/b2_garbage.tsv"            # 12 bad records
cat "$tmp/d/train-00000.tsv" "$garbage" >"$tmp/few.tsv"           # 12 of 1012: 1.2%
head -n 60 "$tmp/d/train-00000.tsv" | cat - "$garbage" >"$tmp/many.tsv"   # 12 of 72: 16.7%
cat >"$tmp/job.lua" <<LUA
local st = require "strata"
return st.job {
  name = "b2_bad_records_rate",
  data = { train = st.data.criteo { path = "$tmp/few.tsv" } },
  model = st.model.lr {},
  stages = { read = { batch_size = 256 }, train = { minibatch = 64 } },
  export = { dir = "$tmp/export" },
}
LUA
# expect EXIT ERE ARGS...: strata run job.lua ARGS.
expect() {
  local want=$1 pat=$2; shift 2
  "$strata" run "$tmp/job.lua" --quiet "$@" >"$tmp/out" 2>&1
  local rc=$?
  if [ "$rc" -ne "$want" ] || ! grep -Eq -- "$pat" "$tmp/out"; then
    echo "FAIL run $* (exit $rc, wanted $want and /$pat/):"; sed 's/^/  | /' "$tmp/out" | tail -n 12
    fail=1
  fi
}
expect 0 "warning: the train data \(.*few.tsv\): 12 of 1012 records \(1.19%\) were bad and skipped"
expect 1 "error: the train data \(.*many.tsv\): 12 of 72 records \(16.7%\) are bad, more than its max_bad_fraction \(0.1\) allows; the pass failed" \
  --set "data.train.path=\"$tmp/many.tsv\"" --set "export.dir=\"$tmp/export2\""
if [ -e "$tmp/export2" ] && [ -n "$(ls "$tmp/export2")" ]; then
  echo "FAIL a failed pass still wrote an export: $(ls "$tmp/export2")"; fail=1
fi
expect 0 "warning: the train data \(.*many.tsv\): 12 of 72 records .* max_bad_fraction, 0.2\)" \
  --set "data.train.path=\"$tmp/many.tsv\"" --set data.train.max_bad_fraction=0.2
expect 1 "error: the eval data \(.*many.tsv\): 12 of 72 records" \
  --set "data.eval=st.data.criteo{path=\"$tmp/many.tsv\"}"
expect 2 "max_bad_fraction must be <= 1, got 2|max_bad_fraction.*got 2" --set data.train.max_bad_fraction=2
exit $fail
