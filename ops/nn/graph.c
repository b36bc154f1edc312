/*
 * graph.c — the layer graph executor of graph.h: build a DAG of nn.h layers,
 * then run it forward and backward per worker.
 *
 * Threads: none of its own. A finished graph is read-only; each worker owns
 * an st_lgraph_ws_t. Forward and backward read the dense parameters from the
 * `params` pointer the caller passes (a sync policy may hand each worker its
 * own replica), never from g->params.
 *
 * Invariants:
 *  - node ids are creation order, and every input id is smaller than the
 *    node's id, so forward walks 0..N-1 and backward N-1..0;
 *  - tensors are created by the builders, so their offsets are in creation
 *    order and cover [0, nparams) without gaps; st_lgraph_finish initializes
 *    them in the same order from one RNG stream (a preset's values depend on
 *    its seed and its builder calls alone);
 *  - a node "needs a gradient" when it has parameters or reads sparse rows,
 *    or when one of its inputs needs one. Backward computes an input's
 *    gradient only if that input needs it (the dense features never do, so
 *    e.g. the first layer of an MLP over them skips dX).
 *
 * Gradient accumulation when a node feeds several consumers (dlrm's z0 goes
 * into the dot interaction and into the top MLP; deepfm's embeddings into the
 * MLP and into FM): the first consumer to reach it in backward writes the
 * node's gradient buffer, later ones write into a shared scratch that is then
 * added in (grad_begin / grad_end). No buffer is zeroed per step, and with
 * two consumers the sum is a + b in one rounding, whatever the order — which
 * is what keeps the presets bit-identical to the hand-written code they
 * replaced.
 *
 * The file is long because a node kind is one concept spread over four
 * switch-like places — its builder (width, tensors, FLOPs), its workspace
 * buffers, its forward and its backward — and keeping them side by side in
 * one file is what makes a kind added to one place and missed in another
 * visible in review. The layer math itself lives in nn.c; the types are in
 * graph_internal.h, and several heads (their n × H logits and dlogits,
 * st_lgraph_finish_heads) in heads.c.
 */
#include "ops/nn/graph.h"

#include "ops/nn/attention.h"
#include "ops/nn/graph_internal.h"
#include "ops/nn/mmoe.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/err.h"

static const char *const kind_name[] = { "embed", "dense", "wide", "concat", "mlp",
					 "linear", "fm", "dot", "add", "cross", "attention",
					 "mmoe", "slice" };

/* ---- creation ------------------------------------------------------------ */

int st_lgraph_create(st_lgraph_t **out, const st_lgraph_sparse_t *sp, int n_dense)
{
	st_lgraph_t *g = calloc(1, sizeof *g);
	if (!g)
		return ST_ENOMEM;
	g->sp = *sp;
	g->n_dense = n_dense;
	g->out = -1;
	g->uniform_wide = 1;
	g->epool = sp->pool;
	if (sp->seq) {
		/* A sequence slot is read by the attention nodes that attend over
		 * it; the pooled embeddings leave it out (0 wide). */
		int S = sp->pool.n_slots;
		g->edim = calloc((size_t)S + 1, sizeof(int));
		g->eoff = calloc((size_t)S + 1, sizeof(int));
		if (!g->edim || !g->eoff) {
			st_lgraph_destroy(g);
			return ST_ENOMEM;
		}
		g->epool.width = st_attn_embed_layout(&sp->pool, sp->seq, g->edim, g->eoff);
		g->epool.dim = g->edim;
		g->epool.off = g->eoff;
	}
	if (sp->wide_col)
		for (int s = 1; s < sp->pool.n_slots; s++)
			g->uniform_wide &= sp->wide_col[s] == sp->wide_col[0];
	*out = g;
	return ST_OK;
}

void st_lgraph_destroy(st_lgraph_t *g)
{
	if (!g)
		return;
	free(g->tensors);
	free(g->init);
	free(g->edim);
	free(g->eoff);
	free(g->params);
	free(g);
}

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

/* Appends a tensor; returns its offset, or NO_BIAS on allocation failure. */
static size_t add_tensor(st_lgraph_t *g, const char *name, int rows, int cols)
{
	if (g->ntensors == g->cap_tensors) {
		int cap = g->cap_tensors ? 2 * g->cap_tensors : 16;
		tensor_t *t = realloc(g->tensors, sizeof *t * (size_t)cap);
		if (!t)
			return NO_BIAS;
		g->tensors = t;
		g->cap_tensors = cap;
	}
	tensor_t *t = &g->tensors[g->ntensors++];
	snprintf(t->name, sizeof t->name, "%s", name);
	t->info.offset = g->nparams;
	t->info.ndim = cols < 0 ? 1 : 2;
	t->info.shape[0] = rows;
	t->info.shape[1] = cols < 0 ? 0 : cols;
	g->nparams += (size_t)rows * (size_t)(cols < 0 ? 1 : cols);
	return t->info.offset;
}

