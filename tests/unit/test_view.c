/* test_view.c — the model view (ops/view/view.h) and its scorer
 * (ops/view/score.h): a trainer's view (ops/train/view.h) scores held-out
 * batches bit for bit as the trainer's own eval, with one or three workers,
 * for rows in RAM and rows mostly on an SSD tier, and creates no row; the
 * lookup reads keys without a row as zeros (NULL rows); st_view_check
 * refuses inconsistent views, naming what is wrong. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ops/gen/gen.h"
#include "ops/train/trainer.h"
#include "ops/train/view.h"
#include "ops/view/score.h"
#include "ops/view/view.h"
#include "runtime/err.h"
#include "runtime/store/rowfmt.h"
#include "runtime/store/table.h"
#include "dump_util.h"

#define BS 1024
#define EVAL_BS 700    /* minibatches of 128: five full, one of 60 */
#define EVAL_N 3

static st_gen_t *gen;
static char *g_dir;
static int dims[ST_GEN_N_CAT];

static int setup(void **state)
{
	(void)state;
	st_gen_opts_t o = { .rows = 1, .files = 1, .seed = 5, .zipf = 1.1, .vocab = 20000 };
	g_dir = tu_mkdtemp("view");
	return st_gen_create(&gen, &o) == ST_OK ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	st_gen_destroy(gen);
	int rc = st__dumpio_rmtree(g_dir);
	free(g_dir);
	return rc == ST_OK ? 0 : -1;
}

/* wdl with two tables (emb 8 on slots 0..12, 4 on the rest), minibatch 128. */
static void make_job(st_job_t *j)
{
	memset(j, 0, sizeof *j);
	j->name = (char *)"view-test";
	j->seed = 3;
	j->batch_size = BS;
	j->minibatch = 128;
	j->train.n_dense = ST_GEN_N_DENSE;
	j->train.n_slots = ST_GEN_N_CAT;
	j->train_stage.threads = 1;
	j->sync.name = (char *)"async";
	st_model_cfg_t *m = &j->model;
	m->type = (char *)"wdl";
	m->emb_dim = 8;
	for (int s = 0; s < ST_GEN_N_CAT; s++)
		dims[s] = s < 13 ? 8 : 4;
	m->slot_dims = dims;
	m->n_slot_dims = ST_GEN_N_CAT;
	m->n_hidden = 2;
	m->hidden[0] = 16;
	m->hidden[1] = 8;
	m->init_scale = 0.05;
	m->sparse_opt = (st_optim_cfg_t){ .name = (char *)"adagrad", .lr = 0.05, .eps = 1e-10,
					  .init_accum = 1e-4 };
	m->dense_opt = (st_optim_cfg_t){ .name = (char *)"adam", .lr = 3e-3, .eps = 1e-8,
					 .beta1 = 0.9, .beta2 = 0.999 };
}

static st_batch_t *gen_batch(uint64_t first, uint32_t n, uint64_t seq, int eval)
{
	st_batch_t *b;
	assert_int_equal(st_batch_create(&b, n, ST_GEN_N_DENSE, ST_GEN_N_CAT, n * 27), ST_OK);
	assert_int_equal(st_gen_fill_batch(gen, first, b, n), ST_OK);
	b->eval = eval;
	b->seq = seq;
	return b;
}

/* pull -> train -> push -> dump on the calling thread; preds: b->pred. */
static void run_batch(st_trainer_t *tr, st_batch_t *b, float *preds)
{
	st_stage_ctx_t ctx = { .stage = "test", .thread_idx = 0, .n_threads = 1 };
	st_batch_t *out;
	assert_int_equal(st_trainer_pull_ops.process(tr, &ctx, b, &out), ST_OK);
	assert_int_equal(st_trainer_train_ops.process(tr, &ctx, b, &out), ST_OK);
	if (preds)
		memcpy(preds, b->pred, sizeof(float) * b->n);
	assert_int_equal(st_trainer_push_ops.process(tr, &ctx, b, &out), ST_OK);
	assert_int_equal(st_trainer_dump_ops.process(tr, &ctx, b, &out), ST_OK);
}

static uint64_t total_rows(const st_view_t *v)
{
	uint64_t n = 0;
	for (int k = 0; k < v->n_tables; k++) {
		st_table_stats_t s;
		st_table_stats(v->tables[k], &s);
		n += s.rows + s.cold_rows;
	}
	return n;
}

/* Trains a few batches, then compares the trainer's eval scores with the
 * scores of its view's scorer (threads workers). */
