#!/usr/bin/env bash
# ckpt.sh — checkpoint write and load throughput against the disk's raw
# sequential write bandwidth, and the training slowdown while checkpoints
# are written, in one run; for one process and for a multi-process
# allreduce job (`strata launch -n P`, docs/distributed.md "Checkpoints of
# multi-process jobs").
#
#   bench/ckpt.sh [BUILD_DIR] [ROWS] [VOCAB] [PROCS]
#       (defaults: build 3000000 2000000 "1 2")
#
# Data: the same as bench/storage.sh ($TMPDIR/storebench-ROWS-VOCAB, made
# once). Job: bench/storage.lua (26 x 16 rows with AdaGrad state, MLP
# 256-128, allreduce), all rows in RAM; a global batch of 4096 examples a
# step (P processes read 4096 / P each). For each process count P, runs
#   (1) no checkpoints;
#   (2) a checkpoint every EVERY steps (default 150: about 4 per run)
#       plus the final one, in $TMPDIR/ckptbench;
#   (3) --resume of the final checkpoint with no data left: the load;
# then (4) bench_ssd_raw: O_DIRECT sequential 1 MiB write bandwidth;
# and prints, for each P, checkpoint bytes, write and load GB/s, their share
# of the raw write bandwidth, the pipeline stall per checkpoint, and the
# slowdown. Results go to docs/benchmarks.md, "Checkpoints".
#
# Write GB/s is the bytes of the interval checkpoints over their write time
# (ckpt.write_s); run (2) keeps every checkpoint (keep=0) so that each one's
# size is known: the tables grow during the run, so the first checkpoints
# are smaller than the final one. With P processes every rank writes its
# shard in parallel and rank 0's write time (the metrics of FILE; rank r's
# are in FILE.rank<r>) runs until every rank reported its shard written and
# the manifest is published, so it is the job's. Load: load_s is the whole
# --resume run (start, finding and verifying the checkpoint, restoring it,
# the reader skipping the records already trained, exit); resume_s ends
# when strata reports the checkpoint restored ("resuming from", said by
# rank 0 once every rank loaded its part), so it is the load alone.
set -eu
build=${1:-build}
rows=${2:-3000000}
vocab=${3:-2000000}
every=${EVERY:-150}
procs=${4:-"1 2"}
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

# job P: sets c, the command of the job on P processes (`strata launch -n
# P`), a global batch of 4096 examples a step: 4096 / P a process, in one
# minibatch (a multi-process step is one read batch, at most workers x
# minibatch).
job() {
	if [ "$1" = 1 ]; then
		c=("$build/cli/strata" run "$root/bench/storage.lua" "${sets[@]}")
	else
		c=("$build/cli/strata" launch -n "$1" "$root/bench/storage.lua" "${sets[@]}"
			--set stages.read.batch_size=$((4096 / $1)) --set stages.train.minibatch=$((4096 / $1)))
	fi
}

rm -f "$out/runs"
for P in $procs; do
	rm -rf "$ck"
	job "$P"
	# the machine's load: the rates below are CPU-bound on a busy machine
	echo "== load average: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "== P=$P (1) no checkpoints"
	w1=$(wall "1-p$P" "${c[@]}")
	echo "== P=$P (2) a checkpoint every $every steps"
	w2=$(wall "2-p$P" "${c[@]}" --set "checkpoint={dir=\"$ck\",every=$every,keep=0}" \
		--metrics "$out/2-p$P.jsonl")
	final=$(ls "$ck" | grep '^ckpt-[0-9]*$' | tail -n 1)
	echo "== P=$P (3) load: --resume with nothing left to train"
	sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
	# prints the run's seconds and when it said "resuming from" (the load done)
	read -r w3 r3 <<<"$(python3 -c '
import subprocess, sys, time
out = sys.argv[1]
t0 = time.monotonic()
with open(out + "/3-p" + sys.argv[2] + ".txt", "w") as so, open(out + "/3-p" + sys.argv[2] + ".err", "w") as se:
    p = subprocess.Popen(sys.argv[3:], stdout=so, stderr=subprocess.PIPE, text=True)
    r = None
    for line in p.stderr:
        se.write(line)
        if r is None and "resuming from" in line:
            r = time.monotonic() - t0
    rc = p.wait()
if rc != 0 or r is None:
    sys.exit("failed: " + " ".join(sys.argv[3:]))
print(time.monotonic() - t0, r)
' "$out" "$P" "${c[@]}" --set "checkpoint={dir=\"$ck\",every=$every,keep=0}" --resume)"
	[ -n "${r3:-}" ] || { tail -3 "$out/3-p$P.err" >&2; exit 1; }
	echo "$P $w1 $w2 $w3 $final $r3" >>"$out/runs"
	# the checkpoints' sizes, before the next P removes them
	python3 - "$ck" "$final" >"$out/sizes-p$P" <<'PY'
import os, sys
ck, final = sys.argv[1], sys.argv[2]
def size(d):
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
ibytes = sum(size(os.path.join(ck, d)) for d in os.listdir(ck)
             if d.startswith("ckpt-") and d != final and os.path.isdir(os.path.join(ck, d)))
print(size(os.path.join(ck, final)), ibytes)
PY
done
echo "== (4) raw sequential write bandwidth of $ck"
mkdir -p "$ck"
"$build/bench/bench_ssd_raw" "$ck" --size 2G | tail -n 1 > "$out/raw.json"
cat "$out/raw.json"
echo "== load average: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
raw = json.loads(open(f"{out}/raw.json").read())["seq1m_write_mb_s"] / 1e3
print("== summary")
for line in open(f"{out}/runs"):
    P, w1, w2, w3, final, r3 = line.split()
    w1, w2, w3, r3 = float(w1), float(w2), float(w3), float(r3)
    nbytes, ibytes = map(int, open(f"{out}/sizes-p{P}").read().split())
    m = [json.loads(l)["metrics"] for l in open(f"{out}/2-p{P}.jsonl") if l.strip() and '"metrics"' in l]
    last = [x for x in m if "ckpt.written" in x][-1]
    n = last["ckpt.written"]
    res = {
        "processes": int(P),
        "train_s_no_ckpt": w1, "train_s_with_ckpt": w2, "slowdown": w2 / w1 - 1,
        "interval_checkpoints": n, "checkpoint_bytes": nbytes,
        "interval_bytes_per_ckpt": ibytes / n,
        "write_s_per_ckpt": last["ckpt.write_s"] / n,
        "write_gb_s": ibytes / last["ckpt.write_s"] / 1e9,
        "stall_s_per_ckpt": last.get("ckpt.stall_s", 0) / n,
        "gate_wait_s_per_ckpt": last.get("ckpt.gate_wait_s", 0) / n,
        "load_s": w3, "load_gb_s": nbytes / w3 / 1e9,
        "resume_s": r3, "resume_gb_s": nbytes / r3 / 1e9,
        "raw_seq_write_gb_s": raw,
    }
    res["write_share_of_raw"] = res["write_gb_s"] / raw
    res["resume_share_of_raw"] = res["resume_gb_s"] / raw
    print(json.dumps(res, indent=1))
PY
