/*
 * model.c — the CTR model presets of model.h (lr, dnn, wdl, deepfm, dlrm,
 * dcnv2),
 * each built as a layer graph (graph.h) from the job's model config.
 *
 * The presets are Lua functions (stdlib/strata/presets.lua): a job's preset
 * arrives with the layers its function built (cfg->n_preset_nodes, lang/
 * job.h), and those are built here as a graph written in the job is. The
 * hand-written builders at the end of st_model_create are the reference
 * twin (STYLE.md): they build a preset config without layers (checkpoints
 * and exports, which save the preset's fields and not its layers; API
 * callers), and tests/unit/test_presets.c checks the two bit for bit.
 *
 * A model is the sparse row layout (which columns of a key's row hold its
 * embedding and its wide weight, how slots pool) plus one graph that holds
 * the dense parameters and runs the layers. This file validates the config
 * with messages that name the preset, lays out the rows, and calls the
 * graph builders in the order that fixes the tensor order (and so the
 * offsets and the initial values, which come from one RNG stream in tensor
 * order): dense.*, bot.*, mlp.*, out.* — the order of the hand-written
 * presets this replaced, so every golden fixture and saved checkpoint still
 * matches.
 *
 * Threads: none of its own. A model is shared read-only by all workers; each
 * worker owns one st_model_ws_t (its graph workspace), which caches the
 * activations of the last forward for the backward of the same call.
 *
 * Invariants: row layout per slot s is emb[dim_s] followed, for presets
 * with a wide part, by the wide weight at column dim_s (the last column).
 * The lr preset has no embedding: its row is the wide weight alone.
 *
 * The graphs (PyTorch nn.Linear layout: weight [out × in], bias [out]):
 *   lr:     add(wide, linear"dense"(x))
 *   dnn:    linear"out"(mlp"mlp"(concat(embed, x)))
 *   wdl:    add(linear"out"(mlp(concat(embed, x))), wide, linear"dense"(x))
 *   deepfm: the same + fm(embed) as the last term of the add
 *   dlrm:   z0 = mlp"bot"(x); Z = concat(z0, embed);
 *           linear"out"(mlp"mlp"(concat(z0, dot(Z))))
 *   dcnv2:  linear"out"(mlp"mlp"(cross"cross"(concat(embed, x))))
 *           (Wang et al. 2020, "DCN V2", §3: the stacked structure; the
 *           cross layers are nn.h's st_cross_*, full or low rank)
 * with the pairs of dot in nn.h's tril order over Z = [z0, e_1, ..., e_S]
 * (DLRM's interact_features with arch_interaction_itself = False, Naumov et
 * al. 2019 §2.2). The add sums left to right, the order in which the
 * hand-written code accumulated the logit, so the logits are bit-identical.
 *
 * Heads (a graph with model.heads; docs/models.md, "Several labels"): the
 * graph's logits are n × H, head h learns label head_label[h] with weight
 * head_w[h]; heads_loss runs the one-head loss on each head's column, so
 * the one-head path (one head, one label) is the code it always was.
 */
#include "ops/nn/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/nn/graph.h"
#include "ops/nn/nn.h"
#include "runtime/err.h"

enum { M_LR, M_DNN, M_WDL, M_DEEPFM, M_DLRM, M_DCNV2, M_GRAPH };
enum { ACT_NONE = ST_LGRAPH_ACT_NONE, ACT_RELU = ST_LGRAPH_ACT_RELU,
       ACT_SIGMOID = ST_LGRAPH_ACT_SIGMOID };

struct st_model {
	int type, act, log1p, mean;
	int n_dense, n_slots;
	int *dim, *off, *row_dim;   /* [n_slots] */
	int *wide_col;              /* [n_slots]: column of the wide weight */
	uint8_t *slot_mean;         /* NULL or [n_slots]: per-field pooling (nn.h) */
	uint8_t *seq;               /* NULL or [n_slots]: pooling "none" (graph.h) */
	int width;                  /* sum of embedding dims */
	int max_row_dim, has_wide;
	int emb_d;                  /* common dim (deepfm, dlrm), else 0 */
	st_pool_layout_t pool;
	st_lgraph_t *g;
	/* Heads (1 unless a graph declared several): head h learns label
	 * head_label[h] of the batch with weight head_w[h] (job.h). */
	int n_heads;
	int head_label[ST_MODEL_MAX_HEADS];
	float head_w[ST_MODEL_MAX_HEADS];
	char head_name[ST_MODEL_MAX_HEADS][32];
};

