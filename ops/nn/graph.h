/*
 * graph.h — a layer graph executor: a CTR model as a small DAG of the layers
 * of nn.h, run forward and backward over a range of examples of a batch.
 *
 * (Not runtime/graph.h, the pipeline of stages: this is the dense model's
 * graph, prefix st_lgraph_ for "layer graph".)
 *
 * A graph is built once, node by node, then finished; after that it is
 * immutable and shared read-only by every worker, each of which owns one
 * st_lgraph_ws_t (activations of its last forward, for the backward of the
 * same call). Node ids are small integers returned by the builders, in
 * creation order; an input must exist before the node that reads it, so
 * creation order is a topological order (forward runs it as is, backward in
 * reverse).
 *
 * Every node outputs n × width floats (row-major, one row per example):
 *
 *   kind     builder              width            parameters (nn.Linear layout)
 *   embed    st_lgraph_embed       sum of slot dims none (sparse rows: pooled, nn.h;
 *                                  but sequences    a sequence slot is attention's)
 *   dense    st_lgraph_dense       n_dense          none (log1p(max(x, 0)) or x)
 *   wide     st_lgraph_wide        1                none (the wide column of each row)
 *   concat   st_lgraph_concat      sum of inputs    none
 *   mlp      st_lgraph_mlp         last size        <p>.<k>.weight [h_k × in], .bias
 *   linear   st_lgraph_linear      out              <p>.weight [out × in], <p>.bias
 *   fm       st_lgraph_fm          1                none (input = F fields of d)
 *   dot      st_lgraph_dot         F(F-1)/2         none (input = F fields of d)
 *   add      st_lgraph_add         common width     none (element-wise sum)
 *   cross    st_lgraph_cross       input width      DCNv2 layers, see st_lgraph_cross
 *   attention st_lgraph_attention  the keys' dim    DIN activation unit, <p>.att.<l>.*
 *   mmoe     st_lgraph_mmoe        tasks × last size experts and gates, see st_lgraph_mmoe
 *   slice    st_lgraph_slice       width            none (a column range of the input)
 *
 * Dense parameters live in one contiguous array owned by the graph, split
 * into named tensors in creation order (the order the builders were called);
 * st_lgraph_finish initializes them from a seed in that order.
 *
 * Builders return the new node id (>= 0) or a negative ST_E* code with a
 * message naming the layer (e.g. "cross: input 0 is 429 wide, ..."). A
 * builder given a negative input id returns that code unchanged, so a
 * preset can chain builders and check once, at st_lgraph_finish.
 */
#ifndef ST_NN_GRAPH_H
#define ST_NN_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include "ops/nn/nn.h"
#include "runtime/batch.h"

typedef struct st_lgraph st_lgraph_t;
typedef struct st_lgraph_ws st_lgraph_ws_t;

/* One named dense tensor (also model.h's tensor type). */
typedef struct st_tensor_info {
	const char *name;      /* e.g. "mlp.0.weight" */
	size_t offset;         /* into the parameter array */
	int ndim;
	int shape[2];
} st_tensor_info_t;

/* The values of nn.h's ST_ACT_* codes (st_act_forward / _backward). */
enum st_lgraph_act {
	ST_LGRAPH_ACT_NONE = ST_ACT_NONE,
	ST_LGRAPH_ACT_RELU = ST_ACT_RELU,
	ST_LGRAPH_ACT_SIGMOID = ST_ACT_SIGMOID
};

/* What the sparse rows hold. `pool` lays out the pooled embeddings (its
 * arrays are the caller's and must outlive the graph); wide_col, when
 * non-NULL ([n_slots], caller's, outlives the graph), is the column of each
 * slot's row that holds the wide weight. */
typedef struct st_lgraph_sparse {
	st_pool_layout_t pool;
	const int *wide_col;
	/* NULL, or [n_slots] (caller's, outlives the graph): nonzero marks a
	 * sequence slot (a list field with pooling = "none"), which the embed
	 * node leaves out (0 wide) and attention nodes read key by key. */
	const uint8_t *seq;
} st_lgraph_sparse_t;

/* Empty graph over examples with n_dense dense features and the sparse
 * layout *sp (copied). ST_OK or ST_ENOMEM. Caller destroys. */
