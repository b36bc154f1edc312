/*
 * gba.h — Global Batch gradients Aggregation, the parameter server's side
 * (gba-global-batch-aggregation.txt §4.1, Fig. 5, Appendix B Algorithm 2),
 * written once for both transports: the threads of one process
 * (ops/sync/gba.c, bsp.c: the "PS" is the policy object) and the ranks of
 * many (ops/dist/psbuf.c: rank 0 keeps the dense buffer, every owner rank
 * the buffer of its rows, "each PS maintains an individual gradient buffer
 * to deal with the gradients of the corresponding partitions of the
 * variables", §4.1).
 *
 * Tokens. A buffer's k counts its global steps. A worker that pulls
 * parameters gets the token k of the PS it pulls from ("pull the
 * parameters and fetch a token from PS", Appendix B Algorithm 1 line 16),
 * and every gradient it computes from them carries that token back. The
 * paper's token list hands out floor(i / M) to the i-th batch as a
 * stand-in for "the global step when this batch is sent to a worker"; a PS
 * that answers the pull itself knows that step exactly, so the token is
 * the step and k - token is exactly the data staleness of §4.1.
 *
 * Buffer. Every worker gradient is one contribution to every buffer; a
 * buffer performs global step k once it holds M contributions ("when the
 * gradient buffer reaches the capacity of M pairs of gradients and tokens,
 * all the gradients are aggregated to apply once", §4.1), then k = k + 1.
 *
 * Decay (Eq. 1, tolerance iota): f = 1 if the staleness is <= iota, else 0
 * (the gradient counts as zero). Dense: staleness = k - token; the step's
 * gradient is sum(f g) / n over the n contributions of the step ("the
 * weighted sum ... divided by N_a", Algorithm 2 line 22). Rows: every ID
 * carries the global step of its last update ("the global step of
 * appearance tagged to each ID", line 18), stored as seen = step + 1 (0:
 * none); the ID's staleness for a contribution is seen - token if
 * seen > token, else 0 ("the tagged global step of each ID and the
 * attached token", line 21), and its gradient is the sum of the kept ones
 * divided by the contributions that touched it ("divided by the number of
 * workers that encountered the particular ID", line 23).
 *
 * Decided on arrival: tags change only at a step, and a contribution
 * belongs to the step being filled, so its staleness is already what it
 * will be at that step ("we could execute the weighted sum over some
 * gradients in advance based on the tokens", Appendix B). A buffer thus
 * holds one running sum per ID (and one dense sum), not M gradients. Tags
 * are read before any is set for step k, so a step's own update never
 * counts as staleness of its own gradients.
 *
 * BSP (§5.1, "aggregates a pre-set number b2 of gradients ... regardless of
 * the gradient version") is the same buffer without token control: no
 * tolerance (ST_ALGO_GBA_NO_TOL) and no tags; dense and every row are
 * averaged over the step's n contributions.
 *
 * Forgetting tags. The tag map would otherwise grow with every ID ever
 * updated. A step may forget the tags with seen <= lo, a bound its caller
 * gives: one process passes the oldest token a worker still computes with
 * (exact: a tag that old means staleness 0 for every gradient to come);
 * across processes rank 0 cannot know every rank's tokens and passes
 * k - a horizon. A row contribution whose token is so old that a forgotten
 * tag could have decided it (token + iota < the highest lo used) is then
 * dropped whole; with an exact lo that never happens.
 *
 * End: a partial buffer is applied as a last step with the n < M
 * contributions present (the paper's last update of an epoch aggregates
 * Q mod M gradients); when is the transport's choice.
 *
 * Threads: none. No function takes a lock; the caller serializes every
 * call on one buffer.
 */
#ifndef ST_ALGO_GBA_H
#define ST_ALGO_GBA_H

#include <stddef.h>
#include <stdint.h>

/* No tolerance: every gradient counts (BSP). */
#define ST_ALGO_GBA_NO_TOL UINT32_MAX
/* Contributions per global step, at most. */
#define ST_ALGO_GBA_MAX_M (1u << 20)

/* Eq. 1: whether a gradient `staleness` steps old counts (f = 1). */
static inline int st_algo_gba_keep(uint64_t staleness, uint32_t tol)
{
	return tol == ST_ALGO_GBA_NO_TOL || staleness <= tol;
}

/* An ID's staleness for a gradient computed at token `token`, the ID's tag
 * being seen (its last update step + 1; 0: none). */
static inline uint64_t st_algo_gba_id_staleness(uint64_t seen, uint64_t token)
{
	return seen > token ? seen - token : 0;
}

/* ---- the dense buffer (one PS: rank 0, or the one process) -------------- */

typedef struct st_algo_gba_dense {
	uint32_t M, tol;          /* contributions per step; iota */
	size_t n;                 /* floats */
	uint64_t k;               /* global steps done: the token handed out now */
	uint32_t count, kept;     /* contributions in the step being filled */
	float *sum;               /* [n] sum of the kept gradients */
} st_algo_gba_dense_t;