struct st_model_ws {
	st_lgraph_ws_t *g;
	/* Several heads: one head's logits, labels, probabilities and
	 * dlogits gathered from the n × H layout (4 × max_n floats). */
	float *col;
};

/* ---- creation ---------------------------------------------------------- */

/* The preset's index, or ST_EINVAL for a name that is none. */
static int parse_type(const char *s)
{
	static const char *names[] = { "lr", "dnn", "wdl", "deepfm", "dlrm", "dcnv2",
				       "graph" };
	for (int i = 0; i < 7; i++)
		if (s && !strcmp(s, names[i]))
			return i;
	return ST_EINVAL;
}

/* A graph config's node list is well formed: kinds known, inputs earlier
 * nodes, counts in range, the output a node. (Shapes are the builders'.)
 * validate.lua refuses all of this with the layer's line; this guards
 * configs read back from checkpoints and API callers. */
static int check_nodes(const st_model_cfg_t *cfg, int n_nodes, int node_out)
{
	if (n_nodes < 1 || n_nodes > ST_MODEL_MAX_NODES || node_out < 0 ||
	    node_out >= n_nodes) {
		st_error("model %s: %d layers (1..%d), output %d", cfg->type, n_nodes,
			 ST_MODEL_MAX_NODES, node_out);
		return ST_EINVAL;
	}
	for (int i = 0; i < n_nodes; i++) {
		const st_model_node_t *nd = &cfg->nodes[i];
		int bad = nd->kind < 0 || nd->kind >= ST_NODE_NKINDS || nd->n_in < 0 ||
			  nd->n_in > ST_NODE_MAX_IN || nd->n_sizes < 0 || nd->n_sizes > 16 ||
			  !memchr(nd->name, 0, sizeof nd->name);
		for (int k = 0; !bad && k < nd->n_in; k++)
			bad = nd->in[k] < 0 || nd->in[k] >= i;
		for (int k = 0; !bad && k < nd->n_sizes; k++)
			bad = nd->sizes[k] < 1;
		if (bad) {
			st_error("model %s: layer %d is malformed (kind %d, %d inputs, each an "
				 "earlier layer; %d sizes >= 1)", cfg->type, i, nd->kind, nd->n_in,
				 nd->n_sizes);
			return ST_EINVAL;
		}
	}
	return ST_OK;
}

/* A preset's nodes (from presets.lua via validate.lua) must fit the row
 * layout the preset gives its keys: a wide column exactly for lr, wdl and
 * deepfm, and no embedding for lr (its rows hold the wide weight alone). A
 * config that disagrees was edited by hand or written by another strata. */
static int check_preset_nodes(int type, const st_model_cfg_t *cfg)
{
	int wide = 0, embed = 0;
	for (int i = 0; i < cfg->n_preset_nodes; i++) {
		wide |= cfg->nodes[i].kind == ST_NODE_WIDE;
		embed |= cfg->nodes[i].kind == ST_NODE_EMBED;
	}
	int want_wide = type == M_LR || type == M_WDL || type == M_DEEPFM;
	const char *why = wide && !want_wide ? "has a wide layer, but its rows have no wide column"
			  : !wide && want_wide ? "has no wide layer, but its rows have a wide column"
			  : type == M_LR && embed ? "has an embedding layer, but lr's rows have no embedding"
						  : NULL;
	if (why) {
		st_error("model %s: the preset's layer list %s; use type 'graph' for a model of "
			 "other layers", cfg->type, why);
		return ST_EINVAL;
	}
	return ST_OK;
}

/* A graph's heads (validate.lua's V:heads refuses all of this at the job's
 * line; this guards configs read back from checkpoints and API callers):
 * 0..ST_MODEL_MAX_HEADS of them, on a graph only, each on a layer and a
 * label of its own, with a positive finite weight and a name. */
