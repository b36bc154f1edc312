/*
 * mkexport.c — the fixture of predict.sh: trains a small model on generated
 * Criteo data read through the real reader, writes serving exports of the
 * trainer's view through st_export_write (ops/view/export.h), and records
 * what the trainer's own eval said, so the test can compare `strata predict` / `strata eval` with
 * it byte for byte (none of it is checked in).
 *
 *   mkexport DIR  ->  DIR/data/train-00000.tsv, DIR/data/eval.tsv
 *                     DIR/exports/export-000000000000-full/   (after 3 batches)
 *                     DIR/exports/export-000000000001-delta/  (after 6; rows not
 *                                                              used by the last 3
 *                                                              batches removed)
 *                     DIR/expected-full.txt   eval scores at the full export
 *                     DIR/expected.txt        eval scores at the delta
 *                     DIR/expected-eval.txt   "auc X  logloss Y  examples N"
 *
 * Scores are written as `strata predict` writes them (%.9g, one per line)
 * and computed in batches of 4096, its default. Exit 0, or 1 with a message.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/train/view.h"
#include "ops/view/export.h"
#include "ops/gen/gen.h"
#include "ops/read/read.h"
#include "ops/train/trainer.h"
#include "runtime/err.h"
#include "runtime/graph.h"
#include "runtime/store/table.h"

#define TRAIN_BS 1024
#define EVAL_BS 4096   /* strata predict's default --batch */

static int dims[26];

static void make_job(st_job_t *j)
{
	memset(j, 0, sizeof *j);
	j->name = (char *)"mkexport";
	j->seed = 5;
	j->batch_size = TRAIN_BS;
	j->minibatch = 256;
	j->train.n_dense = 13;
	j->train.n_slots = 26;
	j->train_stage.threads = 1;
	j->sync.name = (char *)"async";
	st_model_cfg_t *m = &j->model;
	m->type = (char *)"wdl";
	m->emb_dim = 8;
	for (int s = 0; s < 26; s++)
		dims[s] = s < 13 ? 8 : 4;   /* two tables */
	m->slot_dims = dims;
	m->n_slot_dims = 26;
	m->n_hidden = 2;
	m->hidden[0] = 32;
	m->hidden[1] = 16;
	m->init_scale = 0.05;
	m->sparse_opt = (st_optim_cfg_t){ .name = (char *)"adagrad", .lr = 0.05, .eps = 1e-10,
					  .init_accum = 1e-4 };
	m->dense_opt = (st_optim_cfg_t){ .name = (char *)"adam", .lr = 3e-3, .eps = 1e-8,
					 .beta1 = 0.9, .beta2 = 0.999 };
}

static int fail(const char *what, int rc)
{
	fprintf(stderr, "mkexport: %s (%s)\n", what, st_strerror(rc));
	return 1;
}

/* pull -> train -> push -> dump, as the pipeline would. */
static int run_batch(st_trainer_t *tr, st_batch_t *b)
{
	st_stage_ctx_t ctx = { .stage = "mkexport", .thread_idx = 0, .n_threads = 1 };
	st_batch_t *out;
	int rc = st_trainer_pull_ops.process(tr, &ctx, b, &out);
	if (rc >= 0)
		rc = st_trainer_train_ops.process(tr, &ctx, b, &out);
	if (rc >= 0)
		rc = st_trainer_push_ops.process(tr, &ctx, b, &out);
	st_batch_destroy(b);
	return rc;
}

static st_source_t criteo = { .format = (char *)"criteo", .on_bad = ST_BAD_FAIL, .limit = -1,
			      .n_dense = 13, .n_slots = 26 };

/* The trainer's eval scores of path, in batches of EVAL_BS, to out_path;
 * with metrics_path, also the metrics line of `strata eval`. */
static int eval_file(st_trainer_t *tr, const char *path, const char *out_path,
		     const char *metrics_path)
{
	st_reader_t *r;
	int rc = st_reader_open(&r, &criteo, path);
	if (rc < 0)
		return fail(path, rc);
	FILE *f = fopen(out_path, "w");
	if (!f)
		return fail(out_path, ST_EIO);
	st_trainer_reset_eval(tr);
	st_stage_ctx_t ctx = { .stage = "mkexport", .thread_idx = 0, .n_threads = 1 };
	for (uint64_t seq = 0;; seq++) {
		st_batch_t *b, *o;
		if (st_batch_create(&b, EVAL_BS, 13, 26, EVAL_BS * 27) < 0)
			return fail("batch", ST_ENOMEM);
		int n = st_reader_next(r, b, EVAL_BS);
		if (n <= 0) {
			st_batch_destroy(b);
			if (n < 0)
				return fail(st_reader_error(r), n);
			break;
		}
		b->eval = 1;
		b->seq = seq;
		if ((rc = st_trainer_pull_ops.process(tr, &ctx, b, &o)) < 0 ||
		    (rc = st_trainer_train_ops.process(tr, &ctx, b, &o)) < 0)
			return fail("eval batch", rc);
		for (uint32_t i = 0; i < b->n; i++)
			fprintf(f, "%.9g\n", b->pred[i]);
		st_batch_destroy(b);
	}
	st_reader_close(r);
	if (fclose(f) != 0)
		return fail(out_path, ST_EIO);
	if (metrics_path) {
		double auc, loss;
		uint64_t n;
		if ((rc = st_trainer_eval_result(tr, &auc, &loss, NULL, &n)) < 0)
			return fail("eval result", rc);
		FILE *m = fopen(metrics_path, "w");
		if (!m)
			return fail(metrics_path, ST_EIO);
		fprintf(m, "auc %.6f  logloss %.6f  examples %" PRIu64 "\n", auc, loss, n);
		fclose(m);
	}
	st_trainer_reset_eval(tr);
	return 0;
}

