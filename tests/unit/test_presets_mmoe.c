/* test_presets_mmoe.c — the mmoe preset (stdlib/strata/presets.lua,
 * build.mmoe): st.model.mmoe, st.presets.mmoe inside st.model.graph, and
 * the same graph written by hand with one head per label (jobs/mmoe.lua's
 * model, docs/models.md "MMoE") are one model — nodes, heads, the saved
 * config text (node and head lines: mmoe has no C twin), the checkpoint's
 * description and hash, the tensor table and the initial values — for
 * several option sets; a changed option is a different model; labels
 * default to data.train's; bad options are refused at the job's line.
 *
 * The layers themselves are pinned elsewhere: the mmoe and slice nodes
 * against PyTorch (test_parity mmoe_*), several heads and their loss
 * (test_parity mtl_*, test_model); the graph on two labels against PyTorch
 * by test_parity mmoe_mtl_*. Job files are written to $TMPDIR and loaded
 * with the stdlib of $ST_SOURCE_ROOT (the test changes there). */
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

/* Two labels (click, conversion), two dense features, four plain fields. */
static const char *const two_labels =
	"st.data.csv { path = \"none-*.tsv\", sep = \"\\t\", header = false, columns = { "
	"{ \"label\", name = \"click\" }, { \"label\", name = \"conversion\" }, \"dense\", "
	"\"dense\", \"cat\", \"cat\", \"cat\", \"cat\" } }";

/* The same model (presets_util.h), with the same heads. */
static void assert_same_mmoe(st_job_t *a, st_job_t *b)
{
	assert_same_graph_job(a, b, "=mmoe m ");
	assert_true(a->model.n_heads >= 1);
	assert_int_equal(a->model.n_heads, b->model.n_heads);
	for (int h = 0; h < a->model.n_heads; h++) {
		assert_int_equal(a->model.heads[h].node, b->model.heads[h].node);
		assert_int_equal(a->model.heads[h].label, b->model.heads[h].label);
		assert_true(a->model.heads[h].weight == b->model.heads[h].weight);
		assert_string_equal(a->model.heads[h].name, b->model.heads[h].name);
	}
	if (a->model.n_heads > 1) {
		char *ta = NULL, err[256] = "";
		assert_int_equal(st_modelcfg_encode(&a->model, &ta, err, sizeof err), ST_OK);
		assert_non_null(strstr(ta, "\nhead.1="));
		free(ta);
	}
}

/* The hand-written graph of st.model.mmoe with options `mm` (the mmoe
 * layer's fields), `dense` (the dense layer), towers `tower` (an mlp's
 * fields, NULL: none) and head weights w1, w2. */
static void hand_graph(char *out, size_t cap, const char *mm, const char *dense,
		       const char *tower, const char *w1, const char *w2)
{
	char t1[256] = "", t2[256] = "";
	if (tower) {
		snprintf(t1, sizeof t1, "    { 'tower1', st.layer.mlp { 't1', %s } },\n", tower);
		snprintf(t2, sizeof t2, "    { 'tower2', st.layer.mlp { 't2', %s } },\n", tower);
	}
	snprintf(out, cap, "st.model.graph { emb_dim = 4, layers = {\n"
		 "    { 'e', st.layer.embed {} },\n"
		 "    { 'x', %s },\n"
		 "    { 'h', st.layer.concat { 'e', 'x' } },\n"
		 "    { 'm', st.layer.mmoe { 'h', %s, tasks = 2 } },\n"
		 "    { 't1', st.layer.slice { 'm', task = 1 } },\n%s"
		 "    { 'out1', st.layer.linear { '%s' } },\n"
		 "    { 't2', st.layer.slice { 'm', task = 2 } },\n%s"
		 "    { 'out2', st.layer.linear { '%s' } },\n"
		 "  }, heads = { { label = 'click', output = 'out1'%s%s },\n"
		 "              { label = 'conversion', output = 'out2'%s%s } } }",
		 dense, mm, t1, tower ? "tower1" : "t1", t2, tower ? "tower2" : "t2",
		 w1 ? ", weight = " : "", w1 ? w1 : "", w2 ? ", weight = " : "", w2 ? w2 : "");
}

