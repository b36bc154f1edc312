/* test_presets.c — the presets as Lua functions (stdlib/strata/presets.lua)
 * against their C reference twin (ops/nn/model.c's hand-written builders).
 *
 * A preset job (st.model.dnn{...}) now reaches st_model_create with the
 * layers its Lua function built (cfg->nodes); the same config with no
 * nodes is built by the twin. For every preset and several configurations
 * (wide on and off, dense_transform, pooling, MLP shapes, per-slot emb
 * dims, dlrm's bottom MLP, dcnv2 full and low rank) the two must agree bit
 * for bit: tensor table (names, offsets, shapes, order), initial values,
 * FLOPs, and the loss, predictions and gradients of a few SGD steps on a
 * batch of Criteo shape (13 dense features, 26 slots). Also: the functions
 * called by a job (st.presets.*) give the same models through
 * st.model.graph and can be extended; their errors name the job's line;
 * configs saved by the preset path (model config text, the checkpoint's
 * model string and hash) still load and match.
 *
 * Job files are written to $TMPDIR and loaded with the stdlib of
 * $ST_SOURCE_ROOT (the test changes there). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lang/lang.h"
#include "ops/dump/modelcfg.h"
#include "ops/nn/model.h"
#include "ops/train/checkpoint.h"
#include "runtime/err.h"
#include "presets_util.h"

enum { ND = 13, NS = 26, NEX = 16, STEPS = 3 };

/* A batch of Criteo shape: NEX examples; dense values negative, zero and
 * positive (log1p clamps at 0); one key per slot, a second one (value 0.5)
 * in every third slot, an empty slot 5 in odd examples; keys shared across
 * examples; unique index = the key's number. */
static st_batch_t *make_batch(uint32_t *n_uniq)
{
	st_batch_t *b;
	assert_int_equal(st_batch_create(&b, NEX, ND, NS, NEX * NS * 2), ST_OK);
	b->key_idx = malloc(sizeof(uint32_t) * NEX * NS * 2);
	assert_non_null(b->key_idx);
	uint32_t k = 0;
	for (int i = 0; i < NEX; i++) {
		b->labels[i] = (float)((i * 7 + 3) % 3 == 0);
		for (int d = 0; d < ND; d++)
			b->dense[i * ND + d] = (float)((i * 5 + d * 3) % 11) * 0.7f - 2.0f;
		b->row_off[i] = k;
		for (int s = 0; s < NS; s++) {
			if (s == 5 && i % 2)
				continue;
			for (int j = 0; j < 1 + (s % 3 == 0); j++) {
				uint32_t u = (uint32_t)(s * 4 + (i + j * 2 + s) % 4);
				b->keys[k] = u;
				b->key_slot[k] = (uint16_t)s;
				b->key_val[k] = j ? 0.5f : 1.0f;
				b->key_idx[k] = u;
				k++;
			}
		}
	}
	b->row_off[NEX] = k;
	b->n = NEX;
	b->n_uniq = NS * 4;
	*n_uniq = NS * 4;
	return b;
}


/* Builds cfg a and cfg c for the job's data and checks they are the same
 * model bit for bit: the table, then STEPS steps of SGD (lr 0.1 on the
 * dense parameters and the rows, the same update on both) with the loss,
 * predictions and both gradients compared at every step. */
