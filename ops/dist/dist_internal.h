/*
 * dist_internal.h — the sharded store's private state, shared by the
 * service (serve.c: what an owner does with requests) and the callers'
 * side (dist.c: pull, push, finish, setup). Nothing else includes it.
 */
#ifndef ST_DIST_INTERNAL_H
#define ST_DIST_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "ops/algo/gba.h"
#include "ops/algo/hopclock.h"
#include "ops/dist/dist.h"
#include "ops/dist/wire.h"

#define SALT UINT64_C(0x6a09e667f3bcc909)

typedef struct step_acc {
	uint64_t step;
	int count;
	int expect;                /* lists that make the step (P; hop_bw: K) */
	void **msg;                /* [P] that rank's PUSH for this step */
	size_t *len;
	struct step_acc *next;
} step_acc_t;

typedef struct deferred {
	void *buf;
	size_t len;
	int from;
} deferred_t;

typedef struct split {
	uint32_t **pos;            /* [P] */
	size_t *cap;               /* [P] */
} split_t;

typedef struct obuf {
	uint8_t *p;
	size_t cap, len;
	uint32_t n;
} obuf_t;

/* The gradient buffers of the buffered algorithms (psbuf.c over
 * ops/algo/gba.h): every owner its rows, rank 0 the dense parameters. */
typedef struct psbuf {
	int set;                   /* the first contribution set M, iota, perid
				    * (rows' fields; dense.sum != NULL once made) */
	st_algo_gba_rows_t rows;
	st_algo_gba_dense_t dense;
	struct bufupd {            /* a rows step's updates, collected (rows_step) */
		uint64_t key;
		const float *g;
		uint8_t tab;
	} *upd;
	size_t un, ucap;
} psbuf_t;

/* Hop's clocks and quorum on rank 0 (hop.c over ops/algo/hopclock.h). */
typedef struct held {
	int from;
	uint32_t worker;
	uint64_t req;
} held_t;

typedef struct hop {
	int N;                     /* workers per rank */
	uint32_t b;                /* the bound */
	int b_set;
	st_algo_hopclock_t clk;    /* [P * N] hop_bs's clocks; hop_bw's units are
				    * the ranks (worker 0's: r * N) */
	held_t *held;              /* replies held back */
	size_t nheld, cap;
	/* hop_bw (ranks are the units, worker index 0): the open step. */
	int bw;                    /* the clocks are hop_bw's */
	st_algo_hopbw_t q;         /* the quorum of step q.k */
	float *sum;                /* [nparams] the kept gradients' dense sum */
	uint32_t *lastK;           /* [P] quorum of the step each rank was last kept in */
} hop_t;

struct st_dist {
	st_net_t *net;
	int rank, P, owners, f16;
	int n_tables;
	st_table_t *tables[ST_DIST_MAX_TABLES];
	uint32_t dim[ST_DIST_MAX_TABLES];
	st_algo_params_t p;        /* dense parameters (rank 0's matter), optimizers */
	int n_workers;             /* train workers per rank (hop_bs's clocks) */
	float *dense_state;
	uint64_t *dense_t;

	pthread_t svc;
	int started, stop;         /* stop: atomic */
	pthread_mutex_t mu;
	pthread_cond_t cv;         /* applied advanced, a rank done */
	uint64_t applied;          /* sync steps applied here (under mu) */
	uint64_t stepcap;          /* no pull waits for more sync steps than this:
				    * the sync phase ended (st.sync.auto; under mu) */
	step_acc_t *steps;         /* pending sync steps, ascending */
	deferred_t *def;
	size_t n_def, cap_def;
	uint32_t *done;            /* [P] rank 0: the last round each rank finished */
	uint32_t round;            /* st_dist_finish calls so far */
	uint64_t req;

	/* Scratch of the handlers (under mu). */
	float *trow;               /* one row gradient */
	float **rscratch;          /* serve_rows: rows of one table */
	uint64_t *mkey;            /*   its keys */
	uint32_t *spos;            /*   their request positions */
	const float **gptr;        /*   (update_rows) their gradients */
	size_t rcap;
	float *sbuf;               /* answer_pull: rows by request position */
	size_t scap;
	uint8_t *sok;
	size_t okcap;
	obuf_t reply;
	uint64_t *mkeys;           /* apply_step: merge map keys */
	uint32_t *mslot;           /*   and slots (sum index) */
	size_t mcap;
	float *macc;               /* apply_step: sums */
	uint16_t *mtab;
	size_t accap;

	/* The callers' scratch: the pull thread's and the pushing thread's. */
	obuf_t *pull_out, *push_out;   /* [P] one message per owner */
	st_net_send_req_t **push_req;  /* [P] the push in flight from push_out */
	split_t pull_split, push_split; /* positions of each owner's keys */
	uint8_t *lok;                  /* own keys: ok flags */
	size_t lok_cap;
	int failed;                    /* the service failed (atomic) */

	psbuf_t buf;               /* gba, bsp (under mu) */
	hop_t hop;                 /* hop_bs, rank 0 (under mu) */

	st_dist_stats_t st;        /* relaxed atomics */
};

static inline void stat_add(uint64_t *p, uint64_t v)
{
	__atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}

static inline uint64_t mixk(uint64_t z)
{
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}


