/*
 * gpu.h — strata's GPU backend as a plain C API (no CUDA types here): the
 * device hash table of the HBM tier, the CUDA twins of ops/nn and
 * ops/optim, cuBLAS dense layers, NCCL collectives, Algorithm 2 routing of
 * sparse updates to the owning GPU, and the glue between the host tier and
 * a device table (docs/gpu.md; hierarchical-gpu-parameter-server.md §3-4,
 * Appendix C).
 *
 * Built only when meson finds the CUDA toolkit (ST_HAVE_CUDA in
 * st_config.h); link with gpu_dep.
 *
 * Conventions, for every function below unless it says otherwise:
 *  - Pointers named d_* or documented "device" point to device memory of the
 *    current device (st_gpu_use); everything else is host memory.
 *  - Work is queued on the stream passed (NULL = the legacy default stream)
 *    and the function returns without waiting: results are ready after
 *    st_gpu_stream_sync. Functions that must read a result back say
 *    "synchronous".
 *  - Returns ST_OK (or a count >= 0) on success; on a CUDA, cuBLAS or NCCL
 *    failure a negative code with a logged message naming the call, file
 *    and line: ST_ENOMEM (device or pinned memory exhausted), ST_GPU_ENODEV
 *    (no usable device or driver), ST_EINVAL (bad arguments), ST_ENOSPC (a
 *    device table is full of pinned rows), ST_EIO (any other device error —
 *    a device error usually leaves the context unusable: stop the job).
 *  - Shapes follow the CPU twins in ops/nn/nn.h and ops/optim/optim.h, whose
 *    comments give the formulas; each twin here computes the same formula in
 *    the same float arrangement, so that tests/gpu compares them with
 *    tolerances that only cover summation order and fused multiply-adds.
 *  - Thread-safety: a device table, BLAS handle, tier or communicator is
 *    used by one host thread at a time; distinct objects may be used from
 *    distinct threads.
 */
#ifndef ST_GPU_H
#define ST_GPU_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda/gpu_part.h"
#include "ops/nn/nn.h"
#include "ops/optim/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* No usable CUDA device or driver (an errno code; st_strerror knows it). */
#define ST_GPU_ENODEV (-ENODEV)

/* ==== devices, memory, streams ========================================== */

/* Number of usable CUDA devices: 0 when there is no driver, no device, or
 * the driver is older than the runtime (never an error; the reason is
 * logged at debug level). Tests skip with 77 when it is 0. */
int st_gpu_device_count(void);

/* Makes dev the current device of the calling thread. */
int st_gpu_use(int dev);

/* Name, total memory and PCI bus id ("0000:3b:00.0", the string hwloc's
 * st_topo_gpu_cpus takes) of device dev. Any output may be NULL. */
int st_gpu_device_info(int dev, char *name, size_t name_len, size_t *mem_bytes,
		       char *busid, size_t busid_len);

/* Device memory on the current device; *p = NULL for bytes == 0. The caller
 * frees it with st_gpu_free (NULL-safe). */
int st_gpu_alloc(void **p, size_t bytes);
void st_gpu_free(void *p);
/* Page-locked host memory (fast, asynchronous copies). st_gpu_host_free. */
int st_gpu_host_alloc(void **p, size_t bytes);
void st_gpu_host_free(void *p);

typedef struct st_gpu_stream st_gpu_stream_t;
/* A non-blocking stream on the current device. Caller destroys. */
int st_gpu_stream_create(st_gpu_stream_t **out);
void st_gpu_stream_destroy(st_gpu_stream_t *s);
/* Waits for the work queued on s (synchronous). */
int st_gpu_stream_sync(st_gpu_stream_t *s);

/* Copies (asynchronous when the host side is page-locked). */
int st_gpu_upload(void *d_dst, const void *src, size_t bytes, st_gpu_stream_t *s);
int st_gpu_download(void *dst, const void *d_src, size_t bytes, st_gpu_stream_t *s);
int st_gpu_copy(void *d_dst, const void *d_src, size_t bytes, st_gpu_stream_t *s);
/* d_dst[r * dpitch + c] = d_src[r * spitch + c] for r < rows, c < cols
 * (floats; the column blocks of a concatenation). */
