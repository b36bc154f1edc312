/*
 * test_parity.c — the whole-model test: every preset × optimizer against the
 * PyTorch golden fixtures of tests/reference (made by make_fixtures.py; see
 * README.md there for what each fixture holds).
 *
 * For each fixture:
 *  - step1:   st_model_forward / st_model_step on minibatch 0 with the
 *             initial parameters: logits, mean loss, the gradient of every
 *             dense tensor and of every touched sparse row;
 *  - direct:  20 steps of st_model_step + st_optim_update (one call per
 *             dense tensor and per touched row, Adam's t = step number),
 *             then every dense tensor and row;
 *  - trainer: the same 20 steps through the trainer's real path (pull →
 *             train with 1 worker → push, one batch = one minibatch), then
 *             every dense tensor and row, with the allreduce and the
 *             async policy (the same thing with one worker); batch 0's
 *             predictions must be those of the initial parameters.
 *
 * Fixtures are found under $ST_SOURCE_ROOT/tests/reference/fixtures (meson
 * sets it); CI needs no PyTorch. The fixture reader is included below as
 * source so that the one-line test registration of tests/unit/meson.build
 * suffices.
 *
 * Tolerances are atol + rtol·|ref| (STYLE 9):
 *  - after one step, logits / loss / gradients: float32 sums of at most ~60
 *    products (the widest layer input) evaluated in a different order by
 *    sgemm than by PyTorch: each value carries a relative error of a few
 *    1e-7; rtol 1e-4 leaves a margin of >100×; atol 1e-6 covers gradients
 *    that are sums of cancelling terms of size ~0.1 (0.1 × 60 × 6e-8 ≈ 4e-7).
 *  - after 20 steps: those differences compound through 20 updates.
 *    sgd is linear in g, so they stay near the gradient's relative error
 *    times lr·steps: atol 1e-5, rtol 1e-4. adagrad / adam / ftrl divide by
 *    a running norm of g, so a coordinate whose gradients are tiny (a
 *    nearly dead unit) turns a relative error in g into the same relative
 *    error in an update of size lr: atol 5e-5, rtol 5e-4.
 *  Measured with OpenBLAS 0.3.21 against torch 1.13 (ST_PARITY_VERBOSE=1
 *  prints every maximum): step 1 at most 4.8e-7 (a deepfm logit of ~3),
 *  after 20 steps at most 1.8e-7 — the bounds leave ~100× for other BLAS
 *  kernels and compilers, and are far below a real bug (a wrong pair
 *  order, a missed l2 or bias correction moves values by 1e-3 or more).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lang/job.h"
#include "ops/nn/model.h"
#include "ops/optim/optim.h"
#include "runtime/batch.h"
#include "runtime/err.h"

#include "ops/train/trainer.h"
#include "runtime/store/table.h"

#include "tests/reference/fixture.c"


/* "din": a layer graph (jobs/din.lua) with DIN's target attention, built
 * by din_graph from the fixture's cfg.din; "mmoe": a layer graph
 * (jobs/mmoe_graph.lua) with MMoE and two task towers, built by mmoe_graph
 * from cfg.mmoe. */
/* "mtl": a layer graph with two heads (jobs/mtl.lua's shape), built by
 * mtl_graph; labels [n × 2], logits and predictions [n × 2]. "mmoe_mtl":
 * st.model.mmoe's graph on two labels — mmoe's graph with each tower's
 * logit the head of its label (mmoe_graph with cfg.heads). */
static const char *const presets[] = { "lr", "dnn", "wdl", "deepfm", "dlrm", "dcnv2",
				       "din", "mmoe", "mtl", "mmoe_mtl" };
/* "multihot": sgd on list fields pooled per slot (sum or mean, overriding
 * the preset's pooling), the reference pooled by nn.EmbeddingBag with
 * per-sample offsets (make_fixtures.py, MULTIHOT). */
static const char *const optims[] = { "sgd", "adagrad", "adagrad_row", "adam", "ftrl",
				      "multihot" };
#define N_PRESETS ((int)(sizeof presets / sizeof presets[0]))
#define N_OPTIMS ((int)(sizeof optims / sizeof optims[0]))

/* Everything one fixture needs on the C side. */
typedef struct par {
	char name[64];
	st_fixture_t *fx;
	st_job_t job;              /* filled by hand; strings point into fx */
	int slot_pooling[8];       /* job.model.slot_pooling when the fixture has it */
	st_model_t *m;
	int row_dim, n_dense, n_slots, steps;
	int sum_loss;              /* lr: the summed loss, else the mean */
	int n_heads;               /* logits per example (mtl: 2, one per label) */
	size_t n_rows;             /* rows in the fixture */
	const uint64_t *row_keys;
	float *rows;               /* [n_rows × row_dim], working copy */
	float *row_state;          /* direct path: optimizer state per row */
	size_t row_state_floats;
} par_t;

/* ---- tolerances (see the header comment) ---------------------------------- */

