#!/usr/bin/env bash
# Compact rows (storage.row_precision, issue 20), end to end, with a
# deterministic job (allreduce, one worker, one read thread, fixed seed) on
# generated data with a held-out eval file:
#  - bf16 and fp16 rows train a model whose held-out AUC (strata eval of the
#    export, 6 digits) is within 0.001 of the fp32 rows' model;
#  - the rows really are compact: every embedding value of the bf16 run's
#    checkpoint has zero low 16 bits, every one of the fp16 run's is an fp16
#    value, and the optimizer state is not rounded (fp32);
#  - bf16 rows through the SSD tier (a RAM budget far below the table) train
#    the RAM-only bf16 model byte for byte (checkpointed rows and dense);
#  - --resume of a bf16 + SSD job from a checkpoint in the middle ends with
#    the uninterrupted run's rows and dense byte for byte;
#  - an fp32 checkpoint resumes into a bf16 job (rows rounded) and a bf16
#    checkpoint into an fp32 job;
#  - strata check refuses an unknown precision and a multi-process job with
#    compact rows, naming the job file and line.
# Usage: compact_rows.sh PATH/TO/strata
set -u
strata=$1
root=${ST_SOURCE_ROOT:?}
tmp=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
cd "$root"
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; for f in "$tmp"/out*; do [ -f "$f" ] && { echo "     == $f"; tail -n 6 "$f" | sed 's/^/     | /'; }; done; }
# The row-value checks read the checkpoint with python3 (meson needs it, so it is
# there wherever the suite runs); without it the script fails, not skips.
py=$(command -v python3) || { echo "FAIL python3 not found (needed to read checkpointed rows)"; exit 1; }

job=(tests/e2e/jobs/gen_dnn.lua --quiet --no-pin
  --set "data.generate.dir=\"$tmp/d\"" --set "data.train.path=\"$tmp/d/train-*.tsv\""
  --set "data.eval.path=\"$tmp/d/eval.tsv\"" --set data.generate.rows=300000
  --set data.generate.eval_rows=50000 --set data.generate.vocab=50000
  --set 'model=st.model.dnn{emb_dim=16, hidden={64,32}, optimizer=st.optim.adagrad{lr=0.05, rowwise=true}}'
  --set 'sync=st.sync.allreduce{}' --set stages.read.batch_size=2048 --set seed=7)
prec() {  # PREC [SSD_DIR]: the storage section (with an SSD tier far below the table)
  if [ -n "${2:-}" ]; then
    mkdir -p "$2"
    echo "storage={row_precision=\"$1\", mem=\"4MiB\", ssd={path=\"$2\", file_size=\"1MiB\"}}"
  else
    echo "storage={row_precision=\"$1\"}"
  fi
}
last() { ls "$1" 2>/dev/null | grep '^ckpt-[0-9]*$' | tail -n 1; }
eval_auc() { "$strata" eval "$1" "$tmp/d/eval.tsv" --job tests/e2e/jobs/gen_dnn.lua 2>/dev/null |
  grep -o '^auc [0-9.]*' | grep -o '[0-9.]*$'; }

# fp32, bf16, fp16 rows: the held-out AUC of each export.
declare -A auc rc
for p in fp32 bf16 fp16; do
  "$strata" run "${job[@]}" --set "$(prec $p)" --set "checkpoint={dir=\"$tmp/c_$p\",every=10,keep=0}" \
    --set "export={dir=\"$tmp/x_$p\"}" >"$tmp/out_$p" 2>&1; rc[$p]=$?
  auc[$p]=$(eval_auc "$tmp/x_$p")
done
for p in bf16 fp16; do
  if [ "${rc[$p]}" = 0 ] && [ "${rc[fp32]}" = 0 ] && [ -n "${auc[$p]}" ] && [ -n "${auc[fp32]}" ] &&
     awk -v x="${auc[$p]}" -v y="${auc[fp32]}" 'BEGIN { d = x - y; exit !(d <= 0.001 && d >= -0.001) }'; then
    ok "$p rows: held-out auc ${auc[$p]}, fp32 rows ${auc[fp32]} (within 0.001)"
  else
    bad "$p rows auc (exit ${rc[$p]}, auc '${auc[$p]}' vs fp32 '${auc[fp32]}')"
  fi