static int check_heads(int type, const st_model_cfg_t *cfg)
{
	if (cfg->n_heads == 0)
		return ST_OK;
	int bad = type != M_GRAPH || cfg->n_heads < 0 || cfg->n_heads > ST_MODEL_MAX_HEADS;
	for (int h = 0; !bad && h < cfg->n_heads; h++) {
		const st_model_head_t *hd = &cfg->heads[h];
		bad = hd->node < 0 || hd->node >= cfg->n_nodes || hd->label < 0 ||
		      hd->label >= ST_BATCH_MAX_LABELS || !(hd->weight > 0) ||
		      !isfinite(hd->weight) || !memchr(hd->name, 0, sizeof hd->name) ||
		      !hd->name[0];
		for (int k = 0; !bad && k < h; k++)
			bad = cfg->heads[k].node == hd->node || cfg->heads[k].label == hd->label;
		if (bad)
			st_error("model %s: head %d is malformed (%d heads on a graph, each on a "
				 "layer and a label of its own, weight > 0, a name)", cfg->type, h,
				 cfg->n_heads);
	}
	if (bad && cfg->n_heads <= 0)
		st_error("model %s: %d heads", cfg->type, cfg->n_heads);
	return bad ? ST_EINVAL : ST_OK;
}

/* Calls the builders for cfg's nodes in order (so tensor order = layer
 * order, prefixes = layer names) and returns the output's graph id, or the
 * first builder's error code. A layer's inputs are the graph ids of earlier
 * layers (an mlp of no sizes or 0 cross layers is its input's id). */
static int build_nodes(st_lgraph_t *g, const st_model_cfg_t *cfg, int n_nodes, int node_out,
		       int *id)
{
	for (int i = 0; i < n_nodes; i++) {
		const st_model_node_t *nd = &cfg->nodes[i];
		int in[ST_NODE_MAX_IN];
		for (int k = 0; k < nd->n_in; k++)
			in[k] = id[nd->in[k]];
		int in0 = nd->n_in ? in[0] : ST_EINVAL;
		switch (nd->kind) {
		case ST_NODE_EMBED: id[i] = st_lgraph_embed(g); break;
		case ST_NODE_DENSE: id[i] = st_lgraph_dense(g, nd->a); break;
		case ST_NODE_WIDE: id[i] = st_lgraph_wide(g); break;
		case ST_NODE_CONCAT: id[i] = st_lgraph_concat(g, nd->n_in, in); break;
		case ST_NODE_MLP:
			id[i] = st_lgraph_mlp(g, in0, nd->name, nd->n_sizes, nd->sizes, nd->a);
			break;
		case ST_NODE_LINEAR: id[i] = st_lgraph_linear(g, in0, nd->name, nd->a); break;
		case ST_NODE_FM: id[i] = st_lgraph_fm(g, in0, nd->a); break;
		case ST_NODE_DOT: id[i] = st_lgraph_dot(g, in0, nd->a); break;
		case ST_NODE_ADD: id[i] = st_lgraph_add(g, nd->n_in, in); break;
		case ST_NODE_CROSS:
			id[i] = st_lgraph_cross(g, in0, nd->name, nd->a, nd->b);
			break;
		case ST_NODE_ATTENTION:
			id[i] = st_lgraph_attention(g, nd->name, nd->a, nd->b, nd->n_sizes,
						    nd->sizes, nd->c);
			break;
		case ST_NODE_MMOE:
			id[i] = st_lgraph_mmoe(g, in0, nd->name, nd->a, nd->n_sizes, nd->sizes,
					       nd->c, nd->b);
			break;
		case ST_NODE_SLICE: id[i] = st_lgraph_slice(g, in0, nd->a, nd->b); break;
		default: id[i] = ST_EINVAL; break;
		}
		if (id[i] < 0)
			return id[i];
	}
	return id[node_out];
}

