#!/usr/bin/env bash
# SIGINT and SIGTERM stop `strata run` cleanly (issue 15): sent mid-training
# and mid-checkpoint (a job that checkpoints a sizeable model every few
# batches), the run stops within seconds, says so, exits 130 / 143, and
# leaves only complete checkpoints (no ckpt-*.tmp); a second signal exits at
# once and still leaves no directory under a final name that fails its
# checksums; `--resume` then runs the job to its end.
# Usage: bash b1_signals.sh STRATA TMPDIR (from the source root).
set -u
strata=$1 tmp=$2
# Job control: a non-interactive shell starts background jobs with SIGINT
# ignored (and strata keeps an ignored signal ignored); with -m they keep it.
set -m
fail=0
bad() { fail=1; echo "FAIL $1"; sed 's/^/     | /' "$tmp/out" | tail -n 12; }
ok() { echo "ok   $1"; }

"$strata" gen --rows 60000 --eval-rows 2000 --files 2 --vocab 100000 --seed 5 --out "$tmp/d" \
  >/dev/null 2>&1 || { echo "gen failed"; exit 1; }
ck=$tmp/ck
args=(tests/e2e/jobs/gen_dnn.lua --quiet --no-pin
  --set 'data.generate=nil' --set "data.train.path=\"$tmp/d/train-*.tsv\""
  --set "data.eval.path=\"$tmp/d/eval.tsv\"" --set stages.read.batch_size=512
  --set 'model=st.model.dnn{emb_dim=32,hidden={64,32},optimizer=st.optim.adam{lr=0.003}}'
  --set "checkpoint={dir=\"$ck\",every=6,keep=2}")

# poll SECS CMD...: runs CMD every 20 ms until it succeeds (0) or SECS pass (1).
poll() {
  local end=$((SECONDS + $1)); shift
  until "$@"; do [ $SECONDS -ge $end ] && return 1; sleep 0.02; done
}
running() { kill -0 "$pid" 2>/dev/null; }
writing() { compgen -G "$ck/ckpt-*.tmp" >/dev/null; }
# Waits at most SECS for the run to end; ws = its exit status, or "hang".
wait_run() {
  if poll "$1" eval '! running'; then wait "$pid"; ws=$?; else ws=hang; kill -9 "$pid"; wait "$pid"; fi
}
# Every directory under a final name verifies; prints the ones that do not.
damaged() {
  local d
  for d in "$ck"/ckpt-*; do
    case $d in *.tmp) continue ;; esac
    "$strata" inspect "$d" >/dev/null 2>&1 || echo "$(basename "$d")"
  done
}
tmps() { ls "$ck" 2>/dev/null | grep -c '\.tmp$'; }

# 1. SIGINT while a checkpoint is being written.
"$strata" run "${args[@]}" >"$tmp/out" 2>&1 &
pid=$!
poll 60 writing || { bad "no checkpoint was ever being written"; exit 1; }
step=$(basename "$(compgen -G "$ck/ckpt-*.tmp" | head -n 1)" .tmp)
kill -INT "$pid"
wait_run 15
if [ "$ws" = 130 ] && [ "$(tmps)" = 0 ] && [ -z "$(damaged)" ] && [ -d "$ck/$step" ] &&
   grep -q "interrupted by SIGINT: stopping" "$tmp/out" && grep -q "stopped by SIGINT" "$tmp/out"; then
  ok "SIGINT mid-checkpoint: stopped, $step finished, no .tmp left"
else
  bad "SIGINT mid-checkpoint $step (exit $ws, $(tmps) .tmp, damaged: $(damaged); $(ls "$ck" | tr '\n' ' '))"
fi

# 2. SIGTERM mid-training, on a resumed run, once it wrote a checkpoint of its own.
before=$(ls "$ck" | grep -v '\.tmp$' | tail -n 1)
"$strata" run "${args[@]}" --resume >"$tmp/out" 2>&1 &
pid=$!
newer() { [ "$(ls "$ck" | grep -v '\.tmp$' | tail -n 1)" != "$before" ]; }
poll 60 newer || { bad "the resumed run wrote no checkpoint"; exit 1; }
kill -TERM "$pid"
wait_run 15
if [ "$ws" = 143 ] && [ "$(tmps)" = 0 ] && [ -z "$(damaged)" ] &&
   grep -q "resuming from" "$tmp/out" && grep -q "interrupted by SIGTERM: stopping" "$tmp/out" &&
   grep -q "stopped by SIGTERM" "$tmp/out"; then
  ok "SIGTERM mid-training: stopped, only complete checkpoints"
else
  bad "SIGTERM mid-training (exit $ws, $(tmps) .tmp, damaged: $(damaged))"
fi

# 3. Two signals mid-checkpoint: the second exits at once; a .tmp may stay,
# but nothing under a final name is incomplete.
"$strata" run "${args[@]}" --resume >"$tmp/out" 2>&1 &
pid=$!
poll 60 writing || { bad "no checkpoint was being written (second run)"; exit 1; }
kill -INT "$pid"
kill -TERM "$pid"
wait_run 15
# Both signals are pending at once, so which one the run takes as the first
# is the kernel's choice: the exit status is that of the second (130 or 143).
if { [ "$ws" = 130 ] || [ "$ws" = 143 ]; } && [ -z "$(damaged)" ] &&
   grep -q "second signal: exiting now" "$tmp/out"; then
  ok "a second signal exits at once; every checkpoint under a final name verifies"
else
  bad "second signal (exit $ws, damaged: $(damaged))"
fi

# 4. --resume runs to the end and clears what the forced exit left.
"$strata" run "${args[@]}" --resume >"$tmp/out" 2>&1 &
pid=$!
wait_run 90
if [ "$ws" = 0 ] && grep -q "resuming from" "$tmp/out" && grep -q "eval *auc" "$tmp/out" &&
   [ "$(tmps)" = 0 ] && [ -z "$(damaged)" ]; then
  ok "--resume after the signals runs to the end"
else
  bad "resume to the end (exit $ws, $(tmps) .tmp, damaged: $(damaged))"
fi
exit $fail
