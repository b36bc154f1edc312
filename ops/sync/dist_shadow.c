/*
 * dist_shadow.c — ShadowSync across processes ("shadow{algo, alpha, eta}"
 * in a multi-process job; Zheng et al., shadowsync-background-sync.md
 * §3.3): each rank is one of the paper's trainers. Its N workers train its
 * dense replica w^(i) Hogwild and never wait; a background thread per rank
 * ("st-shadow-net", the paper's shadow thread, Algorithm 1 lines 10-12)
 * syncs the replicas across the ranks. Rows go to their owners and are
 * applied on arrival, as under async. dist_sync.h has the overview of
 * the multi-process policies; shadow.c is the one-process twin.
 *
 *   ma    (Algorithm 3): each round allreduces the replicas
 *         (st_net_allreduce_f32, summed in rank order, so every rank gets
 *         the same bits) and blends w <- (1 - a) w + a mean(w).
 *   bmuf  (Algorithm 4): every rank holds w^global (lines 2, 9), initialised
 *         to the initial replica w_0; a round allreduces the replicas
 *         (w^copy = their mean, lines 5-6), steps w^global <- w^global +
 *         eta (w^copy - w^global) (lines 7-9: a plain block step, no
 *         momentum) and blends w <- (1 - a) w + a w^global (line 10). The
 *         allreduce gives every rank the same bits, so w^global stays
 *         identical on every rank without ever being sent.
 *   easgd (Algorithm 2): the central copy w^PS (the paper's sync PS,
 *         Algorithm 1 line 3) lives on rank 0, starting at w_0. A round of
 *         rank i sends w^(i) to rank 0 (CH_SHADOW_REQ), which applies
 *         w^PS <- (1 - a) w^PS + a w^(i) (line 4) on arrival, one request
 *         at a time in arrival order as a PS would, and answers with the
 *         new w^PS (CH_SHADOW_REPLY); rank i then blends w^(i) <- (1 - a)
 *         w^(i) + a w^PS (line 5). Rank 0's shadow thread is also the PS:
 *         between requests it syncs rank 0's own replica the same way,
 *         without a message.
 * with a = alpha (default 0.5) and eta (default 1), and easgd the default
 * algo, as in shadow.c. The updates are the core ops/algo/blend.h, which
 * the threads transport (shadow.c) runs too; this file is the ranks
 * transport: the allreduces, rank 0's sync PS, the pacing and the end.
 *
 * Pacing: a shadow thread runs at most one round per replica update while
 * its rank trains (a round with nothing new would only cost network).
 *
 * Fixed rate (every = n, the foreground syncs the paper compares ShadowSync
 * with, §3.3 "fixed-rate"; shadow.c's every): the rank's replica syncs
 * after every n of its updates, and its training waits for that: the
 * worker whose update is the n-th asks the shadow thread for a round and
 * waits for it holding the rank's update lock, so the rank's other workers
 * stop at their next update too. The rounds are the same as in the
 * background (so for ma and bmuf a rank's round waits in the allreduce for
 * the other ranks' next round: the ranks sync every n updates together),
 * and so are the end and the failures.
 *
 * End: the shadow threads sync "while data is not all consumed"
 * (Algorithms 2-4 line 3/4), read as the job's data: a rank whose workers
 * are done keeps syncing (every 2 ms instead of once per update) while
 * other ranks train, so its replica keeps following theirs. The last
 * round, once no rank trains any more, sets every replica to the mean of
 * the replicas with one allreduce (the paper's "output the average of
 * w^(i)", §3.3), so the ranks end with identical dense parameters.
 * ma and bmuf carry a "still training" flag in their allreduce: the
 * rounds are collectives, so the round whose flags sum to 0 is everyone's
 * last. easgd's rounds are not collectives, so the ranks agree on the end
 * through rank 0: a rank that is done flags its requests DONE; once rank
 * 0's own workers are done and it has seen DONE from every other rank, it
 * answers each rank's next request with w^PS flagged FIN; a rank that gets
 * FIN sends no more requests and enters the final allreduce, and rank 0
 * enters it once every other rank has had its FIN. So rank 0 has served
 * every request when it leaves, and every rank enters the final
 * collective.
 *
 * Failures: a peer that dies stops the shadow thread with ST_EPEER (a
 * failed collective; for easgd st_net_dead, checked at every wait, and
 * st_net_recv from rank 0), logged naming the rank; the workers' next
 * apply and the policy's finish return it, so the job stops. No wait is
 * unbounded while a peer is dead. A malformed easgd message (wrong size
 * or type, a request after FIN, an answer to another request) is logged
 * naming its sender and fails the thread too: its sender would otherwise
 * wait forever.
 *
 * Memory order: the workers write the replica (env->params) with relaxed
 * atomics (st_sync_apply_hogwild) and the shadow thread reads and blends
 * it element by element with relaxed loads and stores; the two race on
 * purpose, as in shadow.c (a blend between a worker's load and store of a
 * tensor is lost, and the other way round; nothing is torn). w^global,
 * w^PS and the message buffers are the shadow thread's alone.
 *
 * Statistics: per round of a rank, its sync gap (replica updates since
 * its previous round) in the staleness histogram; bytes: what the round
 * sends, 2 nparams floats for an allreduce (as ma always counted) and for
 * an easgd request + reply (counted by the requesting rank; rank 0's own
 * syncs send nothing).
 *
 * Log: finish reports each rank's rounds, how far its replica was from the
 * mean before the final average (the "replica spread", |w - mean| /
 * |mean|: a few 1e-2 when the replicas were synced, about 0.3 on the e2e
 * job when they never were) and an XXH3 digest of its final replica, so a
 * test can check that every rank ends with the same one.
 *
 * Threads: N workers (FREE schedule) + "st-shadow-net" (started in create,
 * joined in finish or destroy). No lock.
 */