static int add_init(st_lgraph_t *g, size_t w, size_t count, int fan_in, size_t b,
		    int bias_n)
{
	if (g->n_init == g->cap_init) {
		int cap = g->cap_init ? 2 * g->cap_init : 16;
		init_item_t *it = realloc(g->init, sizeof *it * (size_t)cap);
		if (!it)
			return ST_ENOMEM;
		g->init = it;
		g->cap_init = cap;
	}
	g->init[g->n_init++] = (init_item_t){ .w = w, .count = count, .b = b,
					      .bias_n = bias_n, .fan_in = fan_in };
	return ST_OK;
}

/* A linear map prefix.weight [out × in] (+ prefix.bias [out] when bias). */
static int add_linear(st_lgraph_t *g, layer_t *l, const char *prefix, int in, int out,
		      int bias)
{
	char name[40];
	l->in = in;
	l->out = out;
	snprintf(name, sizeof name, "%s.weight", prefix);
	l->w = add_tensor(g, name, out, in);
	l->b = NO_BIAS;
	if (bias) {
		snprintf(name, sizeof name, "%s.bias", prefix);
		l->b = add_tensor(g, name, out, -1);
	}
	if (l->w == NO_BIAS || (bias && l->b == NO_BIAS))
		return ST_ENOMEM;
	g->flops += 6.0 * in * out;   /* forward 2·in·out, backward twice that */
	return add_init(g, l->w, (size_t)in * (size_t)out, in, l->b, bias ? out : 0);
}

/* Checks an input id; returns 0 or the code to pass on. */
static int check_in(const st_lgraph_t *g, const char *what, int in)
{
	if (in < 0)
		return in;
	if (in >= g->n_nodes) {
		st_error("%s: input %d is not a node (have %d)", what, in, g->n_nodes);
		return ST_EINVAL;
	}
	return 0;
}

static int new_node(st_lgraph_t *g, int kind, int n_in, const int *in, int width)
{
	assert(!g->finished);
	if (g->n_nodes == MAX_NODES) {
		st_error("%s: the graph has %d nodes already (at most %d)", kind_name[kind],
			 g->n_nodes, MAX_NODES);
		return ST_EINVAL;
	}
	if (n_in > MAX_IN) {
		st_error("%s: %d inputs (at most %d)", kind_name[kind], n_in, MAX_IN);
		return ST_EINVAL;
	}
	for (int i = 0; i < n_in; i++) {
		int rc = check_in(g, kind_name[kind], in[i]);
		if (rc < 0)
			return rc;
	}
	node_t *nd = &g->node[g->n_nodes];
	memset(nd, 0, sizeof *nd);
	nd->kind = kind;
	nd->n_in = n_in;
	for (int i = 0; i < n_in; i++)
		nd->in[i] = in[i];
	nd->width = width;
	nd->p0 = g->nparams;
	nd->f0 = g->flops;
	return g->n_nodes++;
}

int st_lgraph_embed(st_lgraph_t *g)
{
	return new_node(g, N_EMBED, 0, NULL, g->epool.width);
}

int st_lgraph_dense(st_lgraph_t *g, int log1p)
{
	int id = new_node(g, N_DENSE, 0, NULL, g->n_dense);
	if (id >= 0)
		g->node[id].log1p = log1p;
	return id;
}

int st_lgraph_wide(st_lgraph_t *g)
{
	if (!g->sp.wide_col) {
		st_error("wide: the rows have no wide column");
		return ST_EINVAL;
	}
	return new_node(g, N_WIDE, 0, NULL, 1);
}

int st_lgraph_concat(st_lgraph_t *g, int n_in, const int *in)
{
	int w = 0;
	for (int i = 0; i < n_in; i++) {
		int rc = check_in(g, "concat", in[i]);
		if (rc < 0)
			return rc;
		w += g->node[in[i]].width;
	}
	return new_node(g, N_CONCAT, n_in, in, w);
}

int st_lgraph_mlp(st_lgraph_t *g, int in, const char *prefix, int n, const int *sizes,
		 int act)
{
	int rc = check_in(g, "mlp", in);
	if (rc < 0 || n == 0)
		return rc < 0 ? rc : in;
	if (n < 0 || n > MAX_LAYERS) {
		st_error("mlp %s: %d layers (at most %d)", prefix, n, MAX_LAYERS);
		return ST_EINVAL;
	}
	for (int k = 0; k < n; k++)
		if (sizes[k] < 1) {
			st_error("mlp %s: layer %d has size %d (need >= 1)", prefix, k, sizes[k]);
			return ST_EINVAL;
		}
	int id = new_node(g, N_MLP, 1, &in, sizes[n - 1]);
	if (id < 0)
		return id;
	node_t *nd = &g->node[id];
	nd->act = act;
	nd->n_layers = n;
	int w = g->node[in].width;
	char name[32];
	for (int k = 0; k < n; k++) {
		snprintf(name, sizeof name, "%s.%d", prefix, k);
		if ((rc = add_linear(g, &nd->L[k], name, w, sizes[k], 1)) < 0)
			return rc;
		w = sizes[k];
	}
	return id;
}

