#!/usr/bin/env bash
# storage.sh — the hierarchical store against all-in-RAM, in one run.
#
#   [MODEL=standard] [ROW_PRECISION=bf16|fp16] bench/storage.sh [BUILD_DIR] [ROWS] [VOCAB]
#                                        (defaults: build 3000000 2000000)
#
# Data: `strata gen --rows ROWS --vocab VOCAB --zipf 1.05` (Zipf keys per
# slot) into $TMPDIR/storebench-ROWS-VOCAB, made once, read from the page
# cache. Job: bench/storage.lua. Runs
#   (1) every row in RAM (storage = {}), and records the model's rows;
#   (2) storage.mem = 10% of the model (rows x 167 bytes: 32 floats + 39
#       bytes of metadata, cache words and index), the SSD tier in
#       $TMPDIR/storebench-ssd;
#   (3) build/bench/bench_ssd_raw on the same directory: O_DIRECT io_uring
#       random 4 KiB reads (queue depth 32) and sequential 1 MiB reads and
#       writes, the physical reference;
# and prints examples/s of both and their ratio (target >= 0.5), SSD bytes
# read per example, cache hit rates, compaction time share, peak disk use /
# live data (target <= 2), and the share of the raw bandwidth the tier used.
# Results go to docs/benchmarks.md, "Hierarchical store".
set -eu
STORE_SETS=(${STORE_SETS:-})   # extra --set arguments for the tiered run
# ROW_PRECISION=bf16|fp16: compact rows (storage.row_precision) in both runs.
# The tiered run keeps the fp32 byte budget (rows x 167 / 10), so compact
# rows fit more of the model in the same RAM.
prec_set=()
[ "${ROW_PRECISION:-fp32}" != fp32 ] && prec_set=(--set "storage.row_precision=\"$ROW_PRECISION\"")
build=${1:-build}
rows=${2:-3000000}
vocab=${3:-2000000}
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=${TMPDIR:-/tmp}
dir=$tmp/storebench-$rows-$vocab
ssd=$tmp/storebench-ssd
out=$tmp/storebench-out
# AVX-512 kernels only where the CPU has AVX-512 (SIGILL otherwise).
grep -qw avx512f /proc/cpuinfo && export OPENBLAS_CORETYPE=SkylakeX
mkdir -p "$ssd" "$out"

[ -x "$build/cli/strata" ] || ninja -C "$build" cli/strata
[ -x "$build/bench/bench_ssd_raw" ] || ninja -C "$build" bench/bench_ssd_raw
if [ ! -f "$dir/eval.tsv" ]; then
	"$build/cli/strata" gen --rows "$rows" --eval-rows 100000 --vocab "$vocab" \
		--zipf 1.05 --out "$dir"
