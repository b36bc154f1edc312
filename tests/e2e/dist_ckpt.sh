#!/usr/bin/env bash
# Checkpoints of multi-process jobs (docs/distributed.md, "Checkpoints of
# multi-process jobs"), end to end, under allreduce:
#  - `strata launch -n 2` writes complete checkpoints (every rank's shard,
#    the world in the manifest; `strata inspect` says complete);
#  - --resume on 2 processes of a 2-process checkpoint ends with the
#    uninterrupted run's model (STRATA_DIGEST: every row's floats and
#    optimizer state, the dense parameters) and its final dense.safetensors
#    byte for byte;
#  - the same checkpoint resumed by 1 process of 2 workers (same global batch
#    and worker count) ends bit-identical too, and so does a one-process
#    checkpoint resumed on 2 processes;
#  - 2 -> 3 processes (same global batch, rows re-routed to 3 owners) ends
#    within 0.001 eval AUC of the uninterrupted run;
#  - a checkpoint missing a rank's shard is incomplete (inspect) and skipped
#    by --resume with a message;
#  - a checkpoint whose rank 1 shard is damaged at its end (found by rank 1
#    only after loading it): every rank empties its tables and rank 0 falls
#    back; the uninterrupted run's model;
#  - a job of allreduce phases resumes at and between phases, bit for bit;
#  - with the SSD tier on, shards hold both tiers' rows and resume into them;
#  - a rank that cannot write its shard (no shared folder): nothing published;
#  - rank 1, then rank 0 killed mid-training: only complete checkpoints are
#    listed, and --resume ends with the uninterrupted run's model;
#  - checkpoint.every_secs: rank 0's clock names the steps; complete, and a
#    resume from one ends with the uninterrupted model (the other policies:
#    dist_ckpt_policies.sh).
# Usage: dist_ckpt.sh PATH/TO/strata HAVE_UCX(0|1)
. "$(dirname "$0")/dist_lib.sh"
digest() { grep -o 'digest [0-9a-f]*' "$1"; }
auc() { grep -o 'eval *auc [0-9.]*' "$1" | grep -o '[0-9.]*$'; }
ar=(--set 'sync=st.sync.allreduce{}' --set stages.train.minibatch=256)
two=(--set stages.train.workers=1 --set stages.read.batch_size=256)   # per rank, 2 ranks
one=(--set stages.train.workers=2 --set stages.read.batch_size=512)   # 1 process, same global batch
ck() { echo "checkpoint={dir=\"$1\",every=10,keep=0}"; }
ckpt30=ckpt-000000000030 final=ckpt-000000000047

# The uninterrupted run on 2 processes, checkpoints every 10 steps.
STRATA_DIGEST=1 timeout 120 "$strata" launch -n 2 "${base[@]}" "${ar[@]}" "${two[@]}" \
  --set "$(ck "$tmp/a")" >"$tmp/out_a" 2>&1 || { bad "uninterrupted 2-process run"; exit 1; }
da=$(digest "$tmp/out_a")
n=$(ls "$tmp/a" | grep -c '^ckpt-[0-9]*$')
if [ "$n" -ge 4 ] && [ -d "$tmp/a/$final" ] &&
   "$strata" inspect "$tmp/a/$ckpt30" >"$tmp/out_i" 2>&1 &&
   grep -q "complete: yes (the shards of all 2 ranks)" "$tmp/out_i" &&
   grep -q "world    2 ranks" "$tmp/out_i" &&
   [ -f "$tmp/a/$ckpt30/table-0.rank-1-of-2.rows" ] && ! ls "$tmp/a" | grep -q '\.tmp$'; then
  ok "launch -n 2 writes complete checkpoints ($n, every rank's shard)"
else
  bad "2-process checkpoints ($n written)"
fi

# resume NAME CKPT_DIR_FROM CMD...: a fresh checkpoint folder $tmp/NAME (not
# d: the data) holding only
# CKPT_DIR_FROM/ckpt-30, then the command with --resume and that folder.
resume() {
  local name=$1 from=$2; shift 2
  rm -rf "${tmp:?}/$name"; mkdir -p "$tmp/$name"
  cp -r "$from/$ckpt30" "$tmp/$name/"
  STRATA_DIGEST=1 timeout 120 "$@" --set "$(ck "$tmp/$name")" --resume >"$tmp/out_$name" 2>&1
}

