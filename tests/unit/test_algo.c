/* test_algo.c — the algorithm cores of ops/algo, alone and as the two
 * transports drive them (one process's threads in ops/sync, the ranks of
 * many in ops/dist; docs/design-notes.md "One core per algorithm"):
 *
 *   owner   keys spread evenly over their owner ranks and stay put; tensors
 *           go largest first to the least-loaded worker; worker slices
 *           cover a flat array in order;
 *   params  the per-tensor dense steps together equal the whole step;
 *   gba     Eq. 1 on the dense token age, per-ID staleness from the tags,
 *           per-ID averages (GBA) against step averages (BSP), tokens from
 *           the future refused, forgotten tags only ever drop what they
 *           could have decided; and the parity of the two transports: one
 *           seeded schedule of pulls and pushes with a straggler through
 *           ops/sync/gba.c (threads) and through ops/dist/psbuf.c (one
 *           owner rank's handlers) ends with the same dense parameters,
 *           rows and drops, bit for bit;
 *   hop     the clock rule (join at the slowest, idle units do not hold
 *           anyone back) and the backup-worker quorum; and the parity of
 *           the transports: one seeded schedule of steps and idles through
 *           ops/sync/hop_bs.c (real worker threads, blocking in begin_step)
 *           and ops/dist/hop.c (rank 0's handlers) lets exactly the same
 *           workers go on after every event; hop_bw's steps through
 *           ops/sync/hop_bw.c (threads) and ops/dist/hop.c (ranks) keep and
 *           drop the same gradients and end with the same parameters;
 *   blend   EASGD, MA and BMUF against their formulas; and one background
 *           round of ops/sync/shadow.c (its shadow thread, held at the test
 *           hook) equals the round the ranks make (ops/sync/dist_shadow.c:
 *           the replicas summed in rank order, rank 0's sync PS serving
 *           ranks 0, 1, 2 in turn), bit for bit.
 *
 * Everything here is single-threaded and exact: the cores take no locks
 * (their callers serialize), so a scripted sequence is the whole test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ops/algo/blend.h"
#include "ops/algo/gba.h"
#include "ops/algo/hopclock.h"
#include "ops/algo/owner.h"
#include "ops/algo/params.h"
#include "ops/dist/dist_internal.h"
#include "ops/sync/sync.h"
#include "ops/sync/registry.h"
#include "runtime/err.h"

/* ---- a small dnn model and its optimizers --------------------------------- */

typedef struct {
	st_model_t *model;
	st_optim_t dopt, sopt;
	st_algo_params_t p;
} mfix_t;

static void opt_cfg(st_optim_cfg_t *o, const char *name, double lr)
{
	memset(o, 0, sizeof *o);
	o->name = (char *)name;
	o->lr = lr;
	o->eps = 1e-8;
	o->beta1 = 0.9;
	o->beta2 = 0.999;
	o->init_accum = 0.1;
	o->beta = 1.0;
}

static void mfix_init(mfix_t *f, const char *dense_opt, int rowwise)
{
	memset(f, 0, sizeof *f);
	st_model_cfg_t mc;
	memset(&mc, 0, sizeof mc);
	mc.type = (char *)"dnn";
	mc.emb_dim = 4;
	mc.n_hidden = 2;
	mc.hidden[0] = 16;
	mc.hidden[1] = 8;
	mc.init_scale = 0.05;
	assert_int_equal(st_model_create(&f->model, &mc, 3, 2, 7), ST_OK);
	st_optim_cfg_t oc;
	opt_cfg(&oc, dense_opt, 0.01);
	oc.rowwise = rowwise;
	assert_int_equal(st_optim_init(&f->dopt, &oc), ST_OK);
	opt_cfg(&oc, "adagrad", 0.05);
	assert_int_equal(st_optim_init(&f->sopt, &oc), ST_OK);
	f->p = (st_algo_params_t){ .model = f->model, .params = st_model_params(f->model),
				   .nparams = st_model_nparams(f->model),
				   .dense_opt = &f->dopt, .sparse_opt = &f->sopt };
}

static void mfix_fini(mfix_t *f)
{
	st_model_destroy(f->model);
}

/* A reproducible value stream in [-1, 1). */
static float rnd(uint64_t *s)
{
	*s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
	return (float)((int64_t)(*s >> 11) % 1000000) / 1e6f;
}

/* ---- owner ------------------------------------------------------------------ */

static void test_algo_owner_keys_spread_and_stay(void **state)
{
	(void)state;
	enum { OWNERS = 4, KEYS = 40000 };
	int cnt[OWNERS] = { 0 };
	for (uint64_t k = 0; k < KEYS; k++) {
		int o = st_algo_owner_key(k * 7919 + 3, OWNERS);
		assert_true(o >= 0 && o < OWNERS);
		assert_int_equal(o, st_algo_owner_key(k * 7919 + 3, OWNERS));
		cnt[o]++;
	}
	/* Within 5 % of an even share (a binomial's spread is about 0.4 %). */
	for (int o = 0; o < OWNERS; o++)
		assert_true(abs(cnt[o] - KEYS / OWNERS) < KEYS / OWNERS / 20);
	for (uint64_t k = 0; k < 100; k++)
		assert_int_equal(st_algo_owner_key(k, 1), 0);
	/* Worker of a unique key in a lockstep step: u mod N. */
	assert_int_equal(st_algo_owner_row(7, 3), 1);
	assert_int_equal(st_algo_owner_row(9, 3), 0);
}

static void test_algo_owner_tensors_largest_first(void **state)
{
	(void)state;
	mfix_t f;
	mfix_init(&f, "sgd", 0);
	const int nt = st_model_ntensors(f.model);
	for (int N = 1; N <= 5; N++) {
		int *own = st_algo_owner_tensors(f.model, N);
		assert_non_null(own);
		size_t load[5] = { 0 }, big = 0;
		int ibig = 0;
		for (int i = 0; i < nt; i++) {
			assert_true(own[i] >= 0 && own[i] < N);
			load[own[i]] += st_algo_tensor_floats(f.model, i) + 64;
			if (st_algo_tensor_floats(f.model, i) > big) {
				big = st_algo_tensor_floats(f.model, i);
				ibig = i;
			}
		}
		/* The largest tensor goes first, to worker 0; greedy keeps every
		 * worker within one tensor of the least loaded. */
		assert_int_equal(own[ibig], 0);
		size_t lo = SIZE_MAX, hi = 0;
		for (int w = 0; w < N && N <= nt; w++) {
			lo = load[w] < lo ? load[w] : lo;
			hi = load[w] > hi ? load[w] : hi;
		}
		if (N <= nt)
			assert_true(hi - lo <= big + 64);
		free(own);
	}
	mfix_fini(&f);
}

