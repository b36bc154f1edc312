/* test_modelcfg.c — the model configuration codec of exports
 * (ops/dump/modelcfg.h): every preset with every field set round-trips
 * exactly (compared field by field, doubles bit for bit), so do the models
 * of the shipped job files as the job language builds them; the text is
 * pinned; decoding refuses unknown, repeated and missing keys and bad
 * values with messages naming the line; encoding refuses what could not
 * be read back.
 *
 * The job files are loaded from $ST_SOURCE_ROOT (the test changes there). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lang/lang.h"
#include "ops/dump/modelcfg.h"
#include "runtime/err.h"

static int same_str(const char *a, const char *b)
{
	return (!a && !b) || (a && b && !strcmp(a, b));
}

static int same_dbl(double a, double b)
{
	return !memcmp(&a, &b, sizeof a);
}

static void check_optim(const st_optim_cfg_t *a, const st_optim_cfg_t *b, const char *what)
{
	if (!a->name) {
		/* Unset groups are not written: they decode as zeros. */
		assert_null(b->name);
		return;
	}
	if (!same_str(a->name, b->name) || a->rowwise != b->rowwise || !same_dbl(a->lr, b->lr) ||
	    !same_dbl(a->l2, b->l2) || !same_dbl(a->eps, b->eps) || !same_dbl(a->beta1, b->beta1) ||
	    !same_dbl(a->beta2, b->beta2) || !same_dbl(a->init_accum, b->init_accum) ||
	    !same_dbl(a->l1, b->l1) || !same_dbl(a->beta, b->beta))
		fail_msg("%s differs after the round trip", what);
}

/* Every field of st_model_cfg_t, one by one (a field the codec forgot
 * fails here even when both encodings agree). */
static void check_same(const st_model_cfg_t *a, const st_model_cfg_t *b)
{
	assert_string_equal(a->type, b->type);
	assert_int_equal(a->emb_dim, b->emb_dim);
	assert_int_equal(a->n_heads, b->n_heads);
	for (int h = 0; h < a->n_heads; h++) {
		assert_int_equal(a->heads[h].node, b->heads[h].node);
		assert_int_equal(a->heads[h].label, b->heads[h].label);
		assert_true(a->heads[h].weight == b->heads[h].weight);
		assert_string_equal(a->heads[h].name, b->heads[h].name);
	}
	assert_int_equal(a->n_slot_pooling, b->n_slot_pooling);
	if (a->n_slot_pooling)
		assert_memory_equal(a->slot_pooling, b->slot_pooling,
				    sizeof(int) * (size_t)a->n_slot_pooling);
	else
		assert_null(b->slot_pooling);
	if (a->slot_dims && a->n_slot_dims) {
		assert_int_equal(a->n_slot_dims, b->n_slot_dims);
		assert_memory_equal(a->slot_dims, b->slot_dims, sizeof(int) * (size_t)a->n_slot_dims);
	} else {
		assert_null(b->slot_dims);
		assert_int_equal(b->n_slot_dims, 0);
	}
	assert_true(same_str(a->pooling, b->pooling));
	assert_int_equal(a->n_hidden, b->n_hidden);
	assert_memory_equal(a->hidden, b->hidden, sizeof(int) * (size_t)a->n_hidden);
	assert_int_equal(a->n_bottom, b->n_bottom);
	assert_memory_equal(a->bottom, b->bottom, sizeof(int) * (size_t)a->n_bottom);
	assert_int_equal(a->n_cross, b->n_cross);
	assert_int_equal(a->cross_rank, b->cross_rank);
	assert_true(same_str(a->activation, b->activation));
	assert_true(same_dbl(a->init_scale, b->init_scale));
	check_optim(&a->sparse_opt, &b->sparse_opt, "sparse_opt");
	check_optim(&a->dense_opt, &b->dense_opt, "dense_opt");
	assert_int_equal(a->admit_min_count, b->admit_min_count);
	assert_true(same_dbl(a->admit_prob, b->admit_prob));
	assert_int_equal(a->ttl_steps, b->ttl_steps);
	assert_true(same_str(a->optimizer, b->optimizer));
	assert_true(same_dbl(a->lr, b->lr));
	assert_true(same_dbl(a->lr_dense, b->lr_dense));
	assert_true(same_dbl(a->l2, b->l2));
	assert_true(same_dbl(a->init_accum, b->init_accum));
	assert_true(same_str(a->dense_transform, b->dense_transform));
	/* a graph's layers (0 for the presets) */
	assert_int_equal(a->n_nodes, b->n_nodes);
	assert_int_equal(a->node_out, b->node_out);
	for (int i = 0; i < a->n_nodes; i++) {
		const st_model_node_t *x = &a->nodes[i], *y = &b->nodes[i];
		assert_int_equal(x->kind, y->kind);
		assert_string_equal(x->name, y->name);
		assert_int_equal(x->n_in, y->n_in);
		assert_memory_equal(x->in, y->in, sizeof(int) * (size_t)x->n_in);
		assert_int_equal(x->n_sizes, y->n_sizes);
		assert_memory_equal(x->sizes, y->sizes, sizeof(int) * (size_t)x->n_sizes);
		/* a and b are written only for the kinds that read them */
		assert_int_equal(x->a, y->a);
		assert_int_equal(x->b, y->b);
		assert_int_equal(x->c, y->c);
	}
}

