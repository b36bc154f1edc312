#!/usr/bin/env bash
# End-to-end tests of `strata inspect` on checkpoints and exports written by
# the real writers (mkckpt): the summary, damage (a flipped byte, a lost
# file, a truncated table) reported with exit 1, usage errors with exit 2.
# Usage: inspect.sh PATH/TO/strata PATH/TO/mkckpt
# Prints "N passed, N failed" and exits non-zero if anything failed.
set -u
strata=$1
mkckpt=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0

ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; [ -f "$tmp/out" ] && sed 's/^/     | /' "$tmp/out" | tail -n 30; }

# expect NAME CODE PATTERN... -- command...   (each PATTERN: grep -E over stdout+stderr)
expect() {
  local name=$1 code=$2; shift 2
  local pats=()
  while [ "$1" != "--" ]; do pats+=("$1"); shift; done
  shift
  "$@" >"$tmp/out" 2>&1
  local rc=$?
  if [ "$rc" -ne "$code" ]; then bad "$name (exit $rc, wanted $code)"; return; fi
  for pat in "${pats[@]}"; do
    if ! grep -Eq -- "$pat" "$tmp/out"; then bad "$name (no match for /$pat/)"; return; fi
  done
  ok "$name"
}

run="$tmp/run"
if ! "$mkckpt" "$run" >"$tmp/out" 2>&1; then
  bad "mkckpt writes the fixtures"
  echo "$pass passed, $fail failed"
  exit 1
fi
ck="$run/ckpt-000000002000"

expect "help inspect" 0 "usage: strata inspect PATH" -- "$strata" help inspect
expect "usage lists inspect" 0 "inspect PATH +summarize" -- "$strata" --help
expect "inspect without PATH" 2 "missing PATH" -- "$strata" inspect
expect "inspect two PATHs" 2 "expects one PATH" -- "$strata" inspect "$ck" "$ck"
expect "inspect bad option" 2 "unknown option '--frob'" -- "$strata" inspect --frob "$ck"
expect "inspect missing path" 2 "nope: no such file or directory" -- "$strata" inspect "$tmp/nope"
echo hello >"$tmp/hello.txt"
expect "inspect a foreign file" 2 "not a checkpoint, export, row or safetensors file" \
  -- "$strata" inspect "$tmp/hello.txt"
mkdir "$tmp/emptydir"
expect "inspect an empty directory" 2 "no checkpoint, export or manifest.yaml here" \
  -- "$strata" inspect "$tmp/emptydir"

expect "inspect a checkpoint" 0 \
  "^checkpoint .*/ckpt-000000002000$" \
  "job +fixture \(hash abc123\)" "model +dnn emb=8 mlp=\[16,1\]" "step +2000$" \
  "created +2024-05-01T12:00:00Z" "sync +gba \(round=3\)" \
  "data +shard 1: data/train-00001.tsv at byte 2048 \(12 records\)" \
  "dense.safetensors +[0-9]+ bytes +xxh3 [0-9a-f]{16} +ok$" \
  "mlp.0.weight +F32 +\[16, 8\]" "out.weight +F32 +\[1, 16\]" "total dense params: 160$" \
  "table-0.rows +table 0 +1000 rows +dim 8 +state_dim 8 +full" \
  "table-1.rows +table 1 +10 rows +dim 4 +state_dim 0 +full" \
  "verified: all 3 files match the manifest" \
  -- "$strata" inspect "$ck"
expect "inspect a delta export" 0 "^export-delta .*export-000000000001-delta" "seq +1$" \
  "table-0.rows +table 0 +5 rows .* delta" "3 deleted keys: 0000000000000001, 0000000000000002, 0000000000000003" \
  -- "$strata" inspect "$run/export-000000000001-delta"
expect "inspect a run directory" 0 "2 checkpoints" "ckpt-000000002000 +step 2000" \
  "exports in apply order \(verified\): 2" "export-000000000000-full +seq 0 +export-full" \
  "export-000000000001-delta +seq 1 +export-delta" -- "$strata" inspect "$run"
expect "inspect a row file" 0 "^row file " "table 0 +1000 rows" -- "$strata" inspect "$ck/table-0.rows"
expect "inspect a safetensors file" 0 "3 tensors, 160 params" -- "$strata" inspect "$ck/dense.safetensors"

# Damage: a flipped byte in a table, a lost dense file, a truncated table.
c1="$run/ckpt-000000001000"
printf '\x55' | dd of="$c1/table-1.rows" bs=1 seek=84 conv=notrunc status=none
expect "a flipped byte is reported" 1 "table-1.rows .* checksum mismatch" "DAMAGED: .*table-1.rows: checksum mismatch" \
  "DAMAGED: 2 problems" -- "$strata" inspect "$c1"
rm "$c1/dense.safetensors"
expect "a lost file is reported" 1 "file 'dense.safetensors': missing" -- "$strata" inspect "$c1"
truncate -s 1000 "$ck/table-0.rows"
expect "a truncated table is reported" 1 "size mismatch" \
  "table-0.rows: truncated: the header promises 1000 rows" -- "$strata" inspect "$ck"
expect "a truncated row file alone" 1 "truncated" -- "$strata" inspect "$ck/table-0.rows"
head -c 100 "$ck/dense.safetensors" >"$tmp/short.safetensors"
expect "a truncated safetensors file" 1 "short.safetensors: truncated" -- "$strata" inspect "$tmp/short.safetensors"
printf 'format_version: 1\n' >"$tmp/emptydir/manifest.yaml"
expect "a manifest without its checksum line" 1 "cannot use the manifest: .*the last line must be" \
  -- "$strata" inspect "$tmp/emptydir"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