static void assert_same_model(const st_job_t *job, const st_model_cfg_t *a_cfg,
			      const st_model_cfg_t *c_cfg)
{
	st_model_t *a, *c;
	assert_int_equal(st_model_create(&a, a_cfg, job->train.n_dense, job->train.n_slots,
					 job->seed), ST_OK);
	assert_int_equal(st_model_create(&c, c_cfg, job->train.n_dense, job->train.n_slots,
					 job->seed), ST_OK);
	assert_same_table(a, c, NS);
	size_t np = st_model_nparams(a);
	int rw = st_model_max_row_dim(a);
	uint32_t nu;
	st_batch_t *b = make_batch(&nu);
	float *rows_a = malloc(sizeof(float) * nu * (size_t)rw);
	float *rows_c = malloc(sizeof(float) * nu * (size_t)rw);
	float *ga = malloc(sizeof(float) * np), *gc = malloc(sizeof(float) * np);
	float *ua = malloc(sizeof(float) * nu * (size_t)rw);
	float *uc = malloc(sizeof(float) * nu * (size_t)rw);
	float *ra[NS * 4], *rc[NS * 4], pa[NEX], pc[NEX];
	assert_true(rows_a && rows_c && ga && gc && ua && uc);
	for (uint32_t u = 0; u < nu; u++) {
		ra[u] = rows_a + u * (size_t)rw;
		rc[u] = rows_c + u * (size_t)rw;
		for (int j = 0; j < rw; j++)
			ra[u][j] = rc[u][j] = 0.05f * (float)((u * 7 + (uint32_t)j * 3) % 13) - 0.3f;
	}
	st_model_ws_t *wa, *wc;
	assert_int_equal(st_model_ws_create(&wa, a, NEX), ST_OK);
	assert_int_equal(st_model_ws_create(&wc, c, NEX), ST_OK);
	float *pa_ = st_model_params(a), *pc_ = st_model_params(c);
	for (int step = 0; step < STEPS; step++) {
		memset(ga, 0, sizeof(float) * np);
		memset(gc, 0, sizeof(float) * np);
		memset(ua, 0, sizeof(float) * nu * (size_t)rw);
		memset(uc, 0, sizeof(float) * nu * (size_t)rw);
		double la = st_model_step(a, wa, b, 0, NEX, ra, pa_, 1.0f / NEX, pa, ga, ua, rw);
		double lc = st_model_step(c, wc, b, 0, NEX, rc, pc_, 1.0f / NEX, pc, gc, uc, rw);
		assert_true(la == lc);
		assert_memory_equal(pa, pc, sizeof pa);
		assert_memory_equal(ga, gc, sizeof(float) * np);
		assert_memory_equal(ua, uc, sizeof(float) * nu * (size_t)rw);
		/* A test that cannot fail would pass on a model whose gradient is
		 * all zeros: the step must move something. */
		float gsum = 0;
		for (size_t i = 0; i < np; i++)
			gsum += ga[i] * ga[i];
		assert_true(np == 0 || gsum > 0);
		for (size_t i = 0; i < np; i++) {
			pa_[i] -= 0.1f * ga[i];
			pc_[i] -= 0.1f * gc[i];
		}
		for (size_t i = 0; i < nu * (size_t)rw; i++) {
			rows_a[i] -= 0.1f * ua[i];
			rows_c[i] -= 0.1f * uc[i];
		}
	}
	/* And the forward alone, after the steps. */
	float za[NEX], zc[NEX];
	st_model_forward(a, wa, b, 0, NEX, ra, pa_, za, pa);
	st_model_forward(c, wc, b, 0, NEX, rc, pc_, zc, pc);
	assert_memory_equal(za, zc, sizeof za);
	assert_memory_equal(pa, pc, sizeof pa);
	st_model_ws_destroy(wa);
	st_model_ws_destroy(wc);
	st_batch_destroy(b);
	free(rows_a);
	free(rows_c);
	free(ga);
	free(gc);
	free(ua);
	free(uc);
	st_model_destroy(a);
	st_model_destroy(c);
}

/* The job's preset (Lua-built nodes) against the twin (the same config
 * with no nodes). */
static void check_preset(const char *model)
{
	st_job_t *job = load_job(NULL, model, 1, NULL, NULL);
	assert_true(job->model.n_preset_nodes > 0);
	assert_int_equal(job->model.n_nodes, 0);   /* the config names the preset */
	st_model_cfg_t twin = job->model;
	twin.n_preset_nodes = 0;
	twin.preset_out = 0;
	assert_same_model(job, &job->model, &twin);
	st_job_free(job);
}

static const char *const dims =
	"{ 4, 3, 4, 3, 4, 3, 4, 3, 4, 3, 4, 3, 4, 3, 4, 3, 4, 3, 4, 3, 4, 3, 4, 3, 4, 3 }";

