#!/usr/bin/env bash
# Multi-hot list fields through the store, checkpoints and serving (issue
# 18), end to end, with a deterministic job (allreduce, one worker, one read
# thread, fixed seed) on `strata gen --multi-hot` data read as 26 mean-pooled
# list fields by a dnn:
#  - the SSD tier (a RAM budget far below the table) trains the same model as
#    RAM alone: the same eval AUC and the same final dense.safetensors;
#  - --resume from a checkpoint in the middle, with the SSD tier, ends with
#    the uninterrupted run's dense.safetensors and rows, byte for byte;
#  - the export scores with `strata predict --job` / `strata eval --job` as
#    the job itself did (its eval AUC).
# Usage: mhot_store.sh PATH/TO/strata
set -u
strata=$1
root=${ST_SOURCE_ROOT:?}
tmp=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
cd "$root"
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; for f in "$tmp"/out*; do [ -f "$f" ] && { echo "     == $f"; tail -n 8 "$f" | sed 's/^/     | /'; }; done; }
auc() { grep -o 'eval *auc [0-9.]*' "$1" | grep -o '[0-9.]*$'; }

job=(tests/e2e/jobs/gen_multihot.lua --quiet --no-pin
  --set "data.generate.dir=\"$tmp/d\"" --set "data.train.path=\"$tmp/d/train-*.tsv\""
  --set "data.eval.path=\"$tmp/d/eval.tsv\"" --set data.generate.rows=30000
  --set data.generate.eval_rows=3000 --set data.generate.vocab=20000
  --set 'model=st.model.dnn{emb_dim=8, hidden={32}, pooling="mean", optimizer=st.optim.adam{lr=0.003}}'
  --set 'sync=st.sync.allreduce{}' --set stages.read.batch_size=64 --set stages.train.minibatch=64 --set seed=7)
ssd() { mkdir -p "$1"; echo "storage={mem=\"24MiB\", ssd={path=\"$1\", file_size=\"1MiB\"}}"; }

# RAM only, then the SSD tier: the same model.
"$strata" run "${job[@]}" --set "checkpoint={dir=\"$tmp/ram\",every=1000}" >"$tmp/out_ram" 2>&1
"$strata" run "${job[@]}" --set "$(ssd "$tmp/ssd_a")" \
  --set "checkpoint={dir=\"$tmp/a\",every=100,keep=0}" --set "export={dir=\"$tmp/x\"}" \
  --metrics "$tmp/m_a.jsonl" >"$tmp/out_a" 2>&1; arc=$?
# rows the RAM budget pushed out to SSD and read back (the tier's files are
# gone once the run closes it)
spilled=$(tail -n 1 "$tmp/m_a.jsonl" 2>/dev/null | grep -o '"ssd.rows_read":[0-9]*' | grep -o '[0-9]*$')
final=$(ls "$tmp/a" 2>/dev/null | grep '^ckpt-[0-9]*$' | tail -n 1)
rfinal=$(ls "$tmp/ram" 2>/dev/null | grep '^ckpt-[0-9]*$' | tail -n 1)
if [ $arc = 0 ] && [ -n "$final" ] && [ "$final" = "$rfinal" ] && [ -n "$(auc "$tmp/out_a")" ] &&
   [ "$(auc "$tmp/out_a")" = "$(auc "$tmp/out_ram")" ] &&
   cmp -s "$tmp/a/$final/dense.safetensors" "$tmp/ram/$rfinal/dense.safetensors" &&
   [ "${spilled:-0}" -gt 1000 ]; then
  ok "multi-hot lists through the SSD tier ($spilled rows read back) train the RAM-only model, byte for byte (eval auc $(auc "$tmp/out_a"))"
else
  bad "multi-hot with the SSD tier (exit $arc, $final vs $rfinal, ${spilled:-no} rows read back, auc '$(auc "$tmp/out_a")' vs '$(auc "$tmp/out_ram")')"
fi

# Resume from the middle with the SSD tier: byte for byte the same model.
mid=$(ls "$tmp/a" 2>/dev/null | grep '^ckpt-[0-9]*$' | head -n 2 | tail -n 1)
mkdir -p "$tmp/b"; [ -n "$mid" ] && cp -r "$tmp/a/$mid" "$tmp/b/"
"$strata" run "${job[@]}" --set "$(ssd "$tmp/ssd_b")" \
  --set "checkpoint={dir=\"$tmp/b\",every=100,keep=0}" --resume >"$tmp/out_b" 2>&1; brc=$?
if [ $brc = 0 ] && [ -n "$mid" ] && grep -q "resuming from .*$mid" "$tmp/out_b" &&
   cmp -s "$tmp/a/$final/dense.safetensors" "$tmp/b/$final/dense.safetensors" &&
   cmp -s "$tmp/a/$final/table-0.rows" "$tmp/b/$final/table-0.rows"; then
  ok "multi-hot: resumed from $mid with the SSD tier, the uninterrupted model byte for byte"
else
  bad "multi-hot resume (exit $brc, from '$mid')"
fi

# The export, scored by one process with the job's readers.
"$strata" eval "$tmp/x" "$tmp/d/eval.tsv" --job tests/e2e/jobs/gen_multihot.lua >"$tmp/out_e" 2>&1; erc=$?
"$strata" predict "$tmp/x" "$tmp/d/eval.tsv" --job tests/e2e/jobs/gen_multihot.lua \
  --out "$tmp/p" >"$tmp/out_p" 2>&1; prc=$?
ea=$(grep -o '^auc [0-9.]*' "$tmp/out_e"); ea=${ea#auc }
if [ $erc = 0 ] && [ $prc = 0 ] && [ "$(wc -l <"$tmp/p")" = 3000 ] && [ -n "$ea" ] &&
   awk -v x="$ea" -v y="$(auc "$tmp/out_a")" 'BEGIN { d = x - y; exit !(y != "" && d <= 0.0000506 && d >= -0.0000506) }'; then
  ok "multi-hot export: strata eval --job gives the job's eval auc ($ea), predict scores every row"
else
  bad "multi-hot export (eval exit $erc, predict exit $prc, auc '$ea' vs '$(auc "$tmp/out_a")')"
fi

echo "mhot_store: $pass passed, $fail failed"
[ $fail -eq 0 ]
