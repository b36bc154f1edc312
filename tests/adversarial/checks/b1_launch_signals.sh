#!/usr/bin/env bash
# `strata launch` on SIGTERM / SIGINT (issue 15): it forwards the signal to
# its ranks, which stop cleanly (exit 143 / 130, not killed), and exits with
# rank 0's status; a rank that cannot stop (here: stopped with SIGSTOP) is
# killed after --stop-timeout seconds, so the launcher never hangs on it.
# Usage: bash b1_launch_signals.sh STRATA TMPDIR (from the source root).
set -u
strata=$1 tmp=$2
set -m   # background jobs keep SIGINT (see b1_signals.sh)
fail=0
bad() { fail=1; echo "FAIL $1"; sed 's/^/     | /' "$tmp/out" | tail -n 14; }
ok() { echo "ok   $1"; }

"$strata" gen --rows 40000 --eval-rows 1000 --vocab 5000 --seed 5 --out "$tmp/d" >/dev/null 2>&1 ||
  { echo "gen failed"; exit 1; }
args=(tests/e2e/jobs/gen_dnn.lua --quiet --no-pin
  --set 'data.generate=nil' --set "data.train.path=\"$tmp/d/train-*.tsv\""
  --set "data.eval.path=\"$tmp/d/eval.tsv\"" --set stages.read.threads=1 --set seed=11
  --set 'sync=st.sync.allreduce{}' --set stages.read.batch_size=256
  --set stages.train.minibatch=256 --set 'stragglers=st.stragglers{worker=0,slowdown=3.0}')

poll() {
  local end=$((SECONDS + $1)); shift
  until "$@"; do [ $SECONDS -ge $end ] && return 1; sleep 0.05; done
}
running() { kill -0 "$pid" 2>/dev/null; }
wait_run() {
  if poll "$1" eval '! running'; then wait "$pid"; ws=$?; else ws=hang; kill -9 "$pid"; wait "$pid"; fi
}
both_training() { [ "$(grep -c 'trains batches' "$tmp/out")" = 2 ]; }
start() {
  : >"$tmp/out"   # before the job starts: the poll must not read the last run's output
  "$strata" launch -n 2 "$@" "${args[@]}" >"$tmp/out" 2>&1 &
  pid=$!
  if ! poll 60 both_training; then
    grep -q "built without UCX" "$tmp/out" && { kill -9 "$pid" 2>/dev/null; echo "strata was built without UCX"; exit 77; }
    bad "the ranks did not start"; kill -9 "$pid" 2>/dev/null; exit 1
  fi
  ranks=$(ps -o pid= --ppid "$pid")
}
gone() { local r; for r in $ranks; do kill -0 "$r" 2>/dev/null && return 1; done; return 0; }

for s in TERM INT; do
  want=$([ $s = TERM ] && echo 143 || echo 130)
  start
  kill -$s "$pid"
  wait_run 30
  if [ "$ws" = "$want" ] && gone && [ "$(grep -c "stopped on SIG$s (exit status $want)" "$tmp/out")" = 2 ] &&
     ! grep -q "killed by signal" "$tmp/out"; then
    ok "SIG$s to the launcher: both ranks stop cleanly, exit $want"
  else
    bad "SIG$s to the launcher (exit $ws)"
  fi
done

# A rank that cannot act on the signal: killed once --stop-timeout runs out.
start --stop-timeout 2
stuck=$(echo $ranks | cut -d' ' -f2)
kill -STOP "$stuck"
kill -TERM "$pid"
wait_run 30
if [ "$ws" != hang ] && gone && grep -q "did not stop within 2 s: killing it" "$tmp/out" &&
   grep -q "killed by signal 9" "$tmp/out"; then
  ok "a rank that does not stop is killed after --stop-timeout (launcher exit $ws)"
else
  bad "stuck rank (exit $ws)"
  for r in $ranks; do kill -9 "$r" 2>/dev/null; done
fi
exit $fail