static void test_presets_lr(void **state)
{
	(void)state;
	check_preset("st.model.lr {}");
	check_preset("st.model.lr { dense_transform = 'none' }");
}

static void test_presets_dnn(void **state)
{
	(void)state;
	char buf[512];
	check_preset("st.model.dnn { emb_dim = 4, hidden = { 6, 5 } }");
	check_preset("st.model.dnn { emb_dim = 4, hidden = { 9 }, activation = 'sigmoid', "
		     "dense_transform = 'none', pooling = 'mean' }");
	snprintf(buf, sizeof buf, "st.model.dnn { emb_dim = %s, hidden = { 7, 6, 5 }, "
		 "activation = 'none' }", dims);
	check_preset(buf);
}

static void test_presets_wdl(void **state)
{
	(void)state;
	char buf[512];
	check_preset("st.model.wdl { emb_dim = 4, hidden = { 6, 5 } }");
	snprintf(buf, sizeof buf, "st.model.wdl { emb_dim = %s, hidden = { 8 }, "
		 "activation = 'sigmoid', dense_transform = 'none' }", dims);
	check_preset(buf);
}

static void test_presets_deepfm(void **state)
{
	(void)state;
	check_preset("st.model.deepfm { emb_dim = 4, hidden = { 6, 5 } }");
	check_preset("st.model.deepfm { emb_dim = 3, hidden = { 5, 4, 3 }, activation = "
		     "'sigmoid', dense_transform = 'none', pooling = 'mean' }");
}

static void test_presets_dlrm(void **state)
{
	(void)state;
	/* the default bottom { 64, emb_dim }, a one-layer bottom, a deep one */
	check_preset("st.model.dlrm { emb_dim = 4, hidden = { 6 } }");
	check_preset("st.model.dlrm { emb_dim = 4, bottom = { 4 }, hidden = { 5, 3 }, "
		     "activation = 'sigmoid' }");
	check_preset("st.model.dlrm { emb_dim = 3, bottom = { 7, 6, 3 }, hidden = { 4 }, "
		     "dense_transform = 'none' }");
}

static void test_presets_dcnv2(void **state)
{
	(void)state;
	char buf[512];
	check_preset("st.model.dcnv2 { emb_dim = 4, hidden = { 6 }, cross_layers = 2 }");
	snprintf(buf, sizeof buf, "st.model.dcnv2 { emb_dim = %s, hidden = { 6, 5 }, "
		 "cross_layers = 3, cross_rank = 5, activation = 'sigmoid' }", dims);
	check_preset(buf);
	check_preset("st.model.dcnv2 { emb_dim = 4, hidden = { 6 }, cross_layers = 0 }");
}

/* st.presets.<name>{...} in a job, handed to st.model.graph as it is,
 * builds the preset's model (the presets whose rows a graph lays out the
 * same way: all but lr, whose rows have no embedding). */
