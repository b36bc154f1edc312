#!/usr/bin/env bash
# Progress lines of commands other than `run`'s training (issue 22): on a
# terminal (a pty from util-linux `script`) `strata gen` and `strata eval`
# draw a "\r<what>: ..." line with a rate; on a file nothing extra reaches
# stderr. The line waits 0.25 s before it is drawn, so the runs here are
# sized to last longer than that on a slow machine (no timing assertion
# beyond it). Usage: progress.sh PATH/TO/strata
# Exits 77 (skip) without `script`.
set -u
strata=$1
root=${ST_SOURCE_ROOT:?}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$root"
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; [ -f "$tmp/out" ] && sed 's/^/     | /' "$tmp/out" | tail -n 20; }
command -v script >/dev/null || { echo "skip: no script (util-linux) to give a terminal"; exit 77; }
# Runs a command on a pty; its stdout and stderr both land in $tmp/tty.
on_tty() { script -qec "$(printf '%q ' "$@")" /dev/null >"$tmp/tty" 2>&1 </dev/null; }

# strata gen: a line on a terminal, nothing on a file.
if on_tty "$strata" gen --rows 1000000 --vocab 20000 --seed 5 --out "$tmp/big" &&
   grep -aq $'\rstrata gen: .*% (.* / 1000000 rows) .* rows/s' "$tmp/tty" &&
   grep -aq $'\rstrata gen: 100.0% (1000000 / 1000000 rows)' "$tmp/tty"; then
  ok "gen draws a progress line on a terminal"
else
  cp "$tmp/tty" "$tmp/out"; bad "gen draws a progress line on a terminal"
fi
if "$strata" gen --rows 300000 --vocab 20000 --seed 5 --out "$tmp/small" >"$tmp/out" 2>"$tmp/err" &&
   [ ! -s "$tmp/err" ] && grep -q "^wrote 300000 train rows" "$tmp/out"; then
  ok "gen writes nothing to stderr when it is not a terminal"
else
  cat "$tmp/err" >>"$tmp/out"; bad "gen writes nothing to stderr when it is not a terminal"
fi

# strata eval of an export over the big file.
"$strata" gen --rows 40000 --vocab 20000 --seed 4 --out "$tmp/d" >/dev/null 2>&1 ||
  { echo "FAIL gen"; exit 1; }
if ! "$strata" run tests/e2e/jobs/gen_small.lua --quiet --no-pin --set 'data.generate=nil' \
     --set "data.train.path=\"$tmp/d/train-*.tsv\"" --set 'data.eval=nil' \
     --set "export={dir=\"$tmp/x\"}" >"$tmp/out" 2>&1; then
  bad "a run writes an export"
fi
if on_tty "$strata" eval "$tmp/x" "$tmp/big/train-00000.tsv" &&
   grep -aq $'\rstrata eval: [0-9]* examples .* examples/s' "$tmp/tty" &&
   grep -aq $'\rstrata eval: 1000000 examples' "$tmp/tty" && grep -aq "auc" "$tmp/tty"; then
  ok "eval draws a progress line on a terminal"
else
  cp "$tmp/tty" "$tmp/out"; bad "eval draws a progress line on a terminal"
fi
if "$strata" eval "$tmp/x" "$tmp/big/train-00000.tsv" >"$tmp/out" 2>"$tmp/err" &&
   ! grep -aq $'\r' "$tmp/err" && ! grep -q "examples/s" "$tmp/err"; then
  ok "eval draws nothing when stderr is not a terminal"
else
  cat "$tmp/err" >>"$tmp/out"; bad "eval draws nothing when stderr is not a terminal"
fi

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
