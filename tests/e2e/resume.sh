#!/usr/bin/env bash
# Crash-safe checkpoints and resume, end to end: a deterministic job (one
# read thread, one worker, allreduce, fixed seed) killed with SIGKILL at
# random moments (at least 20 kills that land while it runs) and resumed each
# time ends with exactly the same parameters — the same dense.safetensors
# and row files, byte for byte — as an uninterrupted run. Also: a damaged
# newest checkpoint is skipped with a message (also when the damage is at
# the end of a row file, found only after its rows were loaded: the model
# is then exactly the older checkpoint's), an incompatible job is
# refused naming the mismatch, an unwritable checkpoint dir is refused
# before training. Usage: resume.sh PATH/TO/strata
set -u
strata=$1
root=${ST_SOURCE_ROOT:?}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$root"
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; [ -f "$tmp/out" ] && sed 's/^/     | /' "$tmp/out" | tail -n 15; }

"$strata" gen --rows 60000 --eval-rows 2000 --files 2 --vocab 20000 --seed 5 --out "$tmp/d" >/dev/null 2>&1 ||
  { echo "FAIL gen"; exit 1; }
args=(tests/e2e/jobs/gen_dnn.lua --quiet --no-pin
  --set 'data.generate=nil' --set "data.train.path=\"$tmp/d/train-*.tsv\""
  --set "data.eval.path=\"$tmp/d/eval.tsv\"" --set 'sync=st.sync.allreduce{}'
  --set stages.read.batch_size=512 --set stages.train.minibatch=256
  --set stages.read.threads=1 --set stages.train.workers=1 --set seed=11)

# The uninterrupted run.
"$strata" run "${args[@]}" --set "checkpoint={dir=\"$tmp/a\",every=4}" >"$tmp/out" 2>&1 ||
  { bad "uninterrupted run"; exit 1; }
final=$(ls "$tmp/a" | grep '^ckpt-' | tail -n 1)

# Killed and resumed until done. RANDOM is seeded so a failure replays.
RANDOM=${ST_RESUME_SEED:-7}
kills=0 runs=0
while [ $kills -lt 20 ] && [ $runs -lt 200 ]; do
  runs=$((runs + 1))
  "$strata" run "${args[@]}" --set "checkpoint={dir=\"$tmp/b\",every=4,keep=2}" --resume \
    >"$tmp/out" 2>&1 &
  pid=$!
  sleep "0.$((RANDOM % 9 + 1))$((RANDOM % 10))"
  if kill -9 "$pid" 2>/dev/null; then kills=$((kills + 1)); fi
  wait "$pid" 2>/dev/null
  # A kill after the run ended: start over on a fresh directory so that
  # every kill counts against a run still in progress.
  if [ -d "$tmp/b/$final" ] && [ $kills -lt 20 ]; then rm -rf "$tmp/b"; fi
done
# Damage the newest checkpoint: the next resume must fall back past it.
# That needs an older complete one to fall back to (with every checkpoint
# damaged, --resume stops instead: issue 15). A slow build (ASan) may have
# left only one: resume until a second is complete, then stop there.
nckpt() { ls "$tmp/b" 2>/dev/null | grep -c '^ckpt-[0-9]*$'; }
if [ "$(nckpt)" -lt 2 ] && [ ! -d "$tmp/b/$final" ]; then
  "$strata" run "${args[@]}" --set "checkpoint={dir=\"$tmp/b\",every=4,keep=2}" --resume \
    >"$tmp/out" 2>&1 &
  pid=$!
  while kill -0 "$pid" 2>/dev/null && [ "$(nckpt)" -lt 2 ]; do sleep 0.05; done
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
fi
newest=$(ls "$tmp/b" 2>/dev/null | grep '^ckpt-[0-9]*$' | tail -n 1)
if [ -n "$newest" ] && [ "$newest" != "$final" ]; then
  printf 'x' | dd of="$tmp/b/$newest/table-0.rows" bs=1 seek=100 conv=notrunc 2>/dev/null
  "$strata" run "${args[@]}" --set "checkpoint={dir=\"$tmp/b\",every=4,keep=2}" --resume \
    >"$tmp/out" 2>&1
  rc=$?
  if [ $rc -eq 0 ] && grep -q "checksum mismatch" "$tmp/out" && grep -q "falling back" "$tmp/out"; then
    ok "a damaged newest checkpoint is skipped with a message"
  else
    bad "fallback past a damaged checkpoint (exit $rc)"
  fi
else
  "$strata" run "${args[@]}" --set "checkpoint={dir=\"$tmp/b\",every=4,keep=2}" --resume \
    >"$tmp/out" 2>&1
