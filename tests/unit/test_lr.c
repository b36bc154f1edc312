/* test_lr.c — logistic regression ops: learning, determinism, dedup, eval. */
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
#include "ops/train/lr.h"
#include "runtime/err.h"
#include "runtime/graph.h"
#include "runtime/metrics.h"

#define BATCH 8192

static st_gen_t *gen;

static int setup(void **state)
{
	(void)state;
	st_gen_opts_t o = { .rows = 1, .files = 1, .seed = 1, .zipf = 1.1,
			    .vocab = 1000000 };
	return st_gen_create(&gen, &o) == ST_OK ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	st_gen_destroy(gen);
	return 0;
}

static void make_job(st_job_t *j)
{
	memset(j, 0, sizeof *j);
	j->seed = 1;
	j->minibatch = 256;
	j->train.n_dense = ST_GEN_N_DENSE;
	j->model.lr = 0.05;
	j->model.lr_dense = 0.01;
	j->model.l2 = 0.0;
	j->model.init_accum = 1.0;
	j->model.optimizer = (char *)"adagrad";
	j->model.dense_transform = (char *)"log1p";
}

static st_batch_t *gen_batch(uint64_t first, uint32_t n, int eval)
{
	st_batch_t *b;
	assert_int_equal(st_batch_create(&b, n, ST_GEN_N_DENSE, ST_GEN_N_CAT, n * 20), ST_OK);
	assert_int_equal(st_gen_fill_batch(gen, first, b, n), ST_OK);
	b->eval = eval;
	b->seq = first / n;
	return b;
}

/* Runs one batch through pull -> train -> push -> dump on thread idx.
 * If preds is given, the batch's predictions are copied there. */
static void run_batch(st_lr_t *m, st_batch_t *b, int idx, float *preds)
{
	st_stage_ctx_t ctx = { .stage = "test", .thread_idx = idx, .n_threads = 1 };
	st_batch_t *out;
	assert_int_equal(st_lr_pull_ops.process(m, &ctx, b, &out), ST_OK);
	assert_ptr_equal(out, b);
	assert_int_equal(st_lr_train_ops.process(m, &ctx, b, &out), ST_OK);
	assert_ptr_equal(out, b);
	if (preds)
		memcpy(preds, b->pred, sizeof(float) * b->n);
	assert_int_equal(st_lr_push_ops.process(m, &ctx, b, &out), ST_OK);
	assert_ptr_equal(out, b);
	assert_int_equal(st_lr_dump_ops.process(m, &ctx, b, &out), ST_OK);
	assert_null(out);
}

static void test_lr_learns_generated_data(void **state)
{
	(void)state;
	st_job_t job;
	make_job(&job);
	st_lr_t *m;
	assert_int_equal(st_lr_create(&m, &job, NULL), ST_OK);
	const uint64_t rows = 38 * BATCH;   /* ~311k */
	for (uint64_t r = 0; r < rows; r += BATCH)
		run_batch(m, gen_batch(r, BATCH, 0), 0, NULL);
	double auc, loss;
	uint64_t n;
	st_lr_progress(m, &auc, &loss, &n);
	print_message("progressive auc %.4f logloss %.4f over %llu\n", auc, loss,
		      (unsigned long long)n);
	assert_int_equal(n, rows);
	assert_true(auc > 0.70);
	assert_true(loss < 0.56);   /* the constant 0.25 predictor scores 0.562 */

	st_lr_reset_eval(m);
	uint64_t size = st_table_size(st_lr_table(m));
	for (uint64_t r = 0; r < 5 * BATCH; r += BATCH)
		run_batch(m, gen_batch(ST_GEN_EVAL_BASE + r, BATCH, 1), 0, NULL);
	assert_int_equal(st_table_size(st_lr_table(m)), size);
	double eauc, ell, cal;
	uint64_t en;
	assert_int_equal(st_lr_eval_result(m, &eauc, &ell, &cal, &en), ST_OK);
	print_message("eval auc %.4f logloss %.4f calibration %.3f over %llu\n", eauc, ell,
		      cal, (unsigned long long)en);
	assert_int_equal(en, 5 * BATCH);
	assert_true(eauc >= 0.70);
	assert_true(cal > 0.8 && cal < 1.25);
	/* Eval did not feed the progressive metrics. */
	st_lr_progress(m, NULL, NULL, &n);
	assert_int_equal(n, rows);
	st_lr_destroy(m);
}

