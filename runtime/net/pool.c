/*
 * pool.c — a small cache of large message buffers: the receive buffers
 * of large messages, which the collectives and the callers of
 * st_net_release give back, and the blocks of flat sends (net.c, FLAT),
 * given back when UCX is done with them.
 *
 * Why: every message arrives in a buffer malloc'd by the progress thread
 * (net.c take_locked). An allreduce of megabytes gets fresh buffers of
 * megabytes on every call, and glibc hands those out as new mappings (or
 * trims them back to the kernel when they are freed), so every page of
 * every message costs a page fault: bench_net's allreduce of 8Mi floats at
 * P = 2 took 13,000 minor faults per call and spent more time in the
 * kernel than in user space. Messages of at least ST__NET_POOL_MIN bytes
 * are received into a buffer from this cache instead, and coll.c (and any
 * st_net_recv caller, through st_net_release) gives them back when done,
 * so the same warm pages carry call after call. Point to point the same
 * held: a stream of 64 KiB messages with 8 in flight took 40,000-60,000
 * page faults while its receiver freed each buffer, 10,000-15,000 (mostly
 * UCX's own setup) once it gave them back (docs/benchmarks.md, "Receive
 * buffers given back").
 *
 * POOL_MAX_BUFS: a receiver with several large messages in flight holds
 * that many buffers at once; 64 covers bench_net's largest window.
 *
 * Every buffer is an ordinary malloc'd block: whoever does not give one
 * back (an abandoned collective's leftover, the inbox at close) frees it
 * with free(), which is always correct. The cache holds at most
 * POOL_MAX_BUFS buffers and POOL_MAX_BYTES bytes; a buffer beyond that is
 * freed at once.
 *
 * Threads: the progress thread takes (under wmu), the collective's thread
 * gives back; `pool_mu` guards the cache and is a leaf lock: nothing else
 * is taken while holding it, so it fits anywhere in net_internal.h's lock
 * order.
 */
#include <malloc.h>
#include <stdlib.h>

#include "runtime/net/net_internal.h"

enum { POOL_MAX_BUFS = 64 };
#define POOL_MAX_BYTES ((size_t)512 << 20)

void st__net_pool_init(st_net_t *net)
{
	pthread_mutex_init(&net->pool_mu, NULL);
	net->pool = calloc(POOL_MAX_BUFS, sizeof *net->pool);   /* NULL: no cache, only malloc */
}

void st__net_pool_fini(st_net_t *net)
{
	for (int i = 0; net->pool && i < net->pool_n; i++)
		free(net->pool[i].buf);
	free(net->pool);
	net->pool = NULL;
	net->pool_n = 0;
	net->pool_bytes = 0;
	pthread_mutex_destroy(&net->pool_mu);
}

void *st__net_pool_get(st_net_t *net, size_t len)
{
	if (len >= ST__NET_POOL_MIN && net->pool) {
		/* The smallest cached buffer that fits and wastes at most half. */
		pthread_mutex_lock(&net->pool_mu);
		int best = -1;
		for (int i = 0; i < net->pool_n; i++)
			if (net->pool[i].cap >= len && net->pool[i].cap / 2 <= len &&
			    (best < 0 || net->pool[i].cap < net->pool[best].cap))
				best = i;
		void *buf = NULL;
		if (best >= 0) {
			buf = net->pool[best].buf;
			net->pool_bytes -= net->pool[best].cap;
			net->pool[best] = net->pool[--net->pool_n];
			net->pool_hits++;
		}
		pthread_mutex_unlock(&net->pool_mu);
		if (buf)
			return buf;
	}
	return malloc(len ? len : 1);
}

void st__net_pool_put(st_net_t *net, void *buf)
{
	if (!buf)
		return;
	size_t cap = malloc_usable_size(buf);
	if (cap >= ST__NET_POOL_MIN && net->pool) {
		pthread_mutex_lock(&net->pool_mu);
		int kept = net->pool_n < POOL_MAX_BUFS && net->pool_bytes + cap <= POOL_MAX_BYTES;
		if (kept) {
			net->pool[net->pool_n++] = (st__net_pooled_t){ buf, cap };
			net->pool_bytes += cap;
		}
		pthread_mutex_unlock(&net->pool_mu);
		if (kept)
			return;
	}
	free(buf);
}

/* net.h. Without a net (a caller that never opened one) it is free(). */
void st_net_release(st_net_t *net, void *buf)
{
	if (net)
		st__net_pool_put(net, buf);
	else
		free(buf);
}

uint64_t st__net_pool_hits(st_net_t *net)
{
	pthread_mutex_lock(&net->pool_mu);
	uint64_t h = net->pool_hits;
	pthread_mutex_unlock(&net->pool_mu);
	return h;
}