static void test_presets_mmoe_same_model(void **state)
{
	(void)state;
	static const char *const cases[][6] = {
		/* st.model.mmoe's options; the hand graph's mmoe fields, dense
		 * layer, tower mlp fields (NULL: none), head weights */
		{ "", "experts = 4, expert_hidden = { 64, 32 }, activation = 'relu'",
		  "st.layer.dense {}", "sizes = { 16 }", NULL, NULL },
		{ "experts = 2, expert_hidden = { 5 }, hidden = { 6, 3 }, activation = 'sigmoid', "
		  "dense_transform = 'none', weights = { 1, 0.5 }",
		  "experts = 2, expert_hidden = { 5 }, activation = 'sigmoid'",
		  "st.layer.dense { transform = 'none' }", "sizes = { 6, 3 }, activation = 'sigmoid'",
		  "1", "0.5" },
		{ "experts = 3, expert_hidden = { 4, 4, 2 }, hidden = {}, labels = { 'click', "
		  "'conversion' }",
		  "experts = 3, expert_hidden = { 4, 4, 2 }", "st.layer.dense {}", NULL, NULL, NULL },
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		char pm[512], pre[512], gm[2048];
		snprintf(pm, sizeof pm, "st.model.mmoe { emb_dim = 4, %s }", cases[i][0]);
		/* st.presets.mmoe needs the labels (it runs before the data is known) */
		snprintf(pre, sizeof pre, "local g = st.presets.mmoe { labels = { 'click', "
			 "'conversion' }, %s }", strstr(cases[i][0], "labels") ? "" : cases[i][0]);
		if (strstr(cases[i][0], "labels"))
			snprintf(pre, sizeof pre, "local g = st.presets.mmoe { %s }", cases[i][0]);
		st_job_t *pj = load_job_data(two_labels, NULL, pm, 1, NULL, NULL);
		st_job_t *fj = load_job_data(two_labels, pre, "st.model.graph { emb_dim = 4, "
					     "layers = g.layers, heads = g.heads }", 1, NULL, NULL);
		assert_same_mmoe(pj, fj);
		hand_graph(gm, sizeof gm, cases[i][1], cases[i][2], cases[i][3], cases[i][4],
			   cases[i][5]);
		st_job_t *gj = load_job_data(two_labels, NULL, gm, 1, NULL, NULL);
		assert_same_mmoe(pj, gj);
		assert_int_equal(pj->model.n_heads, 2);
		assert_string_equal(pj->model.heads[0].name, "click");
		assert_string_equal(pj->model.heads[1].name, "conversion");
		assert_int_equal(pj->model.heads[1].label, 1);
		st_job_free(gj);
		st_job_free(fj);
		st_job_free(pj);
	}
	/* The test can fail: another tower, another head weight, other labels'
	 * order are different models. */
	st_job_t *a = load_job_data(two_labels, NULL, "st.model.mmoe { emb_dim = 4 }", 1, NULL,
				    NULL);
	st_job_t *b = load_job_data(two_labels, NULL, "st.model.mmoe { emb_dim = 4, hidden = "
				    "{ 17 } }", 1, NULL, NULL);
	assert_int_equal(a->model.n_nodes, b->model.n_nodes);
	assert_memory_not_equal(a->model.nodes, b->model.nodes,
				sizeof(st_model_node_t) * (size_t)a->model.n_nodes);
	st_job_t *c = load_job_data(two_labels, NULL, "st.model.mmoe { emb_dim = 4, weights = "
				    "{ 1, 2 } }", 1, NULL, NULL);
	assert_true(c->model.heads[1].weight == 2.0);
	assert_true(a->model.heads[1].weight == 1.0);
	st_job_t *d = load_job_data(two_labels, NULL, "st.model.mmoe { emb_dim = 4, labels = "
				    "{ 'conversion', 'click' } }", 1, NULL, NULL);
	assert_int_equal(d->model.heads[0].label, 1);
	assert_string_equal(d->model.heads[0].name, "conversion");
	st_job_free(a);
	st_job_free(b);
	st_job_free(c);
	st_job_free(d);
}

