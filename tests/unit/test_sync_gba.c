/* test_sync_gba.c — the GBA policy (ops/sync/gba.c): scripted token
 * schedules driven through the hooks from one thread (begin_step and apply
 * of chosen workers in a chosen order), so every interleaving is exact:
 * M gradients per global step, Eq. 1 on the token age, the dense average,
 * the per-ID average over the gradients that touched the ID, the per-ID
 * staleness from the ID's last update step, the partial buffer at the end
 * of a batch, bad parameters; then N real threads (invariants only), and
 * learning through the trainer against allreduce on the same data.
 *
 * The scripted env: the lr preset with 2 dense features (3 dense params),
 * SGD with lr 1 for dense and rows, so an update is exactly w -= g. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ops/gen/gen.h"
#include "ops/sync/sync.h"
#include "ops/sync/registry.h"
#include "ops/train/trainer.h"
#include "runtime/err.h"
#include "sync_policy_util.h"

#define NU 4   /* rows of the scripted env, each of width 1 */

typedef struct {
	st_model_t *model;
	st_optim_t sgd;
	char *keys[2];
	double vals[2];
	st_sync_cfg_t cfg;
	st_sync_env_t env;
	const st_sync_ops_t *ops;
	void *p;
	float row[NU];         /* the shared rows (SGD: no state) */
	float *rowp[NU];
	uint16_t dims[NU];
	float p0[8];           /* dense params at creation */
} fx_t;

/* The policy over n workers; global_batch gb, tolerance tol (< 0: absent),
 * local batch mb in the env (0: taken from the first gradient). Returns
 * create's code; on success f->p is the policy. */
static int fx_init(fx_t *f, int n, double gb, double tol, uint32_t mb)
{
	memset(f, 0, sizeof *f);
	st_model_cfg_t mc;
	memset(&mc, 0, sizeof mc);
	mc.type = (char *)"lr";
	mc.emb_dim = 1;
	assert_int_equal(st_model_create(&f->model, &mc, 2, 1, 1), ST_OK);
	assert_true(st_model_nparams(f->model) <= 8);
	assert_true(st_model_max_row_dim(f->model) >= 1);
	st_optim_cfg_t oc;
	util_set_opt(&oc, "sgd", 1.0);
	assert_int_equal(st_optim_init(&f->sgd, &oc), ST_OK);
	int np = 0;
	if (gb > 0) {
		f->keys[np] = (char *)"global_batch";
		f->vals[np++] = gb;
	}
	if (tol >= 0) {
		f->keys[np] = (char *)"tolerance";
		f->vals[np++] = tol;
	}
	f->cfg = (st_sync_cfg_t){ .name = (char *)"gba", .n_params = np, .keys = f->keys,
				  .vals = f->vals };
	float *params = st_model_params(f->model);
	for (size_t i = 0; i < st_model_nparams(f->model); i++)
		params[i] = f->p0[i] = 0.25f * (float)i;
	f->env = (st_sync_env_t){
		.n_workers = n, .cfg = &f->cfg, .model = f->model, .params = params,
		.nparams = st_model_nparams(f->model), .dense_opt = &f->sgd,
		.sparse_opt = &f->sgd, .minibatch = mb,
	};
	for (int u = 0; u < NU; u++) {
		f->row[u] = 0;
		f->rowp[u] = &f->row[u];
		f->dims[u] = 1;
	}
	f->ops = st_sync_find("gba");
	assert_non_null(f->ops);
	assert_int_equal(f->ops->schedule, ST_SYNC_FREE);
	int rc = f->ops->create(&f->p, &f->env);
	if (rc < 0)
		st_model_destroy(f->model);
	return rc;
}

static void fx_fini(fx_t *f)
{
	f->ops->destroy(f->p);
	st_model_destroy(f->model);
}

