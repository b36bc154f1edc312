/*
 * rowsrc.h — the row source: the one interface through which the trainer
 * gets a batch's embedding rows and gives them back, whatever holds them.
 * Backends, each in its own file:
 *
 *   local   (local.c)   this process's tables: a RAM tier, with storage.ssd
 *                       an SSD tier under it (runtime/store/)
 *   remote  (remote.c)  the job's sharded tables across processes (ops/dist):
 *                       each key's row lives with its owner rank
 *   (later) the GPU HBM tier (issue 23), multi-process checkpoints (issue
 *           17) build on the same contract
 *
 * Shape (SQLite's sqlite3_vfs / sqlite3_io_methods habit): a source is an
 * st_rowsrc_t whose first and only public member points at its backend's
 * method table; a backend embeds st_rowsrc_t first in its own state and
 * fills the table. Callers hold only st_rowsrc_t * and call the inline
 * dispatchers below; they never learn where rows live, and never test a
 * backend's name.
 *
 * THE CONTRACT
 *
 * Rows. The trainer has up to ST_ROWSRC_MAX_TABLES tables, one per
 * distinct row width; a key's row in table k is, in host memory, its
 * row_dim floats of embedding (+ wide weight) followed by its sparse
 * optimizer state (st_optim_state_floats). A batch's unique keys
 * b->uniq[0..b->n_uniq) each come with their table (table[u]).
 *
 * resolve(b): b->rows (float *[n_uniq], the caller's, in the batch) gets,
 * for every unique key u, a pointer to its row, or NULL: a key not
 * admitted (admission, model.admit_*), or, in an eval batch, a key with no
 * row (an eval batch creates nothing; NULL reads as zeros). A train batch
 * (!b->eval) creates the rows it lacks, subject to admission, initialized
 * from (seed, key). b->seq stamps every row resolved (the TTL clock: rows
 * not resolved for model.ttl batches may be evicted by maintain).
 * What a row pointer is:
 *   - ST_ROWSRC_SHARED sources (local): the live row in the table. The
 *     sync policy updates it in place during train (the one-process
 *     policies, with the relaxed-atomic rules of ops/sync/sync.h), and
 *     every batch resolving the key sees the same row. It stays valid at
 *     the same address until release(b) — with an SSD tier it is pinned
 *     (never evicted to SSD nor moved) until then.
 *   - sources without it (remote): a private copy in the batch's memory
 *     (b->rowbuf), emb+wide floats filled, optimizer state zero. Writes to
 *     it reach no one: the multi-process policies send gradients to the
 *     owners (ops/dist). Valid until the batch is destroyed.
 * Either way the floats are host memory the CPU step reads directly.
 *
 * Ownership. b->rows is the batch's (the caller sizes it to n_uniq before
 * resolve; st_batch_destroy frees it). A backend's per-batch data goes in
 * b->rowbuf: one malloc'd block that st_batch_destroy frees with free(); a
 * backend that needs none leaves it alone. The source is its creator's;
 * it outlives every batch it resolved. Tables, networks and other sources
 * a backend is built over are borrowed unless its constructor says.
 *
 * Threads. resolve: any number of threads at once, each with its own
 * `thread` index (0 <= thread < ST_ROWSRC_MAX_THREADS, the pull stage's
 * thread index); a backend that needs one caller at a time says so
 * (remote: one pull thread). release and maintain: one thread (push), in
 * batch order. metrics: one thread at a time (push). read_step: worker w
 * only with its own w, concurrently with other workers and with resolve.
 * create / destroy: nothing else running.
 *
 * Order. release(b) is called exactly once per batch whose resolve
 * succeeded, after the batch's updates are applied (every policy applies a
 * batch's row updates before its end_batch) and before maintain(b). A
 * batch whose resolve failed is not released: the job stops (its pins, if
 * any, go with the source). maintain may evict rows (TTL) only when no
 * batch in flight can still use them: the trainer makes model.ttl at least
 * the batches that can be in flight at once.
 *
 * Errors: negative ST_E* codes, never a crash: ST_ENOMEM; the store's
 * (ST_ECORRUPT, ST_ENOSPC, ST_EIO from an SSD tier); ST_EPEER (an owner
 * rank died); ST_ECANCELED (stop() said so while waiting). After a failed
 * resolve b->rows is undefined.
 *
 * Optional methods (NULL when a backend has none): read_step, versions,
 * and (version 2) step_submit / step_wait / step_cancel. A caller checks
 * st_rowsrc_can_read_step before using read_step, and
 * st_rowsrc_step_ahead_max before issuing reads ahead.
 *
 * Adding a backend (the GPU HBM tier, say): one file ops/rowsrc/<name>.c
 * with its header <name>.h declaring st_rowsrc_<name>_create and its
 * config; a struct whose first member is st_rowsrc_t; a static const
 * st_rowsrc_methods_t with version = ST_ROWSRC_VERSION, the caps it has
 * and the five mandatory methods; borrowed sources underneath it (a tier
 * over the local store hands maintain and metrics down, as remote.c
 * does). Add the file to ops/meson.build and a fixture to
 * tests/unit/test_rowsrc.c, whose contract cases then run against it. The
 * trainer takes a source where it makes rows.src (ops/train/store.c for
 * the local store, dist_glue.c for the remote one); pull, push and the
 * step need no change. A method added later goes at the end of the table
 * with a higher version, and callers test the version before calling it.
 */
