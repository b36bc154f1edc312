/*
 * frame.c — the frame every message carries (net_internal.h has the
 * layout): filling one in for a send, checking one on receipt. One XXH3-64
 * covers header and payload (except in an unhashed frame, sent only over
 * shared memory): the payload hash is seeded with the hash of
 * the header fields before it; the payload's loop is AVX2 where the CPU
 * has it (frame_avx2.c). Pure functions, any thread.
 */
#include <stddef.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY   /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "runtime/net/frame_hash.h"
#include "runtime/net/net_internal.h"
#include "runtime/simd.h"

/* The payload hash, XXH3-64 of a then b seeded with seed: libxxhash's (the
 * reference) or the same function's AVX2 loop (frame_avx2.c), same bits. */
uint64_t st__net_hash_ref(uint64_t seed, const void *a, size_t alen, const void *b,
			  size_t blen)
{
	return frame_hash_body(seed, a, alen, b, blen);
}

static uint64_t payload_hash(uint64_t seed, const void *a, size_t alen, const void *b,
			     size_t blen)
{
	return st_simd_avx2() ? st__net_hash_avx2(seed, a, alen, b, blen)
			      : st__net_hash_ref(seed, a, alen, b, blen);
}

uint64_t st__net_frame_seed(const st__net_frame_t *f)
{
	return XXH3_64bits(f, offsetof(st__net_frame_t, hash));
}

const char *st__net_frame_check(const st__net_frame_t *f, int tag_src, uint32_t tag_chan,
				int me, const void *payload, size_t len)
{
	if (f->magic != ST__NET_FRAME_MAGIC)
		return "bad magic (not a strata frame)";
	const int unhashed = f->version == (ST__NET_FRAME_VERSION | ST__NET_FRAME_UNHASHED);
	if (f->version != ST__NET_FRAME_VERSION && !unhashed)
		return "unknown frame version";
	if (f->src != (uint32_t)tag_src || f->chan != tag_chan)
		return "frame header disagrees with its tag";
	if (f->dst != (uint32_t)me)
		return "frame addressed to another rank";
	if (f->len != len)
		return "payload length differs from the frame's (truncated)";
	if (unhashed)
		return f->hash ? "unhashed frame with a hash" : NULL;
	if (f->hash != payload_hash(st__net_frame_seed(f), payload, len, NULL, 0))
		return "checksum mismatch";
	return NULL;
}

void st__net_frame_fill_unhashed(st__net_frame_t *f, int src, int dst, uint32_t chan,
				 size_t len)
{
	memset(f, 0, sizeof *f);
	f->magic = ST__NET_FRAME_MAGIC;
	f->version = ST__NET_FRAME_VERSION | ST__NET_FRAME_UNHASHED;
	f->chan = (uint16_t)chan;
	f->src = (uint32_t)src;
	f->dst = (uint32_t)dst;
	f->len = len;
}

void st__net_frame_fill(st__net_frame_t *f, int src, int dst, uint32_t chan, const void *a,
			size_t alen, const void *b, size_t blen)
{
	st__net_frame_fill_unhashed(f, src, dst, chan, alen + blen);
	f->version = ST__NET_FRAME_VERSION;
	f->hash = payload_hash(st__net_frame_seed(f), a, alen, b, blen);
}
