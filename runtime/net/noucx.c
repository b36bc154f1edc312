/*
 * noucx.c — the transport in a build without UCX: the configuration is
 * still read (cfg.c), so a distributed job is recognized, but st_net_open
 * refuses with a message saying how to get a build that can run it. No
 * st_net_t is ever made, so the functions that take one are unreachable.
 */
#include <assert.h>

#include "runtime/err.h"
#include "runtime/net/net_internal.h"

int st_net_open(st_net_t **out, const st_net_cfg_t *cfg)
{
	*out = NULL;
	st_error("strata was built without UCX (install libucx-dev and rebuild): cannot join "
		 "the job as rank %d of %d", cfg->rank, cfg->size);
	return ST_EINVAL;
}

void st_net_close(st_net_t *net)
{
	assert(!net);
}

int st__net_post(st_net_t *net, st__net_sreq_t *req, int dst, uint32_t chan,
		 const void *a, size_t alen, const void *b, size_t blen)
{
	assert(!"no st_net_t without UCX");
	return ST_EINVAL;
}

int st__net_wait(st_net_t *net, st__net_sreq_t *reqs, int n)
{
	assert(!"no st_net_t without UCX");
	return ST_EINVAL;
}

int st_net_send2(st_net_t *net, int dst, uint32_t chan, const void *a, size_t alen,
		 const void *b, size_t blen)
{
	return st__net_post(net, NULL, dst, chan, a, alen, b, blen);
}

int st_net_send(st_net_t *net, int dst, uint32_t chan, const void *buf, size_t len)
{
	return st__net_post(net, NULL, dst, chan, buf, len, NULL, 0);
}

int st__net_send_raw(st_net_t *net, int dst, uint32_t chan, uint32_t magic,
		     const void *bytes, size_t len)
{
	(void)magic;
	return st__net_post(net, NULL, dst, chan, bytes, len, NULL, 0);
}

int st__net_post_direct(st_net_t *net, st__net_sreq_t *req, int dst, uint32_t chan,
			const void *buf, size_t len)
{
	assert(!"no st_net_t without UCX");
	return ST_EINVAL;
}

int st__net_recv_direct(st_net_t *net, int src, uint32_t chan, void *buf, size_t len,
			int fail_any, int *gone)
{
	assert(!"no st_net_t without UCX");
	return ST_EINVAL;
}

int st__net_bare(const st_net_t *net, int dst)
{
	assert(!"no st_net_t without UCX");
	return 0;
}

void st__net_kick(st_net_t *net)
{
	assert(!"no st_net_t without UCX");
}

int st__net_spin(st_net_t *net, double until)
{
	assert(!"no st_net_t without UCX");
	return 0;
}

int st__net_ep_transports(st_net_t *net, int r, char *out, size_t n)
{
	assert(!"no st_net_t without UCX");
	return ST_EINVAL;
}

int st__net_ep_shm(st_net_t *net, int r)
{
	assert(!"no st_net_t without UCX");
	return 0;
}