static int close_enough(double got, double ref, double atol, double rtol)
{
	return fabs(got - ref) <= atol + rtol * fabs(ref) && !isnan(got);
}

/* Compares got[n] with ref[n]; prints the first few mismatches; returns the
 * number of them. */
static int compare(const char *fix, const char *what, const float *got, const float *ref,
		   size_t n, double atol, double rtol)
{
	int bad = 0;
	double worst = 0;

	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)got[i] - ref[i]);
		if (d > worst)
			worst = d;
		if (!close_enough(got[i], ref[i], atol, rtol)) {
			if (bad < 5)
				fprintf(stderr, "%s: %s[%zu] = %.9g, PyTorch %.9g (|diff| %.3g)\n",
					fix, what, i, got[i], ref[i], d);
			bad++;
		}
	}
	if (getenv("ST_PARITY_VERBOSE"))
		fprintf(stderr, "%s: %-28s max |diff| %.3g over %zu\n", fix, what, worst, n);
	return bad;
}

/* ---- building the C side from a fixture ------------------------------------ */

static void opt_cfg(const st_fixture_t *fx, const char *tag, st_optim_cfg_t *o)
{
	char key[64];
	size_t n;

	snprintf(key, sizeof key, "opt.%s.name", tag);
	o->name = (char *)st_fixture_str(fx, key);
	snprintf(key, sizeof key, "opt.%s.params", tag);
	const double *p = st_fixture_f64(fx, key, &n);
	assert_non_null(o->name);
	assert_non_null(p);
	assert_int_equal(n, 9);
	o->rowwise = (int)p[0];
	o->lr = p[1];
	o->l2 = p[2];
	o->eps = p[3];
	o->beta1 = p[4];
	o->beta2 = p[5];
	o->init_accum = p[6];
	o->l1 = p[7];
	o->beta = p[8];
}

static uint32_t u32_of(const st_fixture_t *fx, const char *name)
{
	size_t n;
	const uint32_t *v = st_fixture_u32(fx, name, &n);

	assert_non_null(v);
	assert_int_equal(n, 1);
	return v[0];
}

/* The din fixtures' graph (models.DIN): embed e (every slot but the
 * sequence), attention "din" over cfg.din = { query slot, key slot,
 * activation, hidden... }, dense x, concat(e, din, x), mlp "mlp" of
 * cfg.hidden with the preset's activation, linear "out". */
static void din_graph(const st_fixture_t *fx, st_model_cfg_t *c)
{
	size_t n;
	const uint32_t *d = st_fixture_u32(fx, "cfg.din", &n);
	assert_non_null(d);
	assert_true(n >= 3 && n - 3 <= 16);
	st_model_node_t *nd = c->nodes;
	memset(c->nodes, 0, sizeof c->nodes);
	nd[0] = (st_model_node_t){ .kind = ST_NODE_EMBED, .name = "e" };
	nd[1] = (st_model_node_t){ .kind = ST_NODE_ATTENTION, .name = "din", .a = (int)d[0],
				   .b = (int)d[1], .c = (int)d[2], .n_sizes = (int)n - 3 };
	for (size_t k = 3; k < n; k++)
		nd[1].sizes[k - 3] = (int)d[k];
	nd[2] = (st_model_node_t){ .kind = ST_NODE_DENSE, .name = "x",
				   .a = !strcmp(c->dense_transform, "log1p") };
	nd[3] = (st_model_node_t){ .kind = ST_NODE_CONCAT, .name = "h", .n_in = 3,
				   .in = { 0, 1, 2 } };
	nd[4] = (st_model_node_t){ .kind = ST_NODE_MLP, .name = "mlp", .n_in = 1, .in = { 3 },
				   .n_sizes = c->n_hidden,
				   .a = !strcmp(c->activation, "relu") ? 1
					: !strcmp(c->activation, "sigmoid") ? 2 : 0 };
	memcpy(nd[4].sizes, c->hidden, sizeof(int) * (size_t)c->n_hidden);
	nd[5] = (st_model_node_t){ .kind = ST_NODE_LINEAR, .name = "out", .n_in = 1,
				   .in = { 4 }, .a = 1 };
	c->n_nodes = 6;
	c->node_out = 5;
	c->type = "graph";
}

/* The mmoe fixtures' graph (models.MMoEGraph): embed e, dense x, concat h,
 * mmoe "m" over h from cfg.mmoe = { experts, tasks, expert activation,
 * expert sizes... }, then per task t < 2 a slice of its columns, mlp
 * "tower<t>" of cfg.hidden with the preset's activation and linear "out<t>";
 * the logit adds out0 and out1 — or, with record cfg.heads (mmoe_mtl),
 * out0 and out1 are the heads of labels 0 (click) and 1 (conversion) with
 * its loss weights. */
