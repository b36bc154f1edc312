# data.generate with its data paths pointed elsewhere by --set: the job reads
# the data it names and generates nothing (it used to write the whole
# default data set into generate.dir first). With the paths still under
# generate.dir it generates as before.
# Usage: bash b2_generate_override.sh STRATA TMPDIR
set -u
strata=$1 tmp=$2
fail=0
"$strata" gen --rows 3000 --eval-rows 500 --vocab 100 --seed 9 --out "$tmp/mine" >/dev/null || exit 1
job=tests/e2e/jobs/gen_small.lua   # generates 300k + 50k rows into generate.dir
"$strata" run "$job" --quiet --set "data.generate.dir=\"$tmp/gen\"" \
  --set "data.train.path=\"$tmp/mine/train-*.tsv\"" --set "data.eval.path=\"$tmp/mine/eval.tsv\"" \
  >"$tmp/out" 2>&1
rc=$?
if [ "$rc" -ne 0 ] || [ -e "$tmp/gen" ] || ! grep -q "trained 3000 examples" "$tmp/out" ||
   ! grep -q "data.generate: no data path is under $tmp/gen; nothing is generated" "$tmp/out"; then
  echo "FAIL paths set elsewhere: exit $rc, generate.dir $( [ -e "$tmp/gen" ] && echo exists || echo absent)"
  sed 's/^/  | /' "$tmp/out"; fail=1
fi
# A sibling folder whose name starts like generate.dir is not under it.
"$strata" run "$job" --quiet --set "data.generate.dir=\"$tmp/mi\"" \
  --set "data.train.path=\"$tmp/mine/train-*.tsv\"" --set "data.eval.path=\"$tmp/mine/eval.tsv\"" \
  >"$tmp/out" 2>&1
if [ $? -ne 0 ] || [ -e "$tmp/mi" ]; then
  echo "FAIL generate.dir $tmp/mi is taken for a prefix of $tmp/mine"; sed 's/^/  | /' "$tmp/out"; fail=1
fi
# Paths under generate.dir: generated, as always.
"$strata" run "$job" --quiet --set "data.generate.dir=\"$tmp/gen2\"" --set data.generate.rows=2000 \
  --set data.generate.eval_rows=200 --set "data.train.path=\"$tmp/gen2/train-*.tsv\"" \
  --set "data.eval.path=\"$tmp/gen2/eval.tsv\"" >"$tmp/out" 2>&1
rc=$?
if [ "$rc" -ne 0 ] || [ ! -f "$tmp/gen2/eval.tsv" ] || ! grep -q "trained 2000 examples" "$tmp/out"; then
  echo "FAIL paths under generate.dir: exit $rc"; sed 's/^/  | /' "$tmp/out"; fail=1
fi
exit $fail
