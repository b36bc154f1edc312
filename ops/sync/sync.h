/*
 * sync.h — the sync-policy seam: how the gradients of N train workers
 * become parameter updates (DESIGN.md "Sync policies").
 *
 * A policy is a table of hooks (st_sync_ops_t) plus its own state. The
 * trainer (ops/train/: pool.c owns the workers, step.c calls the hooks)
 * knows nothing of any particular policy. Adding a policy = one new file
 * here defining a `const st_sync_ops_t`, plus one line in the registry
 * (policies.def; registry.h has the capabilities callers ask about;
 * docs/architecture.md has a worked example). Per worker and per batch the
 * trainer does:
 *
 *   schedule LOCKSTEP: for step s = 0 .. ceil(M / N) - 1 (M minibatches):
 *       params = begin_step(w, s); compute minibatch s*N + w (if < M) with
 *       params; apply(w, grads)          -- every worker calls apply every
 *                                           step, with n_examples = 0 when
 *                                           it had no minibatch
 *   schedule FREE: while (i = next minibatch from a shared counter) < M:
 *       params = begin_step(w, local step); compute minibatch i; apply(w, grads)
 *   then end_batch(w), and a trainer barrier ends the batch.
 *
 * Gradients handed to apply are already scaled by the trainer so that, for
 * LOCKSTEP, the sum over the workers of one step is the gradient of the
 * step's loss (1 / examples of the step's global minibatch for mean-loss
 * models), and for FREE, one worker's gradient is that of its minibatch's
 * loss. A policy only sums, buffers, drops or applies them.
 *
 * Sparse gradients: grads->rows[u] is the shared row of the batch's unique
 * key u (NULL: not admitted, no update), grads->grad + u * gstride its
 * gradient (the first row_dim[u] floats), for the n_rows keys listed in
 * uidx. A row is emb_and_wide[row_dim] followed by its optimizer state
 * (st_optim_state_floats(sparse_opt, row_dim) floats); st_sync_row_update
 * applies one step to it.
 *
 * Threads: hooks are called from the N worker threads concurrently (worker
 * w only with its own w); create/destroy/report from one thread with no
 * worker inside a hook. A policy that blocks workers (barriers, bounded
 * staleness) must let every worker reach end_batch.
 */
#ifndef ST_SYNC_H
#define ST_SYNC_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "lang/job.h"
#include "ops/nn/model.h"
#include "ops/optim/optim.h"
#include "runtime/metrics.h"

enum st_sync_schedule {
	ST_SYNC_LOCKSTEP = 0,  /* step s: minibatch s*N + w to worker w */
	ST_SYNC_FREE = 1,      /* next minibatch from a shared atomic counter */
};

/* Flags of a policy. */
enum {
	/* Workers read shared parameters while others write them (Hogwild):
	 * the trainer then reads every shared row with relaxed atomics into a
	 * worker-private copy before computing, and the policy writes with
	 * relaxed atomics (st_sync_row_update_relaxed). */
	ST_SYNC_RELAXED_READS = 1,
	/* Multi-process: rows are pulled just before they train, as the GBA
	 * paper's workers pull parameters and a token right before computing
	 * (gba-global-batch-aggregation.txt Appendix B, Algorithm 1 line 16):
	 * the pull stage starts batch k only once batch k-1 is trained, so a
	 * batch's rows are no older than its dense parameters (the per-ID
	 * staleness of ops/dist/psbuf.c counts from the pull). The price is
	 * the pull's latency, no longer hidden behind training. gba, bsp,
	 * hop_bw. */
	ST_SYNC_FRESH_ROWS = 2,
	/* Multi-process LOCKSTEP policy whose steps are lockstep among the
	 * rank's own workers only (hop_bw): the trainer then runs no
	 * per-batch collective across ranks and scales a step by the rank's
	 * own examples; the policy joins the ranks itself. */
	ST_SYNC_RANK_LOCAL = 4,
	/* Multi-process FREE policy whose rows are applied on arrival
	 * (async, hop_bs, shadow): each worker step reads its minibatch's rows from
	 * their owners right before computing (st_dist_pull_step), as one
	 * process's Hogwild workers read the shared table at every step; the
	 * pull stage's copies of the whole read batch then only say which
	 * keys are admitted. Without it a row's staleness grew with the read
	 * batch (ops/dist/steprows.c says why; PERSIA's bounded staleness,
	 * persia-hybrid-training.md Section 5, Assumption 1). */
	ST_SYNC_STEP_ROWS = 8,
	/* Multi-process: each rank trains dense replicas of its own that
	 * differ between syncs (shadow's replica, kstep's between merges),
	 * and the model is their mean (the end of training computes it):
	 * a checkpoint's cut then stores the mean over the ranks of the
	 * replicas as copied (ops/train/dist_ckpt.c). kstep, shadow. */
	ST_SYNC_RANK_REPLICAS = 16,
	/* Multi-process ST_SYNC_STEP_ROWS policy that bounds staleness
	 * itself (hop_bs: its clock rule lets a worker run at most b steps
	 * ahead of the slowest): its step reads are never issued ahead
	 * (dist.prefetch is 0 under it; a job asking for more is refused),
	 * since a read made `depth` minibatches early would add depth
	 * minibatches of row staleness the bound does not count. */
	ST_SYNC_BOUNDED_STALENESS = 32,
};

