/*
 * auto.c — st.sync.auto's controller (auto.h): step-time windows per
 * worker, the spread of the workers' speeds, the threshold with
 * hysteresis, and the vote that turns them into one decision for one
 * process (threads transport) or for every rank of a job (ranks
 * transport).
 *
 * The rule. With `window` step times from every worker since the last
 * switch, the slowest worker's mean step time is compared to the fastest
 * one's. Above threshold the lockstep policy would make every worker wait
 * for the slowest (the GBA paper's motivation for moving to asynchronous
 * aggregation when workers are unequal, gba-global-batch-aggregation.txt
 * §1-2); below threshold * 0.8 — hysteresis, so a ratio hovering at the
 * threshold does not flip every window — it goes back to the synchronous
 * policy, whose updates are exact.
 *
 * Across processes every rank must switch at the same point, so the ranks
 * vote: an allgather of each rank's spread (and whether it is out of
 * data), from which every rank makes the same decision — the slowest
 * worker of any rank against the fastest of any rank, the one-process rule
 * over all the job's workers. When (the trainer's ticks):
 *
 *  - synchronous phase (lockstep): after every `window` steps. Every rank
 *    takes part in every step (a rank out of data with empty steps, the
 *    trainer's drain), so the ranks count the same steps and vote
 *    together.
 *  - asynchronous phase: a rank votes after every `window` of its own
 *    batches, and once when it is out of data; a rank out of data then
 *    keeps voting until every rank is (the vote that finds them all out of
 *    data ends training) or the vote switches back to the synchronous
 *    policy. So the ranks meet every `window` batches: ranks drift apart
 *    by at most that much, and a straggling rank is waited for there.
 *
 * The switch itself is the trainer's (ops/train/trainer.c, swap_policy):
 * synchronous -> asynchronous leaves the replicas as they are (they are
 * identical) and releases pulls that were waiting for steps that will not
 * come; asynchronous -> synchronous drains every rank's updates and gives
 * every rank rank 0's dense parameters and optimizer state. A rank that
 * dies makes the next vote fail: under auto the job stops, naming it, in
 * either phase.
 *
 * Threads: see auto.h. Each worker's ring is written by that worker only;
 * the decision reads every ring on the trainer's thread between batches.
 */
#include "ops/sync/auto.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/sync/registry.h"
#include "ops/sync/sync.h"
#include "runtime/err.h"
#include "runtime/net/net.h"

/* The sub-policies when the job names none: sync, then async. */
static const char *const sub_default[2] = { "allreduce", "async" };

struct st_auto {
	int n_workers;
	st_auto_transport_t *tp;   /* borrowed */
	st_sync_cfg_t sub[2];      /* deep copies (the job is not kept) */
	double threshold;
	uint32_t window;
	int cur;                   /* 0 or 1: the sub-policy running now */
	double *ring;              /* [n_workers * window] last step times */
	uint32_t *ring_n;          /* [n_workers] samples since the last restart */
};

/* ---- transports ---------------------------------------------------------- */

static int self_allgather(void *ctx, const void *mine, size_t len, void *out)
{
	(void)ctx;
	memcpy(out, mine, len);
	return ST_OK;
}

void st_auto_transport_threads(st_auto_transport_t *out)
{
	*out = (st_auto_transport_t){ .n = 1, .allgather = self_allgather, .per_window = 0 };
}

static int net_allgather(void *ctx, const void *mine, size_t len, void *out)
{
	return st_net_allgather(ctx, mine, len, out);
}

void st_auto_transport_ranks(st_auto_transport_t *out, st_net_t *net)
{
	*out = (st_auto_transport_t){ .n = st_net_size(net), .allgather = net_allgather,
				      .ctx = net, .per_window = 1 };
}

/* ---- the job's settings ---------------------------------------------------- */

int st_auto_is_meta(const st_sync_cfg_t *cfg)
{
	const st_policy_t *p = st_policy_find(cfg->name);
	return p && (p->caps & ST_POL_META);
}

/* The first policy of cfg (a meta one's sub-policies included) that
 * st_sync_find does not know, or NULL. */
static const char *missing(const st_sync_cfg_t *cfg)
{
	if (st_auto_is_meta(cfg))
		return st_auto_missing(cfg);
	const char *name = cfg->name ? cfg->name : "async";
	return st_sync_find(name) ? NULL : name;
}

