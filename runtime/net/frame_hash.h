/*
 * frame_hash.h — the frame checksum's hash (XXH3-64 of a then b, seeded),
 * one definition built twice: by frame.c against libxxhash (the reference)
 * and by frame_avx2.c with xxhash.h inlined and compiled for AVX2. Include
 * after <xxhash.h> (with XXH_STATIC_LINKING_ONLY or XXH_INLINE_ALL).
 */
#ifndef ST_NET_FRAME_HASH_H
#define ST_NET_FRAME_HASH_H

#include <stddef.h>
#include <stdint.h>

static inline uint64_t frame_hash_body(uint64_t seed, const void *a, size_t alen,
				       const void *b, size_t blen)
{
	if (!blen)
		return XXH3_64bits_withSeed(a, alen, seed);
	/* libxxhash 0.8.1's reset_withSeed skips deriving the secret when the
	 * state's stale seed equals the new one, so a stack state left over
	 * from the previous call (same seed, secret since overwritten) gave
	 * wrong hashes. XXH3_INITSTATE clears the stale seed. */
	XXH3_state_t st;
	XXH3_INITSTATE(&st);
	XXH3_64bits_reset_withSeed(&st, seed);
	XXH3_64bits_update(&st, a, alen);
	XXH3_64bits_update(&st, b, blen);
	return XXH3_64bits_digest(&st);
}

#endif