static void mmoe_graph(const st_fixture_t *fx, st_model_cfg_t *c)
{
	size_t n;
	const uint32_t *d = st_fixture_u32(fx, "cfg.mmoe", &n);
	assert_non_null(d);
	assert_true(n >= 4 && n - 3 <= 16);
	assert_int_equal(d[1], 2);   /* the graph below has two towers */
	const int h = (int)d[n - 1];
	const int act = !strcmp(c->activation, "relu") ? 1 : !strcmp(c->activation, "sigmoid") ? 2 : 0;
	st_model_node_t *nd = c->nodes;
	memset(c->nodes, 0, sizeof c->nodes);
	nd[0] = (st_model_node_t){ .kind = ST_NODE_EMBED, .name = "e" };
	nd[1] = (st_model_node_t){ .kind = ST_NODE_DENSE, .name = "x",
				   .a = !strcmp(c->dense_transform, "log1p") };
	nd[2] = (st_model_node_t){ .kind = ST_NODE_CONCAT, .name = "h", .n_in = 2,
				   .in = { 0, 1 } };
	nd[3] = (st_model_node_t){ .kind = ST_NODE_MMOE, .name = "m", .n_in = 1, .in = { 2 },
				   .a = (int)d[0], .b = (int)d[1], .c = (int)d[2],
				   .n_sizes = (int)n - 3 };
	for (size_t k = 3; k < n; k++)
		nd[3].sizes[k - 3] = (int)d[k];
	for (int t = 0; t < 2; t++) {
		st_model_node_t *s = &nd[4 + t], *tw = &nd[6 + 2 * t], *o = &nd[7 + 2 * t];
		*s = (st_model_node_t){ .kind = ST_NODE_SLICE, .n_in = 1, .in = { 3 },
					.a = t * h, .b = h };
		snprintf(s->name, sizeof s->name, "s%d", t);
		*tw = (st_model_node_t){ .kind = ST_NODE_MLP, .n_in = 1, .in = { 4 + t },
					 .n_sizes = c->n_hidden, .a = act };
		snprintf(tw->name, sizeof tw->name, "tower%d", t);
		memcpy(tw->sizes, c->hidden, sizeof(int) * (size_t)c->n_hidden);
		*o = (st_model_node_t){ .kind = ST_NODE_LINEAR, .n_in = 1, .in = { 6 + 2 * t },
					.a = 1 };
		snprintf(o->name, sizeof o->name, "out%d", t);
	}
	c->type = "graph";
	const double *w = st_fixture_f64(fx, "cfg.heads", &n);
	if (w) {
		assert_int_equal(n, 2);
		c->n_nodes = 10;
		c->node_out = 7;
		c->n_heads = 2;
		c->heads[0] = (st_model_head_t){ .node = 7, .label = 0, .weight = w[0],
						 .name = "click" };
		c->heads[1] = (st_model_head_t){ .node = 9, .label = 1, .weight = w[1],
						 .name = "conversion" };
		return;
	}
	nd[10] = (st_model_node_t){ .kind = ST_NODE_ADD, .name = "logit", .n_in = 2,
				    .in = { 7, 9 } };
	c->n_nodes = 11;
	c->node_out = 10;
}

/* The mtl fixtures' graph (models.MTL): embed e, dense x, concat(e, x),
 * mlp "mlp" of cfg.hidden, then heads "ctr" (label 0, "click") and "cvr"
 * (label 1, "conversion"), linear to 1 each, with the loss weights of
 * cfg.heads (f64). */
static void mtl_graph(const st_fixture_t *fx, st_model_cfg_t *c)
{
	size_t n;
	const double *w = st_fixture_f64(fx, "cfg.heads", &n);
	assert_non_null(w);
	assert_int_equal(n, 2);
	st_model_node_t *nd = c->nodes;
	memset(c->nodes, 0, sizeof c->nodes);
	nd[0] = (st_model_node_t){ .kind = ST_NODE_EMBED, .name = "e" };
	nd[1] = (st_model_node_t){ .kind = ST_NODE_DENSE, .name = "x",
				   .a = !strcmp(c->dense_transform, "log1p") };
	nd[2] = (st_model_node_t){ .kind = ST_NODE_CONCAT, .name = "h", .n_in = 2,
				   .in = { 0, 1 } };
	nd[3] = (st_model_node_t){ .kind = ST_NODE_MLP, .name = "mlp", .n_in = 1, .in = { 2 },
				   .n_sizes = c->n_hidden,
				   .a = !strcmp(c->activation, "relu") ? 1
					: !strcmp(c->activation, "sigmoid") ? 2 : 0 };
	memcpy(nd[3].sizes, c->hidden, sizeof(int) * (size_t)c->n_hidden);
	nd[4] = (st_model_node_t){ .kind = ST_NODE_LINEAR, .name = "ctr", .n_in = 1,
				   .in = { 3 }, .a = 1 };
	nd[5] = (st_model_node_t){ .kind = ST_NODE_LINEAR, .name = "cvr", .n_in = 1,
				   .in = { 3 }, .a = 1 };
	c->n_nodes = 6;
	c->node_out = 4;
	c->n_heads = 2;
	c->heads[0] = (st_model_head_t){ .node = 4, .label = 0, .weight = w[0], .name = "click" };
	c->heads[1] = (st_model_head_t){ .node = 5, .label = 1, .weight = w[1],
					 .name = "conversion" };
	c->type = "graph";
}

