#!/usr/bin/env bash
# kstep_traffic.sh — dense and sparse bytes per step of `kstep` across 2
# processes at k = 1, 10, 100 (issue 21, "k-step traffic"), measured on the
# wire: the collectives' bytes (the merges' allreduces of parameters and
# second moments, plus each step's 8-byte example-count allgather) are the
# dense part, every other byte the sparse part (rows pulled from and pushed
# to their owners). One process's counters, rank 0's, over its steps.
#
#   bench/kstep_traffic.sh [BUILD_DIR] [ROWS]      (defaults: build 200000)
#
# The k-step paper (kstep-adam-terabyte-training.md, §4) merges the dense
# replicas every k steps, so the dense part should fall as 1/k; the rows
# are synchronous every step (§5, "Setup"), so the sparse part should not
# move with k. Results: docs/benchmarks.md, "k-step traffic".
set -eu
build=${1:-build}
rows=${2:-200000}
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=${TMPDIR:-/tmp}/kstep-traffic
strata=$build/cli/strata
mkdir -p "$tmp"
[ -f "$tmp/d-$rows/eval.tsv" ] ||
	"$strata" gen --rows "$rows" --eval-rows 1000 --vocab 100000 --seed 5 --out "$tmp/d-$rows" >/dev/null
echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
echo "== commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "== model: dnn, emb_dim 16, hidden 400-400-400; 2 processes x 1 worker, 256 examples a step each"
printf '%6s %8s %14s %14s %14s %12s\n' k steps "dense B/step" "sparse B/step" "total B/step" "dense x k"
for k in 1 10 100; do
	m=$tmp/m-k$k.jsonl
	rm -f "$m" "$m".rank*
	(cd "$root" && "$strata" launch -n 2 tests/e2e/jobs/gen_dnn.lua --quiet --no-pin \
		--set 'data.generate=nil' --set "data.train.path=\"$tmp/d-$rows/train-*.tsv\"" \
		--set 'data.eval=nil' --set "sync=st.sync.kstep{k=$k}" \
		--set 'model=st.model.dnn{emb_dim=16, hidden={400,400,400}, optimizer=st.optim.adam{lr=0.001}}' \
		--set stages.train.workers=1 --set stages.read.batch_size=256 \
		--set stages.train.minibatch=256 --metrics "$m" >"$tmp/out-k$k" 2>&1)
	/usr/bin/python3 - "$m" "$k" <<'PY'
import json, sys
last = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
m = last.get("metrics", last)
k = int(sys.argv[2])
steps = m["batches"] if "batches" in m else m["examples"] / 256
sent, coll = m["net_bytes_sent"], m["net_bytes_coll"]
d, s = coll / steps, (sent - coll) / steps
print("%6d %8d %14.0f %14.0f %14.0f %12.0f" % (k, steps, d, s, d + s, d * k))
PY
done
