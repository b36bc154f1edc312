#!/usr/bin/env bash
# Checkpoints, resumes and exports of multi-process jobs under every sync
# policy (docs/distributed.md, "The cut under each policy"), end to end on
# 2 processes. For each policy:
#  - an uninterrupted run writes complete checkpoints every 10 steps and a
#    full export; `strata eval` of the export gives the job's own eval AUC
#    (the export is the model the job ended with, readable by one process);
#  - --resume from the checkpoint after step 20 runs to the end with a
#    finite loss, a progressive logloss (over the resumed steps) below the
#    uninterrupted run's (over all its steps: no spike back to an untrained
#    model), and an eval AUC within 0.02 of the uninterrupted run's (the
#    policies other than allreduce are not deterministic: two uninterrupted
#    runs differ by up to about 0.01 here); allreduce ends with the
#    uninterrupted run's AUC exactly (dist_ckpt.sh checks its model bit
#    for bit).
# Then, under async:
#  - the step-20 checkpoint loaded on 1 process x 2 workers, 2 processes
#    and 3 processes (rows re-routed to their new owners) with nothing left
#    to train is the same model, bit for bit (STRATA_DIGEST: every row of
#    every rank, optimizer state, dense parameters): no row lost or doubled;
#  - it resumes on 1 process x 2 workers and on 3 processes and trains on
#    to an eval AUC near the uninterrupted run's: within 0.02 on 1 process,
#    within 0.03 on 3 processes. Three asynchronous ranks on two cores are
#    the noisiest case here: staleness grows whenever the OS deschedules a
#    rank between its pull and its push, so how far the AUC moves depends
#    on the host's load (locally, plain and ASan builds, 13 runs: within
#    0.007; once on a loaded CI host under ASan: 0.0211 below). What the
#    re-routing itself must keep is pinned exactly by the digest above;
#  - a checkpoint step that only rank 0 reaches (93 batches: rank 0 has
#    47, rank 1 46, every = 47) is skipped with a message, not waited for;
#    and one that only rank 1 reaches (a 3 -> 2 process resume that starts
#    the round at rank 1).
# Usage: dist_ckpt_policies.sh PATH/TO/strata HAVE_UCX(0|1)
. "$(dirname "$0")/dist_lib.sh"
auc() { grep -o 'eval *auc [0-9.]*' "$1" | grep -o '[0-9.]*$'; }
prog_ll() { grep -o 'progressive  auc [0-9.]*  logloss [0-9.a-z]*' "$1" | grep -o '[0-9.a-z]*$'; }
two=(--set stages.train.workers=1 --set stages.read.batch_size=256 --set stages.train.minibatch=256)
ck() { echo "checkpoint={dir=\"$1\",every=10,keep=0}"; }
c20=ckpt-000000000020

