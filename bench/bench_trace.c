/*
 * bench_trace.c — the cost of one trace event (runtime/trace.h), the number
 * that bounds --trace's overhead independently of a noisy machine: a stage
 * thread records 2 to 4 events per batch, so the overhead of a run is about
 * events per batch x ns per event / the batch's time.
 *
 *   build/bench/bench_trace [EVENTS] [THREADS]   (defaults 20000000, 2)
 *
 * Times, on each of THREADS threads at once, EVENTS spans (with the two
 * st_trace_now calls a hook makes around its work) into a ring of the
 * default size, and the same loop with recording off (the cost a run
 * without --trace pays). Prints ns per event, the best of 3 rounds.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "runtime/trace.h"

static long n_events;

static void *loop(void *arg)
{
	(void)arg;
	for (long i = 0; i < n_events; i++) {
		uint64_t t0 = st_trace_enabled() ? st_trace_now() : 0;
		if (t0)
			st_trace_span("stage", "bench", "bench", t0, st_trace_now(), i);
	}
	return NULL;
}

static double round_ns(int threads)
{
	pthread_t t[64];
	uint64_t t0 = st_trace_now();
	for (int i = 0; i < threads; i++)
		pthread_create(&t[i], NULL, loop, NULL);
	for (int i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	return (double)(st_trace_now() - t0) / (double)n_events;
}

int main(int argc, char **argv)
{
	n_events = argc > 1 ? atol(argv[1]) : 20000000;
	int threads = argc > 2 ? atoi(argv[2]) : 2;
	if (n_events < 1 || threads < 1 || threads > 64) {
		fprintf(stderr, "usage: bench_trace [EVENTS] [THREADS<=64]\n");
		return 2;
	}
	double off = 1e30, on = 1e30;
	for (int r = 0; r < 3; r++) {
		double x = round_ns(threads);
		off = x < off ? x : off;
		if (st_trace_open(0) < 0)
			return 1;
		x = round_ns(threads);
		on = x < on ? x : on;
		st_trace_close();
	}
	printf("%ld events on each of %d threads: off %.2f ns/event, on %.2f ns/event "
	       "(span + 2 clock reads)\n", n_events, threads, off, on);
	return 0;
}