/* One label (criteo data): one task, one head, on label 'label'. */
static void test_presets_mmoe_one_label(void **state)
{
	(void)state;
	st_job_t *j = load_job(NULL, "st.model.mmoe { emb_dim = 4, experts = 2 }", 1, NULL, NULL);
	assert_int_equal(j->model.n_heads, 1);
	int found = 0;
	for (int i = 0; i < j->model.n_nodes; i++)
		if (j->model.nodes[i].kind == ST_NODE_MMOE) {
			assert_int_equal(j->model.nodes[i].a, 2);   /* experts */
			assert_int_equal(j->model.nodes[i].b, 1);   /* tasks */
			found = 1;
		}
	assert_true(found);
	st_job_free(j);
}

/* Bad mmoe options: refused at the line that gave them. */
static void test_presets_mmoe_errors(void **state)
{
	(void)state;
	static const char *const cases[][3] = {
		/* pre, the model, what the message says */
		{ NULL, "st.model.mmoe { weights = { 1 } }",
		  ":6: model.weights has 1 entry and the model 2 labels (click, conversion): one "
		  "loss weight per label" },
		{ NULL, "st.model.mmoe { experts = 0 }", ":6: model.experts must be >= 1, got 0" },
		{ NULL, "st.model.mmoe { expert_hiden = { 4 } }",
		  ":6: unknown field 'expert_hiden' in model (did you mean 'expert_hidden'?)" },
		{ NULL, "st.model.mmoe { labels = { 'click', 'conversoin' } }",
		  "data.train has no label 'conversoin'" },
		{ NULL, "st.model.mmoe { labels = { 'click' } }",
		  "model.heads has 1 head, data.train 2 labels (click, conversion): declare one "
		  "head per label" },
		{ NULL, "st.model.mmoe { weights = { 1, -1 } }",
		  ":6: model.weights[2] must be >= 0, got -1" },
		{ "local g = st.presets.mmoe { experts = 2 }",
		  "st.model.graph { layers = g.layers, heads = g.heads }",
		  ":1: st.presets.mmoe needs 'labels'" },
		{ "local g = st.presets.mmoe { labels = 'click' }",
		  "st.model.graph { layers = g.layers, heads = g.heads }",
		  ":1: st.presets.mmoe: labels must be a non-empty list of label names" },
		{ "local g = st.presets.mmoe { labels = { 'click', 'conversion' }, expert_hidden = "
		  "{ 0 } }",
		  "st.model.graph { layers = g.layers, heads = g.heads }",
		  ":1: model.layers.m.expert_hidden[1] must be >= 1, got 0" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		st_diag_t d;
		char *path;
		load_job_data(two_labels, cases[i][0], cases[i][1], 0, &d, &path);
		int found = 0;
		for (int k = 0; k < d.n; k++) {
			const char *at = strstr(d.msg[k], path);
			const char *m = at ? strstr(d.msg[k], cases[i][2]) : NULL;
			/* a message with ":<line>:" is matched right after the path */
			found |= m && (cases[i][2][0] != ':' || m == at + strlen(path));
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

int main(void)
{
	const char *root = getenv("ST_SOURCE_ROOT");
	if (!root || chdir(root) != 0) {
		fprintf(stderr, "test_presets_mmoe: set ST_SOURCE_ROOT to the source tree\n");
		return 1;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_presets_mmoe_same_model),
		cmocka_unit_test(test_presets_mmoe_one_label),
		cmocka_unit_test(test_presets_mmoe_errors),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