/* Loads the fixture, fills the job by hand, creates the model and loads the
 * initial dense tensors (by name, shapes checked) and rows. */
static void par_open(par_t *p, const char *name)
{
	char path[4096];
	const char *root = getenv("ST_SOURCE_ROOT");
	size_t n;

	memset(p, 0, sizeof *p);
	snprintf(p->name, sizeof p->name, "%s", name);
	snprintf(path, sizeof path, "%s/tests/reference/fixtures/%s.bin", root ? root : ".", name);
	assert_int_equal(st_fixture_load(&p->fx, path), 0);
	const st_fixture_t *fx = p->fx;

	st_job_t *j = &p->job;
	st_model_cfg_t *c = &j->model;
	j->seed = 1;
	j->epochs = 1;
	p->n_dense = (int)u32_of(fx, "cfg.n_dense");
	p->n_slots = (int)u32_of(fx, "cfg.n_slots");
	p->row_dim = (int)u32_of(fx, "cfg.row_dim");
	p->steps = (int)u32_of(fx, "cfg.steps");
	const char *loss = st_fixture_str(fx, "cfg.loss");
	assert_non_null(loss);
	p->sum_loss = !strcmp(loss, "sum");
	j->train.n_dense = p->n_dense;
	j->train.n_slots = p->n_slots;
	j->batch_size = j->minibatch = (int)u32_of(fx, "cfg.minibatch");
	c->type = (char *)st_fixture_str(fx, "cfg.preset");
	c->activation = (char *)st_fixture_str(fx, "cfg.activation");
	c->pooling = (char *)st_fixture_str(fx, "cfg.pooling");
	c->dense_transform = (char *)st_fixture_str(fx, "cfg.dense_transform");
	c->emb_dim = (int)u32_of(fx, "cfg.emb_dim");
	/* per-slot pooling (enum st_pooling), only in the multihot fixtures */
	const uint32_t *sp = st_fixture_u32(fx, "cfg.slot_pooling", &n);
	if (sp) {
		assert_int_equal(n, (size_t)p->n_slots);
		for (size_t i = 0; i < n && i < 8; i++)
			p->slot_pooling[i] = (int)sp[i];
		c->slot_pooling = p->slot_pooling;
		c->n_slot_pooling = (int)n;
	}
	const uint32_t *h = st_fixture_u32(fx, "cfg.hidden", &n);
	assert_non_null(h);
	c->n_hidden = (int)n;
	for (size_t i = 0; i < n; i++)
		c->hidden[i] = (int)h[i];
	h = st_fixture_u32(fx, "cfg.bottom", &n);
	assert_non_null(h);
	c->n_bottom = (int)n;
	for (size_t i = 0; i < n; i++)
		c->bottom[i] = (int)h[i];
	/* dcnv2: cross layers and rank (0 = full), only in its fixtures */
	h = st_fixture_u32(fx, "cfg.cross", &n);
	if (h) {
		assert_int_equal(n, 2);
		c->n_cross = (int)h[0];
		c->cross_rank = (int)h[1];
	}
	p->n_heads = 1;
	if (!strcmp(c->type, "din"))
		din_graph(fx, c);
	else if (!strcmp(c->type, "mmoe"))
		mmoe_graph(fx, c);
	else if (!strcmp(c->type, "mmoe_mtl")) {
		mmoe_graph(fx, c);
		p->n_heads = 2;
	}
	else if (!strcmp(c->type, "mtl")) {
		mtl_graph(fx, c);
		p->n_heads = 2;
	}
	c->init_scale = 0;
	c->admit_min_count = 0;
	c->admit_prob = 1.0;
	opt_cfg(fx, "sparse", &c->sparse_opt);
	opt_cfg(fx, "dense", &c->dense_opt);
	c->optimizer = c->sparse_opt.name;
	c->lr = c->sparse_opt.lr;
	c->lr_dense = c->dense_opt.lr;
	c->l2 = c->sparse_opt.l2;
	c->init_accum = c->sparse_opt.init_accum;

	assert_int_equal(st_model_create(&p->m, c, p->n_dense, p->n_slots, 7), ST_OK);
	for (int s = 0; s < p->n_slots; s++)
		assert_int_equal(st_model_row_dim(p->m, s), p->row_dim);

	/* Dense tensors: the model's set must equal the fixture's set. */
	int n_fx = 0;
	for (int i = 0; i < fx->n; i++)
		n_fx += !strncmp(fx->recs[i].name, "init.dense.", 11);
	assert_int_equal(st_model_ntensors(p->m), n_fx);
	float *params = st_model_params(p->m);
	for (int i = 0; i < fx->n; i++) {
		const st_fx_rec_t *r = &fx->recs[i];
		if (strncmp(r->name, "init.dense.", 11))
			continue;
		int ti = st_model_find_tensor(p->m, r->name + 11);
		if (ti < 0)
			fprintf(stderr, "%s: model has no tensor %s\n", name, r->name + 11);
		assert_true(ti >= 0);
		const st_tensor_info_t *t = st_model_tensor(p->m, ti);
		assert_int_equal(t->ndim, r->ndim);
		size_t cnt = 1;
		for (int d = 0; d < t->ndim; d++) {
			assert_int_equal(t->shape[d], r->dims[d]);
			cnt *= (size_t)t->shape[d];
		}
		assert_int_equal(cnt, r->count);
		memcpy(params + t->offset, r->data, cnt * sizeof(float));
	}

	p->row_keys = st_fixture_u64(fx, "init.rows.keys", &p->n_rows);
	const float *rv = st_fixture_f32(fx, "init.rows.values", &n);
	assert_non_null(p->row_keys);
	assert_non_null(rv);
	assert_int_equal(n, p->n_rows * (size_t)p->row_dim);
	p->rows = malloc(n * sizeof(float));
	assert_non_null(p->rows);
	memcpy(p->rows, rv, n * sizeof(float));
}