done

# The checkpointed rows hold compact values; the state is fp32.
check_rows() {  # FILE PREC: 0 when every emb value is PREC-exact and some state is not
  "$py" - "$1" "$2" <<'EOF'
import struct, sys
b = open(sys.argv[1], "rb").read()
magic, ver, flags, tid, dim, sdim, n, nd, _, hsum = struct.unpack_from("<8sIIQIIQQQQ", b)
assert magic == b"STRATARW" and n > 1000, "not a row file with rows"
rec, emb_ok, state_fp32 = 16 + 4 * (dim + sdim), True, False
for off in range(64, 64 + min(n, 20000) * rec, rec):   # the first 20000 rows: enough, and quick
    w = struct.unpack_from("<%dI" % (dim + sdim), b, off + 16)
    for x in w[:dim]:
        if sys.argv[2] == "bf16":
            emb_ok &= (x & 0xffff) == 0
        else:
            f = struct.unpack("<f", struct.pack("<I", x))[0]
            emb_ok &= struct.unpack("<e", struct.pack("<e", f))[0] == f
    state_fp32 |= any(x & 0xffff for x in w[dim:])
sys.exit(0 if emb_ok and state_fp32 else 1)
EOF
}
for p in bf16 fp16; do
  f="$tmp/c_$p/$(last "$tmp/c_$p")/table-0.rows"
  check_rows "$f" $p; crc=$?
  if [ $crc = 0 ]; then
    ok "$p rows: every checkpointed embedding value is a $p value, the state is fp32"
  else
    bad "$p row values in $f"
  fi
done
check_rows "$tmp/c_fp32/$(last "$tmp/c_fp32")/table-0.rows" bf16
if [ $? = 1 ]; then ok "fp32 rows are not bf16 values (the check can fail)"; else bad "fp32 rows look like bf16"; fi

# The byte-for-byte checks below need no held-out AUC: they run on a fifth
# of the data (60000 rows, 29 steps, checkpoints after steps 10, 20, 29),
# which keeps this script's time in the sanitizer builds down; s_bf16 and
# s_fp32 are their references.
sm=("${job[@]}" --set "data.generate.dir=\"$tmp/s\"" --set "data.train.path=\"$tmp/s/train-*.tsv\""
  --set "data.eval.path=\"$tmp/s/eval.tsv\"" --set data.generate.rows=60000
  --set data.generate.eval_rows=5000)
for p in bf16 fp32; do
  "$strata" run "${sm[@]}" --set "$(prec $p)" --set "checkpoint={dir=\"$tmp/s_$p\",every=10,keep=0}" \
    >"$tmp/out_s_$p" 2>&1 || bad "the $p run on the small data (exit $?)"
done

# bf16 rows through the SSD tier: the RAM-only bf16 model, byte for byte.
"$strata" run "${sm[@]}" --set "$(prec bf16 "$tmp/ssd_a")" \
  --set "checkpoint={dir=\"$tmp/a\",every=10,keep=0}" --metrics "$tmp/m_a.jsonl" >"$tmp/out_a" 2>&1; arc=$?
spilled=$(tail -n 1 "$tmp/m_a.jsonl" 2>/dev/null | grep -o '"ssd.rows_read":[0-9]*' | grep -o '[0-9]*$')
fa=$(last "$tmp/a"); fr=$(last "$tmp/s_bf16")
if [ $arc = 0 ] && [ -n "$fa" ] && [ "$fa" = "$fr" ] && [ "${spilled:-0}" -gt 1000 ] &&
   cmp -s "$tmp/a/$fa/table-0.rows" "$tmp/s_bf16/$fr/table-0.rows" &&
   cmp -s "$tmp/a/$fa/dense.safetensors" "$tmp/s_bf16/$fr/dense.safetensors"; then
  ok "bf16 rows through the SSD tier ($spilled rows read back) train the RAM-only bf16 model, byte for byte"
else
  bad "bf16 with the SSD tier (exit $arc, $fa vs $fr, ${spilled:-no} rows read back)"
fi

