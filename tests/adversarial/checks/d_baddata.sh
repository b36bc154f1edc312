#!/usr/bin/env bash
# Bad training data (issue 15): each file below is handed to `strata run`
# and must give its stated exit code and message, never a crash or a hang
# (every run is under a timeout; a signal or a timeout fails the check).
# The rule pinned here: a record-level fault is a bad record (counted and
# reported as file:line, fatal with on_bad_record = "fail"); a fault in the
# file itself (a broken compressed stream, not a file) stops the job with
# exit 1 naming the file; a path that matches nothing is a job error (2).
# Usage: bash d_baddata.sh STRATA TMPDIR (from the source root).
set -u
strata=$1
tmp=$2
job=tests/e2e/jobs/criteo_small.lua
pass=0 fail=0

# run NAME WANT_RC PATTERN... -- strata-run-args...  (PATTERN: grep -E)
run() {
  local name=$1 want=$2 pats=() out="$tmp/$1.out"
  shift 2
  while [ "$1" != -- ]; do pats+=("$1"); shift; done
  shift
  timeout -k 5 60 "$strata" run "$@" --quiet >"$out" 2>&1 </dev/null
  local rc=$? miss=""
  for p in "${pats[@]}"; do grep -Eq -- "$p" "$out" || miss="$p"; done
  if [ "$rc" -eq "$want" ] && [ -z "$miss" ]; then
    pass=$((pass + 1)); echo "ok   $name"
  else
    fail=$((fail + 1))
    if [ "$rc" -ge 124 ]; then echo "FAIL $name: exit $rc (timeout or signal), wanted $want"
    elif [ "$rc" -ne "$want" ]; then echo "FAIL $name: exit $rc, wanted $want"
    else echo "FAIL $name: no match for /$miss/"; fi
    sed 's/^/     | /' "$out" | tail -n 8
  fi
}
path() { printf 'data.train.path="%s"' "$1"; }

# A good Criteo file to damage (2000 rows).
"$strata" gen --rows 2000 --vocab 1000 --seed 3 --out "$tmp/gen" >/dev/null 2>&1 ||
  { echo "FAIL: strata gen"; exit 1; }
good="$tmp/gen/train-00000.tsv"
[ -s "$good" ] || { echo "FAIL: strata gen wrote no $good"; exit 1; }

# Compressed streams.
gzip -c "$good" >"$tmp/whole.tsv.gz"
head -c $(($(stat -c %s "$tmp/whole.tsv.gz") / 2)) "$tmp/whole.tsv.gz" >"$tmp/trunc.tsv.gz"
run truncated-gzip 1 "trunc.tsv.gz: truncated gzip data" -- $job --set "$(path "$tmp/trunc.tsv.gz")"
cp "$good" "$tmp/plain.tsv.gz"
run not-gzip 1 "plain.tsv.gz: gzip data error: incorrect header check" -- $job --set "$(path "$tmp/plain.tsv.gz")"
: >"$tmp/empty.tsv.gz"
run empty-gzip 1 "empty.tsv.gz: truncated gzip data" -- $job --set "$(path "$tmp/empty.tsv.gz")"
head -c 5000 /dev/urandom >"$tmp/garbage.tsv.zst"
run garbage-zstd 1 "garbage.tsv.zst: zstd data error" -- $job --set "$(path "$tmp/garbage.tsv.zst")"
if command -v zstd >/dev/null; then
  zstd -q -c "$good" | head -c 3000 >"$tmp/trunc.tsv.zst"
  run truncated-zstd 1 "trunc.tsv.zst: truncated zstd data" -- $job --set "$(path "$tmp/trunc.tsv.zst")"
else
  echo "note: no zstd program; the truncated-zstd case is left out"
fi
# An empty .zst decodes to nothing (zstd accepts no frames), unlike an
# empty .gz, which gzip itself calls truncated.
: >"$tmp/empty.tsv.zst"
run empty-zstd 0 "read +0 rows, 0 bad records" -- $job --set "$(path "$tmp/empty.tsv.zst")"

# Empty file, binary junk, NUL bytes, a 10 MB line.
: >"$tmp/empty.tsv"
run empty-file 0 "read +0 rows, 0 bad records" -- $job --set "$(path "$tmp/empty.tsv")"
head -c 100000 /dev/urandom >"$tmp/junk.tsv"
# Skipped, but every record bad: more than max_bad_fraction (0.1), the pass
# fails; with the limit raised to 1 the job runs on nothing and says so.
run junk-skip 1 "junk.tsv: more bad records; further ones are counted only" "records \(100.0%\) are bad, more than its max_bad_fraction \(0.1\)" \
  -- $job --set "$(path "$tmp/junk.tsv")"
run junk-skip-allowed 0 "junk.tsv: more bad records; further ones are counted only" "read +0 rows, [1-9][0-9]* bad records" \
  -- $job --set "$(path "$tmp/junk.tsv")" --set data.train.max_bad_fraction=1
run junk-fail 1 "junk.tsv:1: field 0 \(label\): .* is not a label \(0 or 1\)" \
  -- $job --set "$(path "$tmp/junk.tsv")" --set 'data.train.on_bad_record="fail"'
printf '1\t2\t3\0\0\0\t4\n' >"$tmp/nul.tsv"
run nul-bytes 1 "nul.tsv:1: .*\\\\x00" "1 of 1 records \(100.0%\) are bad" -- $job --set "$(path "$tmp/nul.tsv")"
{ head -n 7 "$good"; printf '1\t'; head -c $((10 << 20)) /dev/zero | tr '\0' 7; printf '\n'; head -n 5 "$good"; } >"$tmp/huge.tsv"
run line-10mb-skip 0 "huge.tsv:8: line longer than 1048576 bytes" "read +12 rows, 1 bad records" \
  -- $job --set "$(path "$tmp/huge.tsv")"
run line-10mb-fail 1 "huge.tsv:8: line longer than 1048576 bytes" \
  -- $job --set "$(path "$tmp/huge.tsv")" --set 'data.train.on_bad_record="fail"'

# Not a file, no file.
mkdir -p "$tmp/adir.tsv"
run directory 1 "adir.tsv: read: Is a directory" -- $job --set "$(path "$tmp/adir.tsv")"
run no-such-file 2 "matches no file" "nothing was run" -- $job --set "$(path "$tmp/nope-*.tsv")"

# CSV with a missing column (row 3 of the file: header, good, short).
cat >"$tmp/csv.lua" <<'LUA'
local st = require "strata"
return st.job {
  name = "baddata_csv",
  data = { train = st.data.csv { path = "UNSET", columns = { "label", "dense", "cat", "cat" } } },
  model = st.model.lr { optimizer = st.optim.adagrad { lr = 0.05 } },
  stages = { read = { threads = 1, queue = 2, batch_size = 64 }, train = { workers = 1, minibatch = 32 } },
}
LUA
printf 'label,a,b,c\n1,2,x,y\n0,3,z\n1,4,q,r\n' >"$tmp/missing.csv"
run csv-missing-column-skip 0 "missing.csv:3: 3 columns, expected 4" "read +2 rows, 1 bad records" \
  -- "$tmp/csv.lua" --set "$(path "$tmp/missing.csv")" --set data.train.max_bad_fraction=0.5
run csv-missing-column-fail 1 "missing.csv:3: 3 columns, expected 4" \
  -- "$tmp/csv.lua" --set "$(path "$tmp/missing.csv")" --set 'data.train.on_bad_record="fail"'

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