static void par_close(par_t *p)
{
	st_model_destroy(p->m);
	free(p->rows);
	free(p->row_state);
	st_fixture_free(p->fx);
}

static float *row_of(par_t *p, uint64_t key)
{
	for (size_t i = 0; i < p->n_rows; i++)
		if (p->row_keys[i] == key)
			return p->rows + i * (size_t)p->row_dim;
	fail_msg("%s: key %#llx not in the fixture's rows", p->name, (unsigned long long)key);
	return NULL;
}

static size_t row_index(par_t *p, uint64_t key)
{
	return (size_t)(row_of(p, key) - p->rows) / (size_t)p->row_dim;
}

/* Minibatch i of the fixture as an st_batch_t, with uniq / key_idx filled
 * in order of first appearance (what pull does). Caller destroys. */
static st_batch_t *par_batch(par_t *p, int i)
{
	char key[64];
	size_t n_lab, n_off, nk, n2;
	const st_fixture_t *fx = p->fx;
	st_batch_t *b;

#define REC(field, type) (snprintf(key, sizeof key, "batch.%d." field, i), \
			  st_fixture_##type(fx, key, &n2))
	const float *labels = REC("labels", f32);
	n_lab = n2 / (size_t)p->n_heads;   /* mtl: [n × 2] */
	const uint32_t *row_off = REC("row_off", u32);
	n_off = n2;
	const uint64_t *keys = REC("keys", u64);
	nk = n2;
	const uint16_t *slots = REC("slots", u16);
	assert_int_equal(n2, nk);
	const float *vals = REC("vals", f32);
	assert_int_equal(n2, nk);
	const float *dense = REC("dense", f32);
	assert_int_equal(n2, n_lab * (size_t)p->n_dense);
#undef REC
	assert_non_null(labels);
	assert_non_null(row_off);
	assert_non_null(keys);
	assert_non_null(slots);
	assert_non_null(vals);
	assert_non_null(dense);
	assert_int_equal(n_off, n_lab + 1);
	assert_int_equal(row_off[n_lab], nk);

	assert_int_equal(st_batch_create(&b, (uint32_t)n_lab, (uint32_t)p->n_dense,
					 (uint32_t)p->n_slots, (uint32_t)nk + 1), ST_OK);
	assert_int_equal(st_batch_set_labels(b, (uint32_t)p->n_heads), ST_OK);
	b->n = (uint32_t)n_lab;
	b->seq = (uint64_t)i;
	memcpy(b->labels, labels, n_lab * (size_t)p->n_heads * sizeof(float));
	memcpy(b->dense, dense, n_lab * p->n_dense * sizeof(float));
	memcpy(b->row_off, row_off, n_off * sizeof(uint32_t));
	memcpy(b->keys, keys, nk * sizeof(uint64_t));
	memcpy(b->key_slot, slots, nk * sizeof(uint16_t));
	memcpy(b->key_val, vals, nk * sizeof(float));
	return b;
}

static void par_uniq(st_batch_t *b)
{
	uint32_t nk = st_batch_nkeys(b);

	b->uniq = malloc((nk + 1) * sizeof(uint64_t));
	b->key_idx = malloc((nk + 1) * sizeof(uint32_t));
	assert_non_null(b->uniq);
	assert_non_null(b->key_idx);
	b->n_uniq = 0;
	for (uint32_t k = 0; k < nk; k++) {
		uint32_t u = 0;
		while (u < b->n_uniq && b->uniq[u] != b->keys[k])
			u++;
		if (u == b->n_uniq)
			b->uniq[b->n_uniq++] = b->keys[k];
		b->key_idx[k] = u;
	}
}

/* ---- step 1: logits, loss, gradients ---------------------------------------- */