for pol in 'st.sync.allreduce{}' 'st.sync.async{}' 'st.sync.hop_bs{b=2}' 'st.sync.bsp{b=2}' \
           'st.sync.hop_bw{b=1}' 'st.sync.gba{global_batch=512, tolerance=2}' \
           'st.sync.kstep{k=4}' 'st.sync.shadow{algo="ma", alpha=0.5}' \
           'st.sync.hybrid{staleness=2}' 'st.sync.auto{threshold=2}'; do
  name=${pol%%\{*}; name=${name#st.sync.}
  rm -rf "${tmp:?}/a" "$tmp/x" "$tmp/b"
  timeout 120 "$strata" launch -n 2 "${base[@]}" "${two[@]}" --set "sync=$pol" \
    --set "$(ck "$tmp/a")" --set "export={dir=\"$tmp/x\"}" >"$tmp/out_a" 2>&1; arc=$?
  n=$(ls "$tmp/a" 2>/dev/null | grep -c '^ckpt-[0-9]*$')
  "$strata" inspect "$tmp/a/$c20" >"$tmp/out_i" 2>&1
  "$strata" eval "$tmp/x" "$tmp/d/eval.tsv" >"$tmp/out_e" 2>&1
  xa=$(grep -o '^auc [0-9.]*' "$tmp/out_e"); xa=${xa#auc }
  if [ $arc = 0 ] && [ "$n" -ge 4 ] && grep -q "complete: yes (the shards of all 2 ranks)" "$tmp/out_i" &&
     ! ls "$tmp/a" | grep -q '\.tmp$' && [ -n "$xa" ] &&
     same4 "$xa" "$(auc "$tmp/out_a")"; then
    ok "$name: $n complete checkpoints; the export's eval AUC is the job's ($(auc "$tmp/out_a"))"
  else
    bad "$name: uninterrupted run (exit $arc, $n checkpoints, export auc '$xa' vs '$(auc "$tmp/out_a")')"
    continue
  fi
  mkdir -p "$tmp/b"; cp -r "$tmp/a/$c20" "$tmp/b/"
  timeout 120 "$strata" launch -n 2 "${base[@]}" "${two[@]}" --set "sync=$pol" \
    --set "$(ck "$tmp/b")" --resume >"$tmp/out_b" 2>&1; brc=$?
  la=$(prog_ll "$tmp/out_a") lb=$(prog_ll "$tmp/out_b") ea=$(auc "$tmp/out_a") eb=$(auc "$tmp/out_b")
  exact=1
  [ $name = allreduce ] && [ "$ea" != "$eb" ] && exact=0
  if [ $brc = 0 ] && grep -q "resuming from .*$c20" "$tmp/out_b" && [ -n "$lb" ] && [ -n "$eb" ] &&
     ! grep -qi 'nan\|non-finite' "$tmp/out_b" && [ $exact = 1 ] &&
     awk -v la="$la" -v lb="$lb" -v ea="$ea" -v eb="$eb" \
       'BEGIN { exit !(lb + 0 < la + 0 && eb + 0 >= ea - 0.02) }'; then
    ok "$name: resumed from step 20: progressive logloss $lb (uninterrupted $la), eval auc $eb ($ea)"
  else
    bad "$name: resume (exit $brc): progressive logloss '$lb' vs '$la', eval auc '$eb' vs '$ea'"
  fi
done

# async on another world size: 2 -> 1 process x 2 workers, 2 -> 3 processes.
asy=(--set 'sync=st.sync.async{}' --set stages.train.minibatch=256)
one=(--set stages.train.workers=2 --set stages.read.batch_size=512)
rm -rf "${tmp:?}/a"
timeout 120 "$strata" launch -n 2 "${base[@]}" "${two[@]}" "${asy[@]}" --set "$(ck "$tmp/a")" \
  >"$tmp/out_a" 2>&1
ea=$(auc "$tmp/out_a")
# The checkpoint as loaded (data.train.limit = the 10240 examples it has
# done: nothing left to train) on 1, 2 and 3 processes: one model.
zd=()
for w in 1 2 3; do
  rm -rf "${tmp:?}/z"; mkdir -p "$tmp/z"; cp -r "$tmp/a/$c20" "$tmp/z/"
  if [ $w = 1 ]; then
    STRATA_DIGEST=1 timeout 120 "$strata" run "${base[@]}" "${asy[@]}" "${one[@]}" \
      --set "$(ck "$tmp/z")" --set data.train.limit=10240 --resume >"$tmp/out_z" 2>&1
  else
    STRATA_DIGEST=1 timeout 120 "$strata" launch -n $w "${base[@]}" "${two[@]}" "${asy[@]}" \
      --set "$(ck "$tmp/z")" --set data.train.limit=10240 --resume >"$tmp/out_z" 2>&1
  fi
  zrc=$?
  grep -q "resuming from .*$c20" "$tmp/out_z" && grep -q "trained 0 examples" "$tmp/out_z" &&
    [ $zrc = 0 ] && zd+=("$(grep -o 'digest [0-9a-f]*  [0-9]* rows' "$tmp/out_z")")
done
if [ ${#zd[@]} = 3 ] && [ -n "${zd[0]}" ] && [ "${zd[0]}" = "${zd[1]}" ] && [ "${zd[0]}" = "${zd[2]}" ]; then
  ok "async: the step-20 checkpoint loads as one model on 1, 2 and 3 processes (${zd[0]})"
else
  bad "async: the step-20 checkpoint on 1, 2, 3 processes: '${zd[*]:-}'"
fi
for w in 1 3; do
  rm -rf "${tmp:?}/w$w"; mkdir -p "$tmp/w$w"; cp -r "$tmp/a/$c20" "$tmp/w$w/"
  if [ $w = 1 ]; then
    timeout 120 "$strata" run "${base[@]}" "${asy[@]}" "${one[@]}" \
      --set "$(ck "$tmp/w$w")" --resume >"$tmp/out_w" 2>&1
  else
    timeout 120 "$strata" launch -n 3 "${base[@]}" "${two[@]}" "${asy[@]}" \
      --set "$(ck "$tmp/w$w")" --resume >"$tmp/out_w" 2>&1
  fi
  wrc=$? ew=$(auc "$tmp/out_w") tol=0.02
  [ $w = 3 ] && tol=0.03
  if [ $wrc = 0 ] && grep -q "resuming from .*$c20" "$tmp/out_w" && [ -n "$ew" ] && [ -n "$ea" ] &&
     awk -v a="$ea" -v b="$ew" -v t=$tol 'BEGIN { exit !(b + 0 >= a - t) }'; then
    ok "async: a 2-process checkpoint resumes on $w process(es): eval auc $ew ($ea uninterrupted)"
  else
    bad "async: 2 -> $w processes (exit $wrc): eval auc '$ew' vs '$ea'"
  fi
done

# A step that only rank 0 reaches: skipped, not waited for.
timeout 120 "$strata" launch -n 2 "${base[@]}" "${two[@]}" "${asy[@]}" --set data.train.limit=23808 \
  --set "checkpoint={dir=\"$tmp/k\",every=47,keep=0}" >"$tmp/out_k" 2>&1; krc=$?
if [ $krc = 0 ] && grep -q "checkpoint after step 47 skipped: not every rank had data for it" "$tmp/out_k" &&
   [ -d "$tmp/k/ckpt-000000000047" ]; then
  ok "async: a step rank 1 never reaches is skipped (the final checkpoint is still written)"
else
  bad "async: uneven step (exit $krc; $(ls "$tmp/k" 2>&1 | tr '\n' ' '))"
fi

# checkpoint.every_secs under async: rank 0 names the steps; every interval
# checkpoint is complete (or skipped with a message), none waited for.
rm -rf "${tmp:?}/ts"
timeout 120 "$strata" launch -n 2 "${base[@]}" "${two[@]}" "${asy[@]}" \
  --set "checkpoint={dir=\"$tmp/ts\",every_secs=0.02,keep=0}" >"$tmp/out_ts" 2>&1; tsrc=$?
nts=$(ls "$tmp/ts" 2>/dev/null | grep -c '^ckpt-[0-9]*$') tsinc=0
for c in "$tmp/ts"/ckpt-*; do "$strata" inspect "$c" 2>&1 | grep -q "complete: yes" || tsinc=1; done
if [ $tsrc = 0 ] && [ "$nts" -ge 2 ] && [ $tsinc = 0 ]; then
  ok "async: checkpoint.every_secs on 2 processes: $nts complete checkpoints"
else
  bad "async: every_secs (exit $tsrc, $nts checkpoints, incomplete $tsinc)"
fi

# The other way round: a 3-process checkpoint after step 5 (15 batches)
# resumed on 2 processes starts the round at rank 1, which then has one
# batch more than rank 0 (40 against 39): its cut at step 45 is released by
# rank 0's ENDED, not waited for forever.
rm -rf "${tmp:?}/t3" "$tmp/t2"
timeout 120 "$strata" launch -n 3 "${base[@]}" "${two[@]}" "${asy[@]}" \
  --set "checkpoint={dir=\"$tmp/t3\",every=5,keep=0}" >"$tmp/out_t3" 2>&1
mkdir -p "$tmp/t2"; cp -r "$tmp/t3/ckpt-000000000005" "$tmp/t2/" 2>/dev/null
timeout 120 "$strata" launch -n 2 "${base[@]}" "${two[@]}" "${asy[@]}" \
  --set "checkpoint={dir=\"$tmp/t2\",every=5,keep=0}" --resume >"$tmp/out_t2" 2>&1; trc=$?
if [ $trc = 0 ] && grep -q "resuming from .*ckpt-000000000005" "$tmp/out_t2" &&
   grep -q "checkpoint after step 45 skipped: not every rank had data for it" "$tmp/out_t2" &&
   grep -q "trained 20160 examples on 2 ranks" "$tmp/out_t2"; then
  ok "async: a step only rank 1 reaches (resumed mid-round) is skipped, released by rank 0"
else
  bad "async: rank 1 one batch ahead after a 3 -> 2 resume (exit $trc)"
fi

echo "dist_ckpt_policies: $pass passed, $fail failed"
[ $fail -eq 0 ]