static void begin(fx_t *f, int w)
{
	const float *snap = f->ops->begin_step(f->p, w, 0);
	/* The snapshot is the shared dense params at that moment. */
	assert_memory_equal(snap, f->env.params, sizeof(float) * f->env.nparams);
}

/* Worker w hands over a gradient of n examples: every dense entry = d,
 * row u = gu[u] (NAN: not touched). */
static int push_n(fx_t *f, int w, float d, const float gu[NU], uint32_t n)
{
	float dense[8], grad[NU];
	uint32_t uidx[NU], nr = 0;
	for (size_t i = 0; i < f->env.nparams; i++)
		dense[i] = d;
	for (int u = 0; u < NU; u++) {
		grad[u] = gu ? gu[u] : NAN;
		if (!isnan(grad[u]))
			uidx[nr++] = (uint32_t)u;
	}
	st_sync_grads_t g = {
		.n_examples = n, .dense = dense, .n_rows = nr, .uidx = uidx,
		.rows = f->rowp, .row_dim = f->dims, .grad = grad, .gstride = 1,
	};
	return f->ops->apply(f->p, w, &g);
}

static void push(fx_t *f, int w, float d, const float gu[NU])
{
	assert_int_equal(push_n(f, w, d, gu, 1), ST_OK);
}

static st_sync_stats_t stats(fx_t *f)
{
	st_sync_stats_t s;
	f->ops->report(f->p, &s);
	return s;
}

/* Dense param i moved by -delta from p0 (SGD lr 1, all entries alike). */
static void assert_dense_moved(fx_t *f, double delta)
{
	for (size_t i = 0; i < f->env.nparams; i++)
		assert_float_equal(f->env.params[i], f->p0[i] - delta, 1e-6);
}

/* Exactly M gradients make one global step; the snapshot a worker reads is
 * the params after the steps done; stats count updates and bytes. */
static void test_sync_gba_m_gradients_per_step(void **state)
{
	(void)state;
	fx_t f;
	assert_int_equal(fx_init(&f, 2, 3, 100, 1), ST_OK);
	for (int i = 1; i <= 7; i++) {
		int w = i % 2;
		begin(&f, w);
		push(&f, w, 1.0f, NULL);
		assert_int_equal(stats(&f).steps, (uint64_t)(i / 3));
		/* Each step moves dense by the mean of 3 gradients of 1.0. */
		assert_dense_moved(&f, (double)(i / 3));
	}
	st_sync_stats_t s = stats(&f);
	assert_int_equal(s.updates, 6);   /* the 7th is still buffered */
	assert_int_equal(s.dropped, 0);
	/* Per gradient: pull and push, each 8 (token) + 4 * nparams. */
	assert_int_equal(s.bytes, 7 * 2 * (8 + 4 * f.env.nparams));
	fx_fini(&f);
}

/* The straggler: worker 0 reads at global step 0, workers 1 and 2 run three
 * global steps (M = 2), then worker 0's gradient meets worker 1's in step
 * 3: token age 3. With tolerance 1 it is dropped (the step applies g1 / 2),
 * with tolerance 3 kept ((g0 + g1) / 2). */
static void straggler(double tol, st_sync_stats_t *out, double *moved)
{
	fx_t f;
	assert_int_equal(fx_init(&f, 3, 2, tol, 1), ST_OK);
	begin(&f, 0);
	for (int i = 0; i < 6; i++) {
		int w = 1 + i % 2;
		begin(&f, w);
		push(&f, w, 1.0f, NULL);
	}
	assert_int_equal(stats(&f).steps, 3);
	assert_dense_moved(&f, 3.0);
	begin(&f, 1);
	push(&f, 0, 10.0f, NULL);   /* token 0, global step 3 */
	push(&f, 1, 2.0f, NULL);    /* token 3 */
	*out = stats(&f);
	*moved = f.p0[0] - f.env.params[0];
	fx_fini(&f);
}