static void test_algo_owner_ranges_cover_in_order(void **state)
{
	(void)state;
	for (size_t n = 0; n < 40; n += 7)
		for (int N = 1; N <= 6; N++) {
			size_t next = 0;
			for (int w = 0; w < N; w++) {
				size_t lo, hi;
				st_algo_owner_range(n, w, N, &lo, &hi);
				assert_true(lo == next && hi >= lo && hi - lo <= n / N + 1);
				next = hi;
			}
			assert_true(next == n);
		}
}

/* ---- params ----------------------------------------------------------------- */

static void test_algo_params_tensor_steps_equal_whole_step(void **state)
{
	(void)state;
	const char *opts[] = { "sgd", "adam", "adagrad", "adagrad" };
	for (int o = 0; o < 4; o++) {
		mfix_t f;
		mfix_init(&f, opts[o], o == 3);   /* rowwise AdaGrad: a state per row */
		const size_t np = f.p.nparams, ns = st_algo_dense_state_floats(&f.p);
		assert_int_equal(st_algo_dense_state_offset(&f.p, st_model_ntensors(f.model)), ns);
		float *w1 = malloc(sizeof(float) * np), *w2 = malloc(sizeof(float) * np);
		float *s1 = malloc(sizeof(float) * (ns + 1)), *s2 = malloc(sizeof(float) * (ns + 1));
		float *g = malloc(sizeof(float) * np);
		memcpy(w1, f.p.params, sizeof(float) * np);
		memcpy(w2, f.p.params, sizeof(float) * np);
		st_algo_dense_state_init(&f.p, s1);
		st_algo_dense_state_init(&f.p, s2);
		uint64_t seed = 5;
		for (uint64_t t = 1; t <= 3; t++) {
			for (size_t j = 0; j < np; j++)
				g[j] = rnd(&seed);
			st_algo_dense_update(&f.p, w1, s1, g, t);
			for (int i = st_model_ntensors(f.model) - 1; i >= 0; i--)
				st_algo_dense_update_tensor(&f.p, w2, s2, g, i, t);
		}
		assert_memory_equal(w1, w2, sizeof(float) * np);
		assert_memory_equal(s1, s2, sizeof(float) * ns);
		assert_memory_not_equal(w1, f.p.params, sizeof(float) * np);
		free(w1);
		free(w2);
		free(s1);
		free(s2);
		free(g);
		mfix_fini(&f);
	}
}


/* ---- gba ---------------------------------------------------------------------- */

static void fillv(float *g, int n, float v)
{
	for (int j = 0; j < n; j++)
		g[j] = v;
}

static void test_algo_gba_dense_eq1_and_mean(void **state)
{
	(void)state;
	st_algo_gba_dense_t b;
	assert_int_equal(st_algo_gba_dense_init(&b, 0, 1, 2), ST_EINVAL);
	st_algo_gba_dense_fini(&b);
	assert_int_equal(st_algo_gba_dense_init(&b, 2, 1, 2), ST_OK);
	float g[2];
	uint64_t age;
	int dropped;
	/* Step 0: two fresh gradients, their mean. */
	fillv(g, 2, 2.0f);
	assert_int_equal(st_algo_gba_dense_add(&b, 0, g, &age, &dropped), ST_OK);
	assert_true(age == 0 && !dropped && !st_algo_gba_dense_full(&b));
	fillv(g, 2, 4.0f);
	assert_int_equal(st_algo_gba_dense_add(&b, 0, g, &age, &dropped), ST_OK);
	assert_true(st_algo_gba_dense_full(&b));
	const float *m = st_algo_gba_dense_mean(&b);
	assert_non_null(m);
	assert_true(m[0] == 3.0f && m[1] == 3.0f);
	st_algo_gba_dense_done(&b);
	assert_int_equal(b.k, 1);
	/* A token from the future changes nothing. */
	assert_int_equal(st_algo_gba_dense_add(&b, 2, g, &age, &dropped), ST_EINVAL);
	assert_int_equal(b.count, 0);
	/* Steps 1, 2: a token-0 gradient is 1 then 2 stale (tolerance 1). */
	fillv(g, 2, 8.0f);
	assert_int_equal(st_algo_gba_dense_add(&b, 0, g, &age, &dropped), ST_OK);
	assert_true(age == 1 && !dropped);
	assert_int_equal(st_algo_gba_dense_add(&b, 1, g, &age, &dropped), ST_OK);
	st_algo_gba_dense_mean(&b);
	st_algo_gba_dense_done(&b);
	assert_int_equal(st_algo_gba_dense_add(&b, 0, g, &age, &dropped), ST_OK);
	assert_true(age == 2 && dropped);
	/* Every contribution dropped: the step changes nothing. */
	assert_int_equal(st_algo_gba_dense_add(&b, 0, g, &age, &dropped), ST_OK);
	assert_null(st_algo_gba_dense_mean(&b));
	st_algo_gba_dense_done(&b);
	/* A dropped gradient counts as zero in the mean over the step's 2. */
	assert_int_equal(st_algo_gba_dense_add(&b, 0, g, &age, &dropped), ST_OK);
	assert_true(dropped);
	fillv(g, 2, 6.0f);
	assert_int_equal(st_algo_gba_dense_add(&b, 3, g, &age, &dropped), ST_OK);
	m = st_algo_gba_dense_mean(&b);
	assert_true(m[0] == 3.0f);
	st_algo_gba_dense_fini(&b);
	assert_true(st_algo_gba_keep(7, ST_ALGO_GBA_NO_TOL) && !st_algo_gba_keep(2, 1));
}

/* The core's update callback of the tests: records what it was given. */
typedef struct {
	int n;
	uint64_t key[16];
	float g[16];
} upd_t;

static int upd(void *arg, uint64_t key, uint8_t tab, float *g, uint32_t dim)
{
	upd_t *u = arg;
	assert_int_equal(tab, 3);
	assert_int_equal(dim, 1);
	u->key[u->n] = key;
	u->g[u->n++] = g[0];
	return ST_OK;
}

/* One contribution of the IDs keys[0..n) (gradient v each) at token. */
static int contrib(st_algo_gba_rows_t *r, uint64_t token, const uint64_t *keys, int n, float v)
{
	int kept = 0;
	assert_int_equal(st_algo_gba_rows_begin(r, token, (size_t)n), ST_OK);
	for (int i = 0; i < n; i++)
		kept += st_algo_gba_rows_add(r, token, keys[i], 3, &v, 1);
	(void)st_algo_gba_rows_end(r);
	return kept;
}

