/*
 * remote.c — the remote row source (remote.h; the contract is rowsrc.h's):
 * a batch's rows pulled from their owner ranks through the job's parameter
 * service (ops/dist), as private copies in the batch (b->rowbuf).
 *
 * Freshness. Whether a pulled row may be older than the steps before its
 * batch is the policy's business, told through the trainer's clock
 * (rowsrc.h):
 *  - fresh (ST_SYNC_FRESH_ROWS: gba, bsp, hop_bw): train batch k is pulled
 *    only once batch k-1 is trained, right before it computes, as the GBA
 *    paper's workers pull parameters and a token right before computing
 *    (gba-global-batch-aggregation.txt Appendix B, Algorithm 1 line 16).
 *  - lag >= 0 (lockstep policies): train batch k is synchronous step
 *    k + soff (soff = 0 unless st.sync.auto switched) and waits until
 *    steps 0 .. k+soff-1-lag are applied at every owner (the hybrid's
 *    staleness bound, PERSIA's, persia-hybrid-training.md Section 4.1; 0
 *    for allreduce); an eval pass runs after training, so it waits for
 *    every step. The trainer sets soff, then lag (release), at a switch.
 *  - lag < 0 (async, hop_bs, shadow): no wait.
 *
 * Step reads (read_step): the asynchronous policies train each minibatch
 * on rows read right before it (st_dist_pull_step, ST_SYNC_STEP_ROWS), so a
 * row misses only the updates in flight at that moment (PERSIA's bounded
 * staleness, Section 5), whatever the read batch size; the batch's copies
 * then only say which keys are admitted. Each worker has its own reply
 * channel (stepbuf), made at its first read. With dist.prefetch the
 * trainer issues a worker's reads of its next minibatches ahead
 * (step_submit) and collects each when it gets there (step_wait): the
 * round trip is hidden behind the minibatches before it, and the row
 * misses their updates too (ops/dist/steprows.c).
 *
 * The rank's own shard is a local source that the service thread answers
 * from; maintain (TTL sweeps, memory warnings) and metrics go to it.
 *
 * Threads: resolve from the one pull thread (`pulled` is its count);
 * read_step from worker w, which alone touches stepbuf w; release,
 * maintain and metrics from the push thread.
 */
#include "ops/rowsrc/remote.h"

#include <stdlib.h>
#include <time.h>

#include "ops/dist/dist.h"
#include "runtime/err.h"

/* A batch's row copies (st_batch_t.rowbuf): each owner's buffered step
 * count when it served the pull (the GBA token, ops/dist/psbuf.c), then
 * the rows (stride floats each, 64-byte aligned). One allocation. */
typedef struct rowbuf {
	uint64_t *tokens;          /* [world size] */
	float *rows;
} rowbuf_t;

typedef struct remote_src {
	st_rowsrc_t base;          /* first: callers hold &base */
	st_dist_t *dist;
	st_rowsrc_t *shard;
	const st_rowsrc_clock_t *clock;
	size_t stride;
	int n_workers;
	uint64_t pulled;           /* train batches pulled (the pull thread's) */
	st_dist_stepbuf_t **sb;    /* [n_workers] read_step's reply channels */
} remote_src_t;

static int remote_resolve(st_rowsrc_t *s, st_batch_t *b, const uint8_t *table, int thread,
			  int (*stop)(void *), void *stop_arg)
{
	(void)thread;
	remote_src_t *R = (remote_src_t *)s;
	const st_rowsrc_clock_t *c = R->clock;
	/* Fresh rows: train batch k once batch k-1 is trained. */
	while (__atomic_load_n(&c->fresh, __ATOMIC_RELAXED) && !b->eval &&
	       !(stop && stop(stop_arg)) &&
	       __atomic_load_n(&c->trained, __ATOMIC_ACQUIRE) < R->pulled) {
		struct timespec ts = { 0, 50 * 1000 };
		nanosleep(&ts, NULL);
	}
	const int64_t lag = __atomic_load_n(&c->lag, __ATOMIC_ACQUIRE);
	const int64_t at = (int64_t)R->pulled + __atomic_load_n(&c->soff, __ATOMIC_RELAXED) - lag;
	const uint64_t need = lag < 0 ? 0
			      : b->eval ? __atomic_load_n(&c->ssteps, __ATOMIC_RELAXED)
			      : at > 0 ? (uint64_t)at : 0;
	const uint32_t nu = b->n_uniq;
	const size_t ntok = (size_t)st_dist_size(R->dist);
	const size_t head = (sizeof(rowbuf_t) + sizeof(uint64_t) * ntok + 63) & ~(size_t)63;
	rowbuf_t *rb = malloc(head + sizeof(float) * R->stride * (nu ? nu : 1));
	int rc = ST_ENOMEM;
	if (rb) {
		rb->tokens = (uint64_t *)(rb + 1);
		rb->rows = (float *)((uint8_t *)rb + head);
		free(b->rowbuf);
		b->rowbuf = rb;
		rc = st_dist_pull(R->dist, b->uniq, table, nu, need, !b->eval, (uint32_t)b->seq,
				  rb->rows, R->stride, b->rows, rb->tokens, stop, stop_arg);
	}
	if (!b->eval)
		R->pulled++;
	return rc;
}

