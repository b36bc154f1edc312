#!/usr/bin/env bash
# ckpt.sh — checkpoint write and load throughput against the disk's raw
# sequential write bandwidth, and the training slowdown while checkpoints
# are written, in one run.
#
#   bench/ckpt.sh [BUILD_DIR] [ROWS] [VOCAB]     (defaults: build 3000000 2000000)
#
# Data: the same as bench/storage.sh ($TMPDIR/storebench-ROWS-VOCAB, made
# once). Job: bench/storage.lua (26 x 16 rows with AdaGrad state, MLP
# 256-128), all rows in RAM. Runs
#   (1) no checkpoints;
#   (2) a checkpoint every EVERY batches (default 150: about 4 per run)
#       plus the final one, in $TMPDIR/ckptbench;
#   (3) --resume of the final checkpoint with no data left: the load;
#   (4) bench_ssd_raw: O_DIRECT sequential 1 MiB write bandwidth;
# and prints checkpoint bytes, write and load GB/s, their share of the raw
# write bandwidth, the pipeline stall per checkpoint, and the slowdown.
# Results go to docs/benchmarks.md, "Checkpoints".
#
# Write GB/s is the bytes of the interval checkpoints over their write time
# (ckpt.write_s); run (2) keeps every checkpoint (keep=0) so that each one's
# size is known: the tables grow during the run, so the first checkpoints
# are smaller than the final one. Load: load_s is the whole --resume run
# (start, finding and verifying the checkpoint, restoring it, the reader
# skipping the records already trained, exit); resume_s ends when strata
# reports the checkpoint restored ("resuming from"), so it is the load alone.
set -eu
build=${1:-build}
rows=${2:-3000000}
vocab=${3:-2000000}
every=${EVERY:-150}
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=${TMPDIR:-/tmp}
dir=$tmp/storebench-$rows-$vocab
ck=$tmp/ckptbench
out=$tmp/ckptbench-out
# AVX-512 kernels only where the CPU has AVX-512 (SIGILL otherwise).
grep -qw avx512f /proc/cpuinfo && export OPENBLAS_CORETYPE=SkylakeX
rm -rf "$ck"
mkdir -p "$out"
[ -x "$build/cli/strata" ] || ninja -C "$build" cli/strata
[ -x "$build/bench/bench_ssd_raw" ] || ninja -C "$build" bench/bench_ssd_raw
if [ ! -f "$dir/eval.tsv" ]; then
	"$build/cli/strata" gen --rows "$rows" --eval-rows 100000 --vocab "$vocab" \
		--zipf 1.05 --out "$dir"
fi
cat "$dir"/*.tsv > /dev/null
sets=(--set "data.train.path=\"$dir/train-*.tsv\"" --set 'data.eval=nil' --quiet)

echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
echo "== commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
# wall NAME CMD...: runs CMD with stdout/stderr to $out/NAME.{txt,err}; prints seconds.
wall() {
	local name=$1 t0 t1
	shift
	t0=$(date +%s.%N)
	"$@" >"$out/$name.txt" 2>"$out/$name.err" || { echo "failed: $*" >&2; tail -3 "$out/$name.err" >&2; exit 1; }
	t1=$(date +%s.%N)
	echo "$t1 - $t0" | bc -l
}

echo "== (1) no checkpoints"
w1=$(wall 1 "$build/cli/strata" run "$root/bench/storage.lua" "${sets[@]}")
echo "== (2) a checkpoint every $every batches"
w2=$(wall 2 "$build/cli/strata" run "$root/bench/storage.lua" "${sets[@]}" \
	--set "checkpoint={dir=\"$ck\",every=$every,keep=0}" --metrics "$out/2.jsonl")
final=$(ls "$ck" | grep '^ckpt-[0-9]*$' | tail -n 1)
echo "== (3) load: --resume with nothing left to train"
sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
# prints the run's seconds and when it said "resuming from" (the load done)
read -r w3 r3 <<<"$(python3 -c '
import subprocess, sys, time
out = sys.argv[1]
t0 = time.monotonic()
with open(out + "/3.txt", "w") as so, open(out + "/3.err", "w") as se:
    p = subprocess.Popen(sys.argv[2:], stdout=so, stderr=subprocess.PIPE, text=True)
    r = None
    for line in p.stderr:
        se.write(line)
        if r is None and "resuming from" in line:
            r = time.monotonic() - t0
    rc = p.wait()
if rc != 0 or r is None:
    sys.exit("failed: " + " ".join(sys.argv[2:]))
print(time.monotonic() - t0, r)
' "$out" "$build/cli/strata" run "$root/bench/storage.lua" "${sets[@]}" \
	--set "checkpoint={dir=\"$ck\",every=$every,keep=0}" --resume)"
[ -n "${r3:-}" ] || { tail -3 "$out/3.err" >&2; exit 1; }
echo "== (4) raw sequential write bandwidth of $ck"
"$build/bench/bench_ssd_raw" "$ck" --size 2G | tail -n 1 > "$out/raw.json"
cat "$out/raw.json"

python3 - "$out" "$w1" "$w2" "$w3" "$ck" "$final" "$r3" <<'PY'
import json, os, sys
out, w1, w2, w3 = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
ck, final, r3 = sys.argv[5], sys.argv[6], float(sys.argv[7])
def size(d):
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
# the final checkpoint, and all the others (the interval ones)
nbytes = size(os.path.join(ck, final))
ibytes = sum(size(os.path.join(ck, d)) for d in os.listdir(ck)
             if d.startswith("ckpt-") and d != final and os.path.isdir(os.path.join(ck, d)))
m = [json.loads(l)["metrics"] for l in open(f"{out}/2.jsonl") if l.strip() and '"metrics"' in l]
last = [x for x in m if "ckpt.written" in x][-1]
raw = json.loads(open(f"{out}/raw.json").read())
n = last["ckpt.written"]
res = {
    "train_s_no_ckpt": w1, "train_s_with_ckpt": w2, "slowdown": w2 / w1 - 1,
    "interval_checkpoints": n, "checkpoint_bytes": nbytes,
    "interval_bytes_per_ckpt": ibytes / n,
    "write_s_per_ckpt": last["ckpt.write_s"] / n,
    "write_gb_s": ibytes / last["ckpt.write_s"] / 1e9,
    "stall_s_per_ckpt": last.get("ckpt.stall_s", 0) / n,
    "gate_wait_s_per_ckpt": last.get("ckpt.gate_wait_s", 0) / n,
    "load_s": w3, "load_gb_s": nbytes / w3 / 1e9,
    "resume_s": r3, "resume_gb_s": nbytes / r3 / 1e9,
    "raw_seq_write_gb_s": raw["seq1m_write_mb_s"] / 1e3,
}
res["write_share_of_raw"] = res["write_gb_s"] / res["raw_seq_write_gb_s"]
print("== summary")
print(json.dumps(res, indent=1))
PY