static void test_algo_gba_rows_tags_and_averages(void **state)
{
	(void)state;
	st_algo_gba_rows_t r;
	assert_int_equal(st_algo_gba_rows_init(&r, 2, 1, 0, 1), ST_EINVAL);   /* bsp: no iota */
	st_algo_gba_rows_fini(&r);
	assert_int_equal(st_algo_gba_rows_init(&r, 2, 0, 1, 1), ST_OK);
	const uint64_t a[1] = { 11 }, ab[2] = { 11, 22 }, b[1] = { 22 };
	upd_t u = { 0 };
	/* Step 0: 11 touched twice (mean 2), 22 once (4). */
	assert_int_equal(contrib(&r, 0, a, 1, 1.0f), 1);
	assert_int_equal(contrib(&r, 0, ab, 2, 3.0f), 2);
	assert_int_equal(r.count, 2);
	assert_int_equal(st_algo_gba_rows_step(&r, 0, upd, &u), ST_OK);
	assert_int_equal(u.n, 2);
	assert_true(u.key[0] == 11 && u.g[0] == 2.0f && u.key[1] == 22 && u.g[1] == 3.0f);
	/* Step 1, tolerance 0: a token-0 gradient of 11 is 1 stale (tag step 0):
	 * dropped, yet a toucher; 22 untouched by step 1 stays fresh for a
	 * token-1 gradient in step 2. */
	assert_int_equal(st_algo_gba_rows_begin(&r, 2, 1), ST_EINVAL);     /* future */
	assert_int_equal(contrib(&r, 0, a, 1, 5.0f), 0);
	assert_int_equal(contrib(&r, 1, a, 1, 1.0f), 1);
	u.n = 0;
	assert_int_equal(st_algo_gba_rows_step(&r, 0, upd, &u), ST_OK);
	assert_true(u.n == 1 && u.g[0] == 0.5f);
	assert_int_equal(contrib(&r, 1, b, 1, 4.0f), 1);
	u.n = 0;
	assert_int_equal(st_algo_gba_rows_step(&r, 0, upd, &u), ST_OK);   /* a partial step */
	assert_true(u.n == 1 && u.key[0] == 22 && u.g[0] == 4.0f);
	assert_int_equal(r.k, 3);
	st_algo_gba_rows_fini(&r);

	/* BSP: every row over the step's contributions, no staleness check. */
	assert_int_equal(st_algo_gba_rows_init(&r, 3, ST_ALGO_GBA_NO_TOL, 0, 1), ST_OK);
	assert_int_equal(contrib(&r, 0, a, 1, 3.0f), 1);
	assert_int_equal(contrib(&r, 0, a, 0, 3.0f), 0);
	assert_int_equal(contrib(&r, 0, a, 1, 3.0f), 1);
	u.n = 0;
	assert_int_equal(st_algo_gba_rows_step(&r, 0, upd, &u), ST_OK);
	assert_true(u.n == 1 && u.g[0] == 2.0f);
	st_algo_gba_rows_fini(&r);
}

/* Forgetting tags at or below lo changes no decision for tokens >= lo - iota;
 * an older token, which a forgotten tag could have decided, is dropped. */
static void test_algo_gba_forgotten_tags(void **state)
{
	(void)state;
	st_algo_gba_rows_t r;
	assert_int_equal(st_algo_gba_rows_init(&r, 1, 1, 1, 1), ST_OK);
	upd_t u = { 0 };
	/* 600 steps, each touching its own ID and ID 7 (so 7's tag is recent
	 * and the map must grow past its first 1024 slots). */
	for (uint64_t k = 0; k < 600; k++) {
		const uint64_t ids[2] = { 1000 + k, 7 };
		assert_int_equal(contrib(&r, k, ids, 2, 1.0f), 2);
		u.n = 0;
		assert_int_equal(st_algo_gba_rows_step(&r, k > 100 ? k - 100 : 0, upd, &u), ST_OK);
	}
	assert_true(r.forgot >= 400);
	assert_true(r.tn < 600);
	/* Token 599 (fresh), 598 for ID 7 (tag 600: 2 > 1, dropped), an old
	 * token for a forgotten quiet ID: dropped whole (could have been
	 * decided by its tag). */
	const uint64_t quiet[1] = { 1000 }, seven[1] = { 7 };
	assert_int_equal(contrib(&r, 599, seven, 1, 1.0f), 1);
	assert_int_equal(st_algo_gba_rows_step(&r, 0, upd, &u), ST_OK);
	assert_int_equal(contrib(&r, 598, seven, 1, 1.0f), 0);
	assert_int_equal(st_algo_gba_rows_step(&r, 0, upd, &u), ST_OK);
	assert_int_equal(contrib(&r, 5, quiet, 1, 1.0f), 0);
	assert_int_equal(st_algo_gba_rows_step(&r, 0, upd, &u), ST_OK);
	/* A token within lo - iota of the forgotten bound is still decided. */
	const uint64_t lo = r.forgot;
	assert_int_equal(contrib(&r, lo - 1, quiet, 1, 1.0f), 1);
	st_algo_gba_rows_fini(&r);
}

/* ---- gba: one schedule through both transports ----------------------------- */

enum { PW = 3, PNU = 6, PM = 2 };

typedef struct {
	/* threads: ops/sync/gba.c */
	st_model_t *m1;
	st_optim_t sgd;
	char *keys[2];
	double vals[2];
	st_sync_cfg_t cfg;
	st_sync_env_t env;
	const st_sync_ops_t *ops;
	void *pol;
	float row[PNU];
	float *rowp[PNU];
	uint16_t dims[PNU];
	/* ranks: one owner rank's psbuf.c handlers */
	st_model_t *m2;
	st_dist_t d;
	st_table_t *t;
	uint64_t dt;
	float dstate[8];
	uint64_t dtok[PW], rtok[PW];
} par_t;

static st_model_t *lr_model(void)
{
	st_model_cfg_t mc;
	memset(&mc, 0, sizeof mc);
	mc.type = (char *)"lr";
	mc.emb_dim = 1;
	st_model_t *m;
	assert_int_equal(st_model_create(&m, &mc, 2, 1, 1), ST_OK);
	assert_true(st_model_nparams(m) <= 8);
	return m;
}