# 2 -> 2: the same model, bit for bit.
if resume b "$tmp/a" "$strata" launch -n 2 "${base[@]}" "${ar[@]}" "${two[@]}" &&
   grep -q "resuming from .*$ckpt30" "$tmp/out_b" && [ -n "$da" ] &&
   [ "$(digest "$tmp/out_b")" = "$da" ] &&
   cmp -s "$tmp/a/$final/dense.safetensors" "$tmp/b/$final/dense.safetensors" &&
   [ "$(auc "$tmp/out_b")" = "$(auc "$tmp/out_a")" ]; then
  ok "resume 2 -> 2 processes: the uninterrupted run's model ($da)"
else
  bad "resume 2 -> 2: '$(digest "$tmp/out_b")' vs '$da'"
fi

# 2 -> 1 process of 2 workers (same global batch and workers): bit for bit.
if resume c "$tmp/a" "$strata" run "${base[@]}" "${ar[@]}" "${one[@]}" &&
   grep -q "resuming from .*$ckpt30" "$tmp/out_c" && [ "$(digest "$tmp/out_c")" = "$da" ]; then
  ok "resume 2 processes -> 1 process x 2 workers: the uninterrupted run's model"
else
  bad "resume 2 -> 1: '$(digest "$tmp/out_c")' vs '$da'"
fi

# 1 -> 2: a one-process checkpoint (1 x 2 workers) resumed on 2 processes.
STRATA_DIGEST=1 timeout 120 "$strata" run "${base[@]}" "${ar[@]}" "${one[@]}" \
  --set "$(ck "$tmp/s")" >"$tmp/out_s" 2>&1
if resume r1 "$tmp/s" "$strata" launch -n 2 "${base[@]}" "${ar[@]}" "${two[@]}" &&
   grep -q "resuming from .*$ckpt30" "$tmp/out_r1" &&
   [ "$(digest "$tmp/out_r1")" = "$(digest "$tmp/out_s")" ] && [ "$(digest "$tmp/out_s")" = "$da" ]; then
  ok "resume 1 process -> 2 processes: the uninterrupted run's model"
else
  bad "resume 1 -> 2: '$(digest "$tmp/out_r1")' vs '$(digest "$tmp/out_s")'"
fi

# 2 -> 3: global batch 768 on both (2 x 384, then 3 x 256); the rows go to
# 3 owners. Sums are grouped differently (per rank), so not bit for bit.
big=(--set 'sync=st.sync.allreduce{}' --set stages.train.workers=1)
timeout 120 "$strata" launch -n 2 "${base[@]}" "${big[@]}" --set stages.read.batch_size=384 \
  --set stages.train.minibatch=384 --set "$(ck "$tmp/e")" >"$tmp/out_e" 2>&1
ckpt10=ckpt-000000000010
rm -rf "$tmp/f"; mkdir -p "$tmp/f"; cp -r "$tmp/e/$ckpt10" "$tmp/f/" 2>/dev/null
timeout 120 "$strata" launch -n 3 "${base[@]}" "${big[@]}" --set stages.read.batch_size=256 \
  --set stages.train.minibatch=256 --set "$(ck "$tmp/f")" --resume >"$tmp/out_f" 2>&1
ae=$(auc "$tmp/out_e") af=$(auc "$tmp/out_f")
if grep -q "resuming from .*$ckpt10" "$tmp/out_f" && [ -n "$ae" ] && [ -n "$af" ] &&
   /usr/bin/python3 -c "import sys; sys.exit(0 if abs($ae - $af) <= 0.001 else 1)"; then
  ok "resume 2 -> 3 processes: eval auc $af, uninterrupted $ae"
else
  bad "resume 2 -> 3: eval auc '$af' vs '$ae'"
fi