#ifndef ST_ROWSRC_H
#define ST_ROWSRC_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/batch.h"
#include "runtime/graph.h"
#include "runtime/metrics.h"

#define ST_ROWSRC_VERSION 2
#define ST_ROWSRC_MAX_TABLES 16
#define ST_ROWSRC_MAX_THREADS ST_MAX_STAGE_THREADS

/* Capabilities of a source (st_rowsrc_methods_t.caps). */
enum {
	/* Row pointers are the live shared rows (see above), not copies. */
	ST_ROWSRC_SHARED = 1 << 0,
};

typedef struct st_rowsrc st_rowsrc_t;

/* How far training went, for sources that must not hand a train batch
 * rows older than the steps before it (remote: the owners apply other
 * ranks' steps). The trainer writes it (release stores), a source reads
 * it (acquire loads); a source that does not wait ignores it. */
typedef struct st_rowsrc_clock {
	uint64_t trained;      /* train batches trained so far */
	uint64_t ssteps;       /* synchronous steps taken part in */
	int64_t soff;          /* train batch j is synchronous step j + soff */
	int64_t lag;           /* steps a pull may run ahead of the applied
				  ones; -1: no wait */
	int fresh;             /* pull train batch k only once batch k-1 is
				  trained (ST_SYNC_FRESH_ROWS) */
} st_rowsrc_clock_t;

typedef struct st_rowsrc_methods {
	int version;               /* ST_ROWSRC_VERSION it was written for */
	const char *name;          /* "local", "remote": for messages only */
	unsigned caps;             /* ST_ROWSRC_* */
	/* Rows of batch b's unique keys into b->rows (the contract above);
	 * table[u] is key u's table. stop(stop_arg) (stop may be NULL) is
	 * asked while waiting: nonzero gives up with ST_ECANCELED. ST_OK or
	 * an error. */
	int (*resolve)(st_rowsrc_t *s, st_batch_t *b, const uint8_t *table, int thread,
		       int (*stop)(void *), void *stop_arg);
	/* Gives batch b's rows back (unpins them, drops copies). */
	void (*release)(st_rowsrc_t *s, st_batch_t *b);
	/* Upkeep after batch b was pushed: TTL eviction sweeps, memory-budget
	 * warnings. 1 when it swept (*evicted rows went), 0 when not, or an
	 * error. */
	int (*maintain)(st_rowsrc_t *s, const st_batch_t *b, uint64_t *evicted);
	/* Publishes the source's metrics ("rows", "not_admitted", cache and
	 * SSD counters) into m. */
	void (*metrics)(st_rowsrc_t *s, st_metrics_t *m);
	void (*destroy)(st_rowsrc_t *s);
	/* Optional: worker w's fresh copies of n of batch b's rows, right
	 * before a step computes (sources whose rows change elsewhere while a
	 * batch trains: remote). For q < n, u = idx[q]: the current emb+wide
	 * floats of key b->uniq[u] (table[u]) into buf + u * stride and
	 * ok[u] = 1, or ok[u] = 0 when the row is gone (the caller trains on
	 * the batch's copy then). Never creates rows, never waits for steps.
	 * ST_OK, ST_EPEER, ST_ENOMEM. */
	int (*read_step)(st_rowsrc_t *s, int w, const st_batch_t *b, const uint8_t *table,
			 const uint32_t *idx, uint32_t n, float *buf, size_t stride, uint8_t *ok);
	/* Optional: the version each owner's rows had when batch b was
	 * resolved ([owners], the GBA token of ops/dist/psbuf.c), or NULL. */
	const uint64_t *(*versions)(st_rowsrc_t *s, const st_batch_t *b);

	/* Version 2. Optional: read_step split in two, so that worker w can
	 * issue the reads of its next minibatches while it trains the
	 * current one (the prefetch, dist.prefetch). step_submit issues a
	 * read of keys b->uniq[idx[q]], q < n, and returns without waiting;
	 * step_wait completes worker w's oldest read in flight: for q < n,
	 * the row's floats into buf + q * stride (compact, unlike read_step)
	 * and ok[q] as read_step's ok. buf and ok are the caller's until that
	 * wait; idx is copied. A submitted read misses the updates pushed
	 * after its submit (the source says how many reads may be in flight:
	 * step_ahead_max besides the one waited for). step_cancel drops
	 * worker w's reads in flight (after an error). Thread rules as
	 * read_step's. ST_OK, ST_EPEER, ST_ENOMEM. */
	int (*step_submit)(st_rowsrc_t *s, int w, const st_batch_t *b, const uint8_t *table,
			   const uint32_t *idx, uint32_t n, float *buf, size_t stride,
			   uint8_t *ok);
	int (*step_wait)(st_rowsrc_t *s, int w);
	void (*step_cancel)(st_rowsrc_t *s, int w);
	int step_ahead_max;
} st_rowsrc_methods_t;