int st_lgraph_linear(st_lgraph_t *g, int in, const char *prefix, int out)
{
	int rc = check_in(g, "linear", in);
	if (rc < 0)
		return rc;
	if (out < 1) {
		st_error("linear %s: output size %d (need >= 1)", prefix, out);
		return ST_EINVAL;
	}
	int id = new_node(g, N_LINEAR, 1, &in, out);
	if (id < 0)
		return id;
	node_t *nd = &g->node[id];
	nd->n_layers = 1;
	if ((rc = add_linear(g, &nd->L[0], prefix, g->node[in].width, out, 1)) < 0)
		return rc;
	return id;
}

/* The input read as `fields` vectors of equal width (fm, dot). */
static int fields_of(const st_lgraph_t *g, const char *what, int in, int fields, int *d)
{
	int rc = check_in(g, what, in);
	if (rc < 0)
		return rc;
	int w = g->node[in].width;
	if (fields < 1 || w % fields != 0 || w == 0) {
		st_error("%s: input %d is %d wide, not %d fields of equal width", what, in, w,
			 fields);
		return ST_EINVAL;
	}
	*d = w / fields;
	return 0;
}

int st_lgraph_fm(st_lgraph_t *g, int in, int fields)
{
	int d = 0, rc = fields_of(g, "fm", in, fields, &d);
	if (rc < 0)
		return rc;
	int id = new_node(g, N_FM, 1, &in, 1);
	if (id >= 0) {
		g->node[id].fields = fields;
		g->node[id].d = d;
		g->flops += 3.0 * 3 * fields * d;
	}
	return id;
}

int st_lgraph_dot(st_lgraph_t *g, int in, int fields)
{
	int d = 0, rc = fields_of(g, "dot", in, fields, &d);
	if (rc < 0)
		return rc;
	int np = fields * (fields - 1) / 2;
	int id = new_node(g, N_DOT, 1, &in, np);
	if (id >= 0) {
		g->node[id].fields = fields;
		g->node[id].d = d;
		g->flops += 3.0 * np * d * 2;
	}
	return id;
}

int st_lgraph_add(st_lgraph_t *g, int n_in, const int *in)
{
	if (n_in < 1) {
		st_error("add: no inputs");
		return ST_EINVAL;
	}
	for (int i = 0; i < n_in; i++) {
		int rc = check_in(g, "add", in[i]);
		if (rc < 0)
			return rc;
		if (g->node[in[i]].width != g->node[in[0]].width) {
			st_error("add: input %d is %d wide, input 0 is %d wide", i,
				 g->node[in[i]].width, g->node[in[0]].width);
			return ST_EINVAL;
		}
	}
	return new_node(g, N_ADD, n_in, in, g->node[in[0]].width);
}

int st_lgraph_cross(st_lgraph_t *g, int in, const char *prefix, int n_layers, int rank)
{
	int rc = check_in(g, "cross", in);
	if (rc < 0 || n_layers == 0)
		return rc < 0 ? rc : in;
	int d = g->node[in].width;
	if (n_layers < 0 || n_layers > MAX_LAYERS || rank < 0 || d < 1) {
		st_error("cross %s: %d layers (0..%d), rank %d (>= 0; 0 = full), input %d "
			 "wide (>= 1)", prefix, n_layers, MAX_LAYERS, rank, d);
		return ST_EINVAL;
	}
	int id = new_node(g, N_CROSS, 1, &in, d);
	if (id < 0)
		return id;
	node_t *nd = &g->node[id];
	nd->n_layers = n_layers;
	nd->rank = rank;
	char name[32];
	for (int l = 0; l < n_layers; l++) {
		layer_t *L = &nd->L[l];
		if (rank == 0) {
			snprintf(name, sizeof name, "%s.%d", prefix, l);
			rc = add_linear(g, L, name, d, d, 1);
		} else {
			/* V then U, as a PyTorch module with v = Linear(d, r, bias=False)
			 * declared before u = Linear(r, d) lists them. */
			layer_t v = { 0 }, u = { 0 };
			snprintf(name, sizeof name, "%s.%d.v", prefix, l);
			rc = add_linear(g, &v, name, d, rank, 0);
			snprintf(name, sizeof name, "%s.%d.u", prefix, l);
			if (rc >= 0)
				rc = add_linear(g, &u, name, rank, d, 1);
			*L = (layer_t){ .in = d, .out = d, .w = v.w, .u = u.w, .b = u.b };
		}
		if (rc < 0)
			return rc;
		g->flops += 3.0 * 3 * d;   /* x0 ⊙ t + x and its two products back */
	}
	return id;
}

int st_lgraph_attention(st_lgraph_t *g, const char *prefix, int q_slot, int k_slot,
			int n_hidden, const int *hidden, int act)
{
	char msg[256];
	if (st_attn_check(&g->sp.pool, prefix, q_slot, k_slot, n_hidden, hidden, act, msg,
			  sizeof msg) < 0) {
		st_error("%s", msg);
		return ST_EINVAL;
	}
	const int d = g->sp.pool.dim[k_slot];
	int id = new_node(g, N_ATTN, 0, NULL, d);
	if (id < 0)
		return id;
	node_t *nd = &g->node[id];
	nd->attn = (st_attn_shape_t){ .d = d, .q_slot = q_slot, .k_slot = k_slot, .act = act,
				      .n_hidden = n_hidden, .chunk = 512 };
	for (int l = 0; l < n_hidden; l++)
		nd->attn.hidden[l] = hidden[l];
	nd->n_layers = n_hidden + 1;
	/* <prefix>.att.<l>, l = 0..n_hidden: a PyTorch module's
	 * att = nn.ModuleList([Linear(4d, h_0), ..., Linear(h_last, 1)]). */
	double f0 = g->flops;
	char name[40];
	int in = 4 * d, rc;
	for (int l = 0; l <= n_hidden; l++) {
		int out = l < n_hidden ? hidden[l] : 1;
		snprintf(name, sizeof name, "%s.att.%d", prefix, l);
		if ((rc = add_linear(g, &nd->L[l], name, in, out, 1)) < 0)
			return rc;
		in = out;
	}
	/* Per key of the sequence (the length varies by example). */
	g->flops = f0 + st_attn_flops_per_key(&nd->attn);
	return id;
}