#include "ops/sync/dist_sync.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "ops/algo/blend.h"
#include "ops/dist/dist.h"
#include "runtime/err.h"
#include "runtime/net/net.h"
#include "runtime/trace.h"

enum { EASGD = ST_SHADOW_EASGD, MA = ST_SHADOW_MA, BMUF = ST_SHADOW_BMUF };

static const char *const algo_name[] = { [EASGD] = "easgd", [MA] = "ma", [BMUF] = "bmuf" };

/* easgd's channels (runtime/net). 0x3000-0x30ff is reserved here:
 * ops/dist/wire.h uses 1..4 and 64..1087, and the net layer's collectives
 * 0xff00 and up. */
enum {
	CH_SHADOW_REQ = 0x3000,     /* a rank's replica to rank 0's sync PS */
	CH_SHADOW_REPLY = 0x3001,   /* w^PS back, or FIN, to the rank's shadow thread */
};

enum {
	MSG_SYNC = 0x53594e43,      /* "SYNC": header + nparams floats of w^(i) */
	MSG_PS = 0x50535250,        /* "PSRP": header + nparams floats of w^PS */
	SF_DONE = 1,                /* SYNC: the sender's workers are done */
	SF_FIN = 2,                 /* PS: every rank is done; the final average next */
};

/* The header of every easgd message (native-endian, as runtime/net). */
typedef struct shmsg {
	uint32_t type;
	uint32_t flags;
	uint64_t seq;               /* SYNC: the rank's round; PS: echoed */
	uint64_t n;                 /* floats after the header */
} shmsg_t;

typedef struct {
	st_sync_env_t env;
	int N, algo;
	float alpha, eta;
	st_sync_dense_t dense;         /* the replica's optimizer state (the trainer's) */
	pthread_mutex_t umu;           /* one worker's optimizer step at a time */
	uint64_t version;              /* replica updates (relaxed atomic) */
	st_sync_hogwild_t *hw;         /* [N] */
	rowsend_t send;                /* row pushes */
	float *buf;                    /* [nparams + 1]: the replica, then the flag */
	float *glob;                   /* bmuf: w^global [nparams] */
	float *ps;                     /* easgd, rank 0: w^PS [nparams] */
	uint8_t *done_from;            /* easgd, rank 0: [P] 1 DONE seen, 2 FIN sent */
	pthread_t th;
	int started;
	int done;                      /* this rank trained its last batch (atomic) */
	int err;                       /* the shadow thread's error (atomic) */
	uint64_t rounds;               /* this rank's syncs (the shadow thread's) */
	uint64_t round_t0;             /* st_trace_now at the round's start; 0 off */
	uint64_t every;                /* fixed rate: a round per `every` updates */
	uint64_t want;                 /*   the update a worker waits to see synced (atomic) */
	uint64_t target;               /*   the request the current round serves (thread's) */
	uint64_t synced;               /*   the last request served (atomic) */
	int over;                      /* the shadow thread returned (atomic) */
	uint64_t served;               /* easgd, rank 0: the other ranks' syncs */
	double spread;                 /* |w - mean| / |mean| before the final average */
	st_sync_stats_t st;
} dsh_t;