/* What a policy is given at creation; every pointer outlives the policy. */
typedef struct st_sync_env {
	int n_workers;
	const st_sync_cfg_t *cfg;    /* name and parameters from the job */
	const st_model_t *model;     /* tensor shapes */
	float *params;               /* the shared dense parameters [nparams] */
	size_t nparams;
	const st_optim_t *dense_opt;
	const st_optim_t *sparse_opt;
	/* Dense optimizer state and step count owned by the trainer and handed
	 * to every policy it creates in turn (job phases, st.sync.auto), so a
	 * switch keeps Adam's moments and bias-correction step: the GBA paper's
	 * point is switching without re-tuning (gba-global-batch-aggregation.txt
	 * §1). When set, the policy uses them instead of its own (it must not
	 * re-initialize the state); NULL: the policy allocates its own. */
	float *dense_state;          /* [st_sync_dense_state_floats], initialized */
	uint64_t *dense_t;           /* optimizer steps done so far */
	/* Examples per worker minibatch (the local batch B_a of the GBA paper);
	 * 0 = not given: a policy that needs it takes the first gradient's
	 * n_examples. */
	uint32_t minibatch;
	/* Multi-process jobs: the sharded store (ops/dist/dist.h); NULL in one
	 * process. Only multi-process policies (registry.h) are given one. */
	struct st_dist *dist;
	/* Multi-process synchronous steps (allreduce, hybrid) the ranks made
	 * before this policy was created (st.sync.auto switches back and forth):
	 * its first synchronous PUSH is step dist_step0. */
	uint64_t dist_step0;
	/* Lockstep steps the trainer made before this policy was created (a
	 * resume restores them, a switch keeps counting): kstep continues its
	 * k-step clock and its sparse optimizer's step count from here, so a
	 * resumed run merges at the same steps as an uninterrupted one. */
	uint64_t step0;
} st_sync_env_t;

/* One worker's gradients of one step (valid until apply returns). */
typedef struct st_sync_grads {
	uint32_t n_examples;         /* 0: this worker had no minibatch this step */
	float *dense;                /* [nparams]; the policy may overwrite it */
	uint32_t n_rows;
	const uint32_t *uidx;        /* [n_rows] unique-key indices touched */
	float *const *rows;          /* shared rows by unique index */
	const uint16_t *row_dim;     /* floats of emb+wide by unique index */
	float *grad;                 /* grad[u * gstride + j]; may be overwritten */
	int gstride;
	/* Membership test for other workers' lists: u is in uidx iff
	 * mark[u] == stamp (lockstep policies that merge lists use it). */
	const uint32_t *mark;
	uint32_t stamp;
	/* The batch's unique keys and each one's table (multi-process policies
	 * route row gradients to the keys' owners). */
	const uint64_t *keys;
	const uint8_t *utable;
	/* Each owner rank's buffered step count when it served the batch's
	 * pull (gba, bsp across processes; ops/dist/psbuf.c). */
	const uint64_t *owner_token;
} st_sync_grads_t;

/* Histogram of staleness: bucket 0 counts 0, bucket k >= 1 counts values in
 * [2^(k-1), 2^k), the last bucket everything above. */
#define ST_SYNC_HIST 16

typedef struct st_sync_stats {
	uint64_t updates;            /* gradients applied (per worker contribution) */
	uint64_t steps;              /* parameter updates (optimizer steps) */
	uint64_t staleness[ST_SYNC_HIST];
	uint64_t dropped;            /* gradients discarded */
	uint64_t bytes;              /* what a distributed run would send */
} st_sync_stats_t;

typedef struct st_sync st_sync_t;

