/*
 * nn.h — layers of the CTR models, forward and backward, on the CPU.
 *
 * Plain functions over row-major float arrays; no allocation, no threads
 * (a caller runs one call per worker thread on its own workspace). Every
 * function documents its shapes. Backward functions either overwrite their
 * outputs ("=") or accumulate into them ("+="), as written on each.
 *
 * These are the reference implementations that the CUDA twins (cuda/) will
 * be checked against; each has a finite-difference gradient test.
 */
#ifndef ST_NN_H
#define ST_NN_H

#include <stddef.h>
#include <stdint.h>

/* ---- embedding pooling --------------------------------------------------
 * Per example i and slot s, the pooled vector is the sum (or mean) over the
 * example's keys k in slot s of key_val[k] * row(key_idx[k])[0 : dim[s]].
 * The pooled vectors of all slots are laid out side by side:
 *   out[i * width + off[s] + j], width = sum of dim[s].
 * rows[u] points at the embedding of unique key u (NULL reads as zeros:
 * an eval key never seen, or a key not admitted yet).
 * Mean pooling divides by the number of keys of the slot (0 keys -> zeros).
 * Each slot pools its own way: slot_mean[s] when given (a list field's own
 * pooling, docs/job-language.md), else `mean` for every slot. The GPU twin
 * (cuda/embed.cu) takes the same layout.
 */
typedef struct st_pool_layout {
	int n_slots;
	const int *dim;        /* [n_slots] */
	const int *off;        /* [n_slots] offsets into a pooled row */
	int width;             /* sum of dim */
	int mean;              /* every slot when slot_mean is NULL: 0 = sum, 1 = mean */
	const uint8_t *slot_mean; /* NULL, or [n_slots]: 0 = sum, 1 = mean */
} st_pool_layout_t;

/* Whether slot s of L pools by mean. */
static inline int st_pool_is_mean(const st_pool_layout_t *L, int s)
{
	return L->slot_mean ? L->slot_mean[s] != 0 : L->mean != 0;
}

/* Whether any slot of L pools by mean. */
static inline int st_pool_any_mean(const st_pool_layout_t *L)
{
	if (!L->slot_mean)
		return L->mean != 0;
	for (int s = 0; s < L->n_slots; s++)
		if (L->slot_mean[s])
			return 1;
	return 0;
}

/* out[n × width] = pooled embeddings of examples r0 .. r0+n-1 of the CSR
 * (row_off indexes keys; key_slot, key_val, key_idx per key). */
void st_pool_forward(const st_pool_layout_t *L, uint32_t r0, uint32_t n,
		     const uint32_t *row_off, const uint16_t *key_slot,
		     const float *key_val, const uint32_t *key_idx,
		     float *const *rows, float *out);

/* gu[key_idx[k] * gstride + j] += d out / d row, for every key of the n
 * examples (gu is indexed by unique key; the caller zeroes it). */
void st_pool_backward(const st_pool_layout_t *L, uint32_t r0, uint32_t n,
		      const uint32_t *row_off, const uint16_t *key_slot,
		      const float *key_val, const uint32_t *key_idx,
		      const float *dout, float *gu, int gstride);

/* The plain-loop references of the two above. st_pool_forward/backward run
 * an AVX2 copy when runtime/simd.h's st_simd_avx2() allows; both give the
 * same bits (tests/unit/test_nn_simd.c). */
void st_pool_forward_ref(const st_pool_layout_t *L, uint32_t r0, uint32_t n,
			 const uint32_t *row_off, const uint16_t *key_slot,
			 const float *key_val, const uint32_t *key_idx,
			 float *const *rows, float *out);
void st_pool_backward_ref(const st_pool_layout_t *L, uint32_t r0, uint32_t n,
			  const uint32_t *row_off, const uint16_t *key_slot,
			  const float *key_val, const uint32_t *key_idx,
			  const float *dout, float *gu, int gstride);

