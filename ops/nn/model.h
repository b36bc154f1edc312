/*
 * model.h — the CTR model presets (lr, dnn, wdl, deepfm, dlrm, dcnv2) built as
 * layer graphs (graph.h) over the layers of nn.h.
 *
 * A model has two kinds of parameters:
 *  - dense: one contiguous float array (st_model_params), split into named
 *    tensors whose names and shapes match the PyTorch reference models in
 *    tests/reference/models.py (state_dict names, nn.Linear layout);
 *  - sparse: one row per key in the embedding store. A row of a key of slot
 *    s holds st_model_row_dim(m, s) floats: the embedding (dim of the slot)
 *    and, for presets with a wide part (lr, wdl, deepfm), one wide weight
 *    in the last column.
 *
 * Presets (x_dense = log1p(max(x, 0)) of the dense features unless
 * dense_transform = "none"; e_s = pooled embedding of slot s):
 *   lr:     logit = wide + linear(x_dense)                        ("dense.weight" [1×D], "dense.bias")
 *   dnn:    logit = MLP(concat(e_1..e_S, x_dense))                ("mlp.<k>.weight"/"bias" ..., "out.weight"/"bias")
 *   wdl:    logit = MLP(concat(e, x_dense)) + wide + linear(x_dense)
 *   deepfm: logit = MLP(concat(e, x_dense)) + FM(e_1..e_S) + wide + linear(x_dense)
 *   dlrm:   z0 = bottom MLP(x_dense) (last size = emb_dim);
 *           logit = top MLP(concat(z0, dot(z0, e_1..e_S)))        ("bot.<k>...", "mlp.<k>...", "out...")
 *   dcnv2:  x_0 = concat(e, x_dense); x_{l+1} = x_0 ⊙ (W_l x_l + b_l) + x_l for
 *           l < n_cross; logit = MLP(x_L)   ("cross.<l>.weight"/"bias", or with
 *           cross_rank r > 0 W_l = U_l V_lᵀ: "cross.<l>.v.weight" [r×d],
 *           "cross.<l>.u.weight" [d×r], "cross.<l>.u.bias"; then "mlp...", "out...")
 * Hidden layers use the job's activation; the output layer is linear to 1.
 *
 * Thread-safety: a model is immutable after creation except through its
 * params array, which the sync policy updates; each worker thread needs its
 * own workspace.
 */
#ifndef ST_MODEL_H
#define ST_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "lang/job.h"
#include "ops/nn/graph.h"
#include "runtime/batch.h"

typedef struct st_model st_model_t;
typedef struct st_model_ws st_model_ws_t;

/* st_tensor_info_t (name, offset into st_model_params, ndim, shape) is
 * graph.h's: a model's tensors are its graph's. */

/* Builds the preset for examples with n_dense dense features and n_slots
 * slots: from the layers of cfg (type "graph": nodes; a preset: its Lua
 * function's layers, n_preset_nodes, lang/job.h), or, for a preset config
 * without layers, with the preset's C reference twin (the same model); dense parameters are initialized from seed (uniform(-1/sqrt(in),
 * 1/sqrt(in)) per layer, biases 0). ST_OK, ST_EINVAL (bad shape, message
 * logged) or ST_ENOMEM. Caller destroys. */
int st_model_create(st_model_t **out, const st_model_cfg_t *cfg, int n_dense,
		    int n_slots, uint64_t seed);
void st_model_destroy(st_model_t *m);

size_t st_model_nparams(const st_model_t *m);
float *st_model_params(st_model_t *m);
int st_model_ntensors(const st_model_t *m);
const st_tensor_info_t *st_model_tensor(const st_model_t *m, int i);
/* Index of the tensor with this name, or ST_ENOENT. */
int st_model_find_tensor(const st_model_t *m, const char *name);

int st_model_row_dim(const st_model_t *m, int slot);
int st_model_max_row_dim(const st_model_t *m);
int st_model_has_wide(const st_model_t *m);

/* The model's layer graph (owned by the model; for printing it: strata
 * plan). */
const st_lgraph_t *st_model_graph(const st_model_t *m);

/* Dense FLOPs of one example's forward + backward (for GFLOP/s reports). */
double st_model_flops_per_example(const st_model_t *m);

/* A worker's scratch for up to max_n examples per call. */
int st_model_ws_create(st_model_ws_t **out, const st_model_t *m, uint32_t max_n);
void st_model_ws_destroy(st_model_ws_t *ws);

/* Forward over examples r0 .. r0+n-1 of b (n <= max_n): rows[u] is the row
 * of unique key u of b (b->uniq order; NULL = zeros), params the dense
 * parameters to use. Writes prob[n × heads] (and logit[n × heads] when
 * non-NULL), example-major (st_model_nheads below). */
void st_model_forward(const st_model_t *m, st_model_ws_t *ws, const st_batch_t *b,
		      uint32_t r0, uint32_t n, float *const *rows,
		      const float *params, float *logit, float *prob);

/* Forward + backward. The loss is Σ_h weight_h × logloss_h over the heads
 * (one head: the logloss). Gradients of the loss sum times `scale` (pass 1/N for
 * the mean over a global minibatch of N examples) are ADDED into
 * gparams[nparams] and gu[u * gstride + j] (gstride >= max_row_dim; only
 * the rows of keys present in the examples are touched). prob[n × heads] gets the
 * predictions made before any update. Returns the sum of the n losses. */
double st_model_step(const st_model_t *m, st_model_ws_t *ws, const st_batch_t *b,
		     uint32_t r0, uint32_t n, float *const *rows,
		     const float *params, float scale, float *prob,
		     float *gparams, float *gu, int gstride);

/* Heads (docs/models.md, "Several labels"): 1 for every preset and a graph
 * with one output; a graph with model.heads has one per label it learns.
 * Head h's logit and probability are [i * heads + h] of st_model_forward's
 * and st_model_step's n × heads outputs; it learns label
 * st_model_head_label(m, h) of the batch (labels[i * n_labels + that]),
 * named st_model_head_name ("label" for a one-head model), with loss weight
 * st_model_head_weight. Thread-safe. */
int st_model_nheads(const st_model_t *m);
int st_model_head_label(const st_model_t *m, int h);
const char *st_model_head_name(const st_model_t *m, int h);
float st_model_head_weight(const st_model_t *m, int h);

#endif