# A checkpoint missing rank 1's shard: incomplete, and --resume falls back.
rm -rf "$tmp/g"; mkdir -p "$tmp/g"
cp -r "$tmp/a/ckpt-000000000020" "$tmp/a/$ckpt30" "$tmp/g/"
rm "$tmp/g/$ckpt30/table-0.rank-1-of-2.rows"
"$strata" inspect "$tmp/g/$ckpt30" >"$tmp/out_gi" 2>&1; irc=$?
STRATA_DIGEST=1 timeout 120 "$strata" launch -n 2 "${base[@]}" "${ar[@]}" "${two[@]}" \
  --set "$(ck "$tmp/g")" --resume >"$tmp/out_g" 2>&1
if [ $irc = 1 ] && grep -q "complete: no (rank 1's shard: file 'table-0.rank-1-of-2.rows': missing)" "$tmp/out_gi" &&
   grep -q "checkpoint $ckpt30: file 'table-0.rank-1-of-2.rows': missing — falling back to ckpt-000000000020" "$tmp/out_g" &&
   grep -q "resuming from .*ckpt-000000000020" "$tmp/out_g" && [ "$(digest "$tmp/out_g")" = "$da" ]; then
  ok "a checkpoint missing a rank's shard is incomplete and skipped by --resume"
else
  bad "missing shard (inspect exit $irc)"
fi

# Rank 1's shard damaged at its end (the last float before the footer):
# each rank hashes the shard it loads as it loads it, so rank 1 finds this
# after its rows went in, rank 0 after loading its own good shard. Every
# rank must empty its tables and rank 0 choose again, past the damaged one
# (reported as a failed verification), and the model must be the one of
# ckpt-20 alone: the uninterrupted run's.
rm -rf "$tmp/h"; mkdir -p "$tmp/h"
cp -r "$tmp/a/ckpt-000000000020" "$tmp/a/$ckpt30" "$tmp/h/"
f="$tmp/h/$ckpt30/table-0.rank-1-of-2.rows"
off=$(($(stat -c %s "$f") - 33))
b=$(od -An -tu1 -j "$off" -N1 "$f" | tr -d ' ')
printf "$(printf '\\x%02x' $((b ^ 1)))" | dd of="$f" bs=1 seek="$off" conv=notrunc 2>/dev/null
STRATA_DIGEST=1 timeout 120 "$strata" launch -n 2 "${base[@]}" "${ar[@]}" "${two[@]}" \
  --set "$(ck "$tmp/h")" --resume >"$tmp/out_h" 2>&1
if grep -q "checkpoint $ckpt30: file 'table-0.rank-1-of-2.rows': checksum mismatch .* — falling back to ckpt-000000000020" "$tmp/out_h" &&
   grep -q "resuming from .*ckpt-000000000020" "$tmp/out_h" && [ "$(digest "$tmp/out_h")" = "$da" ]; then
  ok "rank 1's shard damaged at its end: found while loading, every rank fell back, the uninterrupted model"
else
  bad "damaged shard found while loading: '$(digest "$tmp/out_h")' vs '$da'"
fi

# Phases (allreduce, then allreduce on the rest): resumed at the phase
# boundary and in the middle of the second phase, the same model.
ph=("${base[@]}")
ph[0]=tests/e2e/jobs/gen_phases.lua
ph+=(--set 'stragglers=nil' "${two[@]}" --set stages.train.minibatch=256
  --set 'phases={ {name="warm", rows=6000, sync=st.sync.allreduce{}}, {name="rest", sync=st.sync.allreduce{}} }')
STRATA_DIGEST=1 timeout 120 "$strata" launch -n 2 "${ph[@]}" --set "$(ck "$tmp/m")" >"$tmp/out_m" 2>&1
dm=$(digest "$tmp/out_m")
for c in ckpt-000000000012 ckpt-000000000020; do
  rm -rf "$tmp/m2"; mkdir -p "$tmp/m2"; cp -r "$tmp/m/$c" "$tmp/m2/" 2>/dev/null
  STRATA_DIGEST=1 timeout 120 "$strata" launch -n 2 "${ph[@]}" --set "$(ck "$tmp/m2")" --resume \
    >"$tmp/out_m2" 2>&1
  if [ -n "$dm" ] && grep -q "resuming from .*$c" "$tmp/out_m2" && grep -q "resuming at phase 2/2" "$tmp/out_m2" &&
     [ "$(digest "$tmp/out_m2")" = "$dm" ]; then
    ok "phases on 2 processes resumed from $c: the uninterrupted run's model"
  else
    bad "phases resumed from $c: '$(digest "$tmp/out_m2")' vs '$dm'"
  fi