static void test_sync_gba_tolerance_drops_stale_tokens(void **state)
{
	(void)state;
	st_sync_stats_t s;
	double moved;
	straggler(1, &s, &moved);
	assert_int_equal(s.steps, 4);
	assert_int_equal(s.dropped, 1);
	assert_int_equal(s.updates, 7);
	assert_float_equal(moved, 3.0 + 2.0 / 2, 1e-6);
	/* Ages: 6 gradients of age 0 (each read and pushed within a step)... */
	assert_int_equal(s.staleness[0], 7);
	assert_int_equal(s.staleness[st_sync_hist_bucket(3)], 1);

	straggler(3, &s, &moved);
	assert_int_equal(s.dropped, 0);
	assert_int_equal(s.updates, 8);
	assert_float_equal(moved, 3.0 + (10.0 + 2.0) / 2, 1e-6);

	straggler(2, &s, &moved);   /* age 3 > 2: dropped */
	assert_int_equal(s.dropped, 1);
}

/* The dense update is the plain average of the M gradients. */
static void test_sync_gba_dense_average(void **state)
{
	(void)state;
	fx_t f;
	assert_int_equal(fx_init(&f, 3, 3, 1, 1), ST_OK);
	const float g[3] = { 0.5f, 1.25f, 3.0f };
	for (int w = 0; w < 3; w++)
		begin(&f, w);
	for (int w = 2; w >= 0; w--)
		push(&f, w, g[w], NULL);
	assert_dense_moved(&f, (0.5 + 1.25 + 3.0) / 3);
	fx_fini(&f);
}

/* Per ID: the sum over the gradients that touched the ID, divided by how
 * many touched it (Alg. 2 l. 23): row 0 touched by 2 of 3, row 1 by all 3,
 * row 2 by 1, row 3 by none. */
static void test_sync_gba_sparse_average_over_touchers(void **state)
{
	(void)state;
	fx_t f;
	assert_int_equal(fx_init(&f, 3, 3, 1, 1), ST_OK);
	const float g[3][NU] = {
		{ 2.0f, 1.0f, 5.0f, NAN },
		{ 4.0f, 2.0f, NAN, NAN },
		{ NAN, 3.0f, NAN, NAN },
	};
	for (int w = 0; w < 3; w++) {
		begin(&f, w);
		push(&f, w, 0.0f, g[w]);
		if (w < 2)
			assert_float_equal(f.row[0], 0.0, 0);   /* buffered, not applied */
	}
	assert_float_equal(f.row[0], -(2.0 + 4.0) / 2, 1e-6);
	assert_float_equal(f.row[1], -(1.0 + 2.0 + 3.0) / 3, 1e-6);
	assert_float_equal(f.row[2], -5.0, 1e-6);
	assert_float_equal(f.row[3], 0.0, 0);
	/* Rows count in the bytes: 8 + 4 per touched row, both ways. */
	st_sync_stats_t s = stats(&f);
	assert_int_equal(s.bytes, 2 * (3 * (8 + 4 * f.env.nparams) + 6 * (8 + 4)));
	fx_fini(&f);
}

/* Per-ID staleness. Straggler worker 0 reads at step 0 and touches every
 * row; M = 2, workers 1 and 2 then run steps 0, 1, 2 touching row 1 in
 * steps 0 (so its last update is step 0), row 2 in step 1 and row 3 in
 * step 2, never row 0. In step 3 worker 0's gradient (token 0, dense age
 * 3) meets worker 1's, which touches row 3 too. The ID's staleness is
 * s = (last update + 1) - token when the ID was updated at or after the
 * token, else 0; Eq. 1 keeps the ID's gradient iff s <= tolerance:
 *   row 0: s = 0, row 1: s = 1, row 2: s = 2, row 3: s = 3. */