/* ---- wide (linear over sparse keys) -------------------------------------
 * out[i] = sum over keys k of example i of key_val[k] * rows[key_idx[k]][col]
 * (the wide weight is stored in column `col` of each row). */
void st_wide_forward(uint32_t r0, uint32_t n, const uint32_t *row_off,
		     const float *key_val, const uint32_t *key_idx,
		     float *const *rows, int col, float *out);
/* gu[key_idx[k] * gstride + col] += dout[i] * key_val[k] */
void st_wide_backward(uint32_t r0, uint32_t n, const uint32_t *row_off,
		      const float *key_val, const uint32_t *key_idx,
		      const float *dout, float *gu, int gstride, int col);

/* ---- linear ---------------------------------------------------------------
 * PyTorch nn.Linear layout: W is [out × in], b is [out].
 * forward: Y[n × out] = X[n × in] · Wᵀ + b            (OpenBLAS sgemm)
 * backward: dX[n × in] = dY · W (skipped when dX is NULL);
 *           dW[out × in] += dYᵀ · X;  db[out] += column sums of dY. */
void st_linear_forward(int n, int in, int out, const float *X, const float *W,
		       const float *b, float *Y);
void st_linear_backward(int n, int in, int out, const float *X, const float *W,
			const float *dY, float *dX, float *dW, float *db);
/* The same two over strided operands: row i of X starts at X + i·ldx, of Y
 * (dY, dX) at Y + i·ldy (lddy, lddx); W, b, dW and db stay packed. A
 * layer can read and write columns of a wider matrix in place (mmoe.c's
 * experts in the columns of their gathered first map). Same bits as the
 * packed pair on the same values (sgemm packs its operands either way). */
void st_linear_forward_ld(int n, int in, int out, const float *X, int ldx, const float *W,
			  const float *b, float *Y, int ldy);
void st_linear_backward_ld(int n, int in, int out, const float *X, int ldx, const float *W,
			   const float *dY, int lddy, float *dX, int lddx, float *dW, float *db);

/* ---- activations (elementwise over len values; in place allowed) -------
 * backward takes the forward OUTPUT y: dx = dy * f'(y). */
void st_relu_forward(size_t len, const float *x, float *y);
/* dx = y > 0 ? dy : 0. AVX2 (a compare-and-mask, no branch) when
 * st_simd_avx2(), else st_relu_backward_ref, the plain loop; the same bits
 * either way (+0.0 where masked; tests/unit/test_nn_simd.c). The branch was
 * the cost: on ReLU outputs it is a coin flip per element. */
void st_relu_backward(size_t len, const float *y, const float *dy, float *dx);
void st_relu_backward_ref(size_t len, const float *y, const float *dy, float *dx);
void st_sigmoid_forward(size_t len, const float *x, float *y);

/* The activation codes every layer with an `act` uses (graph.h's
 * enum st_lgraph_act has the same values), and the in-place dispatch on
 * them: forward y = f(y); backward dy = dy * f'(y) from the output y.
 * ST_ACT_NONE (or any other code) leaves the values as they are. */
enum { ST_ACT_NONE = 0, ST_ACT_RELU = 1, ST_ACT_SIGMOID = 2 };
void st_act_forward(int act, size_t len, float *y);
void st_act_backward(int act, size_t len, const float *y, float *dy);

/* ReLU backward fused with the bias gradient of the linear layer whose
 * output Y[n × out] it took: dY[i,o] = Y[i,o] > 0 ? dY[i,o] : 0 (in place),
 * then db[o] += Σ_i dY[i,o] summed over i = 0 .. n-1 in order, as
 * st_linear_backward does (db NULL: no bias). Call st_linear_backward with
 * db = NULL afterwards. One pass over dY with AVX2 (st_simd_avx2()), else
 * the reference: st_relu_backward, then the bias pass. Same bits either way
 * (tests/unit/test_nn_simd.c). */