static void test_parity_step1(void **state)
{
	par_t p;
	par_open(&p, (const char *)*state);
	st_batch_t *b = par_batch(&p, 0);
	par_uniq(b);
	uint32_t n = b->n;
	int gstride = st_model_max_row_dim(p.m);
	size_t np = st_model_nparams(p.m);
	st_model_ws_t *ws;
	float **rows = calloc(b->n_uniq, sizeof *rows);
	const size_t nz = (size_t)n * (size_t)p.n_heads;   /* logits: n × heads */
	float *logit = calloc(nz, sizeof(float)), *prob = calloc(nz, sizeof(float));
	float *prob2 = calloc(nz, sizeof(float));
	float *gp = calloc(np, sizeof(float));
	float *gu = calloc((size_t)b->n_uniq * gstride, sizeof(float));
	float *gr = calloc((size_t)b->n_uniq * p.row_dim, sizeof(float));
	int bad = 0;
	size_t cnt;

	assert_true(rows && logit && prob && prob2 && gp && gu && gr);
	assert_true(gstride >= p.row_dim);
	for (uint32_t u = 0; u < b->n_uniq; u++)
		rows[u] = row_of(&p, b->uniq[u]);
	assert_int_equal(st_model_ws_create(&ws, p.m, n), ST_OK);

	st_model_forward(p.m, ws, b, 0, n, rows, st_model_params(p.m), logit, prob);
	const float *ref_logit = st_fixture_f32(p.fx, "step1.logits", &cnt);
	assert_int_equal(cnt, nz);
	bad += compare(p.name, "step1.logits", logit, ref_logit, nz, 1e-6, 1e-4);

	double loss = st_model_step(p.m, ws, b, 0, n, rows, st_model_params(p.m),
				    p.sum_loss ? 1.0f : 1.0f / (float)n, prob2, gp, gu, gstride);
	if (!p.sum_loss)
		loss /= n;
	float lossf = (float)loss;
	bad += compare(p.name, "step1.loss", &lossf, st_fixture_f32(p.fx, "step1.loss", NULL),
		       1, 1e-6, 1e-4);
	/* predictions made before the update equal the forward's */
	bad += compare(p.name, "step1.prob", prob2, prob, nz, 1e-7, 1e-6);

	for (int t = 0; t < st_model_ntensors(p.m); t++) {
		const st_tensor_info_t *ti = st_model_tensor(p.m, t);
		char key[128];
		snprintf(key, sizeof key, "step1.grad.%s", ti->name);
		const float *ref = st_fixture_f32(p.fx, key, &cnt);
		assert_non_null(ref);
		bad += compare(p.name, key, gp + ti->offset, ref, cnt, 1e-6, 1e-4);
	}

	/* row gradients: every touched row, aggregated per key */
	size_t nr;
	const uint64_t *gk = st_fixture_u64(p.fx, "step1.grad_rows.keys", &nr);
	const float *gv = st_fixture_f32(p.fx, "step1.grad_rows.values", &cnt);
	assert_int_equal(nr, b->n_uniq);
	assert_int_equal(cnt, nr * (size_t)p.row_dim);
	for (size_t r = 0; r < nr; r++) {
		uint32_t u = 0;
		while (u < b->n_uniq && b->uniq[u] != gk[r])
			u++;
		assert_true(u < b->n_uniq);
		memcpy(gr + r * p.row_dim, gu + (size_t)u * gstride, p.row_dim * sizeof(float));
	}
	bad += compare(p.name, "step1.grad_rows", gr, gv, cnt, 1e-6, 1e-4);

	st_model_ws_destroy(ws);
	free(rows);
	free(logit);
	free(prob);
	free(prob2);
	free(gp);
	free(gu);
	free(gr);
	st_batch_destroy(b);
	par_close(&p);
	assert_int_equal(bad, 0);
}

/* ---- after 20 steps ------------------------------------------------------------ */

static void final_tolerance(const par_t *p, double *atol, double *rtol)
{
	int linear = !strcmp(p->job.model.sparse_opt.name, "sgd") &&
		     !strcmp(p->job.model.dense_opt.name, "sgd");
	*atol = linear ? 1e-5 : 5e-5;
	*rtol = linear ? 1e-4 : 5e-4;
}

/* Compares every dense tensor and every row after the last step; rows[]
 * in fixture order. Returns the number of mismatches. */
static int compare_final(par_t *p, const char *path, const float *params, const float *rows)
{
	double atol, rtol;
	size_t cnt;
	char what[160];
	int bad = 0;

	final_tolerance(p, &atol, &rtol);
	for (int t = 0; t < st_model_ntensors(p->m); t++) {
		const st_tensor_info_t *ti = st_model_tensor(p->m, t);
		char key[128];
		snprintf(key, sizeof key, "final.dense.%s", ti->name);
		const float *ref = st_fixture_f32(p->fx, key, &cnt);
		assert_non_null(ref);
		snprintf(what, sizeof what, "%s %s", path, key);
		bad += compare(p->name, what, params + ti->offset, ref, cnt, atol, rtol);
	}
	const float *ref = st_fixture_f32(p->fx, "final.rows.values", &cnt);
	assert_int_equal(cnt, p->n_rows * (size_t)p->row_dim);
	snprintf(what, sizeof what, "%s final.rows", path);
	bad += compare(p->name, what, rows, ref, cnt, atol, rtol);
	return bad;
}