typedef struct st_sync_ops {
	const char *name;
	int schedule;                /* enum st_sync_schedule */
	int flags;
	/* Allocates the policy's state into *self. ST_OK, ST_EJOB (bad
	 * parameter, logged), ST_ENOMEM. */
	int (*create)(void **self, const st_sync_env_t *env);
	void (*destroy)(void *self);
	/* Before a batch, on the trainer's thread with no worker running:
	 * n_uniq is the batch's unique-key count (size per-batch buffers). */
	int (*begin_batch)(void *self, uint32_t n_uniq);
	/* The dense parameters worker w reads for its next step (the shared
	 * array, a replica or a snapshot). */
	const float *(*begin_step)(void *self, int w, uint64_t step);
	/* Hands over worker w's gradients. Returns ST_OK or an error. */
	int (*apply)(void *self, int w, st_sync_grads_t *g);
	/* After worker w's last step of the batch. */
	void (*end_batch)(void *self, int w);
	/* Statistics so far (no worker inside a hook, or slightly stale). */
	void (*report)(void *self, st_sync_stats_t *out);
	/* Optional (NULL: nothing): after this process's last train batch, on
	 * the trainer's thread with no worker running; may block (a
	 * multi-process policy waits for the other ranks). Called again at the
	 * end of later passes: must then return at once. */
	int (*finish)(void *self);
} st_sync_ops_t;


/* Multi-process lockstep policies (dist_rows.c): a step's row sums to
 * the rows' owners, synchronously (ops/dist/dist.h). Between two barriers
 * every worker w calls st_sync_rowpush_sum (st_sync_sum_rows, remembering
 * the sums); after the next barrier worker 0 alone calls
 * st_sync_rowpush_send (step: the policy's step index, the same on every
 * rank; t: the sparse optimizer's step), and the others wait at a third
 * barrier before they reuse their gradient buffers. *bytes grows by what
 * the rows take on the wire. */
typedef struct st_sync_rowpush st_sync_rowpush_t;
st_sync_rowpush_t *st_sync_rowpush_create(int n_workers);
void st_sync_rowpush_destroy(st_sync_rowpush_t *r);
int st_sync_rowpush_sum(st_sync_rowpush_t *r, const st_sync_env_t *env,
			st_sync_grads_t *const *g, int w);
int st_sync_rowpush_send(st_sync_rowpush_t *r, const st_sync_env_t *env, uint64_t step,
			 uint64_t t, uint64_t *bytes);


/* ---- helpers shared by policies (sync.c) -------------------------------- */

/* Floats of dense optimizer state for the model (tensor by tensor, rows ×
 * state_floats(cols), so rowwise AdaGrad keeps one accumulator per row). */
size_t st_sync_dense_state_floats(const st_sync_env_t *env);
/* Initial state (st_optim_state_init over the whole array). */
void st_sync_dense_state_init(const st_sync_env_t *env, float *state);
/* One optimizer step of the whole dense parameter array, tensor by tensor.
 * t >= 1. Not thread-safe on w/state. */
void st_sync_dense_update(const st_sync_env_t *env, float *w, float *state,
			  const float *g, uint64_t t);
/* One optimizer step of tensor i alone (its slice of w, g and state):
 * the tensors' steps together equal st_sync_dense_update, so policies may
 * split the dense update among workers by tensor. */
void st_sync_dense_update_tensor(const st_sync_env_t *env, float *w, float *state,
				 const float *g, int i, uint64_t t);
/* Offset of tensor i's optimizer state in the dense state array. */
size_t st_sync_dense_state_offset(const st_sync_env_t *env, int i);
/* One sparse optimizer step of a row (emb+wide[dim] then its state). */
void st_sync_row_update(const st_sync_env_t *env, float *row, const float *g,
			int dim, uint64_t t);
/* The same with every read and write of the shared row a relaxed atomic
 * (Hogwild): copies row+state in, updates the copy, stores it back. tmp
 * holds dim + state floats. */
void st_sync_row_update_relaxed(const st_sync_env_t *env, float *row, const float *g,
				int dim, uint64_t t, float *tmp);
/* Relaxed-atomic copies (Hogwild reads and writes of shared floats). */
void st_sync_load_relaxed(float *dst, const float *src, size_t n);
void st_sync_store_relaxed(float *dst, const float *src, size_t n);
/* dst[0..n) = the fp32 values of the n values of a shared compact row at
 * src (precision prec, runtime/store/rowfmt.h), read as the relaxed loads
 * above (under ThreadSanitizer a word at a time as atomics, otherwise one
 * vector decode: an aligned 16-bit value is never torn). */
void st_sync_decode_relaxed(int prec, float *dst, const float *src, size_t n);
/* The dense optimizer state and step count a policy updates: the trainer's
 * (env->dense_state, env->dense_t, kept across policy switches) or, when
 * the env has none, the policy's own. Lives inside the policy's heap object
 * (t may point at own_t, so the struct must not move once initialized). */