int st_model_create(st_model_t **out, const st_model_cfg_t *cfg, int n_dense,
		    int n_slots, uint64_t seed)
{
	int type = parse_type(cfg->type);
	if (type < 0) {
		st_error("model: unknown type '%s' (lr, dnn, wdl, deepfm, dlrm, dcnv2, graph)",
			 cfg->type ? cfg->type : "(null)");
		return ST_EINVAL;
	}
	const char *act = cfg->activation ? cfg->activation : "relu";
	const char *pool = cfg->pooling ? cfg->pooling : "sum";
	const char *tr = cfg->dense_transform ? cfg->dense_transform : "log1p";
	if ((strcmp(act, "relu") && strcmp(act, "sigmoid") && strcmp(act, "none")) ||
	    (strcmp(pool, "sum") && strcmp(pool, "mean")) ||
	    (strcmp(tr, "log1p") && strcmp(tr, "none"))) {
		st_error("model %s: activation '%s' (relu|sigmoid|none), pooling '%s' "
			 "(sum|mean), dense_transform '%s' (log1p|none)", cfg->type, act,
			 pool, tr);
		return ST_EINVAL;
	}
	if (n_dense < 0 || n_slots < 1 || n_slots > 65535 || cfg->n_hidden < 0 ||
	    cfg->n_hidden > 16 || cfg->n_bottom < 0 || cfg->n_bottom > 16 ||
	    (cfg->slot_dims && cfg->n_slot_dims != n_slots) ||
	    (cfg->slot_pooling && cfg->n_slot_pooling != n_slots)) {
		st_error("model %s: bad shape (%d dense, %d slots, %d hidden, %d bottom, "
			 "%d slot dims)", cfg->type, n_dense, n_slots, cfg->n_hidden,
			 cfg->n_bottom, cfg->slot_dims ? cfg->n_slot_dims : n_slots);
		return ST_EINVAL;
	}
	/* Only dcnv2 reads the cross fields; other presets ignore them, as they
	 * ignore `bottom`. */
	if (type == M_DCNV2 && (cfg->n_cross < 0 || cfg->n_cross > 16 || cfg->cross_rank < 0)) {
		st_error("model dcnv2: cross_layers %d (0..16), cross_rank %d (>= 0; 0 = full "
			 "rank)", cfg->n_cross, cfg->cross_rank);
		return ST_EINVAL;
	}
	/* The layers to build: a graph's, or a preset's from its Lua function
	 * (none: the preset's C reference twin below builds it). */
	int n_nodes = type == M_GRAPH ? cfg->n_nodes : cfg->n_preset_nodes;
	int node_out = type == M_GRAPH ? cfg->node_out : cfg->preset_out;
	if ((type == M_GRAPH || n_nodes) && check_nodes(cfg, n_nodes, node_out) < 0)
		return ST_EINVAL;
	if (type != M_GRAPH && n_nodes && check_preset_nodes(type, cfg) < 0)
		return ST_EINVAL;
	if (check_heads(type, cfg) < 0)
		return ST_EINVAL;
	st_model_t *m = calloc(1, sizeof *m);
	if (!m)
		return ST_ENOMEM;
	m->type = type;
	m->n_heads = 1;             /* a graph's heads replace this below */
	m->head_w[0] = 1.0f;
	strcpy(m->head_name[0], "label");
	m->act = !strcmp(act, "relu") ? ACT_RELU : !strcmp(act, "sigmoid") ? ACT_SIGMOID
								      : ACT_NONE;
	m->mean = !strcmp(pool, "mean");
	m->log1p = !strcmp(tr, "log1p");
	m->n_dense = n_dense;
	m->n_slots = n_slots;
	m->dim = calloc((size_t)n_slots, sizeof(int));
	m->off = calloc((size_t)n_slots, sizeof(int));
	m->row_dim = calloc((size_t)n_slots, sizeof(int));
	m->wide_col = calloc((size_t)n_slots, sizeof(int));
	if (!m->dim || !m->off || !m->row_dim || !m->wide_col) {
		st_model_destroy(m);
		return ST_ENOMEM;
	}
	m->has_wide = type == M_LR || type == M_WDL || type == M_DEEPFM;
	for (int i = 0; type == M_GRAPH && i < cfg->n_nodes; i++)
		m->has_wide |= cfg->nodes[i].kind == ST_NODE_WIDE;
	int rc = ST_OK;
	for (int s = 0; s < n_slots; s++) {
		int d = type == M_LR ? 0 : cfg->slot_dims ? cfg->slot_dims[s] : cfg->emb_dim;
		if (type != M_LR && d < 1) {
			st_error("model %s: slot %d has embedding dim %d (need >= 1)",
				 cfg->type, s, d);
			rc = ST_EINVAL;
			break;
		}
		m->dim[s] = d;
		m->off[s] = m->width;
		m->width += d;
		m->row_dim[s] = d + m->has_wide;
		m->wide_col[s] = d;
		if (m->row_dim[s] > m->max_row_dim)
			m->max_row_dim = m->row_dim[s];
	}
	if (rc == ST_OK && (type == M_DEEPFM || type == M_DLRM)) {
		/* FM and the dot interaction pair up vectors coordinate by
		 * coordinate, so every field must have the same dimension. */
		for (int s = 1; s < n_slots; s++)
			if (m->dim[s] != m->dim[0]) {
				st_error("model %s: every slot needs the same embedding dim "
					 "(slot 0 has %d, slot %d has %d); set one emb_dim",
					 cfg->type, m->dim[0], s, m->dim[s]);
				rc = ST_EINVAL;
				break;
			}
		m->emb_d = m->dim[0];
	}
	if (rc == ST_OK && type == M_DLRM) {
		int nb = cfg->n_bottom;
		int last = nb ? cfg->bottom[nb - 1] : m->emb_d;
		if (n_dense < 1 || last != m->emb_d) {
			st_error("model dlrm: the bottom MLP needs dense features (have %d) "
				 "and its last size must equal emb_dim %d (got %d)", n_dense,
				 m->emb_d, last);
			rc = ST_EINVAL;
		}
	}
	for (int k = 0; k < cfg->n_hidden && rc == ST_OK; k++)
		if (cfg->hidden[k] < 1)
			rc = ST_EINVAL;
	for (int k = 0; k < cfg->n_bottom && rc == ST_OK; k++)
		if (cfg->bottom[k] < 1)
			rc = ST_EINVAL;
	if (rc < 0) {
		if (rc == ST_EINVAL)
			st_error("model %s: layer sizes must be >= 1", cfg->type);
		st_model_destroy(m);
		return rc;
	}
	if (cfg->slot_pooling) {
		/* A list field's own pooling (lang/job.h): 0 = model.pooling. */
		m->slot_mean = calloc((size_t)n_slots, 1);
		if (!m->slot_mean) {
			st_model_destroy(m);
			return ST_ENOMEM;
		}
		for (int s = 0; s < n_slots; s++) {
			int p = cfg->slot_pooling[s];
			m->slot_mean[s] = (uint8_t)(p == ST_POOLING_MODEL ? m->mean
									  : p == ST_POOLING_MEAN);
		}
		/* Sequences (pooling "none") are for a graph's attention layers;
		 * a preset would pool nothing of them, so it refuses them. */
		for (int s = 0; s < n_slots && rc == ST_OK; s++) {
			if (cfg->slot_pooling[s] != ST_POOLING_NONE)
				continue;
			if (type != M_GRAPH) {
				st_error("model %s: slot %d has pooling 'none' (a sequence); only "
					 "a graph model's attention layer reads one", cfg->type, s);
				rc = ST_EINVAL;
			} else if (!m->seq && !(m->seq = calloc((size_t)n_slots, 1))) {
				rc = ST_ENOMEM;
			} else {
				m->seq[s] = 1;
			}
		}
		if (rc < 0) {
			st_model_destroy(m);
			return rc;
		}
	}
	m->pool = (st_pool_layout_t){ .n_slots = n_slots, .dim = m->dim, .off = m->off,
				      .width = m->width, .mean = m->mean,
				      .slot_mean = m->slot_mean };

	/* The preset's graph. Builders pass a negative id on, so the chain is
	 * checked once, at finish. Tensor order = builder call order. */
	st_lgraph_sparse_t sp = { .pool = m->pool, .wide_col = m->has_wide ? m->wide_col : NULL,
				  .seq = m->seq };
	rc = st_lgraph_create(&m->g, &sp, n_dense);
	if (rc < 0) {
		st_model_destroy(m);
		return rc;
	}
	st_lgraph_t *g = m->g;
	if (n_nodes) {
		/* A graph, or a preset's graph from its Lua function (presets.lua):
		 * the same builders as below, called in the order of the nodes. */
		int id[ST_MODEL_MAX_NODES];
		int top = build_nodes(g, cfg, n_nodes, node_out, id);
		if (top >= 0 && type == M_GRAPH && cfg->n_heads > 0) {
			/* Several heads (or one declared with heads): each its
			 * layer's graph node; labels and weights for the loss. */
			int outs[ST_MODEL_MAX_HEADS];
			for (int h = 0; h < cfg->n_heads; h++) {
				outs[h] = id[cfg->heads[h].node];
				m->head_label[h] = cfg->heads[h].label;
				m->head_w[h] = (float)cfg->heads[h].weight;
				snprintf(m->head_name[h], sizeof m->head_name[h], "%s",
					 cfg->heads[h].name);
			}
			m->n_heads = cfg->n_heads;
			rc = st_lgraph_finish_heads(g, cfg->n_heads, outs, seed);
		} else {
			rc = st_lgraph_finish(g, top, seed);
		}
		if (rc < 0) {
			st_model_destroy(m);
			return rc;
		}
		*out = m;
		return ST_OK;
	}
	/* The reference twin of the Lua presets (stdlib/strata/presets.lua):
	 * configs without nodes (checkpoints and exports written before the
	 * presets were Lua, API callers) build here. test_presets.c checks the
	 * two give the same tensors, values, forward and gradients bit for
	 * bit. */
	int x = st_lgraph_dense(g, m->log1p);
	int lin = m->has_wide ? st_lgraph_linear(g, x, "dense", 1) : -1;
	int logit;
	if (type == M_LR) {
		logit = st_lgraph_add(g, 2, (int[]){ st_lgraph_wide(g), lin });
	} else if (type == M_DLRM) {
		/* No explicit bottom = one layer straight to emb_dim. */
		int one[1] = { m->emb_d };
		int z0 = cfg->n_bottom ? st_lgraph_mlp(g, x, "bot", cfg->n_bottom, cfg->bottom,
						      m->act)
				       : st_lgraph_mlp(g, x, "bot", 1, one, m->act);
		int e = st_lgraph_embed(g);
		int Z = st_lgraph_concat(g, 2, (int[]){ z0, e });
		int pairs = st_lgraph_dot(g, Z, n_slots + 1);
		int top = st_lgraph_concat(g, 2, (int[]){ z0, pairs });
		int h = st_lgraph_mlp(g, top, "mlp", cfg->n_hidden, cfg->hidden, m->act);
		logit = st_lgraph_linear(g, h, "out", 1);
	} else {
		int e = st_lgraph_embed(g);
		int h = st_lgraph_concat(g, 2, (int[]){ e, x });
		if (type == M_DCNV2)
			h = st_lgraph_cross(g, h, "cross", cfg->n_cross, cfg->cross_rank);
		h = st_lgraph_mlp(g, h, "mlp", cfg->n_hidden, cfg->hidden, m->act);
		logit = st_lgraph_linear(g, h, "out", 1);
		if (type == M_WDL || type == M_DEEPFM) {
			int terms[4] = { logit, st_lgraph_wide(g), lin, 0 };
			if (type == M_DEEPFM)
				terms[3] = st_lgraph_fm(g, e, n_slots);
			logit = st_lgraph_add(g, type == M_DEEPFM ? 4 : 3, terms);
		}
	}
	rc = st_lgraph_finish(g, logit, seed);
	if (rc < 0) {
		st_model_destroy(m);
		return rc;
	}
	*out = m;
	return ST_OK;
}

