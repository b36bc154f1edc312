/* test_trainer_store.c — the trainer over the hierarchical store: with one
 * worker and a fixed seed, training with a RAM budget of 10% of the model
 * (the rest on SSD, pulled back by the pull stage while the previous batch
 * trains) gives exactly the parameters of training with every row in RAM;
 * and the job-level errors of the SSD tier, a second job on the same path
 * among them; and delta tracking that runs out of memory (the key-set
 * allocator's test hook) fails loudly instead of dropping keys. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ops/dump/rows.h"
#include "ops/gen/gen.h"
#include "ops/train/trainer.h"
#include "ops/train/trainer_test.h"
#include "runtime/err.h"
#include "runtime/graph.h"
#include "runtime/metrics.h"
#include "runtime/store/table.h"
#include "dump_util.h"

#define BATCH 256
#define BATCHES 120

static st_gen_t *gen;
static char *g_dir;

static int setup(void **state)
{
	(void)state;
	st_gen_opts_t o = { .rows = 1, .files = 1, .seed = 3, .zipf = 1.05, .vocab = 200000 };
	g_dir = tu_mkdtemp("trstore");
	return st_gen_create(&gen, &o) == ST_OK ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	st_gen_destroy(gen);
	st__dumpio_rmtree(g_dir);
	free(g_dir);
	return 0;
}

static void make_job(st_job_t *j)
{
	memset(j, 0, sizeof *j);
	j->seed = 5;
	j->batch_size = BATCH;
	j->minibatch = 128;
	j->train.n_dense = ST_GEN_N_DENSE;
	j->train.n_slots = ST_GEN_N_CAT;
	j->train_stage.threads = 1;
	j->sync.name = (char *)"allreduce";
	st_model_cfg_t *m = &j->model;
	m->type = (char *)"dnn";
	m->emb_dim = 8;
	m->n_hidden = 2;
	m->hidden[0] = 32;
	m->hidden[1] = 16;
	m->init_scale = 0.05;
	m->sparse_opt = (st_optim_cfg_t){ .name = (char *)"adagrad", .lr = 0.05,
					  .eps = 1e-10, .init_accum = 1e-4 };
	m->dense_opt = (st_optim_cfg_t){ .name = (char *)"adam", .lr = 3e-3, .eps = 1e-8,
					 .beta1 = 0.9, .beta2 = 0.999 };
	j->ssd_file_bytes = 256 << 10;
	j->ssd_queue_depth = 16;
	j->ssd_lru = 0.5;
}

typedef struct {
	uint64_t next, n;
	int evals;   /* every 4th batch is an eval batch */
} src_t;

static int src_produce(void *state, st_stage_ctx_t *ctx, st_batch_t **out)
{
	src_t *s = state;
	uint64_t i = s->next++;
	if (i >= s->n)
		return 0;
	st_batch_t *b;
	int rc = st_batch_create(&b, BATCH, ST_GEN_N_DENSE, ST_GEN_N_CAT, BATCH * 27);
	if (rc < 0)
		return st_stage_fail(ctx, rc, "out of memory");
	if ((rc = st_gen_fill_batch(gen, i * BATCH, b, BATCH)) < 0) {
		st_batch_destroy(b);
		return st_stage_fail(ctx, rc, "fill failed");
	}
	b->seq = i;
	b->eval = s->evals && i % 4 == 3;
	*out = b;
	return 1;
}

static const st_stage_ops_t src_ops = { .name = "gen", .produce = src_produce };

static void add_stage(st_graph_t *g, const char *name, const st_stage_ops_t *ops, void *st)
{
	st_stage_desc_t d = { .name = name, .ops = ops, .state = st, .n_threads = 1,
			      .queue_cap = 3 };
	for (int i = 0; i < ST_MAX_STAGE_THREADS; i++)
		d.cpus[i] = -1;
	assert_int_equal(st_graph_add_stage(g, &d), ST_OK);
}

/* Trains batches [from, from + n) through the trainer's stages; the
 * graph's result. */
static int train_batches(st_trainer_t *tr, uint64_t from, uint64_t n)
{
	src_t src = { .next = from, .n = from + n, .evals = 1 };
	st_graph_t *g;
	assert_int_equal(st_graph_create(&g), ST_OK);
	add_stage(g, "read", &src_ops, &src);
	add_stage(g, "pull", &st_trainer_pull_ops, tr);
	add_stage(g, "train", &st_trainer_train_ops, tr);
	add_stage(g, "push", &st_trainer_push_ops, tr);
	add_stage(g, "dump", &st_trainer_dump_ops, tr);
	int rc = st_graph_run(g);
	if (rc < 0)
		printf("graph: %s\n", st_graph_error(g));
	st_graph_destroy(g);
	return rc;
}