/* encode -> decode -> same fields, and encode again -> same text. */
static void roundtrip(const st_model_cfg_t *c)
{
	char *t1 = NULL, *t2 = NULL, err[256] = "";
	int rc = st_modelcfg_encode(c, &t1, err, sizeof err);
	if (rc != ST_OK)
		fail_msg("encode %s: %s", c->type, err);
	st_model_cfg_t d;
	rc = st_modelcfg_decode(t1, &d, err, sizeof err);
	if (rc != ST_OK)
		fail_msg("decode %s: %s\n%s", c->type, err, t1);
	check_same(c, &d);
	assert_true(st_modelcfg_equal(c, &d));
	assert_int_equal(st_modelcfg_encode(&d, &t2, err, sizeof err), ST_OK);
	assert_string_equal(t1, t2);
	st_modelcfg_fini(&d);
	st_modelcfg_fini(&d);   /* safe twice */
	free(t1);
	free(t2);
}

static int dims26[26], pool26[26];

/* A preset with every field set to a value that is not its zero, and
 * doubles that need all 17 digits. */
static void make_cfg(st_model_cfg_t *m, const char *type, int variant)
{
	memset(m, 0, sizeof *m);
	m->type = (char *)type;
	m->emb_dim = !strcmp(type, "lr") ? 1 : 8 + variant;
	if (variant == 1) {
		for (int i = 0; i < 26; i++)
			dims26[i] = i % 3 ? 8 : 4;
		m->slot_dims = dims26;
		m->n_slot_dims = 26;
		for (int i = 0; i < 26; i++)
			pool26[i] = i % 3;       /* model, sum, mean */
		m->slot_pooling = pool26;
		m->n_slot_pooling = 26;
	}
	m->pooling = (char *)(variant ? "mean" : "sum");
	m->n_hidden = variant == 2 ? 16 : 3;
	for (int i = 0; i < m->n_hidden; i++)
		m->hidden[i] = 400 - 7 * i;
	if (!strcmp(type, "dlrm")) {
		m->n_bottom = 2;
		m->bottom[0] = 32;
		m->bottom[1] = m->emb_dim;
	}
	m->activation = (char *)(variant == 2 ? "sigmoid" : "relu");
	m->init_scale = 0.1 / 3;
	m->sparse_opt = (st_optim_cfg_t){ .name = (char *)"adagrad", .rowwise = variant == 1,
					  .lr = 0.05, .l2 = 1e-5 / 3, .eps = 1e-10,
					  .beta1 = 0.9, .beta2 = 0.999, .init_accum = 1e-4,
					  .l1 = 0.25, .beta = 1.0 };
	if (variant != 2)   /* variant 2: only the legacy fields */
		m->dense_opt = (st_optim_cfg_t){ .name = (char *)"adam", .lr = 3e-3, .eps = 1e-8,
						 .beta1 = 0.8, .beta2 = 0.99 };
	else
		memset(&m->sparse_opt, 0, sizeof m->sparse_opt);
	m->admit_min_count = 3;
	m->admit_prob = 0.7;
	m->ttl_steps = UINT64_C(18446744073709551615);
	m->optimizer = (char *)"ftrl";
	m->lr = 0.2;
	m->lr_dense = -0.0;
	m->l2 = 1e-300;
	m->init_accum = 0.1;
	m->dense_transform = (char *)(variant ? "none" : "log1p");
}