static void *fail(dsh_t *s, int rc)
{
	__atomic_store_n(&s->err, rc, __ATOMIC_RELAXED);
	return NULL;
}

static void nap(long us)
{
	struct timespec ts = { 0, us * 1000 };
	nanosleep(&ts, NULL);
}

/* Fixed rate: whether a worker asked for a round since the last one (the
 * round about to start serves it). */
static int take_request(dsh_t *s)
{
	uint64_t want = __atomic_load_n(&s->want, __ATOMIC_ACQUIRE);
	if (want == s->target)
		return 0;
	s->target = want;
	return 1;
}

/* Fixed rate: the round that took the request is over. */
static void round_done(dsh_t *s)
{
	if (s->every)
		__atomic_store_n(&s->synced, s->target, __ATOMIC_RELEASE);
}

/* Waits until this rank's replica has changed since *seen (fixed rate: a
 * worker asked for a round) or its workers are done; returns done (and
 * the gap since *seen, which moves on). A rank that is done and has
 * nothing new naps 2 ms first: it keeps syncing while other ranks train, a
 * little slower. dead: check for dead peers while waiting (easgd; ma/bmuf's
 * collectives find them). */
static int wait_round(dsh_t *s, uint64_t *seen, uint64_t *gap, int dead, int *rc)
{
	st_net_t *net = st_dist_net(s->env.dist);
	*rc = ST_OK;
	for (;;) {
		int done = __atomic_load_n(&s->done, __ATOMIC_ACQUIRE);
		uint64_t v = __atomic_load_n(&s->version, __ATOMIC_RELAXED);
		int first;
		if (dead && st_net_dead(net, &first)) {
			st_error("shadow: rank %d died: the background sync (%s) stops the job",
				 first, algo_name[s->algo]);
			*rc = ST_EPEER;
			return done;
		}
		const int go = s->every ? take_request(s) : v != *seen;
		if (!go && !done) {
			nap(s->every ? 50 : 200);
			continue;
		}
		if (!go)
			nap(2000);
		*gap = v - *seen;
		*seen = v;
		return done;
	}
}

/* A round begins (the trace's "sync round" span on st-shadow-net, ended
 * by note_round). */
static void round_start(dsh_t *s)
{
	s->round_t0 = st_trace_enabled() ? st_trace_now() : 0;
}

/* One sync of this rank's replica: its gap and what it sent. */
static void note_round(dsh_t *s, uint64_t gap, uint64_t floats)
{
	if (s->round_t0)
		st_trace_span("round", "sync round", NULL, s->round_t0, st_trace_now(),
			      (int64_t)s->rounds);
	s->round_t0 = 0;
	s->rounds++;
	st_sync_stat_add(&s->st.staleness[st_sync_hist_bucket(gap)], 1);
	st_sync_stat_add(&s->st.bytes, sizeof(float) * floats);
}

/* w <- (1 - a) w + a c, or w <- c when last, element by element against
 * the workers (relaxed); c[j] is taken times scale. The last blend also
 * measures how far this rank's replica was from the mean, |w - c| / |c|
 * (L2), for the log: replicas that were not synced during training end far
 * apart even though the final average hides it. */
static void blend(dsh_t *s, const float *c, float scale, int last)
{
	float *p = s->env.params;
	if (!last) {
		st_algo_blend_toward(p, c, scale, s->env.nparams, s->alpha);
		return;
	}
	double d2 = 0, c2 = 0;
	for (size_t j = 0; j < s->env.nparams; j++) {
		float x = c[j] * scale, w;
		st_sync_load_relaxed(&w, &p[j], 1);
		d2 += (double)(w - x) * (w - x);
		c2 += (double)x * x;
		st_sync_store_relaxed(&p[j], &x, 1);
	}
	s->spread = c2 > 0 ? sqrt(d2 / c2) : sqrt(d2);
}

/* ---- ma and bmuf: rounds are allreduces (Algorithms 3 and 4) ------------- */