int st_gpu_copy2d(float *d_dst, size_t dpitch, const float *d_src, size_t spitch,
		  size_t cols, size_t rows, st_gpu_stream_t *s);
int st_gpu_zero(void *d_dst, size_t bytes, st_gpu_stream_t *s);

/* ==== small vector kernels (cuda/dense.cu) ============================== */

/* y[i] += x[i] */
int st_gpu_add(size_t len, const float *d_x, float *d_y, st_gpu_stream_t *s);
/* x[i] *= a */
int st_gpu_scale(size_t len, float a, float *d_x, st_gpu_stream_t *s);
/* y[i] = x[i] > 0 ? log1pf(x[i]) : 0 (ops/nn/model.c's dense transform);
 * in place allowed. */
int st_gpu_log1p_forward(size_t len, const float *d_x, float *d_y, st_gpu_stream_t *s);
/* dst[i] = src[idx[i]] for i < n (row slots of a minibatch's keys). */
int st_gpu_gather_i32(const int32_t *d_src, const uint32_t *d_idx, uint32_t n,
		      int32_t *d_dst, st_gpu_stream_t *s);

/* ==== device hash table: the HBM tier (cuda/table.cu) ====================
 * Per GPU, fixed capacity: a pool of `rows` value rows of row_floats floats
 * (emb | optimizer state, the host tier's row layout without its metadata)
 * and an open-addressing index (linear probing, uint64 keys,
 * ST_GPU_EMPTY_KEY = empty; claimed with atomicCAS) mapping a key to its
 * pool row, the key's "slot". Slots are stable while the row lives: a batch
 * keeps its keys' slots from pull to push.
 *
 * Every row carries a pin count: a batch's pull pins its rows, its push
 * unpins them, and eviction drops only unpinned rows, so rows of batches in
 * flight stay put. Eviction frees every unpinned row (the table caches the
 * working set of the batches in flight plus whatever earlier rows still
 * fit; each push wrote rows back to the host tier, so nothing is lost).
 *
 * With grad_cols > 0 the table also keeps a gradient buffer of grad_cols
 * floats per row, for updates routed from other GPUs (Algorithm 2):
 * st_gpu_table_accumulate(..., ST_GPU_ACC_GRAD) sums gradients per row and
 * marks it touched; st_gpu_table_apply runs the row optimizer once per
 * touched row on the summed gradient and clears the buffer. */
typedef struct st_gpu_table st_gpu_table_t;

/* On the current device. rows >= 1 (at most INT32_MAX), row_floats >= 1,
 * grad_cols <= row_floats. Caller destroys (NULL-safe). Synchronous. */
int st_gpu_table_create(st_gpu_table_t **out, uint64_t rows, uint32_t row_floats,
			uint32_t grad_cols);
void st_gpu_table_destroy(st_gpu_table_t *t);

uint32_t st_gpu_table_row_floats(const st_gpu_table_t *t);
uint64_t st_gpu_table_capacity(const st_gpu_table_t *t);
/* The value pool: row of slot i at values + i * row_floats (device). */
float *st_gpu_table_values(st_gpu_table_t *t);

/* d_slots[i] = slot of d_keys[i], or -1 when absent; with pin != 0 the
 * rows found are pinned once each. */
int st_gpu_table_lookup(st_gpu_table_t *t, const uint64_t *d_keys, uint32_t n,
			int32_t *d_slots, int pin, st_gpu_stream_t *s);

/* Inserts the absent keys of d_keys[0..n) (the n keys must be distinct):
 * each gets a free row, initialized from d_rows[i * row_floats ..] (NULL =
 * zeros); present keys keep their values. d_slots[i] = the key's slot; with
 * pin != 0 every one of the n rows is pinned once. Synchronous (reads back
 * the outcome). Returns the number of keys inserted, ST_ENOSPC when no free
 * row was left (evict first; the keys that got no row have slot -1), or
 * ST_EINVAL when a key equals ST_GPU_EMPTY_KEY. */
int st_gpu_table_insert(st_gpu_table_t *t, const uint64_t *d_keys, const float *d_rows,
			uint32_t n, int32_t *d_slots, int pin, st_gpu_stream_t *s);

