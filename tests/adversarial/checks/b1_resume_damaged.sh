#!/usr/bin/env bash
# --resume with every checkpoint damaged (issue 15) stops with an error that
# names each checkpoint and what failed, trains nothing and leaves the
# directory exactly as it was, also with `resume = true` in the job; it no
# longer starts from scratch and overwrites them. --resume=fresh-if-damaged
# moves them aside (ckpt-<step>.damaged) and starts from the beginning. No
# checkpoint at all + --resume still starts from the beginning.
# Usage: bash b1_resume_damaged.sh STRATA TMPDIR (from the source root).
set -u
strata=$1 tmp=$2
fail=0
bad() { fail=1; echo "FAIL $1"; sed 's/^/     | /' "$tmp/out" | tail -n 14; }
ok() { echo "ok   $1"; }

"$strata" gen --rows 12000 --eval-rows 1000 --files 2 --vocab 20000 --seed 5 --out "$tmp/d" \
  >/dev/null 2>&1 || { echo "gen failed"; exit 1; }
ck=$tmp/ck
args=(tests/e2e/jobs/gen_dnn.lua --quiet --no-pin --set 'data.generate=nil'
  --set "data.train.path=\"$tmp/d/train-*.tsv\"" --set "data.eval.path=\"$tmp/d/eval.tsv\""
  --set stages.read.batch_size=1024 --set "checkpoint={dir=\"$ck\",every=4}")
state() { (cd "$ck" && find . | sort && find . -type f | sort | xargs md5sum); }

# No checkpoint at all: --resume starts from the beginning and says so.
"$strata" run "${args[@]}" --resume >"$tmp/out" 2>&1
rc=$?
if [ $rc = 0 ] && grep -q "no checkpoint to resume from in $ck" "$tmp/out" &&
   grep -q "starting from the beginning" "$tmp/out"; then
  ok "no checkpoint: --resume starts from the beginning"
else
  bad "no checkpoint (exit $rc)"
fi
ckpts=$(ls "$ck" | grep -c '^ckpt-[0-9]*$')
[ "$ckpts" -ge 3 ] || { bad "expected 3 checkpoints, got $ckpts"; exit 1; }

# Damage every one, three ways: a flipped byte, a cut file, no manifest.
set -- $(ls "$ck" | grep '^ckpt-[0-9]*$' | tail -n 3)
printf 'x' | dd of="$ck/$1/table-0.rows" bs=1 seek=100 conv=notrunc 2>/dev/null
truncate -s 50 "$ck/$2/dense.safetensors"
rm "$ck/$3/manifest.yaml"
c1=$1 c2=$2 c3=$3
state >"$tmp/before"
for how in --resume "--set resume=true"; do
  # shellcheck disable=SC2086
  "$strata" run "${args[@]}" $how >"$tmp/out" 2>&1
  rc=$?
  state >"$tmp/after"
  if [ $rc = 1 ] && cmp -s "$tmp/before" "$tmp/after" &&
     grep -q "cannot resume: $ck: 3 checkpoints, none usable" "$tmp/out" &&
     grep -q "$c1: file 'table-0.rows': checksum mismatch" "$tmp/out" &&
     grep -q "$c2: file 'dense.safetensors': size mismatch" "$tmp/out" &&
     grep -q "$c3: manifest.yaml is missing" "$tmp/out" &&
     grep -q "fresh-if-damaged" "$tmp/out" && ! grep -q "examples in" "$tmp/out"; then
    ok "every checkpoint damaged ($how): exit 1 naming each, nothing trained, nothing changed"
  else
    bad "every checkpoint damaged, $how (exit $rc; changed: $(diff "$tmp/before" "$tmp/after" | head -n 3 | tr '\n' ' '))"
  fi
done

# Asked for: moved aside, then a fresh start whose checkpoints retention keeps.
"$strata" run "${args[@]}" --resume=fresh-if-damaged >"$tmp/out" 2>&1
rc=$?
aside=$(ls "$ck" | grep -c '^ckpt-[0-9]*\.damaged$')
newest=$(ls "$ck" | grep '^ckpt-[0-9]*$' | tail -n 1)
if [ $rc = 0 ] && [ "$aside" = 3 ] && grep -q "starting from the beginning" "$tmp/out" &&
   grep -q "eval  *auc" "$tmp/out" && [ -n "$newest" ] &&
   "$strata" inspect "$ck/$newest" >/dev/null 2>&1 && [ -f "$ck/$c3.damaged/dense.safetensors" ]; then
  ok "--resume=fresh-if-damaged: the damaged ones moved aside, a fresh run"
else
  bad "--resume=fresh-if-damaged (exit $rc, $aside aside: $(ls "$ck" | tr '\n' ' '))"
fi

"$strata" run "${args[@]}" --resume=maybe >"$tmp/out" 2>&1
rc=$?
if [ $rc = 2 ] && grep -q "resume takes no value or =fresh-if-damaged" "$tmp/out"; then
  ok "--resume=VALUE other than fresh-if-damaged is a usage error"
else
  bad "--resume=maybe (exit $rc)"
fi
exit $fail