static size_t tensor_len(const st_tensor_info_t *ti)
{
	return ti->ndim == 2 ? (size_t)ti->shape[0] * (size_t)ti->shape[1] : (size_t)ti->shape[0];
}

/* The update loop written out: model step, then one st_optim_update per
 * dense tensor and per touched row (the reference for what the trainer
 * must do with one worker). */
static void test_parity_direct(void **state)
{
	par_t p;
	par_open(&p, (const char *)*state);
	st_optim_t so, dop;
	size_t np = st_model_nparams(p.m);
	int gstride = st_model_max_row_dim(p.m);
	float *params = st_model_params(p.m);

	assert_int_equal(st_optim_init(&so, &p.job.model.sparse_opt), ST_OK);
	assert_int_equal(st_optim_init(&dop, &p.job.model.dense_opt), ST_OK);
	p.row_state_floats = st_optim_state_floats(&so, (size_t)p.row_dim);
	p.row_state = calloc(p.n_rows * p.row_state_floats + 1, sizeof(float));
	assert_non_null(p.row_state);
	for (size_t r = 0; r < p.n_rows; r++)
		st_optim_state_init(&so, p.row_state + r * p.row_state_floats, (size_t)p.row_dim);
	/* dense state per tensor (rowwise kinds would differ per tensor shape) */
	int nt = st_model_ntensors(p.m);
	size_t *soff = calloc((size_t)nt + 1, sizeof(size_t));
	assert_non_null(soff);
	for (int t = 0; t < nt; t++) {
		const st_tensor_info_t *ti = st_model_tensor(p.m, t);
		soff[t + 1] = soff[t] + st_optim_state_floats(&dop, tensor_len(ti));
	}
	float *dstate = calloc(soff[nt] + 1, sizeof(float));
	float *gp = malloc(np * sizeof(float));
	assert_true(dstate && gp);
	for (int t = 0; t < nt; t++)
		st_optim_state_init(&dop, dstate + soff[t], tensor_len(st_model_tensor(p.m, t)));

	for (int step = 1; step <= p.steps; step++) {
		st_batch_t *b = par_batch(&p, step - 1);
		st_model_ws_t *ws;
		par_uniq(b);
		float **rows = calloc(b->n_uniq, sizeof *rows);
		float *gu = calloc((size_t)b->n_uniq * gstride, sizeof(float));
		float *prob = calloc((size_t)b->n * (size_t)p.n_heads, sizeof(float));
		assert_true(rows && gu && prob);
		for (uint32_t u = 0; u < b->n_uniq; u++)
			rows[u] = row_of(&p, b->uniq[u]);
		memset(gp, 0, np * sizeof(float));
		assert_int_equal(st_model_ws_create(&ws, p.m, b->n), ST_OK);
		st_model_step(p.m, ws, b, 0, b->n, rows, params,
			      p.sum_loss ? 1.0f : 1.0f / (float)b->n, prob, gp, gu, gstride);
		for (int t = 0; t < nt; t++) {
			const st_tensor_info_t *ti = st_model_tensor(p.m, t);
			st_optim_update(&dop, params + ti->offset, dstate + soff[t],
					gp + ti->offset, tensor_len(ti), (uint64_t)step);
		}
		for (uint32_t u = 0; u < b->n_uniq; u++) {
			size_t r = row_index(&p, b->uniq[u]);
			st_optim_update(&so, rows[u], p.row_state + r * p.row_state_floats,
					gu + (size_t)u * gstride, (size_t)p.row_dim, (uint64_t)step);
		}
		st_model_ws_destroy(ws);
		free(rows);
		free(gu);
		free(prob);
		st_batch_destroy(b);
	}
	int bad = compare_final(&p, "direct", params, p.rows);
	free(soff);
	free(dstate);
	free(gp);
	par_close(&p);
	assert_int_equal(bad, 0);
}

/* ---- the trainer's real path ------------------------------------------------ */