/* Unpins the rows of d_slots[0..n) (-1 entries skipped), once each. */
int st_gpu_table_unpin(st_gpu_table_t *t, const int32_t *d_slots, uint32_t n,
		       st_gpu_stream_t *s);

/* Frees every unpinned row and rebuilds the index from the rows that stay.
 * Synchronous. Returns the number of free rows afterwards. */
int64_t st_gpu_table_evict(st_gpu_table_t *t, st_gpu_stream_t *s);

/* Free rows right now (synchronous). */
int64_t st_gpu_table_free_rows(st_gpu_table_t *t, st_gpu_stream_t *s);

/* d_out[i * row_floats ..] = the row of d_keys[i], zeros when absent. */
int st_gpu_table_get(st_gpu_table_t *t, const uint64_t *d_keys, uint32_t n,
		     float *d_out, st_gpu_stream_t *s);

enum { ST_GPU_ACC_VALUES = 0, ST_GPU_ACC_GRAD = 1 };
/* Adds d_vals[i * ncols + j] (j < ncols) atomically into the row of
 * d_keys[i]: into its first ncols values (ST_GPU_ACC_VALUES, the paper's
 * accumulate of deltas) or into its gradient buffer (ST_GPU_ACC_GRAD, ncols
 * == grad_cols). Keys may repeat (contributions add). Absent keys are
 * dropped and counted (st_gpu_table_dropped). */
int st_gpu_table_accumulate(st_gpu_table_t *t, const uint64_t *d_keys, const float *d_vals,
			    uint32_t n, uint32_t ncols, int mode, st_gpu_stream_t *s);

/* Runs o over every row touched since the last apply: w = the row's first
 * grad_cols values, state right after them, g = its summed gradient; t is
 * Adam's step. Then clears the gradients and touched marks. Returns the
 * number of rows updated (synchronous). */
int64_t st_gpu_table_apply(st_gpu_table_t *t, const st_optim_t *o, uint64_t step,
			   st_gpu_stream_t *s);

/* Accumulated keys dropped because they were absent (synchronous). */
int64_t st_gpu_table_dropped(st_gpu_table_t *t, st_gpu_stream_t *s);

/* ==== embeddings (cuda/embed.cu) =========================================
 * The batch's sparse part on the device, example-major CSR as in
 * runtime/batch.h, and the rows of its unique keys. */
typedef struct st_gpu_csr {
	uint32_t n;                 /* examples */
	const uint32_t *row_off;    /* [n + 1] (device); need not start at 0 */
	const uint16_t *key_slot;   /* device, indexed by row_off values */
	const float *key_val;
	const uint32_t *key_idx;    /* unique-key index of each key */
} st_gpu_csr_t;

/* Rows of unique keys: unique key u reads vals + slot[u] * stride (device),
 * zeros when slot[u] < 0 (the CPU's NULL row). */
typedef struct st_gpu_rows {
	const float *vals;
	uint32_t stride;
	const int32_t *slot;
} st_gpu_rows_t;

/* A pooling layout (ops/nn/nn.h st_pool_layout_t) copied to the device. */
typedef struct st_gpu_pool st_gpu_pool_t;
int st_gpu_pool_create(st_gpu_pool_t **out, const st_pool_layout_t *L);
void st_gpu_pool_destroy(st_gpu_pool_t *p);

/* Twin of st_pool_forward: out[n × width]. Deterministic (keys of an
 * example are summed in order, like the CPU). */
int st_gpu_pool_forward(const st_gpu_pool_t *P, const st_gpu_csr_t *c,
			const st_gpu_rows_t *r, float *d_out, st_gpu_stream_t *s);
/* Twin of st_pool_backward: d_gu[key_idx * gstride + j] += ... (atomic adds:
 * the scatter-add of sparse gradients per unique key; the caller zeroes
 * d_gu). */
int st_gpu_pool_backward(const st_gpu_pool_t *P, const st_gpu_csr_t *c, const float *d_dout,
			 float *d_gu, int gstride, st_gpu_stream_t *s);
/* Twins of st_wide_forward / st_wide_backward; col < 0 means "the column
 * after the slot's embedding" (dim[slot], model.c's per-slot-dims case),
 * which needs P (else P may be NULL). */