static void test_modelcfg_roundtrip_presets(void **state)
{
	(void)state;
	static const char *types[] = { "lr", "dnn", "wdl", "deepfm", "dlrm" };
	for (int t = 0; t < 5; t++)
		for (int v = 0; v < 3; v++) {
			st_model_cfg_t c;
			make_cfg(&c, types[t], v);
			roundtrip(&c);
		}
	/* A zeroed config with only a type: optional fields stay unset. */
	st_model_cfg_t z;
	memset(&z, 0, sizeof z);
	z.type = (char *)"dnn";
	roundtrip(&z);
}

/* dcnv2's cross fields round-trip; they are written only when nonzero, so
 * the text of every other preset is what it was before they existed. */
static void test_modelcfg_roundtrip_dcnv2(void **state)
{
	(void)state;
	for (int v = 0; v < 3; v++) {
		st_model_cfg_t c;
		make_cfg(&c, "dcnv2", v);
		c.n_cross = 3;
		c.cross_rank = v;   /* 0 = full rank */
		roundtrip(&c);
	}
	st_model_cfg_t c;
	make_cfg(&c, "dnn", 0);
	char *text = NULL;
	assert_int_equal(st_modelcfg_encode(&c, &text, NULL, 0), ST_OK);
	assert_null(strstr(text, "cross"));
	free(text);
	c.n_cross = 2;
	assert_int_equal(st_modelcfg_encode(&c, &text, NULL, 0), ST_OK);
	assert_non_null(strstr(text, "\nn_cross=2\n"));
	assert_null(strstr(text, "cross_rank"));
	free(text);
}

/* The models of every job file strata ships and of the valid test jobs, as
 * the job language fills them in. */
static void test_modelcfg_roundtrip_jobs(void **state)
{
	(void)state;
	static const char *pats[] = { "jobs/*.lua", "tests/lua/good_*.lua" };
	int n = 0;
	for (int p = 0; p < 2; p++) {
		glob_t g;
		assert_int_equal(glob(pats[p], 0, NULL, &g), 0);
		for (size_t i = 0; i < g.gl_pathc; i++) {
			st_load_opts_t o = { .stdlib_dir = "stdlib", .check_paths = 0 };
			st_job_t *job = NULL;
			st_diag_t d;
			int rc = st_job_load(g.gl_pathv[i], &o, &job, &d);
			for (int k = 0; k < d.n; k++)
				fprintf(stderr, "%s: %s\n", g.gl_pathv[i], d.msg[k]);
			st_diag_free(&d);
			assert_int_equal(rc, ST_OK);
			roundtrip(&job->model);
			st_job_free(job);
			n++;
		}
		globfree(&g);
	}
	assert_true(n >= 8);
}

/* The text itself (docs/formats.md shows it). */
static void test_modelcfg_text(void **state)
{
	(void)state;
	st_model_cfg_t c;
	memset(&c, 0, sizeof c);
	c.type = (char *)"dnn";
	c.emb_dim = 8;
	c.n_hidden = 2;
	c.hidden[0] = 64;
	c.hidden[1] = 32;
	c.activation = (char *)"relu";
	c.init_scale = 0.05;
	c.dense_opt = (st_optim_cfg_t){ .name = (char *)"adam", .lr = 0.001, .eps = 1e-8,
					.beta1 = 0.9, .beta2 = 0.999 };
	char *t, err[128];
	assert_int_equal(st_modelcfg_encode(&c, &t, err, sizeof err), ST_OK);
	assert_string_equal(t,
		"type=dnn\n"
		"emb_dim=8\n"
		"hidden=64,32\n"
		"bottom=\n"
		"activation=relu\n"
		"init_scale=0.050000000000000003\n"
		"dense_opt.name=adam\n"
		"dense_opt.rowwise=0\n"
		"dense_opt.lr=0.001\n"
		"dense_opt.l2=0\n"
		"dense_opt.eps=1e-08\n"
		"dense_opt.beta1=0.90000000000000002\n"
		"dense_opt.beta2=0.999\n"
		"dense_opt.init_accum=0\n"
		"dense_opt.l1=0\n"
		"dense_opt.beta=0\n"
		"admit_min_count=0\n"
		"admit_prob=0\n"
		"ttl_steps=0\n"
		"lr=0\n"
		"lr_dense=0\n"
		"l2=0\n"
		"init_accum=0\n");
	free(t);
}