done

# The SSD tier on (each rank its own storage.ssd.path, so ranks started by
# hand): the shards hold the rows of both tiers, and a resume into tables
# with an SSD tier ends with the same model.
ssd_run() { # tag, args...
  local tag=$1 r; shift
  local p; p=$(port)
  pids=()
  for r in 0 1; do
    mkdir -p "$tmp/ssd-$tag-$r"
    STRATA_DIGEST=1 STRATA_RANK=$r STRATA_WORLD_SIZE=2 STRATA_COORDINATOR=127.0.0.1:$p \
      STRATA_TOKEN=ssd timeout 120 "$strata" run "${base[@]}" "${ar[@]}" "${two[@]}" \
      --set "storage={mem=\"1MiB\",ssd={path=\"$tmp/ssd-$tag-$r\",file_size=\"256KiB\"}}" \
      "$@" >"$tmp/out_ssd$tag$r" 2>&1 &
    pids+=($!)
  done
  for r in 0 1; do wait "${pids[$r]}" || return 1; done
  pids=()
}
rm -rf "$tmp/j"; mkdir -p "$tmp/j"; cp -r "$tmp/a/$ckpt30" "$tmp/j/"
if ssd_run 1 --set "$(ck "$tmp/j")" --resume --metrics "$tmp/m.json" &&
   grep -q "resuming from .*$ckpt30" "$tmp/out_ssd10" && [ "$(digest "$tmp/out_ssd10")" = "$da" ] &&
   tail -n 1 "$tmp/m.json" | grep -Eq '"ssd.rows_read":[1-9]'; then
  ok "SSD tier: resume 2 -> 2 into RAM + SSD tables, the uninterrupted run's model"
else
  bad "SSD tier resume: '$(digest "$tmp/out_ssd10")' vs '$da'"
fi
rm -rf "$tmp/k"
if ssd_run 2 --set "$(ck "$tmp/k")" && [ "$(digest "$tmp/out_ssd20")" = "$da" ] &&
   resume r2 "$tmp/k" "$strata" run "${base[@]}" "${ar[@]}" "${one[@]}" &&
   [ "$(digest "$tmp/out_r2")" = "$da" ]; then
  ok "SSD tier: checkpoints of RAM + SSD shards resume on 1 process, the same model"
else
  bad "SSD tier checkpoints: '$(digest "$tmp/out_ssd20")', '$(digest "$tmp/out_r2")' vs '$da'"
fi

# Ranks that do not share the checkpoint folder (rank 1 is given another
# one, as on hosts without a shared file system): rank 1 cannot write its
# shard, so no checkpoint is ever published; each attempt says why, and
# the run fails at its end for the missing final checkpoint.
p=$(port)
pids=()
for r in 0 1; do
  STRATA_RANK=$r STRATA_WORLD_SIZE=2 STRATA_COORDINATOR=127.0.0.1:$p STRATA_TOKEN=apart \
    timeout 120 "$strata" run "${base[@]}" "${ar[@]}" "${two[@]}" \
    --set "$(ck "$tmp/n$r")" >"$tmp/out_n$r" 2>&1 &
  pids+=($!)
done
wait "${pids[0]}"; n0=$?
wait "${pids[1]}"
pids=()
if [ $n0 != 0 ] && [ -d "$tmp/n0" ] && [ -z "$(ls "$tmp/n0")" ] &&
   grep -q "the ranks of a job must share the checkpoint folder" "$tmp/out_n1" &&
   grep -q "rank 1 could not write its shard; the checkpoint is not published" "$tmp/out_n0"; then
  ok "a rank that cannot write its shard: nothing is published (and it says why)"
else
  bad "unshared checkpoint folder: rank 0 exit $n0, $(ls "$tmp/n0" 2>&1 | tr '\n' ' ')"
fi