int st_gpu_wide_forward(const st_gpu_pool_t *P, const st_gpu_csr_t *c,
			const st_gpu_rows_t *r, int col, float *d_out, st_gpu_stream_t *s);
int st_gpu_wide_backward(const st_gpu_pool_t *P, const st_gpu_csr_t *c, const float *d_dout,
			 float *d_gu, int gstride, int col, st_gpu_stream_t *s);

/* ==== optimizers (cuda/optim.cu) ========================================= */

/* Row updates, twin of st_optim_update per row: for u < n with slot[u] >= 0,
 * w = vals + slot[u] * stride (dim floats), state = w + dim, gradient
 * d_g + u * gstride. Slots must be distinct. */
int st_gpu_optim_rows(const st_optim_t *o, float *d_vals, uint32_t stride, uint32_t dim,
		      const int32_t *d_slot, uint32_t n, const float *d_g, int gstride,
		      uint64_t t, st_gpu_stream_t *s);
/* Twin of st_optim_update_rows on a dense tensor of rows × cols. */
int st_gpu_optim_dense(const st_optim_t *o, float *d_w, float *d_state, const float *d_g,
		       size_t rows, size_t cols, uint64_t t, st_gpu_stream_t *s);

/* ==== dense layers (cuda/dense.cu, cuBLAS) =============================== */

typedef struct st_gpu_blas st_gpu_blas_t;
/* A cuBLAS handle on the current device working on stream s. allow_tf32 != 0
 * lets sgemm use TF32 tensor cores (10-bit mantissa products: faster, not
 * for parity tests). Caller destroys. */
int st_gpu_blas_create(st_gpu_blas_t **out, st_gpu_stream_t *s, int allow_tf32);
void st_gpu_blas_destroy(st_gpu_blas_t *b);
st_gpu_stream_t *st_gpu_blas_stream(st_gpu_blas_t *b);

/* Twins of st_linear_forward / st_linear_backward (row-major, W [out × in]). */
int st_gpu_linear_forward(st_gpu_blas_t *b, int n, int in, int out, const float *d_X,
			  const float *d_W, const float *d_b, float *d_Y);
int st_gpu_linear_backward(st_gpu_blas_t *b, int n, int in, int out, const float *d_X,
			   const float *d_W, const float *d_dY, float *d_dX, float *d_dW,
			   float *d_db);

/* Twins of the activations of nn.h (in place allowed). */
int st_gpu_relu_forward(size_t len, const float *d_x, float *d_y, st_gpu_stream_t *s);
int st_gpu_relu_backward(size_t len, const float *d_y, const float *d_dy, float *d_dx,
			 st_gpu_stream_t *s);
int st_gpu_sigmoid_forward(size_t len, const float *d_x, float *d_y, st_gpu_stream_t *s);
int st_gpu_sigmoid_backward(size_t len, const float *d_y, const float *d_dy, float *d_dx,
			    st_gpu_stream_t *s);

/* ==== interactions, loss, AUC (cuda/interact.cu) ========================= */

int st_gpu_fm_forward(int n, int F, int d, const float *d_E, float *d_out, st_gpu_stream_t *s);
int st_gpu_fm_backward(int n, int F, int d, const float *d_E, const float *d_dout,
		       float *d_dE, st_gpu_stream_t *s);
int st_gpu_dot_forward(int n, int F, int d, const float *d_Z, float *d_out, st_gpu_stream_t *s);
int st_gpu_dot_backward(int n, int F, int d, const float *d_Z, const float *d_dout,
			float *d_dZ, st_gpu_stream_t *s);
/* Twin of st_logloss_forward_backward: d_prob / d_dlogit may be NULL; the
 * sum of the n losses is ADDED into *d_sum (a device double the caller
 * zeroes), so one read covers many minibatches. */
int st_gpu_logloss(int n, const float *d_logit, const float *d_label, float scale,
		   float *d_prob, float *d_dlogit, double *d_sum, st_gpu_stream_t *s);
/* Adds n predictions to d_hist[2 << bits] (negatives, then positives; the
 * bucketing of ops/metrics/auc.c's accumulator, bits in [4, 24]); read it
 * back and call st_gpu_auc_from_hist. */
