# dist_lib.sh — what the multi-process e2e scripts (dist.sh, dist_shadow.sh)
# share; sourced with "$@" = PATH/TO/strata HAVE_UCX(0|1). Sets strata,
# root, tmp (removed at exit, with every pid in `pids` killed), pass/fail
# with ok/bad, generates the data into $tmp/d and sets `base`, the job
# arguments every run starts from; port prints a free TCP port; kill_one
# (and its helpers) starts three ranks by hand and kills one mid-training.
set -u
strata=$1
[ "${2:-1}" = 1 ] || { echo "strata was built without UCX: skipped"; exit 77; }
root=${ST_SOURCE_ROOT:?}
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
cd "$root"
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; for f in "$tmp"/out*; do [ -f "$f" ] && { echo "     == $f"; sed 's/^/     | /' "$f" | tail -n 12; }; done; }

"$strata" gen --rows 24000 --eval-rows 3000 --vocab 5000 --seed 5 --out "$tmp/d" >/dev/null 2>&1 ||
  { echo "FAIL gen"; exit 1; }
base=(tests/e2e/jobs/gen_dnn.lua --quiet --no-pin
  --set 'data.generate=nil' --set "data.train.path=\"$tmp/d/train-*.tsv\""
  --set "data.eval.path=\"$tmp/d/eval.tsv\"" --set stages.read.threads=1 --set seed=11)
# same4 X Y: X (printed to 6 digits) is the value Y was printed from to 4
# digits. Comparing printf '%.4f' of X with Y would round twice (0.699950
# gives 0.7000 where the job printed 0.6999 of 0.69994...).
same4() { awk -v x="$1" -v y="$2" 'BEGIN { d = x - y; exit !(x != "" && y != "" && d <= 0.0000506 && d >= -0.0000506) }'; }
# port: a free TCP port for a coordinator (free_port.py: drawn below the
# ephemeral range, so no outgoing connection can take it before rank 0
# listens).
port() { /usr/bin/python3 "$root/tests/e2e/free_port.py"; }

# Ranks started by hand (as a launcher would), so the test knows their pids.
start_ranks() { # n, token, extra args...
  local n=$1 tok=$2; shift 2
  pids=()
  local p; p=$(port)
  for ((r = 0; r < n; r++)); do
    STRATA_RANK=$r STRATA_WORLD_SIZE=$n STRATA_COORDINATOR=127.0.0.1:$p STRATA_TOKEN=$tok \
      "$strata" run "${base[@]}" "$@" >"$tmp/out$r" 2>&1 &
    pids+=($!)
  done
  coord=$p
}
# Waits for pid (at most $2 seconds); sets ws to its exit status or "hang"
# (a function, not $(...): a subshell cannot wait for our children).
wait_for() {
  local t=0
  while kill -0 "$1" 2>/dev/null; do
    sleep 0.2; t=$((t + 1))
    [ $t -gt $(($2 * 5)) ] && { ws=hang; return; }
  done
  wait "$1"; ws=$?
}
# Waits (at most 60 s) until the first $1 ranks joined and started training,
# then one more second, so that a kill lands mid-training (also under ASan).
# A rank that never starts is a failure (recorded with bad, naming it, and
# returned as 1): the check that follows would otherwise kill a rank that
# was not training and could pass for the wrong reason.
wait_started() {
  local t=0 r
  for ((r = 0; r < $1; r++)); do
    until grep -q "trains batches" "$tmp/out$r" 2>/dev/null; do
      sleep 0.2; t=$((t + 1))
      if [ $t -gt 300 ]; then
        bad "rank $r of $1 did not start training within 60 s (no 'trains batches' in $tmp/out$r)"
        return 1
      fi
    done
  done
  sleep 1
}
# Slow the job down enough to be killed mid-training: a straggler.
slow=(--set 'stragglers=st.stragglers{worker=0, slowdown=200}' --set stages.read.batch_size=256
  --set stages.train.minibatch=256 --set stages.train.workers=1)

# Three ranks by hand, one killed mid-training: kill_one VICTIM SECS TOKEN
# run-args...; sa and sb are the two survivors' exit statuses (lower rank
# first), or "hang" after SECS seconds.
kill_one() {
  local victim=$1 secs=$2 tok=$3 r; shift 3
  rm -f "$tmp"/out*
  start_ranks 3 "$tok" "$@"
  wait_started 3
  kill -9 "${pids[$victim]}"
  local st=()
  for r in 0 1 2; do
    [ $r -eq "$victim" ] && continue
    wait_for "${pids[$r]}" "$secs"; st+=("$ws")
  done
  sa=${st[0]} sb=${st[1]}
}