static void test_lr_single_worker_deterministic(void **state)
{
	(void)state;
	enum { NB = 8, N = 4096 };
	float *p[2];
	for (int run = 0; run < 2; run++) {
		st_job_t job;
		make_job(&job);
		job.model.l2 = 1e-4;   /* exercise every term of the update */
		st_lr_t *m;
		assert_int_equal(st_lr_create(&m, &job, NULL), ST_OK);
		p[run] = malloc(sizeof(float) * (NB + 1) * N);
		for (int i = 0; i < NB; i++)
			run_batch(m, gen_batch((uint64_t)i * N, N, 0), 0, p[run] + i * N);
		run_batch(m, gen_batch(ST_GEN_EVAL_BASE, N, 1), 0, p[run] + NB * N);
		st_lr_destroy(m);
	}
	assert_memory_equal(p[0], p[1], sizeof(float) * (NB + 1) * N);
	/* Later batches were predicted by a model that learned. */
	int moved = 0;
	for (int i = 0; i < N; i++)
		moved += p[0][(NB - 1) * N + i] != p[0][i];
	assert_true(moved > N / 2);
	free(p[0]);
	free(p[1]);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

static void test_lr_pull_dedups_keys(void **state)
{
	(void)state;
	st_job_t job;
	make_job(&job);
	st_lr_t *m;
	assert_int_equal(st_lr_create(&m, &job, NULL), ST_OK);
	st_batch_t *b = gen_batch(1000, 5000, 0);
	uint32_t nk = st_batch_nkeys(b);
	uint64_t *sorted = malloc(sizeof(uint64_t) * nk);
	memcpy(sorted, b->keys, sizeof(uint64_t) * nk);
	qsort(sorted, nk, sizeof *sorted, cmp_u64);
	uint32_t distinct = 0;
	for (uint32_t i = 0; i < nk; i++)
		distinct += i == 0 || sorted[i] != sorted[i - 1];
	st_stage_ctx_t ctx = { .stage = "pull", .thread_idx = 3, .n_threads = 4 };
	st_batch_t *out;
	assert_int_equal(st_lr_pull_ops.process(m, &ctx, b, &out), ST_OK);
	assert_int_equal(b->n_uniq, distinct);
	assert_true(distinct < nk);   /* Zipf data repeats keys */
	float **rows = b->rows;
	for (uint32_t k = 0; k < nk; k++) {
		assert_true(b->key_idx[k] < b->n_uniq);
		assert_int_equal(b->uniq[b->key_idx[k]], b->keys[k]);
		assert_ptr_equal(rows[b->key_idx[k]], st_table_find(st_lr_table(m), b->keys[k]));
	}
	/* uniq holds no duplicates. */
	qsort(b->uniq, b->n_uniq, sizeof(uint64_t), cmp_u64);
	for (uint32_t u = 1; u < b->n_uniq; u++)
		assert_true(b->uniq[u] != b->uniq[u - 1]);
	assert_int_equal(st_table_size(st_lr_table(m)), distinct);
	free(sorted);
	st_batch_destroy(b);
	st_lr_destroy(m);
}

static void test_lr_eval_does_not_create_rows(void **state)
{
	(void)state;
	st_job_t job;
	make_job(&job);
	st_lr_t *m;
	assert_int_equal(st_lr_create(&m, &job, NULL), ST_OK);
	st_stage_ctx_t ctx = { .stage = "pull", .thread_idx = 0, .n_threads = 1 };
	st_batch_t *out;
	/* Untrained model: eval finds nothing, scores every example alike. */
	st_batch_t *e = gen_batch(ST_GEN_EVAL_BASE, 1000, 1);
	assert_int_equal(st_lr_pull_ops.process(m, &ctx, e, &out), ST_OK);
	assert_int_equal(st_table_size(st_lr_table(m)), 0);
	for (uint32_t u = 0; u < e->n_uniq; u++)
		assert_null(((float **)e->rows)[u]);
	assert_int_equal(st_lr_train_ops.process(m, &ctx, e, &out), ST_OK);
	for (uint32_t i = 0; i < e->n; i++)
		assert_true(e->pred[i] == e->pred[0]);
	st_batch_destroy(e);

	run_batch(m, gen_batch(0, 4096, 0), 0, NULL);
	uint64_t size = st_table_size(st_lr_table(m));
	e = gen_batch(ST_GEN_EVAL_BASE, 1000, 1);
	assert_int_equal(st_lr_pull_ops.process(m, &ctx, e, &out), ST_OK);
	assert_int_equal(st_table_size(st_lr_table(m)), size);
	uint32_t found = 0;
	for (uint32_t u = 0; u < e->n_uniq; u++) {
		float *r = ((float **)e->rows)[u];
		assert_ptr_equal(r, st_table_find(st_lr_table(m), e->uniq[u]));
		found += r != NULL;
	}
	assert_true(found > 0 && found < e->n_uniq);   /* head keys seen, tail not */
	/* Scoring an eval batch changes nothing: st_lr_predict agrees with it. */
	assert_int_equal(st_lr_train_ops.process(m, &ctx, e, &out), ST_OK);
	for (uint32_t i = 0; i < e->n; i++)
		assert_true(st_lr_predict(m, e, i) == e->pred[i]);
	assert_true(e->pred[0] != e->pred[1] || e->pred[1] != e->pred[2]);
	st_batch_destroy(e);
	st_lr_destroy(m);
}

static void test_lr_rejects_bad_input(void **state)
{
	(void)state;
	st_job_t job;
	make_job(&job);
	job.model.optimizer = (char *)"adam";
	st_lr_t *m;
	assert_int_equal(st_lr_create(&m, &job, NULL), ST_EJOB);
	make_job(&job);
	job.model.dense_transform = (char *)"sqrt";
	assert_int_equal(st_lr_create(&m, &job, NULL), ST_EJOB);
	make_job(&job);
	assert_int_equal(st_lr_create(&m, &job, NULL), ST_OK);
	/* A batch that skipped pull is refused and handed back, not freed. */
	st_stage_ctx_t ctx = { .stage = "train", .thread_idx = 0, .n_threads = 1 };
	st_batch_t *b = gen_batch(0, 100, 0), *out = NULL;
	assert_int_equal(st_lr_train_ops.process(m, &ctx, b, &out), ST_EINVAL);
	assert_ptr_equal(out, b);
	st_batch_destroy(b);
	st_lr_destroy(m);
}

typedef struct {
	st_lr_t *m;
	pthread_barrier_t *bar;
	int idx;
} hw_arg_t;

static void *hogwild_main(void *p)
{
	hw_arg_t *a = p;
	pthread_barrier_wait(a->bar);
	/* Worker i takes batches i, i+2, ...: both write shared head rows. */
	for (uint64_t r = (uint64_t)a->idx * 4096; r < 160 * 1024; r += 2 * 4096)
		run_batch(a->m, gen_batch(r, 4096, 0), a->idx, NULL);
	return NULL;
}

static void test_lr_two_workers_hogwild(void **state)
{
	(void)state;
	st_job_t job;
	make_job(&job);
	st_lr_t *m;
	assert_int_equal(st_lr_create(&m, &job, NULL), ST_OK);
	pthread_barrier_t bar;
	pthread_barrier_init(&bar, NULL, 2);
	hw_arg_t a[2];
	pthread_t tid[2];
	for (int i = 0; i < 2; i++) {
		a[i] = (hw_arg_t){ .m = m, .bar = &bar, .idx = i };
		assert_int_equal(pthread_create(&tid[i], NULL, hogwild_main, &a[i]), 0);
	}
	for (int i = 0; i < 2; i++)
		pthread_join(tid[i], NULL);
	pthread_barrier_destroy(&bar);
	double auc;
	uint64_t n;
	st_lr_progress(m, &auc, NULL, &n);
	assert_int_equal(n, 160 * 1024);
	assert_true(auc > 0.68);
	st_lr_destroy(m);
}

/* A source op over generated rows: batches are numbered by an atomic counter
 * so any number of source threads may run. */
typedef struct {
	uint64_t next, n_batches;
	uint32_t size;
} src_t;

static int src_produce(void *state, st_stage_ctx_t *ctx, st_batch_t **out)
{
	src_t *s = state;
	uint64_t i = __atomic_fetch_add(&s->next, 1, __ATOMIC_RELAXED);
	if (i >= s->n_batches)
		return 0;
	st_batch_t *b;
	int rc = st_batch_create(&b, s->size, ST_GEN_N_DENSE, ST_GEN_N_CAT, s->size * 20);
	if (rc < 0)
		return st_stage_fail(ctx, rc, "out of memory");
	rc = st_gen_fill_batch(gen, i * s->size, b, s->size);
	if (rc < 0) {
		st_batch_destroy(b);
		return st_stage_fail(ctx, rc, "fill failed");
	}
	b->seq = i;
	*out = b;
	return 1;
}

static const st_stage_ops_t src_ops = { .name = "gen", .produce = src_produce };

static void add_stage(st_graph_t *g, const char *name, const st_stage_ops_t *ops,
		      void *st, int threads)
{
	st_stage_desc_t d = { .name = name, .ops = ops, .state = st, .n_threads = threads,
			      .queue_cap = 2 };
	for (int i = 0; i < ST_MAX_STAGE_THREADS; i++)
		d.cpus[i] = -1;
	assert_int_equal(st_graph_add_stage(g, &d), ST_OK);
}

/* The ops under the real engine: read -> pull (2 threads) -> train (2
 * workers, Hogwild) -> push -> dump; every batch freed once (ASan checks). */
static void test_lr_runs_in_graph(void **state)
{
	(void)state;
	st_job_t job;
	make_job(&job);
	st_metrics_t *met;
	assert_int_equal(st_metrics_create(&met), ST_OK);
	st_lr_t *m;
	assert_int_equal(st_lr_create(&m, &job, met), ST_OK);
	src_t src = { .next = 0, .n_batches = 40, .size = 4096 };
	st_graph_t *g;
	assert_int_equal(st_graph_create(&g), ST_OK);
	add_stage(g, "read", &src_ops, &src, 1);
	add_stage(g, "pull", &st_lr_pull_ops, m, 2);
	add_stage(g, "train", &st_lr_train_ops, m, 2);
	add_stage(g, "push", &st_lr_push_ops, m, 1);
	add_stage(g, "dump", &st_lr_dump_ops, m, 1);
	assert_int_equal(st_graph_run(g), ST_OK);
	st_graph_destroy(g);
	double auc;
	uint64_t n;
	st_lr_progress(m, &auc, NULL, &n);
	assert_int_equal(n, 40 * 4096);
	assert_true(auc > 0.68);
	assert_int_equal((uint64_t)st_metrics_get(met, "examples", 0), 40 * 4096);
	/* train's finish published the final progressive values. */
	assert_true(fabs(st_metrics_get(met, "auc", 0) - auc) < 1e-12);
	assert_true(st_metrics_get(met, "loss", 0) > 0.3);
	assert_int_equal((uint64_t)st_metrics_get(met, "rows", 0),
			 st_table_size(st_lr_table(m)));
	st_lr_destroy(m);
	st_metrics_destroy(met);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_lr_learns_generated_data),
		cmocka_unit_test(test_lr_single_worker_deterministic),
		cmocka_unit_test(test_lr_pull_dedups_keys),
		cmocka_unit_test(test_lr_eval_does_not_create_rows),
		cmocka_unit_test(test_lr_rejects_bad_input),
		cmocka_unit_test(test_lr_two_workers_hogwild),
		cmocka_unit_test(test_lr_runs_in_graph),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
