/*
 * trainer_internal.h — the trainer's private state, shared by the files of
 * ops/train. Nothing outside ops/train includes it.
 *
 * The files (one job each):
 *   trainer.c     create / destroy, policy swaps (and st.sync.auto's
 *                 switches), the train stage op, metrics
 *   pool.c        the worker pool (threads, barriers, shutdown)
 *   step.c        one batch on the workers: minibatch schedules, forward,
 *                 backward, scaling, stragglers, gradients to the policy
 *   eval.c        eval predictions kept, their metrics, gathered to rank 0
 *   pull.c        the pull stage: dedup, checkpoint gate, rows resolved
 *                 through the row source (ops/rowsrc)
 *   push.c        the push and dump stages: rows released, store upkeep,
 *                 checkpoints after a marked batch
 *   store.c       the tables' creation, delta-export key tracking, exports
 *   checkpoint.c  checkpoints; resume.c loading them
 *   dist_glue.c   the trainer in a multi-process job
 *
 * The state is grouped by who uses it: `rows` (the embedding tables and
 * pull scratch), `step` (the workers and the batch they run), `pol` (the
 * sync policy and what successive policies share), `dist` (a rank of a
 * multi-process job), `ckpt` (checkpoints), `track` (delta exports) and
 * `eval` (eval predictions). The fields above them are fixed at creation
 * or are the trainer's counters.
 */
#ifndef ST_TRAINER_INTERNAL_H
#define ST_TRAINER_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "ops/metrics/auc.h"
#include "ops/optim/optim.h"
#include "ops/rowsrc/rowsrc.h"
#include "ops/sync/auto.h"
#include "ops/train/pool.h"
#include "ops/train/trainer.h"
#include "ops/train/trainer_test.h"
#include "runtime/graph.h"

#define AUC_REFRESH 65536
#define MAX_TABLES 16

/* A step read issued ahead (dist.prefetch; step.c): minibatch mb's
 * admitted rows ridx[0..m) (unique indices, in the order compute() meets
 * them) and the source's answers, rows[q * gstride] and ok[q]. */
typedef struct pslot {
	uint32_t mb, m, cap;
	uint32_t *ridx;            /* [cap] */
	float *rows;               /* [cap * gstride] */
	uint8_t *ok;               /* [cap] */
} pslot_t;

/* One worker's state (step.c): touched only by its own thread while a batch
 * runs, and by worker 0's thread between batches. */
typedef struct worker {
	int idx;
	st_model_ws_t *ws;
	float *gdense;             /* [nparams] */
	float *gu;                 /* [gcap * gstride] row gradients */
	float *prow_buf;           /* [gcap * gstride] private row copies (relaxed reads) */
	float **prow;              /* [gcap] */
	uint32_t *mark, *touched;  /* [gcap] */
	/* ST_SYNC_STEP_ROWS from a source that reads them (remote): the
	 * step's admitted keys and the source's answers (by unique index). */
	uint32_t *ridx;            /* [gcap] */
	uint8_t *rok;              /* [gcap] */
	uint32_t gcap, stamp;
	pslot_t *ps;               /* [nps] step reads in flight (prefetch) */
	int nps;
	/* progressive metrics, one accumulator per head of the model */
	st_auc_acc_t *acc[ST_MODEL_MAX_HEADS];
	uint64_t steps;
	uint64_t step_base;        /* steps when the current policy was created */
	uint64_t mbs;              /* minibatches computed (straggler schedule) */
	uint64_t examples;         /* train examples computed */
	double busy;               /* seconds computing + straggling (worker_eps) */
} worker_t;

/* A set of uint64 keys (open addressing; key 0 kept aside). */
typedef struct st_keyset {
	uint64_t *k;
	size_t cap, n;
	int has_zero;
} st_keyset_t;

/* One pull thread's dedup scratch (pull.c). */
typedef struct pull_thread {
	st_dedup_t dd;
} pull_thread_t;

/* The embedding rows: where they come from (the row source, ops/rowsrc:
 * pull, push and the step use only `src`) and the tables' shapes. `local`
 * is this process's own tables (store.c), which checkpoints, exports and
 * a rank's shard service reach directly; src is local in one process and
 * the remote shards over it in a multi-process job. */