static void *collective_main(dsh_t *s)
{
	st_net_t *net = st_dist_net(s->env.dist);
	const size_t np = s->env.nparams;
	const float inv = 1.0f / (float)st_net_size(net);
	uint64_t seen = 0, gap;
	int rc;
	for (;;) {
		int done = wait_round(s, &seen, &gap, 0, &rc);
		round_start(s);
		/* Algorithm 3 lines 5-6, Algorithm 4 lines 5-6: the sum of the
		 * replicas, and whether anybody still trains. */
		st_sync_load_relaxed(s->buf, s->env.params, np);
		s->buf[np] = done ? 0.0f : 1.0f;
		rc = st_net_allreduce_f32(net, s->buf, np + 1);
		if (rc < 0)
			return fail(s, rc);
		const int last = s->buf[np] == 0.0f;   /* nobody trains any more */
		if (s->algo == BMUF && !last) {
			/* Algorithm 4 lines 7-9: the same bits on every rank. */
			st_algo_blend_bmuf_step(s->glob, s->buf, inv, np, s->eta);
			blend(s, s->glob, 1.0f, 0);          /* line 10 */
		} else {
			blend(s, s->buf, inv, last);         /* Algorithm 3 line 7 */
		}
		note_round(s, gap, 2 * (uint64_t)np);
		round_done(s);
		if (last)
			return NULL;
	}
}

/* ---- easgd: rank 0 is the sync PS (Algorithm 2) ------------------------- */

/* The end of every rank's easgd: every replica <- the mean of the replicas
 * (one allreduce, entered by every rank after FIN). */
static int final_mean(dsh_t *s)
{
	st_net_t *net = st_dist_net(s->env.dist);
	const size_t np = s->env.nparams;
	round_start(s);
	st_sync_load_relaxed(s->buf, s->env.params, np);
	int rc = st_net_allreduce_f32(net, s->buf, np);
	if (rc < 0)
		return rc;
	blend(s, s->buf, 1.0f / (float)st_net_size(net), 1);
	note_round(s, 0, 2 * (uint64_t)np);
	return ST_OK;
}

/* Algorithm 2 line 4 on the PS: w^PS <- (1 - a) w^PS + a x. */
static void ps_apply(dsh_t *s, const float *x)
{
	st_algo_blend_ps(s->ps, x, s->env.nparams, s->alpha);
}

/* Rank 0: one request from rank `from` (takes msg). Applies it to w^PS and
 * answers with w^PS, flagged FIN when fin0 (rank 0 is done) and every
 * rank is done; *ndone counts the ranks seen DONE, *nfin those sent FIN. */
static int serve(dsh_t *s, void *msg, size_t len, int from, int fin0, int *ndone, int *nfin)
{
	st_net_t *net = st_dist_net(s->env.dist);
	const size_t np = s->env.nparams;
	const shmsg_t *h = msg;
	const char *why = len < sizeof *h ? "short"
		: h->type != MSG_SYNC ? "not a sync request"
		: h->n != np || len != sizeof *h + sizeof(float) * np ? "wrong replica size"
		: s->done_from[from] == 2 ? "a request after FIN"
		: s->done_from[from] && !(h->flags & SF_DONE) ? "training again after DONE"
		: NULL;
	if (why) {
		st_error("shadow: a malformed easgd request from rank %d on channel %#x (%s, "
			 "%zu bytes for %zu parameters): the ranks disagree on the model or "
			 "the protocol", from, CH_SHADOW_REQ, why, len, np);
		free(msg);
		return ST_EPEER;
	}
	ps_apply(s, (const float *)(h + 1));
	if ((h->flags & SF_DONE) && !s->done_from[from]) {
		s->done_from[from] = 1;
		++*ndone;
	}
	const int P = st_net_size(net);
	shmsg_t r = { .type = MSG_PS, .seq = h->seq, .n = np };
	if (fin0 && *ndone == P - 1) {
		r.flags = SF_FIN;
		s->done_from[from] = 2;
		++*nfin;
	}
	int rc = st_net_send2(net, from, CH_SHADOW_REPLY, &r, sizeof r, s->ps,
			      sizeof(float) * np);
	free(msg);
	s->served++;
	return rc;
}

