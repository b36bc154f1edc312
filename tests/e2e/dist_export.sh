#!/usr/bin/env bash
# Serving exports of multi-process jobs (docs/distributed.md, "Exports of
# multi-process jobs"), end to end, under allreduce:
#  - `strata launch -n 2` writes one full export (each rank's shard of the
#    rows, the world in the manifest); `strata inspect` says complete;
#  - single-process `strata predict` scores from it are byte-identical to
#    those from the export of the same job run as 1 process x 2 workers, and
#    `strata eval` gives the same AUC; with the SSD tier on, the shards hold
#    both tiers' rows (the same scores);
#  - the online-days job (jobs/online_days.lua) on 2 processes writes a full
#    export and a delta per later day; the chain applies (predict, eval) and
#    scores byte for byte as the 1 x 2 workers run's chain;
#  - an export missing one rank's shard file is incomplete (inspect), left
#    out of the verified chain, and refused by predict;
#  - a rank that owns no rows (dist.owners = 1) takes part in checkpoints
#    and exports without waiting forever;
#  - with model.ttl, each owner's expired rows are deleted keys of the next
#    delta: the chain after day 6 scores day 7 exactly as the job did;
#  - a rank that cannot join the export folder: nothing is published.
# (Exports under the other policies: dist_ckpt_policies.sh.)
# Usage: dist_export.sh PATH/TO/strata HAVE_UCX(0|1)
. "$(dirname "$0")/dist_lib.sh"
auc() { grep -o 'eval *auc [0-9.]*' "$1" | grep -o '[0-9.]*$'; }
ar=(--set 'sync=st.sync.allreduce{}' --set stages.train.minibatch=256)
two=(--set stages.train.workers=1 --set stages.read.batch_size=256)   # per rank, 2 ranks
one=(--set stages.train.workers=2 --set stages.read.batch_size=512)   # 1 process, same global batch
x=export-000000000000-full

# A plain job: 2 processes and 1 process x 2 workers, one full export each.
timeout 120 "$strata" launch -n 2 "${base[@]}" "${ar[@]}" "${two[@]}" \
  --set "export={dir=\"$tmp/x2\"}" >"$tmp/out_a" 2>&1; arc=$?
timeout 120 "$strata" run "${base[@]}" "${ar[@]}" "${one[@]}" \
  --set "export={dir=\"$tmp/x1\"}" >"$tmp/out_b" 2>&1
"$strata" inspect "$tmp/x2/$x" >"$tmp/out_i" 2>&1
if [ $arc = 0 ] && grep -q "complete: yes (the shards of all 2 ranks)" "$tmp/out_i" &&
   grep -q "world    2 ranks" "$tmp/out_i" && [ -f "$tmp/x2/$x/table-0.rank-1-of-2.rows" ] &&
   [ "$(grep -c "export .*written" "$tmp/out_a")" = 1 ] && ! ls "$tmp/x2" | grep -q '\.tmp$'; then
  ok "launch -n 2 writes one complete export (every rank's shard, the world)"
else
  bad "2-process export (exit $arc)"
fi
"$strata" predict "$tmp/x2" "$tmp/d/eval.tsv" --out "$tmp/p2" >"$tmp/out_p2" 2>&1
"$strata" predict "$tmp/x1" "$tmp/d/eval.tsv" --out "$tmp/p1" >"$tmp/out_p1" 2>&1
if [ -s "$tmp/p2" ] && cmp -s "$tmp/p1" "$tmp/p2" && [ "$(wc -l <"$tmp/p2")" = 3000 ]; then
  ok "strata predict: 2-process export scores byte-identical to 1 process x 2 workers"
else
  bad "predict on the 2-process export vs 1 x 2 workers"
fi
"$strata" eval "$tmp/x2" "$tmp/d/eval.tsv" >"$tmp/out_e2" 2>&1
"$strata" eval "$tmp/x1" "$tmp/d/eval.tsv" >"$tmp/out_e1" 2>&1
e2=$(grep -o '^auc [0-9.]*' "$tmp/out_e2")
if [ -n "$e2" ] && [ "$e2" = "$(grep -o '^auc [0-9.]*' "$tmp/out_e1")" ] &&
   same4 "${e2#auc }" "$(auc "$tmp/out_a")"; then
  ok "strata eval on the 2-process export: the same $e2 (and the job's own eval)"
else
  bad "eval: '$e2' vs '$(grep -o '^auc [0-9.]*' "$tmp/out_e1")', job $(auc "$tmp/out_a")"
fi

# dist.owners = 1: rank 1 owns no rows (its shard files are empty); its
# cut must not wait for steps applied to a shard it does not have (it
# did, forever, for checkpoints too).
timeout 60 "$strata" launch -n 2 "${base[@]}" "${ar[@]}" "${two[@]}" --set dist.owners=1 \
  --set "checkpoint={dir=\"$tmp/co\",every=20}" --set "export={dir=\"$tmp/xo\"}" >"$tmp/out_o" 2>&1; orc=$?