/* Whether a pull that needs sync steps 0..step-1 must still wait (mu held). */
static inline int st__dist_pull_waits(const st_dist_t *d, uint64_t step)
{
	return (step < d->stepcap ? step : d->stepcap) > d->applied;
}

/* serve.c */
/* Answers the deferred pulls that no longer wait (mu held). */
int st__dist_retry_deferred(st_dist_t *d);
void st__dist_put_row(uint8_t *dst, const float *x, uint32_t dim, int f16);
void st__dist_get_row(const uint8_t *src, uint32_t dim, int f16, float *x);
int st__dist_ob_reserve(obuf_t *b, size_t need);
/* Logs a malformed message from rank `from`; returns ST_EPEER. */
int st__dist_bad_msg(int from, const char *what, size_t len);
int st__dist_grow(void **p, size_t *cap, size_t n, size_t elem);
/* Resolves keys[idx[q]] (q < n; idx NULL: keys[q]) in their tables
 * (creating rows when `create`), copies each admitted key i's emb+wide
 * floats to out + i * stride and sets ok[i]; the rows are unpinned again at
 * once (the copies are what trains). mu held. */
int st__dist_serve_rows(st_dist_t *d, const uint64_t *keys, const uint8_t *tab,
			const uint32_t *idx, uint32_t n, int create, uint32_t stamp, uint8_t *ok,
			float *out, size_t stride);
/* One message to this rank's service, mu held; takes ownership of msg. */
int st__dist_handle(st_dist_t *d, void *msg, size_t len, int from);
void *st__dist_service(void *arg);
void st__dist_step_free(step_acc_t *a, int P);
/* One optimizer step t of key's row in table k with gradient g (nothing
 * when the row is not there). mu held. */
/* One optimizer step (step number t) on each of m owned rows of table k:
 * the row of d->mkey[q] takes the gradient d->gptr[q]; one table lookup
 * for all m keys (a lookup per key costs more than the update). Rows not
 * in the table (not admitted, or expired) are skipped. Call
 * st__dist_row_scratch(d, m) before filling mkey and gptr. */
int st__dist_row_scratch(st_dist_t *d, uint32_t n);
void st__dist_row_scratch_free(st_dist_t *d);
int st__dist_update_rows(st_dist_t *d, int k, uint32_t m, uint64_t t);

/* psbuf.c (mu held). A checked buffered PUSH: its rows into the step being
 * filled; the M-th contribution applies the step. ST_OK, ST_EPEER (bad
 * parameters or token, logged), ST_ENOMEM. */
int st__dist_buf_rows(st_dist_t *d, const wire_hdr_t *h, size_t len, int from);
/* Rank 0: a dense contribution (grad NULL: a fetch). *token = the dense
 * global step now, *age = the contribution's staleness, *dropped = 1 when
 * it exceeded the tolerance. ST_OK, ST_EINVAL (parameters that disagree
 * with the first contribution's, or a token from the future; nothing
 * changed), ST_ENOMEM. */
int st__dist_buf_dense(st_dist_t *d, const wire_hdr_t *h, const float *grad, uint64_t *token,
		       uint64_t *age, int *dropped);
/* A partial buffer's last step (dense on rank 0, rows). */
int st__dist_buf_flush(st_dist_t *d);
void st__dist_buf_free(st_dist_t *d);

/* hop.c (mu held, rank 0). A hop_bs DENSE of worker w of rank `from` (its
 * gradient, if any, already applied): the clocks. ST_OK, ST_EINVAL (bad
 * worker or bound: nothing changed), ST_ENOMEM. */
int st__dist_hop_step(st_dist_t *d, const wire_hdr_t *h, int from, int has_grad);
/* Worker w of rank `from` has no minibatch left in its batch. ST_OK,
 * ST_EINVAL (w beyond the job's workers), ST_ENOMEM. */
int st__dist_hop_idle(st_dist_t *d, int from, uint32_t w);
/* Whether that worker may start its next step (the clock rule). */
int st__dist_hop_ready(st_dist_t *d, int from, uint32_t w);
/* Holds back the reply to request req of that worker. */
int st__dist_hop_hold(st_dist_t *d, int from, uint32_t w, uint64_t req);
/* Sends, with reply(), the held replies whose workers may go on now. */
int st__dist_hop_release(st_dist_t *d, int (*reply)(st_dist_t *, int, uint32_t, uint64_t));
void st__dist_hop_free(st_dist_t *d);
/* hop_bw (hop.c, mu held, rank 0): rank `from`'s gradient for step
 * h->step (the step of the parameters it read). *late = 1: the step has
 * closed, the gradient is dropped (answer now); else it is kept and the
 * answer waits until the step closes (st__dist_bw_close releases it
 * through reply(); held entries with worker UINT32_MAX are rank 0's own
 * and get no reply). grad NULL: a fetch (registers the rank, *late = 1).
 * ST_OK, ST_EINVAL (a step not open yet, another b), ST_ENOMEM. */
int st__dist_bw_contrib(st_dist_t *d, const wire_hdr_t *h, const float *grad, int from,
			int *late);
/* Closes the open step if enough ranks have contributed (b fewer than the
 * active ranks, or all of them): one dense optimizer step of their mean,
 * then the held answers. */
int st__dist_bw_close(st_dist_t *d, int (*reply)(st_dist_t *, int, uint32_t, uint64_t));
/* serve.c: st__dist_hop_release with the service's reply. */
int st__dist_hop_poll(st_dist_t *d);

#endif