/* state: "<fixture>@<policy>" */
static void test_parity_trainer(void **state)
{
	char fix[64], *at;
	snprintf(fix, sizeof fix, "%s", (const char *)*state);
	at = strchr(fix, '@');
	assert_non_null(at);
	*at++ = 0;

	par_t p;
	par_open(&p, fix);
	st_job_t *j = &p.job;
	j->train_stage.threads = 1;
	j->sync.name = at;
	st_trainer_t *tr;
	assert_int_equal(st_trainer_create(&tr, j, NULL), ST_OK);
	st_model_t *tm = st_trainer_model(tr);
	assert_int_equal(st_model_nparams(tm), st_model_nparams(p.m));
	assert_int_equal(st_model_ntensors(tm), st_model_ntensors(p.m));
	/* p.m holds the fixture's initial tensors in the same layout */
	for (int t = 0; t < st_model_ntensors(tm); t++)
		assert_string_equal(st_model_tensor(tm, t)->name, st_model_tensor(p.m, t)->name);
	memcpy(st_model_params(tm), st_model_params(p.m),
	       st_model_nparams(tm) * sizeof(float));
	for (size_t r = 0; r < p.n_rows; r++) {
		uint64_t key = p.row_keys[r];
		assert_int_equal(st_trainer_set_row(tr, (int)(key >> 32), key,
						    p.rows + r * p.row_dim), ST_OK);
	}

	st_stage_ctx_t ctx = { .stage = "train", .thread_idx = 0, .n_threads = 1 };
	if (st_trainer_train_ops.thread_start)
		assert_int_equal(st_trainer_train_ops.thread_start(tr, &ctx), ST_OK);
	int bad = 0;
	for (int i = 0; i < p.steps; i++) {
		st_batch_t *b = par_batch(&p, i), *out;
		ctx.stage = "pull";
		assert_int_equal(st_trainer_pull_ops.process(tr, &ctx, b, &out), ST_OK);
		assert_ptr_equal(out, b);
		ctx.stage = "train";
		assert_int_equal(st_trainer_train_ops.process(tr, &ctx, b, &out), ST_OK);
		assert_ptr_equal(out, b);
		if (i == 0) {
			/* batch 0 is predicted with the initial parameters */
			size_t cnt;
			const float *lg = st_fixture_f32(p.fx, "step1.logits", &cnt);
			float *ref = malloc(cnt * sizeof(float));
			assert_non_null(ref);
			assert_int_equal(cnt, (size_t)b->n * (size_t)p.n_heads);
			for (size_t k = 0; k < cnt; k++)
				ref[k] = 1.0f / (1.0f + expf(-lg[k]));
			bad += compare(p.name, "trainer step1.pred", b->pred, ref, cnt, 1e-6, 1e-4);
			free(ref);
		}
		ctx.stage = "push";
		assert_int_equal(st_trainer_push_ops.process(tr, &ctx, b, &out), ST_OK);
		assert_ptr_equal(out, b);
		ctx.stage = "dump";
		assert_int_equal(st_trainer_dump_ops.process(tr, &ctx, b, &out), ST_OK);
		if (out)
			st_batch_destroy(out);
	}
	ctx.stage = "train";
	if (st_trainer_train_ops.thread_stop)
		st_trainer_train_ops.thread_stop(tr, &ctx);

	float *rows = malloc(p.n_rows * (size_t)p.row_dim * sizeof(float));
	assert_non_null(rows);
	for (size_t r = 0; r < p.n_rows; r++) {
		uint64_t key = p.row_keys[r];
		float *row = st_table_find(st_trainer_table_for_slot(tr, (int)(key >> 32)), key);
		assert_non_null(row);
		memcpy(rows + r * p.row_dim, row, p.row_dim * sizeof(float));
	}
	char path[32];
	snprintf(path, sizeof path, "trainer/%s", at);
	bad += compare_final(&p, path, st_model_params(tm), rows);
	free(rows);
	st_trainer_destroy(tr);
	par_close(&p);
	assert_int_equal(bad, 0);
}

int main(void)
{
	static char fix[N_PRESETS * N_OPTIMS][32];
	static char names[N_PRESETS * N_OPTIMS * 4][96];
	static char tstate[N_PRESETS * N_OPTIMS * 2][48];
	struct CMUnitTest tests[N_PRESETS * N_OPTIMS * 4];
	int ns = 0, nt = 0;
	const char *only = getenv("ST_PARITY_ONLY");   /* e.g. "dnn_adam" */

	for (int i = 0; i < N_PRESETS; i++)
		for (int j = 0; j < N_OPTIMS; j++) {
			char *nm = fix[i * N_OPTIMS + j];
			snprintf(nm, 32, "%s_%s", presets[i], optims[j]);
			if (only && strcmp(only, nm))
				continue;
#define ADD(fn, what, st) do { \
		snprintf(names[nt], 96, "test_parity_%.17s %.31s", what, nm); \
		tests[nt] = (struct CMUnitTest){ names[nt], fn, NULL, NULL, st }; \
		nt++; \
	} while (0)
			ADD(test_parity_step1, "step1", nm);
			ADD(test_parity_direct, "direct", nm);
			/* one worker: allreduce and async must both equal PyTorch */
			snprintf(tstate[ns], 48, "%.31s@allreduce", nm);
			ADD(test_parity_trainer, "trainer_allreduce", tstate[ns]);
			ns++;
			snprintf(tstate[ns], 48, "%.31s@async", nm);
			ADD(test_parity_trainer, "trainer_async", tstate[ns]);
			ns++;
#undef ADD
		}
	return _cmocka_run_group_tests("parity", tests, (size_t)nt, NULL, NULL);
}
