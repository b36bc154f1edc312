# dist_common.sh — what bench/dist.sh and bench/dist_auto.sh share; sourced
# after they set `build` and `rows`. Sets root, dir (the data: `strata gen
# --rows $rows` into $TMPDIR/distbench-$rows, made once and read from the
# page cache), out (the logs) and strata, and prints the machine and commit.
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=${TMPDIR:-/tmp}
dir=$tmp/distbench-$rows
out=$tmp/distbench-out
# AVX-512 kernels only where the CPU has AVX-512 (SIGILL otherwise).
grep -qw avx512f /proc/cpuinfo && export OPENBLAS_CORETYPE=SkylakeX
mkdir -p "$out"
strata=$build/cli/strata
[ -x "$strata" ] || ninja -C "$build" cli/strata
if [ ! -f "$dir/eval.tsv" ]; then
	"$strata" gen --rows "$rows" --eval-rows 50000 --vocab 1000000 --out "$dir" >/dev/null
fi
cat "$dir"/*.tsv >/dev/null
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "commit:  $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet || echo +dirty)"