static void train(st_trainer_t *tr)
{
	assert_int_equal(train_batches(tr, 0, BATCHES), ST_OK);
}

/* Every row of a table as (key, floats, last_step, freq), sorted by key. */
typedef struct {
	size_t n, cap, w;   /* w: words per row incl. key */
	uint32_t *buf;
} rows_t;

static void collect(uint64_t key, float *row, void *arg)
{
	rows_t *r = arg;
	if (r->n == r->cap) {
		r->cap = r->cap ? r->cap * 2 : 4096;
		r->buf = realloc(r->buf, r->cap * r->w * 4);
		assert_non_null(r->buf);
	}
	uint32_t *o = r->buf + r->n++ * r->w;
	memcpy(o, &key, 8);
	memcpy(o + 2, row, (r->w - 2) * 4);   /* floats, last_step, freq */
}

static size_t g_w;

static int cmp_rows(const void *a, const void *b)
{
	uint64_t x, y;
	memcpy(&x, a, 8);
	memcpy(&y, b, 8);
	return (x > y) - (x < y);
}

static rows_t dump_rows(st_trainer_t *tr)
{
	st_table_t *t = st_trainer_table_for_slot(tr, 0);
	rows_t r = { .w = 2 + st_table_row_floats(t) + 2 };
	assert_int_equal(st_table_foreach_all(t, collect, &r), ST_OK);
	g_w = r.w;
	qsort(r.buf, r.n, r.w * 4, cmp_rows);
	return r;
}

static void test_trainer_store_small_budget_is_exact(void **state)
{
	(void)state;
	/* All in RAM. */
	st_job_t job;
	make_job(&job);
	st_metrics_t *met;
	assert_int_equal(st_metrics_create(&met), ST_OK);
	st_trainer_t *ram;
	assert_int_equal(st_trainer_create(&ram, &job, met), ST_OK);
	train(ram);
	rows_t a = dump_rows(ram);
	/* A budget of 10% of the model's rows (the trainer's RAM bytes per
	 * cached row: 16 floats + 39 bytes). */
	size_t row_b = (a.w - 4) * 4 + 39;
	job.mem_bytes = (uint64_t)(0.10 * (double)a.n * (double)row_b);
	job.ssd_path = g_dir;
	st_trainer_t *tiered;
	assert_int_equal(st_trainer_create(&tiered, &job, met), ST_OK);
	train(tiered);
	rows_t b = dump_rows(tiered);
	st_table_stats_t ts;
	st_table_stats(st_trainer_table_for_slot(tiered, 0), &ts);
	printf("exactness: %zu rows, budget %.0f rows; %llu in RAM, %llu on SSD, %llu loads, "
	       "%llu spills, hit rate %.3f\n", a.n, 0.1 * (double)a.n,
	       (unsigned long long)ts.rows, (unsigned long long)ts.cold_rows,
	       (unsigned long long)ts.loads, (unsigned long long)ts.spilled,
	       st_metrics_get(met, "cache.hit", -1));
	assert_true(ts.loads > 1000 && ts.spilled > 1000);
	assert_true(ts.cold_rows > ts.rows);
	assert_int_equal(a.n, b.n);
	for (size_t i = 0; i < a.n; i++)
		if (memcmp(a.buf + i * a.w, b.buf + i * b.w, a.w * 4)) {
			uint64_t k;
			memcpy(&k, a.buf + i * a.w, 8);
			fail_msg("row %zu (key %llx) differs between all-in-RAM and tiered runs", i,
				 (unsigned long long)k);
		}
	st_model_t *ma = st_trainer_model(ram), *mb = st_trainer_model(tiered);
	assert_memory_equal(st_model_params(ma), st_model_params(mb),
			    st_model_nparams(ma) * sizeof(float));
	double auc_a, auc_b;
	st_trainer_progress(ram, &auc_a, NULL, NULL);
	st_trainer_progress(tiered, &auc_b, NULL, NULL);
	assert_true(auc_a == auc_b);
	st_trainer_destroy(ram);
	st_trainer_destroy(tiered);
	/* The run's store directory is removed at the end. */
	char root[600];
	snprintf(root, sizeof root, "%s/strata-store", g_dir);
	struct stat sb;
	assert_int_not_equal(stat(root, &sb), 0);
	free(a.buf);
	free(b.buf);
	st_metrics_destroy(met);
}

