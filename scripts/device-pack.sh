#!/usr/bin/env bash
# device-pack.sh — packs what bench/device.sh needs into .dev/dev.tar.gz (git-ignored),
# for a lent machine that has none of this machine's Debian packages and no
# package registry (the device tool's machines: docs/benchmarks.md,
# "Scale-out on 16 cores"). The binaries are built here; beside them go the
# shared libraries they load that are not glibc's own (the other machine's
# glibc is newer, and glibc runs programs built against an older one), UCX's
# transport modules (libucs looks for them in ucx/ beside itself), UCX's
# ucx_perftest and GNU time (the benches' references and CPU accounting).
#
#   scripts/device-pack.sh [BUILD_DIR]      (default: build)
#
# Then: the device tool's run with carry [".dev"] and the command
# `bash bench/device.sh`.
set -eu
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
dev=${TMPDIR:-/tmp}/strata-dev
ninja -C "$build" cli/strata bench/bench_net
rm -rf "$dev"
mkdir -p "$dev/build/cli" "$dev/build/bench" "$dev/lib" "$dev/bin"
cp "$build/cli/strata" "$dev/build/cli/"
cp "$build/bench/bench_net" "$dev/build/bench/"
cp /usr/bin/ucx_perftest /usr/bin/time "$dev/bin/"
# The GPU parity tests and bench_gpu, where this build has CUDA (issue 23's
# device checks: bench/device.sh gpu). They load the other machine's own
# CUDA runtime, cuBLAS and NCCL (hundreds of MB; found there by device.sh).
gpu_bins=""
if [ -x "$build/bench/bench_gpu" ]; then
	gpu_tests="table embed optim dense route model"
	ninja -C "$build" bench/bench_gpu $(for t in $gpu_tests; do echo tests/gpu/test_gpu_$t; done)
	mkdir -p "$dev/build/tests/gpu"
	cp "$build/bench/bench_gpu" "$dev/build/bench/"
	gpu_bins="$dev/build/bench/bench_gpu"
	for t in $gpu_tests; do
		cp "$build/tests/gpu/test_gpu_$t" "$dev/build/tests/gpu/"
		gpu_bins="$gpu_bins $dev/build/tests/gpu/test_gpu_$t"
	done
fi
cp -a /usr/lib/x86_64-linux-gnu/ucx "$dev/lib/ucx"
rm -f "$dev"/lib/ucx/*.a
# glibc's own libraries stay behind: the other machine's loader must use
# its own libc with them. So do the C++ runtime (the other machine's is
# newer, and its cuBLAS needs that one) and CUDA's.
for b in "$dev"/build/cli/strata "$dev"/build/bench/bench_net "$dev"/bin/ucx_perftest \
	"$dev"/lib/ucx/libuct_cma.so.0 $gpu_bins; do
	ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }'
done | sort -u | grep -Ev '/(libc|libm|libpthread|libdl|librt|libresolv)\.so' |
	grep -Ev '/lib(cudart|cublas|cublasLt|nccl|cuda|stdc\+\+|gcc_s)\.so' |
	while read -r lib; do cp -L "$lib" "$dev/lib/"; done
git -C "$root" rev-parse --short HEAD >"$dev/COMMIT"
git -C "$root" diff --quiet || echo "+dirty" >>"$dev/COMMIT"
# Stripped and packed: the tree that travels is limited to 64 MiB, and
# OpenBLAS alone is 35 MB.
strip --strip-unneeded "$dev"/lib/*.so* "$dev"/lib/ucx/*.so* "$dev"/build/cli/strata \
	"$dev"/build/bench/bench_net "$dev"/bin/* $gpu_bins
mkdir -p "$root/.dev"
tar -C "$dev" -czf "$root/.dev/dev.tar.gz" .
du -sh "$root/.dev/dev.tar.gz"