int st_gpu_auc_hist(const float *d_pred, const float *d_label, size_t n, unsigned bits,
		    uint64_t *d_hist, st_gpu_stream_t *s);

/* ==== routing (cuda/route.cu) ============================================
 * Algorithm 2, line 2: partition a GPU's keys by owner. */

/* Stable bucketing, the device twin of st_gpu_route_plan_host: d_off[n_parts
 * + 1], d_perm[n]; d_scratch holds st_gpu_route_scratch_words(n, n_parts)
 * words. n_parts <= ST_GPU_ROUTE_MAX_PARTS. */
int st_gpu_route_plan(const uint64_t *d_keys, uint32_t n, uint32_t n_parts,
		      uint32_t *d_scratch, uint32_t *d_off, uint32_t *d_perm,
		      st_gpu_stream_t *s);
/* dst[j] = src[perm[j]] (keys; rows of ncols floats). */
int st_gpu_gather_keys(const uint64_t *d_src, const uint32_t *d_perm, uint32_t n,
		       uint64_t *d_dst, st_gpu_stream_t *s);
int st_gpu_gather_rows(const float *d_src, uint32_t ncols, const uint32_t *d_perm,
		       uint32_t n, float *d_dst, st_gpu_stream_t *s);
/* dst[perm[j]] = src[j] (rows of ncols floats): undoes a gather. */
int st_gpu_scatter_rows(const float *d_src, uint32_t ncols, const uint32_t *d_perm,
			uint32_t n, float *d_dst, st_gpu_stream_t *s);

/* ==== communication (cuda/comm.cu, NCCL) =================================
 * A communicator spans nranks GPUs; this process drives nlocal of them
 * (all of them for one process per node, one for one process per GPU).
 * Operations that take arrays take one entry per local member, in member
 * order, and each member works on its own device and stream. */
typedef struct st_gpu_comm st_gpu_comm_t;

/* One process, n GPUs devices[0..n) (ncclCommInitAll). Caller destroys. */
int st_gpu_comm_create_local(st_gpu_comm_t **out, int n, const int *devices);
/* One process per GPU: rank 0 makes the 128-byte id, every rank gets it
 * (st_net_bcast), then each calls create_rank with its device. */
#define ST_GPU_COMM_ID_BYTES 128
int st_gpu_comm_unique_id(void *id);
int st_gpu_comm_create_rank(st_gpu_comm_t **out, const void *id, int nranks, int rank,
			    int device);
void st_gpu_comm_destroy(st_gpu_comm_t *c);

int st_gpu_comm_nlocal(const st_gpu_comm_t *c);
int st_gpu_comm_nranks(const st_gpu_comm_t *c);
/* Rank and device of local member m. */
int st_gpu_comm_rank(const st_gpu_comm_t *c, int m);
int st_gpu_comm_device(const st_gpu_comm_t *c, int m);
st_gpu_stream_t *st_gpu_comm_stream(st_gpu_comm_t *c, int m);
/* Waits for every member's stream (synchronous). */
int st_gpu_comm_sync(st_gpu_comm_t *c);

/* Dense gradients: d_bufs[m][0..n) summed over all ranks in place, then
 * multiplied by scale (1/nranks for a mean; 1 to skip). */
int st_gpu_allreduce_f32(st_gpu_comm_t *c, float *const *d_bufs, size_t n, float scale);

/* Algorithm 2: member m's d_keys[m][0..n[m]) and rows d_vals[m][.. × ncols]
 * are bucketed by owner rank (st_gpu_part_of(key, nranks)), sent to their
 * owners (NCCL send/recv), and accumulated into the owner's table
 * tables[m] with st_gpu_table_accumulate(mode). Synchronous. Returns the
 * number of keys this process's tables received. */
int64_t st_gpu_dist_accumulate(st_gpu_comm_t *c, st_gpu_table_t *const *tables,
			       const uint64_t *const *d_keys, const float *const *d_vals,
			       const uint32_t *n, uint32_t ncols, int mode);
/* The same routing for reads: d_out[m][i * row_floats ..] = the row of
 * d_keys[m][i] from its owner's table (zeros when absent). Synchronous. */
int st_gpu_dist_get(st_gpu_comm_t *c, st_gpu_table_t *const *tables,
		    const uint64_t *const *d_keys, const uint32_t *n, float *const *d_out);

