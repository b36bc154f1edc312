/*
 * bench_ctr.c — strata's training speed from data already in memory (the
 * "(b) training only" half of bench/ctr.sh; docs/benchmarks.md "Training
 * speed against PyTorch").
 *
 *   bench_ctr JOB [--set key=value ...] [--twin] [--simd-ab N]
 *
 * --twin builds a preset's dense model with its C reference twin
 * (ops/nn/model.c) instead of the layers its Lua function built
 * (stdlib/strata/presets.lua): bench/presets_ab.sh times the two.
 *
 * Loads the job (as `strata run` does, with the --set overrides), reads every
 * train and eval file of it into batches of job batch_size with st_reader
 * (timed apart, not counted), then runs the job's pipeline without its
 * reader: an in-memory source stage hands out the batches, followed by the
 * trainer's pull -> train -> push -> dump stages with the job's thread
 * counts and queue capacities, for the job's epochs (each epoch is its own
 * graph run over a fresh copy of the batches). Then the eval batches go
 * through the same stages and their AUC is printed.
 *
 * --simd-ab N: after one untimed warm-up pass over the train batches, N
 * repetitions of two passes, one with the plain-loop references forced
 * (runtime/simd.h, as ST_SIMD=ref) and one with the AVX2 paths, in
 * alternating order, in this one process (bench/simd_ab.sh's in-process
 * twin, docs/benchmarks.md "Cutting what is not the GEMM"); prints each
 * pass's examples/s and the median of the per-repetition ratios. The model
 * keeps training across the passes (timing only; the eval AUC is of the
 * whole run).
 *
 * Prints examples/s of training, the dense GFLOP/s achieved
 * (st_model_flops_per_example × examples/s) and, last, one JSON line.
 * Threads: the graph's stage threads plus the trainer's workers.
 */
#include "lang/lang.h"
#include "ops/read/read.h"
#include "ops/train/trainer.h"
#include "runtime/err.h"
#include "runtime/graph.h"
#include "runtime/simd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct mem_src {
	st_batch_t **b;
	size_t n, next, cap;
	uint64_t rows;
} mem_src_t;

/* Copies of the preloaded batches are handed out, so the originals survive
 * for the next epoch (the dump stage frees what it gets). */
static st_batch_t *clone_batch(const st_batch_t *s)
{
	st_batch_t *b;
	uint32_t nk = st_batch_nkeys(s);
	if (st_batch_create(&b, s->n, s->n_dense, s->n_slots, nk + 1) < 0)
		return NULL;
	b->n = s->n;
	b->seq = s->seq;
	b->eval = s->eval;
	memcpy(b->labels, s->labels, sizeof(float) * s->n);
	memcpy(b->dense, s->dense, sizeof(float) * s->n * s->n_dense);
	memcpy(b->row_off, s->row_off, sizeof(uint32_t) * (s->n + 1));
	memcpy(b->keys, s->keys, sizeof(uint64_t) * nk);
	memcpy(b->key_slot, s->key_slot, sizeof(uint16_t) * nk);
	memcpy(b->key_val, s->key_val, sizeof(float) * nk);
	return b;
}

static int mem_produce(void *state, st_stage_ctx_t *ctx, st_batch_t **out)
{
	mem_src_t *m = state;
	if (m->next == m->n)
		return 0;
	/* The copy is made here, on the source thread, like a reader's work;
	 * its cost (a memcpy) is part of the measured time. */
	*out = clone_batch(m->b[m->next++]);
	if (!*out)
		return st_stage_fail(ctx, ST_ENOMEM, "out of memory");
	return 1;
}

static const st_stage_ops_t mem_ops = { .name = "memory", .produce = mem_produce };

