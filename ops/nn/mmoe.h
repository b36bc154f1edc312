/*
 * mmoe.h — a multi-gate mixture of experts over a shared input, on the CPU,
 * and the column slice that hands each task its part of the output.
 *
 * Ma et al., "Modeling Task Relationships in Multi-task Learning with
 * Multi-gate Mixture-of-Experts" (KDD 2018), §4.2 (the MMoE model, eq. 5
 * and 6): for an input x [d_in], E experts and T tasks,
 *
 *   f_e(x) = MLP_e(x)            hidden sizes h_1..h_K, each layer followed
 *                                by act (the same shape for every expert)
 *   g_t(x) = softmax(W_t x + b_t)            [E], one gate per task
 *   o_t(x) = Σ_e g_t(x)[e] · f_e(x)          [h_K]
 *
 * and the node's output is o_1..o_T side by side: width T·h_K, task t at
 * columns t·h_K .. (t+1)·h_K − 1 (tasks 0-based here). A task's tower reads
 * its columns through a slice (st_slice_*).
 *
 * Parameters, nn.Linear layout, packed in this order from one base pointer
 * (the graph's tensors of an mmoe node, created in the same order):
 *
 *   for e in 0..E-1, for k in 0..K-1:  expert.<e>.<k>.weight [h_k × in_k]
 *                                      expert.<e>.<k>.bias   [h_k]
 *                                      (in_0 = d_in, in_k = h_{k-1})
 *   for t in 0..T-1:                   gate.<t>.weight [E × d_in]
 *                                      gate.<t>.bias   [E]
 *
 * which is also the state_dict order of a PyTorch module with
 * expert = ModuleList(ModuleList(Linear...)) declared before
 * gate = ModuleList(Linear(d_in, E)) (tests/reference/models.py, MMoE).
 *
 * The per-example scratch is fixed by the shape (every expert's hidden
 * outputs, the gates), so unlike attention.h there is nothing to chunk: a
 * call over n examples uses st_mmoe_scratch_bytes(s, n). Forward keeps the
 * activations there for the backward of the same examples.
 *
 * No allocation, no threads; one call per worker on its own scratch.
 */
#ifndef ST_NN_MMOE_H
#define ST_NN_MMOE_H

#include <stddef.h>
#include <stdint.h>

#define ST_MMOE_MAX_LAYERS 8     /* layers of one expert */
#define ST_MMOE_MAX_EXPERTS 64
#define ST_MMOE_MAX_TASKS 16

typedef struct st_mmoe_shape {
	int d_in;              /* width of the shared input */
	int n_experts;         /* E, 1..ST_MMOE_MAX_EXPERTS */
	int n_tasks;           /* T, 1..ST_MMOE_MAX_TASKS */
	int n_layers;          /* K, 1..ST_MMOE_MAX_LAYERS */
	int sizes[ST_MMOE_MAX_LAYERS];   /* h_1..h_K, each >= 1 */
	int act;               /* 0 none, 1 relu, 2 sigmoid (graph.h's enum
				  st_lgraph_act) after every expert layer */
} st_mmoe_shape_t;

/* Checks a shape, and that every tensor name "<map>.weight" (st_mmoe_map)
 * is shorter than name_cap: 0, or -1 with a message for people in err[len]
 * naming `prefix` ("mmoe m: tasks must be >= 1 and <= 16 (got 0)"); the
 * graph logs it. */
int st_mmoe_check(const st_mmoe_shape_t *s, const char *prefix, size_t name_cap, char *err,
		  size_t len);

/* The node's output width, T·h_K. */
int st_mmoe_width(const st_mmoe_shape_t *s);

/* Linear map i of the packed order above (i < E·K + T: the experts' layers,
 * then the gates): its tensor prefix "<prefix>.expert.<e>.<k>" or
 * "<prefix>.gate.<t>" into name[len], its in and out. Returns 0, or -1 when
 * i is past the last map or the name did not fit. */
int st_mmoe_map(const st_mmoe_shape_t *s, const char *prefix, int i, char *name,
		size_t len, int *in, int *out);

/* Floats of parameters (the sum over the maps of out·(in + 1)). */
size_t st_mmoe_nparams(const st_mmoe_shape_t *s);

/* FLOPs of one example's forward + backward outside the linear maps (the
 * softmax and the gated sums; a graph counts the maps as its linear layers). */
double st_mmoe_flops_mix(const st_mmoe_shape_t *s);

/* Bytes of scratch a forward and its backward over up to max_n examples
 * need (64-byte aligned parts; the caller's block must be 64-byte aligned). */
size_t st_mmoe_scratch_bytes(const st_mmoe_shape_t *s, uint32_t max_n);

/* out[n × T·h_K] = MMoE(X[n × d_in]) with the packed parameters at P. Keeps
 * the experts' outputs and the gates in scratch for st_mmoe_backward. */
void st_mmoe_forward(const st_mmoe_shape_t *s, int n, const float *X, const float *P,
		     void *scratch, float *out);

/* Backward of the last forward on scratch (same n, X, P), given
 * dout[n × T·h_K]: dP += the parameters' gradients (packed like P), and
 * dX[n × d_in] = the input's gradient (overwritten; skipped when NULL). */
void st_mmoe_backward(const st_mmoe_shape_t *s, int n, const float *X, const float *P,
		      const float *dout, void *scratch, float *dX, float *dP);

/* The readable reference of the two above (one st_linear_* per expert
 * layer and per gate), same contracts; the fast path runs every expert's
 * first layer and every gate as one map over x (mmoe.c). test_mmoe pins
 * the two together. A backward pairs with its own kind of forward. */
void st_mmoe_forward_ref(const st_mmoe_shape_t *s, int n, const float *X, const float *P,
			 void *scratch, float *out);
void st_mmoe_backward_ref(const st_mmoe_shape_t *s, int n, const float *X, const float *P,
			  const float *dout, void *scratch, float *dX, float *dP);

/* ---- slice ------------------------------------------------------------------
 * Y[n × width] = columns offset .. offset+width−1 of X[n × in_w];
 * backward: dX[n × in_w] = dY in those columns, 0 elsewhere (overwrites). */
void st_slice_forward(int n, int in_w, int offset, int width, const float *X, float *Y);
void st_slice_backward(int n, int in_w, int offset, int width, const float *dY, float *dX);
/* dX's columns offset .. offset+width−1 += dY, the rest untouched: a second
 * slice of the same input adds its part where the first wrote its gradient
 * (the graph, instead of a zeroed copy of the whole width added into it). */
void st_slice_backward_add(int n, int in_w, int offset, int width, const float *dY,
			   float *dX);

#endif