const char *st_auto_missing(const st_sync_cfg_t *cfg)
{
	for (int i = 0; i < 2; i++) {
		const char *m = cfg->sub[i] ? missing(cfg->sub[i]) : sub_default[i];
		if (m && (cfg->sub[i] || !st_sync_find(m)))
			return m;
	}
	return NULL;
}

/* Across processes the switch goes between a lockstep policy, whose steps
 * every rank takes together, and one whose ranks go at their own pace (the
 * protocol above). kstep and shadow keep replicas that a switch would have
 * to merge, and hop_bw's steps are a rank's own; the registry does not
 * offer them (no ST_POL_AUTO_* capability). */
int st_auto_dist_ok(const st_sync_cfg_t *cfg)
{
	static const unsigned need[2] = { ST_POL_AUTO_SYNC, ST_POL_AUTO_ASYNC };
	for (int i = 0; i < 2; i++) {
		const st_sync_cfg_t *s = cfg->sub[i];
		const char *name = !s ? sub_default[i] : s->name ? s->name : "async";
		const st_policy_t *p = st_policy_find(name);
		if (!p || !p->dist || !(p->caps & need[i])) {
			char sync[128], async[128];
			st_error("st.sync.auto across processes switches between a synchronous "
				 "policy (%s) and an asynchronous one (%s); its %s policy is '%s'",
				 st_policy_names(sync, sizeof sync, ST_POL_AUTO_SYNC, 1),
				 st_policy_names(async, sizeof async, ST_POL_AUTO_ASYNC, 1),
				 i ? "async" : "sync", name);
			return 0;
		}
	}
	return 1;
}

static void cfg_free(st_sync_cfg_t *c)
{
	for (int i = 0; i < c->n_params; i++) {
		free(c->keys[i]);
		free(c->strs[i]);
	}
	free(c->keys);
	free(c->strs);
	free(c->vals);
	free(c->name);
	memset(c, 0, sizeof *c);
}

/* Deep copy of a policy's name and parameters (not its sub-policies). */
static int cfg_copy(st_sync_cfg_t *dst, const st_sync_cfg_t *src)
{
	memset(dst, 0, sizeof *dst);
	int n = src->n_params;
	dst->name = strdup(src->name ? src->name : "async");
	dst->keys = calloc((size_t)n + 1, sizeof(char *));
	dst->strs = calloc((size_t)n + 1, sizeof(char *));
	dst->vals = calloc((size_t)n + 1, sizeof(double));
	if (!dst->name || !dst->keys || !dst->strs || !dst->vals) {
		cfg_free(dst);
		return ST_ENOMEM;
	}
	for (int i = 0; i < n; i++) {
		dst->n_params++;
		dst->vals[i] = src->vals[i];
		if ((src->keys[i] && !(dst->keys[i] = strdup(src->keys[i]))) ||
		    (src->strs[i] && !(dst->strs[i] = strdup(src->strs[i])))) {
			cfg_free(dst);
			return ST_ENOMEM;
		}
	}
	return ST_OK;
}

/* ---- the controller ---------------------------------------------------------- */

int st_auto_create(st_auto_t **out, const st_sync_cfg_t *cfg, int n_workers,
		   st_auto_transport_t *tp)
{
	st_auto_t *a = calloc(1, sizeof *a);
	if (!a)
		return ST_ENOMEM;
	a->n_workers = n_workers;
	a->tp = tp;
	uint32_t window = (uint32_t)st_sync_cfg_num(cfg, "window", 20);
	a->window = window < 1 ? 1 : window > 1024 ? 1024 : window;
	a->threshold = st_sync_cfg_num(cfg, "threshold", 1.5);
	int rc = ST_OK;
	for (int i = 0; i < 2 && rc >= 0; i++) {
		st_sync_cfg_t d = { .name = (char *)sub_default[i] };
		rc = cfg_copy(&a->sub[i], cfg->sub[i] ? cfg->sub[i] : &d);
	}
	a->ring = malloc(sizeof(double) * (size_t)n_workers * a->window);
	a->ring_n = calloc((size_t)n_workers, sizeof(uint32_t));
	if (rc < 0 || !a->ring || !a->ring_n) {
		st_auto_destroy(a);
		return ST_ENOMEM;
	}
	*out = a;
	return ST_OK;
}