static void *ps_main(dsh_t *s)
{
	st_net_t *net = st_dist_net(s->env.dist);
	const int P = st_net_size(net);
	const size_t np = s->env.nparams;
	uint64_t seen = 0;
	int ndone = 0, nfin = 0, fin0 = 0;
	struct timespec last = { 0, 0 };
	for (;;) {
		int first;
		if (st_net_dead(net, &first)) {
			st_error("shadow: rank %d died: the background sync (easgd) stops the job",
				 first);
			return fail(s, ST_EPEER);
		}
		/* Rank 0's own round, when its replica moved; once its workers
		 * are done, every 2 ms (as the other ranks' requests). */
		int done = __atomic_load_n(&s->done, __ATOMIC_ACQUIRE);
		uint64_t v = __atomic_load_n(&s->version, __ATOMIC_RELAXED);
		struct timespec now;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if ((s->every ? take_request(s) : v != seen) ||
		    (done && (now.tv_sec - last.tv_sec) * 1000000000L +
			     (now.tv_nsec - last.tv_nsec) >= 2000000L)) {
			round_start(s);
			st_sync_load_relaxed(s->buf, s->env.params, np);
			ps_apply(s, s->buf);                  /* Algorithm 2 line 4 */
			blend(s, s->ps, 1.0f, 0);             /* line 5 */
			note_round(s, v - seen, 0);
			round_done(s);
			seen = v;
			last = now;
			fin0 = done;
		}
		if (fin0 && nfin == P - 1)
			break;
		/* Serve: wait a little for a request, then take all that queued. */
		double to = 200e-6;
		for (;;) {
			void *m;
			size_t len;
			int from;
			int rc = st_net_recv(net, ST_NET_ANY, CH_SHADOW_REQ, &m, &len, &from, to);
			to = 0;
			if (rc == ST_EAGAIN)
				break;
			if (rc >= 0) {
				uint64_t t0 = st_trace_enabled() ? st_trace_now() : 0;
				rc = serve(s, m, len, from, fin0, &ndone, &nfin);
				if (t0)
					st_trace_span("work", "serve sync", NULL, t0,
						      st_trace_now(), -1);
			}
			if (rc < 0) {
				if (st_net_dead(net, &first))
					st_error("shadow: rank %d died: the background sync (easgd) "
						 "stops the job", first);
				else
					st_error("shadow: easgd's sync PS (rank 0): %s",
						 st_strerror(rc));
				return fail(s, rc);
			}
		}
	}
	/* Every other rank had its FIN and sends no more requests. */
	int rc = final_mean(s);
	return rc < 0 ? fail(s, rc) : NULL;
}

/* A rank other than 0: rank 0's answer to request seq (w^PS). Checks for
 * dead peers every half second. *msg is malloc'd. */
static int recv_ps(dsh_t *s, uint64_t seq, void **msg)
{
	const size_t floats = s->env.nparams;
	st_net_t *net = st_dist_net(s->env.dist);
	for (;;) {
		size_t len;
		int rc = st_net_recv(net, 0, CH_SHADOW_REPLY, msg, &len, NULL, 0.5);
		int first;
		if (rc == ST_EAGAIN && !st_net_dead(net, &first))
			continue;
		if (rc == ST_EAGAIN) {
			st_error("shadow: rank %d died: the background sync (easgd) stops the job",
				 first);
			return ST_EPEER;
		}
		if (rc < 0) {
			st_error("shadow: easgd's sync PS (rank 0) is gone: %s", st_strerror(rc));
			return rc;
		}
		const shmsg_t *h = *msg;
		if (len == sizeof *h + sizeof(float) * floats && h->type == MSG_PS &&
		    h->n == floats && h->seq == seq)
			return ST_OK;
		st_error("shadow: a malformed easgd message from rank 0 on channel %#x (%zu "
			 "bytes; expected w^PS, %zu floats, for sync %llu)", CH_SHADOW_REPLY, len,
			 floats, (unsigned long long)seq);
		free(*msg);
		*msg = NULL;
		return ST_EPEER;
	}
}