void st_relu_bias_backward(int n, int out, const float *Y, float *dY, float *db);
/* A layer's activation backward in place on dY [n × out] (from its output
 * Y), fused with its bias gradient where a fused pass exists (ReLU:
 * st_relu_bias_backward). Returns the db st_linear_backward must still
 * sum: NULL when it was summed here, else db. */
float *st_act_bias_backward(int act, int n, int out, const float *Y, float *dY, float *db);
void st_relu_bias_backward_ref(int n, int out, const float *Y, float *dY, float *db);
void st_sigmoid_backward(size_t len, const float *y, const float *dy, float *dx);

/* ---- FM second-order interaction (DeepFM) --------------------------------
 * E[n × F × d]: F field vectors of dimension d per example.
 * out[i] = 0.5 * Σ_k ((Σ_f E[i,f,k])² − Σ_f E[i,f,k]²)
 * backward: dE[i,f,k] = dout[i] * (Σ_g E[i,g,k] − E[i,f,k])   (overwrites dE) */
void st_fm_forward(int n, int F, int d, const float *E, float *out);
void st_fm_backward(int n, int F, int d, const float *E, const float *dout,
		    float *dE);

/* ---- DLRM dot interaction ------------------------------------------------
 * Z[n × F × d]; out[n × F(F-1)/2] holds Z[a]·Z[b] for the pairs a > b in
 * the order (1,0), (2,0), (2,1), (3,0), (3,1), (3,2), ... — the strictly
 * lower triangle row by row, as DLRM's tril_indices(offset=-1).
 * backward overwrites dZ[n × F × d]. */
void st_dot_forward(int n, int F, int d, const float *Z, float *out);
void st_dot_backward(int n, int F, int d, const float *Z, const float *dout,
		     float *dZ);

/* ---- DCNv2 cross layer ---------------------------------------------------
 * Wang et al., "DCN V2: Improved Deep & Cross Network and Practical Lessons
 * for Web-scale Learning to Rank Systems" (2020), §3 eq. (1):
 *   x_{l+1} = x_0 ⊙ (W x_l + b) + x_l,
 * with W full rank (r == 0: W [d × d], nn.Linear(d, d) layout) or low rank
 * (§3, eq. (2): W = U Vᵀ, stored as V [r × d] = nn.Linear(d, r, bias=False)
 * and U [d × r] = nn.Linear(r, d), whose bias is b).
 * forward: T[n × d] = X Wᵀ + b (low rank: Vt[n × r] = X Vᵀ, T = Vt Uᵀ + b);
 *          Y[n × d] = X0 ⊙ T + X. T (and Vt) are kept for backward.
 * backward, given dY[n × d] (scratch dT[n × d], dVt[n × r]):
 *          dT = dY ⊙ X0;  dX0 += dY ⊙ T (skipped when dX0 is NULL);
 *          dX = dY + dT · W (low rank: dVt = dT · U, dX = dY + dVt · V;
 *          overwrites; skipped when dX is NULL);
 *          dW += dTᵀ X (low rank: dU += dTᵀ Vt, dV += dVtᵀ X); db += Σ dT.
 * W is V when r > 0 (then U is U; U is unused at r == 0). */
void st_cross_forward(int n, int d, int r, const float *X0, const float *X,
		      const float *W, const float *U, const float *b, float *T,
		      float *Vt, float *Y);
void st_cross_backward(int n, int d, int r, const float *X0, const float *X,
		       const float *W, const float *U, const float *T, const float *Vt,
		       const float *dY, float *dT, float *dVt, float *dX, float *dX0,
		       float *dW, float *dU, float *db);

/* ---- loss ------------------------------------------------------------------
 * Binary cross-entropy with logits, numerically stable. Returns the SUM of
 * the n losses (the caller divides); prob[i] = σ(logit[i]) when prob is
 * non-NULL; dlogit[i] = (σ(logit[i]) − label[i]) * scale when non-NULL
 * (scale = 1/N for the mean over a global minibatch of N examples). */
double st_logloss_forward_backward(int n, const float *logit, const float *label,
				   float scale, float *prob, float *dlogit);

#endif
