/*
 * frame_avx2.c — the frame checksum's hashing (frame.c) with XXH3's AVX2
 * loop, inlined from xxhash.h and compiled with -mavx2 (net/meson.build);
 * frame.c calls it only where the CPU has AVX2 (runtime/simd.h).
 *
 * Why: libxxhash as Debian builds it runs XXH3's SSE2 loop, 17 GB/s on a
 * 1 MiB payload on the 2-core development machine against 40 GB/s for the
 * AVX2 loop, and every frame is hashed twice (sender and receiver), on the
 * critical path of each collective's segments (docs/benchmarks.md,
 * "Transport"). XXH3's value does not depend on the loop that computes it,
 * so the libxxhash build in frame.c stays as the reference and both give the
 * same bits (tests/unit/test_net.c pins it); the body is frame_hash.h's,
 * built twice. Pure functions, any thread.
 */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "runtime/net/frame_hash.h"
#include "runtime/net/net_internal.h"

uint64_t st__net_hash_avx2(uint64_t seed, const void *a, size_t alen, const void *b,
			   size_t blen)
{
	return frame_hash_body(seed, a, alen, b, blen);
}