typedef struct st_sync_dense {
	float *state;          /* [st_sync_dense_state_floats] */
	uint64_t *t;           /* optimizer steps done so far */
	float *own_state;      /* allocated by init when env has none, else NULL */
	uint64_t own_t;
	/* st_sync_apply_hogwild's dense steps take turns under it (mu_ok:
	 * initialized) */
	pthread_mutex_t mu;
	int mu_ok;
} st_sync_dense_t;

/* Points d at env's state and step count, or allocates and initializes its
 * own (st_sync_dense_state_init, t = 0). ST_OK or ST_ENOMEM; either way
 * st_sync_dense_fini is safe, and so it is on a zeroed struct. */
int st_sync_dense_init(st_sync_dense_t *d, const st_sync_env_t *env);
/* Frees the own state (never the env's). */
void st_sync_dense_fini(st_sync_dense_t *d);

/* A Hogwild worker's private buffers (async, hop_bs), owned by the policy. */
typedef struct st_sync_hogwild {
	float *snap;           /* [nparams] dense params read at the last read */
	float *tw, *ts;        /* the largest tensor and its state, while updating */
	float *trow;           /* one row and its state, while updating */
	uint64_t v0;           /* the policy's version at the last read */
} st_sync_hogwild_t;

/* ST_OK or ST_ENOMEM; either way st_sync_hogwild_fini is safe, and so it is
 * on a zeroed struct. */
int st_sync_hogwild_init(st_sync_hogwild_t *h, const st_sync_env_t *env);
void st_sync_hogwild_fini(st_sync_hogwild_t *h);
/* The worker's read before a step: v0 = *version, then the shared dense
 * parameters copied into snap with relaxed loads. Returns snap. */
const float *st_sync_hogwild_read(st_sync_hogwild_t *h, const st_sync_env_t *env,
				  const uint64_t *version);
/* Hogwild application of one worker's gradients (async, hop_bs): one
 * optimizer step of every dense tensor (d: the policy's dense state, *d->t
 * the shared step counter) and of every touched row, each read and written
 * with relaxed atomics; *version is the policy's update count and h->v0
 * its value at the worker's read (the staleness). Adds to *st. The rows
 * are lock-free, as Hogwild's are (an update may be lost, never torn); the
 * dense steps take turns under d->mu: two Adam steps interleaved element
 * by element could pair one worker's new first moment with the other's
 * old, near-zero second moment and blow the model up in its first steps
 * (seen in an ASan run of a 2-worker test; the multi-process
 * shadow policy had the same and takes turns too). A dense step is
 * O(parameters), 1/minibatch of the step's compute, so the turns cost
 * little; the workers still read the parameters without a lock. */
void st_sync_apply_hogwild(const st_sync_env_t *env, st_sync_dense_t *d, uint64_t *version,
			   st_sync_hogwild_t *h, const st_sync_grads_t *g,
			   st_sync_stats_t *st);
/* What a parameter-server run would send for one worker's gradients: the
 * dense gradient (4·nparams bytes) plus, per touched row, an 8-byte key
 * and its 4·dim floats. */
uint64_t st_sync_grad_bytes(const st_sync_env_t *env, const st_sync_grads_t *g);
/* One snapshot of the dense parameters per worker, [n_workers][nparams]
 * (policies whose workers read a consistent copy taken under their lock),
 * or NULL when out of memory. Free with st_sync_snaps_destroy. */
float **st_sync_snaps_create(const st_sync_env_t *env);
void st_sync_snaps_destroy(float **snap, int n_workers);
/* Floats of tensor i of the model (rows × cols, or the length of a 1-D one). */
size_t st_sync_tensor_floats(const st_model_t *m, int i);

/* Lockstep reductions (allreduce, kstep, hybrid), called by worker w of N
 * between two barriers with g[v] every worker's gradients of the step. Each
 * sum runs in worker order whatever the split, so a run depends only on the
 * seed, the data order and N, never on thread timing.
 *
 * Dense: for every tensor i with owner[i] == w (st_algo_owner_tensors,
 * ops/algo/owner.h), sums tensor i's slice of the workers' dense gradients
 * into g[0]->dense and applies one optimizer step t to it (state: dense
 * optimizer state; NULL: only the sum). */
void st_sync_reduce_dense(const st_sync_env_t *env, st_sync_grads_t *const *g,
			  const int *owner, int w, float *state, uint64_t t);