void st_auto_destroy(st_auto_t *a)
{
	if (!a)
		return;
	cfg_free(&a->sub[0]);
	cfg_free(&a->sub[1]);
	free(a->ring);
	free(a->ring_n);
	free(a);
}

const st_sync_cfg_t *st_auto_policy(const st_auto_t *a, int i) { return &a->sub[i]; }
int st_auto_current(const st_auto_t *a) { return a->cur; }
int st_auto_across(const st_auto_t *a) { return a->tp->per_window; }

void st_auto_restart(st_auto_t *a)
{
	memset(a->ring_n, 0, sizeof(uint32_t) * (size_t)a->n_workers);
}

void st_auto_record(st_auto_t *a, int w, double secs)
{
	a->ring[(size_t)w * a->window + a->ring_n[w] % a->window] = secs;
	a->ring_n[w]++;
}

/* The fastest and slowest workers' mean step times over the window; 0 when
 * some worker has fewer than `window` samples since the last restart. */
static int spread(const st_auto_t *a, double *lo, double *hi)
{
	const uint32_t win = a->window;
	*lo = INFINITY;
	*hi = 0;
	for (int i = 0; i < a->n_workers; i++) {
		if (a->ring_n[i] < win)
			return 0;
		const double *ring = a->ring + (size_t)i * win;
		double sum = 0;
		for (uint32_t k = 0; k < win; k++)
			sum += ring[k];
		double mean = sum / win;
		*lo = mean < *lo ? mean : *lo;
		*hi = mean > *hi ? mean : *hi;
	}
	return 1;
}

/* The sub-policy wanted at this spread (with hysteresis). */
static int want(const st_auto_t *a, double ratio)
{
	if (a->cur == 0 && ratio > a->threshold)
		return 1;
	if (a->cur == 1 && ratio < a->threshold * 0.8)
		return 0;
	return a->cur;
}

/* One voter's ballot (the same bytes on every rank of a job). */
typedef struct vote {
	uint32_t done;             /* out of data */
	uint32_t ready;            /* every worker has a full window */
	double lo, hi;
} vote_t;

int st_auto_vote(st_auto_t *a, int done, uint64_t batch, const char *now,
		 st_auto_verdict_t *v)
{
	*v = (st_auto_verdict_t){ .want = a->cur, .ratio = 1.0 };
	const int P = a->tp->n;
	vote_t me = { .done = (uint32_t)done };
	me.ready = !done && spread(a, &me.lo, &me.hi);
	vote_t one, *all = P == 1 ? &one : malloc(sizeof(vote_t) * (size_t)P);
	if (!all)
		return ST_ENOMEM;
	int rc = a->tp->allgather(a->tp->ctx, &me, sizeof me, all);
	double lo = INFINITY, hi = 0;
	int ready = 0, out = 1;
	for (int r = 0; rc >= 0 && r < P; r++) {
		out &= all[r].done != 0;
		if (!all[r].ready)
			continue;
		ready = 1;
		lo = all[r].lo < lo ? all[r].lo : lo;
		hi = all[r].hi > hi ? all[r].hi : hi;
	}
	if (all != &one)
		free(all);
	a->tp->tick = 0;
	v->all_done = out;
	if (rc < 0) {
		st_error("st.sync.auto: the vote with the other ranks failed: %s", st_strerror(rc));
		return rc;
	}
	if (out || !ready)
		return ST_OK;
	v->ratio = lo > 0 ? hi / lo : 1.0;
	if (a->tp->per_window)
		st_debug("st.sync.auto: vote after batch %llu: slowest / fastest worker %.2f (%s)",
			 (unsigned long long)batch, v->ratio, now);
	v->want = want(a, v->ratio);
	return ST_OK;
}

int st_auto_tick(st_auto_t *a, int done, uint64_t batch, const char *now,
		 st_auto_verdict_t *v)
{
	if (a->tp->per_window && ++a->tp->tick < a->window) {
		*v = (st_auto_verdict_t){ .want = a->cur, .ratio = 1.0 };
		return ST_OK;
	}
	return st_auto_vote(a, done, batch, now, v);
}

void st_auto_switched(st_auto_t *a, const st_auto_verdict_t *v, uint64_t batch,
		      const char *from, const char *to)
{
	st_info("batch %llu: worker speeds %s (%.1fx): %s -> %s", (unsigned long long)batch,
		v->want ? "diverge" : "converge", v->ratio, from, to);
	a->cur = v->want;
}
