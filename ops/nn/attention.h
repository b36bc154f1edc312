/*
 * attention.h — DIN's target attention over a sequence field, on the CPU.
 *
 * Zhou et al., "Deep Interest Network for Click-Through Rate Prediction"
 * (KDD 2018), §4.3, the local activation unit: for an example with a
 * candidate (query) embedding q [d] and the embeddings k_1..k_T of its
 * behaviour sequence (each [d]; T varies per example, 0 allowed),
 *
 *   a_t = [k_t, q, k_t − q, k_t ⊙ q]               (4d; the paper's
 *                                                    "out product" as the
 *                                                    element-wise product)
 *   w_t = MLP_att(a_t)    hidden layers h_0..h_{H-1}, each followed by act,
 *                         then a linear layer to 1 (no activation)
 *   out = Σ_t w_t k_t                                (d; no softmax, as in
 *                                                    the paper: the sum
 *                                                    keeps the intensity
 *                                                    of the interest)
 *
 * Embeddings come from the sparse rows as pooling does (nn.h): q is the
 * sum over the example's keys of the query slot of key_val × row[0:d] (a
 * single-valued field: its one row, or zeros when missing), and k_t is
 * key_val × row[0:d] of the t-th key of the key slot, in CSR order. A NULL
 * row reads as zeros (a key not admitted, or not seen in eval).
 *
 * The MLP's parameters use nn.h's nn.Linear layout: W_l [out × in], b_l
 * [out], in_0 = 4d, out_H = 1.
 *
 * The positions of a batch are processed in chunks of `chunk` keys so the
 * scratch is fixed whatever the sequence lengths; backward recomputes each
 * chunk's forward rather than keeping activations for every key (a third
 * more attention FLOPs, no memory that grows with the batch's keys).
 *
 * No allocation, no threads; one call per worker on its own scratch.
 */
#ifndef ST_NN_ATTENTION_H
#define ST_NN_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#include "ops/nn/nn.h"

#define ST_ATTN_MAX_HIDDEN 15

typedef struct st_attn_shape {
	int d;                 /* embedding dim of the query and of every key */
	int q_slot, k_slot;    /* the query field's slot, the sequence's slot */
	int act;               /* hidden activation: 0 none, 1 relu, 2 sigmoid
				  (graph.h's enum st_lgraph_act) */
	int n_hidden;          /* 0..ST_ATTN_MAX_HIDDEN */
	int hidden[ST_ATTN_MAX_HIDDEN];
	int chunk;             /* keys per chunk (>= 1) */
} st_attn_shape_t;

/* The embed node's layout beside the attention nodes: dim[s] = 0 for a
 * sequence slot (seq[s] != 0, read key by key by attention), pool's dim
 * otherwise, off[] packed; dim and off are the caller's [n_slots]. Returns
 * the width (Σ dim). */
int st_attn_embed_layout(const st_pool_layout_t *pool, const uint8_t *seq, int *dim,
			 int *off);

/* Checks an attention node over pool's slots (two different slots of one
 * dim >= 1, 0..ST_ATTN_MAX_HIDDEN hidden sizes >= 1, act 0..2): 0, or -1
 * with a message for people in err[len] naming prefix (the graph logs it). */
int st_attn_check(const st_pool_layout_t *pool, const char *prefix, int q_slot, int k_slot,
		  int n_hidden, const int *hidden, int act, char *err, size_t len);

/* Bytes of scratch a forward or backward over up to max_n examples needs. */
size_t st_attn_scratch_bytes(const st_attn_shape_t *s, uint32_t max_n);

/* Dense FLOPs of one key (position) forward + backward, recomputation
 * included; an example costs this × its sequence length. */
double st_attn_flops_per_key(const st_attn_shape_t *s);

/* out[n × d] = the attention pooling of examples r0 .. r0+n-1 of the CSR
 * (row_off, key_slot, key_val, key_idx as nn.h's pooling). W[l], b[l] for
 * l = 0..n_hidden (the last is the layer to 1). scratch: the caller's,
 * st_attn_scratch_bytes(s, n) bytes, 64-byte aligned. */
void st_attn_forward(const st_attn_shape_t *s, uint32_t r0, uint32_t n,
		     const uint32_t *row_off, const uint16_t *key_slot,
		     const float *key_val, const uint32_t *key_idx, float *const *rows,
		     const float *const *W, const float *const *b, void *scratch,
		     float *out);

/* Backward of the forward above, given dout[n × d]: dW[l] += , db[l] +=
 * (the MLP's gradients), and gu[key_idx[k] * gstride + j] += the gradient
 * of the row of every key of the query and key slots (j < d), as
 * st_pool_backward does for pooled slots. */
void st_attn_backward(const st_attn_shape_t *s, uint32_t r0, uint32_t n,
		      const uint32_t *row_off, const uint16_t *key_slot,
		      const float *key_val, const uint32_t *key_idx, float *const *rows,
		      const float *const *W, const float *const *b, const float *dout,
		      void *scratch, float *const *dW, float *const *db, float *gu,
		      int gstride);

#endif