int st_lgraph_mmoe(st_lgraph_t *g, int in, const char *prefix, int n_experts, int n_layers,
		   const int *sizes, int act, int n_tasks)
{
	int rc = check_in(g, "mmoe", in);
	if (rc < 0)
		return rc;
	st_mmoe_shape_t s = { .d_in = g->node[in].width, .n_experts = n_experts,
			      .n_tasks = n_tasks, .n_layers = n_layers, .act = act };
	for (int k = 0; k < n_layers && k < ST_MMOE_MAX_LAYERS; k++)
		s.sizes[k] = sizes[k];
	char msg[200], name[40];
	int din, dout;
	if (st_mmoe_check(&s, prefix, sizeof g->tensors[0].name, msg, sizeof msg) < 0) {
		st_error("%s", msg);
		return ST_EINVAL;
	}
	int id = new_node(g, N_MMOE, 1, &in, st_mmoe_width(&s));
	if (id < 0)
		return id;
	g->node[id].mmoe = s;
	for (int i = 0; i < n_experts * n_layers + n_tasks; i++) {
		layer_t l;
		st_mmoe_map(&s, prefix, i, name, sizeof name, &din, &dout);
		if ((rc = add_linear(g, &l, name, din, dout, 1)) < 0)
			return rc;
	}
	assert(g->nparams - g->node[id].p0 == st_mmoe_nparams(&s));
	g->flops += st_mmoe_flops_mix(&s);
	return id;
}

int st_lgraph_slice(st_lgraph_t *g, int in, int offset, int width)
{
	int rc = check_in(g, "slice", in);
	if (rc < 0)
		return rc;
	int w = g->node[in].width;
	if (offset < 0 || width < 1 || offset > w - width) {
		st_error("slice: columns %d..%d of input %d, which is %d wide", offset,
			 offset + width - 1, in, w);
		return ST_EINVAL;
	}
	int id = new_node(g, N_SLICE, 1, &in, width);
	if (id >= 0)
		g->node[id].offset = offset;
	return id;
}

/* Marks which nodes need a gradient (see the header comment). */
static void mark_grads(st_lgraph_t *g)
{
	for (int i = 0; i < g->n_nodes; i++) {
		node_t *nd = &g->node[i];
		nd->need_grad = nd->kind == N_EMBED || nd->kind == N_WIDE || nd->kind == N_ATTN ||
				nd->kind == N_MMOE ||
				nd->n_layers > 0;
		for (int k = 0; k < nd->n_in; k++)
			nd->need_grad |= g->node[nd->in[k]].need_grad;
	}
}

int st_lgraph_finish(st_lgraph_t *g, int out, uint64_t seed)
{
	return st_lgraph_finish_heads(g, 1, &out, seed);
}

int st__lgraph_finish_params(st_lgraph_t *g, uint64_t seed)
{
	mark_grads(g);
	g->params = calloc(g->nparams ? g->nparams : 1, sizeof(float));
	if (!g->params)
		return ST_ENOMEM;
	/* Names point into the (now final) tensor array. */
	for (int i = 0; i < g->ntensors; i++)
		g->tensors[i].info.name = g->tensors[i].name;
	/* uniform(-1/sqrt(in), 1/sqrt(in)) weights, zero biases, one RNG
	 * stream in tensor order: the values depend on the seed alone. */
	uint64_t rng = seed ^ UINT64_C(0x6d6f64656c);   /* "model" */
	for (int i = 0; i < g->n_init; i++) {
		const init_item_t *it = &g->init[i];
		float a = it->fan_in > 0 ? 1.0f / sqrtf((float)it->fan_in) : 0.0f;
		for (size_t j = 0; j < it->count; j++) {
			double u = (double)(splitmix64(&rng) >> 11) * 0x1.0p-53;
			g->params[it->w + j] = (float)((2.0 * u - 1.0) * a);
		}
		if (it->bias_n)
			memset(g->params + it->b, 0, sizeof(float) * (size_t)it->bias_n);
	}
	g->finished = 1;
	return ST_OK;
}

size_t st_lgraph_nparams(const st_lgraph_t *g) { return g->nparams; }
float *st_lgraph_params(st_lgraph_t *g) { return g->params; }
int st_lgraph_ntensors(const st_lgraph_t *g) { return g->ntensors; }
int st_lgraph_nnodes(const st_lgraph_t *g) { return g->n_nodes; }
double st_lgraph_flops_per_example(const st_lgraph_t *g) { return g->flops; }

