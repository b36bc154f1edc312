#!/usr/bin/env bash
# End-to-end tests of `strata predict` and `strata eval` on exports written
# by a trained model (mkexport): the scores and metrics equal the trainer's
# own eval byte for byte (full + delta, and the full export alone), --out is
# written whole or not at all, globs, and every error with its exit code
# (2 usage / bad input, 1 damaged export).
# Usage: predict.sh PATH/TO/strata PATH/TO/mkexport
# Prints "N passed, N failed" and exits non-zero if anything failed.
set -u
strata=$1
mkexport=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0

ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; [ -f "$tmp/out" ] && sed 's/^/     | /' "$tmp/out" | tail -n 30; }

# expect NAME CODE PATTERN... -- command...   (each PATTERN: grep -E over stdout+stderr)
expect() {
  local name=$1 code=$2; shift 2
  local pats=()
  while [ "$1" != "--" ]; do pats+=("$1"); shift; done
  shift
  "$@" >"$tmp/out" 2>&1
  local rc=$?
  if [ "$rc" -ne "$code" ]; then bad "$name (exit $rc, wanted $code)"; return; fi
  for pat in "${pats[@]}"; do
    if ! grep -Eq -- "$pat" "$tmp/out"; then bad "$name (no match for /$pat/)"; return; fi
  done
  ok "$name"
}

# same NAME FILE1 FILE2
same() {
  if cmp -s "$2" "$3"; then ok "$1"; else
    bad "$1 ($2 and $3 differ)"; diff "$2" "$3" | head -n 5 | sed 's/^/     | /'; fi
}

# Bit-exact comparisons need the same sgemm kernels on both sides: strata
# would re-execute itself with OPENBLAS_CORETYPE=SkylakeX on an AVX-512 CPU
# (cli/main.c) while mkexport runs with the environment's choice.
export STRATA_KEEP_OPENBLAS_CORETYPE=1

fx="$tmp/fx"
if ! "$mkexport" "$fx" >"$tmp/out" 2>&1; then
  bad "mkexport writes the fixtures"
  echo "$pass passed, $fail failed"
  exit 1
fi
ex="$fx/exports"
ev="$fx/data/eval.tsv"

expect "help predict" 0 "usage: strata predict EXPORT_DIR DATA" -- "$strata" help predict
expect "help eval" 0 "usage: strata eval EXPORT_DIR DATA" -- "$strata" help eval
expect "usage lists predict and eval" 0 "predict DIR DATA" "eval DIR DATA" -- "$strata" --help
expect "predict --help" 0 "--out FILE" -- "$strata" predict --help

# The scores: stdout, --out, a glob, another batch size, two threads.
"$strata" predict "$ex" "$ev" >"$tmp/pred.txt" 2>"$tmp/err.txt"
rc=$?
if [ $rc -eq 0 ]; then ok "predict exits 0"; else bad "predict exits 0 (exit $rc)"; cat "$tmp/err.txt"; fi
same "predict equals the trainer's eval scores" "$tmp/pred.txt" "$fx/expected.txt"
[ "$(wc -l <"$tmp/pred.txt")" -eq 3000 ] && ok "one line per example" || bad "one line per example"
expect "predict --out" 0 "3000 scores written to .*/p.txt \(model export-000000000001-delta, seq 1, step 6\)" \
  -- "$strata" predict "$ex" "$ev" --out "$tmp/p.txt"
same "--out equals stdout" "$tmp/p.txt" "$fx/expected.txt"
ls "$tmp"/p.txt.tmp.* >/dev/null 2>&1 && bad "no temporary file left" || ok "no temporary file left"
"$strata" predict --threads 2 "$ex" "$fx/data/ev*.tsv" >"$tmp/pred2.txt" 2>/dev/null
same "a glob and two threads give the same scores" "$tmp/pred2.txt" "$fx/expected.txt"
"$strata" predict --batch 1000 "$ex" "$ev" >"$tmp/pred3.txt" 2>/dev/null
[ "$(wc -l <"$tmp/pred3.txt")" -eq 3000 ] && ok "--batch 1000 scores every example" \
  || bad "--batch 1000 scores every example"
head -n 1000 "$ev" >"$tmp/a.tsv"
tail -n +1001 "$ev" >"$tmp/b.tsv"
"$strata" predict "$ex" "$tmp/a.tsv" "$tmp/b.tsv" >"$tmp/pred4.txt" 2>/dev/null
same "two files in order equal one" "$tmp/pred4.txt" "$fx/expected.txt"

# eval: the metrics line of the trainer's own eval.
"$strata" eval "$ex" "$ev" >"$tmp/eval.txt" 2>"$tmp/err.txt"
rc=$?
[ $rc -eq 0 ] && ok "eval exits 0" || { bad "eval exits 0 (exit $rc)"; cat "$tmp/err.txt"; }
same "eval equals the trainer's eval" "$tmp/eval.txt" "$fx/expected-eval.txt"
expect "eval prints auc, logloss, examples" 0 "^auc 0\.[0-9]{6}  logloss 0\.[0-9]{6}  examples 3000$" \
  -- "$strata" eval "$ex" "$ev"