static void remote_release(st_rowsrc_t *s, st_batch_t *b)
{
	/* The rows are the batch's own copies: they go with the batch. */
	(void)s;
	(void)b;
}

static int remote_maintain(st_rowsrc_t *s, const st_batch_t *b, uint64_t *evicted)
{
	return st_rowsrc_maintain(((remote_src_t *)s)->shard, b, evicted);
}

static void remote_metrics(st_rowsrc_t *s, st_metrics_t *m)
{
	st_rowsrc_metrics(((remote_src_t *)s)->shard, m);
}

/* Worker w's reply channel, made at its first read. */
static st_dist_stepbuf_t *stepbuf(remote_src_t *R, int w)
{
	if (w < 0 || w >= R->n_workers)
		return NULL;
	if (!R->sb[w])
		R->sb[w] = st_dist_stepbuf_create(R->dist, w);
	return R->sb[w];
}

static int remote_read_step(st_rowsrc_t *s, int w, const st_batch_t *b, const uint8_t *table,
			    const uint32_t *idx, uint32_t n, float *buf, size_t stride,
			    uint8_t *ok)
{
	remote_src_t *R = (remote_src_t *)s;
	if (w < 0 || w >= R->n_workers)
		return ST_EINVAL;
	st_dist_stepbuf_t *sb = stepbuf(R, w);
	if (!sb)
		return ST_ENOMEM;
	return st_dist_pull_step(R->dist, sb, b->uniq, table, idx, n, (uint32_t)b->seq, buf,
				 stride, ok);
}

static int remote_step_submit(st_rowsrc_t *s, int w, const st_batch_t *b, const uint8_t *table,
			      const uint32_t *idx, uint32_t n, float *buf, size_t stride,
			      uint8_t *ok)
{
	remote_src_t *R = (remote_src_t *)s;
	st_dist_stepbuf_t *sb = stepbuf(R, w);
	if (!sb)
		return w < 0 || w >= R->n_workers ? ST_EINVAL : ST_ENOMEM;
	return st_dist_step_submit(R->dist, sb, b->uniq, table, idx, n, (uint32_t)b->seq, buf,
				   stride, ok);
}

static int remote_step_wait(st_rowsrc_t *s, int w)
{
	remote_src_t *R = (remote_src_t *)s;
	st_dist_stepbuf_t *sb = stepbuf(R, w);
	return sb ? st_dist_step_wait(R->dist, sb) : ST_EINVAL;
}

static void remote_step_cancel(st_rowsrc_t *s, int w)
{
	remote_src_t *R = (remote_src_t *)s;
	if (w >= 0 && w < R->n_workers && R->sb[w])
		st_dist_step_cancel(R->dist, R->sb[w]);
}

static const uint64_t *remote_versions(st_rowsrc_t *s, const st_batch_t *b)
{
	(void)s;
	return b->rowbuf ? ((const rowbuf_t *)b->rowbuf)->tokens : NULL;
}

static void remote_destroy(st_rowsrc_t *s)
{
	remote_src_t *R = (remote_src_t *)s;
	for (int w = 0; R->sb && w < R->n_workers; w++)
		st_dist_stepbuf_destroy(R->sb[w]);
	free(R->sb);
	free(R);
}

static const st_rowsrc_methods_t remote_methods = {
	.version = ST_ROWSRC_VERSION,
	.name = "remote",
	.caps = 0,
	.resolve = remote_resolve,
	.release = remote_release,
	.maintain = remote_maintain,
	.metrics = remote_metrics,
	.destroy = remote_destroy,
	.read_step = remote_read_step,
	.versions = remote_versions,
	.step_submit = remote_step_submit,
	.step_wait = remote_step_wait,
	.step_cancel = remote_step_cancel,
	.step_ahead_max = ST_DIST_STEP_MAX_AHEAD,
};

int st_rowsrc_remote_create(st_rowsrc_t **out, const st_rowsrc_remote_cfg_t *cfg)
{
	remote_src_t *R = calloc(1, sizeof *R);
	if (!R)
		return ST_ENOMEM;
	R->base.m = &remote_methods;
	R->dist = cfg->dist;
	R->shard = cfg->shard;
	R->clock = cfg->clock;
	R->stride = cfg->stride;
	R->n_workers = cfg->n_workers;
	R->sb = calloc((size_t)(cfg->n_workers > 0 ? cfg->n_workers : 1), sizeof *R->sb);
	if (!R->sb) {
		free(R);
		return ST_ENOMEM;
	}
	*out = &R->base;
	return ST_OK;
}