static void par_init(par_t *f, double tol)
{
	memset(f, 0, sizeof *f);
	st_optim_cfg_t oc;
	opt_cfg(&oc, "sgd", 0.5);
	assert_int_equal(st_optim_init(&f->sgd, &oc), ST_OK);
	f->m1 = lr_model();
	f->m2 = lr_model();
	const size_t np = st_model_nparams(f->m1);
	float *p1 = st_model_params(f->m1), *p2 = st_model_params(f->m2);
	for (size_t j = 0; j < np; j++)
		p1[j] = p2[j] = 0.125f * (float)j - 0.25f;
	/* threads */
	f->keys[0] = (char *)"global_batch";
	f->vals[0] = PM;
	f->keys[1] = (char *)"tolerance";
	f->vals[1] = tol;
	f->cfg = (st_sync_cfg_t){ .name = (char *)"gba", .n_params = 2, .keys = f->keys,
				  .vals = f->vals };
	f->env = (st_sync_env_t){ .n_workers = PW, .cfg = &f->cfg, .model = f->m1, .params = p1,
				  .nparams = np, .dense_opt = &f->sgd, .sparse_opt = &f->sgd,
				  .minibatch = 1 };
	f->ops = st_sync_find("gba");
	assert_non_null(f->ops);
	assert_int_equal(f->ops->create(&f->pol, &f->env), ST_OK);
	/* ranks: rank 0 of 1 owns every row; its table's initial rows are the
	 * threads' rows too */
	st_table_opts_t to = { .dim = 1, .state_dim = 0, .seed = 3, .init_scale = 0.5f };
	assert_int_equal(st_table_create(&f->t, &to), ST_OK);
	st_dist_t *d = &f->d;
	d->P = d->owners = d->n_tables = 1;
	d->tables[0] = f->t;
	d->dim[0] = 1;
	d->p = (st_algo_params_t){ .model = f->m2, .params = p2, .nparams = np,
				   .dense_opt = &f->sgd, .sparse_opt = &f->sgd };
	d->n_workers = PW;
	d->dense_t = &f->dt;
	d->dense_state = f->dstate;
	d->trow = malloc(sizeof(float));
	pthread_mutex_init(&d->mu, NULL);
	pthread_cond_init(&d->cv, NULL);
	for (int u = 0; u < PNU; u++) {
		uint64_t key = (uint64_t)u;
		float *r = NULL;
		assert_true(st_table_resolve(f->t, &key, 1, 0, 1, &r) >= 0);
		assert_non_null(r);
		f->row[u] = r[0];
		f->rowp[u] = &f->row[u];
		f->dims[u] = 1;
	}
}

static void par_fini(par_t *f)
{
	f->ops->destroy(f->pol);
	st__dist_buf_free(&f->d);
	st__dist_row_scratch_free(&f->d);
	free(f->d.trow);
	pthread_cond_destroy(&f->d.cv);
	pthread_mutex_destroy(&f->d.mu);
	st_table_destroy(f->t);
	st_model_destroy(f->m1);
	st_model_destroy(f->m2);
}

static wire_hdr_t buf_hdr(double tol, uint64_t token)
{
	return (wire_hdr_t){ .stamp = PM, .pad = (uint32_t)tol, .step = token,
			     .flags = WF_BUF | WF_PERID };
}

/* Worker w pulls: the threads' begin_step; the ranks' dense fetch and the
 * owner's rows token. */
static void par_begin(par_t *f, int w, double tol)
{
	(void)f->ops->begin_step(f->pol, w, 0);
	wire_hdr_t h = buf_hdr(tol, 0);
	uint64_t age;
	int dropped;
	assert_int_equal(st__dist_buf_dense(&f->d, &h, NULL, &f->dtok[w], &age, &dropped), ST_OK);
	f->rtok[w] = f->d.buf.rows.k;
}

/* Worker w pushes dense gradient dg and row gradients gu (NAN: untouched). */
static void par_push(par_t *f, int w, double tol, const float *dg, const float *gu)
{
	const size_t np = f->env.nparams;
	float dense[8], grad[PNU];
	uint32_t uidx[PNU], nr = 0;
	memcpy(dense, dg, sizeof(float) * np);
	for (int u = 0; u < PNU; u++) {
		grad[u] = gu[u];
		if (!isnan(gu[u]))
			uidx[nr++] = (uint32_t)u;
	}
	st_sync_grads_t g = { .n_examples = 1, .dense = dense, .n_rows = nr, .uidx = uidx,
			      .rows = f->rowp, .row_dim = f->dims, .grad = grad, .gstride = 1 };
	assert_int_equal(f->ops->apply(f->pol, w, &g), ST_OK);
	/* ranks: the rows to their owner, then the dense gradient to rank 0 */
	size_t len = sizeof(wire_hdr_t) + 8 * (size_t)nr + wire_pad8(nr) + sizeof(float) * nr;
	uint8_t *m = calloc(1, len);
	wire_hdr_t *h = (wire_hdr_t *)m;
	*h = buf_hdr(tol, f->rtok[w]);
	h->type = MSG_PUSH;
	h->n = nr;
	uint64_t *keys = (uint64_t *)(h + 1);
	float *rg = (float *)(m + sizeof *h + 8 * (size_t)nr + wire_pad8(nr));
	for (uint32_t i = 0; i < nr; i++) {
		keys[i] = uidx[i];
		rg[i] = gu[uidx[i]];
	}
	assert_int_equal(st__dist_handle(&f->d, m, len, 0), ST_OK);
	wire_hdr_t dh = buf_hdr(tol, f->dtok[w]);
	uint64_t age;
	int dropped;
	assert_int_equal(st__dist_buf_dense(&f->d, &dh, dense, &f->dtok[w], &age, &dropped),
			 ST_OK);
	f->rtok[w] = f->d.buf.rows.k;   /* Alg. 1: send, then pull the next */
}

static void gba_parity(double tol)
{
	par_t f;
	par_init(&f, tol);
	const size_t np = f.env.nparams;
	uint64_t seed = 99 + (uint64_t)tol;
	int busy[PW] = { 0 };
	/* Worker 0 straggles: it pushes once per 7 events, so its tokens age
	 * several global steps and tolerance matters. */
	for (int ev = 0; ev < 400; ev++) {
		int w = ev % 7 == 0 ? 0 : 1 + (int)((seed >> 33) % 2);
		seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
		if (!busy[w]) {
			par_begin(&f, w, tol);
			busy[w] = 1;
			continue;
		}
		float dg[8], gu[PNU];
		for (size_t j = 0; j < np; j++)
			dg[j] = rnd(&seed);
		for (int u = 0; u < PNU; u++)
			gu[u] = rnd(&seed) > 0.2f ? NAN : rnd(&seed);
		par_push(&f, w, tol, dg, gu);
		busy[w] = 0;
	}
	/* The end: the threads flush when every worker ends the batch, rank 0
	 * asks the owners to. */
	for (int w = 0; w < PW; w++)
		f.ops->end_batch(f.pol, w);
	assert_int_equal(st__dist_buf_flush(&f.d), ST_OK);
	assert_memory_equal(f.env.params, f.d.p.params, sizeof(float) * np);
	for (int u = 0; u < PNU; u++) {
		uint64_t key = (uint64_t)u;
		float *r = NULL;
		assert_true(st_table_resolve(f.t, &key, 1, 0, 0, &r) >= 0);
		if (memcmp(r, &f.row[u], sizeof(float)))
			fail_msg("tol %g: row %d is %a in threads, %a in ranks", tol, u,
				 (double)f.row[u], (double)r[0]);
	}
	st_sync_stats_t st;
	f.ops->report(f.pol, &st);
	assert_int_equal(st.steps, f.d.buf.dense.k);
	assert_int_equal(f.d.buf.rows.k, f.d.buf.dense.k);
	if (tol == 0)
		assert_true(st.dropped > 0 && f.d.st.buf_rows_dropped > 0);
	par_fini(&f);
}