static void test_presets_functions_in_graph(void **state)
{
	(void)state;
	static const char *const cases[][2] = {
		{ "dnn", "hidden = { 6, 5 }" },
		{ "wdl", "hidden = { 6 }, dense_transform = 'none'" },
		{ "deepfm", "hidden = { 6, 5 }, activation = 'sigmoid'" },
		{ "dlrm", "bottom = { 5, 4 }, hidden = { 6 }" },
		{ "dcnv2", "hidden = { 6 }, cross_layers = 2, cross_rank = 3" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		char pre[256], gm[256], pm[256];
		snprintf(pre, sizeof pre, "local g = st.presets.%s { %s }", cases[i][0],
			 cases[i][1]);
		snprintf(gm, sizeof gm, "st.model.graph { emb_dim = 4, layers = g.layers, "
			 "output = g.output }");
		snprintf(pm, sizeof pm, "st.model.%s { emb_dim = 4, %s }", cases[i][0],
			 cases[i][1]);
		st_job_t *gj = load_job(pre, gm, 1, NULL, NULL);
		st_job_t *pj = load_job(NULL, pm, 1, NULL, NULL);
		assert_string_equal(gj->model.type, "graph");
		assert_int_equal(gj->model.n_nodes, pj->model.n_preset_nodes);
		assert_int_equal(gj->model.node_out, pj->model.preset_out);
		assert_memory_equal(gj->model.nodes, pj->model.nodes,
				    sizeof(st_model_node_t) * (size_t)pj->model.n_preset_nodes);
		assert_same_model(pj, &gj->model, &pj->model);
		st_job_free(gj);
		st_job_free(pj);
	}
}

/* The example job of docs/models.md: dnn's layers plus an FM term. */
static void test_presets_extend(void **state)
{
	(void)state;
	st_load_opts_t o = { .stdlib_dir = "stdlib", .check_paths = 0 };
	st_job_t *job = NULL;
	st_diag_t d;
	int rc = st_job_load("jobs/preset_extend.lua", &o, &job, &d);
	for (int k = 0; k < d.n; k++)
		fprintf(stderr, "%s\n", d.msg[k]);
	st_diag_free(&d);
	assert_int_equal(rc, ST_OK);
	assert_string_equal(job->model.type, "graph");
	const st_model_node_t *last = &job->model.nodes[job->model.n_nodes - 1];
	assert_int_equal(job->model.node_out, job->model.n_nodes - 1);
	assert_int_equal(last->kind, ST_NODE_ADD);
	assert_int_equal(job->model.nodes[job->model.n_nodes - 2].kind, ST_NODE_FM);
	st_model_t *m;
	assert_int_equal(st_model_create(&m, &job->model, job->train.n_dense, job->train.n_slots,
					 job->seed), ST_OK);
	assert_int_equal(st_model_find_tensor(m, "mlp.0.weight"), 0);
	assert_true(st_model_find_tensor(m, "out.bias") >= 0);
	st_model_destroy(m);
	st_job_free(job);
}

/* Mistakes in a preset function's options name the job's line. */
static void test_presets_errors(void **state)
{
	(void)state;
	static const char *const cases[][3] = {
		/* pre, the model, what the message says */
		{ "local g = st.presets.dnn { hiden = { 4 } }",
		  "st.model.graph { layers = g.layers, output = g.output }",
		  ":1: st.presets.dnn has no option 'hiden' (did you mean 'hidden'?)" },
		{ "local g = st.presets.dnm {}",
		  "st.model.graph { layers = g.layers, output = g.output }",
		  ":1: unknown preset 'dnm' (did you mean 'dnn'?)" },
		{ "local g = st.presets.dnn { hidden = 4 }",
		  "st.model.graph { layers = g.layers, output = g.output }",
		  ":1: st.presets.dnn: hidden must be a list of layer sizes" },
		/* a value out of range: caught with the layer, at the call's line */
		{ "local g = st.presets.dnn { hidden = { 0 } }",
		  "st.model.graph { layers = g.layers, output = g.output }",
		  ":1: model.layers.mlp.sizes[1] must be >= 1, got 0" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		st_diag_t d;
		char *path;
		load_job(cases[i][0], cases[i][1], 0, &d, &path);
		int found = 0;
		for (int k = 0; k < d.n; k++) {
			const char *at = strstr(d.msg[k], path);
			found |= at && strstr(d.msg[k], cases[i][2]) == at + strlen(path);
		}
		if (!found) {
			for (int k = 0; k < d.n; k++)
				fprintf(stderr, "got: %s\n", d.msg[k]);
			fail_msg("no message '%s%s'", path, cases[i][2]);
		}
		st_diag_free(&d);
		unlink(path);
		free(path);
	}
}

/* DIN's data: two dense features, two plain fields, the candidate and the
 * history kept as a sequence (the fields st.model.din's query and keys
 * name; checked against data.train, so the test needs them). */
static const char *const din_data =
	"st.data.csv { path = \"none-*.tsv\", sep = \"\\t\", header = false, columns = { "
	"\"label\", \"dense\", \"dense\", \"cat\", \"cat\", { \"cat\", name = \"cand\" }, "
	"{ \"cat\", name = \"hist\", list = \"^\", max_len = 10, pooling = \"none\" } } }";

/* The two jobs' models are one model: the same nodes, the same saved config
 * text (what checkpoints and exports carry: layers as node lines, since din
 * has no C twin), the same checkpoint description and hash, and the same
 * tensor table with the same initial values. */
static void assert_same_din(st_job_t *a, st_job_t *b)
{
	assert_int_equal(a->train.n_slots, 4);
	assert_same_graph_job(a, b, "attention");
}

/* st.model.din, st.presets.din in st.model.graph, and the graph written by
 * hand (jobs/din_graph.lua's layers) are one model; an option changes it. */
static void test_presets_din(void **state)
{
	(void)state;
	static const char *const cases[][4] = {
		/* st.model.din's options (and st.presets.din's); the hand graph's
		 * attention fields, dense layer, and mlp (NULL: none) */
		{ "query = 'cand', keys = 'hist'",
		  "query = 'cand', keys = 'hist', hidden = { 36 }, activation = 'relu'",
		  "st.layer.dense {}", "{ 'h', sizes = { 200, 80 } }" },
		{ "query = 'cand', keys = 'hist', att_hidden = { 5, 3 }, att_activation = "
		  "'sigmoid', hidden = { 6 }, activation = 'none', dense_transform = 'none'",
		  "query = 'cand', keys = 'hist', hidden = { 5, 3 }, activation = 'sigmoid'",
		  "st.layer.dense { transform = 'none' }", "{ 'h', sizes = { 6 }, activation = 'none' }" },
		{ "query = 'cand', keys = 'hist', att_hidden = {}, hidden = {}",
		  "query = 'cand', keys = 'hist', hidden = {}", "st.layer.dense {}", NULL },
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		char pm[512], pre[512], mlp[256] = "", gm[1024];
		snprintf(pm, sizeof pm, "st.model.din { emb_dim = 4, %s }", cases[i][0]);
		snprintf(pre, sizeof pre, "local g = st.presets.din { %s }", cases[i][0]);
		st_job_t *pj = load_job_data(din_data, NULL, pm, 1, NULL, NULL);
		st_job_t *fj = load_job_data(din_data, pre, "st.model.graph { emb_dim = 4, "
					     "layers = g.layers, output = g.output }", 1, NULL, NULL);
		assert_same_din(pj, fj);
		if (cases[i][3])
			snprintf(mlp, sizeof mlp, "    { 'mlp', st.layer.mlp %s },\n", cases[i][3]);
		snprintf(gm, sizeof gm, "st.model.graph { emb_dim = 4, layers = {\n"
			 "    { 'e', st.layer.embed {} },\n"
			 "    { 'din', st.layer.attention { %s } },\n"
			 "    { 'x', %s },\n"
			 "    { 'h', st.layer.concat { 'e', 'din', 'x' } },\n"
			 "%s"
			 "    { 'out', st.layer.linear { '%s' } },\n"
			 "  }, output = 'out' }",
			 cases[i][1], cases[i][2], mlp, cases[i][3] ? "mlp" : "h");
		st_job_t *gj = load_job_data(din_data, NULL, gm, 1, NULL, NULL);
		assert_same_din(pj, gj);
		st_job_free(gj);
		st_job_free(fj);
		st_job_free(pj);
	}
	/* The test can fail: a different MLP is a different model. */
	st_job_t *a = load_job_data(din_data, NULL, "st.model.din { emb_dim = 4, query = 'cand', "
				    "keys = 'hist' }", 1, NULL, NULL);
	st_job_t *b = load_job_data(din_data, NULL, "st.model.din { emb_dim = 4, query = 'cand', "
				    "keys = 'hist', hidden = { 200, 81 } }", 1, NULL, NULL);
	assert_int_equal(a->model.n_nodes, b->model.n_nodes);
	assert_memory_not_equal(a->model.nodes, b->model.nodes,
				sizeof(st_model_node_t) * (size_t)a->model.n_nodes);
	st_job_free(a);
	st_job_free(b);
}

/* Bad din options: refused at the line that gave them. */
static void test_presets_din_errors(void **state)
{
	(void)state;
	static const char *const cases[][3] = {
		/* pre, the model, what the message says */
		{ NULL, "st.model.din { keys = 'hist' }",
		  ":6: missing required field 'model.query'" },
		{ NULL, "st.model.din { query = 'cand', keys = 'hist', att_hiden = { 4 } }",
		  ":6: unknown field 'att_hiden' in model (did you mean 'att_hidden'?)" },
		{ NULL, "st.model.din { query = 'cand', keys = 'hist', att_activation = 'tanh' }",
		  ":6: model.att_activation must be 'relu', 'sigmoid' or 'none', got 'tanh'" },
		{ NULL, "st.model.din { query = 'cand', keys = 'hist', hidden = { 0 } }",
		  ":6: model.hidden[1] must be >= 1, got 0" },
		/* keys naming no sequence: said at the sequence's line */
		{ NULL, "st.model.din { query = 'cand', keys = 'hsit' }",
		  ":5: data.train field 'hist' has pooling = 'none' (keep the sequence), but "
		  "model.keys is 'hsit'; st.model.din attends over the field its keys name" },
		/* a query data.train does not have: the attention layer's check */
		{ NULL, "st.model.din { query = 'cnad', keys = 'hist' }",
		  ":6: layer 'din': query 'cnad' is no named cat field of data.train (did you "
		  "mean 'cand'?)" },
		{ "local g = st.presets.din { keys = 'hist' }",
		  "st.model.graph { layers = g.layers, output = g.output }",
		  ":1: st.presets.din needs 'query' (query, keys name fields of data.train)" },
		{ "local g = st.presets.din { query = 'cand', keys = 'hist', hiden = { 4 } }",
		  "st.model.graph { layers = g.layers, output = g.output }",
		  ":1: st.presets.din has no option 'hiden' (did you mean 'hidden'?)" },
		{ "local g = st.presets.din { query = 'cand', keys = 'hist', att_hidden = 36 }",
		  "st.model.graph { layers = g.layers, output = g.output }",
		  ":1: st.presets.din: att_hidden must be a list of layer sizes" },
		{ "local g = st.presets.din { query = 'cand', keys = 'hist', att_hidden = { 0 } }",
		  "st.model.graph { layers = g.layers, output = g.output }",
		  ":1: model.layers.din.hidden[1] must be >= 1, got 0" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		st_diag_t d;
		char *path;
		load_job_data(din_data, cases[i][0], cases[i][1], 0, &d, &path);
		int found = 0;
		for (int k = 0; k < d.n; k++) {
			const char *at = strstr(d.msg[k], path);
			found |= at && strstr(d.msg[k], cases[i][2]) == at + strlen(path);
		}
		if (!found) {
			for (int k = 0; k < d.n; k++)
				fprintf(stderr, "got: %s\n", d.msg[k]);
			fail_msg("no message '%s%s'", path, cases[i][2]);
		}
		st_diag_free(&d);
		unlink(path);
		free(path);
	}
}

/* Saved configs: a preset job's model config (the text checkpoints and
 * exports carry) names the preset and holds no layers, as it did before
 * the presets were Lua; read back, it builds with the twin the model the
 * job built from its Lua layers. The checkpoint's model string (whose hash
 * a resume compares) is the one without layers. */
static void test_presets_saved_configs(void **state)
{
	(void)state;
	static const char *const models[] = {
		"st.model.lr {}",
		"st.model.wdl { emb_dim = 4, hidden = { 6, 5 } }",
		"st.model.dlrm { emb_dim = 4, hidden = { 6 } }",
		"st.model.dcnv2 { emb_dim = 4, hidden = { 6 }, cross_layers = 2, cross_rank = 3 }",
	};
	for (size_t i = 0; i < sizeof models / sizeof *models; i++) {
		st_job_t *job = load_job(NULL, models[i], 1, NULL, NULL);
		assert_true(job->model.n_preset_nodes > 0);
		char *text = NULL, err[256] = "";
		assert_int_equal(st_modelcfg_encode(&job->model, &text, err, sizeof err), ST_OK);
		assert_null(strstr(text, "node"));
		st_model_cfg_t back;
		assert_int_equal(st_modelcfg_decode(text, &back, err, sizeof err), ST_OK);
		assert_int_equal(back.n_nodes, 0);
		assert_int_equal(back.n_preset_nodes, 0);
		assert_true(st_modelcfg_equal(&back, &job->model));
		assert_same_model(job, &job->model, &back);
		st_modelcfg_fini(&back);
		free(text);

		char *desc = st_trainer_model_desc(job);
		char h_lua[17], h_twin[17];
		st_trainer_job_hash(job, h_lua);
		int n = job->model.n_preset_nodes;
		job->model.n_preset_nodes = 0;
		char *desc_twin = st_trainer_model_desc(job);
		st_trainer_job_hash(job, h_twin);
		job->model.n_preset_nodes = n;
		assert_string_equal(desc, desc_twin);
		assert_string_equal(h_lua, h_twin);
		assert_null(strstr(desc, "node"));
		free(desc);
		free(desc_twin);
		st_job_free(job);
	}
}

/* A preset's layers that do not fit the preset's rows (a wide layer the
 * preset has no column for, or none where it has one; an embedding for lr,
 * whose rows hold the wide weight alone) are refused at creation, as a
 * config edited by hand would be. */
static void test_presets_layers_must_fit_rows(void **state)
{
	(void)state;
	st_job_t *dnn = load_job(NULL, "st.model.dnn { emb_dim = 4, hidden = { 6 } }", 1, NULL,
				 NULL);
	st_job_t *wdl = load_job(NULL, "st.model.wdl { emb_dim = 4, hidden = { 6 } }", 1, NULL,
				 NULL);
	st_model_t *m;
	st_model_cfg_t c = wdl->model;                  /* wdl's rows, dnn's layers */
	memcpy(c.nodes, dnn->model.nodes, sizeof c.nodes);
	c.n_preset_nodes = dnn->model.n_preset_nodes;
	c.preset_out = dnn->model.preset_out;
	assert_int_equal(st_model_create(&m, &c, ND, NS, 1), ST_EINVAL);
	c = dnn->model;                                 /* dnn's rows, wdl's layers */
	memcpy(c.nodes, wdl->model.nodes, sizeof c.nodes);
	c.n_preset_nodes = wdl->model.n_preset_nodes;
	c.preset_out = wdl->model.preset_out;
	assert_int_equal(st_model_create(&m, &c, ND, NS, 1), ST_EINVAL);
	c = wdl->model;                                 /* lr's rows, wdl's layers */
	c.type = (char *)"lr";
	assert_int_equal(st_model_create(&m, &c, ND, NS, 1), ST_EINVAL);
	c.preset_out = c.n_preset_nodes;                /* an output past the end */
	c.type = wdl->model.type;
	assert_int_equal(st_model_create(&m, &c, ND, NS, 1), ST_EINVAL);
	c.preset_out = wdl->model.preset_out;           /* as loaded: builds */
	assert_int_equal(st_model_create(&m, &c, ND, NS, 1), ST_OK);
	st_model_destroy(m);
	st_job_free(dnn);
	st_job_free(wdl);
}

int main(void)
{
	const char *root = getenv("ST_SOURCE_ROOT");
	if (!root || chdir(root) != 0) {
		fprintf(stderr, "test_presets: set ST_SOURCE_ROOT to the source tree\n");
		return 1;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_presets_lr),
		cmocka_unit_test(test_presets_dnn),
		cmocka_unit_test(test_presets_wdl),
		cmocka_unit_test(test_presets_deepfm),
		cmocka_unit_test(test_presets_dlrm),
		cmocka_unit_test(test_presets_dcnv2),
		cmocka_unit_test(test_presets_functions_in_graph),
		cmocka_unit_test(test_presets_extend),
		cmocka_unit_test(test_presets_errors),
		cmocka_unit_test(test_presets_din),
		cmocka_unit_test(test_presets_din_errors),
		cmocka_unit_test(test_presets_saved_configs),
		cmocka_unit_test(test_presets_layers_must_fit_rows),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