static void *easgd_main(dsh_t *s)
{
	st_net_t *net = st_dist_net(s->env.dist);
	if (st_net_rank(net) == 0)
		return ps_main(s);
	const size_t np = s->env.nparams;
	uint64_t seen = 0, gap;
	int rc;
	for (;;) {
		int done = wait_round(s, &seen, &gap, 1, &rc);
		if (rc < 0)
			return fail(s, rc);
		round_start(s);
		st_sync_load_relaxed(s->buf, s->env.params, np);
		shmsg_t h = { .type = MSG_SYNC, .flags = done ? SF_DONE : 0, .seq = s->rounds,
			      .n = np };
		rc = st_net_send2(net, 0, CH_SHADOW_REQ, &h, sizeof h, s->buf, sizeof(float) * np);
		void *m = NULL;
		if (rc >= 0)
			rc = recv_ps(s, h.seq, &m);
		if (rc < 0)
			return fail(s, rc);
		const shmsg_t *r = m;
		blend(s, (const float *)(r + 1), 1.0f, 0);   /* Algorithm 2 line 5 */
		const int fin = (r->flags & SF_FIN) != 0;
		free(m);
		note_round(s, gap, 2 * (uint64_t)np);
		round_done(s);
		if (fin)
			break;
	}
	rc = final_mean(s);
	return rc < 0 ? fail(s, rc) : NULL;
}

static void *shadow_main(void *arg)
{
	dsh_t *s = arg;
	pthread_setname_np(pthread_self(), "st-shadow-net");
	void *r = s->algo == EASGD ? easgd_main(s) : collective_main(s);
	__atomic_store_n(&s->over, 1, __ATOMIC_RELEASE);
	return r;
}

static void dsh_destroy(void *self)
{
	dsh_t *s = self;
	if (!s)
		return;
	if (s->started) {
		/* A failed job: the thread ends when a peer fails (the other
		 * ranks stop too) or when every rank is done. */
		__atomic_store_n(&s->done, 1, __ATOMIC_RELEASE);
		pthread_join(s->th, NULL);
	}
	for (int w = 0; s->hw && w < s->N; w++)
		st_sync_hogwild_fini(&s->hw[w]);
	free(s->hw);
	free(s->buf);
	free(s->glob);
	free(s->ps);
	free(s->done_from);
	st_sync_dense_fini(&s->dense);
	st__rowsend_fini(&s->send);
	pthread_mutex_destroy(&s->umu);
	free(s);
}

static int dsh_create(void **self, const st_sync_env_t *env)
{
	if (!env->dist)
		return ST_EINVAL;
	/* The same settings and defaults (easgd) as in one process. */
	st_sync_shadow_cfg_t c;
	if (st_sync_shadow_cfg(env->cfg, &c) < 0)
		return ST_EJOB;
	dsh_t *s = calloc(1, sizeof *s);
	if (!s)
		return ST_ENOMEM;
	s->env = *env;
	s->N = env->n_workers;
	s->algo = c.algo;
	s->alpha = (float)c.alpha;
	s->eta = (float)c.eta;
	s->every = c.every;
	st__rowsend_init(&s->send);
	pthread_mutex_init(&s->umu, NULL);
	const size_t np = env->nparams, nb = sizeof(float) * (np ? np : 1);
	st_net_t *net = st_dist_net(env->dist);
	s->hw = calloc((size_t)s->N, sizeof *s->hw);
	s->buf = malloc(sizeof(float) * (np + 1));
	int ok = s->hw && s->buf;
	/* Algorithm 4 line 2, Algorithm 1 line 3: the global copies start at
	 * w_0, the initial replica (the same on every rank: one seed). */
	if (ok && c.algo == BMUF && (ok = (s->glob = malloc(nb)) != NULL))
		memcpy(s->glob, env->params, sizeof(float) * np);
	if (ok && c.algo == EASGD && st_net_rank(net) == 0) {
		s->ps = malloc(nb);
		s->done_from = calloc((size_t)st_net_size(net), 1);
		if ((ok = s->ps && s->done_from))
			memcpy(s->ps, env->params, sizeof(float) * np);
	}
	int rc = ok ? st_sync_dense_init(&s->dense, env) : ST_ENOMEM;
	for (int w = 0; rc >= 0 && w < s->N; w++)
		rc = st_sync_hogwild_init(&s->hw[w], env);
	if (rc >= 0 && pthread_create(&s->th, NULL, shadow_main, s) != 0)
		rc = ST_ENOMEM;
	if (rc < 0) {
		dsh_destroy(s);
		return rc;
	}
	s->started = 1;
	*self = s;
	return ST_OK;
}

static const float *dsh_begin_step(void *self, int w, uint64_t step)
{
	dsh_t *s = self;
	(void)step;
	return st_sync_hogwild_read(&s->hw[w], &s->env, &s->version);
}

/* Fixed rate: the worker whose update was the v-th (a multiple of every)
 * asks for a round and waits until it is over, holding umu (the rank's
 * other workers wait at their next update). */