int st_lgraph_node_info(const st_lgraph_t *g, int node, st_lgraph_node_info_t *out)
{
	if (node < 0 || node >= g->n_nodes)
		return ST_EINVAL;
	const node_t *nd = &g->node[node];
	int last = node + 1 == g->n_nodes;
	out->kind = kind_name[nd->kind];
	out->width = nd->width;
	out->n_in = nd->n_in;
	out->in = nd->in;
	/* A builder adds its tensors and FLOPs after making its node and
	 * before the next builder runs. */
	out->nparams = (last ? g->nparams : g->node[node + 1].p0) - nd->p0;
	out->flops = (last ? g->flops : g->node[node + 1].f0) - nd->f0;
	return ST_OK;
}

int st_lgraph_width(const st_lgraph_t *g, int node)
{
	return node >= 0 && node < g->n_nodes ? g->node[node].width : ST_EINVAL;
}

const st_tensor_info_t *st_lgraph_tensor(const st_lgraph_t *g, int i)
{
	return i >= 0 && i < g->ntensors ? &g->tensors[i].info : NULL;
}

/* ---- workspace ------------------------------------------------------------ */

/* Sizes (floats per example) of node i's auxiliary buffers; returns their
 * count. mlp: the hidden outputs before the last (the last is the node's
 * output). cross: x_1..x_{L-1} (x_L is the output), T_0..T_{L-1},
 * Vt_0..Vt_{L-1} (low rank), then dx0 and two buffers that carry dx_l
 * from layer to layer in backward. */
static int aux_sizes(const node_t *nd, size_t *sz)
{
	int na = 0;
	if (nd->kind == N_MLP) {
		for (int k = 0; k + 1 < nd->n_layers; k++)
			sz[na++] = (size_t)nd->L[k].out;
	} else if (nd->kind == N_CROSS) {
		for (int l = 0; l + 1 < nd->n_layers; l++)
			sz[na++] = (size_t)nd->width;
		for (int l = 0; l < nd->n_layers; l++)
			sz[na++] = (size_t)nd->width;
		for (int l = 0; l < nd->n_layers; l++)
			sz[na++] = (size_t)(nd->rank ? nd->rank : 1);
		sz[na++] = (size_t)nd->width;
		sz[na++] = (size_t)nd->width;
		sz[na++] = (size_t)nd->width;
	}
	return na;
}

int st_lgraph_ws_create(st_lgraph_ws_t **out, const st_lgraph_t *g, uint32_t max_n)
{
	assert(g->finished);
	st_lgraph_ws_t *ws = calloc(1, sizeof *ws);
	if (!ws)
		return ST_ENOMEM;
	ws->max_n = max_n;
	ws->out_node = g->out;
	size_t n = max_n ? max_n : 1, maxw = 1;
	enum { MAXB = MAX_NODES * (MAX_AUX + 2) + 3 };
	size_t *sz = malloc(sizeof *sz * MAXB);
	float ***dst = malloc(sizeof *dst * MAXB);
	if (!sz || !dst) {
		free(sz);
		free(dst);
		free(ws);
		return ST_ENOMEM;
	}
	size_t tot = 0;
	int nb = 0;
#define WS(ptr, cnt) (dst[nb] = &(ptr), sz[nb] = (cnt), tot += (sz[nb] + 15) & ~(size_t)15, nb++)
	for (int i = 0; i < g->n_nodes; i++) {
		const node_t *nd = &g->node[i];
		size_t w = nd->width > 0 ? (size_t)nd->width : 1;
		maxw = w > maxw ? w : maxw;
		for (int k = 0; k < nd->n_layers; k++) {
			maxw = (size_t)nd->L[k].out > maxw ? (size_t)nd->L[k].out : maxw;
			maxw = (size_t)nd->rank > maxw ? (size_t)nd->rank : maxw;
		}
		WS(ws->out[i], n * w);
		if (nd->need_grad || st__lgraph_is_head(g, i))
			WS(ws->grad[i], n * w);
		if (nd->kind == N_ATTN) {
			/* Its scratch is per chunk of keys, not per example. */
			size_t bytes = st_attn_scratch_bytes(&nd->attn, (uint32_t)n);
			WS(ws->aux[i][0], bytes / sizeof(float));
			continue;
		}
		if (nd->kind == N_MMOE) {
			size_t bytes = st_mmoe_scratch_bytes(&nd->mmoe, (uint32_t)n);
			WS(ws->aux[i][0], bytes / sizeof(float));
			continue;
		}
		size_t asz[MAX_AUX];
		int na = aux_sizes(nd, asz);
		for (int a = 0; a < na; a++)
			WS(ws->aux[i][a], n * asz[a]);
	}
	WS(ws->dbuf[0], n * maxw);
	WS(ws->dbuf[1], n * maxw);
	WS(ws->acc, n * maxw);
	if (g->n_heads > 1) {
		WS(ws->logits, n * (size_t)g->n_heads);
		WS(ws->dlogits, n * (size_t)g->n_heads);
	}
#undef WS
	/* 16-float (64-byte) alignment per buffer keeps sgemm's operands on
	 * cache lines; aligned_alloc wants a multiple of the alignment. */
	ws->block = aligned_alloc(64, tot * sizeof(float));
	if (ws->block) {
		size_t o = 0;
		for (int i = 0; i < nb; i++) {
			*dst[i] = ws->block + o;
			o += (sz[i] + 15) & ~(size_t)15;
		}
	}
	free(sz);
	free(dst);
	if (!ws->block) {
		free(ws);
		return ST_ENOMEM;
	}
	*out = ws;
	return ST_OK;
}

