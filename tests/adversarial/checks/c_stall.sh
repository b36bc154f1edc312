#!/usr/bin/env bash
# A stalled rank (issue 15): `kill -STOP` one rank of `strata launch -n 2`
# mid-training, with STRATA_NET_TIMEOUT=5. The other rank must notice the
# missing heartbeats and stop with a message naming the stalled rank, and
# the launcher must end (killing the stopped rank), non-zero, naming it —
# all within a bound, for a stopped rank 1 and for a stopped rank 0 (the
# coordinator). Before the heartbeats everything waited forever.
. "$(dirname "$0")/c_lib.bash" "$@"
gen_data 40000
need_ucx

stall() { # victim
  local v=$1 out="$tmp/out$1"
  STRATA_NET_TIMEOUT=5 "$strata" launch -n 2 "${base[@]}" "${slow[@]}" \
    --set 'sync=st.sync.allreduce{}' >"$out" 2>&1 &
  local launcher=$!
  pids+=("$launcher")
  wait_training "$out" 2 30 || { show "$out"; fail "the job did not start training within 30 s"; }
  local r
  r=($(ranks_of "$launcher" 2)) || true
  [ "${#r[@]}" -eq 2 ] || { show "$out"; fail "cannot find the two ranks of launcher $launcher"; }
  pids+=("${r[@]}")
  kill -STOP "${r[$v]}"
  local t0=$SECONDS
  wait_for "$launcher" 40
  local secs=$((SECONDS - t0))
  [ "$ws" = hang ] && { show "$out"; fail "stopped rank $v: the launcher still waits after 40 s"; }
  [ "$ws" -ne 0 ] || { show "$out"; fail "stopped rank $v: the launcher exited 0"; }
  for p in "${r[@]}"; do
    kill -0 "$p" 2>/dev/null && { show "$out"; fail "stopped rank $v: process $p outlived the launcher"; }
  done
  local o=$((1 - v))
  grep -q "net: rank $v did not answer within 5 s (stalled?)" "$out" ||
    { show "$out"; fail "stopped rank $v: rank $o did not name it as stalled"; }
  grep -q "strata launch: rank $v stayed stopped (stalled?)" "$out" ||
    { show "$out"; fail "stopped rank $v: the launcher did not name it"; }
  echo "ok   stopped rank $v: launcher exit $ws after ${secs} s, rank $v named"
}

stall 1
stall 0