static void test_algo_gba_threads_and_ranks_agree(void **state)
{
	(void)state;
	gba_parity(0);
	gba_parity(1);
	gba_parity(3);
}

/* ---- hop ------------------------------------------------------------------------ */

static void test_algo_hopclock_rule(void **state)
{
	(void)state;
	st_algo_hopclock_t c;
	assert_int_equal(st_algo_hopclock_init(&c, 3, 1), ST_OK);
	/* Nobody active: everybody may go; unit 0 alone never waits. */
	assert_true(st_algo_hopclock_slowest(&c) == UINT64_MAX);
	st_algo_hopclock_join(&c, 0);
	for (int i = 0; i < 3; i++) {
		st_algo_hopclock_tick(&c, 0);
		assert_true(st_algo_hopclock_ready(&c, 0));
	}
	/* Unit 1 joins at the slowest active clock (3), not 0. */
	st_algo_hopclock_join(&c, 1);
	assert_int_equal(c.clock[1], 3);
	st_algo_hopclock_tick(&c, 0);
	assert_true(st_algo_hopclock_ready(&c, 0));            /* 4 vs 3 */
	st_algo_hopclock_tick(&c, 0);
	assert_false(st_algo_hopclock_ready(&c, 0));           /* 5 vs 3 */
	assert_true(st_algo_hopclock_ready(&c, 1));            /* the slowest */
	/* An idle unit holds nobody back; back, it rejoins at the slowest. */
	st_algo_hopclock_idle(&c, 1);
	assert_true(st_algo_hopclock_ready(&c, 0));
	st_algo_hopclock_join(&c, 1);
	assert_int_equal(c.clock[1], 5);
	/* A unit that idled ahead keeps its clock. */
	st_algo_hopclock_tick(&c, 1);
	st_algo_hopclock_idle(&c, 1);
	st_algo_hopclock_join(&c, 1);
	assert_int_equal(c.clock[1], 6);
	/* A common start: every unit active at 0. */
	st_algo_hopclock_reset(&c, 1);
	assert_true(st_algo_hopclock_slowest(&c) == 0);
	st_algo_hopclock_tick(&c, 2);
	st_algo_hopclock_tick(&c, 2);
	assert_false(st_algo_hopclock_ready(&c, 2));           /* unit 0 not started */
	st_algo_hopclock_reset(&c, 0);
	assert_true(st_algo_hopclock_slowest(&c) == UINT64_MAX);
	st_algo_hopclock_fini(&c);
	st_algo_hopclock_fini(&c);                             /* safe twice */
}

static void test_algo_hopbw_quorum(void **state)
{
	(void)state;
	st_algo_hopbw_t q = { .b = 1 };
	assert_int_equal(st_algo_hopbw_quorum(&q, 3), 2);
	assert_int_equal(st_algo_hopbw_quorum(&q, 2), 1);
	assert_int_equal(st_algo_hopbw_quorum(&q, 0), 1);
	assert_false(st_algo_hopbw_closes(&q, 3));             /* nothing arrived */
	assert_int_equal(st_algo_hopbw_arrive(&q, 1, 1), ST_EINVAL);
	assert_int_equal(st_algo_hopbw_arrive(&q, 0, 1), ST_ALGO_BW_KEPT);
	assert_false(st_algo_hopbw_closes(&q, 3));
	assert_int_equal(st_algo_hopbw_arrive(&q, 0, 1), ST_ALGO_BW_KEPT);
	assert_true(st_algo_hopbw_closes(&q, 3));
	assert_int_equal(st_algo_hopbw_close(&q), 2);
	assert_int_equal(st_algo_hopbw_arrive(&q, 0, 1), ST_ALGO_BW_LATE);   /* the third */
	/* Empty minibatches count as arrivals, not toward the quorum: a step
	 * of 3 with one gradient closes when all have arrived. */
	assert_int_equal(st_algo_hopbw_arrive(&q, 1, 0), ST_ALGO_BW_EMPTY);
	assert_int_equal(st_algo_hopbw_arrive(&q, 1, 1), ST_ALGO_BW_KEPT);
	assert_false(st_algo_hopbw_closes(&q, 3));
	assert_int_equal(st_algo_hopbw_arrive(&q, 1, 0), ST_ALGO_BW_EMPTY);
	assert_true(st_algo_hopbw_closes(&q, 3));
	assert_int_equal(st_algo_hopbw_close(&q), 1);
	/* Fewer active units: a smaller quorum. */
	assert_int_equal(st_algo_hopbw_arrive(&q, 2, 1), ST_ALGO_BW_KEPT);
	assert_true(st_algo_hopbw_closes(&q, 2));
	assert_int_equal(q.k, 2);
}

/* A deadline for the threaded parity tests: a hang becomes a failure. */
static void deadline(const struct timespec *t0, const char *what)
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	if (now.tv_sec - t0->tv_sec > 60)
		fail_msg("stuck for 60 s waiting for %s", what);
}

static void swait(sem_t *s, const char *what)
{
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (sem_trywait(s) != 0) {
		deadline(&t0, what);
		sched_yield();
	}
}

/* A policy of ops/sync on a tiny lr model with SGD, driven by hand. */
typedef struct {
	st_model_t *model;
	st_optim_t sgd;
	char *keys[1];
	double vals[1];
	st_sync_cfg_t cfg;
	st_sync_env_t env;
	const st_sync_ops_t *ops;
	void *pol;
} tpol_t;

static void tpol_init(tpol_t *t, const char *name, double b, int n_workers)
{
	memset(t, 0, sizeof *t);
	t->model = lr_model();
	st_optim_cfg_t oc;
	opt_cfg(&oc, "sgd", 0.5);
	assert_int_equal(st_optim_init(&t->sgd, &oc), ST_OK);
	t->keys[0] = (char *)"b";
	t->vals[0] = b;
	t->cfg = (st_sync_cfg_t){ .name = (char *)name, .n_params = 1, .keys = t->keys,
				  .vals = t->vals };
	float *p = st_model_params(t->model);
	for (size_t j = 0; j < st_model_nparams(t->model); j++)
		p[j] = 0.1f * (float)j;
	t->env = (st_sync_env_t){ .n_workers = n_workers, .cfg = &t->cfg, .model = t->model,
				  .params = p, .nparams = st_model_nparams(t->model),
				  .dense_opt = &t->sgd, .sparse_opt = &t->sgd };
	t->ops = st_sync_find(name);
	assert_non_null(t->ops);
	assert_int_equal(t->ops->create(&t->pol, &t->env), ST_OK);
	assert_int_equal(t->ops->begin_batch(t->pol, 1), ST_OK);
}

static void tpol_fini(tpol_t *t)
{
	t->ops->destroy(t->pol);
	st_model_destroy(t->model);
}

