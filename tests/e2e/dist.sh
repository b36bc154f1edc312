#!/usr/bin/env bash
# Multi-process jobs on one machine (docs/distributed.md), end to end:
#  - allreduce on 2 and 4 processes (and kstep on 2) of one worker each trains exactly the
#    model (floats, optimizer state, dense parameters: STRATA_DIGEST) and
#    the eval AUC of one process with as many workers on the same global
#    batch and seed;
#  - hybrid, async, shadow, gba, bsp, hop_bs and hop_bw run across processes and
#    learn; hop_bw drops a straggling rank's gradients; the
#    policies that do not run across processes yet are refused with a message;
#  - kills: under allreduce and shadow the job stops within a bounded time
#    naming the dead rank (and allreduce's runs again right after); under async and gba a killed worker-only rank leaves
#    the others to finish (and the loss is reported); a killed owner stops the job;
#  - a process with the wrong job token is refused while the job forms.
# Usage: dist.sh PATH/TO/strata HAVE_UCX(0|1)
. "$(dirname "$0")/dist_lib.sh"
digest() { grep -o 'digest [0-9a-f]*' "$1"; }
evalauc() { grep -o 'eval *auc [0-9.]*' "$1"; }

# Identity: P processes x 1 worker x batch B == 1 process x P workers x batch P*B.
for P in 2 4; do
  rm -f "$tmp"/out*
  B=256
  STRATA_DIGEST=1 "$strata" run "${base[@]}" --set 'sync=st.sync.allreduce{}' \
    --set stages.train.workers=$P --set stages.read.batch_size=$((P * B)) \
    --set stages.train.minibatch=$B >"$tmp/out1" 2>&1 || { bad "single process, $P workers"; continue; }
  STRATA_DIGEST=1 timeout 300 "$strata" launch -n $P "${base[@]}" --set 'sync=st.sync.allreduce{}' \
    --set stages.train.workers=1 --set stages.read.batch_size=$B \
    --set stages.train.minibatch=$B >"$tmp/outP" 2>&1 || { bad "launch -n $P allreduce"; continue; }
  d1=$(digest "$tmp/out1") dP=$(digest "$tmp/outP")
  if [ -n "$d1" ] && [ "$d1" = "$dP" ] && [ "$(evalauc "$tmp/out1")" = "$(evalauc "$tmp/outP")" ]; then
    ok "allreduce on $P processes = 1 process of $P workers ($d1, $(evalauc "$tmp/outP"))"
  else
    bad "allreduce on $P processes: '$dP' vs '$d1', $(evalauc "$tmp/outP") vs $(evalauc "$tmp/out1")"
  fi
  # Round trips per step (the scaling model's latency term): each step is
  # one pull, the step's allgather of example counts and the allreduce's 2
  # rounds; the job's setup and finish add a little over its steps.
  rt=$(grep -o '[0-9.]* round trips per step' "$tmp/outP" | cut -d' ' -f1)
  if awk -v x="$rt" 'BEGIN { exit !(x != "" && x >= 4 && x < 5) }'; then
    ok "allreduce on $P processes: $rt round trips per step"
  else
    bad "allreduce on $P processes: '$rt' round trips per step, expected 4 (+ setup and finish)"
  fi
done

# List fields (issue 18): multi-hot rows read as 26 '^' lists, a dnn whose
# fields pool by their own sum over model.pooling = mean, across processes:
# the same identity (2 processes x 1 worker = 1 process x 2 workers).
rm -f "$tmp"/out*
mh=(tests/e2e/jobs/gen_multihot.lua --quiet --no-pin --set "data.generate.dir=\"$tmp/mh\""
    --set "data.train.path=\"$tmp/mh/train-*.tsv\"" --set "data.eval.path=\"$tmp/mh/eval.tsv\""
    --set data.generate.rows=20000 --set data.generate.eval_rows=4000
    --set 'model=st.model.dnn{emb_dim=4, hidden={16}, pooling="mean"}' --set 'sync=st.sync.allreduce{}')
if STRATA_DIGEST=1 "$strata" run "${mh[@]}" --set stages.train.workers=2 --set stages.read.batch_size=512 \
     --set stages.train.minibatch=256 >"$tmp/out1" 2>&1 &&
   STRATA_DIGEST=1 timeout 300 "$strata" launch -n 2 "${mh[@]}" --set stages.train.workers=1 \
     --set stages.read.batch_size=256 --set stages.train.minibatch=256 >"$tmp/outP" 2>&1; then
  d1=$(digest "$tmp/out1") dP=$(digest "$tmp/outP")
  if [ -n "$d1" ] && [ "$d1" = "$dP" ] && [ "$(evalauc "$tmp/out1")" = "$(evalauc "$tmp/outP")" ]; then
    ok "list fields: allreduce on 2 processes = 1 process of 2 workers ($d1, $(evalauc "$tmp/outP"))"
  else
    bad "list fields on 2 processes: '$dP' vs '$d1', $(evalauc "$tmp/outP") vs $(evalauc "$tmp/out1")"
  fi