static void id_staleness(double tol)
{
	fx_t f;
	assert_int_equal(fx_init(&f, 3, 2, tol, 1), ST_OK);
	begin(&f, 0);
	float before[NU];
	for (int step = 0; step < 3; step++) {
		float gu[NU] = { NAN, NAN, NAN, NAN };
		gu[1 + step] = 1.0f;
		begin(&f, 1);
		push(&f, 1, 0.0f, gu);
		begin(&f, 2);
		push(&f, 2, 0.0f, NULL);
	}
	assert_float_equal(f.row[1], -1.0, 1e-6);
	assert_float_equal(f.row[3], -1.0, 1e-6);
	memcpy(before, f.row, sizeof before);
	const float g0[NU] = { 8.0f, 8.0f, 8.0f, 8.0f };
	const float g1[NU] = { NAN, NAN, NAN, 2.0f };
	begin(&f, 1);
	push(&f, 0, 0.0f, g0);
	push(&f, 1, 0.0f, g1);
	assert_int_equal(stats(&f).dropped, tol < 3 ? 1 : 0);   /* dense age 3 */
	const int s_id[NU] = { 0, 1, 2, 3 };
	for (int u = 0; u < NU; u++) {
		int keep = s_id[u] <= tol;
		/* Rows 0-2 are touched by worker 0 only: divided by 1. Row 3 by
		 * both: (f0 * 8 + 2) / 2. */
		double step = u < 3 ? (keep ? 8.0 : 0.0) : ((keep ? 8.0 : 0.0) + 2.0) / 2;
		assert_float_equal(f.row[u], before[u] - step, 1e-6);
	}
	fx_fini(&f);
}

static void test_sync_gba_sparse_decay_by_id_staleness(void **state)
{
	(void)state;
	for (int tol = 0; tol <= 3; tol++)
		id_staleness(tol);
}

/* A partial buffer at the end of a batch is applied as a partial global
 * step when the last worker ends the batch, averaged over the gradients
 * present; the next batch starts with an empty buffer. */
static void test_sync_gba_partial_buffer_at_end_of_batch(void **state)
{
	(void)state;
	fx_t f;
	assert_int_equal(fx_init(&f, 2, 4, 1, 1), ST_OK);
	const float g[3] = { 1.0f, 2.0f, 6.0f };
	const float gu[NU] = { 4.0f, NAN, NAN, NAN };
	for (int i = 0; i < 3; i++) {
		begin(&f, i % 2);
		push(&f, i % 2, g[i], i == 2 ? gu : NULL);
	}
	assert_int_equal(stats(&f).steps, 0);
	f.ops->end_batch(f.p, 1);
	assert_int_equal(stats(&f).steps, 0);   /* worker 0 still in the batch */
	assert_dense_moved(&f, 0.0);
	f.ops->end_batch(f.p, 0);
	assert_int_equal(stats(&f).steps, 1);
	assert_int_equal(stats(&f).updates, 3);
	assert_dense_moved(&f, (1.0 + 2.0 + 6.0) / 3);
	assert_float_equal(f.row[0], -4.0, 1e-6);
	/* Next batch: 4 gradients, exactly one more step. */
	assert_int_equal(f.ops->begin_batch(f.p, 10), ST_OK);
	for (int i = 0; i < 4; i++) {
		begin(&f, i % 2);
		push(&f, i % 2, 1.0f, NULL);
		assert_int_equal(stats(&f).steps, i < 3 ? 1 : 2);
	}
	f.ops->end_batch(f.p, 0);
	f.ops->end_batch(f.p, 1);
	assert_int_equal(stats(&f).steps, 2);   /* nothing left to flush */
	assert_dense_moved(&f, 3.0 + 1.0);
	fx_fini(&f);
}

/* global_batch must be given and be a multiple of the local batch, known
 * at creation (env) or from the first gradient. */