/* Rank 0's store without a network, for hop.c's handlers. */
static void rank0_init(st_dist_t *d, int P, int n_workers, st_model_t *m, uint64_t *dt,
		       float *dstate, const st_optim_t *opt)
{
	memset(d, 0, sizeof *d);
	d->P = d->owners = P;
	d->n_workers = n_workers;
	d->p = (st_algo_params_t){ .model = m, .params = st_model_params(m),
				   .nparams = st_model_nparams(m), .dense_opt = opt,
				   .sparse_opt = opt };
	d->dense_t = dt;
	d->dense_state = dstate;
	pthread_mutex_init(&d->mu, NULL);
	pthread_cond_init(&d->cv, NULL);
}

static void rank0_fini(st_dist_t *d)
{
	st__dist_hop_free(d);
	pthread_cond_destroy(&d->cv);
	pthread_mutex_destroy(&d->mu);
}

enum { HN = 4, HB = 1, HEVENTS = 150 };

/* A hop_bs worker thread: begin_step (posts begun), then per `go` either
 * an apply and the next begin_step, or (idle set) end_batch. */
typedef struct {
	tpol_t *t;
	int w;
	int idle;               /* set by the script before the last go */
	sem_t go, begun;
	float dense[8];
	st_sync_grads_t g;
} hw_t;

int st__hop_bs_waiting(void *self);

static void *hop_worker(void *arg)
{
	hw_t *x = arg;
	uint64_t step = 0;
	(void)x->t->ops->begin_step(x->t->pol, x->w, step);
	sem_post(&x->begun);
	for (;;) {
		while (sem_wait(&x->go) != 0)
			;
		if (__atomic_load_n(&x->idle, __ATOMIC_ACQUIRE)) {
			x->t->ops->end_batch(x->t->pol, x->w);
			return NULL;
		}
		assert_int_equal(x->t->ops->apply(x->t->pol, x->w, &x->g), ST_OK);
		(void)x->t->ops->begin_step(x->t->pol, x->w, ++step);
		sem_post(&x->begun);
	}
}

static void test_algo_hop_bs_threads_and_ranks_agree(void **state)
{
	(void)state;
	tpol_t t;
	tpol_init(&t, "hop_bs", HB, HN);
	st_dist_t d;
	uint64_t dt = 0;
	rank0_init(&d, 1, HN, t.model, &dt, NULL, &t.sgd);
	hw_t x[HN];
	pthread_t tid[HN];
	int pending[HN] = { 0 }, idle[HN] = { 0 };
	for (int w = 0; w < HN; w++) {
		memset(&x[w], 0, sizeof x[w]);
		x[w].t = &t;
		x[w].w = w;
		x[w].g = (st_sync_grads_t){ .n_examples = 1, .dense = x[w].dense, .gstride = 1 };
		sem_init(&x[w].go, 0, 0);
		sem_init(&x[w].begun, 0, 0);
		/* ranks: every worker fetches its first parameters (joins) */
		wire_hdr_t h = { .type = MSG_DENSE, .stamp = HB, .flags = WF_HOP,
				 .worker = (uint32_t)w };
		assert_int_equal(st__dist_hop_step(&d, &h, 0, 0), ST_OK);
		assert_int_equal(pthread_create(&tid[w], NULL, hop_worker, &x[w]), 0);
		swait(&x[w].begun, "a worker's first step");
	}
	uint64_t seed = 4242;
	int n_idle = 0, blocked_seen = 0;
	for (int ev = 0; ev < HEVENTS && n_idle < HN; ev++) {
		/* A worker that may go on (the ranks' rule; the threads' worker
		 * has returned from begin_step), skewed towards workers 0 and 1
		 * so the others fall behind. */
		int w;
		do {
			seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
			w = (int)((seed >> 33) % 7);
			w = w < 4 ? w % 2 : w - 3;
		} while (w >= HN || idle[w] || pending[w]);
		const int go_idle = ev > HEVENTS / 2 && (seed >> 20) % 9 == 0;
		if (go_idle) {
			__atomic_store_n(&x[w].idle, 1, __ATOMIC_RELEASE);
			idle[w] = 1;
			n_idle++;
			assert_int_equal(st__dist_hop_idle(&d, 0, (uint32_t)w), ST_OK);
		} else {
			wire_hdr_t h = { .type = MSG_DENSE, .stamp = HB, .flags = WF_HOP | 1,
					 .worker = (uint32_t)w };
			assert_int_equal(st__dist_hop_step(&d, &h, 0, 1), ST_OK);
			pending[w] = 1;
		}
		sem_post(&x[w].go);
		/* Every worker the ranks let go on returns from begin_step; the
		 * others stay blocked there. */
		int blocked = 0;
		for (int v = 0; v < HN; v++) {
			if (!pending[v])
				continue;
			if (st__dist_hop_ready(&d, 0, (uint32_t)v)) {
				swait(&x[v].begun, "a worker the ranks released");
				pending[v] = 0;
			} else {
				blocked++;
			}
		}
		struct timespec t0;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		while (st__hop_bs_waiting(t.pol) != blocked) {
			deadline(&t0, "the workers the ranks hold to block");
			sched_yield();
		}
		for (int v = 0; v < HN; v++)
			if (pending[v] && sem_trywait(&x[v].begun) == 0)
				fail_msg("event %d: worker %d went on; the ranks hold it", ev, v);
		blocked_seen += blocked > 0;
	}
	assert_true(blocked_seen > 10);   /* the schedule did exercise the bound */
	/* The end: the workers end their batch, each one that may go on in
	 * turn (the slowest active one always may), releasing others. */
	while (n_idle < HN) {
		int w = 0;
		while (idle[w] || pending[w])
			if (++w == HN)
				fail_msg("every worker left is held");
		__atomic_store_n(&x[w].idle, 1, __ATOMIC_RELEASE);
		sem_post(&x[w].go);
		idle[w] = 1;
		n_idle++;
		assert_int_equal(st__dist_hop_idle(&d, 0, (uint32_t)w), ST_OK);
		for (int v = 0; v < HN; v++)
			if (pending[v] && st__dist_hop_ready(&d, 0, (uint32_t)v)) {
				swait(&x[v].begun, "a worker released by an idle one");
				pending[v] = 0;
			}
	}
	for (int w = 0; w < HN; w++) {
		assert_int_equal(pthread_join(tid[w], NULL), 0);
		sem_destroy(&x[w].go);
		sem_destroy(&x[w].begun);
	}
	rank0_fini(&d);
	tpol_fini(&t);
}

enum { BN = 3, BSTEPS = 4 };

/* A hop_bw worker thread (LOCKSTEP): per step, begin_step (posts read),
 * then per `go` its apply (posts done when apply returns). */
typedef struct {
	tpol_t *t;
	int w;
	sem_t go, read, done;
	float dense[BSTEPS][8];
	st_sync_grads_t g[BSTEPS];
} bww_t;