/* decode(text) must fail with ST_EFORMAT and a message containing want. */
static void bad(const char *text, const char *want)
{
	st_model_cfg_t c;
	char err[256] = "";
	int rc = st_modelcfg_decode(text, &c, err, sizeof err);
	if (rc != ST_EFORMAT)
		fail_msg("decode accepted (rc %d):\n%s", rc, text);
	if (!strstr(err, want))
		fail_msg("message '%s' does not contain '%s'", err, want);
	/* Nothing is left to free; fini stays safe. */
	assert_null(c.type);
	st_modelcfg_fini(&c);
}

#define BASE "type=dnn\nemb_dim=8\nhidden=4\nbottom=\ninit_scale=0\nadmit_min_count=0\n" \
	"admit_prob=0\nttl_steps=0\nlr=0\nlr_dense=0\nl2=0\ninit_accum=0\n"

static void test_modelcfg_decode_is_strict(void **state)
{
	(void)state;
	st_model_cfg_t c;
	char err[256];
	assert_int_equal(st_modelcfg_decode(BASE, &c, err, sizeof err), ST_OK);
	assert_int_equal(c.n_hidden, 1);
	assert_null(c.pooling);
	assert_null(c.slot_dims);
	st_modelcfg_fini(&c);

	bad(BASE "bogus=1\n", "line 13: unknown key 'bogus'");
	bad(BASE "emb_dim=8\n", "line 13: emb_dim given twice (first on line 2)");
	bad("type=dnn\nemb_dim=8\n", "hidden is missing");
	bad("type=fm\n", "line 1: type 'fm' is not one of lr, dnn, wdl, deepfm, dlrm");
	bad(BASE "pooling=max\n", "pooling 'max' is not one of sum, mean");
	bad(BASE "activation=gelu\n", "activation 'gelu'");
	bad(BASE "dense_transform=log\n", "dense_transform 'log'");
	bad(BASE "optimizer=rmsprop\n", "optimizer 'rmsprop' is not one of sgd, adagrad, adam, ftrl");
	bad("type=dnn\nemb_dim=8x\n", "line 2: emb_dim '8x' is not an integer >= 0");
	bad("type=dnn\nemb_dim=-1\n", "emb_dim '-1'");
	bad("type=dnn\nemb_dim= 8\n", "emb_dim ' 8'");
	bad("type=dnn\nemb_dim=99999999999\n", "emb_dim '99999999999'");
	bad("type=dnn\nhidden=4,0\n", "line 2: hidden '4,0' is not a comma-separated list");
	bad("type=dnn\nhidden=4,,2\n", "hidden '4,,2'");
	bad("type=dnn\nhidden=1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17\n", "at most 16");
	bad("type=dnn\nslot_dims=\n", "slot_dims '' is not");
	bad("type=dnn\ninit_scale=nan\n", "line 2: init_scale 'nan' is not a finite number");
	bad("type=dnn\ninit_scale=1e999\n", "init_scale '1e999'");
	bad("type=dnn\ninit_scale=0.5 \n", "init_scale '0.5 '");
	bad("type=dnn\nttl_steps=-1\n", "ttl_steps '-1' is not an unsigned 64-bit integer");
	bad("type=dnn\nttl_steps=18446744073709551616\n", "ttl_steps");
	bad(BASE "sparse_opt.rowwise=2\n", "sparse_opt.rowwise '2' is not 0 or 1");
	bad(BASE "sparse_opt.name=sgd\n", "sparse_opt.rowwise is missing (the other sparse_opt.* keys are given)");
	bad(BASE "\n", "line 13: empty line");
	bad("type=dnn\nemb_dim\n", "line 2: 'emb_dim' is not key=value");
	bad("", "type is missing");
}

