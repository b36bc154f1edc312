#!/bin/sh
# read.sh — Criteo TSV reader throughput against `wc -l` on the same file.
#
#   bench/read.sh [BUILD_DIR] [SIZE_MB] [THREADS]
#
# Builds a ~SIZE_MB (default 500) MB Criteo TSV in /tmp by concatenating
# $ST_SHARED_DATA/criteo/Lapis-Hong_Wide-ResDNN/train.csv, warms the page
# cache, times `wc -l` (the floor for reading lines), then bench_read with 1
# thread (and THREADS threads when given), and prints MB/s and the ratio.
# Results go to docs/benchmarks.md, "Reader throughput".
set -eu
build=${1:-build}
size_mb=${2:-500}
threads=${3:-1}
data=${ST_SHARED_DATA:-$(cd "$(dirname "$0")/../.." && pwd)/shared/data}
src=$data/criteo/Lapis-Hong_Wide-ResDNN/train.csv
out=${TMPDIR:-/tmp}/st-read-bench-criteo-${size_mb}mb.tsv
[ -r "$src" ] || { echo "skip: $src not found (set ST_SHARED_DATA)"; exit 77; }
[ -x "$build/bench/bench_read" ] || ninja -C "$build" bench/bench_read

if [ ! -f "$out" ]; then
	one=$(stat -c %s "$src")
	n=$(( size_mb * 1000000 / one + 1 ))
	i=0
	while [ $i -lt $n ]; do cat "$src"; i=$((i + 1)); done > "$out.tmp"
	mv "$out.tmp" "$out"
fi
bytes=$(stat -c %s "$out")
cat "$out" > /dev/null   # warm the page cache
cat "$out" > /dev/null

t0=$(date +%s.%N)
wc -l "$out" > /dev/null
t1=$(date +%s.%N)
wc_mbs=$(echo "$bytes / 1000000 / ($t1 - $t0)" | bc -l)
printf 'file: %s (%d bytes)\n' "$out" "$bytes"
printf 'wc -l: %.1f MB/s\n' "$wc_mbs"

"$build/bench/bench_read" "$out" 1 | tee /tmp/st-read-bench.out
rd_mbs=$(sed -n 's/^per thread: \([0-9.]*\) MB\/s.*/\1/p' /tmp/st-read-bench.out)
printf 'ratio bench_read(1 thread) / wc -l: %.2f\n' "$(echo "$rd_mbs / $wc_mbs" | bc -l)"
if [ "$threads" -gt 1 ]; then
	"$build/bench/bench_read" "$out" "$threads"
fi