static void *bw_worker(void *arg)
{
	bww_t *x = arg;
	for (int s = 0; s < BSTEPS; s++) {
		(void)x->t->ops->begin_step(x->t->pol, x->w, (uint64_t)s);
		sem_post(&x->read);
		while (sem_wait(&x->go) != 0)
			;
		assert_int_equal(x->t->ops->apply(x->t->pol, x->w, &x->g[s]), ST_OK);
		sem_post(&x->done);
	}
	x->t->ops->end_batch(x->t->pol, x->w);
	return NULL;
}

static int bw_replies;
static int bw_reply(st_dist_t *d, int to, uint32_t w, uint64_t req)
{
	(void)d;
	(void)to;
	(void)w;
	(void)req;
	bw_replies++;
	return ST_OK;
}

/* Each step's late worker: a straggler, then the others in turn. */
static int bw_late(int s)
{
	static const int late[BSTEPS] = { 2, 2, 0, 1 };
	return late[s];
}

static void test_algo_hop_bw_threads_and_ranks_agree(void **state)
{
	(void)state;
	tpol_t t;
	tpol_init(&t, "hop_bw", 1, BN);
	st_model_t *m2 = lr_model();
	const size_t np = st_model_nparams(m2);
	for (size_t j = 0; j < np; j++)
		st_model_params(m2)[j] = 0.1f * (float)j;
	st_dist_t d;
	uint64_t dt = 0;
	float dstate[8] = { 0 };
	rank0_init(&d, BN, 1, m2, &dt, dstate, &t.sgd);
	/* Gradient of unit w in step s: G; the threads get G / N, as the
	 * trainer scales a lockstep step's gradients (hop_bw.c). */
	bww_t x[BN];
	pthread_t tid[BN];
	uint64_t seed = 7;
	float G[BN][BSTEPS][8];
	for (int w = 0; w < BN; w++) {
		memset(&x[w], 0, sizeof x[w]);
		x[w].t = &t;
		x[w].w = w;
		for (int s = 0; s < BSTEPS; s++) {
			for (size_t j = 0; j < np; j++) {
				G[w][s][j] = rnd(&seed);
				x[w].dense[s][j] = G[w][s][j] / (float)BN;
			}
			x[w].g[s] = (st_sync_grads_t){ .n_examples = 1, .dense = x[w].dense[s],
						       .gstride = 1 };
		}
		sem_init(&x[w].go, 0, 0);
		sem_init(&x[w].read, 0, 0);
		sem_init(&x[w].done, 0, 0);
		/* ranks: every rank joins rank 0's steps (dbw_create's fetch) */
		wire_hdr_t h = { .type = MSG_DENSE, .stamp = 1, .flags = WF_BW };
		int late;
		assert_int_equal(st__dist_bw_contrib(&d, &h, NULL, w, &late), ST_OK);
		assert_int_equal(late, 1);
	}
	for (int w = 0; w < BN; w++)
		assert_int_equal(pthread_create(&tid[w], NULL, bw_worker, &x[w]), 0);
	uint64_t tok[BN] = { 0 };
	int dropped = 0;
	for (int s = 0; s < BSTEPS; s++) {
		const int L = bw_late(s);
		for (int w = 0; w < BN; w++)
			swait(&x[w].read, "a worker reading its step's parameters");
		/* threads: the quorum first, then the late worker */
		for (int w = 0; w < BN; w++)
			if (w != L)
				sem_post(&x[w].go);
		for (int w = 0; w < BN; w++)
			if (w != L)
				swait(&x[w].done, "the quorum's step closing");
		sem_post(&x[L].go);
		swait(&x[L].done, "the late worker returning");
		/* ranks: the same order */
		bw_replies = 0;
		for (int w = 0; w < BN; w++) {
			if (w == L)
				continue;
			wire_hdr_t h = { .type = MSG_DENSE, .stamp = 1, .flags = WF_BW | 1,
					 .step = tok[w] };
			int late;
			assert_int_equal(st__dist_bw_contrib(&d, &h, G[w][s], w, &late), ST_OK);
			assert_int_equal(late, 0);
			assert_int_equal(st__dist_hop_hold(&d, w, 0, 1), ST_OK);
			assert_int_equal(st__dist_bw_close(&d, bw_reply), ST_OK);
		}
		assert_int_equal(bw_replies, BN - 1);
		for (int w = 0; w < BN; w++)
			tok[w] = d.hop.q.k;
		wire_hdr_t h = { .type = MSG_DENSE, .stamp = 1, .flags = WF_BW | 1, .step = s };
		int late;
		assert_int_equal(st__dist_bw_contrib(&d, &h, G[L][s], L, &late), ST_OK);
		assert_int_equal(late, 1);
		dropped++;
		/* The same parameters after every step, within float rounding of
		 * the threads' 1/N scale and (N - e)/K factor: 1e-6. */
		for (size_t j = 0; j < np; j++)
			assert_float_equal(t.env.params[j], d.p.params[j], 1e-6);
	}
	for (int w = 0; w < BN; w++) {
		assert_int_equal(pthread_join(tid[w], NULL), 0);
		sem_destroy(&x[w].go);
		sem_destroy(&x[w].read);
		sem_destroy(&x[w].done);
	}
	st_sync_stats_t st;
	t.ops->report(t.pol, &st);
	assert_int_equal(st.steps, d.hop.q.k);
	assert_int_equal(st.dropped, (uint64_t)dropped);
	assert_int_equal(st.updates, (uint64_t)(BSTEPS * (BN - 1)));
	assert_int_equal(dt, BSTEPS);
	rank0_fini(&d);
	st_model_destroy(m2);
	tpol_fini(&t);
}

/* ---- blend ------------------------------------------------------------------------ */

static void test_algo_blend_formulas(void **state)
{
	(void)state;
	float ps[2] = { 1.0f, 2.0f }, x[2] = { 3.0f, -2.0f };
	st_algo_blend_ps(ps, x, 2, 0.25f);                 /* 0.75 ps + 0.25 x */
	assert_true(ps[0] == 1.5f && ps[1] == 1.0f);
	st_algo_blend_toward(x, ps, 1.0f, 2, 0.25f);       /* 0.75 x + 0.25 ps */
	assert_true(x[0] == 2.625f && x[1] == -1.25f);
	float c[2] = { 4.0f, 8.0f }, g[2] = { 0.0f, 2.0f };
	st_algo_blend_bmuf_step(g, c, 0.5f, 2, 0.5f);     /* g + 0.5 (c/2 - g) */
	assert_true(g[0] == 1.0f && g[1] == 3.0f);
	float r0[2] = { 1.0f, 2.0f }, r1[2] = { 3.0f, 6.0f }, *reps[2] = { r0, r1 }, m[2];
	st_algo_blend_mean(m, reps, 2, 2);
	assert_true(m[0] == 2.0f && m[1] == 4.0f);
	/* alpha = 1 copies: the replica becomes c. */
	st_algo_blend_toward(r0, c, 1.0f, 2, 1.0f);
	assert_memory_equal(r0, c, sizeof c);
}

