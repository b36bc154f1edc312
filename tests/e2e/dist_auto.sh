#!/usr/bin/env bash
# st.sync.auto and phases across processes (ops/train/trainer.c, "auto across
# processes"; the GBA paper's switch between synchronous and asynchronous
# training, gba-global-batch-aggregation.txt §1, §5.2), end to end:
#  - with a threshold no spread reaches, auto votes every `window` steps
#    but never switches, and the model is bit for bit the allreduce one
#    (STRATA_DIGEST): the votes change nothing;
#  - with rank 1's worker slowed for its first 20 minibatches, every pair
#    of sync and async policies offered switches to the async one and back
#    once the straggler recovers; both ranks log the same switches at the
#    same batches, end with the same dense parameters (each rank logs
#    their digest), and the model learns;
#  - sub-policies that cannot switch across processes are refused, in the
#    job's sync and in a phase's, before anything trains;
#  - a rank killed under auto stops the others within a bounded time,
#    naming it (the votes are collectives);
#  - phases across processes: allreduce phases on 2 processes train bit
#    for bit what one process of 2 workers trains; allreduce -> gba -> auto
#    (the last two with progressive-validation slices, which once left the
#    lockstep phase without its drain) runs, rank 0 prints each phase and
#    the slices (every rank's share), the model learns, and every rank ends the last phase
#    with the same dense parameters (rank 0's, handed over at each phase).
# Usage: dist_auto.sh PATH/TO/strata HAVE_UCX(0|1)
. "$(dirname "$0")/dist_lib.sh"
evalauc() { grep -o 'eval *auc [0-9.]*' "$1" | grep -o '[0-9.]*$'; }
# Ranks 0..n-1 by hand, the last one with --set "$2": slow_last n SET args...
slow_last() {
  local n=$1 set=$2 r p; shift 2
  p=$(port)
  pids=()
  for ((r = 0; r < n; r++)); do
    extra=()
    [ $r = $((n - 1)) ] && extra=(--set "$set")
    STRATA_RANK=$r STRATA_WORLD_SIZE=$n STRATA_COORDINATOR=127.0.0.1:$p STRATA_TOKEN=auto \
      "$strata" run "${base[@]}" "$@" "${extra[@]}" >"$tmp/out$r" 2>&1 &
    pids+=($!)
  done
}
one=(--set stages.read.batch_size=256 --set stages.train.minibatch=256
  --set stages.train.workers=1)

# 1. No switch: the same model as allreduce.
digest() { grep -o 'model *digest [0-9a-f]*' "$1" | awk '{print $3}'; }
STRATA_DIGEST=1 timeout 300 "$strata" launch -n 2 "${base[@]}" "${one[@]}" \
  --set 'sync=st.sync.allreduce{}' >"$tmp/ref" 2>&1
STRATA_DIGEST=1 timeout 300 "$strata" launch -n 2 "${base[@]}" "${one[@]}" \
  --set 'sync=st.sync.auto{window=3, threshold=1e9}' >"$tmp/out" 2>&1
da=$(digest "$tmp/ref") db=$(digest "$tmp/out")
if [ -n "$da" ] && [ "$da" = "$db" ] && grep -q "0 switches" "$tmp/out"; then
  ok "auto that never switches: the allreduce model bit for bit ($da)"
else
  bad "auto without switches: digest $db, allreduce $da"
fi

# 2. Switches both ways, in step on both ranks.
for pair in 'sync=st.sync.allreduce{}, async=st.sync.async{}' \
            'sync=st.sync.hybrid{staleness=1}, async=st.sync.gba{global_batch=512, tolerance=2}' \
            'sync=st.sync.allreduce{}, async=st.sync.hop_bs{b=2}' \
            'sync=st.sync.allreduce{}, async=st.sync.bsp{b=2}'; do
  rm -f "$tmp"/out*
  slow_last 2 'stragglers=st.stragglers{worker=0, slowdown=10, steps=20}' "${one[@]}" \
    --set "sync=st.sync.auto{$pair, window=5, threshold=3}"
  st=0
  for r in 0 1; do wait_for "${pids[$r]}" 120; [ "$ws" = 0 ] || st=$ws; done
  pids=()
  sw0=$(grep -o 'batch [0-9]*: worker speeds.*' "$tmp/out0")
  sw1=$(grep -o 'batch [0-9]*: worker speeds.*' "$tmp/out1")
  nd=$(grep -ho 'parameters digest [0-9a-f]*' "$tmp"/out0 "$tmp"/out1 | sort -u | wc -l)
  auc=$(evalauc "$tmp/out0")
  if [ "$st" = 0 ] && grep -q -- '-> [a-z_]*$' <<<"$sw0" &&
     grep -q 'converge.*-> [a-z]*$' <<<"$sw0" && [ "$sw0" = "$sw1" ] && [ "$nd" = 1 ] &&
     /usr/bin/python3 -c "import sys; sys.exit(0 if float('${auc:-0}') > 0.62 else 1)"; then
    ok "auto{$pair}: $(wc -l <<<"$sw0") switches, the same on both ranks, one dense digest, eval auc $auc"
  else
    bad "auto{$pair}: status $st, $nd digests, switches: [$sw0] vs [$sw1], auc $auc"
  fi
done