# Resume a bf16 + SSD job from the middle: the uninterrupted run, byte for byte.
mid=$(ls "$tmp/a" 2>/dev/null | grep '^ckpt-[0-9]*$' | head -n 2 | tail -n 1)
mkdir -p "$tmp/b"; [ -n "$mid" ] && cp -r "$tmp/a/$mid" "$tmp/b/"
"$strata" run "${sm[@]}" --set "$(prec bf16 "$tmp/ssd_b")" \
  --set "checkpoint={dir=\"$tmp/b\",every=10,keep=0}" --resume >"$tmp/out_b" 2>&1; brc=$?
if [ $brc = 0 ] && [ -n "$mid" ] && [ "$mid" != "$fa" ] && grep -q "resuming from .*$mid" "$tmp/out_b" &&
   cmp -s "$tmp/a/$fa/dense.safetensors" "$tmp/b/$fa/dense.safetensors" &&
   cmp -s "$tmp/a/$fa/table-0.rows" "$tmp/b/$fa/table-0.rows"; then
  ok "bf16 + SSD: resumed from $mid, the uninterrupted model byte for byte"
else
  bad "bf16 resume (exit $brc, from '$mid')"
fi

# Across precisions: an fp32 checkpoint into a bf16 job (rows rounded on
# restore), a bf16 checkpoint into an fp32 job (exact).
for pair in "fp32 bf16" "bf16 fp32"; do
  set -- $pair
  m=$(ls "$tmp/s_$1" 2>/dev/null | grep '^ckpt-[0-9]*$' | head -n 1)
  d="$tmp/cross_$1_$2"; mkdir -p "$d"; [ -n "$m" ] && cp -r "$tmp/s_$1/$m" "$d/"
  "$strata" run "${sm[@]}" --set "$(prec $2)" --set "checkpoint={dir=\"$d\",every=10,keep=0}" \
    --resume >"$tmp/out_cross" 2>&1; xrc=$?
  f="$d/$(last "$d")/table-0.rows"
  want=1; [ $2 = bf16 ] && want=0
  check_rows "$f" bf16; vrc=$?
  if [ $xrc = 0 ] && [ -n "$m" ] && grep -q "resuming from .*$m" "$tmp/out_cross" &&
     [ $vrc = $want ]; then
    ok "a $1 checkpoint resumes into a $2 job"
  else
    bad "$1 checkpoint into a $2 job (exit $xrc, from '$m', row check $vrc)"
  fi
done

# strata plan: bytes per row of the job's table (16 values + 1 row-wise
# AdaGrad float: 68 bytes in fp32, 32 + 4 in bf16) and rows per GiB.
"$strata" plan tests/e2e/jobs/gen_dnn.lua "${job[@]:3}" --set "$(prec bf16)" >"$tmp/out_plan" 2>&1; plc=$?
if [ $plc = 0 ] && grep -q 'storage.row_precision = bf16' "$tmp/out_plan" &&
   grep -Eq '^ +0 +16 +1 +26 +fp32 +68 ' "$tmp/out_plan" && grep -Eq '^ +bf16 +36 .*M' "$tmp/out_plan"; then
  ok "strata plan prints bytes per row and rows per GiB for fp32 and bf16"
else
  bad "strata plan rows (exit $plc): $(grep -A3 'embedding rows' "$tmp/out_plan" | tr '\n' '|')"
fi

# strata check: an unknown precision, and compact rows with multi-process.
"$strata" check tests/e2e/jobs/gen_dnn.lua --set 'storage={row_precision="fp8"}' >"$tmp/out_c1" 2>&1; c1=$?
"$strata" check tests/e2e/jobs/gen_dnn.lua --set 'storage={row_precision="bf16"}' \
  --set 'dist={owners=0}' >"$tmp/out_c2" 2>&1; c2=$?
if [ $c1 != 0 ] && grep -q 'row_precision' "$tmp/out_c1" && grep -q 'fp16' "$tmp/out_c1" &&
   [ $c2 != 0 ] && grep -q 'row_precision.*multi-process' "$tmp/out_c2"; then
  ok "strata check refuses row_precision 'fp8' and bf16 rows with a dist section"
else
  bad "strata check refusals (exit $c1, $c2)"
fi

echo "compact_rows: $pass passed, $fail failed"
[ $fail -eq 0 ]