static void test_trainer_store_refuses_bad_settings(void **state)
{
	(void)state;
	st_job_t job;
	make_job(&job);
	st_trainer_t *tr;
	/* Missing path. */
	job.mem_bytes = 64 << 20;
	job.ssd_path = (char *)"/nonexistent/strata-ssd";
	assert_int_equal(st_trainer_create(&tr, &job, NULL), ST_EJOB);
	/* A budget that cannot hold one batch's rows. */
	job.ssd_path = g_dir;
	job.mem_bytes = 64 << 10;
	assert_int_equal(st_trainer_create(&tr, &job, NULL), ST_EJOB);
	/* SSD without a RAM budget. */
	job.mem_bytes = 0;
	assert_int_equal(st_trainer_create(&tr, &job, NULL), ST_EJOB);
	/* Not writable (skipped as root, where permissions do not apply). */
	if (geteuid() != 0) {
		char ro[600];
		snprintf(ro, sizeof ro, "%s/ro", g_dir);
		assert_int_equal(mkdir(ro, 0500), 0);
		job.ssd_path = ro;
		job.mem_bytes = 64 << 20;
		assert_int_equal(st_trainer_create(&tr, &job, NULL), ST_EJOB);
		rmdir(ro);
	}
	rmdir(g_dir);
	assert_int_equal(mkdir(g_dir, 0700), 0);
}

static int count_sst(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return -1;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		size_t l = strlen(e->d_name);
		n += l > 4 && !strcmp(e->d_name + l - 4, ".sst");
	}
	closedir(d);
	return n;
}

static void count_row(uint64_t key, float *row, void *arg)
{
	(void)key;
	(void)row;
	(*(size_t *)arg)++;
}

/* A second job on the same storage.ssd.path is refused with ST_EBUSY and
 * leaves the first job's SSD files alone: it used to wipe them (every run
 * opens its store fresh) and, failing, remove the first job's directory. */
static void test_trainer_store_second_job_on_path_is_refused(void **state)
{
	(void)state;
	st_job_t job;
	make_job(&job);
	job.mem_bytes = 2 << 20;
	job.ssd_path = g_dir;
	st_trainer_t *a, *b = NULL;
	assert_int_equal(st_trainer_create(&a, &job, NULL), ST_OK);
	train(a);
	char t0[700];
	snprintf(t0, sizeof t0, "%s/strata-store/t0", g_dir);
	int files = count_sst(t0);
	assert_true(files > 0);
	st_table_stats_t ts;
	st_table_stats(st_trainer_table_for_slot(a, 0), &ts);
	assert_true(ts.cold_rows > 0);
	size_t before = 0, after = 0;
	assert_int_equal(st_table_foreach_all(st_trainer_table_for_slot(a, 0), count_row, &before),
			 ST_OK);

	assert_int_equal(st_trainer_create(&b, &job, NULL), ST_EBUSY);
	assert_int_equal(count_sst(t0), files);
	/* Every row of the first job, SSD tier included, is still readable. */
	assert_int_equal(st_table_foreach_all(st_trainer_table_for_slot(a, 0), count_row, &after),
			 ST_OK);
	assert_int_equal(before, after);
	st_trainer_destroy(a);
	/* Free again once the first job is gone. */
	assert_int_equal(st_trainer_create(&b, &job, NULL), ST_OK);
	st_trainer_destroy(b);
	struct stat sb;
	char root[600];
	snprintf(root, sizeof root, "%s/strata-store", g_dir);
	assert_int_not_equal(stat(root, &sb), 0);
}

/* ---- delta exports never lose a key (issue 15) ---- */

static char g_err[1024];

static int export_to(st_trainer_t *tr, const st_job_t *job, uint64_t seq, int delta)
{
	char root[600];
	snprintf(root, sizeof root, "%s/exports", g_dir);
	if (seq == 1) {
		/* A new trainer's first export: the earlier tests' exports belong
		 * to other runs (lineages), which the writer refuses to follow. */
		char cmd[700];
		snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
		if (system(cmd) != 0)
			return ST_EIO;
	}
	mkdir(root, 0755);
	g_err[0] = 0;
	int rc = st_trainer_export(tr, job, root, seq, delta, 0, g_err, sizeof g_err);
	if (rc < 0)
		printf("export %llu: %s\n", (unsigned long long)seq, g_err);
	return rc;
}

/* Rows and deleted keys of table 0 of delta export seq. */
static void delta_counts(uint64_t seq, size_t *rows, size_t *deleted)
{
	char path[700], err[512];
	snprintf(path, sizeof path, "%s/exports/export-%012llu-delta/table-0.rows", g_dir,
		 (unsigned long long)seq);
	st_rows_file_t *f;
	assert_int_equal(st_rows_read(path, &f, err, sizeof err), ST_OK);
	*rows = f->info.n_rows;
	*deleted = f->info.n_deleted;
	st_rows_file_free(f);
}

/* A key of a trained batch that cannot be recorded for the next delta (the
 * set's allocation fails) fails the batch with ST_ENOMEM: it used to be
 * dropped, and the next delta silently missed its row. Deltas are refused
 * until a full export; then tracking starts over. */
