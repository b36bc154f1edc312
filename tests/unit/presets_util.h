/*
 * presets_util.h — what the preset tests share (test_presets.c,
 * test_presets_mmoe.c): writing a job file around a model expression and
 * loading it, and comparing two built models' tensor tables, initial
 * values and nodes. Header-only with static functions (each test is one
 * program); include after <cmocka.h>.
 *
 * Job files are written to $TMPDIR and loaded with the stdlib of the
 * current directory (meson runs the tests in $ST_SOURCE_ROOT).
 */
#ifndef ST_TEST_PRESETS_UTIL_H
#define ST_TEST_PRESETS_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lang/lang.h"
#include "ops/dump/modelcfg.h"
#include "ops/nn/model.h"
#include "ops/train/checkpoint.h"
#include "runtime/err.h"

/* Writes `model` (a Lua expression; `pre` runs before it) into a criteo
 * job file and loads it. Returns the job, or NULL with the messages in
 * *diag when want_ok is 0 (the caller frees them); a job that should load
 * and does not fails the test with its messages. *path gets the file's
 * name (caller frees). */
static const char *const criteo_data = "st.data.criteo { path = \"none-*.tsv\" }";

/* load_job with data.train = `data` (a Lua expression). */
static inline st_job_t *load_job_data(const char *data, const char *pre, const char *model,
			       int want_ok, st_diag_t *diag, char **path)
{
	const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	char *p = malloc(strlen(tmp) + 32);
	assert_non_null(p);
	sprintf(p, "%s/test_presets_XXXXXX.lua", tmp);
	int fd = mkstemps(p, 4);
	assert_true(fd >= 0);
	FILE *f = fdopen(fd, "w");
	assert_non_null(f);
	fprintf(f, "%s\nreturn st.job {\n  name = \"presets\",\n  seed = 7,\n"
		"  data = { train = %s },\n"
		"  model = %s,\n}\n", pre ? pre : "", data, model);
	fclose(f);
	st_load_opts_t o = { .stdlib_dir = "stdlib", .check_paths = 0 };
	st_job_t *job = NULL;
	st_diag_t d;
	int rc = st_job_load(p, &o, &job, &d);
	if (want_ok) {
		for (int k = 0; k < d.n; k++)
			fprintf(stderr, "%s\n", d.msg[k]);
		if (rc != ST_OK)
			fail_msg("job with model %s does not load", model);
		st_diag_free(&d);
	} else {
		assert_int_not_equal(rc, ST_OK);
		*diag = d;
	}
	if (path)
		*path = p;
	else {
		unlink(p);
		free(p);
	}
	return job;
}

static inline st_job_t *load_job(const char *pre, const char *model, int want_ok, st_diag_t *diag,
			  char **path)
{
	return load_job_data(criteo_data, pre, model, want_ok, diag, path);
}

/* The two models (of n_slots slots) have the same tensor table, initial
 * values, row layout, nodes and FLOPs. */
static inline void assert_same_table(st_model_t *a, st_model_t *c, int n_slots)
{
	assert_int_equal(st_model_ntensors(a), st_model_ntensors(c));
	assert_int_equal(st_model_nparams(a), st_model_nparams(c));
	for (int i = 0; i < st_model_ntensors(a); i++) {
		const st_tensor_info_t *ta = st_model_tensor(a, i), *tc = st_model_tensor(c, i);
		assert_string_equal(ta->name, tc->name);
		assert_int_equal(ta->offset, tc->offset);
		assert_int_equal(ta->ndim, tc->ndim);
		assert_int_equal(ta->shape[0], tc->shape[0]);
		assert_int_equal(ta->shape[1], tc->shape[1]);
	}
	assert_memory_equal(st_model_params(a), st_model_params(c),
			    st_model_nparams(a) * sizeof(float));
	assert_int_equal(st_model_has_wide(a), st_model_has_wide(c));
	assert_int_equal(st_model_max_row_dim(a), st_model_max_row_dim(c));
	for (int s = 0; s < n_slots; s++)
		assert_int_equal(st_model_row_dim(a, s), st_model_row_dim(c, s));
	assert_true(st_model_flops_per_example(a) == st_model_flops_per_example(c));
	const st_lgraph_t *ga = st_model_graph(a), *gc = st_model_graph(c);
	assert_int_equal(st_lgraph_nnodes(ga), st_lgraph_nnodes(gc));
	for (int i = 0; i < st_lgraph_nnodes(ga); i++) {
		st_lgraph_node_info_t na, nc;
		assert_int_equal(st_lgraph_node_info(ga, i, &na), ST_OK);
		assert_int_equal(st_lgraph_node_info(gc, i, &nc), ST_OK);
		assert_string_equal(na.kind, nc.kind);
		assert_int_equal(na.width, nc.width);
		assert_int_equal(na.n_in, nc.n_in);
		assert_memory_equal(na.in, nc.in, sizeof(int) * (size_t)na.n_in);
		assert_int_equal(na.nparams, nc.nparams);
	}
}

/* Two jobs whose models are graphs (no C twin: din, mmoe, a graph by hand)
 * are one model: the same nodes, the same saved config text (checkpoints
 * and exports carry the layers as node lines; `saved` must be in it), the
 * same checkpoint description and hash, and the same tensor table with
 * the same initial values. */
static inline void assert_same_graph_job(st_job_t *a, st_job_t *b, const char *saved)
{
	assert_string_equal(a->model.type, "graph");
	assert_string_equal(b->model.type, "graph");
	assert_int_equal(a->model.n_preset_nodes, 0);
	assert_int_equal(b->model.n_preset_nodes, 0);
	assert_true(a->model.n_nodes > 0);
	assert_int_equal(a->model.n_nodes, b->model.n_nodes);
	assert_int_equal(a->model.node_out, b->model.node_out);
	assert_memory_equal(a->model.nodes, b->model.nodes,
			    sizeof(st_model_node_t) * (size_t)a->model.n_nodes);
	char *ta = NULL, *tb = NULL, err[256] = "";
	assert_int_equal(st_modelcfg_encode(&a->model, &ta, err, sizeof err), ST_OK);
	assert_int_equal(st_modelcfg_encode(&b->model, &tb, err, sizeof err), ST_OK);
	assert_string_equal(ta, tb);
	assert_non_null(strstr(ta, saved));   /* the layers are saved */
	st_model_cfg_t back;
	assert_int_equal(st_modelcfg_decode(ta, &back, err, sizeof err), ST_OK);
	assert_true(st_modelcfg_equal(&back, &a->model));
	st_modelcfg_fini(&back);
	free(ta);
	free(tb);
	char *da = st_trainer_model_desc(a), *db = st_trainer_model_desc(b);
	char ha[17], hb[17];
	st_trainer_job_hash(a, ha);
	st_trainer_job_hash(b, hb);
	assert_string_equal(da, db);
	assert_string_equal(ha, hb);
	free(da);
	free(db);
	st_model_t *ma, *mb;
	assert_int_equal(st_model_create(&ma, &a->model, a->train.n_dense, a->train.n_slots,
					 a->seed), ST_OK);
	assert_int_equal(st_model_create(&mb, &b->model, b->train.n_dense, b->train.n_slots,
					 b->seed), ST_OK);
	assert_same_table(ma, mb, a->train.n_slots);
	st_model_destroy(ma);
	st_model_destroy(mb);
}

#endif