struct tr_rows {
	st_rowsrc_t *src;
	st_rowsrc_t *local;
	int n_tables;
	int tdim[MAX_TABLES];      /* embedding floats per row of each table */
	int tstate[MAX_TABLES];    /* optimizer-state floats per row */
	int prec;                  /* storage.row_precision of every table
				      (enum st_row_prec): compact rows are
				      decoded into the workers' copies */
	int *slot_table;           /* [n_slots] */
	pull_thread_t pull_t[ST_MAX_STAGE_THREADS];
};

/* The workers and the batch they run (pool.c runs it, step.c is the work). */
struct tr_step {
	st_pool_t pool;
	worker_t *w;               /* [N] */
	st_batch_t *cur;
	uint32_t nmb;              /* minibatches of the current batch */
	uint32_t next_mb;          /* FREE schedule counter (atomic) */
	uint64_t gstep;            /* steps begun so far (LOCKSTEP base) */
	uint64_t gstep_base;       /* gstep when the current policy was created */
	int err;                   /* first worker error (atomic) */
	/* Non-finite training losses (stages.train.on_nonfinite): how many
	 * minibatches had one (atomic), and the first of them, recorded by
	 * the worker that won nf_first (0 -> 1) and read by the train thread
	 * after the batch's round. */
	int nf_fail;               /* ST_NONFINITE_FAIL: stop the job */
	uint64_t nf_count, nf_seen;
	int nf_first;
	struct {
		double loss;
		uint64_t batch, seq;   /* train step (1-based) and the read stage's seq */
		uint32_t mb, nmb;      /* minibatch of the batch, of nmb */
		int worker;
	} nf;
	st_straggler_cfg_t strag;
	pthread_mutex_t slow_mu;
	pthread_cond_t slow_cv;
	int cancel;                /* under slow_mu */
	st_trainer_time_fn time_fn; /* st.sync.auto's test hook */
	void *time_ud;
};

/* The sync policy, and what successive policies share (job phases,
 * st.sync.auto): the dense optimizer state, its step count and the
 * statistics of the policies destroyed. */
struct tr_policy {
	const st_sync_ops_t *ops;
	void *obj;
	st_sync_env_t env;
	st_sync_cfg_t cfg_view;    /* env.cfg after create: no parameters */
	float *dstate;
	uint64_t dt;
	st_sync_stats_t past;
	/* st.sync.auto (ops/sync/auto.h): its controller while the policy is
	 * auto (NULL otherwise) and the transport of its votes (threads in one
	 * process, ranks once st_trainer_attach_dist ran). */
	st_auto_t *autoc;
	st_auto_transport_t auto_tp;
	uint64_t switches;
};

/* A rank of a multi-process job (dist_glue.c; NULL d in one process): the
 * job's parameter service; whether the policy steps in lockstep with the
 * other ranks; sync steps done (the train thread's) and the global
 * examples of the current step. The clock tells the remote row source how
 * far training went (rowsrc.h): how many steps a pull may run ahead of
 * the applied ones (lag: 0 allreduce, the hybrid's staleness bound, -1 no
 * wait: async), train batches trained, sync steps taken part in. */
struct tr_dist {
	struct st_dist *d;
	int lockstep, drained;
	uint64_t steps;
	uint32_t tot;
	st_rowsrc_clock_t clock;   /* atomics: written here, read by the pull */
	int prefetch;              /* dist.prefetch: step reads issued ahead per
				    * worker (ST_SYNC_STEP_ROWS; step.c) */
	st_batch_t empty;          /* the batch of a step this rank has no data for */
};

/* b->ckpt of a multi-process batch whose step some rank had no data for
 * (dist_glue.c): the checkpoint is skipped (dist_ckpt.c). */
enum { ST__CKPT_SKIP = 2 };

/* Checkpoints (checkpoint.c). The gate holds the pull of batches after
 * `gate` until the dump stage has copied the state after it. */