else
  bad "list fields: run or launch -n 2 failed"
fi

# kstep (k-step Adam merging) across processes: the same identity; 47 steps
# with k = 3 end off a merge, so the final mean is the finish's allreduce.
rm -f "$tmp"/out*
STRATA_DIGEST=1 "$strata" run "${base[@]}" --set 'sync=st.sync.kstep{k=3}' \
  --set stages.train.workers=2 --set stages.read.batch_size=512 \
  --set stages.train.minibatch=256 >"$tmp/out1" 2>&1
STRATA_DIGEST=1 timeout 300 "$strata" launch -n 2 "${base[@]}" --set 'sync=st.sync.kstep{k=3}' \
  --set stages.train.workers=1 --set stages.read.batch_size=256 \
  --set stages.train.minibatch=256 >"$tmp/outP" 2>&1
d1=$(digest "$tmp/out1") dP=$(digest "$tmp/outP")
if [ -n "$d1" ] && [ "$d1" = "$dP" ] && [ "$(evalauc "$tmp/out1")" = "$(evalauc "$tmp/outP")" ]; then
  ok "kstep{k=3} on 2 processes = 1 process of 2 workers ($d1)"
else
  bad "kstep on 2 processes: '$dP' vs '$d1'"
fi

# The same under mpirun (OpenMPI's variables give rank and size).
if command -v mpirun >/dev/null; then
  rm -f "$tmp"/out*
  B=256
  ar1=("${base[@]}" --set 'sync=st.sync.allreduce{}' --set stages.train.workers=1
    --set stages.read.batch_size=$B --set stages.train.minibatch=$B)
  # mpi2 OUT [NAME=VALUE ...]: the allreduce job (ar1) as mpirun's 2 ranks,
  # NAME=VALUE in their environment; its output in OUT, its status returned.
  mpi2() {
    local out=$1 kv xs=()
    shift
    for kv in "$@"; do xs+=(-x "$kv"); done
    timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 \
      -x STRATA_COORDINATOR=127.0.0.1:$(port) -x STRATA_TOKEN=mpi -x ST_SOURCE_ROOT "${xs[@]}" \
      "$strata" run "${ar1[@]}" >"$out" 2>&1
  }
  STRATA_DIGEST=1 "$strata" run "${base[@]}" --set 'sync=st.sync.allreduce{}' \
    --set stages.train.workers=2 --set stages.read.batch_size=$((2 * B)) \
    --set stages.train.minibatch=$B >"$tmp/out1" 2>&1
  mpi2 "$tmp/outP" STRATA_DIGEST=1
  d1=$(digest "$tmp/out1") dP=$(digest "$tmp/outP")
  if [ -n "$d1" ] && [ "$d1" = "$dP" ]; then
    ok "mpirun -np 2: the same model as 1 process of 2 workers"
  else
    bad "mpirun -np 2: '$dP' vs '$d1'"
  fi
  # The dense allreduce through MPI (STRATA_NET_COLL=mpi, coll_mpi.c): at
  # P = 2 the library's sum is x0 + x1 as strata's, so the same model again.
  # A build without MPI (the sanitized ones) refuses with a message.
  rm -f "$tmp/outM"
  rcM=0
  mpi2 "$tmp/outM" STRATA_NET_COLL=mpi STRATA_LOG=info STRATA_DIGEST=1 || rcM=$?
  dM=$(digest "$tmp/outM")
  if grep -q 'built without MPI' "$tmp/outM"; then
    if [ "$rcM" -ne 0 ]; then
      ok "STRATA_NET_COLL=mpi in a build without MPI: refused with a message"
    else
      bad "STRATA_NET_COLL=mpi in a build without MPI: said so, but ran"
    fi
  elif [ -n "$d1" ] && [ "$d1" = "$dM" ] && grep -q 'dense allreduce through MPI' "$tmp/outM"; then
    ok "mpirun -np 2, allreduce through MPI: the same model ($dM)"
  else
    bad "mpirun -np 2, allreduce through MPI: '$dM' vs '$d1'"
  fi
  # Outside mpirun MPI cannot agree with strata's launcher: refused, named.
  if ! grep -q 'built without MPI' "$tmp/outM"; then
    if STRATA_NET_COLL=mpi timeout 120 "$strata" launch -n 2 "${ar1[@]}" >"$tmp/outL" 2>&1; then
      bad "STRATA_NET_COLL=mpi under strata launch ran"
    elif grep -q 'MPI says rank .* run the job under mpirun' "$tmp/outL"; then
      ok "STRATA_NET_COLL=mpi outside mpirun: refused with a message"
    else
      bad "STRATA_NET_COLL=mpi outside mpirun: no message"
    fi
    # A rank whose result differs by one bit is caught by the identity check.
    if mpi2 "$tmp/outS" ST__NET_MPI_SKEW=1 STRATA_NET_COLL=mpi; then
      bad "a skewed MPI allreduce was not caught"
    elif grep -q 'gave different bits on different ranks' "$tmp/outS"; then
      ok "MPI allreduce: a result that differs between ranks stops the job"
    else
      bad "skewed MPI allreduce: no message"
    fi
  fi
