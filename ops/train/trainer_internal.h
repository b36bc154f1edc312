/*
 * trainer_internal.h — the trainer's private state, shared by the modules
 * of the pull, train and push stages (ops/train/trainer.c, ops/pull/pull.c,
 * ops/push/push.c). Nothing outside those files includes it.
 */
#ifndef ST_TRAINER_INTERNAL_H
#define ST_TRAINER_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "ops/metrics/auc.h"
#include "ops/optim/optim.h"
#include "ops/train/trainer.h"
#include "runtime/graph.h"

#define AUC_REFRESH 65536
#define MAX_TABLES 16

typedef struct worker {
	struct st_trainer *tr;
	int idx;
	pthread_t tid;
	int cpu;                   /* OS cpu to pin to, -1 = none */
	st_model_ws_t *ws;
	float *gdense;             /* [nparams] */
	float *gu;                 /* [gcap * gstride] row gradients */
	float *prow_buf;           /* [gcap * gstride] private row copies (relaxed reads) */
	float **prow;              /* [gcap] */
	uint32_t *mark, *touched;  /* [gcap] */
	/* Multi-process ST_SYNC_STEP_ROWS: the step's admitted keys, the
	 * owners' answers (by unique index) and this worker's reply channel. */
	uint32_t *ridx;            /* [gcap] */
	uint8_t *rok;              /* [gcap] */
	struct st_dist_stepbuf *dsb;
	uint32_t gcap, stamp;
	st_auc_acc_t *acc;
	uint64_t steps;
	uint64_t step_base;        /* steps when the current policy was created */
	uint64_t mbs;              /* minibatches computed (straggler schedule) */
	uint64_t examples;         /* train examples computed */
	double busy;               /* seconds computing + straggling (worker_eps) */
	double *ring;              /* [auto_window] last step times (auto) */
	uint32_t ring_n;           /* samples since the last switch */
} worker_t;

/* A set of uint64 keys (open addressing; key 0 kept aside). */
typedef struct st_keyset {
	uint64_t *k;
	size_t cap, n;
	int has_zero;
} st_keyset_t;

typedef struct st_evict_ctx {
	struct st_trainer *tr;
	int k;
} st_evict_ctx_t;

typedef struct pull_thread {
	uint64_t *hkeys;
	uint32_t *hidx;
	uint32_t hcap;
	uint64_t *tkeys;           /* per-table key list (several tables) */
	uint32_t *tpos;
	float **trows;
	uint32_t tcap;
} pull_thread_t;

struct st_trainer {
	st_model_t *model;
	st_optim_t sopt, dopt;
	int n_tables;
	st_table_t *tables[MAX_TABLES];
	uint32_t ttl;              /* batches; 0 = rows never expire */
	uint32_t evict_every;      /* batches between eviction sweeps */
	uint64_t mem_budget;       /* storage.mem in bytes; 0 = unlimited */
	int mem_warned;            /* push thread only */
	int over_warned;           /* push thread only */
	char store_root[4096];     /* "<ssd.path>/strata-store", "" without SSD */
	int tdim[MAX_TABLES];      /* embedding floats per row of each table */
	int tstate[MAX_TABLES];    /* optimizer-state floats per row */

	/* Checkpoints (checkpoint.c). The gate holds the pull of batches after
	 * `gate` until the dump stage has copied the state after it. */
	const struct st_trainer_ckpt_cfg *ckpt_cfg;
	uint64_t ckpt_every;
	double ckpt_secs, ckpt_last;
	pthread_mutex_t gate_mu;
	pthread_cond_t gate_cv;
	int64_t gate;              /* -1: open */
	int gate_cancel;
	int snap_copying;          /* dump is copying the state: the gate holds
				    * even a cancelled pull (checkpoint.c) */
	int gate_broken;           /* a cancelled pull passed a closed gate: no
				    * interval checkpoint from now on */
	uint64_t ckpt_errors;
	uint64_t pos_file, pos_rec; /* data position of the end (final checkpoint) */
	uint64_t examples_done;    /* train examples through push */
	int64_t phase;             /* checkpoint.c: the current pass */
	int64_t ckpt_step;         /* step of the newest checkpoint written or loaded; -1 */
	uint64_t pass_batches0, pass_examples0;
	int pass_done;
	/* The last written snapshot, kept so that the next checkpoint copies
	 * into memory that is already mapped (st_trainer_snap_release); NULL
	 * when none is kept. Under gate_mu. */
	struct st_trainer_snap *snap_spare;

	/* Delta exports (store.c): keys pulled for training and keys evicted
	 * since the last export, per table; tracking only once turned on. The
	 * run lineage its exports and checkpoints carry ("" until the first
	 * full export makes one or a resumed checkpoint restores it). */
	char lineage[ST_TRAINER_LINEAGE_MAX];
	int track;
	pthread_mutex_t track_mu;
	st_keyset_t touched[MAX_TABLES], evicted[MAX_TABLES];
	int track_err;             /* < 0: a changed key was not recorded (out of
				      memory); deltas are refused until a full
				      export. Under track_mu */
	st_evict_ctx_t evict_ctx[MAX_TABLES];
	int *slot_table;           /* [n_slots] */
	int n_slots, n_dense, gstride;
	uint32_t minibatch;
	int mean_loss;
	const st_sync_ops_t *sops;
	void *sync;
	st_sync_env_t env;
	st_sync_cfg_t sync_cfg;
	st_metrics_t *metrics;