struct tr_ckpt {
	const struct st_trainer_ckpt_cfg *cfg;
	uint64_t every;
	double secs, last;
	pthread_mutex_t gate_mu;
	pthread_cond_t gate_cv;
	int64_t gate;              /* -1: open */
	int gate_cancel;
	int snap_copying;          /* dump is copying the state: the gate holds
				    * even a cancelled pull (checkpoint.c) */
	int gate_broken;           /* a cancelled pull passed a closed gate: no
				    * interval checkpoint from now on */
	uint64_t errors;
	uint64_t pos_file, pos_rec; /* data position of the end (final checkpoint) */
	int64_t phase;             /* the current pass */
	int64_t step;              /* step of the newest checkpoint written or loaded; -1 */
	uint64_t pass_batches0, pass_examples0;
	int pass_done;
	/* Multi-process: the job's steps whose batches passed the gate (the
	 * interval counts steps, the same on every rank), and the global
	 * batches of the pass up to the last one this rank trained
	 * (b->seq + 1, what a loader seeks to). */
	uint64_t pulled;
	uint64_t pass_seq;
	/* Training passes begun (st_trainer_begin_pass), the same count on
	 * every rank: a cut's messages name their pass (dist_ckpt.c). Under
	 * gate_mu. */
	uint64_t npass;
	/* checkpoint.every_secs across processes (dist_ckpt.c): the step rank
	 * 0 named for the next timed checkpoint (0: none pending), and the
	 * last step named that this rank saw. Under gate_mu. */
	uint64_t at, at_seen;
	/* Each rank's last ENDED/MISSED (dist_ckpt.c's ck_end_t [ranks]),
	 * allocated by the first cut that needs it; the dump thread's. */
	void *ended;
	/* The last written snapshot, kept so that the next checkpoint copies
	 * into memory that is already mapped (st_trainer_snap_release); NULL
	 * when none is kept. Under gate_mu. */
	struct st_trainer_snap *snap_spare;
};

/* A copy of the trainer's state for a checkpoint (checkpoint.c makes and
 * writes it; dist_ckpt.c writes a rank's part of a multi-process one). In
 * a multi-process job the counters are this rank's until rank 0 replaces
 * them with the job's (examples and positions of every rank). */
struct st_trainer_snap {
	uint64_t pass_seq;           /* global batches of the pass read up to the cut */
	int64_t step;
	uint64_t src_file, src_rec, examples;
	int64_t phase;               /* -1: the job has no phases */
	uint64_t pass_batches, pass_examples; /* of the current pass (phase) */
	int pass_done;
	float *params;
	size_t nparams;
	float *dstate;
	size_t ndstate;
	uint64_t dt, gstep;
	int n_tables;
	struct st_rows_writer *rows[MAX_TABLES];
	/* Rows of each table in the copy this snapshot's memory held before
	 * (NO_PREV: none), to guess how much the next copy grows. */
	size_t prev_rows[MAX_TABLES];
};

/* Delta exports (store.c): keys pulled for training and keys evicted
 * since the last export, per table; tracking only once turned on. The run
 * lineage its exports and checkpoints carry ("" until the first full
 * export makes one or a resumed checkpoint restores it). */
struct tr_track {
	char lineage[ST_TRAINER_LINEAGE_MAX];
	int on;
	pthread_mutex_t mu;
	st_keyset_t touched[MAX_TABLES], evicted[MAX_TABLES];
	int err;                   /* < 0: a changed key was not recorded (out of
				      memory); deltas are refused until a full
				      export. Under mu */
};

/* An export begins (store.c): tracking turns on (from the first export on);
 * *as_delta = delta && tracking was on. When *as_delta, keys[k] (k < the
 * trainer's tables) lists table k's touched and evicted keys, copied into
 * arr[2k], arr[2k + 1] (malloc'ed, the caller frees the 2 * n_tables
 * entries, NULL when not copied). ST_OK, or the tracking error or ST_ENOMEM
 * with err set (then the sets stay). reset: the export was published, the
 * next delta starts from here. Both take track.mu. */
struct st_export_keys;
int st__trainer_track_take(st_trainer_t *tr, int delta, int *as_delta,
			   struct st_export_keys *keys, uint64_t **arr, char *err, size_t errlen);