# Usage errors and bad input: exit 2.
expect "predict without arguments" 2 "missing EXPORT_DIR and DATA" -- "$strata" predict
expect "predict without DATA" 2 "missing DATA" -- "$strata" predict "$ex"
expect "missing export dir" 2 "EXPORT_DIR '.*/nope': no such directory" -- "$strata" predict "$tmp/nope" "$ev"
mkdir "$tmp/empty"
expect "no full export" 2 "empty: no complete full export" -- "$strata" eval "$tmp/empty" "$ev"
expect "missing data" 2 "DATA '.*/none.tsv': no such file" -- "$strata" predict "$ex" "$tmp/none.tsv"
expect "a glob matching nothing" 2 "DATA '.*/x\*.tsv': no such file" -- "$strata" predict "$ex" "$tmp/x*.tsv"
expect "a directory as data" 2 "is a directory" -- "$strata" predict "$ex" "$tmp/empty"
expect "bad --format" 2 "--format must be criteo or libsvm, got 'csv'" -- "$strata" predict --format csv "$ex" "$ev"
expect "bad --batch" 2 "--batch must be an integer from 1" -- "$strata" predict --batch 0 "$ex" "$ev"
expect "unknown option" 2 "unknown option '--frob'" -- "$strata" eval --frob "$ex" "$ev"
expect "eval has no --out" 2 "--out is an option of predict" -- "$strata" eval --out x "$ex" "$ev"
expect "incompatible data" 2 \
  "incompatible data: the model of export-000000000001-delta takes 13 dense features and 26 slots; libsvm data has 0 dense features and 26 slots" \
  -- "$strata" predict --format libsvm "$ex" "$ev"
{ head -n 5 "$ev"; printf '1\tabc\n'; tail -n 5 "$ev"; } >"$tmp/badrec.tsv"
echo old >"$tmp/keep.txt"
expect "a bad record" 2 "bad record: .*badrec.tsv:6: " -- "$strata" predict "$ex" "$tmp/badrec.tsv" --out "$tmp/keep.txt"
[ "$(cat "$tmp/keep.txt")" = old ] && ok "a failed predict leaves --out FILE alone" \
  || bad "a failed predict leaves --out FILE alone"
ls "$tmp"/keep.txt.tmp.* >/dev/null 2>&1 && bad "no temporary file after a failure" \
  || ok "no temporary file after a failure"
: >"$tmp/empty.tsv"
expect "eval of no examples" 2 "holds no examples" -- "$strata" eval "$ex" "$tmp/empty.tsv"
expect "predict of no examples" 0 -- "$strata" predict "$ex" "$tmp/empty.tsv"

# Damage: a flipped byte in the delta fails (exit 1), naming export and file;
# without the delta, the full export's scores come back.
cp -r "$ex" "$tmp/ex2"
printf '\x55' | dd of="$tmp/ex2/export-000000000001-delta/table-0.rows" bs=1 seek=100 conv=notrunc status=none
expect "a damaged delta" 1 \
  "export export-000000000001-delta: file 'table-0.rows': checksum mismatch" \
  -- "$strata" predict "$tmp/ex2" "$ev"
rm -rf "$tmp/ex2/export-000000000001-delta"
"$strata" predict "$tmp/ex2" "$ev" >"$tmp/pred5.txt" 2>/dev/null
same "the full export alone gives its own scores" "$tmp/pred5.txt" "$fx/expected-full.txt"
rm "$tmp/ex2/export-000000000000-full/dense.safetensors"
expect "a lost file" 1 "file 'dense.safetensors': missing" -- "$strata" eval "$tmp/ex2" "$ev"

# --job (issue 18): a csv model with list fields and per-field pooling,
# scored through the job's eval source (predict reads csv only that way).
src_root=${ST_SOURCE_ROOT:-.}
(cd "$src_root" && "$strata" run tests/lua/good_csv_list.lua --quiet \
   --set "export={dir=\"$tmp/exl\"}" >"$tmp/out" 2>&1) || bad "train the csv list job"
expect "predict --job reads csv list fields" 0 -- \
  bash -c 'cd "$1" && "$2" predict "$3" tests/lua/data/lists.csv --job tests/lua/good_csv_list.lua --out "$4"' \
  _ "$src_root" "$strata" "$tmp/exl" "$tmp/lists.scores"
if [ "$(wc -l <"$tmp/lists.scores" 2>/dev/null)" = 2 ]; then ok "predict --job: 2 scores"; else bad "predict --job: 2 scores"; fi
expect "eval --job" 0 "examples 2" -- \
  bash -c 'cd "$1" && "$2" eval "$3" tests/lua/data/lists.csv --job tests/lua/good_csv_list.lua' \
  _ "$src_root" "$strata" "$tmp/exl"
expect "eval of a csv model as criteo is refused" 2 "incompatible data" -- \
  "$strata" eval "$tmp/exl" "$src_root/tests/lua/data/lists.csv"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