/* ==== host tier glue (cuda/tier.c) =======================================
 * Moves a batch's rows between the host tier (runtime/store/table.h rows:
 * row_floats floats each, host pointers) and one device table, through
 * page-locked staging buffers sized for max_keys keys. */
typedef struct st_gpu_tier st_gpu_tier_t;

typedef struct st_gpu_tier_stats {
	uint64_t hits;        /* keys found resident at pull */
	uint64_t misses;      /* keys copied host -> device at pull */
	uint64_t absent;      /* keys with no host row (not admitted): slot -1 */
	uint64_t evictions;   /* st_gpu_table_evict calls made by pulls */
	uint64_t h2d_bytes, d2h_bytes;
} st_gpu_tier_stats_t;

/* The tier does not own t or s. Caller destroys. */
int st_gpu_tier_create(st_gpu_tier_t **out, st_gpu_table_t *t, uint32_t max_keys,
		       st_gpu_stream_t *s);
void st_gpu_tier_destroy(st_gpu_tier_t *x);

/* Pull: makes the n distinct keys resident and pinned. host_rows[i] is the
 * host row of keys[i] (NULL: not admitted, slot -1 and no update). Keys
 * already resident are hits (their device row is used as is); missing ones
 * are copied host -> device, evicting unpinned rows first when the free
 * rows do not suffice. d_slots[n] (device) receives the slots. Synchronous.
 * ST_ENOSPC when the pinned rows leave no room (fewer batches in flight, or
 * a larger table). */
int st_gpu_tier_pull(st_gpu_tier_t *x, const uint64_t *keys, float *const *host_rows,
		     uint32_t n, int32_t *d_slots);
/* Push: copies the rows of d_slots[0..n) device -> host into host_rows[i]
 * (NULL or slot -1 skipped) and unpins them. Synchronous. */
int st_gpu_tier_push(st_gpu_tier_t *x, const int32_t *d_slots, float *const *host_rows,
		     uint32_t n);
void st_gpu_tier_stats(const st_gpu_tier_t *x, st_gpu_tier_stats_t *out);

/* ==== the dnn preset on one GPU (cuda/model.c) ===========================
 * logit = MLP(concat(pooled e_1..e_S, x_dense)) with ops/nn/model.c's dnn
 * layout: dense parameters in one device array, tensors mlp.<k>.weight,
 * mlp.<k>.bias, ..., out.weight, out.bias in that order (the offsets of
 * st_model_tensor for the same preset), so parameters copy 1:1 between the
 * CPU model and this one. */
typedef struct st_gpu_dnn st_gpu_dnn_t;

typedef struct st_gpu_dnn_cfg {
	const st_pool_layout_t *pool;  /* slot dims (copied) */
	int n_dense;
	int n_hidden;
	const int *hidden;             /* [n_hidden] */
	int act;                       /* 0 none, 1 relu, 2 sigmoid */
	int log1p;                     /* dense transform log1p(max(x, 0)) */
	uint32_t max_n;                /* examples per step */
} st_gpu_dnn_cfg_t;

int st_gpu_dnn_create(st_gpu_dnn_t **out, const st_gpu_dnn_cfg_t *cfg, st_gpu_blas_t *b);
void st_gpu_dnn_destroy(st_gpu_dnn_t *m);
size_t st_gpu_dnn_nparams(const st_gpu_dnn_t *m);

/* Forward + backward over the n examples of c (n <= max_n) with dense
 * features d_dense[n × n_dense] and labels d_label[n]: gradients of the loss
 * sum times scale are ADDED into d_gparams[nparams] and d_gu[u * gstride ..]
 * (twin of st_model_step); d_prob[n] (may be NULL) gets the predictions;
 * the loss sum is added into *d_loss (device double). With d_gparams NULL
 * only the forward runs (evaluation). */
int st_gpu_dnn_step(st_gpu_dnn_t *m, const st_gpu_csr_t *c, const st_gpu_rows_t *r,
		    const float *d_dense, const float *d_label, const float *d_params,
		    float scale, float *d_prob, float *d_gparams, float *d_gu, int gstride,
		    double *d_loss);

#ifdef __cplusplus
}
#endif

#endif
