#!/usr/bin/env bash
# A failed final checkpoint no longer throws away the export and the eval
# (issue 15): with a file where the final checkpoint's directory goes, the
# job still writes its export and scores its eval data, reports the
# checkpoint that was not written, and exits 1. With phases, the failure of
# one phase's checkpoint leaves its export and the next phases running.
# Usage: bash b1_final_steps.sh STRATA TMPDIR (from the source root).
set -u
strata=$1 tmp=$2
fail=0
bad() { fail=1; echo "FAIL $1"; sed 's/^/     | /' "$tmp/out" | tail -n 14; }
ok() { echo "ok   $1"; }

"$strata" gen --rows 12000 --eval-rows 2000 --files 2 --vocab 20000 --seed 5 --out "$tmp/d" \
  >/dev/null 2>&1 || { echo "gen failed"; exit 1; }
data=(--set 'data.generate=nil' --set "data.train.path=\"$tmp/d/train-*.tsv\""
  --set "data.eval.path=\"$tmp/d/eval.tsv\"" --set stages.read.batch_size=1024 --quiet --no-pin)
dirs() { echo --set "checkpoint={dir=\"$1/ck\"}" --set "export={dir=\"$1/ex\"}"; }
exports() { ls "$1/ex" 2>/dev/null | grep -c '^export-[0-9]*-\(full\|delta\)$'; }
verified() { local d; for d in "$1"/ex/export-*; do "$strata" inspect "$d" >/dev/null 2>&1 || return 1; done; }

# One pass: learn the final checkpoint's name from a run that writes it...
# shellcheck disable=SC2046
"$strata" run tests/e2e/jobs/gen_dnn.lua "${data[@]}" $(dirs "$tmp/a") >"$tmp/out" 2>&1 ||
  { bad "the reference run failed"; exit 1; }
final=$(ls "$tmp/a/ck" | grep '^ckpt-[0-9]*$' | tail -n 1)
# ... then put a file in its place.
mkdir -p "$tmp/b/ck" && echo "not a directory" >"$tmp/b/ck/$final"
# shellcheck disable=SC2046
"$strata" run tests/e2e/jobs/gen_dnn.lua "${data[@]}" $(dirs "$tmp/b") >"$tmp/out" 2>&1
rc=$?
if [ $rc = 1 ] && grep -q "final checkpoint not written" "$tmp/out" &&
   grep -q "export $tmp/b/ex/export-000000000000 written" "$tmp/out" &&
   [ "$(exports "$tmp/b")" = 1 ] && verified "$tmp/b" &&
   grep -q "eval  *auc" "$tmp/out" &&
   grep -q "the job ran to its end, but 1 checkpoint was not written" "$tmp/out"; then
  ok "a failed final checkpoint: the export and the eval still happen, exit 1"
else
  bad "failed final checkpoint (exit $rc, $(exports "$tmp/b") exports)"
fi

# Phases: the first phase's checkpoint fails; its export, the second phase,
# its checkpoint and export still happen.
ph=(tests/e2e/jobs/gen_phases.lua --set 'stragglers=nil')
# shellcheck disable=SC2046
"$strata" run "${ph[@]}" "${data[@]}" $(dirs "$tmp/pa") >"$tmp/out" 2>&1 ||
  { bad "the reference phases run failed"; exit 1; }
first=$(ls "$tmp/pa/ck" | grep '^ckpt-[0-9]*$' | head -n 1)
last=$(ls "$tmp/pa/ck" | grep '^ckpt-[0-9]*$' | tail -n 1)
[ "$first" != "$last" ] || { bad "the phases wrote one checkpoint ($first)"; exit 1; }
mkdir -p "$tmp/pb/ck" && echo "not a directory" >"$tmp/pb/ck/$first"
# shellcheck disable=SC2046
"$strata" run "${ph[@]}" "${data[@]}" $(dirs "$tmp/pb") >"$tmp/out" 2>&1
rc=$?
if [ $rc = 1 ] && grep -q "final checkpoint not written" "$tmp/out" &&
   [ -d "$tmp/pb/ck/$last" ] && [ "$(exports "$tmp/pb")" = 2 ] && verified "$tmp/pb" &&
   grep -q "phase 2 'rest'.*eval auc" "$tmp/out" &&
   grep -q "the job ran to its end, but 1 checkpoint was not written" "$tmp/out"; then
  ok "phases: a failed checkpoint after phase 1; both exports, phase 2 and its checkpoint still happen, exit 1"
else
  bad "phases with a failed checkpoint (exit $rc, $(exports "$tmp/pb") exports, $(ls "$tmp/pb/ck" | tr '\n' ' '))"
fi
exit $fail