static int wait_synced(dsh_t *s, uint64_t v)
{
	__atomic_store_n(&s->want, v, __ATOMIC_RELEASE);
	for (;;) {
		int rc = __atomic_load_n(&s->err, __ATOMIC_RELAXED);
		if (rc < 0)
			return rc;
		if (__atomic_load_n(&s->synced, __ATOMIC_ACQUIRE) >= v)
			return ST_OK;
		if (__atomic_load_n(&s->over, __ATOMIC_ACQUIRE))
			return ST_ECANCELED;   /* the job is being torn down */
		nap(20);
	}
}

static int dsh_apply(void *self, int w, st_sync_grads_t *g)
{
	dsh_t *s = self;
	int rc = __atomic_load_n(&s->err, __ATOMIC_RELAXED);
	if (rc < 0 || !g->n_examples)
		return rc;
	/* The replica's step (Hogwild, dense tensors only: the batch's rows
	 * are private copies without optimizer state), then the rows to
	 * their owners. */
	st_sync_grads_t dense_only = *g;
	dense_only.n_rows = 0;
	/* The rank's workers share one Adam state: two steps interleaved
	 * element by element could pair one worker's first moment with the
	 * other's near-zero second moment and blow the replica up in the
	 * first steps (seen about once in 150-300 runs of 2 workers per
	 * rank), so the steps take turns; the shadow thread's blends still
	 * race with them, as in the paper. */
	pthread_mutex_lock(&s->umu);
	st_sync_apply_hogwild(&s->env, &s->dense, &s->version, &s->hw[w], &dense_only, &s->st);
	const uint64_t v = __atomic_load_n(&s->version, __ATOMIC_RELAXED);
	if (s->every && v % s->every == 0)
		rc = wait_synced(s, v);
	pthread_mutex_unlock(&s->umu);
	if (rc < 0)
		return rc;
	uint64_t bytes = 0;
	rc = st__rowsend_push(&s->env, &s->send, g, __atomic_load_n(s->dense.t, __ATOMIC_RELAXED),
			      NULL, &bytes);
	st_sync_stat_add(&s->st.bytes, bytes);
	return rc;
}

static int dsh_finish(void *self)
{
	dsh_t *s = self;
	if (!s->started)
		return ST_OK;
	__atomic_store_n(&s->done, 1, __ATOMIC_RELEASE);
	pthread_join(s->th, NULL);
	s->started = 0;
	int rc = __atomic_load_n(&s->err, __ATOMIC_RELAXED);
	if (rc < 0)
		return rc;
	/* The digest lets a test check that every rank ends with the same
	 * replica (STRATA_DIGEST covers rank 0's dense parameters only). */
	unsigned long long h = XXH3_64bits(s->env.params, sizeof(float) * s->env.nparams);
	if (s->algo == EASGD && s->ps)
		st_info("shadow (easgd): %llu syncs of rank 0's replica and %llu of the other "
			"ranks' with the central copy, then the mean (replica spread %.2e); "
			"dense replica digest %016llx", (unsigned long long)s->rounds - 1,
			(unsigned long long)s->served, s->spread, h);
	else if (s->algo == EASGD)
		st_info("shadow (easgd): %llu syncs with rank 0's central copy, then the mean "
			"(replica spread %.2e); dense replica digest %016llx",
			(unsigned long long)s->rounds - 1, s->spread, h);
	else
		st_info("shadow (%s): %llu averaging rounds across the ranks (replica spread "
			"%.2e); dense replica digest %016llx", algo_name[s->algo],
			(unsigned long long)s->rounds, s->spread, h);
	return ST_OK;
}

static void dsh_report(void *self, st_sync_stats_t *out)
{
	st_sync_stats_read(&((dsh_t *)self)->st, out);
}

const st_sync_ops_t st_sync_dist_shadow_ops = {
	.name = "shadow",
	.schedule = ST_SYNC_FREE,
	.flags = ST_SYNC_RELAXED_READS | ST_SYNC_STEP_ROWS | ST_SYNC_RANK_REPLICAS,
	.create = dsh_create,
	.destroy = dsh_destroy,
	.begin_batch = st__sync_noop_begin_batch,
	.begin_step = dsh_begin_step,
	.apply = dsh_apply,
	.end_batch = st__sync_noop_end_batch,
	.report = dsh_report,
	.finish = dsh_finish,
};