void st_lgraph_ws_destroy(st_lgraph_ws_t *ws)
{
	if (!ws)
		return;
	free(ws->block);
	free(ws);
}

float *st_lgraph_dlogit(st_lgraph_ws_t *ws)
{
	return ws->dlogits ? ws->dlogits : ws->grad[ws->out_node];
}

/* ---- forward --------------------------------------------------------------- */

/* Wide term: column wide_col[s] of each key's row. nn.h's st_wide_* take
 * one column for all keys; with per-slot dims the column differs by slot,
 * so that (rare) case is a plain loop over the same CSR. */
static void wide_forward(const st_lgraph_t *g, const st_batch_t *b, uint32_t r0,
			 uint32_t n, float *const *rows, float *out)
{
	const int *col = g->sp.wide_col;
	if (g->uniform_wide) {
		st_wide_forward(r0, n, b->row_off, b->key_val, b->key_idx, rows, col[0], out);
		return;
	}
	for (uint32_t i = 0; i < n; i++) {
		float z = 0.0f;
		for (uint32_t k = b->row_off[r0 + i]; k < b->row_off[r0 + i + 1]; k++) {
			const float *r = rows[b->key_idx[k]];
			if (r)
				z += b->key_val[k] * r[col[b->key_slot[k]]];
		}
		out[i] = z;
	}
}

static void wide_backward(const st_lgraph_t *g, const st_batch_t *b, uint32_t r0,
			  uint32_t n, const float *dout, float *gu, int gstride)
{
	const int *col = g->sp.wide_col;
	if (g->uniform_wide) {
		st_wide_backward(r0, n, b->row_off, b->key_val, b->key_idx, dout, gu, gstride,
				 col[0]);
		return;
	}
	for (uint32_t i = 0; i < n; i++)
		for (uint32_t k = b->row_off[r0 + i]; k < b->row_off[r0 + i + 1]; k++)
			gu[(size_t)b->key_idx[k] * gstride + col[b->key_slot[k]]] +=
				dout[i] * b->key_val[k];
}

static void forward_node(const st_lgraph_t *g, st_lgraph_ws_t *ws, int id,
			 const st_batch_t *b, uint32_t r0, uint32_t n, float *const *rows,
			 const float *params)
{
	const node_t *nd = &g->node[id];
	float *Y = ws->out[id];
	const int nn_ = (int)n, W = nd->width;
	const float *X = nd->n_in ? ws->out[nd->in[0]] : NULL;
	switch (nd->kind) {
	case N_EMBED:
		if (W > 0)
			st_pool_forward(&g->epool, r0, n, b->row_off, b->key_slot, b->key_val,
					b->key_idx, rows, Y);
		break;
	case N_DENSE:
		for (uint32_t i = 0; i < n; i++) {
			const float *x = b->dense + (size_t)(r0 + i) * b->n_dense;
			float *y = Y + (size_t)i * W;
			for (int d = 0; d < W; d++)
				y[d] = nd->log1p ? (x[d] > 0.0f ? log1pf(x[d]) : 0.0f) : x[d];
		}
		break;
	case N_WIDE:
		wide_forward(g, b, r0, n, rows, Y);
		break;
	case N_CONCAT:
		for (uint32_t i = 0; i < n; i++) {
			float *y = Y + (size_t)i * W;
			for (int k = 0; k < nd->n_in; k++) {
				int w = g->node[nd->in[k]].width;
				memcpy(y, ws->out[nd->in[k]] + (size_t)i * w, sizeof(float) * w);
				y += w;
			}
		}
		break;
	case N_MLP:
		for (int k = 0; k < nd->n_layers; k++) {
			const layer_t *L = &nd->L[k];
			float *H = k + 1 < nd->n_layers ? ws->aux[id][k] : Y;
			st_linear_forward(nn_, L->in, L->out, X, params + L->w, params + L->b, H);
			st_act_forward(nd->act, (size_t)n * (size_t)L->out, H);
			X = H;
		}
		break;
	case N_LINEAR: {
		const layer_t *L = &nd->L[0];
		st_linear_forward(nn_, L->in, L->out, X, params + L->w, params + L->b, Y);
		break;
	}
	case N_FM:
		st_fm_forward(nn_, nd->fields, nd->d, X, Y);
		break;
	case N_DOT:
		st_dot_forward(nn_, nd->fields, nd->d, X, Y);
		break;
	case N_ADD: {
		size_t len = (size_t)n * (size_t)W;
		memcpy(Y, X, sizeof(float) * len);
		/* Left to right, one input at a time: the rounding order the
		 * hand-written presets had (logit = mlp; += wide; += linear; += fm). */
		for (int k = 1; k < nd->n_in; k++) {
			const float *x = ws->out[nd->in[k]];
			for (size_t j = 0; j < len; j++)
				Y[j] += x[j];
		}
		break;
	}
	case N_CROSS: {
		const int L = nd->n_layers, d = W;
		float *const *aux = ws->aux[id];
		const float *xl = X;
		for (int l = 0; l < L; l++) {
			const layer_t *ly = &nd->L[l];
			float *y = l + 1 < L ? aux[l] : Y;
			st_cross_forward(nn_, d, nd->rank, X, xl, params + ly->w,
					 nd->rank ? params + ly->u : NULL, params + ly->b,
					 aux[L - 1 + l], aux[2 * L - 1 + l], y);
			xl = y;
		}
		break;
	}
	case N_ATTN: {
		const float *Wl[MAX_LAYERS], *bl[MAX_LAYERS];
		for (int l = 0; l < nd->n_layers; l++) {
			Wl[l] = params + nd->L[l].w;
			bl[l] = params + nd->L[l].b;
		}
		st_attn_forward(&nd->attn, r0, n, b->row_off, b->key_slot, b->key_val,
				b->key_idx, rows, Wl, bl, ws->aux[id][0], Y);
		break;
	}
	case N_MMOE:
		st_mmoe_forward(&nd->mmoe, nn_, X, params + nd->p0, ws->aux[id][0], Y);
		break;
	case N_SLICE:
		st_slice_forward(nn_, g->node[nd->in[0]].width, nd->offset, W, X, Y);
		break;
	}
}