/* An empty buffer of n floats. ST_OK, ST_EINVAL (M is 0 or above
 * ST_ALGO_GBA_MAX_M), ST_ENOMEM; st_algo_gba_dense_fini is safe after
 * either, and on a zeroed struct. */
int st_algo_gba_dense_init(st_algo_gba_dense_t *b, uint32_t M, uint32_t tol, size_t n);
void st_algo_gba_dense_fini(st_algo_gba_dense_t *b);

/* One contribution computed on the parameters of token `token`: *age =
 * k - token; *dropped = 1 when Eq. 1 excludes it (it still counts toward M
 * and toward the divisor). ST_EINVAL, and nothing changes, for a token
 * from the future (token > k). Returns ST_OK. */
int st_algo_gba_dense_add(st_algo_gba_dense_t *b, uint64_t token, const float *grad,
			  uint64_t *age, int *dropped);

/* Whether the step is due (M contributions in the buffer). */
static inline int st_algo_gba_dense_full(const st_algo_gba_dense_t *b)
{
	return b->count >= b->M;
}

/* The step's gradient over the count >= 1 contributions present, in place
 * (sum(f g) / count), or NULL when none was kept: the step then changes no
 * parameter. The caller applies its optimizer step, then calls
 * st_algo_gba_dense_done. */
const float *st_algo_gba_dense_mean(st_algo_gba_dense_t *b);

/* Ends global step k: k + 1, an empty buffer. */
void st_algo_gba_dense_done(st_algo_gba_dense_t *b);

/* ---- the buffer of rows (one PS's partition of the IDs) ------------------ */

typedef struct st_algo_gba_rows {
	uint32_t M, tol;          /* contributions per step; iota */
	int perid;                /* tags and per-ID averages (GBA); 0: BSP */
	uint32_t md;              /* floats per ID's sum, at most */
	uint64_t k;               /* global steps done */
	uint32_t count;           /* contributions in the step being filled */
	/* The step's running sums, one per ID, in first-touch order. */
	size_t nacc, acap;
	uint64_t *akey;
	uint8_t *atab;
	uint32_t *adim;
	float *asum;              /* [acap * md] */
	uint32_t *acnt, *akept;   /* contributions touching it, of which kept */
	uint32_t *aslot;          /* hash -> sum index (UINT32_MAX: empty) */
	size_t scap;
	/* Tags: (table, key) -> seen (0: empty slot). */
	uint64_t *tkey, *tseen;
	uint8_t *ttab;
	size_t tcap, tn;
	uint64_t forgot;          /* tags with seen <= forgot may be gone */
} st_algo_gba_rows_t;

/* An empty buffer whose IDs have at most md floats. perid: GBA (tags,
 * per-ID averages); 0: BSP (then tol must be ST_ALGO_GBA_NO_TOL). ST_OK or
 * ST_EINVAL; fini is safe after either, and on a zeroed struct. */
int st_algo_gba_rows_init(st_algo_gba_rows_t *r, uint32_t M, uint32_t tol, int perid,
			  uint32_t md);
void st_algo_gba_rows_fini(st_algo_gba_rows_t *r);

/* Starts a contribution computed at token `token` with up to n IDs of this
 * buffer: checks the token (ST_EINVAL for one from the future, token > k)
 * and makes room (ST_ENOMEM); on failure nothing changes. ST_OK. */
int st_algo_gba_rows_begin(st_algo_gba_rows_t *r, uint64_t token, size_t n);

/* One ID's gradient g[dim] (dim <= md) of the contribution begun with
 * `token`: counts the ID as touched and adds g to its sum when Eq. 1 keeps
 * it. Returns 1 kept, 0 dropped. */
int st_algo_gba_rows_add(st_algo_gba_rows_t *r, uint64_t token, uint64_t key, uint8_t tab,
			 const float *g, uint32_t dim);

/* Ends the contribution (it counts toward M also with no ID here).
 * Returns 1 when the step is due. */
static inline int st_algo_gba_rows_end(st_algo_gba_rows_t *r)
{
	return ++r->count >= r->M;
}

/* Global step k over the count contributions present: for every ID with a
 * kept gradient, its average (GBA: over the contributions that touched
 * it; BSP: over count) goes to update(arg, key, tab, g, dim), which applies
 * the optimizer step; then the ID's tag becomes k + 1 (GBA). lo: tags with
 * seen <= lo may be forgotten to make room (see the file comment). Then
 * k + 1 and an empty buffer. ST_OK; ST_ENOMEM with nothing applied and the
 * buffer kept; or update's first error (the IDs before it are applied). */
int st_algo_gba_rows_step(st_algo_gba_rows_t *r, uint64_t lo,
			  int (*update)(void *arg, uint64_t key, uint8_t tab, float *g,
					uint32_t dim),
			  void *arg);

#endif