void st_model_destroy(st_model_t *m)
{
	if (!m)
		return;
	st_lgraph_destroy(m->g);
	free(m->dim);
	free(m->off);
	free(m->row_dim);
	free(m->wide_col);
	free(m->slot_mean);
	free(m->seq);
	free(m);
}

size_t st_model_nparams(const st_model_t *m) { return st_lgraph_nparams(m->g); }
float *st_model_params(st_model_t *m) { return st_lgraph_params(m->g); }
int st_model_ntensors(const st_model_t *m) { return st_lgraph_ntensors(m->g); }
int st_model_row_dim(const st_model_t *m, int slot) { return m->row_dim[slot]; }
int st_model_max_row_dim(const st_model_t *m) { return m->max_row_dim; }
int st_model_has_wide(const st_model_t *m) { return m->has_wide; }

const st_lgraph_t *st_model_graph(const st_model_t *m) { return m->g; }

double st_model_flops_per_example(const st_model_t *m)
{
	return st_lgraph_flops_per_example(m->g);
}

const st_tensor_info_t *st_model_tensor(const st_model_t *m, int i)
{
	return st_lgraph_tensor(m->g, i);
}

int st_model_find_tensor(const st_model_t *m, const char *name)
{
	for (int i = 0; i < st_lgraph_ntensors(m->g); i++)
		if (!strcmp(st_lgraph_tensor(m->g, i)->name, name))
			return i;
	return ST_ENOENT;
}

