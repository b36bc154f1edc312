/* test_predict.c — serving exports (ops/view/export.h, written from a
 * trainer's model view, ops/train/view.h) and the predictor over them
 * (ops/view/predict.h): a trained wdl with two tables is exported
 * in full, trained further, rows are removed (TTL eviction) and a delta is
 * exported; a predictor opened on the exports scores held-out batches
 * bit for bit as the trainer's own eval did at the time of each export
 * (also with two scoring workers); the same holds for a trainer whose rows
 * are mostly on SSD (the delta finds them there) and for every preset. A damaged delta, a
 * missing full export, a delta of another model and a foreign export fail
 * the open with messages naming the export and the file. Exports written by
 * several processes (a table in one row file per rank, the manifest's world)
 * score as the one-file export of the same rows; one missing a rank's file
 * or a rank's part of the world is refused and left out of the chain. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ops/algo/owner.h"
#include "ops/dump/ckpt.h"
#include "ops/gen/gen.h"
#include "ops/train/trainer.h"
#include "ops/train/view.h"
#include "ops/view/export.h"
#include "ops/view/predict.h"
#include "runtime/err.h"
#include "runtime/graph.h"
#include "runtime/store/table.h"
#include "dump_util.h"

#define BS 2048        /* train batch */
#define EVAL_BS 1000   /* eval batch: 3 minibatches of 256 and one of 232 */
#define EVAL_N 3       /* eval batches */

static st_gen_t *gen;
static char *g_dir;