static int load_source(const st_job_t *job, const st_source_t *src, int eval, mem_src_t *m)
{
	for (int f = 0; f < src->n_paths; f++) {
		st_reader_t *r;
		int rc = st_reader_open(&r, src, src->paths[f]);
		if (rc < 0)
			return rc;
		for (;;) {
			st_batch_t *b;
			if (st_batch_create(&b, (uint32_t)job->batch_size, (uint32_t)src->n_dense,
					    (uint32_t)src->n_slots,
					    (uint32_t)job->batch_size * (uint32_t)src->n_slots) < 0)
				return ST_ENOMEM;
			rc = st_reader_next(r, b, (uint32_t)job->batch_size);
			if (rc <= 0) {
				st_batch_destroy(b);
				if (rc < 0)
					fprintf(stderr, "bench_ctr: %s\n", st_reader_error(r));
				break;
			}
			b->eval = eval;
			b->seq = m->n;
			if (m->n == m->cap) {
				m->cap = m->cap ? 2 * m->cap : 256;
				m->b = realloc(m->b, m->cap * sizeof *m->b);
				if (!m->b)
					return ST_ENOMEM;
			}
			m->b[m->n++] = b;
			m->rows += b->n;
		}
		st_reader_close(r);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static int run_pass(const st_job_t *job, st_trainer_t *tr, mem_src_t *m)
{
	static const char *names[] = { "read", "pull", "train", "push", "dump" };
	const st_stage_ops_t *ops[] = { &mem_ops, &st_trainer_pull_ops, &st_trainer_train_ops,
					&st_trainer_push_ops, &st_trainer_dump_ops };
	const st_stage_cfg_t *cfg[] = { &job->read, &job->pull, &job->train_stage, &job->push,
					&job->dump };
	st_graph_t *g;
	int rc = st_graph_create(&g);
	if (rc < 0)
		return rc;
	for (int i = 0; i < 5 && rc >= 0; i++) {
		st_stage_desc_t d;
		memset(&d, 0, sizeof d);
		d.name = names[i];
		d.ops = ops[i];
		d.state = i ? (void *)tr : (void *)m;
		/* one source thread (the batches are already parsed); the train
		 * stage is one graph thread that runs the job's N workers */
		d.n_threads = i == 0 || i == 2 ? 1 : cfg[i]->threads;
		d.queue_cap = cfg[i]->queue;
		for (int t = 0; t < ST_MAX_STAGE_THREADS; t++)
			d.cpus[t] = -1;
		rc = st_graph_add_stage(g, &d);
	}
	m->next = 0;
	if (rc >= 0)
		rc = st_graph_run(g);
	if (rc < 0)
		fprintf(stderr, "bench_ctr: %s\n", st_graph_error(g) ? st_graph_error(g) : st_strerror(rc));
	st_graph_destroy(g);
	return rc;
}

int main(int argc, char **argv)
{
	const char *sets[64];
	int n_sets = 0, twin = 0, simd_ab = 0;
	if (argc < 2) {
		fprintf(stderr, "usage: bench_ctr JOB [--set key=value ...] [--twin]\n");
		return 2;
	}
	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--set") && i + 1 < argc && n_sets < 64)
			sets[n_sets++] = argv[++i];
		else if (!strcmp(argv[i], "--twin"))
			twin = 1;
		else if (!strcmp(argv[i], "--simd-ab") && i + 1 < argc && atoi(argv[i + 1]) > 0)
			simd_ab = atoi(argv[++i]);
		else {
			fprintf(stderr, "bench_ctr: unexpected argument %s\n", argv[i]);
			return 2;
		}
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

	if (twin && !job->model.n_preset_nodes) {
		fprintf(stderr, "bench_ctr: --twin: model '%s' is no preset\n", job->model.type);
		return 2;
	}
	if (twin)
		job->model.n_preset_nodes = 0;   /* lang/job.h: 0 = the C twin */

	mem_src_t tr_src = { 0 }, ev_src = { 0 };
	double t0 = now_s();
	if (load_source(job, &job->train, 0, &tr_src) < 0 ||
	    (job->has_eval && load_source(job, &job->eval, 1, &ev_src) < 0))
		return 1;
	double load_s = now_s() - t0;

	st_trainer_t *tr;
	if (st_trainer_create(&tr, job, NULL) < 0)
		return 1;
	double flops = st_model_flops_per_example(st_trainer_model(tr));

	int passes = job->epochs;
	t0 = now_s();
	if (simd_ab) {
		passes = 2 * simd_ab;
		if (run_pass(job, tr, &tr_src) < 0)   /* warm-up: rows created */
			return 1;
		t0 = now_s();
		double ratio[64];
		for (int r = 0; r < simd_ab; r++) {
			double x[2];
			for (int q = 0; q < 2; q++) {
				int fast = (q + r) & 1;
				st_simd_set_ref(!fast);
				double p0 = now_s();
				if (run_pass(job, tr, &tr_src) < 0)
					return 1;
				x[fast] = (double)tr_src.rows / (now_s() - p0);
				printf("  simd-ab rep %d %s: %.0f ex/s\n", r + 1, fast ? "avx2" : "ref ",
				       x[fast]);
			}
			if (r < 64)
				ratio[r] = x[1] / x[0];
		}
		st_simd_set_ref(0);
		int nr = simd_ab < 64 ? simd_ab : 64;
		for (int i = 1; i < nr; i++)   /* insertion sort for the median */
			for (int j = i; j > 0 && ratio[j] < ratio[j - 1]; j--) {
				double tmp = ratio[j];
				ratio[j] = ratio[j - 1];
				ratio[j - 1] = tmp;
			}
		double med = nr % 2 ? ratio[nr / 2] : 0.5 * (ratio[nr / 2 - 1] + ratio[nr / 2]);
		printf("  simd-ab: avx2/ref per repetition min %.3f median %.3f max %.3f\n",
		       ratio[0], med, ratio[nr - 1]);
	} else {
		for (int e = 0; e < job->epochs; e++)
			if (run_pass(job, tr, &tr_src) < 0)
				return 1;
	}
	double train_s = now_s() - t0;
	double auc = 0, ll = 0, calib = 0;
	uint64_t n_ev = 0;
	t0 = now_s();
	if (job->has_eval) {
		st_trainer_reset_eval(tr);
		if (run_pass(job, tr, &ev_src) < 0)
			return 1;
		st_trainer_eval_result(tr, &auc, &ll, &calib, &n_ev);
	}
	double eval_s = now_s() - t0;
	double ex = (double)tr_src.rows * passes;
	double exs = ex / train_s;
	printf("strata bench_ctr: %s (%s), %d workers, minibatch %d, batch %d\n",
	       job->model.type, twin ? "C twin" : job->model.n_preset_nodes ? "Lua preset" : "graph",
	       st_trainer_workers(tr), job->minibatch, job->batch_size);
	printf("  load %.2f s (%llu train + %llu eval rows, not timed below)\n", load_s,
	       (unsigned long long)tr_src.rows, (unsigned long long)ev_src.rows);
	printf("  train %.2f s: %.0f ex/s, dense %.1f GFLOP/s (%.2f MFLOP/example)\n", train_s, exs,
	       flops * exs / 1e9, flops / 1e6);
	printf("  eval %.2f s: auc %.5f logloss %.5f (%llu examples)\n", eval_s, auc, ll,
	       (unsigned long long)n_ev);
	printf("{\"system\": \"strata\", \"workers\": %d, \"train_rows\": %llu, \"epochs\": %d, "
	       "\"load_s\": %.3f, \"train_s\": %.3f, \"eval_s\": %.3f, \"train_ex_per_s\": %.1f, "
	       "\"gflops\": %.2f, \"flops_per_example\": %.0f, \"eval_auc\": %.5f}\n",
	       st_trainer_workers(tr), (unsigned long long)tr_src.rows, passes, load_s,
	       train_s, eval_s, exs, flops * exs / 1e9, flops, auc);

	st_trainer_destroy(tr);
	for (size_t i = 0; i < tr_src.n; i++)
		st_batch_destroy(tr_src.b[i]);
	for (size_t i = 0; i < ev_src.n; i++)
		st_batch_destroy(ev_src.b[i]);
	free(tr_src.b);
	free(ev_src.b);
	st_job_free(job);
	return 0;
}