static void check_view_scores(const st_job_t *job, int train_batches, int threads)
{
	st_trainer_t *tr;
	assert_int_equal(st_trainer_create(&tr, job, NULL), ST_OK);
	for (int i = 0; i < train_batches; i++)
		run_batch(tr, gen_batch((uint64_t)i * (uint64_t)job->batch_size,
					(uint32_t)job->batch_size, (uint64_t)i, 0), NULL);
	float *want = malloc(sizeof(float) * EVAL_N * EVAL_BS);
	float *got = malloc(sizeof(float) * EVAL_N * EVAL_BS);
	assert_true(want && got);
	for (int i = 0; i < EVAL_N; i++)
		run_batch(tr, gen_batch(ST_GEN_EVAL_BASE + (uint64_t)i * EVAL_BS, EVAL_BS,
					100 + (uint64_t)i, 1), want + i * EVAL_BS);
	st_trainer_reset_eval(tr);

	st_view_t v;
	char err[256] = "";
	assert_int_equal(st_trainer_view(tr, job, &v), ST_OK);
	if (st_view_check(&v, err, sizeof err) != ST_OK)
		fail_msg("the trainer's view: %s", err);
	const uint64_t rows = total_rows(&v);
	if (job->ssd_path) {
		st_table_stats_t ts;
		st_table_stats(v.tables[0], &ts);
		assert_true(ts.cold_rows > ts.rows);   /* most rows only on SSD */
	}
	st_scorer_t *sc;
	assert_int_equal(st_scorer_create(&sc, &v, threads, v.minibatch), ST_OK);
	for (int i = 0; i < EVAL_N; i++) {
		st_batch_t *b = gen_batch(ST_GEN_EVAL_BASE + (uint64_t)i * EVAL_BS, EVAL_BS, 0, 1);
		assert_int_equal(st_scorer_run(sc, b), ST_OK);
		memcpy(got + i * EVAL_BS, b->pred, sizeof(float) * EVAL_BS);
		st_batch_destroy(b);
	}
	if (memcmp(got, want, sizeof(float) * EVAL_N * EVAL_BS))
		fail_msg("%d worker(s): the view's scores differ from the trainer's eval", threads);
	assert_int_equal(total_rows(&v), rows);   /* scoring created no row */
	/* A batch of another shape is refused. */
	st_batch_t *b;
	assert_int_equal(st_batch_create(&b, 4, 3, ST_GEN_N_CAT, 8), ST_OK);
	assert_int_equal(st_scorer_run(sc, b), ST_EINVAL);
	st_batch_destroy(b);
	st_scorer_destroy(sc);
	/* The trainer trains on after being viewed and scored (no pin left). */
	run_batch(tr, gen_batch(1u << 20, (uint32_t)job->batch_size, 50, 0), NULL);
	free(want);
	free(got);
	st_trainer_destroy(tr);
}

static void test_view_scores_as_trainer_eval(void **state)
{
	(void)state;
	st_job_t job;
	make_job(&job);
	check_view_scores(&job, 3, 1);
	check_view_scores(&job, 3, 3);
}

/* Rows mostly on SSD: the lookup loads them (pinned, then released). */
static void test_view_scores_ssd_tier(void **state)
{
	(void)state;
	char ssd[600];
	snprintf(ssd, sizeof ssd, "%s/ssd", g_dir);
	assert_int_equal(mkdir(ssd, 0700), 0);
	st_job_t job;
	make_job(&job);
	job.model.type = (char *)"dnn";
	job.model.slot_dims = NULL;   /* one table */
	job.model.n_slot_dims = 0;
	job.batch_size = 256;
	job.mem_bytes = 1u << 20;
	job.ssd_path = ssd;
	job.ssd_file_bytes = 256 << 10;
	job.ssd_queue_depth = 16;
	job.ssd_lru = 0.5;
	check_view_scores(&job, 12, 2);
}

/* Compact rows (storage.row_precision): the view hands the scorer decoded
 * copies and scores exactly as the trainer's eval did with its own decoded
 * copies — two tables of odd widths (8 + wide, 4 + wide: a pad half-word
 * each), and one table mostly on SSD. */
static void test_view_scores_compact_rows(void **state)
{
	(void)state;
	for (int prec = ST_ROW_BF16; prec <= ST_ROW_FP16; prec++) {
		st_job_t job;
		make_job(&job);
		job.row_prec = prec;
		check_view_scores(&job, 3, 2);
	}
	char ssd[600];
	snprintf(ssd, sizeof ssd, "%s/ssd-compact", g_dir);
	assert_int_equal(mkdir(ssd, 0700), 0);
	st_job_t job;
	make_job(&job);
	job.row_prec = ST_ROW_BF16;
	job.model.type = (char *)"dnn";
	job.model.slot_dims = NULL;
	job.model.n_slot_dims = 0;
	job.batch_size = 256;
	job.mem_bytes = 1u << 20;
	job.ssd_path = ssd;
	job.ssd_file_bytes = 256 << 10;
	job.ssd_queue_depth = 16;
	job.ssd_lru = 0.5;
	check_view_scores(&job, 12, 2);
}