/* ---- workspace ----------------------------------------------------------- */

int st_model_ws_create(st_model_ws_t **out, const st_model_t *m, uint32_t max_n)
{
	st_model_ws_t *ws = calloc(1, sizeof *ws);
	if (!ws)
		return ST_ENOMEM;
	int rc = st_lgraph_ws_create(&ws->g, m->g, max_n);
	if (rc < 0) {
		free(ws);
		return rc;
	}
	/* heads_loss's columns: several heads, or one head on a batch of
	 * several labels (its label is not every row's first float) */
	ws->col = malloc(sizeof(float) * 4 * ((size_t)max_n + 1));
	if (!ws->col) {
		st_model_ws_destroy(ws);
		return ST_ENOMEM;
	}
	*out = ws;
	return ST_OK;
}

void st_model_ws_destroy(st_model_ws_t *ws)
{
	if (!ws)
		return;
	st_lgraph_ws_destroy(ws->g);
	free(ws->col);
	free(ws);
}

/* ---- forward / backward -------------------------------------------------- */

/* The loss of every head, one head at a time through the one-head loss
 * (st_logloss_forward_backward, so each head's numbers are those a
 * one-head model of that logit would get): head h's column of the n × H
 * logits and its label (labels[i * L + head_label[h]]) are gathered, its
 * probabilities and dlogits (scale × weight_h × (σ(z) − y)) scattered back.
 * dl NULL: probabilities only. Returns Σ_h weight_h × Σ_i loss. */