static void test_modelcfg_encode_refuses(void **state)
{
	(void)state;
	st_model_cfg_t c;
	char *t = (char *)"untouched", err[256] = "";
	make_cfg(&c, "dnn", 0);
	c.activation = (char *)"relu\ntype=lr";
	assert_int_equal(st_modelcfg_encode(&c, &t, err, sizeof err), ST_EINVAL);
	assert_null(t);
	assert_non_null(strstr(err, "activation has a line break"));
	make_cfg(&c, "dnn", 0);
	c.lr = NAN;
	assert_int_equal(st_modelcfg_encode(&c, &t, err, sizeof err), ST_EINVAL);
	assert_non_null(strstr(err, "lr is nan, not a finite number"));
	make_cfg(&c, "dnn", 0);
	c.n_hidden = 17;
	assert_int_equal(st_modelcfg_encode(&c, &t, err, sizeof err), ST_EINVAL);
	assert_non_null(strstr(err, "17 hidden layers"));
	make_cfg(&c, "dnn", 0);
	c.type = NULL;
	assert_int_equal(st_modelcfg_encode(&c, &t, err, sizeof err), ST_EINVAL);
	assert_non_null(strstr(err, "type is not set"));
	/* Configs that differ in one field are not equal. */
	st_model_cfg_t a, b;
	make_cfg(&a, "wdl", 1);
	make_cfg(&b, "wdl", 1);
	assert_true(st_modelcfg_equal(&a, &b));
	b.hidden[2]++;
	assert_false(st_modelcfg_equal(&a, &b));
}

/* A graph model's layers round-trip as node.<i> lines after every other
 * key (pinned text), and the decoder refuses node lines out of order, with
 * an input that is not an earlier node, or of an unknown kind, and a graph
 * without its nodes. */
static void test_modelcfg_graph_nodes(void **state)
{
	(void)state;
	st_model_cfg_t c;
	make_cfg(&c, "graph", 0);
	static const struct { int kind; const char *name; int n_in, in[4], a, b; } ls[] = {
		{ ST_NODE_DENSE, "x", 0, { 0 }, 1, 0 },
		{ ST_NODE_LINEAR, "dense", 1, { 0 }, 1, 0 },
		{ ST_NODE_EMBED, "e", 0, { 0 }, 0, 0 },
		{ ST_NODE_CONCAT, "x0", 2, { 2, 0 }, 0, 0 },
		{ ST_NODE_CROSS, "c", 1, { 3 }, 3, 8 },
		{ ST_NODE_MLP, "mlp", 1, { 4 }, 2, 0 },
		{ ST_NODE_LINEAR, "out", 1, { 5 }, 1, 0 },
		{ ST_NODE_WIDE, "w", 0, { 0 }, 0, 0 },
		{ ST_NODE_FM, "f", 1, { 2 }, 26, 0 },
		{ ST_NODE_DOT, "d", 1, { 2 }, 26, 0 },
		{ ST_NODE_ADD, "sum", 4, { 6, 7, 1, 8 }, 0, 0 },
	};
	for (int i = 0; i < (int)(sizeof ls / sizeof *ls); i++) {
		st_model_node_t *nd = &c.nodes[i];
		nd->kind = ls[i].kind;
		strcpy(nd->name, ls[i].name);
		nd->n_in = ls[i].n_in;
		memcpy(nd->in, ls[i].in, sizeof nd->in[0] * 4);
		nd->a = ls[i].a;
		nd->b = ls[i].b;
	}
	c.nodes[5].n_sizes = 2;
	c.nodes[5].sizes[0] = 64;
	c.nodes[5].sizes[1] = 32;
	c.n_nodes = (int)(sizeof ls / sizeof *ls);
	c.node_out = 10;
	roundtrip(&c);
	char *text = NULL;
	assert_int_equal(st_modelcfg_encode(&c, &text, NULL, 0), ST_OK);
	assert_non_null(strstr(text, "\nnode_out=10\nnode.0=dense x log1p=1\n"
				     "node.1=linear dense in=0 size=1\nnode.2=embed e\n"
				     "node.3=concat x0 in=2,0\nnode.4=cross c in=3 layers=3 rank=8\n"
				     "node.5=mlp mlp in=4 sizes=64,32 act=sigmoid\n"
				     "node.6=linear out in=5 size=1\nnode.7=wide w\n"
				     "node.8=fm f in=2 fields=26\nnode.9=dot d in=2 fields=26\n"
				     "node.10=add sum in=6,7,1,8\n"));
	free(text);
	/* encode refuses a name decode would refuse */
	strcpy(c.nodes[0].name, "a b");
	assert_int_equal(st_modelcfg_encode(&c, &text, NULL, 0), ST_EINVAL);
	assert_null(text);
	/* the presets write no node lines */
	make_cfg(&c, "dnn", 0);
	assert_int_equal(st_modelcfg_encode(&c, &text, NULL, 0), ST_OK);
	assert_null(strstr(text, "node"));
	free(text);

	bad(BASE "node.1=embed e\n", "line 13: node.1 is not node.0");
	bad(BASE "node.0=embed e\nnode.1=linear o in=1 size=1\n", "line 14: node.1 is not");
	bad(BASE "node.0=attention a\n", "line 13: node.0 is not '<kind> <name>");
	bad(BASE "node.0=embed\n", "node.0 is not");
	bad(BASE "node.0=embed 0e\n", "node.0 is not");
	bad(BASE "node.0=embed e.w\n", "node.0 is not");
	bad(BASE "node.0=embed abcdefghijklmnopq\n", "node.0 is not");   /* 17 characters */
	bad(BASE "node.0=embed e rank=x\n", "node.0 is not");
	bad(BASE "node.0=mlp m sizes=4 act=gelu\n", "node.0 is not");
	bad("type=graph\nemb_dim=8\nhidden=\nbottom=\ninit_scale=0\nadmit_min_count=0\n"
	    "admit_prob=0\nttl_steps=0\nlr=0\nlr_dense=0\nl2=0\ninit_accum=0\n",
	    "a graph model needs node.<i> lines");
}