/* Keys without a row give NULL rows (zeros) and are not created. */
static void test_view_lookup_absent_keys_read_zero(void **state)
{
	(void)state;
	st_job_t job;
	make_job(&job);
	st_trainer_t *tr;
	assert_int_equal(st_trainer_create(&tr, &job, NULL), ST_OK);
	run_batch(tr, gen_batch(0, BS, 0, 0), NULL);
	st_view_t v;
	assert_int_equal(st_trainer_view(tr, &job, &v), ST_OK);
	const uint64_t rows = total_rows(&v);
	st_batch_t *b = gen_batch(0, 8, 1, 1);
	/* Example 0's first key becomes one no batch ever had, twice. */
	b->keys[0] = UINT64_C(0xdeadbeefdeadbeef);
	b->keys[1] = UINT64_C(0xdeadbeefdeadbeef);
	b->key_slot[1] = b->key_slot[0];
	st_view_lookup_t look = { 0 };
	assert_int_equal(st_view_lookup(&v, &look, b), ST_OK);
	float **r = b->rows;
	const uint16_t *width = b->aux;
	assert_int_equal(b->key_idx[0], b->key_idx[1]);
	assert_null(r[b->key_idx[0]]);
	assert_int_equal(width[b->key_idx[0]], st_model_row_dim(v.model, b->key_slot[0]));
	assert_non_null(r[b->key_idx[2]]);   /* trained on: has a row */
	st_view_release(&v, b);
	assert_int_equal(total_rows(&v), rows);
	st_view_lookup_fini(&look);
	st_batch_destroy(b);
	st_trainer_destroy(tr);
}

static void check_bad(const st_view_t *v, const char *want)
{
	char err[256] = "";
	assert_int_equal(st_view_check(v, err, sizeof err), ST_EINVAL);
	if (!strstr(err, want))
		fail_msg("message '%s' lacks '%s'", err, want);
}

static void test_view_check_refuses_inconsistent_views(void **state)
{
	(void)state;
	st_job_t job;
	make_job(&job);
	st_trainer_t *tr;
	assert_int_equal(st_trainer_create(&tr, &job, NULL), ST_OK);
	st_view_t v, bad;
	assert_int_equal(st_trainer_view(tr, &job, &v), ST_OK);
	assert_int_equal(st_view_check(&v, NULL, 0), ST_OK);
	assert_int_equal(v.n_tables, 2);
	assert_int_equal(st_view_row_dim(&v, 0), 9);   /* emb 8 + the wide weight */
	assert_int_equal(st_view_row_dim(&v, 1), 5);
	assert_ptr_equal(st_view_table_for_slot(&v, 20), st_trainer_table_for_slot(tr, 20));
	/* A job of another shape has no view of this trainer. */
	st_job_t other = job;
	other.minibatch = 64;
	assert_int_equal(st_trainer_view(tr, &other, &bad), ST_EINVAL);

	int st[ST_GEN_N_CAT];
	memcpy(st, v.slot_table, sizeof st);
	bad = v;
	bad.slot_table = st;
	st[0] = 1;     /* table 1 before table 0 */
	check_bad(&bad, "slot 0 is in table 1");
	st[0] = 0;
	st[20] = 0;    /* a 4-wide slot in the table of 8-wide ones */
	check_bad(&bad, "table 0 holds rows of width 9 and 5 (slot 20)");
	st[20] = 1;
	bad.n_tables = 3;
	bad.tables[2] = bad.tables[1];
	check_bad(&bad, "3 tables, its slots use 2");
	bad = v;
	st_model_cfg_t cfg = *v.cfg;
	cfg.type = NULL;
	bad.cfg = &cfg;
	check_bad(&bad, "no model type");
	bad = v;
	bad.minibatch = 0;
	check_bad(&bad, "minibatch 0");
	/* No lineage until asked; the trainer's hook makes it. */
	assert_string_equal(v.lineage, "");
	assert_int_equal(strlen(st_view_lineage_new(&v)), 16);
	assert_string_equal(st_view_lineage_new(&v), st_trainer_lineage(tr));
	st_trainer_destroy(tr);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_view_scores_as_trainer_eval),
		cmocka_unit_test(test_view_scores_ssd_tier),
		cmocka_unit_test(test_view_scores_compact_rows),
		cmocka_unit_test(test_view_lookup_absent_keys_read_zero),
		cmocka_unit_test(test_view_check_refuses_inconsistent_views),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