static int setup(void **state)
{
	(void)state;
	st_gen_opts_t o = { .rows = 1, .files = 1, .seed = 7, .zipf = 1.1, .vocab = 50000 };
	g_dir = tu_mkdtemp("predict");
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

static int dims[ST_GEN_N_CAT];

/* wdl, emb 8 on slots 0..12 and 4 on the others (two tables of row width 9
 * and 5 with the wide weight), MLP 32-16, AdaGrad rows, Adam dense,
 * minibatch 256, one worker. */
static void make_job(st_job_t *j, const char *name)
{
	memset(j, 0, sizeof *j);
	j->name = (char *)name;
	j->seed = 11;
	j->batch_size = BS;
	j->minibatch = 256;
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
	m->hidden[0] = 32;
	m->hidden[1] = 16;
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

/* pull -> train -> push -> dump on the calling thread (worker 0). */
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

/* The trainer's eval scores of the held-out batches. */
static void trainer_eval(st_trainer_t *tr, float *preds)
{
	for (int i = 0; i < EVAL_N; i++)
		run_batch(tr, gen_batch(ST_GEN_EVAL_BASE + (uint64_t)i * EVAL_BS, EVAL_BS, 1000 + i, 1),
			  preds + i * EVAL_BS);
	st_trainer_reset_eval(tr);
}

/* The predictor's scores of the same batches. */
static void predictor_eval(st_predictor_t *p, float *preds)
{
	for (int i = 0; i < EVAL_N; i++) {
		st_batch_t *b = gen_batch(ST_GEN_EVAL_BASE + (uint64_t)i * EVAL_BS, EVAL_BS, 0, 0);
		assert_int_equal(st_predictor_score(p, b, preds + i * EVAL_BS), ST_OK);
		st_batch_destroy(b);
	}
}

static void open_ok(st_predictor_t **p, const char *root, int threads)
{
	char err[1024] = "";
	st_predictor_opts_t o = { .threads = threads };
	int rc = st_predictor_open(p, root, &o, err, sizeof err);
	if (rc != ST_OK)
		fail_msg("open %s: %s (%s)", root, err, st_strerror(rc));
}

/* st_export_write of the trainer's view. */
static int export_tr(st_trainer_t *tr, const st_job_t *job, const char *root, uint64_t seq,
		     int64_t step, const st_export_delta_t *d, char *err, size_t errlen)
{
	st_view_t v;
	assert_int_equal(st_trainer_view(tr, job, &v), ST_OK);
	return st_export_write(&v, root, seq, step, d, 0, err, errlen);
}

static void export_ok(st_trainer_t *tr, const st_job_t *job, const char *root, uint64_t seq,
		      int64_t step, const st_export_delta_t *d)
{
	char err[1024] = "";
	int rc = export_tr(tr, job, root, seq, step, d, err, sizeof err);
	if (rc != ST_OK)
		fail_msg("export %s seq %" PRIu64 ": %s", root, seq, err);
}

/* ---- key lists ------------------------------------------------------------ */

typedef struct keys {
	uint64_t *v;
	size_t n, cap;
} keys_t;

static void keys_add(keys_t *k, uint64_t key)
{
	if (k->n == k->cap) {
		k->cap = k->cap ? 2 * k->cap : 1024;
		k->v = realloc(k->v, sizeof(uint64_t) * k->cap);
		assert_non_null(k->v);
	}
	k->v[k->n++] = key;
}

static void collect(uint64_t key, float *row, void *arg)
{
	(void)row;
	keys_add(arg, key);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

static void keys_sort(keys_t *k)
{
	qsort(k->v, k->n, sizeof(uint64_t), cmp_u64);
	size_t u = 0;
	for (size_t i = 0; i < k->n; i++)
		if (!u || k->v[u - 1] != k->v[i])
			k->v[u++] = k->v[i];
	k->n = u;
}

static int keys_has(const keys_t *k, uint64_t key)
{
	return bsearch(&key, k->v, k->n, sizeof key, cmp_u64) != NULL;
}

/* Table index of each slot, through the trainer's accessors. */
static void slot_map(st_trainer_t *tr, int *st)
{
	for (int s = 0; s < ST_GEN_N_CAT; s++) {
		st[s] = -1;
		for (int k = 0; k < st_trainer_ntables(tr); k++)
			if (st_trainer_table(tr, k) == st_trainer_table_for_slot(tr, s)) {
				st[s] = k;
				break;
			}
		assert_true(st[s] >= 0);
	}
}

/* Adds the keys of a batch to touched[table]. */
static void batch_keys(const st_batch_t *b, const int *st, keys_t *touched)
{
	for (uint32_t i = 0; i < st_batch_nkeys(b); i++)
		keys_add(&touched[st[b->key_slot[i]]], b->keys[i]);
}

static uint64_t total_rows(st_trainer_t *tr)
{
	uint64_t n = 0;
	for (int k = 0; k < st_trainer_ntables(tr); k++) {
		st_table_stats_t s;
		st_table_stats(st_trainer_table(tr, k), &s);
		n += s.rows + s.cold_rows;
	}
	return n;
}

/* ---- tests ------------------------------------------------------------------- */

static void test_predict_full_and_delta_match_trainer(void **state)
{
	(void)state;
	char rootA[600], rootB[600];
	snprintf(rootA, sizeof rootA, "%s/a", g_dir);
	snprintf(rootB, sizeof rootB, "%s/b", g_dir);
	st_job_t job;
	make_job(&job, "predict-test");
	st_trainer_t *tr;
	assert_int_equal(st_trainer_create(&tr, &job, NULL), ST_OK);
	assert_int_equal(st_trainer_ntables(tr), 2);
	int st[ST_GEN_N_CAT];
	slot_map(tr, st);

	/* Full export after 3 batches, into two roots. */
	for (uint64_t i = 0; i < 3; i++)
		run_batch(tr, gen_batch(i * BS, BS, i, 0), NULL);
	export_ok(tr, &job, rootA, 0, 3, NULL);
	export_ok(tr, &job, rootB, 0, 3, NULL);
	const uint64_t rows0 = total_rows(tr);
	float *want0 = malloc(sizeof(float) * EVAL_N * EVAL_BS);
	float *want1 = malloc(sizeof(float) * EVAL_N * EVAL_BS);
	float *got = malloc(sizeof(float) * EVAL_N * EVAL_BS);
	assert_true(want0 && want1 && got);
	trainer_eval(tr, want0);

	/* Two more batches; their keys are the touched ones. */
	keys_t touched[2] = { { 0 } }, before[2] = { { 0 } }, after[2] = { { 0 } },
	       deleted[2] = { { 0 } };
	for (uint64_t i = 3; i < 5; i++) {
		st_batch_t *b = gen_batch(i * BS, BS, i, 0);
		batch_keys(b, st, touched);
		run_batch(tr, b, NULL);
	}
	/* Remove every row not used by those batches (a TTL sweep), and list
	 * what went as deleted. */
	for (int k = 0; k < 2; k++) {
		st_table_t *t = st_trainer_table(tr, k);
		st_table_foreach(t, collect, &before[k]);
		assert_true(st_table_evict_older(t, 4, 1) > 0);
		st_table_foreach(t, collect, &after[k]);
		keys_sort(&after[k]);
		for (size_t i = 0; i < before[k].n; i++)
			if (!keys_has(&after[k], before[k].v[i]))
				keys_add(&deleted[k], before[k].v[i]);
		assert_true(deleted[k].n > 100);
	}
	/* Odd cases: a deleted key that never existed (42), a touched key that
	 * has no row (43: written as deleted), a live key also listed as
	 * deleted (written as a row). */
	const uint64_t live = touched[1].v[0];
	keys_add(&deleted[0], 42);
	keys_add(&touched[0], 43);
	keys_add(&deleted[1], live);
	st_export_keys_t dk[2];
	for (int k = 0; k < 2; k++)
		dk[k] = (st_export_keys_t){ touched[k].v, touched[k].n, deleted[k].v, deleted[k].n };
	const st_export_delta_t delta = { 2, dk };
	export_ok(tr, &job, rootB, 1, 5, &delta);
	trainer_eval(tr, want1);
	const uint64_t rows1 = total_rows(tr);
	assert_true(rows1 < rows0);

	/* The delta files say what the writer decided. */
	char path[800];
	st_rows_file_t *f;
	char err[1024] = "";
	snprintf(path, sizeof path, "%s/export-000000000001-delta/table-0.rows", rootB);
	assert_int_equal(st_rows_read(path, &f, err, sizeof err), ST_OK);
	assert_true(f->info.flags & ST_ROWS_DELTA);
	assert_int_equal(f->info.dim, 9);
	assert_int_equal(f->info.state_dim, 0);
	keys_t d0 = { f->deleted, f->info.n_deleted, 0 };
	assert_true(keys_has(&d0, 42) && keys_has(&d0, 43));
	st_rows_file_free(f);
	snprintf(path, sizeof path, "%s/export-000000000001-delta/table-1.rows", rootB);
	assert_int_equal(st_rows_read(path, &f, err, sizeof err), ST_OK);
	assert_int_equal(f->info.dim, 5);
	keys_t r1 = { f->keys, f->info.n_rows, 0 }, d1 = { f->deleted, f->info.n_deleted, 0 };
	assert_true(keys_has(&r1, live) && !keys_has(&d1, live));
	st_rows_file_free(f);

	/* Full export alone: the trainer's scores at export 0. */
	st_predictor_t *p;
	st_predictor_info_t info;
	open_ok(&p, rootA, 1);
	st_predictor_info(p, &info);
	assert_int_equal(info.n_exports, 1);
	assert_int_equal(info.rows, rows0);
	assert_int_equal(info.minibatch, 256);
	assert_int_equal(info.n_tables, 2);
	assert_string_equal(info.model->type, "wdl");
	predictor_eval(p, got);
	assert_memory_equal(got, want0, sizeof(float) * EVAL_N * EVAL_BS);
	st_predictor_close(p);

	/* Full + delta: the trainer's scores now, with one or two workers. */
	for (int threads = 1; threads <= 2; threads++) {
		open_ok(&p, rootB, threads);
		st_predictor_info(p, &info);
		assert_int_equal(info.n_exports, 2);
		assert_int_equal(info.seq, 1);
		assert_int_equal(info.step, 5);
		assert_int_equal(info.rows, rows1);
		assert_string_equal(info.full, "export-000000000000-full");
		assert_string_equal(info.last, "export-000000000001-delta");
		memset(got, 0, sizeof(float) * EVAL_N * EVAL_BS);
		predictor_eval(p, got);
		assert_memory_equal(got, want1, sizeof(float) * EVAL_N * EVAL_BS);
		/* Wrong shapes are refused without scoring. */
		st_batch_t *b;
		assert_int_equal(st_batch_create(&b, 4, 3, ST_GEN_N_CAT, 8), ST_OK);
		assert_int_equal(st_predictor_score(p, b, got), ST_EINVAL);
		st_batch_destroy(b);
		st_predictor_close(p);
	}
	for (int k = 0; k < 2; k++) {
		free(touched[k].v);
		free(before[k].v);
		free(after[k].v);
		free(deleted[k].v);
	}
	free(want0);
	free(want1);
	free(got);
	st_trainer_destroy(tr);
}

/* Most rows on SSD: the full export reads both tiers, the delta finds the
 * touched rows that are only on SSD, and the scores are the trainer's. */
static void test_predict_ssd_tier(void **state)
{
	(void)state;
	enum { SBS = 512 };
	char root[600], ssd[600];
	snprintf(root, sizeof root, "%s/ssd-exports", g_dir);
	snprintf(ssd, sizeof ssd, "%s/ssd", g_dir);
	assert_int_equal(mkdir(ssd, 0700), 0);
	st_job_t job;
	make_job(&job, "predict-ssd");
	job.model.type = (char *)"dnn";
	job.model.slot_dims = NULL;   /* one table: what the trainer's SSD tier supports */
	job.model.n_slot_dims = 0;
	job.batch_size = SBS;
	job.mem_bytes = 2u << 20;     /* ~20k of the ~100k rows in RAM */
	job.ssd_path = ssd;
	job.ssd_file_bytes = 256 << 10;
	job.ssd_queue_depth = 16;
	job.ssd_lru = 0.5;
	st_trainer_t *tr;
	assert_int_equal(st_trainer_create(&tr, &job, NULL), ST_OK);
	assert_int_equal(st_trainer_ntables(tr), 1);
	keys_t first = { 0 }, touched = { 0 };
	int st[ST_GEN_N_CAT] = { 0 };
	for (uint64_t i = 0; i < 16; i++) {
		st_batch_t *b = gen_batch(i * SBS, SBS, i, 0);
		if (i == 0)
			batch_keys(b, st, &first);
		run_batch(tr, b, NULL);
	}
	st_table_stats_t ts;
	st_table_stats(st_trainer_table(tr, 0), &ts);
	assert_true(ts.cold_rows > ts.rows);
	export_ok(tr, &job, root, 0, 16, NULL);
	for (uint64_t i = 16; i < 18; i++) {
		st_batch_t *b = gen_batch(i * SBS, SBS, i, 0);
		batch_keys(b, st, &touched);
		run_batch(tr, b, NULL);
	}
	/* Batch 0's keys, long gone to SSD, are listed as touched too. */
	for (size_t i = 0; i < first.n; i++)
		keys_add(&touched, first.v[i]);
	keys_sort(&touched);
	uint64_t gone[2] = { 1, 2 };
	st_export_keys_t dk = { touched.v, touched.n, gone, 2 };
	const st_export_delta_t delta = { 1, &dk };
	export_ok(tr, &job, root, 1, 18, &delta);
	char path[800], err[1024] = "";
	snprintf(path, sizeof path, "%s/export-000000000001-delta/table-0.rows", root);
	st_rows_file_t *f;
	assert_int_equal(st_rows_read(path, &f, err, sizeof err), ST_OK);
	assert_int_equal(f->info.n_rows, touched.n);   /* every touched key found */
	assert_int_equal(f->info.n_deleted, 2);
	st_rows_file_free(f);

	float *want = malloc(sizeof(float) * EVAL_N * EVAL_BS);
	float *got = malloc(sizeof(float) * EVAL_N * EVAL_BS);
	trainer_eval(tr, want);
	st_predictor_t *p;
	open_ok(&p, root, 1);
	st_predictor_info_t info;
	st_predictor_info(p, &info);
	assert_int_equal(info.rows, total_rows(tr));
	predictor_eval(p, got);
	assert_memory_equal(got, want, sizeof(float) * EVAL_N * EVAL_BS);
	st_predictor_close(p);
	free(want);
	free(got);
	free(first.v);
	free(touched.v);
	st_trainer_destroy(tr);
}

/* Every preset (and mean pooling, no activation, no dense transform,
 * rowwise AdaGrad, FTRL rows, bottom MLP): export after two batches, the
 * predictor scores as the trainer's eval. */
static void test_predict_every_preset(void **state)
{
	(void)state;
	static const char *types[] = { "lr", "dnn", "wdl", "deepfm", "dlrm" };
	float *want = malloc(sizeof(float) * EVAL_N * EVAL_BS);
	float *got = malloc(sizeof(float) * EVAL_N * EVAL_BS);
	for (int i = 0; i < 5; i++) {
		char root[600];
		snprintf(root, sizeof root, "%s/preset-%s", g_dir, types[i]);
		st_job_t job;
		make_job(&job, types[i]);
		job.model.type = (char *)types[i];
		job.model.slot_dims = NULL;
		job.model.n_slot_dims = 0;
		if (!strcmp(types[i], "lr")) {
			job.model.emb_dim = 1;
			job.model.sparse_opt.name = (char *)"ftrl";
			job.model.sparse_opt.beta = 1.0;
		}
		if (!strcmp(types[i], "dlrm")) {
			job.model.n_bottom = 2;
			job.model.bottom[0] = 16;
			job.model.bottom[1] = 8;
		}
		if (!strcmp(types[i], "deepfm")) {
			job.model.pooling = (char *)"mean";
			job.model.activation = (char *)"none";
			job.model.dense_transform = (char *)"none";
			job.model.sparse_opt.rowwise = 1;
		}
		st_trainer_t *tr;
		assert_int_equal(st_trainer_create(&tr, &job, NULL), ST_OK);
		for (uint64_t k = 0; k < 2; k++)
			run_batch(tr, gen_batch(k * BS, BS, k, 0), NULL);
		export_ok(tr, &job, root, 0, 2, NULL);
		trainer_eval(tr, want);
		st_predictor_t *p;
		open_ok(&p, root, 1);
		predictor_eval(p, got);
		if (memcmp(got, want, sizeof(float) * EVAL_N * EVAL_BS))
			fail_msg("%s: the predictor's scores differ from the trainer's", types[i]);
		st_predictor_close(p);
		st_trainer_destroy(tr);
	}
	free(want);
	free(got);
}

/* open must fail with code rc and a message containing each of want. */
static void open_bad(const char *root, int rc, const char *want1, const char *want2)
{
	st_predictor_t *p = (st_predictor_t *)&p;
	char err[1024] = "";
	int r = st_predictor_open(&p, root, NULL, err, sizeof err);
	if (r != rc)
		fail_msg("open %s: %d (%s), wanted %d", root, r, err, rc);
	assert_null(p);
	if (!strstr(err, want1) || (want2 && !strstr(err, want2)))
		fail_msg("message '%s' lacks '%s' / '%s'", err, want1, want2 ? want2 : "");
}

static void flip_byte(const char *path, long off)
{
	FILE *f = fopen(path, "r+b");
	assert_non_null(f);
	assert_int_equal(fseek(f, off, SEEK_SET), 0);
	int c = fgetc(f);
	assert_int_equal(fseek(f, off, SEEK_SET), 0);
	fputc(c ^ 0x55, f);
	fclose(f);
}

static void test_predict_refuses_damage(void **state)
{
	(void)state;
	char root[600], path[800];
	snprintf(root, sizeof root, "%s/damage", g_dir);
	st_job_t job;
	make_job(&job, "predict-damage");
	st_trainer_t *tr;
	assert_int_equal(st_trainer_create(&tr, &job, NULL), ST_OK);
	int st[ST_GEN_N_CAT];
	slot_map(tr, st);
	keys_t touched[2] = { { 0 } };
	st_batch_t *b = gen_batch(0, BS, 0, 0);
	batch_keys(b, st, touched);
	run_batch(tr, b, NULL);

	/* No directory, an empty one, one with only a delta. */
	open_bad(root, ST_ENOENT, "damage: no such directory", NULL);
	assert_int_equal(mkdir(root, 0700), 0);
	open_bad(root, ST_ENOENT, "no complete full export", NULL);
	st_export_keys_t dk[2] = { { touched[0].v, touched[0].n, NULL, 0 },
				   { touched[1].v, touched[1].n, NULL, 0 } };
	const st_export_delta_t delta = { 2, dk };
	export_ok(tr, &job, root, 1, 1, &delta);
	open_bad(root, ST_ENOENT, "no complete full export", NULL);
	snprintf(path, sizeof path, "rm -rf '%s/export-000000000001-delta'", root);
	assert_int_equal(system(path), 0);

	/* Full + delta, then a flipped byte in the delta's table. */
	export_ok(tr, &job, root, 0, 1, NULL);
	export_ok(tr, &job, root, 1, 1, &delta);
	st_predictor_t *p;
	open_ok(&p, root, 1);
	st_predictor_close(p);
	snprintf(path, sizeof path, "%s/export-000000000001-delta/table-0.rows", root);
	flip_byte(path, 100);
	open_bad(root, ST_ECORRUPT, "export export-000000000001-delta: file 'table-0.rows'",
		 "checksum mismatch");
	/* Removing the damaged delta serves the full export again. */
	snprintf(path, sizeof path, "rm -rf '%s/export-000000000001-delta'", root);
	assert_int_equal(system(path), 0);
	open_ok(&p, root, 1);
	st_predictor_close(p);

	/* A delta written by another model. */
	st_job_t other;
	make_job(&other, "predict-other");
	other.model.hidden[1] = 8;
	st_trainer_t *tr2;
	assert_int_equal(st_trainer_create(&tr2, &other, NULL), ST_OK);
	export_ok(tr2, &other, root, 1, 1, &delta);
	open_bad(root, ST_EFORMAT, "export export-000000000001-delta: its strata.model differs from "
		 "that of export-000000000000-full", NULL);
	st_trainer_destroy(tr2);

	/* An export that is not a strata model export (no strata.* metadata). */
	char root2[600];
	snprintf(root2, sizeof root2, "%s/foreign", g_dir);
	st_ckpt_writer_t *w;
	char err[512] = "";
	assert_int_equal(st_ckpt_export_begin(root2, 0, 0, &w, err, sizeof err), ST_OK);
	float v[4] = { 1, 2, 3, 4 };
	st_safetensors_tensor_t t = { .name = "w", .ndim = 1, .shape = { 4 }, .f32 = v };
	st_kv_t meta = { "format", "pt" };
	assert_int_equal(st_ckpt_write_dense(w, "dense.safetensors", &t, 1, &meta, 1), ST_OK);
	st_manifest_t m = { .job_name = "x", .job_hash = "y" };
	assert_int_equal(st_ckpt_commit(w, &m, 0, NULL, NULL), ST_OK);
	st_ckpt_writer_destroy(w);
	open_bad(root2, ST_EFORMAT, "export-000000000000-full: dense.safetensors: no strata.format "
		 "in its metadata: not a strata export", NULL);

	/* The writer's own refusals. */
	const st_export_delta_t short_delta = { 1, dk };
	assert_int_equal(export_tr(tr, &job, root, 9, 1, &short_delta, err, sizeof err),
			 ST_EINVAL);
	assert_non_null(strstr(err, "the delta lists 1 tables, the trainer has 2"));
	assert_int_equal(export_tr(tr, &job, root, 9, -1, NULL, err, sizeof err),
			 ST_EINVAL);
	free(touched[0].v);
	free(touched[1].v);
	st_trainer_destroy(tr);
}

/* Rewrites root/name/manifest.yaml with lineage `lin` (NULL: none, an
 * export as strata wrote it before lineages existed). */
static void set_lineage(const char *root, const char *name, const char *lin)
{
	char path[900], err[512] = "";
	snprintf(path, sizeof path, "%s/%s/manifest.yaml", root, name);
	st_manifest_t *m;
	assert_int_equal(st_manifest_read(path, &m, err, sizeof err), ST_OK);
	free(m->lineage);
	m->lineage = lin ? strdup(lin) : NULL;
	assert_int_equal(st_manifest_write(path, m, NULL, err, sizeof err), ST_OK);
	st_manifest_free(m);
}

/* Two runs (trainers) of one job and model sharing an export directory:
 * each export carries its run's lineage; the writer refuses a delta that
 * would follow another run's export; a chain whose delta comes from
 * another run is refused by the predictor, naming both; chains without
 * lineages (older strata) still load. */
static void test_predict_refuses_foreign_lineage(void **state)
{
	(void)state;
	char root[600], path[900], err[1024] = "";
	snprintf(root, sizeof root, "%s/lineage", g_dir);
	st_job_t job;
	make_job(&job, "predict-lineage");
	st_trainer_t *a, *b;
	assert_int_equal(st_trainer_create(&a, &job, NULL), ST_OK);
	assert_int_equal(st_trainer_create(&b, &job, NULL), ST_OK);
	int st[ST_GEN_N_CAT];
	slot_map(a, st);
	keys_t touched[2] = { { 0 } };
	st_batch_t *batch = gen_batch(0, BS, 0, 0);
	batch_keys(batch, st, touched);
	run_batch(a, batch, NULL);
	run_batch(b, gen_batch(0, BS, 0, 0), NULL);
	st_export_keys_t dk[2] = { { touched[0].v, touched[0].n, NULL, 0 },
				   { touched[1].v, touched[1].n, NULL, 0 } };
	const st_export_delta_t delta = { 2, dk };

	/* Run a: full 0 makes its lineage, delta 1 carries it. */
	assert_string_equal(st_trainer_lineage(a), "");
	export_ok(a, &job, root, 0, 1, NULL);
	assert_int_equal(strlen(st_trainer_lineage(a)), 16);
	export_ok(a, &job, root, 1, 2, &delta);
	st_predictor_t *p;
	open_ok(&p, root, 1);
	st_predictor_close(p);
	/* Run b writes its full export 2 into the same directory. */
	export_ok(b, &job, root, 2, 1, NULL);
	assert_string_not_equal(st_trainer_lineage(a), st_trainer_lineage(b));
	/* Run a's next delta would follow b's export: refused, nothing written. */
	assert_int_equal(export_tr(a, &job, root, 2, 3, &delta, err, sizeof err), ST_EINVAL);
	assert_non_null(strstr(err, "export-000000000002-full was written by another run"));
	assert_non_null(strstr(err, "give each run its own export.dir"));
	snprintf(path, sizeof path, "%s/export-000000000002-delta", root);
	assert_int_equal(access(path, F_OK), -1);
	/* Run b's own delta 3 loads on its full export 2. */
	export_ok(b, &job, root, 3, 2, &delta);
	open_ok(&p, root, 1);
	st_predictor_close(p);
	/* The delta as run a would have written it without the writer's check
	 * (strata before lineages, or two writers racing): refused by the
	 * predictor, naming both runs, not applied. */
	set_lineage(root, "export-000000000003-delta", st_trainer_lineage(a));
	open_bad(root, ST_ECORRUPT, "export export-000000000003-delta was written by another run "
		 "than export-000000000002-full (job 'predict-lineage', lineage ",
		 "give each run its own export.dir");
	/* Old exports carry no lineage: a chain of them loads ... */
	set_lineage(root, "export-000000000003-delta", NULL);
	set_lineage(root, "export-000000000002-full", NULL);
	open_ok(&p, root, 1);
	st_predictor_close(p);
	/* ... but a delta with a lineage never follows a full without one. */
	set_lineage(root, "export-000000000003-delta", st_trainer_lineage(b));
	open_bad(root, ST_ECORRUPT, "lineage (none)", NULL);
	free(touched[0].v);
	free(touched[1].v);
	st_trainer_destroy(a);
	st_trainer_destroy(b);
}

/* ---- exports of several processes ---------------------------------------- */

/* Rewrites export src (one file per table) into dst_root as the export of
 * 2 ranks would be: each table split by owner into table-<k>.rank-<r>-of-2
 * .rows (rows and deleted keys), the dense file, the world in the manifest,
 * through the steps st_trainer_dist_export uses. */
static void split_export(st_trainer_t *tr, const st_job_t *job, const char *src,
			 const char *dst_root, uint64_t seq, int64_t step, int delta)
{
	st_view_t v;
	assert_int_equal(st_trainer_view(tr, job, &v), ST_OK);
	char err[1024] = "", path[900];
	st_ckpt_writer_t *w = NULL;
	if (st_export_begin(&v, dst_root, seq, delta, &w, err, sizeof err) < 0 ||
	    st_export_write_dense(&v, w, seq, err, sizeof err) < 0)
		fail_msg("split export %" PRIu64 ": %s", seq, err);
	char names[2][2][64];
	char *files[2][3];
	for (int k = 0; k < v.n_tables; k++) {
		snprintf(path, sizeof path, "%s/table-%d.rows", src, k);
		st_rows_file_t *f;
		assert_int_equal(st_rows_read(path, &f, err, sizeof err), ST_OK);
		const size_t stride = f->info.dim + f->info.state_dim;
		for (int r = 0; r < 2; r++) {
			st_rows_row_t *rows = calloc(f->info.n_rows + 1, sizeof *rows);
			uint64_t *del = calloc(f->info.n_deleted + 1, sizeof *del);
			assert_true(rows && del);
			size_t n = 0, nd = 0;
			for (size_t i = 0; i < f->info.n_rows; i++)
				if (st_algo_owner_key(f->keys[i], 2) == r)
					rows[n++] = (st_rows_row_t){ f->keys[i], f->last_step[i],
								     f->freq[i], f->vals + i * stride };
			for (size_t i = 0; i < f->info.n_deleted; i++)
				if (st_algo_owner_key(f->deleted[i], 2) == r)
					del[nd++] = f->deleted[i];
			assert_true(n > 0);
			st_export_rows_name(names[r][k], sizeof names[r][k], k, r, 2);
			if (st_ckpt_write_rows(w, names[r][k], &f->info, rows, n, del, nd) < 0)
				fail_msg("%s", st_ckpt_error(w));
			files[r][k] = names[r][k];
			free(rows);
			free(del);
		}
		st_rows_file_free(f);
	}
	files[0][v.n_tables] = (char *)ST_EXPORT_DENSE;
	st_manifest_part_t parts[2] = { { 0, files[0], (size_t)v.n_tables + 1 },
					{ 1, files[1], (size_t)v.n_tables } };
	st_manifest_t world = { .world_size = 2, .owners = 2, .owner_salt = st_algo_owner_salt(),
				.parts = parts, .n_parts = 2 };
	if (st_export_commit(&v, w, seq, step, 0, &world, err, sizeof err) < 0)
		fail_msg("split export %" PRIu64 ": %s", seq, err);
	st_ckpt_writer_destroy(w);
}

/* Exports written by 2 ranks (a shard file per table and rank) load as the
 * one-process export of the same rows: the same scores bit for bit, full
 * and with a delta applied. A rank's missing file or part of the world
 * makes the export incomplete: the predictor refuses it, the verified
 * chain leaves it out. Files with one file per table still load (above). */
static void test_predict_world_shards(void **state)
{
	(void)state;
	char ref[600], world[600], src[900], path[900], err[1024] = "";
	snprintf(ref, sizeof ref, "%s/world-ref", g_dir);
	snprintf(world, sizeof world, "%s/world", g_dir);
	st_job_t job;
	make_job(&job, "predict-world");
	st_trainer_t *tr;
	assert_int_equal(st_trainer_create(&tr, &job, NULL), ST_OK);
	int st[ST_GEN_N_CAT];
	slot_map(tr, st);
	for (uint64_t i = 0; i < 3; i++)
		run_batch(tr, gen_batch(i * BS, BS, i, 0), NULL);
	export_ok(tr, &job, ref, 0, 3, NULL);
	snprintf(src, sizeof src, "%s/export-000000000000-full", ref);
	split_export(tr, &job, src, world, 0, 3, 0);
	keys_t touched[2] = { { 0 } };
	for (uint64_t i = 3; i < 5; i++) {
		st_batch_t *b = gen_batch(i * BS, BS, i, 0);
		batch_keys(b, st, touched);
		run_batch(tr, b, NULL);
	}
	st_export_keys_t dk[2] = { { touched[0].v, touched[0].n, (const uint64_t[]){ 42, 44 }, 2 },
				   { touched[1].v, touched[1].n, NULL, 0 } };
	const st_export_delta_t delta = { 2, dk };
	export_ok(tr, &job, ref, 1, 5, &delta);
	snprintf(src, sizeof src, "%s/export-000000000001-delta", ref);
	split_export(tr, &job, src, world, 1, 5, 1);

	float *want = malloc(sizeof(float) * EVAL_N * EVAL_BS);
	float *got = malloc(sizeof(float) * EVAL_N * EVAL_BS);
	assert_true(want && got);
	st_predictor_t *p, *q;
	open_ok(&p, ref, 1);
	open_ok(&q, world, 2);
	st_predictor_info_t ip, iq;
	st_predictor_info(p, &ip);
	st_predictor_info(q, &iq);
	assert_int_equal(iq.n_exports, 2);
	assert_int_equal(iq.rows, ip.rows);
	predictor_eval(p, want);
	predictor_eval(q, got);
	assert_memory_equal(want, got, sizeof(float) * EVAL_N * EVAL_BS);
	st_predictor_close(p);
	st_predictor_close(q);

	/* Rank 1's file of table 1 gone from the delta: refused, naming it;
	 * the verified chain ends at the full export. */
	snprintf(path, sizeof path, "%s/export-000000000001-delta/table-1.rank-1-of-2.rows", world);
	assert_int_equal(unlink(path), 0);
	open_bad(world, ST_ECORRUPT, "export-000000000001-delta", "table-1.rank-1-of-2.rows");
	st_ckpt_entry_t *e;
	size_t n;
	assert_int_equal(st_ckpt_list_exports(world, 1, &e, &n, NULL, NULL, err, sizeof err),
			 ST_OK);
	assert_int_equal(n, 1);
	assert_string_equal(e[0].name, "export-000000000000-full");
	st_ckpt_entries_free(e, n);

	/* The full export's manifest without rank 1's part: incomplete. */
	snprintf(path, sizeof path, "%s/export-000000000000-full/manifest.yaml", world);
	st_manifest_t *m;
	assert_int_equal(st_manifest_read(path, &m, err, sizeof err), ST_OK);
	assert_int_equal(m->world_size, 2);
	m->n_parts = 1;
	assert_int_equal(st_manifest_write(path, m, NULL, err, sizeof err), ST_OK);
	m->n_parts = 2;
	st_manifest_free(m);
	open_bad(world, ST_ECORRUPT, "export-000000000000-full", "incomplete");
	assert_int_equal(st_ckpt_list_exports(world, 1, &e, &n, NULL, NULL, err, sizeof err),
			 ST_OK);
	assert_int_equal(n, 0);
	st_ckpt_entries_free(e, n);
	free(want);
	free(got);
	free(touched[0].v);
	free(touched[1].v);
	st_trainer_destroy(tr);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_predict_full_and_delta_match_trainer),
		cmocka_unit_test(test_predict_ssd_tier),
		cmocka_unit_test(test_predict_every_preset),
		cmocka_unit_test(test_predict_refuses_damage),
		cmocka_unit_test(test_predict_refuses_foreign_lineage),
		cmocka_unit_test(test_predict_world_shards),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