/* An attention layer (DIN) round-trips as "attention <name> query=<slot>
 * keys=<slot>[ sizes=...] act=<act>", with or without hidden sizes, and a
 * slot_pooling of 3 (none) beside it; a line without both slots, or with
 * the same slot twice, is refused. */
static void test_modelcfg_attention_node(void **state)
{
	(void)state;
	st_model_cfg_t c;
	make_cfg(&c, "graph", 0);
	for (int s = 0; s < 26; s++)
		pool26[s] = s == 25 ? ST_POOLING_NONE : ST_POOLING_MODEL;
	c.slot_pooling = pool26;
	c.n_slot_pooling = 26;
	memset(c.nodes, 0, sizeof c.nodes);
	c.nodes[0] = (st_model_node_t){ .kind = ST_NODE_EMBED, .name = "e" };
	c.nodes[1] = (st_model_node_t){ .kind = ST_NODE_ATTENTION, .name = "din", .a = 3,
					.b = 25, .c = 2, .n_sizes = 2, .sizes = { 36, 8 } };
	c.nodes[2] = (st_model_node_t){ .kind = ST_NODE_CONCAT, .name = "x", .n_in = 2,
					.in = { 0, 1 } };
	c.nodes[3] = (st_model_node_t){ .kind = ST_NODE_LINEAR, .name = "out", .n_in = 1,
					.in = { 2 }, .a = 1 };
	c.n_nodes = 4;
	c.node_out = 3;
	roundtrip(&c);
	char *text = NULL;
	assert_int_equal(st_modelcfg_encode(&c, &text, NULL, 0), ST_OK);
	assert_non_null(strstr(text, "\nnode.1=attention din query=3 keys=25 sizes=36,8 "
				     "act=sigmoid\n"));
	free(text);
	c.nodes[1].n_sizes = 0;   /* no hidden layer: the linear map to 1 alone */
	c.nodes[1].c = 0;
	roundtrip(&c);
	assert_int_equal(st_modelcfg_encode(&c, &text, NULL, 0), ST_OK);
	assert_non_null(strstr(text, "\nnode.1=attention din query=3 keys=25 act=none\n"));
	free(text);
	bad(BASE "node.0=attention a query=1\n", "node.0 is not");
	bad(BASE "node.0=attention a keys=1\n", "node.0 is not");
	bad(BASE "node.0=attention a query=1 keys=1\n", "node.0 is not");
	bad(BASE "node.0=attention a query=1 keys=2 act=gelu\n", "node.0 is not");
}

/* An mmoe round-trips as "mmoe <name> in=i experts=E tasks=T sizes=...
 * act=<act>" and a slice as "slice <name> in=i offset=o width=w"; lines
 * missing those keys, or with the other kind's keys, are refused. */