int st_lgraph_create(st_lgraph_t **out, const st_lgraph_sparse_t *sp, int n_dense);
void st_lgraph_destroy(st_lgraph_t *g);

/* ---- builders (before st_lgraph_finish) ---------------------------------- */

/* Pooled embeddings of every slot, side by side (nn.h's pool layout). */
int st_lgraph_embed(st_lgraph_t *g);
/* The dense features, log1p(max(x, 0)) when log1p, else as they are. */
int st_lgraph_dense(st_lgraph_t *g, int log1p);
/* Σ over an example's keys of value × the key's wide weight: width 1. */
int st_lgraph_wide(st_lgraph_t *g);
/* The inputs' rows side by side, in argument order. */
int st_lgraph_concat(st_lgraph_t *g, int n_in, const int *in);
/* Hidden layers prefix.0 .. prefix.<n-1> of sizes[k], each followed by
 * act. n == 0 returns `in` itself (no node). */
int st_lgraph_mlp(st_lgraph_t *g, int in, const char *prefix, int n, const int *sizes,
		 int act);
/* prefix.weight [out × in], prefix.bias [out], no activation. */
int st_lgraph_linear(st_lgraph_t *g, int in, const char *prefix, int out);
/* FM second-order term over the input read as `fields` vectors (width 1). */
int st_lgraph_fm(st_lgraph_t *g, int in, int fields);
/* DLRM dot interaction over the input read as `fields` vectors. */
int st_lgraph_dot(st_lgraph_t *g, int in, int fields);
/* in[0] + in[1] + ..., summed left to right; every input as wide. */
int st_lgraph_add(st_lgraph_t *g, int n_in, const int *in);
/* n_layers DCNv2 cross layers over the input x0 (nn.h's st_cross_*):
 * x_{l+1} = x0 ⊙ (W_l x_l + b_l) + x_l. rank 0: W_l full, tensors
 * prefix.<l>.weight [d × d], prefix.<l>.bias [d]; rank r > 0: W_l = U Vᵀ,
 * tensors prefix.<l>.v.weight [r × d], prefix.<l>.u.weight [d × r],
 * prefix.<l>.u.bias [d]. n_layers == 0 returns `in`. */
int st_lgraph_cross(st_lgraph_t *g, int in, const char *prefix, int n_layers, int rank);

/* DIN's target attention (ops/nn/attention.h; Zhou et al. 2018, §4.3):
 * out = Σ_t MLP_att([k_t, q, k_t − q, k_t ⊙ q]) k_t over the keys k_t of
 * sequence slot k_slot, with q the embedding of slot q_slot (both read from
 * the sparse rows; no graph input). Width: the slots' common dim d.
 * Tensors prefix.att.<l>.weight / .bias for l = 0..n_hidden: hidden layers
 * of hidden[l] with act (enum st_lgraph_act), then one to 1 (no
 * activation). FLOPs are counted per key of the sequence. */
int st_lgraph_attention(st_lgraph_t *g, const char *prefix, int q_slot, int k_slot,
			int n_hidden, const int *hidden, int act);

/* MMoE (ops/nn/mmoe.h; Ma et al. 2018, §4.2): n_experts MLPs of sizes
 * [n_layers] with act (enum st_lgraph_act) over the input, and n_tasks
 * softmax gates over the experts; the output is the n_tasks gated sums side
 * by side (width n_tasks × sizes[n_layers-1], task t at columns
 * t × sizes[n_layers-1] ..). Tensors, created (and so initialized) in this
 * order: prefix.expert.<e>.<k>.weight [sizes[k] × in_k] / .bias [sizes[k]]
 * for e, then k; then prefix.gate.<t>.weight [n_experts × in width] / .bias
 * [n_experts] for t. A name that would not fit a tensor name (31
 * characters) is refused. */
int st_lgraph_mmoe(st_lgraph_t *g, int in, const char *prefix, int n_experts, int n_layers,
		   const int *sizes, int act, int n_tasks);
/* Columns offset .. offset+width-1 of the input (no parameters): a task's
 * part of an mmoe, for its tower. */
int st_lgraph_slice(st_lgraph_t *g, int in, int offset, int width);

