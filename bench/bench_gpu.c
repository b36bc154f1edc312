/*
 * bench_gpu.c — strata's side of bench/gpu.sh: the standard CTR model (the
 * dnn preset of the job file, e.g. bench/ctr_strata.lua) trained on one GPU
 * through the kernels of cuda/gpu.h, with the data in memory.
 *
 *   bench_gpu JOB [--set key=value ...] [--gpu-frac F] [--tf32]
 *   bench_gpu --check          exit 0 when a GPU is usable, 77 when not
 *
 * The GPU training pipeline is not wired into the trainer yet (docs/gpu.md),
 * so this driver runs the train step loop itself, one thread, one stream:
 * per batch (job batch_size)
 *   host tier    st_table_resolve of the batch's unique keys (creating rows)
 *   pull         st_gpu_tier_pull: resident keys are hits, the others are
 *                copied host -> device (evicting unpinned rows when needed)
 *   upload       the batch's CSR, dense features and labels
 *   per minibatch (job minibatch, one optimizer step each):
 *                gather the minibatch's slots, st_gpu_dnn_step (pool, MLP
 *                forward/backward with cuBLAS, loss), row AdaGrad (the job's
 *                sparse optimizer) on the touched rows, dense Adam
 *   push         st_gpu_tier_push: rows device -> host, unpinned
 * The keys are deduplicated per batch and per minibatch while loading (not
 * timed, as torch_gpu.py's ids are made at load). Then the eval batches are
 * scored the same way (no row creation, unseen keys read as zeros) and the
 * exact AUC printed.
 *
 * --gpu-frac F gives the device table F × the bytes of the whole model (all
 * distinct train keys): F = 0.25 trains a model 4× larger than its GPU
 * budget, the device table caching the batches' working sets over the host
 * tier. Default 0: the table holds the whole model.
 *
 * Without a usable GPU it prints "no CUDA device: skipped" and exits 77.
 * Prints examples/s and, last, one JSON line (the keys of bench_ctr's).
 */