# 3. Policies that cannot take part in a switch across processes.
rm -f "$tmp"/out*
timeout 60 "$strata" launch -n 2 "${base[@]}" "${one[@]}" \
  --set 'sync=st.sync.auto{async=st.sync.shadow{}}' >"$tmp/out" 2>&1
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "its async policy is 'shadow'" "$tmp/out"; then
  ok "auto{async=shadow} across processes is refused with a message"
else
  bad "auto{async=shadow}: rc=$rc"
fi
rm -f "$tmp"/out*
ph0=("${base[@]}")
ph0[0]=tests/e2e/jobs/gen_phases.lua
timeout 60 "$strata" launch -n 2 "${ph0[@]}" "${one[@]}" --set "stragglers=nil" \
  --set 'phases={ {name="a", rows=6000, sync=st.sync.allreduce{}}, {name="b", sync=st.sync.auto{sync=st.sync.kstep{k=2}}} }' \
  >"$tmp/out" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q "its sync policy is 'kstep'" "$tmp/out" && ! grep -q "^gen_phases: phase" "$tmp/out"; then
  ok "a phase's auto{sync=kstep} is refused before any phase trains"
else
  bad "a phase's auto{sync=kstep}: rc=$rc"
fi

# 4. A rank killed under auto: rank 2 straggles 200x, so the ranks switch
# to async after 2 steps; ranks 0 and 1 run out of data and wait in the
# votes for rank 2, which is killed.
rm -f "$tmp"/out*
slow_last 3 'stragglers=st.stragglers{worker=0, slowdown=200}' "${one[@]}" \
  --set 'sync=st.sync.auto{window=2}'
wait_started 3
until grep -q "diverge" "$tmp/out0" 2>/dev/null || ! kill -0 "${pids[2]}" 2>/dev/null; do sleep 0.2; done
kill -9 "${pids[2]}"
wait_for "${pids[0]}" 60; sa=$ws
wait_for "${pids[1]}" 60; sb=$ws
pids=()
if [ "$sa" != hang ] && [ "$sa" != 0 ] && [ "$sb" != hang ] && [ "$sb" != 0 ] &&
   grep -q "allreduce -> async" "$tmp/out0" && grep -q "rank 2" "$tmp/out0"; then
  ok "auto: a rank killed in the async phase stops the others within 60 s, naming rank 2"
else
  bad "auto kill: statuses $sa $sb"
fi

# 5. Phases across processes.
ph=("${base[@]}")
ph[0]=tests/e2e/jobs/gen_phases.lua
rm -f "$tmp"/out*
two='phases={ {name="warm", rows=6000, sync=st.sync.allreduce{}}, {name="rest", sync=st.sync.allreduce{}} }'
STRATA_DIGEST=1 timeout 300 "$strata" run "${ph[@]}" --set 'stragglers=nil' --set "$two" \
  --set stages.train.workers=2 --set stages.read.batch_size=512 \
  --set stages.train.minibatch=256 >"$tmp/ref" 2>&1
STRATA_DIGEST=1 timeout 300 "$strata" launch -n 2 "${ph[@]}" --set 'stragglers=nil' --set "$two" \
  "${one[@]}" >"$tmp/out" 2>&1
da=$(digest "$tmp/ref") db=$(digest "$tmp/out")
if [ -n "$da" ] && [ "$da" = "$db" ] && [ "$(grep -c "^gen_phases: phase" "$tmp/out")" = 2 ]; then
  ok "phases allreduce, allreduce on 2 processes = 1 process of 2 workers ($da)"
else
  bad "phases on 2 processes: digest '$db', one process '$da'"
fi
rm -f "$tmp"/out*
three='phases={ {name="warm", rows=6000, sync=st.sync.allreduce{}}, {name="gba", rows=12000, validate=true, sync=st.sync.gba{global_batch=1024}}, {name="last", validate=true, sync=st.sync.auto{window=3, threshold=1e9}} }'
STRATA_DIGEST=1 timeout 300 "$strata" launch -n 2 "${ph[@]}" --set 'stragglers=nil' --set "$three" \
  --set stages.train.workers=2 --set stages.read.batch_size=512 >"$tmp/out" 2>&1
rc=$?
np=$(grep -c "^gen_phases: phase" "$tmp/out")
nd=$(grep -o 'parameters digest [0-9a-f]*' "$tmp/out" | sort | uniq -c | awk '{print $1}')
auc=$(grep '^gen_phases: phase 3' "$tmp/out" | grep -o 'eval auc [0-9.]*' | grep -o '[0-9.]*$')
if [ $rc = 0 ] && [ "$np" = 3 ] && grep -q '^  gba  *12000 ' "$tmp/out" &&
   grep -q '^  last  *24000 ' "$tmp/out" && [ "$nd" = 2 ] &&
   /usr/bin/python3 -c "import sys; sys.exit(0 if float('${auc:-0}') > 0.62 else 1)"; then
  ok "phases allreduce -> gba (slice) -> auto on 2 processes: one dense model on both ranks, eval auc $auc"
else
  bad "phases allreduce -> gba -> auto: rc=$rc, $np phase lines, digest counts '$nd', auc '$auc'"
fi

echo "dist_auto: $pass passed, $fail failed"
[ $fail -eq 0 ]