/* Declares `out` (width 1) the logit, allocates and initializes the dense
 * parameters from seed (weights uniform(-1/sqrt(in), 1/sqrt(in)) in tensor
 * order from one splitmix64 stream, biases 0), and freezes the graph.
 * ST_OK, ST_EINVAL (bad output; message logged) or ST_ENOMEM. */
int st_lgraph_finish(st_lgraph_t *g, int out, uint64_t seed);

/* Several heads (multi-task, docs/models.md "Several labels"): outs[0 ..
 * n_heads-1] are distinct 1-wide nodes, each one head's logit. Forward then
 * returns n × n_heads logits (example-major: z[i * n_heads + h]) and
 * st_lgraph_dlogit is n × n_heads in the same layout; parameters are
 * initialized as st_lgraph_finish does (which is n_heads = 1, outs = &out,
 * and keeps the one-head layout and results bit for bit). A negative
 * outs[h] is returned as is; ST_EINVAL (logged) for a bad or repeated
 * output; ST_ENOMEM. */
#define ST_LGRAPH_MAX_HEADS 16
int st_lgraph_finish_heads(st_lgraph_t *g, int n_heads, const int *outs, uint64_t seed);
/* Heads of a finished graph (1 after st_lgraph_finish) and head h's node. */
int st_lgraph_nheads(const st_lgraph_t *g);
int st_lgraph_head(const st_lgraph_t *g, int h);

/* ---- queries -------------------------------------------------------------- */

size_t st_lgraph_nparams(const st_lgraph_t *g);
float *st_lgraph_params(st_lgraph_t *g);
int st_lgraph_ntensors(const st_lgraph_t *g);
const st_tensor_info_t *st_lgraph_tensor(const st_lgraph_t *g, int i);
int st_lgraph_nnodes(const st_lgraph_t *g);
int st_lgraph_width(const st_lgraph_t *g, int node);
/* Dense FLOPs of one example's forward + backward. */
double st_lgraph_flops_per_example(const st_lgraph_t *g);
/* One node, for printing a model (strata plan): its kind ("mlp"), output
 * width, inputs (node ids; the graph's memory, valid while it lives), and
 * its own share of the dense parameters and of the FLOPs per example (the
 * nodes' shares sum to st_lgraph_nparams and _flops_per_example). ST_OK or
 * ST_EINVAL for a node that is none. Thread-safe. */
typedef struct st_lgraph_node_info {
	const char *kind;
	int width, n_in;
	const int *in;
	size_t nparams;
	double flops;
} st_lgraph_node_info_t;
int st_lgraph_node_info(const st_lgraph_t *g, int node, st_lgraph_node_info_t *out);

/* ---- running (after st_lgraph_finish) ----------------------------------- */

/* A worker's activations and scratch for up to max_n examples per call.
 * ST_OK or ST_ENOMEM; caller destroys. */
int st_lgraph_ws_create(st_lgraph_ws_t **out, const st_lgraph_t *g, uint32_t max_n);
void st_lgraph_ws_destroy(st_lgraph_ws_t *ws);

/* Forward over examples r0 .. r0+n-1 of b (n <= max_n; rows as in
 * model.h). Returns the logits, n × heads floats inside ws (example-major),
 * valid until the next call on ws. */
const float *st_lgraph_forward(const st_lgraph_t *g, st_lgraph_ws_t *ws,
			      const st_batch_t *b, uint32_t r0, uint32_t n,
			      float *const *rows, const float *params);

/* The gradient of the loss with respect to the logits of the last forward:
 * n × heads floats inside ws (the logits' layout) for the caller to fill
 * before st_lgraph_backward. */
float *st_lgraph_dlogit(st_lgraph_ws_t *ws);

/* Backward of the last forward on ws (same b, r0, n, rows, params):
 * ADDS the gradients into gparams[nparams] and gu[u * gstride + j]
 * (only the rows of keys present in the examples are touched). */
void st_lgraph_backward(const st_lgraph_t *g, st_lgraph_ws_t *ws, const st_batch_t *b,
		       uint32_t r0, uint32_t n, const float *params, float *gparams,
		       float *gu, int gstride);

#endif
