#!/usr/bin/env bash
# restore_ab.sh — the restore alone, two strata binaries on one checkpoint,
# alternating with caches dropped before each, so that a change to the
# restore can be judged on a machine too busy for bench/ckpt.sh's ratios
# (docs/benchmarks.md, "Multi-process checkpoints", run 5).
#
#   bench/restore_ab.sh OLD_STRATA NEW_STRATA [ROUNDS]
#
# Needs what bench/ckpt.sh leaves: its data ($TMPDIR/storebench-3000000-
# 2000000) and the checkpoints of its last process count ($TMPDIR/
# ckptbench, the 2-process run's by default). Prints, per binary and round,
# the seconds until "resuming from" (the load proper, as bench/ckpt.sh
# measures it) for 2 processes (the writer's world) and 1 process (another
# world: every shard), with the load average. Root, to drop caches.
set -u
old=$1 new=$2 rounds=${3:-3}
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=${TMPDIR:-/tmp}
dir=$tmp/storebench-3000000-2000000
ck=$tmp/ckptbench
grep -qw avx512f /proc/cpuinfo && export OPENBLAS_CORETYPE=SkylakeX
sets=(--set "data.train.path=\"$dir/train-*.tsv\"" --set 'data.eval=nil' --quiet
	--set "checkpoint={dir=\"$ck\",every=150,keep=0}" --resume)
t() { # t LABEL CMD...
	sync
	echo 3 > /proc/sys/vm/drop_caches
	python3 - "$@" <<'PY'
import subprocess, sys, time
label, cmd = sys.argv[1], sys.argv[2:]
t0, r = time.monotonic(), None
p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
for line in p.stderr:
    if r is None and "resuming from" in line:
        r = time.monotonic() - t0
rc = p.wait()
print(f"{label} resume_s {r} rc {rc} load {open('/proc/loadavg').read().split()[0]}", flush=True)
PY
}
for i in $(seq "$rounds"); do
	for v in old new; do
		b=$old
		[ $v = new ] && b=$new
		t "$v-P2" "$b" launch -n 2 "$root/bench/storage.lua" "${sets[@]}" \
			--set stages.read.batch_size=2048 --set stages.train.minibatch=2048
		t "$v-P1" "$b" run "$root/bench/storage.lua" "${sets[@]}"
	done
done