typedef struct keys {
	uint64_t *v;
	size_t n, cap;
} keys_t;

static void keys_add(keys_t *k, uint64_t key)
{
	if (k->n == k->cap) {
		k->cap = k->cap ? 2 * k->cap : 4096;
		if (!(k->v = realloc(k->v, sizeof(uint64_t) * k->cap))) {
			fprintf(stderr, "mkexport: out of memory\n");
			exit(1);
		}
	}
	k->v[k->n++] = key;
}

static void collect(uint64_t key, float *row, void *arg)
{
	(void)row;
	keys_add(arg, key);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: mkexport DIR\n");
		return 1;
	}
	char data[4096], exports[4096], path[4200], path2[4200], path3[4200];
	snprintf(data, sizeof data, "%s/data", argv[1]);
	snprintf(exports, sizeof exports, "%s/exports", argv[1]);
	st_gen_opts_t go = { .dir = data, .rows = 6 * TRAIN_BS, .eval_rows = 3000, .files = 1,
			     .seed = 3, .zipf = 1.1, .vocab = 20000, .threads = 1 };
	int rc = st_gen_write(&go, NULL, NULL);
	if (rc < 0)
		return fail("generating data", rc);
	st_job_t job;
	make_job(&job);
	st_trainer_t *tr;
	if ((rc = st_trainer_create(&tr, &job, NULL)) < 0)
		return fail("trainer", rc);
	const int nt = st_trainer_ntables(tr);
	int st[26];
	for (int s = 0; s < 26; s++)
		for (int k = 0; k < nt; k++)
			if (st_trainer_table(tr, k) == st_trainer_table_for_slot(tr, s))
				st[s] = k;

	snprintf(path, sizeof path, "%s/train-00000.tsv", data);
	st_reader_t *r;
	if ((rc = st_reader_open(&r, &criteo, path)) < 0)
		return fail(path, rc);
	keys_t touched[16] = { { 0 } }, deleted[16] = { { 0 } };
	char err[1024];
	for (uint64_t seq = 0; seq < 6; seq++) {
		st_batch_t *b;
		if (st_batch_create(&b, TRAIN_BS, 13, 26, TRAIN_BS * 27) < 0)
			return fail("batch", ST_ENOMEM);
		int n = st_reader_next(r, b, TRAIN_BS);
		if (n != TRAIN_BS)
			return fail(n < 0 ? st_reader_error(r) : "short train file", n < 0 ? n : ST_EIO);
		b->seq = seq;
		if (seq >= 3)
			for (uint32_t i = 0; i < st_batch_nkeys(b); i++)
				keys_add(&touched[st[b->key_slot[i]]], b->keys[i]);
		if ((rc = run_batch(tr, b)) < 0)
			return fail("train batch", rc);
		if (seq == 2) {
			st_view_t v;
			if (st_trainer_view(tr, &job, &v) < 0 ||
			    st_export_write(&v, exports, 0, 3, NULL, 0, err, sizeof err) < 0) {
				fprintf(stderr, "mkexport: %s\n", err);
				return 1;
			}
			snprintf(path2, sizeof path2, "%s/expected-full.txt", argv[1]);
			snprintf(path3, sizeof path3, "%s/eval.tsv", data);
			if (eval_file(tr, path3, path2, NULL))
				return 1;
		}
	}
	st_reader_close(r);
	/* Rows the last three batches did not use go (a TTL sweep): deleted. */
	st_export_keys_t dk[16];
	for (int k = 0; k < nt; k++) {
		keys_t before = { 0 };
		st_table_t *t = st_trainer_table(tr, k);
		st_table_foreach(t, collect, &before);
		st_table_evict_older(t, 5, 2);
		for (size_t i = 0; i < before.n; i++)
			if (!st_table_find(t, before.v[i]))
				keys_add(&deleted[k], before.v[i]);
		free(before.v);
		dk[k] = (st_export_keys_t){ touched[k].v, touched[k].n, deleted[k].v, deleted[k].n };
	}
	st_export_delta_t delta = { nt, dk };
	st_view_t v;
	if (st_trainer_view(tr, &job, &v) < 0 ||
	    st_export_write(&v, exports, 1, 6, &delta, 0, err, sizeof err) < 0) {
		fprintf(stderr, "mkexport: %s\n", err);
		return 1;
	}
	snprintf(path, sizeof path, "%s/eval.tsv", data);
	snprintf(path2, sizeof path2, "%s/expected.txt", argv[1]);
	snprintf(path3, sizeof path3, "%s/expected-eval.txt", argv[1]);
	if (eval_file(tr, path, path2, path3))
		return 1;
	for (int k = 0; k < nt; k++) {
		free(touched[k].v);
		free(deleted[k].v);
	}
	st_trainer_destroy(tr);
	return 0;
}