else
  echo "skip mpirun (not installed)"
fi

# Each policy that runs across processes learns; the others are refused.
# gba and bsp aggregate 4 worker gradients (2 ranks x 2 workers) per step.
for pol in 'hybrid{staleness=2}' 'async{}' 'shadow{algo="ma"}' 'gba{global_batch=512}' \
    'bsp{b=4}' 'hop_bs{b=1}' 'hop_bw{b=1}'; do
  rm -f "$tmp"/out*
  if timeout 300 "$strata" launch -n 2 "${base[@]}" --set "sync=st.sync.$pol" \
       --set stages.read.batch_size=256 --set stages.train.minibatch=128 \
       --set stages.train.workers=2 >"$tmp/out" 2>&1 &&
     auc=$(evalauc "$tmp/out" | grep -o '[0-9.]*$') &&
     /usr/bin/python3 -c "import sys; sys.exit(0 if float('$auc') > 0.6 else 1)"; then
    ok "$pol on 2 processes (eval auc $auc)"
  else
    bad "$pol on 2 processes"
  fi
done

# hop_bw{b=1} on 3 ranks with rank 2 a straggler: each step closes with
# the first 2 ranks, so rank 2's gradients are the ones dropped.
rm -f "$tmp"/out* "$tmp"/m.json*
p=$(port)
pids=()
for r in 0 1 2; do
  extra=()
  [ $r = 2 ] && extra=(--set 'stragglers=st.stragglers{worker=0, slowdown=8}')
  STRATA_RANK=$r STRATA_WORLD_SIZE=3 STRATA_COORDINATOR=127.0.0.1:$p STRATA_TOKEN=bw \
    timeout 300 "$strata" run "${base[@]}" --metrics "$tmp/m.json" \
    --set 'sync=st.sync.hop_bw{b=1}' --set stages.train.workers=1 \
    --set stages.read.batch_size=256 --set stages.train.minibatch=256 "${extra[@]}" \
    >"$tmp/out$r" 2>&1 &
  pids+=($!)
done
st=0
for p in "${pids[@]}"; do wait "$p" || st=1; done
pids=()
dropped() { tail -n 1 "$1" | grep -o '"sync_dropped":[0-9]*' | cut -d: -f2; }
d0=$(dropped "$tmp/m.json") d1=$(dropped "$tmp/m.json.rank1") d2=$(dropped "$tmp/m.json.rank2")
if [ $st = 0 ] && [ -n "$d2" ] && [ "$d2" -ge 4 ] && [ "$d2" -gt $((${d0:-99} + ${d1:-99})) ]; then
  ok "hop_bw{b=1}: the straggling rank's gradients are the ones dropped ($d0, $d1, $d2)"
else
  bad "hop_bw straggler: status $st, dropped $d0 $d1 $d2"
fi

kill_one 2 30 t1 --set 'sync=st.sync.allreduce{}' "${slow[@]}"; s0=$sa s1=$sb
if [ "$s0" != hang ] && [ "$s0" != 0 ] && [ "$s1" != hang ] && [ "$s1" != 0 ] &&
   grep -q "rank 2" "$tmp/out0"; then
  ok "allreduce: a killed rank stops the others within 30 s, naming rank 2"
else
  bad "allreduce kill: rank 0 $s0, rank 1 $s1"