void st__trainer_track_reset(st_trainer_t *tr);

/* Eval predictions kept since the last reset (eval.c): n examples of H
 * heads, pred and label [n × H] example-major (label: each head's own). */
struct tr_eval {
	float *pred, *label;
	size_t n, cap;
};

struct st_trainer {
	st_model_t *model;
	st_optim_t sopt, dopt;
	int N;                     /* workers */
	int n_slots, n_dense, gstride;
	uint32_t minibatch;
	int mean_loss;
	st_metrics_t *metrics;
	uint64_t batches;          /* train batches done */
	uint64_t examples_done;    /* train examples through push */
	uint64_t since;            /* examples since the metrics' refresh */

	struct tr_rows rows;
	struct tr_step step;
	struct tr_policy pol;
	struct tr_dist dist;
	struct tr_ckpt ckpt;
	struct tr_track track;
	struct tr_eval eval;
};

/* A pulled batch's b->aux (pull.c; one allocation, freed with the batch):
 * the row width of every unique key (uint16_t [n_uniq]), then its table
 * (uint8_t [n_uniq]). */
static inline const uint16_t *st__batch_row_dim(const st_batch_t *b)
{
	return b->aux;
}

static inline const uint8_t *st__batch_table(const st_batch_t *b)
{
	return (const uint8_t *)((const uint16_t *)b->aux + b->n_uniq);
}

/* splitmix64's finalizer: hashes for the straggler
 * schedule. */
static inline uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

/* Reports an op failure: through the graph when the op runs in one (ctx->graph),
 * else logged. Returns code. */