extern void (*st__sync_shadow_hook)(void *arg, uint64_t round);
extern void *st__sync_shadow_hook_arg;
uint64_t st__sync_shadow_gap(void *self, uint64_t *syncs, uint64_t *gap_sum);
void st__sync_shadow_replica(void *self, int w, float *out);

static sem_t sh_held, sh_release;
static uint64_t sh_hold_at;   /* atomic */

static void sh_hook(void *arg, uint64_t round)
{
	(void)arg;
	if (round == __atomic_load_n(&sh_hold_at, __ATOMIC_ACQUIRE)) {
		sem_post(&sh_held);
		while (sem_wait(&sh_release) != 0)
			;
	}
}

enum { SN = 3 };

static void shadow_round_parity(const char *algo)
{
	tpol_t t;
	memset(&t, 0, sizeof t);
	t.model = lr_model();
	st_optim_cfg_t oc;
	opt_cfg(&oc, "sgd", 0.5);
	assert_int_equal(st_optim_init(&t.sgd, &oc), ST_OK);
	char *keys[3] = { (char *)"algo", (char *)"alpha", (char *)"eta" };
	double vals[3] = { 0, 0.375, 0.75 };
	char *strs[3] = { (char *)algo, NULL, NULL };
	t.cfg = (st_sync_cfg_t){ .name = (char *)"shadow", .n_params = 3, .keys = keys,
				 .vals = vals, .strs = strs };
	const size_t np = st_model_nparams(t.model);
	float *p = st_model_params(t.model), w0[8];
	for (size_t j = 0; j < np; j++)
		p[j] = w0[j] = 0.1f * (float)j - 0.2f;
	t.env = (st_sync_env_t){ .n_workers = SN, .cfg = &t.cfg, .model = t.model, .params = p,
				 .nparams = np, .dense_opt = &t.sgd, .sparse_opt = &t.sgd };
	t.ops = st_sync_find("shadow");
	sem_init(&sh_held, 0, 0);
	sem_init(&sh_release, 0, 0);
	__atomic_store_n(&sh_hold_at, 0, __ATOMIC_RELEASE);
	st__sync_shadow_hook = sh_hook;
	assert_int_equal(t.ops->create(&t.pol, &t.env), ST_OK);
	/* Every worker trains its replica a few steps apart; the shadow thread
	 * waits at round 0 meanwhile. */
	uint64_t seed = 31;
	for (int w = 0; w < SN; w++)
		for (int k = 0; k <= w; k++) {
			float g[8];
			for (size_t j = 0; j < np; j++)
				g[j] = rnd(&seed);
			(void)t.ops->begin_step(t.pol, w, (uint64_t)k);
			st_sync_grads_t gr = { .n_examples = 1, .dense = g, .gstride = 1 };
			assert_int_equal(t.ops->apply(t.pol, w, &gr), ST_OK);
		}
	swait(&sh_held, "the shadow thread at round 0");
	float rep[SN][8];
	for (int w = 0; w < SN; w++)
		st__sync_shadow_replica(t.pol, w, rep[w]);
	/* threads: round 0 runs; round 1 (if kicked) is held before it syncs */
	__atomic_store_n(&sh_hold_at, 1, __ATOMIC_RELEASE);
	sem_post(&sh_release);
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (st__sync_shadow_gap(t.pol, NULL, NULL) < 1) {
		deadline(&t0, "the shadow thread's round 0");
		sched_yield();
	}
	/* ranks: the same replicas, one round as dist_shadow.c makes it */
	const float a = 0.375f, inv = 1.0f / (float)SN;
	if (!strcmp(algo, "easgd")) {
		float ps[8];
		memcpy(ps, w0, sizeof ps);                      /* Algorithm 1 line 3 */
		for (int r = 0; r < SN; r++) {                  /* requests in rank order */
			st_algo_blend_ps(ps, rep[r], np, a);
			st_algo_blend_toward(rep[r], ps, 1.0f, np, a);
		}
	} else {
		float sum[8];                                   /* the allreduce: rank order */
		memcpy(sum, rep[0], sizeof sum);
		for (int r = 1; r < SN; r++)
			for (size_t j = 0; j < np; j++)
				sum[j] += rep[r][j];
		float glob[8];
		memcpy(glob, w0, sizeof glob);                  /* Algorithm 4 line 2 */
		if (!strcmp(algo, "bmuf"))
			st_algo_blend_bmuf_step(glob, sum, inv, np, 0.75f);
		for (int r = 0; r < SN; r++) {
			if (!strcmp(algo, "bmuf"))
				st_algo_blend_toward(rep[r], glob, 1.0f, np, a);
			else
				st_algo_blend_toward(rep[r], sum, inv, np, a);
		}
	}
	for (int w = 0; w < SN; w++) {
		float now[8];
		st__sync_shadow_replica(t.pol, w, now);
		if (memcmp(now, rep[w], sizeof(float) * np))
			fail_msg("%s: replica %d after one round differs between the transports",
				 algo, w);
	}
	/* Let the thread go for good, then end. */
	__atomic_store_n(&sh_hold_at, UINT64_MAX, __ATOMIC_RELEASE);
	sem_post(&sh_release);
	t.ops->destroy(t.pol);
	st__sync_shadow_hook = NULL;
	sem_destroy(&sh_held);
	sem_destroy(&sh_release);
	st_model_destroy(t.model);
}

static void test_algo_shadow_threads_and_ranks_agree(void **state)
{
	(void)state;
	shadow_round_parity("easgd");
	shadow_round_parity("ma");
	shadow_round_parity("bmuf");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_algo_owner_keys_spread_and_stay),
		cmocka_unit_test(test_algo_owner_tensors_largest_first),
		cmocka_unit_test(test_algo_owner_ranges_cover_in_order),
		cmocka_unit_test(test_algo_params_tensor_steps_equal_whole_step),
		cmocka_unit_test(test_algo_gba_dense_eq1_and_mean),
		cmocka_unit_test(test_algo_gba_rows_tags_and_averages),
		cmocka_unit_test(test_algo_gba_forgotten_tags),
		cmocka_unit_test(test_algo_gba_threads_and_ranks_agree),
		cmocka_unit_test(test_algo_hopclock_rule),
		cmocka_unit_test(test_algo_hopbw_quorum),
		cmocka_unit_test(test_algo_hop_bs_threads_and_ranks_agree),
		cmocka_unit_test(test_algo_hop_bw_threads_and_ranks_agree),
		cmocka_unit_test(test_algo_blend_formulas),
		cmocka_unit_test(test_algo_shadow_threads_and_ranks_agree),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