/* Sparse: for every unique key u that worker w owns (st_algo_owner_row),
 * sums u's row gradient over the workers that touched it into the first
 * (lowest-index) toucher's buffer and applies one optimizer step t to the
 * row. */
void st_sync_reduce_rows(const st_sync_env_t *env, st_sync_grads_t *const *g, int w,
			 uint64_t t);
/* The sums alone: for every such key u, sums as above into gv, the first
 * toucher's gradients, then calls fn(arg, gv, u) (gv->grad + u * gstride
 * holds the sum). Stops at fn's first error and returns it; else ST_OK. */
int st_sync_sum_rows(const st_sync_env_t *env, st_sync_grads_t *const *g, int w,
		     int (*fn)(void *arg, const st_sync_grads_t *gv, uint32_t u), void *arg);
/* A buffer that sums workers' gradients until a policy applies them as one
 * optimizer step (bsp, hop_bw): the dense sum and, per unique key u of the
 * batch, the sum of its row gradients. Callers serialize access. */
typedef struct st_sync_gradbuf {
	float *dense;          /* [nparams] dense gradient sum */
	int maxdim;            /* floats per u in sum */
	uint32_t cap;          /* unique keys the arrays hold */
	float *sum;            /* [cap * maxdim] row gradient sums */
	float **row;           /* [cap] shared row of u */
	uint16_t *dim;         /* [cap] */
	uint8_t *in;           /* [cap] 1: u is in list */
	uint32_t *list;        /* [ns] keys in the buffer */
	uint32_t ns;
	float *trow;           /* one row + state while updating */
} st_sync_gradbuf_t;

/* ST_OK or ST_ENOMEM (then st_sync_gradbuf_fini is still safe). */
int st_sync_gradbuf_init(st_sync_gradbuf_t *b, const st_sync_env_t *env);
/* Room for a batch of n_uniq unique keys; the buffer must be empty. */
int st_sync_gradbuf_reserve(st_sync_gradbuf_t *b, uint32_t n_uniq);
/* Adds one worker's dense and row gradients. */
void st_sync_gradbuf_add(st_sync_gradbuf_t *b, const st_sync_env_t *env,
			 const st_sync_grads_t *g);
/* Scales the sums by `scale`, applies one optimizer step t to the dense
 * parameters (state: dense optimizer state) and to every buffered row
 * (relaxed atomics), and empties the buffer. */
void st_sync_gradbuf_apply(st_sync_gradbuf_t *b, const st_sync_env_t *env, float *state,
			   float scale, uint64_t t);
void st_sync_gradbuf_fini(st_sync_gradbuf_t *b);

/* The numeric parameter `key` of the policy's job settings, or def. */
double st_sync_cfg_num(const st_sync_cfg_t *cfg, const char *key, double def);
/* The string parameter `key` (shadow's algo), or NULL. */
const char *st_sync_cfg_str(const st_sync_cfg_t *cfg, const char *key);
/* shadow{algo, alpha, eta, every} (shadow.c; dist_shadow.c across
 * processes): checked, with the defaults easgd, 0.5, 1 and 0. */
enum { ST_SHADOW_EASGD = 0, ST_SHADOW_MA = 1, ST_SHADOW_BMUF = 2 };
typedef struct st_sync_shadow_cfg {
	int algo;              /* ST_SHADOW_* */
	double alpha, eta;
	uint64_t every;        /* 0: background syncs */
} st_sync_shadow_cfg_t;
/* ST_OK or ST_EJOB (logged). */
int st_sync_shadow_cfg(const st_sync_cfg_t *cfg, st_sync_shadow_cfg_t *out);
/* Adds to a statistics counter with a relaxed atomic (stats are read while
 * workers run; slightly stale values are fine). */
static inline void st_sync_stat_add(uint64_t *p, uint64_t v)
{
	__atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
/* Copies stats updated with st_sync_stat_add into *out with relaxed loads
 * (a policy's report hook). */
void st_sync_stats_read(const st_sync_stats_t *st, st_sync_stats_t *out);
/* Bucket of a staleness value in st_sync_stats_t.staleness. */
int st_sync_hist_bucket(uint64_t staleness);
/* The staleness histogram's mean (each bucket at its midpoint) and max
 * (upper edge of the highest non-empty bucket); 0 and 0 when empty. */
void st_sync_stats_staleness(const st_sync_stats_t *s, double *mean, double *max);
/* Publishes stats as metrics: "sync_updates", "sync_staleness_mean",
 * "sync_staleness_max" (upper edge of the highest non-empty bucket),
 * "sync_dropped", "sync_bytes". */
void st_sync_stats_publish(const st_sync_stats_t *s, st_metrics_t *m);

#endif