static double heads_loss(const st_model_t *m, st_model_ws_t *ws, const st_batch_t *b,
			 uint32_t r0, uint32_t n, const float *z, float scale, float *prob,
			 float *dl)
{
	const int H = m->n_heads;
	const uint32_t L = b->n_labels;
	float *zc = ws->col, *yc = zc + n, *pc = yc + n, *dc = pc + n;
	double loss = 0.0;
	for (int h = 0; h < H; h++) {
		/* a batch with fewer labels than the head needs was refused by
		 * the job's checks; read label 0 rather than past the row */
		uint32_t l = (uint32_t)m->head_label[h] < L ? (uint32_t)m->head_label[h] : 0;
		for (uint32_t i = 0; i < n; i++) {
			zc[i] = z[(size_t)i * H + h];
			yc[i] = b->labels[(size_t)(r0 + i) * L + l];
		}
		double lh = st_logloss_forward_backward((int)n, zc, yc, scale * m->head_w[h], pc,
							dl ? dc : NULL);
		loss += (double)m->head_w[h] * lh;
		for (uint32_t i = 0; i < n; i++) {
			if (prob)
				prob[(size_t)i * H + h] = pc[i];
			if (dl)
				dl[(size_t)i * H + h] = dc[i];
		}
	}
	return loss;
}

void st_model_forward(const st_model_t *m, st_model_ws_t *ws, const st_batch_t *b,
		      uint32_t r0, uint32_t n, float *const *rows,
		      const float *params, float *logit, float *prob)
{
	const float *z = st_lgraph_forward(m->g, ws->g, b, r0, n, rows, params);
	if (m->n_heads > 1 || b->n_labels > 1)
		heads_loss(m, ws, b, r0, n, z, 0.0f, prob, NULL);
	else
		st_logloss_forward_backward((int)n, z, b->labels + r0, 0.0f, prob, NULL);
	if (logit)
		memcpy(logit, z, sizeof(float) * n * (size_t)m->n_heads);
}

double st_model_step(const st_model_t *m, st_model_ws_t *ws, const st_batch_t *b,
		     uint32_t r0, uint32_t n, float *const *rows,
		     const float *params, float scale, float *prob,
		     float *gparams, float *gu, int gstride)
{
	const float *z = st_lgraph_forward(m->g, ws->g, b, r0, n, rows, params);
	float *dl = st_lgraph_dlogit(ws->g);
	/* prob may be NULL: the loss then writes its probabilities nowhere. */
	double loss = m->n_heads > 1 || b->n_labels > 1
		? heads_loss(m, ws, b, r0, n, z, scale, prob, dl)
		: st_logloss_forward_backward((int)n, z, b->labels + r0, scale, prob, dl);
	st_lgraph_backward(m->g, ws->g, b, r0, n, params, gparams, gu, gstride);
	return loss;
}

int st_model_nheads(const st_model_t *m) { return m->n_heads; }
int st_model_head_label(const st_model_t *m, int h) { return m->head_label[h]; }
const char *st_model_head_name(const st_model_t *m, int h) { return m->head_name[h]; }
float st_model_head_weight(const st_model_t *m, int h) { return m->head_w[h]; }