const float *st_lgraph_forward(const st_lgraph_t *g, st_lgraph_ws_t *ws,
			      const st_batch_t *b, uint32_t r0, uint32_t n,
			      float *const *rows, const float *params)
{
	assert(g->finished && n <= ws->max_n);
	ws->rows = rows;
	for (int i = 0; i < g->n_nodes; i++)
		forward_node(g, ws, i, b, r0, n, rows, params);
	if (g->n_heads == 1)
		return ws->out[g->out];
	st__lgraph_heads_pack(g, ws, n);
	return ws->logits;
}

/* ---- backward -------------------------------------------------------------- */

/* Where a consumer writes node `id`'s gradient contribution: the node's own
 * buffer if it is the first (overwrite), else ws->acc, added by grad_end. */
static float *grad_begin(st_lgraph_ws_t *ws, int id)
{
	return ws->gset[id] ? ws->acc : ws->grad[id];
}

static void grad_end(st_lgraph_ws_t *ws, int id, size_t len)
{
	if (ws->gset[id]) {
		float *g = ws->grad[id];
		const float *a = ws->acc;
		for (size_t j = 0; j < len; j++)
			g[j] += a[j];
	}
	ws->gset[id] = 1;
}

static void backward_node(const st_lgraph_t *g, st_lgraph_ws_t *ws, int id,
			  const st_batch_t *b, uint32_t r0, uint32_t n, const float *params,
			  float *gparams, float *gu, int gstride)
{
	const node_t *nd = &g->node[id];
	float *dY = ws->grad[id];
	const int nn_ = (int)n, W = nd->width;
	const int in0 = nd->n_in ? nd->in[0] : -1;
	const int want = in0 >= 0 && g->node[in0].need_grad;
	const size_t in_len = in0 >= 0 ? (size_t)n * (size_t)g->node[in0].width : 0;
	const float *X = in0 >= 0 ? ws->out[in0] : NULL;
	switch (nd->kind) {
	case N_EMBED:
		if (W > 0)
			st_pool_backward(&g->epool, r0, n, b->row_off, b->key_slot, b->key_val,
					 b->key_idx, dY, gu, gstride);
		break;
	case N_DENSE:
		break;
	case N_WIDE:
		wide_backward(g, b, r0, n, dY, gu, gstride);
		break;
	case N_CONCAT: {
		int off = 0;
		for (int k = 0; k < nd->n_in; k++) {
			int c = nd->in[k], w = g->node[c].width;
			if (g->node[c].need_grad) {
				float *dst = ws->grad[c];
				for (uint32_t i = 0; i < n; i++) {
					const float *src = dY + (size_t)i * W + off;
					float *d = dst + (size_t)i * w;
					if (ws->gset[c])
						for (int j = 0; j < w; j++)
							d[j] += src[j];
					else
						memcpy(d, src, sizeof(float) * w);
				}
				ws->gset[c] = 1;
			}
			off += w;
		}
		break;
	}
	case N_MLP: {
		/* Backward works in place on dY (the activation's backward). */
		float *cur = dY;
		int pp = 0;
		for (int k = nd->n_layers - 1; k >= 0; k--) {
			const layer_t *L = &nd->L[k];
			const float *H = k + 1 < nd->n_layers ? ws->aux[id][k] : ws->out[id];
			/* ReLU's mask and the bias gradient in one pass over dY
			 * (the bias is then not summed again below). */
			float *db = st_act_bias_backward(nd->act, nn_, L->out, H, cur,
							 gparams + L->b);
			const float *in = k ? ws->aux[id][k - 1] : X;
			float *dIn = k ? ws->dbuf[pp] : want ? grad_begin(ws, in0) : NULL;
			st_linear_backward(nn_, L->in, L->out, in, params + L->w, cur, dIn,
					   gparams + L->w, db);
			cur = dIn;
			pp ^= 1;
		}
		if (want)
			grad_end(ws, in0, in_len);
		break;
	}
	case N_LINEAR: {
		const layer_t *L = &nd->L[0];
		float *dIn = want ? grad_begin(ws, in0) : NULL;
		st_linear_backward(nn_, L->in, L->out, X, params + L->w, dY, dIn,
				   gparams + L->w, gparams + L->b);
		if (want)
			grad_end(ws, in0, in_len);
		break;
	}
	case N_FM:
		if (want) {
			st_fm_backward(nn_, nd->fields, nd->d, X, dY, grad_begin(ws, in0));
			grad_end(ws, in0, in_len);
		}
		break;
	case N_DOT:
		if (want) {
			st_dot_backward(nn_, nd->fields, nd->d, X, dY, grad_begin(ws, in0));
			grad_end(ws, in0, in_len);
		}
		break;
	case N_ADD:
		for (int k = 0; k < nd->n_in; k++) {
			int c = nd->in[k];
			if (!g->node[c].need_grad)
				continue;
			size_t len = (size_t)n * (size_t)W;
			memcpy(grad_begin(ws, c), dY, sizeof(float) * len);
			grad_end(ws, c, len);
		}
		break;
	case N_CROSS: {
		const int L = nd->n_layers, d = W, r = nd->rank;
		float *const *aux = ws->aux[id];
		float *dx0 = want ? aux[3 * L - 1] : NULL;
		float *dxa = aux[3 * L], *dxb = aux[3 * L + 1];
		if (dx0)
			memset(dx0, 0, sizeof(float) * (size_t)n * d);
		/* dT and dVt live in the ws scratch (acc is free until grad_begin
		 * below); dx_l alternates between dxa and dxb. */
		float *dT = ws->acc, *dVt = ws->dbuf[0];
		float *cur = dY;
		for (int l = L - 1; l >= 0; l--) {
			const layer_t *ly = &nd->L[l];
			const float *xl = l ? aux[l - 1] : X;
			float *dxl = cur == dxa ? dxb : dxa;
			if (!l && !want)
				dxl = NULL;
			st_cross_backward(nn_, d, r, X, xl, params + ly->w,
					  r ? params + ly->u : NULL, aux[L - 1 + l],
					  aux[2 * L - 1 + l], cur, dT, dVt, dxl, dx0,
					  gparams + ly->w, r ? gparams + ly->u : NULL,
					  gparams + ly->b);
			cur = dxl;
		}
		if (want) {
			/* x0 is both the first layer's x and every layer's x0. */
			float *dst = grad_begin(ws, in0);
			const size_t len = (size_t)n * d;
			for (size_t j = 0; j < len; j++)
				dst[j] = cur[j] + dx0[j];
			grad_end(ws, in0, in_len);
		}
		break;
	}
	case N_ATTN: {
		const float *Wl[MAX_LAYERS], *bl[MAX_LAYERS];
		float *dW[MAX_LAYERS], *db[MAX_LAYERS];
		for (int l = 0; l < nd->n_layers; l++) {
			Wl[l] = params + nd->L[l].w;
			bl[l] = params + nd->L[l].b;
			dW[l] = gparams + nd->L[l].w;
			db[l] = gparams + nd->L[l].b;
		}
		st_attn_backward(&nd->attn, r0, n, b->row_off, b->key_slot, b->key_val,
				 b->key_idx, ws->rows, Wl, bl, dY, ws->aux[id][0], dW, db, gu,
				 gstride);
		break;
	}
	case N_MMOE:
		st_mmoe_backward(&nd->mmoe, nn_, X, params + nd->p0, dY, ws->aux[id][0],
				 want ? grad_begin(ws, in0) : NULL, gparams + nd->p0);
		if (want)
			grad_end(ws, in0, in_len);
		break;
	case N_SLICE:
		if (want && ws->gset[in0]) {
			st_slice_backward_add(nn_, g->node[in0].width, nd->offset, W, dY,
					      ws->grad[in0]);
		} else if (want) {
			st_slice_backward(nn_, g->node[in0].width, nd->offset, W, dY,
					  grad_begin(ws, in0));
			grad_end(ws, in0, in_len);
		}
		break;
	}
}

void st_lgraph_backward(const st_lgraph_t *g, st_lgraph_ws_t *ws, const st_batch_t *b,
		       uint32_t r0, uint32_t n, const float *params, float *gparams,
		       float *gu, int gstride)
{
	assert(g->finished && n <= ws->max_n);
	memset(ws->gset, 0, sizeof ws->gset);
	ws->gset[g->out] = 1;   /* the caller filled st_lgraph_dlogit */
	st__lgraph_heads_unpack(g, ws, n);   /* several heads: their dlogits */
	for (int i = g->n_nodes - 1; i >= 0; i--)
		if (ws->gset[i] && g->node[i].need_grad)
			backward_node(g, ws, i, b, r0, n, params, gparams, gu, gstride);
}