fi
# ... and the job can be started again at once (nothing left behind: ports,
# files, shared state): the same three ranks run it to the end.
rm -f "$tmp"/out*
if timeout 300 "$strata" launch -n 3 "${base[@]}" --set 'sync=st.sync.allreduce{}' \
     --set stages.read.batch_size=256 --set stages.train.minibatch=256 \
     --set stages.train.workers=1 >"$tmp/out" 2>&1 && grep -q "eval *auc" "$tmp/out"; then
  ok "allreduce: the job runs again to the end right after the kill"
else
  bad "allreduce restart after the kill"
fi

# A killed worker-only rank: async and gba go on without it and report the
# loss (for GBA its tokens simply never come back, Appendix B; the buffers
# fill from the others).
for pol in 'async{}' 'gba{global_batch=768}'; do
  kill_one 2 120 "t-${pol%%\{*}" --set "sync=st.sync.$pol" --set 'dist={owners=2}' "${slow[@]}"
  s0=$sa s1=$sb
  if [ "$s0" = 0 ] && [ "$s1" = 0 ] && grep -q "rank 2 died during training" "$tmp/out0" &&
     grep -q "eval *auc" "$tmp/out0"; then
    ok "${pol%%\{*}: a killed worker rank leaves the others to finish, and is reported"
  else
    bad "${pol%%\{*} worker kill: rank 0 $s0, rank 1 $s1"
  fi
done

kill_one 1 60 t3 --set 'sync=st.sync.async{}' --set 'dist={owners=2}' "${slow[@]}"; s0=$sa s2=$sb
if [ "$s0" != hang ] && [ "$s0" != 0 ] && [ "$s2" != hang ] && [ "$s2" != 0 ] &&
   grep -q "rank 1" "$tmp/out0"; then
  ok "async: a killed owner rank stops the job within 60 s"
else
  bad "async owner kill: rank 0 $s0, rank 2 $s2"
fi

kill_one 1 60 t4 --set 'sync=st.sync.shadow{algo="ma"}' "${slow[@]}"; s0=$sa s2=$sb
if [ "$s0" != hang ] && [ "$s0" != 0 ] && [ "$s2" != hang ] && [ "$s2" != 0 ] &&
   grep -q "rank 1" "$tmp/out0"; then
  ok "shadow: a killed rank stops the others' background averaging and the job"
else
  bad "shadow kill: rank 0 $s0, rank 2 $s2"
fi

# strata launch refuses bad arguments before starting anything.
rm -f "$tmp"/out*
"$strata" launch -n 0 "${base[@]}" >"$tmp/out" 2>&1; r1=$?
"$strata" launch -n 2 "$tmp/no-such-job.lua" >>"$tmp/out" 2>&1; r2=$?
"$strata" launch "${base[@]}" >>"$tmp/out" 2>&1; r3=$?
if [ $r1 -eq 2 ] && [ $r2 -eq 2 ] && [ $r3 -eq 2 ]; then
  ok "strata launch: -n 0, a missing job file and a missing -n are usage errors (exit 2)"
else
  bad "launch usage errors: $r1 $r2 $r3"
fi

# Wrong token: refused while rank 0 waits; then the real rank 1 joins.
rm -f "$tmp"/out*
p=$(port)
env1=(STRATA_WORLD_SIZE=2 STRATA_COORDINATOR=127.0.0.1:$p)
tok=(--set 'sync=st.sync.allreduce{}' --set stages.read.batch_size=256
  --set stages.train.minibatch=256 --set stages.train.workers=1)
env "${env1[@]}" STRATA_RANK=0 STRATA_TOKEN=good "$strata" run "${base[@]}" "${tok[@]}" \
  >"$tmp/out0" 2>&1 &
pids=($!)
sleep 1
env "${env1[@]}" STRATA_RANK=1 STRATA_TOKEN=evil timeout 60 "$strata" run "${base[@]}" "${tok[@]}" \
  >"$tmp/outx" 2>&1
sx=$?
env "${env1[@]}" STRATA_RANK=1 STRATA_TOKEN=good "$strata" run "${base[@]}" "${tok[@]}" \
  >"$tmp/out1" 2>&1 &
pids+=($!)
wait_for "${pids[0]}" 120; s0=$ws; wait_for "${pids[1]}" 120; s1=$ws;
if [ $sx -ne 0 ] && [ $sx -ne 124 ] && grep -qi "token" "$tmp/outx" && [ "$s0" = 0 ] &&
   [ "$s1" = 0 ] && grep -qi "wrong job token" "$tmp/out0"; then
  ok "a process with the wrong token is refused; the job runs"
else
  bad "wrong token: impostor $sx, rank 0 $s0, rank 1 $s1"
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