struct st_rowsrc {
	const st_rowsrc_methods_t *m;
};

/* ---- dispatch (callers use these, never s->m directly) ------------------ */

static inline int st_rowsrc_resolve(st_rowsrc_t *s, st_batch_t *b, const uint8_t *table,
				    int thread, int (*stop)(void *), void *stop_arg)
{
	return s->m->resolve(s, b, table, thread, stop, stop_arg);
}

static inline void st_rowsrc_release(st_rowsrc_t *s, st_batch_t *b)
{
	s->m->release(s, b);
}

static inline int st_rowsrc_maintain(st_rowsrc_t *s, const st_batch_t *b, uint64_t *evicted)
{
	return s->m->maintain(s, b, evicted);
}

static inline void st_rowsrc_metrics(st_rowsrc_t *s, st_metrics_t *m)
{
	s->m->metrics(s, m);
}

static inline int st_rowsrc_can_read_step(const st_rowsrc_t *s)
{
	return s->m->read_step != NULL;
}

static inline int st_rowsrc_read_step(st_rowsrc_t *s, int w, const st_batch_t *b,
				      const uint8_t *table, const uint32_t *idx, uint32_t n,
				      float *buf, size_t stride, uint8_t *ok)
{
	return s->m->read_step(s, w, b, table, idx, n, buf, stride, ok);
}

/* Whether the source can issue step reads ahead (version 2, step_submit):
 * the most reads a worker may have in flight besides the one it waits
 * for, or 0. */
static inline int st_rowsrc_step_ahead_max(const st_rowsrc_t *s)
{
	return s->m->version >= 2 && s->m->step_submit ? s->m->step_ahead_max : 0;
}

static inline int st_rowsrc_step_submit(st_rowsrc_t *s, int w, const st_batch_t *b,
					const uint8_t *table, const uint32_t *idx, uint32_t n,
					float *buf, size_t stride, uint8_t *ok)
{
	return s->m->step_submit(s, w, b, table, idx, n, buf, stride, ok);
}

static inline int st_rowsrc_step_wait(st_rowsrc_t *s, int w)
{
	return s->m->step_wait(s, w);
}

static inline void st_rowsrc_step_cancel(st_rowsrc_t *s, int w)
{
	s->m->step_cancel(s, w);
}

static inline const uint64_t *st_rowsrc_versions(st_rowsrc_t *s, const st_batch_t *b)
{
	return s->m->versions ? s->m->versions(s, b) : NULL;
}

static inline unsigned st_rowsrc_caps(const st_rowsrc_t *s)
{
	return s->m->caps;
}

/* Destroys a source (NULL-safe); nothing else may run. */
static inline void st_rowsrc_destroy(st_rowsrc_t *s)
{
	if (s)
		s->m->destroy(s);
}

#endif