# SIGKILL of a rank mid-training (rank 1, then rank 0; checkpoints every 2
# steps, a straggler slowing it down): the survivor stops, nothing
# half-written is ever listed, and --resume goes on from the newest
# complete checkpoint to the uninterrupted run's model.
for victim in 1 0; do
  rm -rf "$tmp/l" "$tmp"/out[0-9]*
  start_ranks 2 "kill$victim" "${ar[@]}" "${slow[@]}" --set "checkpoint={dir=\"$tmp/l\",every=2,keep=2}"
  wait_started 2 || continue
  # Kill once a checkpoint is complete (a sanitizer build may need more
  # than the second wait_started leaves before the first one).
  t=0
  until ls "$tmp/l" 2>/dev/null | grep -q '^ckpt-[0-9]*$' || [ $t -ge 300 ]; do
    sleep 0.2; t=$((t + 1))
  done
  kill -9 "${pids[$victim]}"
  wait_for "${pids[$((1 - victim))]}" 30; sv=$ws
  pids=()
  n=$(ls "$tmp/l" 2>/dev/null | grep -c '^ckpt-[0-9]*$')
  complete=1
  for c in "$tmp"/l/ckpt-*; do
    case $c in *.tmp) continue ;; esac
    "$strata" inspect "$c" 2>&1 | grep -q "complete: yes" || complete=0
  done
  STRATA_DIGEST=1 timeout 120 "$strata" launch -n 2 "${base[@]}" "${ar[@]}" "${two[@]}" \
    --set "checkpoint={dir=\"$tmp/l\",every=2,keep=2}" --resume >"$tmp/out_l" 2>&1
  if [ "$sv" != hang ] && [ "$sv" != 0 ] && [ "$n" -ge 1 ] && [ $complete = 1 ] &&
     grep -q "resuming from" "$tmp/out_l" && [ "$(digest "$tmp/out_l")" = "$da" ]; then
    ok "rank $victim killed mid-training: $n complete checkpoint(s) listed, --resume ends with the uninterrupted model"
  else
    bad "rank $victim killed, resumed: survivor $sv, $n checkpoints, complete $complete, '$(digest "$tmp/out_l")' vs '$da'"
  fi
done

# checkpoint.every_secs: rank 0's clock names a step a little ahead to every
# rank; the checkpoints are complete, and a resume from the first one ends
# with the uninterrupted run's model (the cut is the same whoever chose it).
STRATA_DIGEST=1 timeout 120 "$strata" launch -n 2 "${base[@]}" "${ar[@]}" "${two[@]}" \
  --set "checkpoint={dir=\"$tmp/ts\",every_secs=0.02,keep=0}" >"$tmp/out_ts" 2>&1; tsrc=$?
first=$(ls "$tmp/ts" 2>/dev/null | grep '^ckpt-[0-9]*$' | head -n 1)
nts=$(ls "$tmp/ts" 2>/dev/null | grep -c '^ckpt-[0-9]*$')
tsinc=0
for c in "$tmp/ts"/ckpt-*; do "$strata" inspect "$c" 2>&1 | grep -q "complete: yes" || tsinc=1; done
rm -rf "${tmp:?}/tr"; mkdir -p "$tmp/tr"; [ -n "$first" ] && cp -r "$tmp/ts/$first" "$tmp/tr/"
STRATA_DIGEST=1 timeout 120 "$strata" launch -n 2 "${base[@]}" "${ar[@]}" "${two[@]}" \
  --set "checkpoint={dir=\"$tmp/tr\",every=1000}" --resume >"$tmp/out_tr" 2>&1
if [ $tsrc = 0 ] && [ "$nts" -ge 2 ] && [ $tsinc = 0 ] && [ "$(digest "$tmp/out_ts")" = "$da" ] &&
   grep -q "resuming from .*$first" "$tmp/out_tr" && [ "$(digest "$tmp/out_tr")" = "$da" ]; then
  ok "checkpoint.every_secs across processes: $nts complete checkpoints; resuming $first ends with the uninterrupted model"
else
  bad "every_secs across processes (exit $tsrc, $nts checkpoints, incomplete $tsinc, first '$first')"
fi

echo "dist_ckpt: $pass passed, $fail failed"
[ $fail -eq 0 ]