fi
cat "$dir"/*.tsv > /dev/null
sets=(--set "data.train.path=\"$dir/train-*.tsv\"" --set "data.eval.path=\"$dir/eval.tsv\"")
# MODEL=standard: the project's standard CTR model (MLP 400-400-400, as
# bench/ctr.sh) instead of bench/storage.lua's light MLP 256-128, which
# leaves the store the most exposed.
if [ "${MODEL:-light}" = standard ]; then
	sets+=(--set 'model=st.model.dnn{emb_dim=16,hidden={400,400,400},init_scale=0.01,sparse_optimizer=st.optim.adagrad{lr=0.05,init_accum=0.1},dense_optimizer=st.optim.adam{lr=0.001}}')
fi

echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
echo "== disk: $(df -h "$ssd" | tail -1)"
echo "== commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "== row precision: ${ROW_PRECISION:-fp32}"

run() {   # name, extra --set arguments
	name=$1
	shift
	t0=$(date +%s.%N)
	"$build/cli/strata" run "$root/bench/storage.lua" "${sets[@]}" "$@" ${prec_set[@]+"${prec_set[@]}"} \
		--metrics "$out/$name.jsonl" > "$out/$name.txt" 2>&1 || {
		echo "strata run ($name) failed:"; tail -5 "$out/$name.txt"; exit 1; }
	t1=$(date +%s.%N)
	echo "$t1 - $t0" | bc -l > "$out/$name.wall"
	tail -2 "$out/$name.txt"
}

echo "== (1) all rows in RAM"
run ram
model_rows=$(python3 -c "
import json
m = [json.loads(l) for l in open('$out/ram.jsonl') if l.strip()]
print(int([x['metrics'] for x in m if 'rows' in x.get('metrics', {})][-1]['rows']))")
mem=$((model_rows * 167 / 10))
echo "model: $model_rows rows; budget 10%: $mem bytes"

echo "== (2) storage.mem = 10% of the model, rest on SSD ($ssd)"
run tiered --set "storage={mem=$mem,ssd={path=\"$ssd\"}}" "${STORE_SETS[@]}"

echo "== (3) raw O_DIRECT io_uring bandwidth of $ssd"
# At the tier's own queue depth (storage.ssd.queue_depth's default).
"$build/bench/bench_ssd_raw" "$ssd" --qd 128 | tee "$out/raw.json"

python3 - "$out" "$rows" <<'PY'
import json, sys
out, rows = sys.argv[1], int(sys.argv[2])
def lines(n):
    m = [json.loads(l) for l in open(f"{out}/{n}.jsonl") if l.strip()]
    return [x["metrics"] for x in m if "rows" in x.get("metrics", {})]
def wall(n):
    return float(open(f"{out}/{n}.wall").read())
ram, tier = lines("ram"), lines("tiered")
r, t = ram[-1], tier[-1]
raw = json.loads(open(f"{out}/raw.json").read().strip().splitlines()[-1])
wr, wt = wall("ram"), wall("tiered")
ex = r.get("examples", rows)
peak = max((l.get("ssd.disk_mb", 0) / l["ssd.live_mb"]) for l in tier
           if l.get("ssd.live_mb", 0) > 1) if any(l.get("ssd.live_mb", 0) > 1 for l in tier) else 0
res = {
    "examples": ex,
    "model_rows": r["rows"],
    "ram_ex_per_s": ex / wr, "tiered_ex_per_s": ex / wt, "ratio": wr / wt,
    "ram_auc": r.get("eval_auc", r.get("auc")), "tiered_auc": t.get("eval_auc", t.get("auc")),
    "ssd_read_bytes_per_example": t["ssd.read_mb"] * 1e6 / ex,
    "ssd_write_bytes_per_example": t["ssd.write_mb"] * 1e6 / ex,
    "read_amplification": t.get("ssd.read_amp"),
    "cache_hit": t.get("cache.hit"), "hit_lru": t.get("cache.hit_lru"),
    "hit_lfu": t.get("cache.hit_lfu"), "ssd_load": t.get("cache.ssd_load"),
    "compaction_share": t["ssd.compact_s"] / wt,
    "peak_disk_over_live": peak,
    "end_disk_mb": t["ssd.disk_mb"], "end_live_mb": t["ssd.live_mb"],
    "ssd_read_mb_per_s": t["ssd.read_mb"] / wt,
    "raw_rand4k_mb_per_s": raw.get("rand4k_read_mb_s"),
    "ssd_read_iops": t.get("ssd.read_ios", 0) / wt,
    "raw_rand4k_iops": raw.get("rand4k_read_iops"),
    "raw_seq1m_read_mb_per_s": raw.get("seq1m_read_mb_s"),
}
if res["raw_rand4k_iops"]:
    res["share_of_raw_rand4k_iops"] = res["ssd_read_iops"] / res["raw_rand4k_iops"]
if res["raw_seq1m_read_mb_per_s"]:
    res["share_of_raw_seq_read"] = res["ssd_read_mb_per_s"] / res["raw_seq1m_read_mb_per_s"]
print("== summary")
print(json.dumps(res, indent=1))
PY