static void test_sync_gba_bad_global_batch(void **state)
{
	(void)state;
	fx_t f;
	assert_int_equal(fx_init(&f, 2, 10, 1, 4), ST_EJOB);
	assert_int_equal(fx_init(&f, 2, -1, 1, 4), ST_EJOB);   /* absent */
	assert_int_equal(fx_init(&f, 2, 8, 1.5, 4), ST_EJOB);
	assert_int_equal(fx_init(&f, 2, 10, 1, 0), ST_OK);
	begin(&f, 0);
	assert_int_equal(push_n(&f, 0, 1.0f, NULL, 4), ST_EJOB);
	fx_fini(&f);
	/* Lazily: 8 / 4 = M = 2. */
	assert_int_equal(fx_init(&f, 2, 8, 1, 0), ST_OK);
	begin(&f, 0);
	assert_int_equal(push_n(&f, 0, 1.0f, NULL, 4), ST_OK);
	assert_int_equal(stats(&f).steps, 0);
	begin(&f, 1);
	assert_int_equal(push_n(&f, 1, 1.0f, NULL, 4), ST_OK);
	assert_int_equal(stats(&f).steps, 1);
	fx_fini(&f);
}

/* ---- real threads --------------------------------------------------------- */

enum { TN = 4, TK = 300 };

typedef struct {
	fx_t *f;
	int w;
	pthread_barrier_t *bar;
} targ_t;

static void *tmain(void *arg)
{
	targ_t *a = arg;
	const float gu[NU] = { 1.0f, 1.0f, NAN, NAN };
	pthread_barrier_wait(a->bar);
	for (int i = 0; i < TK; i++) {
		a->f->ops->begin_step(a->f->p, a->w, (uint64_t)i);
		if (push_n(a->f, a->w, 1.0f, (i + a->w) % 2 ? gu : NULL, 1) != ST_OK)
			return (void *)1;
	}
	a->f->ops->end_batch(a->f->p, a->w);
	return NULL;
}

/* Free-running workers: whatever the interleaving, every gradient is
 * either applied or dropped, steps = gradients / M, and with a tolerance
 * no token can exceed the dense params move by exactly one per step
 * (every gradient is 1.0, the mean of M of them is 1.0). */
static void test_sync_gba_threads(void **state)
{
	(void)state;
	fx_t f;
	const int M = 3;
	assert_int_equal(fx_init(&f, TN, M, 1000000, 1), ST_OK);
	pthread_barrier_t bar;
	pthread_barrier_init(&bar, NULL, TN);
	pthread_t tid[TN];
	targ_t a[TN];
	for (int w = 0; w < TN; w++) {
		a[w] = (targ_t){ &f, w, &bar };
		assert_int_equal(pthread_create(&tid[w], NULL, tmain, &a[w]), 0);
	}
	for (int w = 0; w < TN; w++) {
		void *r;
		pthread_join(tid[w], &r);
		assert_null(r);
	}
	pthread_barrier_destroy(&bar);
	st_sync_stats_t s = stats(&f);
	const uint64_t total = TN * TK;
	assert_int_equal(s.updates + s.dropped, total);
	assert_int_equal(s.dropped, 0);
	assert_int_equal(s.steps, (total + M - 1) / M);   /* last one partial */
	assert_dense_moved(&f, (double)s.steps);
	/* Rows 0 and 1: every step whose gradients touched them moved them by
	 * the mean of 1.0s: exactly 1 per such step, at most one per step. */
	assert_true(f.row[0] < -1.0f && f.row[0] >= -(float)s.steps);
	assert_float_equal(f.row[0], f.row[1], 0);
	assert_float_equal(f.row[0], floorf(f.row[0]), 0);
	uint64_t n = 0;
	for (int k = 0; k < ST_SYNC_HIST; k++)
		n += s.staleness[k];
	assert_int_equal(n, total);
	fx_fini(&f);
}

/* ---- learning through the trainer ------------------------------------------ */