static void test_modelcfg_mmoe_nodes(void **state)
{
	(void)state;
	st_model_cfg_t c;
	make_cfg(&c, "graph", 0);
	memset(c.nodes, 0, sizeof c.nodes);
	c.nodes[0] = (st_model_node_t){ .kind = ST_NODE_EMBED, .name = "e" };
	c.nodes[1] = (st_model_node_t){ .kind = ST_NODE_MMOE, .name = "m", .n_in = 1,
					.in = { 0 }, .a = 4, .b = 2, .c = 1, .n_sizes = 2,
					.sizes = { 64, 32 } };
	c.nodes[2] = (st_model_node_t){ .kind = ST_NODE_SLICE, .name = "t1", .n_in = 1,
					.in = { 1 }, .a = 32, .b = 32 };
	c.nodes[3] = (st_model_node_t){ .kind = ST_NODE_LINEAR, .name = "out", .n_in = 1,
					.in = { 2 }, .a = 1 };
	c.n_nodes = 4;
	c.node_out = 3;
	roundtrip(&c);
	char *text = NULL;
	assert_int_equal(st_modelcfg_encode(&c, &text, NULL, 0), ST_OK);
	assert_non_null(strstr(text, "\nnode.1=mmoe m in=0 experts=4 tasks=2 sizes=64,32 "
				     "act=relu\nnode.2=slice t1 in=1 offset=32 width=32\n"));
	free(text);
	bad(BASE "node.0=mmoe m experts=2 sizes=4\n", "node.0 is not");
	bad(BASE "node.0=mmoe m tasks=2 sizes=4\n", "node.0 is not");
	bad(BASE "node.0=mmoe m experts=2 tasks=2 sizes=4 act=gelu\n", "node.0 is not");
	bad(BASE "node.0=mmoe m offset=2 width=2 sizes=4\n", "node.0 is not");
	bad(BASE "node.0=slice s offset=1\n", "node.0 is not");
	bad(BASE "node.0=slice s experts=1 tasks=1\n", "node.0 is not");
}

/* A multi-task graph's heads survive encode/decode (checkpoints and exports
 * rebuild them); a one-head config writes no head line; malformed head
 * lines are refused with their line. */
static void test_modelcfg_heads(void **state)
{
	(void)state;
	st_model_cfg_t c;
	make_cfg(&c, "graph", 0);
	memset(c.nodes, 0, sizeof c.nodes);
	c.nodes[0] = (st_model_node_t){ .kind = ST_NODE_EMBED, .name = "e" };
	c.nodes[1] = (st_model_node_t){ .kind = ST_NODE_LINEAR, .name = "ctr", .n_in = 1,
					.in = { 0 }, .a = 1 };
	c.nodes[2] = (st_model_node_t){ .kind = ST_NODE_LINEAR, .name = "cvr", .n_in = 1,
					.in = { 0 }, .a = 1 };
	c.n_nodes = 3;
	c.node_out = 1;
	char *text = NULL;
	assert_int_equal(st_modelcfg_encode(&c, &text, NULL, 0), ST_OK);
	assert_null(strstr(text, "head."));
	free(text);
	c.n_heads = 2;
	c.heads[0] = (st_model_head_t){ .node = 1, .label = 0, .weight = 1.0, .name = "click" };
	c.heads[1] = (st_model_head_t){ .node = 2, .label = 1, .weight = 0.1 / 3,
					.name = "conversion" };
	roundtrip(&c);
	assert_int_equal(st_modelcfg_encode(&c, &text, NULL, 0), ST_OK);
	assert_non_null(strstr(text, "\nhead.0=1 0 1 click\nhead.1=2 1 0.033333333333333333 "
				     "conversion\n"));
	free(text);
	c.heads[1].weight = -1;
	assert_int_equal(st_modelcfg_encode(&c, &text, NULL, 0), ST_EINVAL);
	bad(BASE "head.0=0 0 1 click\n", "head.0's layer 0 is no node");
	bad(BASE "head.1=0 0 1 click\n", "head.1 is not head.0");
	bad(BASE "head.0=0 0 0 click\n", "head.0 is not head.0");
	bad(BASE "head.0=0 0 1\n", "head.0 is not head.0");
}

int main(void)
{
	const char *root = getenv("ST_SOURCE_ROOT");
	if (!root || chdir(root) != 0) {
		fprintf(stderr, "test_modelcfg: set ST_SOURCE_ROOT to the source tree\n");
		return 1;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_modelcfg_roundtrip_presets),
		cmocka_unit_test(test_modelcfg_roundtrip_dcnv2),
		cmocka_unit_test(test_modelcfg_roundtrip_jobs),
		cmocka_unit_test(test_modelcfg_text),
		cmocka_unit_test(test_modelcfg_decode_is_strict),
		cmocka_unit_test(test_modelcfg_encode_refuses),
		cmocka_unit_test(test_modelcfg_graph_nodes),
		cmocka_unit_test(test_modelcfg_attention_node),
		cmocka_unit_test(test_modelcfg_mmoe_nodes),
		cmocka_unit_test(test_modelcfg_heads),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