"$strata" predict "$tmp/xo" "$tmp/d/eval.tsv" --out "$tmp/po" >"$tmp/out_po" 2>&1
if [ $orc = 0 ] && cmp -s "$tmp/p1" "$tmp/po" && [ -d "$tmp/co/ckpt-000000000047" ] &&
   "$strata" inspect "$tmp/xo/$x" 2>&1 | grep -q "complete: yes"; then
  ok "dist.owners = 1: a rank without rows takes part in checkpoints and exports"
else
  bad "dist.owners = 1 (exit $orc)"
fi

# The SSD tier on (each rank its own storage.ssd.path, so ranks started by
# hand): each rank's shard holds the rows of both tiers; the scores are
# those of the one-process export above.
p=$(port)
pids=()
for r in 0 1; do
  mkdir -p "$tmp/ssd-$r"
  STRATA_RANK=$r STRATA_WORLD_SIZE=2 STRATA_COORDINATOR=127.0.0.1:$p STRATA_TOKEN=ssd \
    timeout 120 "$strata" run "${base[@]}" "${ar[@]}" "${two[@]}" --metrics "$tmp/m$r.json" \
    --set "storage={mem=\"1MiB\",ssd={path=\"$tmp/ssd-$r\",file_size=\"256KiB\"}}" \
    --set "export={dir=\"$tmp/xs\"}" >"$tmp/out_s$r" 2>&1 &
  pids+=($!)
done
src=0
for r in 0 1; do wait "${pids[$r]}" || src=1; done
pids=()
"$strata" predict "$tmp/xs" "$tmp/d/eval.tsv" --out "$tmp/ps" >"$tmp/out_ps" 2>&1
if [ $src = 0 ] && cmp -s "$tmp/p1" "$tmp/ps" &&
   tail -n 1 "$tmp/m0.json" | grep -Eq '"ssd.rows_written":[1-9]'; then
  ok "SSD tier: the 2-process export holds both tiers' rows (predict as 1 x 2 workers)"
else
  bad "SSD tier export (exit $src)"
fi

# The online-days job: a full export, then a delta per day.
online() { # dir, strata command...
  local dir=$1; shift
  mkdir -p "$dir" && (cd "$dir" && timeout 120 "$@" "$root/jobs/online_days.lua" --quiet --no-pin \
    --set data.generate.rows=40000 --set data.generate.vocab=20000 --set stages.read.threads=1 \
    "${days[@]}" >log 2>&1)
}
days=(--set stages.read.batch_size=256 --set stages.train.workers=1)
online "$tmp/on2" "$strata" launch -n 2; orc=$?
days=(--set stages.read.batch_size=512 --set stages.train.workers=2)
online "$tmp/on1" "$strata" run
X2=$tmp/on2/out/online/export X1=$tmp/on1/out/online/export day7=$tmp/on2/data/online/day-007.tsv
nf=$(ls "$X2" | grep -c -- '-full$') nd=$(ls "$X2" | grep -c -- '-delta$')
inc=0
for e in "$X2"/export-*; do "$strata" inspect "$e" 2>&1 | grep -q "complete: yes (the shards of all 2 ranks)" || inc=1; done
if [ $orc = 0 ] && [ "$nf" = 1 ] && [ "$nd" = 7 ] && [ $inc = 0 ]; then
  ok "online job on 2 processes: one full export and 7 deltas, each complete"
else
  bad "online exports (exit $orc): $nf full, $nd delta, incomplete $inc"
fi
"$strata" predict "$X2" "$day7" --out "$tmp/q2" >"$tmp/out_q2" 2>&1
"$strata" predict "$X1" "$day7" --out "$tmp/q1" >"$tmp/out_q1" 2>&1
"$strata" eval "$X2" "$day7" >"$tmp/out_f2" 2>&1
"$strata" eval "$X1" "$day7" >"$tmp/out_f1" 2>&1
if [ -s "$tmp/q2" ] && cmp -s "$tmp/q1" "$tmp/q2" && grep -q "export-000000000007-delta" "$tmp/out_q2" &&
   grep -q '^auc 0\.' "$tmp/out_f2" && cmp -s "$tmp/out_f1" "$tmp/out_f2"; then
  ok "the 2-process delta chain applies on its full export: predict and eval as 1 x 2 workers, byte for byte"
else
  bad "online chain: predict/eval of the 2-process chain vs 1 x 2 workers"
fi