#include "cuda/gpu.h"
#include "lang/lang.h"
#include "ops/metrics/auc.h"
#include "ops/read/read.h"
#include "runtime/err.h"
#include "runtime/store/table.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(call)                                                                    \
	do {                                                                           \
		int rc_ = (int)(call);                                                 \
		if (rc_ < 0) {                                                         \
			fprintf(stderr, "bench_gpu: %s failed: %s\n", #call, st_strerror(rc_)); \
			exit(1);                                                       \
		}                                                                      \
	} while (0)

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- loading: batches with per-batch unique keys and per-minibatch ids ----
 * b->uniq / n_uniq: the batch's distinct keys; b->key_idx: each key's index
 * among its MINIBATCH's distinct keys; b->aux: uint32 [n_mb + 1] offsets,
 * then for each minibatch its distinct keys as indices into b->uniq. */

typedef struct dedup {
	uint64_t *k;
	uint32_t *v;
	uint32_t *used;   /* positions filled, for clearing */
	size_t cap, n;
} dedup_t;

static uint32_t dedup_get(dedup_t *d, uint64_t key, uint32_t next)
{
	size_t i = st_gpu_mix64(key) & (d->cap - 1);
	while (d->v[i] != UINT32_MAX && d->k[i] != key)
		i = (i + 1) & (d->cap - 1);
	if (d->v[i] == UINT32_MAX) {
		d->k[i] = key;
		d->v[i] = next;
		d->used[d->n++] = (uint32_t)i;
	}
	return d->v[i];
}

static void dedup_clear(dedup_t *d)
{
	for (size_t j = 0; j < d->n; j++)
		d->v[d->used[j]] = UINT32_MAX;
	d->n = 0;
}

static void prepare(st_batch_t *b, int mb, dedup_t *bd, dedup_t *md)
{
	uint32_t nk = st_batch_nkeys(b), n_mb = (b->n + (uint32_t)mb - 1) / (uint32_t)mb;
	b->uniq = malloc((nk ? nk : 1) * sizeof *b->uniq);
	b->key_idx = malloc((nk ? nk : 1) * sizeof *b->key_idx);
	uint32_t *aux = malloc(((size_t)n_mb + 1 + nk) * sizeof *aux);
	if (!b->uniq || !b->key_idx || !aux)
		CHECK(ST_ENOMEM);
	b->aux = aux;
	b->n_uniq = 0;
	uint32_t *ids = aux + n_mb + 1, nid = 0;
	for (uint32_t j = 0; j < n_mb; j++) {
		aux[j] = nid;
		uint32_t k0 = b->row_off[j * (uint32_t)mb];
		uint32_t r1 = (j + 1) * (uint32_t)mb < b->n ? (j + 1) * (uint32_t)mb : b->n;
		uint32_t local = 0;
		for (uint32_t k = k0; k < b->row_off[r1]; k++) {
			uint64_t key = b->keys[k];
			uint32_t u = dedup_get(bd, key, b->n_uniq);
			if (u == b->n_uniq)
				b->uniq[b->n_uniq++] = key;
			uint32_t l = dedup_get(md, key, local);
			if (l == local)
				ids[nid + local++] = u;
			b->key_idx[k] = l;
		}
		nid += local;
		dedup_clear(md);
	}
	aux[n_mb] = nid;
	dedup_clear(bd);
}

static int dedup_init(dedup_t *d, size_t n)
{
	d->cap = 64;
	while (d->cap < 2 * n)
		d->cap *= 2;
	d->k = malloc(d->cap * sizeof *d->k);
	d->v = malloc(d->cap * sizeof *d->v);
	d->used = malloc(d->cap * sizeof *d->used);
	d->n = 0;
	if (!d->k || !d->v || !d->used)
		return ST_ENOMEM;
	memset(d->v, 0xff, d->cap * sizeof *d->v);
	return ST_OK;
}

static void dedup_fini(dedup_t *d)
{
	free(d->k);
	free(d->v);
	free(d->used);
}

typedef struct src {
	st_batch_t **b;
	size_t n, cap;
	uint64_t rows;
	uint32_t max_keys, max_uniq;
} src_t;

static int load(const st_job_t *job, const st_source_t *src, src_t *m)
{
	for (int f = 0; f < src->n_paths; f++) {
		st_reader_t *r;
		int rc = st_reader_open(&r, src, src->paths[f]);
		if (rc < 0)
			return rc;
		for (;;) {
			st_batch_t *b;
			uint32_t cap = (uint32_t)job->batch_size;
			if (st_batch_create(&b, cap, (uint32_t)src->n_dense, (uint32_t)src->n_slots,
					    cap * (uint32_t)src->n_slots) < 0)
				return ST_ENOMEM;
			rc = st_reader_next(r, b, cap);
			if (rc <= 0) {
				st_batch_destroy(b);
				break;
			}
			if (m->n == m->cap) {
				m->cap = m->cap ? 2 * m->cap : 256;
				st_batch_t **nb = realloc(m->b, m->cap * sizeof *nb);
				if (!nb)
					return ST_ENOMEM;
				m->b = nb;
			}
			m->b[m->n++] = b;
			m->rows += b->n;
			if (st_batch_nkeys(b) > m->max_keys)
				m->max_keys = st_batch_nkeys(b);
		}
		st_reader_close(r);
		if (rc < 0)
			return rc;
	}
	return ST_OK;
}

/* ---- training ------------------------------------------------------------ */

typedef struct bench {
	int mb, dim, rf, D, gstride;
	size_t np;
	st_optim_t sopt, dopt;
	st_table_t *host;
	st_gpu_blas_t *bl;
	st_gpu_stream_t *s;
	st_gpu_dnn_t *m;
	st_gpu_table_t *t;
	st_gpu_tier_t *tier;
	float *d_params, *d_gparams, *d_dstate, *d_gu, *d_key_val, *d_dense, *d_label, *d_prob;
	uint32_t *d_row_off, *d_key_idx, *d_ids;
	uint16_t *d_key_slot;
	int32_t *d_slots, *d_mbslots;
	double *d_loss;
	float **rows;
	uint64_t step;
} bench_t;

static void upload_batch(bench_t *g, const st_batch_t *b)
{
	uint32_t nk = st_batch_nkeys(b), n_mb = (b->n + (uint32_t)g->mb - 1) / (uint32_t)g->mb;
	const uint32_t *aux = b->aux;
	CHECK(st_gpu_upload(g->d_row_off, b->row_off, (b->n + 1) * 4, g->s));
	CHECK(st_gpu_upload(g->d_key_slot, b->key_slot, nk * 2, g->s));
	CHECK(st_gpu_upload(g->d_key_val, b->key_val, nk * 4, g->s));
	CHECK(st_gpu_upload(g->d_key_idx, b->key_idx, nk * 4, g->s));
	CHECK(st_gpu_upload(g->d_ids, aux + n_mb + 1, aux[n_mb] * 4, g->s));
	CHECK(st_gpu_upload(g->d_dense, b->dense, (size_t)b->n * g->D * 4, g->s));
	CHECK(st_gpu_upload(g->d_label, b->labels, (size_t)b->n * 4, g->s));
}

/* One batch: pull, minibatch steps (train) or forward only (eval), push. */
static void run_batch(bench_t *g, const st_batch_t *b, int train, float *prob_out)
{
	CHECK(st_table_resolve(g->host, b->uniq, b->n_uniq, (uint32_t)g->step, train, g->rows));
	CHECK(st_gpu_tier_pull(g->tier, b->uniq, g->rows, b->n_uniq, g->d_slots));
	upload_batch(g, b);
	const uint32_t *aux = b->aux;
	for (uint32_t j = 0, r0 = 0; r0 < b->n; j++, r0 += (uint32_t)g->mb) {
		uint32_t n = b->n - r0 < (uint32_t)g->mb ? b->n - r0 : (uint32_t)g->mb;
		uint32_t nu = aux[j + 1] - aux[j];
		CHECK(st_gpu_gather_i32(g->d_slots, g->d_ids + aux[j], nu, g->d_mbslots, g->s));
		st_gpu_csr_t c = { .n = n, .row_off = g->d_row_off + r0, .key_slot = g->d_key_slot,
				   .key_val = g->d_key_val, .key_idx = g->d_key_idx };
		st_gpu_rows_t r = { .vals = st_gpu_table_values(g->t), .stride = (uint32_t)g->rf,
				    .slot = g->d_mbslots };
		if (train) {
			CHECK(st_gpu_zero(g->d_gparams, g->np * 4, g->s));
			CHECK(st_gpu_zero(g->d_gu, (size_t)nu * g->gstride * 4, g->s));
		}
		CHECK(st_gpu_dnn_step(g->m, &c, &r, g->d_dense + (size_t)r0 * g->D, g->d_label + r0,
				      g->d_params, 1.0f / (float)n, g->d_prob + r0,
				      train ? g->d_gparams : NULL, g->d_gu, g->gstride, g->d_loss));
		if (!train)
			continue;
		g->step++;
		CHECK(st_gpu_optim_rows(&g->sopt, st_gpu_table_values(g->t), (uint32_t)g->rf,
					(uint32_t)g->dim, g->d_mbslots, nu, g->d_gu, g->gstride,
					g->step, g->s));
		CHECK(st_gpu_optim_dense(&g->dopt, g->d_params, g->d_dstate, g->d_gparams, 1, g->np,
					 g->step, g->s));
	}
	if (prob_out) {
		CHECK(st_gpu_download(prob_out, g->d_prob, (size_t)b->n * 4, g->s));
		CHECK(st_gpu_stream_sync(g->s));
	}
	CHECK(st_gpu_tier_push(g->tier, g->d_slots, g->rows, b->n_uniq));
}

static void *dalloc(size_t bytes)
{
	void *p;
	CHECK(st_gpu_alloc(&p, bytes ? bytes : 8));
	return p;
}

static void setup(bench_t *g, const st_job_t *job, const src_t *tr, const src_t *ev,
		  double frac, int tf32, uint64_t *model_rows, uint64_t *table_rows)
{
	const st_model_cfg_t *mc = &job->model;
	g->mb = job->minibatch;
	g->dim = mc->emb_dim;
	g->D = job->train.n_dense;
	CHECK(st_optim_init(&g->sopt, &mc->sparse_opt));
	CHECK(st_optim_init(&g->dopt, &mc->dense_opt));
	g->rf = g->dim + (int)st_optim_state_floats(&g->sopt, (size_t)g->dim);
	g->gstride = g->dim;
	st_table_opts_t to = { .dim = (uint32_t)g->dim,
			       .state_dim = (uint32_t)(g->rf - g->dim),
			       .seed = job->seed, .init_scale = (float)mc->init_scale,
			       .state_init = g->sopt.kind == ST_OPT_ADAGRAD ||
					     g->sopt.kind == ST_OPT_ADAGRAD_ROW
					     ? g->sopt.init_accum : 0.0f };
	CHECK(st_table_create(&g->host, &to));
	/* The whole model starts in the host tier (as torch allocates its whole
	 * embedding up front): every train key gets its row here, untimed. */
	g->rows = malloc(((size_t)tr->max_uniq + ev->max_uniq + 1) * sizeof *g->rows);
	for (size_t i = 0; i < tr->n; i++)
		CHECK(st_table_resolve(g->host, tr->b[i]->uniq, tr->b[i]->n_uniq, 0, 1, g->rows));
	*model_rows = st_table_size(g->host);
	CHECK(st_gpu_stream_create(&g->s));
	CHECK(st_gpu_blas_create(&g->bl, g->s, tf32));
	int S = job->train.n_slots, *dims = malloc(S * sizeof(int)), *offs = malloc(S * sizeof(int));
	for (int s = 0; s < S; s++) {
		dims[s] = g->dim;
		offs[s] = s * g->dim;
	}
	st_pool_layout_t L = { .n_slots = S, .dim = dims, .off = offs, .width = S * g->dim,
			       .mean = mc->pooling && !strcmp(mc->pooling, "mean") };
	const char *act = mc->activation ? mc->activation : "relu";
	st_gpu_dnn_cfg_t dc = { .pool = &L, .n_dense = g->D, .n_hidden = mc->n_hidden,
				.hidden = mc->hidden,
				.act = !strcmp(act, "relu") ? 1 : !strcmp(act, "sigmoid") ? 2 : 0,
				.log1p = !mc->dense_transform || strcmp(mc->dense_transform, "none"),
				.max_n = (uint32_t)g->mb };
	CHECK(st_gpu_dnn_create(&g->m, &dc, g->bl));
	free(dims);
	free(offs);
	g->np = st_gpu_dnn_nparams(g->m);
	/* Dense init as model.c: uniform(-1/sqrt(in), 1/sqrt(in)) weights, zero
	 * biases, from the job's seed (splitmix64 stream). */
	float *p = calloc(g->np, sizeof *p);
	uint64_t rng = job->seed ^ UINT64_C(0x6d6f64656c);
	size_t o = 0;
	int in = S * g->dim + g->D;
	for (int k = 0; k <= mc->n_hidden; k++) {
		int out = k < mc->n_hidden ? mc->hidden[k] : 1;
		float a = 1.0f / sqrtf((float)in);
		for (size_t i = 0; i < (size_t)in * out; i++)
			p[o + i] = (float)((2.0 * ((double)(st_gpu_mix64(rng += UINT64_C(0x9e3779b97f4a7c15)) >> 11) * 0x1.0p-53) - 1.0) * a);
		o += (size_t)in * out + (size_t)out;
		in = out;
	}
	g->d_params = dalloc(g->np * 4);
	CHECK(st_gpu_upload(g->d_params, p, g->np * 4, g->s));
	CHECK(st_gpu_stream_sync(g->s));
	free(p);
	g->d_gparams = dalloc(g->np * 4);
	size_t sf = st_optim_state_floats(&g->dopt, g->np);
	g->d_dstate = sf ? dalloc(sf * 4) : NULL;
	if (sf)
		CHECK(st_gpu_zero(g->d_dstate, sf * 4, g->s));
	/* Device table: the whole model, or frac of its bytes. */
	uint32_t ws = tr->max_uniq > ev->max_uniq ? tr->max_uniq : ev->max_uniq;
	size_t budget = frac > 0 ? (size_t)(frac * (double)st_gpu_table_bytes(*model_rows,
									      (uint32_t)g->rf, 0)) : 0;
	uint64_t rows = *model_rows + ws;
	if (budget)
		CHECK(st_gpu_table_rows(ws, 1, budget, (uint32_t)g->rf, 0, &rows));
	*table_rows = rows;
	CHECK(st_gpu_table_create(&g->t, rows, (uint32_t)g->rf, 0));
	CHECK(st_gpu_tier_create(&g->tier, g->t, ws, g->s));
	uint32_t mk = tr->max_keys > ev->max_keys ? tr->max_keys : ev->max_keys;
	uint32_t B = (uint32_t)job->batch_size;
	g->d_row_off = dalloc((B + 1) * 4);
	g->d_key_slot = dalloc((size_t)mk * 2);
	g->d_key_val = dalloc((size_t)mk * 4);
	g->d_key_idx = dalloc((size_t)mk * 4);
	g->d_ids = dalloc((size_t)mk * 4);
	g->d_dense = dalloc((size_t)B * g->D * 4);
	g->d_label = dalloc((size_t)B * 4);
	g->d_prob = dalloc((size_t)B * 4);
	g->d_slots = dalloc((size_t)ws * 4);
	g->d_mbslots = dalloc((size_t)mk * 4);
	g->d_gu = dalloc((size_t)mk * g->gstride * 4);
	g->d_loss = dalloc(sizeof(double));
}

int main(int argc, char **argv)
{
	const char *sets[64];
	int n_sets = 0, tf32 = 0;
	double frac = 0;
	if (argc < 2) {
		fprintf(stderr, "usage: bench_gpu JOB [--set key=value ...] [--gpu-frac F] [--tf32]\n"
			"       bench_gpu --check   (exit 0 with a GPU, 77 without)\n");
		return 2;
	}
	if (!strcmp(argv[1], "--check")) {
		char name[128] = "";
		if (st_gpu_device_count() < 1) {
			printf("bench_gpu: no CUDA device: skipped\n");
			return 77;
		}
		CHECK(st_gpu_device_info(0, name, sizeof name, NULL, NULL, 0));
		printf("bench_gpu: %d CUDA device(s), device 0: %s\n", st_gpu_device_count(), name);
		return 0;
	}
	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--set") && i + 1 < argc && n_sets < 64)
			sets[n_sets++] = argv[++i];
		else if (!strcmp(argv[i], "--gpu-frac") && i + 1 < argc)
			frac = atof(argv[++i]);
		else if (!strcmp(argv[i], "--tf32"))
			tf32 = 1;
		else {
			fprintf(stderr, "bench_gpu: unexpected argument %s\n", argv[i]);
			return 2;
		}
	}
	if (st_gpu_device_count() < 1) {
		printf("bench_gpu: no CUDA device: skipped\n");
		return 77;
	}
	st_load_opts_t lo = { .sets = sets, .n_sets = n_sets, .check_paths = 1 };
	st_job_t *job;
	st_diag_t diag;
	if (st_job_load(argv[1], &lo, &job, &diag) < 0) {
		for (int i = 0; i < diag.n; i++)
			fprintf(stderr, "%s\n", diag.msg[i]);
		st_diag_free(&diag);
		return 1;
	}
	if (strcmp(job->model.type, "dnn") || !job->has_eval) {
		fprintf(stderr, "bench_gpu: needs a dnn model and eval data (got %s%s)\n",
			job->model.type, job->has_eval ? "" : ", no eval");
		return 2;
	}

	double t0 = now_s();
	src_t tr = { 0 }, ev = { 0 };
	CHECK(load(job, &job->train, &tr));
	CHECK(load(job, &job->eval, &ev));
	dedup_t bd, md;
	CHECK(dedup_init(&bd, tr.max_keys > ev.max_keys ? tr.max_keys : ev.max_keys));
	CHECK(dedup_init(&md, (size_t)job->minibatch * job->train.n_slots * 2));
	src_t *srcs[] = { &tr, &ev };
	for (int w = 0; w < 2; w++)
		for (size_t i = 0; i < srcs[w]->n; i++) {
			st_batch_t *b = srcs[w]->b[i];
			prepare(b, job->minibatch, &bd, &md);
			if (b->n_uniq > srcs[w]->max_uniq)
				srcs[w]->max_uniq = b->n_uniq;
		}
	dedup_fini(&bd);
	dedup_fini(&md);
	double load_s = now_s() - t0;

	bench_t g = { 0 };
	uint64_t table_rows, model_rows;
	CHECK(st_gpu_use(0));
	char gpu[128] = "";
	CHECK(st_gpu_device_info(0, gpu, sizeof gpu, NULL, NULL, 0));
	setup(&g, job, &tr, &ev, frac, tf32, &model_rows, &table_rows);

	t0 = now_s();
	for (int e = 0; e < job->epochs; e++)
		for (size_t i = 0; i < tr.n; i++)
			run_batch(&g, tr.b[i], 1, NULL);
	CHECK(st_gpu_stream_sync(g.s));
	double train_s = now_s() - t0;
	st_gpu_tier_stats_t ts;
	st_gpu_tier_stats(g.tier, &ts);

	t0 = now_s();
	float *pred = malloc((ev.rows ? ev.rows : 1) * sizeof *pred);
	float *lab = malloc((ev.rows ? ev.rows : 1) * sizeof *lab);
	size_t at = 0;
	for (size_t i = 0; i < ev.n; i++) {
		run_batch(&g, ev.b[i], 0, pred + at);
		memcpy(lab + at, ev.b[i]->labels, ev.b[i]->n * sizeof *lab);
		at += ev.b[i]->n;
	}
	double auc = 0;
	CHECK(st_auc_exact(pred, lab, at, &auc));
	double eval_s = now_s() - t0;

	double ex = (double)tr.rows * job->epochs, exs = ex / train_s;
	printf("strata bench_gpu on %s: dnn, minibatch %d, batch %d, device table %llu rows "
	       "for %llu model rows (%.2f of the model)\n", gpu, job->minibatch, job->batch_size,
	       (unsigned long long)table_rows, (unsigned long long)model_rows,
	       (double)table_rows / (double)(model_rows ? model_rows : 1));
	printf("  load %.2f s (not timed below)\n", load_s);
	printf("  train %.2f s: %.0f ex/s; pulls: %llu hits, %llu misses, %llu evictions, "
	       "%.1f MB host->device, %.1f MB device->host\n", train_s, exs,
	       (unsigned long long)ts.hits, (unsigned long long)ts.misses,
	       (unsigned long long)ts.evictions, ts.h2d_bytes / 1e6, ts.d2h_bytes / 1e6);
	printf("  eval %.2f s: auc %.5f (%zu examples)\n", eval_s, auc, at);
	printf("{\"system\": \"strata-gpu\", \"gpu\": \"%s\", \"train_rows\": %llu, \"epochs\": %d, "
	       "\"model_rows\": %llu, \"table_rows\": %llu, \"gpu_frac\": %.3f, \"load_s\": %.3f, "
	       "\"train_s\": %.3f, \"eval_s\": %.3f, \"train_ex_per_s\": %.1f, \"hits\": %llu, "
	       "\"misses\": %llu, \"evictions\": %llu, \"eval_auc\": %.5f}\n",
	       gpu, (unsigned long long)tr.rows, job->epochs, (unsigned long long)model_rows,
	       (unsigned long long)table_rows, frac, load_s, train_s, eval_s, exs,
	       (unsigned long long)ts.hits, (unsigned long long)ts.misses,
	       (unsigned long long)ts.evictions, auc);
	/* The process exits: the device and host memory go with it. */
	free(pred);
	free(lab);
	st_job_free(job);
	return 0;
}
