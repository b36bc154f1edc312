/*
 * cmd_trace.c — `strata trace summarize FILE`: reads a trace written by
 * `strata run --trace` (runtime/trace_read.h does the reading and the sums) and
 * prints each stage's busy / idle / blocked time and the bottleneck stage.
 */
#include "cli.h"
#include "runtime/err.h"
#include "runtime/trace_read.h"

#include <stdio.h>
#include <string.h>

static int usage(const char *why)
{
	fprintf(stderr, "strata trace: %s\nRun 'strata help trace' for usage.\n", why);
	return ST_EXIT_USAGE;
}

static void pct(double part, double all)
{
	printf(" %5.1f%%", all > 0 ? 100.0 * part / all : 0.0);
}

int st_cmd_trace(int argc, char **argv)
{
	if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		st_cli_help_for("trace", stdout);
		return ST_EXIT_OK;
	}
	if (argc < 2 || strcmp(argv[1], "summarize"))
		return usage(argc < 2 ? "missing subcommand (summarize)"
			     : "unknown subcommand (only summarize)");
	if (argc != 3)
		return usage(argc < 3 ? "missing FILE" : "summarize takes one FILE");
	const char *path = argv[2];
	st_trace_summary_t s;
	int rc = st_trace_summarize(path, &s);
	if (rc == ST_EINVAL) {
		fprintf(stderr, "strata trace: %s holds no trace events (is it a file of "
			"`strata run --trace`?)\n", path);
		return ST_EXIT_FAILED;
	}
	if (rc < 0) {
		fprintf(stderr, "strata trace: cannot read %s: %s\n", path, st_strerror(rc));
		return ST_EXIT_FAILED;
	}
	if (s.bottleneck < 0) {
		fprintf(stderr, "strata trace: %s has no stage spans (%llu events): nothing to "
			"summarize\n", path, (unsigned long long)s.events);
		return ST_EXIT_FAILED;
	}
	printf("%-10s %7s %9s %10s %10s %10s   %6s %6s %7s\n", "stage", "threads", "batches",
	       "busy s", "idle s", "blocked s", "busy", "idle", "blocked");
	for (int i = 0; i < s.n; i++) {
		const st_trace_stage_sum_t *t = &s.st[i];
		double all = t->threads * s.wall_s;
		printf("%-10s %7d %9llu %10.3f %10.3f %10.3f  ", t->name, t->threads,
		       (unsigned long long)t->spans, t->busy_s, t->idle_s, t->blocked_s);
		pct(t->busy_s, all);
		pct(t->idle_s, all);
		pct(t->blocked_s, all);
		printf("%s\n", i == s.bottleneck ? "   <- bottleneck" : "");
	}
	const st_trace_stage_sum_t *b = &s.st[s.bottleneck];
	double all = b->threads * s.wall_s;
	printf("bottleneck: %s (busy %.0f%% of the pipeline's %.3f s)\n", b->name,
	       all > 0 ? 100.0 * b->busy_s / all : 0.0, s.wall_s);
	if (s.dropped)
		printf("note: the trace's rings dropped %llu older events; these sums cover "
		       "the newest ones (raise --trace-events to keep more)\n",
		       (unsigned long long)s.dropped);
	return ST_EXIT_OK;
}
