/*
 * graph_internal.h — the layer graph's private types (graph.c, heads.c):
 * nodes, their layers and tensors, the graph and a worker's workspace.
 * Nothing outside ops/nn/graph.c and ops/nn/heads.c includes it; the API is
 * graph.h.
 */
#ifndef ST_NN_GRAPH_INTERNAL_H
#define ST_NN_GRAPH_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "ops/nn/attention.h"
#include "ops/nn/graph.h"
#include "ops/nn/mmoe.h"

enum { N_EMBED, N_DENSE, N_WIDE, N_CONCAT, N_MLP, N_LINEAR, N_FM, N_DOT, N_ADD,
       N_CROSS, N_ATTN, N_MMOE, N_SLICE };

#define MAX_NODES 64
#define MAX_IN 16
#define MAX_LAYERS 16
/* Per node: cross keeps x_l, T_l and Vt_l per layer plus dx0 and dx. */
#define MAX_AUX (3 * MAX_LAYERS + 3)

/* One linear map's parameters: w [out × in] at offset w, b [out] at b
 * (NO_BIAS when none). Cross layers use w for W (or V), u for U. */
#define NO_BIAS ((size_t)-1)
typedef struct layer {
	int in, out;
	size_t w, b;
	size_t u;              /* low-rank cross: U [d × r] */
} layer_t;

typedef struct node {
	int kind;
	int n_in, in[MAX_IN];
	int width;
	int act;               /* mlp */
	int log1p;             /* dense */
	int fields, d;         /* fm, dot */
	int rank;              /* cross */
	int n_layers;          /* mlp, cross, attention (its MLP's layers) */
	st_attn_shape_t attn;  /* attention */
	st_mmoe_shape_t mmoe;  /* mmoe (its tensors start at p0, mmoe.h's order) */
	int offset;            /* slice: the first column */
	layer_t L[MAX_LAYERS];
	int need_grad;
	size_t p0;             /* the graph's nparams and flops when the node */
	double f0;             /* was made: its own are the growth up to the next */
} node_t;

typedef struct tensor {
	char name[32];
	st_tensor_info_t info;
} tensor_t;

/* A weight to initialize: count floats at w with bound a, then zero the bias. */
typedef struct init_item {
	size_t w, count, b;
	int bias_n, fan_in;
} init_item_t;

struct st_lgraph {
	st_lgraph_sparse_t sp;
	/* The embed node's layout: sp.pool, or (when sp.seq marks sequence
	 * slots) a copy with those slots 0 wide, owned here. */
	st_pool_layout_t epool;
	int *edim, *eoff;
	int n_dense;
	int uniform_wide;      /* every slot's wide column is the same */
	int n_nodes, out, finished;
	/* The heads' output nodes (st_lgraph_finish_heads); head 0 is `out`. */
	int n_heads, head[ST_LGRAPH_MAX_HEADS];
	node_t node[MAX_NODES];
	int ntensors, cap_tensors;
	tensor_t *tensors;
	int n_init, cap_init;
	init_item_t *init;
	size_t nparams;
	float *params;
	double flops;
};

struct st_lgraph_ws {
	uint32_t max_n;
	int out_node;
	float *out[MAX_NODES], *grad[MAX_NODES];
	float *aux[MAX_NODES][MAX_AUX];
	uint8_t gset[MAX_NODES];   /* backward: grad[i] holds a value */
	float *const *rows;        /* the last forward's rows (attention's
				      backward reads the keys' embeddings) */
	float *dbuf[2];            /* ping-pong for the hidden layers' dX */
	float *acc;                /* a second consumer's gradient, added in;
				      a cross layer's dT */
	float *block;
	/* Several heads: their logits and dlogits side by side (n × H,
	 * example-major); NULL with one head, whose node buffers serve. */
	float *logits, *dlogits;
};

/* graph.c: initializes the parameters of g (its heads set) and freezes it. */
int st__lgraph_finish_params(st_lgraph_t *g, uint64_t seed);

/* heads.c: several heads' logits packed n × H after a forward, and their
 * dlogits spread back into the head nodes' gradients before a backward
 * (one head: no-ops, the node buffers serve). */
void st__lgraph_heads_pack(const st_lgraph_t *g, st_lgraph_ws_t *ws, uint32_t n);
void st__lgraph_heads_unpack(const st_lgraph_t *g, st_lgraph_ws_t *ws, uint32_t n);
int st__lgraph_is_head(const st_lgraph_t *g, int node);

#endif