#ifdef __SANITIZE_THREAD__
/* TSan runs ~20x slower and races show early; after 64k rows the
 * progressive AUC is still early noise (0.56-0.57), eval AUC ~0.71. */
#define LEARN_ROWS (16 * 4096)
#define EVAL_FLOOR 0.69
#define CHECK_PROGRESSIVE 0
#else
#define LEARN_ROWS (49 * 4096)   /* ~200k */
#define EVAL_FLOOR 0.72
#define CHECK_PROGRESSIVE 1
#endif
#define MINIBATCH 256   /* util_make_job's */

/* The dnn preset of sync_policy_util.h (emb 8, MLP 64-32, AdaGrad rows,
 * Adam dense, minibatch 256), 4 workers; returns progressive and eval AUC. */
static void learn(const char *sync, double *auc, double *eval_auc, st_sync_stats_t *ss)
{
	char *keys[2] = { (char *)"global_batch", (char *)"tolerance" };
	double vals[2] = { 4 * MINIBATCH, 1 };
	st_sync_cfg_t cfg = { .name = (char *)sync, .n_params = 2, .keys = keys, .vals = vals };
	*auc = util_learn(&cfg, 4, LEARN_ROWS, eval_auc, ss);
}

/* 4 workers, global_batch = 4 x minibatch: GBA learns as well as
 * allreduce on the same data with the same hyper-parameters (the paper's
 * tuning-free switch, §4.1). Measured (200k rows, eval on 32k): allreduce
 * eval AUC 0.763, GBA 0.771-0.773 (progressive 0.700 vs 0.704-0.707; 36-53
 * of 784 gradients dropped at tolerance 1 on 2 cores). GBA is ahead
 * because Alg. 2 divides an ID's gradient by the workers that touched it,
 * not by M: rare IDs take larger AdaGrad steps early (dividing by M instead
 * measured 0.7625, i.e. allreduce within 0.001). So: not worse than
 * allreduce by more than 0.01, and not a different model (within 0.02). */
static void test_sync_gba_learns_like_allreduce(void **state)
{
	(void)state;
	double a_auc, a_ev, g_auc, g_ev;
	st_sync_stats_t as, gs;
	learn("allreduce", &a_auc, &a_ev, &as);
	learn("gba", &g_auc, &g_ev, &gs);
	print_message("allreduce x4: progressive auc %.4f eval %.4f, %llu steps\n", a_auc,
		      a_ev, (unsigned long long)as.steps);
	print_message("gba       x4: progressive auc %.4f eval %.4f, %llu steps, %llu dropped, "
		      "%llu updates\n", g_auc, g_ev, (unsigned long long)gs.steps,
		      (unsigned long long)gs.dropped, (unsigned long long)gs.updates);
	assert_true(a_ev > EVAL_FLOOR);
	assert_true(g_ev > a_ev - 0.01 && g_ev < a_ev + 0.02);
	if (CHECK_PROGRESSIVE)
		assert_true(g_auc > a_auc - 0.01 && g_auc < a_auc + 0.02);
	/* 4096 / 256 = 16 minibatches per batch, 4 per global step. */
	assert_int_equal(gs.steps, LEARN_ROWS / (4 * MINIBATCH));
	assert_int_equal(gs.updates + gs.dropped, LEARN_ROWS / MINIBATCH);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sync_gba_m_gradients_per_step),
		cmocka_unit_test(test_sync_gba_tolerance_drops_stale_tokens),
		cmocka_unit_test(test_sync_gba_dense_average),
		cmocka_unit_test(test_sync_gba_sparse_average_over_touchers),
		cmocka_unit_test(test_sync_gba_sparse_decay_by_id_staleness),
		cmocka_unit_test(test_sync_gba_partial_buffer_at_end_of_batch),
		cmocka_unit_test(test_sync_gba_bad_global_batch),
		cmocka_unit_test(test_sync_gba_threads),
		cmocka_unit_test(test_sync_gba_learns_like_allreduce),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