static void test_trainer_store_track_enomem_fails_the_batch(void **state)
{
	(void)state;
	st_job_t job;
	make_job(&job);
	job.name = (char *)"trstore";
	st_trainer_t *tr;
	assert_int_equal(st_trainer_create(&tr, &job, NULL), ST_OK);
	assert_int_equal(train_batches(tr, 0, 8), ST_OK);
	assert_int_equal(export_to(tr, &job, 1, 1), ST_OK);   /* tracking starts */
	st__trainer_keyset_fail_after = 0;
	int rc = train_batches(tr, 8, 8);
	st__trainer_keyset_fail_after = -1;
	assert_int_equal(rc, ST_ENOMEM);
	assert_int_equal(export_to(tr, &job, 2, 1), ST_ENOMEM);
	assert_non_null(strstr(g_err, "a delta would miss its row; only a full export can follow"));
	assert_int_equal(train_batches(tr, 8, 8), ST_ENOMEM);   /* still refused */
	/* A full export needs no key list and starts the tracking over. */
	assert_int_equal(export_to(tr, &job, 3, 0), ST_OK);
	assert_int_equal(train_batches(tr, 16, 8), ST_OK);
	size_t n = st__trainer_delta_keys(tr, 0), rows, del;
	assert_true(n > 0);
	assert_int_equal(export_to(tr, &job, 4, 1), ST_OK);
	delta_counts(4, &rows, &del);
	assert_int_equal(rows + del, n);
	st_trainer_destroy(tr);
}

/* The key lists of a delta export cannot be allocated: the export fails with
 * ST_ENOMEM and keeps every key for the next one (it used to free the sets
 * and write an empty delta). */
static void test_trainer_store_export_enomem_keeps_the_keys(void **state)
{
	(void)state;
	st_job_t job;
	make_job(&job);
	job.name = (char *)"trstore";
	st_trainer_t *tr;
	assert_int_equal(st_trainer_create(&tr, &job, NULL), ST_OK);
	assert_int_equal(export_to(tr, &job, 1, 1), ST_OK);
	assert_int_equal(train_batches(tr, 0, 8), ST_OK);
	size_t n = st__trainer_delta_keys(tr, 0), rows, del;
	assert_true(n > 1000);
	st__trainer_keyset_fail_after = 0;
	int rc = export_to(tr, &job, 2, 1);
	st__trainer_keyset_fail_after = -1;
	assert_int_equal(rc, ST_ENOMEM);
	assert_non_null(strstr(g_err, "keys of table 0 changed since the last export (they are "
				      "kept for the next export)"));
	assert_int_equal(st__trainer_delta_keys(tr, 0), n);
	assert_int_equal(export_to(tr, &job, 2, 1), ST_OK);
	delta_counts(2, &rows, &del);
	assert_int_equal(rows + del, n);
	assert_int_equal(st__trainer_delta_keys(tr, 0), 0);
	st_trainer_destroy(tr);
}

/* An evicted key (TTL) that cannot be recorded: the eviction hook cannot
 * fail the sweep, so the error is kept, push and pull report it, and the
 * next delta is refused (it used to miss the deletion). */
static void test_trainer_store_evict_enomem_is_not_silent(void **state)
{
	(void)state;
	st_job_t job;
	make_job(&job);
	job.name = (char *)"trstore";
	st_trainer_t *tr;
	assert_int_equal(st_trainer_create(&tr, &job, NULL), ST_OK);
	assert_int_equal(train_batches(tr, 0, 8), ST_OK);
	assert_int_equal(export_to(tr, &job, 1, 0), ST_OK);
	st_table_t *t = st_trainer_table_for_slot(tr, 0);
	st__trainer_keyset_fail_after = 0;
	uint64_t ev = st_table_evict_older(t, 1000000, 1);
	st__trainer_keyset_fail_after = -1;
	assert_true(ev > 0);
	assert_int_equal(st__trainer_track_error(tr), ST_ENOMEM);
	assert_int_equal(export_to(tr, &job, 2, 1), ST_ENOMEM);
	assert_int_equal(train_batches(tr, 8, 4), ST_ENOMEM);
	st_trainer_destroy(tr);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_trainer_store_small_budget_is_exact),
		cmocka_unit_test(test_trainer_store_refuses_bad_settings),
		cmocka_unit_test(test_trainer_store_second_job_on_path_is_refused),
		cmocka_unit_test(test_trainer_store_track_enomem_fails_the_batch),
		cmocka_unit_test(test_trainer_store_export_enomem_keeps_the_keys),
		cmocka_unit_test(test_trainer_store_evict_enomem_is_not_silent),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
