/*
 * bench_read.c — reader throughput on one Criteo TSV file (see bench/read.sh
 * and docs/benchmarks.md "Reader throughput").
 *
 *   bench_read FILE [THREADS]
 *
 * THREADS = 1 (default): st_reader_next in a loop on this thread, batches of
 * 4096 rows reused. THREADS > 1: the read stage inside a graph with that many
 * reader threads and a sink that frees batches; FILE is listed THREADS times
 * so every thread has a whole file to read (sharding is by file). Prints
 * MB/s and rows/s, in total and per thread.
 */
#include "ops/read/read.h"
#include "runtime/err.h"
#include "runtime/graph.h"

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

static int sink_process(void *state, st_stage_ctx_t *ctx, st_batch_t *in,
			st_batch_t **out)
{
	st_batch_destroy(in);
	*out = NULL;
	return 0;
}

static const st_stage_ops_t sink_ops = { .name = "sink", .process = sink_process };

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s FILE [THREADS]\n", argv[0]);
		return 2;
	}
	int threads = argc > 2 ? atoi(argv[2]) : 1;
	if (threads < 1 || threads > ST_MAX_STAGE_THREADS) {
		fprintf(stderr, "threads must be 1..%d\n", ST_MAX_STAGE_THREADS);
		return 2;
	}
	char **paths = calloc((size_t)threads, sizeof *paths);
	for (int i = 0; i < threads; i++)
		paths[i] = argv[1];
	st_source_t src;
	memset(&src, 0, sizeof src);
	src.format = (char *)"criteo";
	src.paths = paths;
	src.n_paths = threads;
	src.on_bad = ST_BAD_SKIP;
	src.max_report = 5;
	src.limit = -1;
	src.n_dense = 13;
	src.n_slots = 26;

	st_read_stats_t st;
	double t0 = now_s(), t1;
	if (threads == 1) {
		st_reader_t *r;
		st_batch_t *b;
		if (st_reader_open(&r, &src, argv[1]) < 0)
			return 1;
		if (st_batch_create(&b, 4096, 13, 26, 4096 * 26) < 0)
			return 1;
		int n;
		do {
			st_batch_clear(b);
			n = st_reader_next(r, b, 4096);
		} while (n > 0);
		t1 = now_s();
		if (n < 0) {
			fprintf(stderr, "%s\n", st_reader_error(r));
			return 1;
		}
		st_reader_stats(r, &st);
		st_reader_close(r);
		st_batch_destroy(b);
	} else {
		st_read_stage_t *rs;
		st_graph_t *g;
		if (st_read_stage_create(&rs, &src, 4096, 1, 0) < 0 || st_graph_create(&g) < 0)
			return 1;
		st_stage_desc_t d;
		memset(&d, 0, sizeof d);
		d.name = "read";
		d.ops = &st_read_stage_ops;
		d.state = rs;
		d.n_threads = threads;
		d.queue_cap = 4;
		for (int i = 0; i < ST_MAX_STAGE_THREADS; i++)
			d.cpus[i] = -1;
		st_graph_add_stage(g, &d);
		d.name = "sink";
		d.ops = &sink_ops;
		d.state = NULL;
		d.n_threads = 1;
		st_graph_add_stage(g, &d);
		int rc = st_graph_run(g);
		t1 = now_s();
		if (rc < 0) {
			fprintf(stderr, "%s\n", st_graph_error(g));
			return 1;
		}
		st_read_stage_totals(rs, &st);
		st_graph_destroy(g);
		st_read_stage_destroy(rs);
	}
	double secs = t1 - t0;
	double mbs = (double)st.bytes / 1e6 / secs;
	double rows = (double)st.rows / secs;
	printf("threads %d  rows %llu  bad %llu  bytes %llu  time %.3f s\n", threads,
	       (unsigned long long)st.rows, (unsigned long long)st.bad,
	       (unsigned long long)st.bytes, secs);
	printf("total: %.1f MB/s  %.0f rows/s\n", mbs, rows);
	printf("per thread: %.1f MB/s  %.0f rows/s\n", mbs / threads, rows / threads);
	free(paths);
	return 0;
}