fi
if [ $kills -ge 20 ] && [ -d "$tmp/b/$final" ] &&
   cmp -s "$tmp/a/$final/dense.safetensors" "$tmp/b/$final/dense.safetensors" &&
   cmp -s "$tmp/a/$final/table-0.rows" "$tmp/b/$final/table-0.rows"; then
  ok "$kills SIGKILLs and resumes end with the uninterrupted run's parameters ($runs runs)"
else
  bad "killed+resumed ($kills kills, $runs runs) differs from uninterrupted ($final): $(ls "$tmp/b")"
fi

# kstep keeps replicas of the dense parameters and Adam moments of its own:
# a resumed run restarts them from the checkpoint (the mean of the replicas
# and of their moments) and continues its k-step clock from the restored
# step count. With one worker the replica is the model, so a resume from a
# checkpoint in the middle of a k-step cycle (45 batches = 90 steps, k = 4)
# ends byte for byte as the uninterrupted run; with two workers the first
# moments (each worker's own) come back as their mean: within 0.001 AUC.
ks=(--set 'sync=st.sync.kstep{k=4}' --set "data.train.limit=40000")
for w in 1 2; do
  rm -rf "${tmp:?}/k1" "$tmp/k2"
  "$strata" run "${args[@]}" "${ks[@]}" --set stages.train.workers=$w \
    --set "checkpoint={dir=\"$tmp/k1\",every=3,keep=0}" >"$tmp/out_k1" 2>&1
  kfinal=$(ls "$tmp/k1" | grep '^ckpt-' | tail -n 1)
  mkdir -p "$tmp/k2"; cp -r "$tmp/k1/ckpt-000000000045" "$tmp/k2/" 2>/dev/null
  "$strata" run "${args[@]}" "${ks[@]}" --set stages.train.workers=$w \
    --set "checkpoint={dir=\"$tmp/k2\",every=3,keep=0}" --resume >"$tmp/out" 2>&1
  a1=$(grep -o 'eval *auc [0-9.]*' "$tmp/out_k1" | grep -o '[0-9.]*$')
  a2=$(grep -o 'eval *auc [0-9.]*' "$tmp/out" | grep -o '[0-9.]*$')
  if [ $w = 1 ]; then
    if grep -q "resuming from .*ckpt-000000000045" "$tmp/out" && [ -n "$kfinal" ] &&
       cmp -s "$tmp/k1/$kfinal/dense.safetensors" "$tmp/k2/$kfinal/dense.safetensors" &&
       cmp -s "$tmp/k1/$kfinal/table-0.rows" "$tmp/k2/$kfinal/table-0.rows"; then
      ok "kstep, 1 worker: resumed mid-cycle, the uninterrupted run's parameters byte for byte"
    else
      bad "kstep, 1 worker: resume differs from the uninterrupted run ($kfinal; auc $a2 vs $a1)"
    fi
  elif grep -q "resuming from .*ckpt-000000000045" "$tmp/out" && [ -n "$a1" ] && [ -n "$a2" ] &&
       awk -v a="$a1" -v b="$a2" 'BEGIN { d = a - b; exit !(d < 0.001 && d > -0.001) }'; then
    ok "kstep, 2 workers: resumed, eval auc $a2 ($a1 uninterrupted)"
  else
    bad "kstep, 2 workers: resumed eval auc '$a2' vs '$a1'"
  fi
done

# Damage at the end of a row file: the last float before the footer. A
# restore hashes row files while it loads them (docs/operations.md,
# "Restore in one pass"), so it finds this only after every row of the file went into
# the table; it must empty the table and fall back, and the run must end
# exactly as a resume from the older checkpoint alone (STRATA_DIGEST: every
# row and the dense parameters; the final files byte for byte): no row of
# the damaged checkpoint may survive.
flip() { # flip(file, offset from the end): xor one byte with 1
  local size off b
  size=$(stat -c %s "$1"); off=$((size - $2))
  b=$(od -An -tu1 -j "$off" -N1 "$1" | tr -d ' ')
  printf "$(printf '\\x%02x' $((b ^ 1)))" | dd of="$1" bs=1 seek="$off" conv=notrunc 2>/dev/null
}
short=(--set data.train.limit=30000)
"$strata" run "${args[@]}" "${short[@]}" --set "checkpoint={dir=\"$tmp/e\",every=4,keep=0}" \
  >"$tmp/out_e" 2>&1