	int N;
	worker_t *w;
	pthread_barrier_t bar;
	int started, stop;
	st_batch_t *cur;
	uint32_t nmb;              /* minibatches of the current batch */
	uint32_t next_mb;          /* FREE schedule counter (atomic) */
	uint64_t gstep;            /* steps begun so far (LOCKSTEP base) */
	uint64_t gstep_base;       /* gstep when the current policy was created */
	int err;                   /* first worker error (atomic) */
	/* Non-finite training losses (stages.train.on_nonfinite): how many
	 * minibatches had one (atomic), and the first of them, recorded by
	 * the worker that won nf_first (0 -> 1) and read by the train thread
	 * after the batch's end barrier. */
	int nf_fail;               /* ST_NONFINITE_FAIL: stop the job */
	uint64_t nf_count, nf_seen;
	int nf_first;
	struct {
		double loss;
		uint64_t batch, seq;   /* train step (1-based) and the read stage's seq */
		uint32_t mb, nmb;      /* minibatch of the batch, of nmb */
		int worker;
	} nf;

	/* Dense optimizer state shared by successive policies (sync.h). */
	float *dstate;
	uint64_t dt;
	st_sync_stats_t past;      /* statistics of the policies destroyed */
	uint64_t batches;          /* train batches done */

	/* st.sync.auto: sub[0] while worker speeds agree, sub[1] otherwise. */
	int auto_on, auto_cur;
	st_sync_cfg_t auto_sub[2]; /* deep copies (the job is not kept) */
	double auto_threshold;
	uint32_t auto_window;
	uint64_t switches;
	st_trainer_time_fn time_fn;
	void *time_ud;

	st_straggler_cfg_t strag;
	pthread_mutex_t slow_mu;
	pthread_cond_t slow_cv;
	int cancel;                /* under slow_mu */

	/* Multi-process jobs (ops/dist): the sharded store; how many steps a
	 * pull may run ahead of the applied ones (0: allreduce, the hybrid's
	 * staleness bound, -1: no wait, async); train batches pulled so far
	 * (the pull thread's), sync steps done (the train thread's) and the
	 * global examples of the current step. */
	struct st_dist *dist;
	int dist_lockstep, dist_drained;
	int64_t dist_lag;
	uint64_t dist_pulled, dist_steps;
	uint64_t dist_trained;     /* train batches trained (atomic; FRESH_ROWS) */
	int dist_fresh;            /* the policy has ST_SYNC_FRESH_ROWS */
	uint32_t dist_tot;
	uint64_t dist_ssteps;      /* synchronous steps taken part in (atomic) */
	int64_t dist_soff;         /* train batch j is sync step j + soff (atomic) */
	uint32_t auto_tick;        /* steps or batches since the last vote (auto) */
	st_batch_t dist_empty;     /* the batch of a step this rank has no data for */

	float *ev_pred, *ev_label;
	size_t ev_n, ev_cap;
	uint64_t since;
	pull_thread_t pull_t[ST_MAX_STAGE_THREADS];
};

/* splitmix64's finalizer: hashes for the pull dedup set and the straggler
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

/* A multi-process batch's row copies (st_batch_t.rowbuf): each owner's
 * buffered step count at the pull, the table of each unique key, then the
 * rows (gstride floats each). One allocation. */
typedef struct dist_rowbuf {
	uint64_t *tokens;          /* [world size] (st_dist_pull) */
	uint8_t *utable;
	float *rows;
} dist_rowbuf_t;

/* Pulls batch b's rows from their owners (pull.c): uslot[u] is the slot of
 * unique key u; need_step as st_dist_pull; gives up when g (may be NULL)
 * is cancelled. */
int st__trainer_dist_pull(st_trainer_t *tr, st_batch_t *b, const uint16_t *uslot,
			  uint64_t need_step, st_graph_t *g);

/* Frees one pull thread's scratch (pull.c). */
void st__trainer_pull_free(pull_thread_t *p);

/* ops/train/store.c: the tables (and their SSD tiers) from tdim[] and the
 * per-table base options; st__trainer_store_metrics publishes row, cache
 * and SSD metrics (push thread). */
int st__trainer_tables_create(st_trainer_t *tr, const st_job_t *job, const int *tdim,
			      const st_table_opts_t *base);
void st__trainer_tables_destroy(st_trainer_t *tr);
void st__trainer_store_metrics(st_trainer_t *tr);
/* Records the training keys of a pulled batch for the next delta export
 * (pull threads). ST_OK, or ST_ENOMEM when a key could not be recorded (or
 * one was not before, st__trainer_track_error): the batch must fail, since
 * a delta without that key would silently miss its row. */
int st__trainer_track_batch(st_trainer_t *tr, const st_batch_t *b, const uint16_t *uslot);
/* ST_OK, or the error that lost a key since the last full export (the TTL
 * sweep's on_evict hook cannot return one: push asks after the sweep). */
int st__trainer_track_error(st_trainer_t *tr);
/* Frees the sets (destroy). */
void st__trainer_track_free(st_trainer_t *tr);
/* Test-only fault injection, compiled in always, like Lua's failing test
 * allocator: -1 (the default) is inert; n >= 0 lets n more allocations of
 * the delta-tracking key sets succeed and fails every later one with
 * ST_ENOMEM until it is set back to -1. Thread-safe (atomic). */
extern long st__trainer_keyset_fail_after;

/* checkpoint.c: pull waits at the gate and marks interval ends; dump
 * checkpoints after a marked batch; open_gate(cancel = 1) releases a
 * waiting pull for good (shutdown). */
void st__trainer_ckpt_gate(st_trainer_t *tr, st_batch_t *b, st_graph_t *g);
void st__trainer_ckpt_open_gate(st_trainer_t *tr, int cancel);
int st__trainer_checkpoint_after(st_trainer_t *tr, const st_batch_t *b);

#endif