# TTL across processes: rows a rank's shard evicts (model.ttl) are deleted
# keys of the next delta (each owner records its own sweeps). The chain up
# to the export after day 6 is the model that scored day 7 before training
# on it, so strata eval of that chain on day 7 must give the job's own day-7
# slice AUC and logloss: a deletion missing from a delta would leave the
# evicted row's old value in the chain, where the job read zeros. (Within
# 2e-4: the job's slice metrics come from the two ranks' gathered
# predictions, summed in another order; an ASan run differed by 5e-5.) 20,000
# rows a day (78 steps of 256 > the TTL of 40 batches) so that rows expire
# within a day.
mkdir -p "$tmp/ttl" && (cd "$tmp/ttl" && timeout 180 "$strata" launch -n 2 "$root/jobs/online_days.lua" \
  --quiet --no-pin --set data.generate.rows=160000 --set data.generate.vocab=20000 \
  --set stages.read.threads=1 --set stages.read.batch_size=256 --set stages.train.workers=1 \
  --set model.ttl=40 >log 2>&1); trc=$?
XT=$tmp/ttl/out/online/export
ndel=0
for e in "$XT"/export-*-delta; do
  n=$("$strata" inspect "$e" 2>/dev/null | grep -o '[0-9]* deleted keys' | head -n 1 | grep -o '^[0-9]*')
  [ "${n:-0}" -gt 0 ] && ndel=$((ndel + 1))
done
mkdir -p "$tmp/ttl6" && cp -r "$XT" "$tmp/ttl6/" && rm -rf "$tmp/ttl6/export/export-000000000007-delta"
"$strata" eval "$tmp/ttl6/export" "$tmp/ttl/data/online/day-007.tsv" >"$tmp/out_t6" 2>&1
ev=$(grep -o '^auc [0-9.]*  logloss [0-9.]*' "$tmp/out_t6")
sl=$(grep '^  day-007 ' "$tmp/ttl/log" | awk '{ print $3, $4 }')
if [ $trc = 0 ] && [ $ndel -ge 5 ] && [ -n "$ev" ] && [ -n "$sl" ] &&
   awk -v a="$(echo "$ev" | awk '{ print $2 }')" -v b="${sl% *}" -v c="$(echo "$ev" | awk '{ print $4 }')" \
     -v d="${sl#* }" 'BEGIN { exit !(a - b <= 2e-4 && b - a <= 2e-4 && c - d <= 2e-4 && d - c <= 2e-4) }'; then
  ok "TTL on 2 processes: $ndel deltas delete expired keys; the chain after day 6 scores day 7 as the job did ($sl)"
else
  cp "$tmp/ttl/log" "$tmp/out_ttl_job" 2>/dev/null   # for bad() to show, with out_t6
  bad "TTL deltas on 2 processes (exit $trc): $ndel deltas with deletions, chain eval '$ev' vs job '$sl'"
  rm -f "$tmp/out_ttl_job"
fi

# A delta missing rank 1's shard: incomplete; the chain ends before it.
cp -r "$X2" "$tmp/g"
rm "$tmp/g/export-000000000005-delta/table-0.rank-1-of-2.rows"
"$strata" inspect "$tmp/g/export-000000000005-delta" >"$tmp/out_gi" 2>&1
"$strata" inspect "$tmp/g" >"$tmp/out_gr" 2>&1
"$strata" predict "$tmp/g" "$day7" --out "$tmp/qg" >"$tmp/out_gp" 2>&1; grc=$?
if grep -q "complete: no (rank 1's shard: file 'table-0.rank-1-of-2.rows': missing)" "$tmp/out_gi" &&
   grep -q "exports in apply order (verified): 5" "$tmp/out_gr" &&
   grep -q "export-000000000005-delta: file 'table-0.rank-1-of-2.rows': missing — the chain ends" "$tmp/out_gr" &&
   [ $grc = 1 ] && grep -q "export export-000000000005-delta: file 'table-0.rank-1-of-2.rows': missing" "$tmp/out_gp" &&
   [ ! -e "$tmp/qg" ]; then
  ok "an export missing a rank's shard: incomplete, out of the verified chain, refused by predict"
else
  bad "export missing a shard (predict exit $grc)"
fi

# Ranks that do not share the export folder: rank 1 cannot join rank 0's
# export; nothing is published.
p=$(port)
pids=()
for r in 0 1; do
  STRATA_RANK=$r STRATA_WORLD_SIZE=2 STRATA_COORDINATOR=127.0.0.1:$p STRATA_TOKEN=apart \
    timeout 120 "$strata" run "${base[@]}" "${ar[@]}" "${two[@]}" \
    --set "export={dir=\"$tmp/n$r\"}" >"$tmp/out_n$r" 2>&1 &
  pids+=($!)
done
wait "${pids[0]}"; n0=$?
wait "${pids[1]}"
pids=()
if [ $n0 != 0 ] && [ -z "$(ls "$tmp/n0" 2>/dev/null)" ] &&
   grep -q "the ranks of a job must share the export folder" "$tmp/out_n1" &&
   grep -q "rank 1 could not write its shard (see its messages); the export is not published" "$tmp/out_n0"; then
  ok "a rank that cannot write its shard: no export is published (and it says why)"
else
  bad "unshared export folder: rank 0 exit $n0, $(ls "$tmp/n0" 2>&1 | tr '\n' ' ')"
fi

echo "dist_export: $pass passed, $fail failed"
[ $fail -eq 0 ]