int st__trainer_fail(st_stage_ctx_t *ctx, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* ---- step.c --------------------------------------------------------------- */

/* Worker w's scratch and accumulators (create); ST_OK or ST_ENOMEM. */
/* The job's optimizer settings (dense != 0: the dense one), from the
 * legacy model fields when the job language did not fill the new ones. */
void st__trainer_optim_cfg(const st_model_cfg_t *mc, int dense, st_optim_cfg_t *c);
int st__trainer_worker_init(st_trainer_t *tr, worker_t *w, int idx);
void st__trainer_worker_free(worker_t *w);
/* Grows every worker's per-unique-key scratch to n_uniq. Worker 0's thread,
 * before the batch is published. ST_OK or ST_ENOMEM. */
int st__trainer_size_workers(st_trainer_t *tr, uint32_t n_uniq);
/* Runs batch b (one step per worker schedule) on every worker; the first
 * worker error is in tr->step.err afterwards. Worker 0's thread. */
void st__trainer_run(st_trainer_t *tr, st_batch_t *b);

/* ---- eval.c --------------------------------------------------------------- */

/* Keeps b's predictions and labels for st_trainer_eval_result. ST_OK or
 * ST_ENOMEM. Train thread (or no stage running). */
int st__trainer_eval_keep(st_trainer_t *tr, const st_batch_t *b);
void st__trainer_eval_free(st_trainer_t *tr);

/* ---- trainer.c --------------------------------------------------------------- */

/* st.sync.auto after a train batch, or an empty step of a rank out of data
 * (done): asks the controller and swaps the policy when it says so. */
int st__trainer_auto_tick(st_trainer_t *tr, int done);
/* A vote now (a rank out of data); *all_done: every rank is. */
int st__trainer_auto_vote(st_trainer_t *tr, int done, int *all_done);

/* ---- dist_glue.c ------------------------------------------------------------- */

/* Before a multi-process train batch b runs: a lockstep policy's step
 * count check and every rank's examples of the step (a collective).
 * ST_OK at once in one process; else the op's failure (reported). */
int st__trainer_dist_before(st_trainer_t *tr, st_stage_ctx_t *ctx, st_batch_t *b);
/* After it ran (or was empty): the step counters the pulls wait on. */
void st__trainer_dist_after(st_trainer_t *tr, const st_batch_t *b);
/* End of a training pass, out of data: takes part in the steps (and
 * st.sync.auto's votes) of the ranks that still have data until none has.
 * ST_OK at once in one process. */
int st__trainer_dist_drain(st_trainer_t *tr);
/* The network's counters as metrics (multi-process; nothing in one). */
void st__trainer_dist_metrics(st_trainer_t *tr);

/* ---- pull.c ------------------------------------------------------------------ */

/* Frees one pull thread's scratch. */
void st__trainer_pull_free(pull_thread_t *p);

/* ---- store.c ----------------------------------------------------------------- */

/* The tables: slot -> table, their shapes, and the local row source
 * (RAM and SSD tiers, TTL) from the job; rows.src = rows.local. ST_OK,
 * ST_EJOB (logged), ST_EBUSY, ST_ENOMEM. Create only. */
int st__trainer_store_create(st_trainer_t *tr, const st_job_t *job);
/* Table k of the local store (NULL out of range). */
st_table_t *st__trainer_table(const st_trainer_t *tr, int k);
/* Records the training keys of a pulled batch for the next delta export
 * (pull threads); utable[u] is unique key u's table. ST_OK, or ST_ENOMEM
 * when a key could not be recorded (or one was not before,
 * st__trainer_track_error): the batch must fail, since a delta without that
 * key would silently miss its row. */
int st__trainer_track_batch(st_trainer_t *tr, const st_batch_t *b, const uint8_t *utable);
/* st__trainer_track_error (trainer_test.h): push asks it after a TTL sweep,
 * since the sweep's on_evict hook cannot return an error. */
/* Frees the sets (destroy). */
void st__trainer_track_free(st_trainer_t *tr);

/* ---- checkpoint.c ------------------------------------------------------------ */

/* Pull waits at the gate and marks interval ends; dump checkpoints after a
 * marked batch; open_gate(cancel = 1) releases a waiting pull for good
 * (shutdown). */
void st__trainer_ckpt_gate(st_trainer_t *tr, st_batch_t *b, st_graph_t *g);
/* checkpoint.c, shared with dist_ckpt.c: a snapshot's dense file, its row
 * files (rank r of world ranks; world 0: one process, table-<k>.rows; names
 * from st_export_rows_name, ops/view/export.h), and the manifest and
 * publication (world: NULL for one process, else the world fields of a
 * manifest). Each ST_OK or the writer's error. */
struct st_ckpt_writer;
struct st_manifest;
int st__trainer_snap_dense(st_trainer_t *tr, const struct st_trainer_snap *s,
			   struct st_ckpt_writer *w);
int st__trainer_snap_rows(const struct st_trainer_snap *s, struct st_ckpt_writer *w, int rank,
			  int world);
int st__trainer_snap_commit(st_trainer_t *tr, const struct st_trainer_snap *s,
			    const struct st_trainer_ckpt_cfg *cfg, struct st_ckpt_writer *w,
			    const struct st_manifest *world);
/* dist_ckpt.c: the dump stage's checkpoint after b in a multi-process job
 * (the gate is closed; opens it). ST_OK (a failed checkpoint is reported,
 * training goes on) or a network error. */
int st__trainer_dist_checkpoint_after(st_trainer_t *tr, const st_batch_t *b);
/* dist_ckpt.c: this rank's training pass ended (train stage's finish,
 * before the drain): with interval checkpoints on, tells the ranks waiting
 * in a cut of a step it will not reach (rank 0: every rank; the others:
 * rank 0). Nothing in one process. */
void st__trainer_dist_ckpt_ended(st_trainer_t *tr);
/* dist_ckpt.c: checkpoint.every_secs across processes, from the pull
 * thread's gate under gate_mu for the batch of job step `step` (1-based):
 * whether this batch ends the interval. Rank 0's clock decides and names a
 * step a few steps ahead to the others (AT); a rank already past it says so
 * (MISSED) and that checkpoint is skipped. */
int st__trainer_dist_ckpt_timed(st_trainer_t *tr, uint64_t step, double now);
void st__trainer_ckpt_open_gate(st_trainer_t *tr, int cancel);
int st__trainer_checkpoint_after(st_trainer_t *tr, const st_batch_t *b);

#endif
