# c_lib.bash — what the c_*.sh checks of the adversarial pass share (not a
# check itself: run.sh runs only checks/*.sh). Sourced as
#   . tests/adversarial/checks/c_lib.bash "$@"      # "$@" = STRATA TMPDIR
# from the source root. Sets strata and tmp; `pids` are killed (after a
# SIGCONT, for stopped ones) when the check exits; skip and fail end the
# check with 77 or 1 and say why on their last line; need_ucx skips in a
# build without UCX; gen_data writes a small data set and sets `base`, the
# arguments of a small job on it; `slow` makes that job last (a straggler);
# wait_for PID SECS sets ws to its exit status, or "hang".
set -u
strata=$1
tmp=$2
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -CONT "$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null; done
  return 0
}
trap cleanup EXIT
show() { local f; for f in "$@"; do [ -f "$f" ] && { echo "== $f"; tail -n 20 "$f"; }; done; }
skip() { echo "$*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }

# A two-rank job that cannot form (no rank 1) tells a build without UCX by
# its message, at once; with UCX it gives up after STRATA_NET_TIMEOUT.
need_ucx() {
  local p; p=$(free_port)
  STRATA_RANK=0 STRATA_WORLD_SIZE=2 STRATA_COORDINATOR=127.0.0.1:$p STRATA_NET_TIMEOUT=0.3 \
    timeout 30 "$strata" run "${base[@]}" >"$tmp/ucx-probe" 2>&1
  if grep -q "built without UCX" "$tmp/ucx-probe"; then
    skip "strata was built without UCX: no multi-process job to check"
  fi
}

# A TCP port on 127.0.0.1 that was free a moment ago.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

gen_data() { # rows
  "$strata" gen --rows "${1:-4000}" --eval-rows 1000 --vocab 2000 --seed 5 --out "$tmp/d" \
    >"$tmp/gen.log" 2>&1 || { show "$tmp/gen.log"; fail "strata gen"; }
}
base=(tests/e2e/jobs/gen_dnn.lua --quiet --no-pin --set 'data.generate=nil'
  --set "data.train.path=\"$tmp/d/train-*.tsv\"" --set "data.eval.path=\"$tmp/d/eval.tsv\""
  --set stages.read.threads=1 --set seed=11 --set stages.read.batch_size=256
  --set stages.train.minibatch=256 --set stages.train.workers=1)
slow=(--set 'stragglers=st.stragglers{worker=0, slowdown=200}')

# The process ids of a launcher's ranks, in rank order (their environment says which).
ranks_of() { # launcher-pid n
  local p r out=()
  for p in $(pgrep -P "$1"); do
    r=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | sed -n 's/^STRATA_RANK=//p')
    [ -n "$r" ] && out[r]=$p
  done
  [ "${#out[@]}" -eq "$2" ] && echo "${out[@]}"
}

# Until every one of n ranks logged that it trains (at most SECS).
wait_training() { # file n secs
  local t=0 c
  for (( ; ; t++)); do
    c=$(grep -c "trains batches" "$1" 2>/dev/null)
    [ "${c:-0}" -ge "$2" ] && break
    [ $t -gt $(($3 * 5)) ] && return 1
    sleep 0.2
  done
  return 0
}

wait_for() { # pid secs
  local t=0
  while kill -0 "$1" 2>/dev/null; do
    sleep 0.2; t=$((t + 1))
    [ $t -gt $(($2 * 5)) ] && { ws=hang; return; }
  done
  wait "$1"; ws=$?
}