mapfile -t ecks < <(ls "$tmp/e" | grep '^ckpt-[0-9]*$')
n=${#ecks[@]}
if [ "$n" -ge 3 ]; then
  efinal=${ecks[n - 1]} enew=${ecks[n - 2]} eold=${ecks[n - 3]}
  rm -rf "$tmp/e1" "$tmp/e2"; mkdir -p "$tmp/e1" "$tmp/e2"
  cp -r "$tmp/e/$eold" "$tmp/e/$enew" "$tmp/e1/"
  cp -r "$tmp/e/$eold" "$tmp/e2/"
  flip "$tmp/e1/$enew/table-0.rows" 33
  STRATA_DIGEST=1 "$strata" run "${args[@]}" "${short[@]}" \
    --set "checkpoint={dir=\"$tmp/e1\",every=4,keep=0}" --resume >"$tmp/out" 2>&1
  rc1=$?
  STRATA_DIGEST=1 "$strata" run "${args[@]}" "${short[@]}" \
    --set "checkpoint={dir=\"$tmp/e2\",every=4,keep=0}" --resume >"$tmp/out_e2" 2>&1
  d1=$(grep -o 'digest [0-9a-f]*' "$tmp/out") d2=$(grep -o 'digest [0-9a-f]*' "$tmp/out_e2")
  if [ $rc1 -eq 0 ] && [ -n "$d1" ] && [ "$d1" = "$d2" ] &&
     grep -q "checkpoint $enew: file 'table-0.rows': checksum mismatch (the manifest says xxh3 [0-9a-f]*, the file hashes to [0-9a-f]*) — falling back to $eold" "$tmp/out" &&
     grep -q "resuming from .*$eold" "$tmp/out" &&
     cmp -s "$tmp/e/$efinal/table-0.rows" "$tmp/e1/$efinal/table-0.rows" &&
     cmp -s "$tmp/e/$efinal/dense.safetensors" "$tmp/e1/$efinal/dense.safetensors"; then
    ok "damage at the end of a row file: found after loading, fell back, the older checkpoint's model ($d1)"
  else
    bad "damage at the end of a row file (exit $rc1): '$d1' vs '$d2' from $eold alone"
  fi
else
  bad "damage at the end of a row file: $n checkpoints written, 3 needed"
fi

# Refusals.
"$strata" run "${args[@]}" --set "checkpoint={dir=\"$tmp/a\"}" --resume \
  --set 'model=st.model.dnn{emb_dim=8,hidden={32}}' >"$tmp/out" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q "hidden=64,32" "$tmp/out" && grep -q "hidden=32" "$tmp/out"; then
  ok "an incompatible job is refused, naming the mismatch"
else
  bad "incompatible job (exit $rc)"
fi
"$strata" run "${args[@]}" --set 'checkpoint={dir="/proc/strata-no"}' >"$tmp/out" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q "checkpoint.dir /proc/strata-no" "$tmp/out" && ! grep -q "examples in" "$tmp/out"; then
  ok "an unwritable checkpoint dir is refused before training"
else
  bad "unwritable checkpoint dir (exit $rc)"
fi

"$strata" run "${args[@]}" --set "checkpoint={dir=\"$tmp/p\"}" --set stages.pull.threads=2 \
  >"$tmp/out" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q "checkpoint needs stages.pull.threads = 1" "$tmp/out"; then
  ok "checkpoints with several pull threads are refused, not written inconsistent"
else
  bad "checkpoint with 2 pull threads (exit $rc)"
fi

# Disk full while writing checkpoints (a file-size limit makes the later,
# larger checkpoints fail with EFBIG): the job reports each failure and
# keeps training, the earlier checkpoints stay complete and usable, no
# half-written directory is left.
(trap '' XFSZ; ulimit -f 6000; exec "$strata" run "${args[@]}" \
  --set "checkpoint={dir=\"$tmp/c\",every=4,keep=0}") >"$tmp/out" 2>&1
rc=$?
good=$(ls "$tmp/c" 2>/dev/null | grep -c '^ckpt-[0-9]*$')
newest=$(ls "$tmp/c" 2>/dev/null | grep '^ckpt-[0-9]*$' | tail -n 1)
if [ $rc -eq 1 ] && grep -q "not written" "$tmp/out" && grep -q "training goes on" "$tmp/out" &&
   grep -q "examples in" "$tmp/out" && [ "$good" -ge 1 ] &&
   [ "$(ls "$tmp/c" | grep -c tmp)" -eq 0 ] &&
   "$strata" inspect "$tmp/c/$newest" 2>&1 | grep -q "verified: all"; then
  ok "disk full during checkpoints: reported, training went on, $good earlier checkpoints intact"
else
  bad "disk full during checkpoints (exit $rc, $good complete: $(ls "$tmp/c" 2>&1 | tr '\n' ' '))"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
