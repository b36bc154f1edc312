/*
 * graph.h — a pipeline of stages joined by bounded queues.
 *
 * A graph is a linear chain of stages: stage 0 is the source (it produces
 * batches), every later stage takes batches from its input queue and passes
 * them on (or consumes them). Each stage runs n_threads threads named
 * "st-<stage>-<n>", pinned by the placement given at st_graph_add_stage time.
 * Items are st_batch_t pointers; every batch is freed exactly once: by the
 * last stage that handles it, or by the engine (st_batch_destroy) when the
 * graph is canceled.
 *
 * Shutdown: when every thread of stage i has returned (source at end of data,
 * others after their input queue was closed and drained), stage i's output
 * queue is closed. On the first error (an op returns < 0) the graph records
 * "stage <name>: <message>", cancels every queue, and every thread exits;
 * st_graph_run then returns that error. No hang, no leak.
 *
 * runtime/ never includes ops/: ops give their functions through st_stage_ops_t.
 */
#ifndef ST_GRAPH_H
#define ST_GRAPH_H

#include <stdint.h>
#include <stdio.h>

#include "batch.h"

typedef struct st_graph st_graph_t;

/* Per-thread context handed to every op call. */
typedef struct st_stage_ctx {
	const char *stage;    /* stage name, e.g. "read" */
	int thread_idx;       /* 0 .. n_threads-1 within the stage */
	int n_threads;
	st_graph_t *graph;
} st_stage_ctx_t;

/*
 * The operations of one stage. `state` is the op's own object (created and
 * destroyed by the caller, outside the graph); all threads of the stage share
 * it, so the op must make its methods thread-safe for n_threads > 1.
 *
 * produce (source stages only): return 1 and *out = a batch (ownership moves
 *   to the engine), 0 at end of data, or < 0 after calling st_stage_fail.
 * process (other stages): takes ownership of `in`; return >= 0 with *out =
 *   the batch to pass downstream (may be `in`), or *out = NULL if the op
 *   consumed (freed) it; or < 0 after calling st_stage_fail (the op must have
 *   freed `in` or returned it in *out; the engine frees *out if non-NULL).
 * thread_start / thread_stop (optional): called on each stage thread before
 *   the first and after the last item.
 * finish (optional): called once, on the last thread of the stage to exit,
 *   after every thread of that stage returned; not called on cancel.
 */
typedef struct st_stage_ops {
	const char *name;
	int (*produce)(void *state, st_stage_ctx_t *ctx, st_batch_t **out);
	int (*process)(void *state, st_stage_ctx_t *ctx, st_batch_t *in,
		       st_batch_t **out);
	int (*thread_start)(void *state, st_stage_ctx_t *ctx);
	void (*thread_stop)(void *state, st_stage_ctx_t *ctx);
	int (*finish)(void *state, st_stage_ctx_t *ctx);
} st_stage_ops_t;

/* Placement of one stage's threads: cpus[i] is the OS cpu index thread i is
 * pinned to, or -1 for no pinning. Filled by st_topo_place (topo.h). */
#define ST_MAX_STAGE_THREADS 64

typedef struct st_stage_desc {
	const char *name;         /* copied */
	const st_stage_ops_t *ops;
	void *state;
	int n_threads;            /* >= 1, <= ST_MAX_STAGE_THREADS */
	int queue_cap;            /* capacity of this stage's input queue, >= 1 (ignored for stage 0) */
	int cpus[ST_MAX_STAGE_THREADS];
} st_stage_desc_t;

/* Creates an empty graph. Returns ST_OK / ST_ENOMEM. Caller destroys. */
int st_graph_create(st_graph_t **out);

/* Appends a stage (copied). The first stage added is the source. Must be
 * called before st_graph_run. ST_EINVAL for bad counts. */
int st_graph_add_stage(st_graph_t *g, const st_stage_desc_t *desc);

/* Runs the graph to completion on the calling thread's behalf (it starts the
 * stage threads and waits). Returns ST_OK, or the first error; then
 * st_graph_error() gives the message. Can be called once per graph. */
int st_graph_run(st_graph_t *g);

/* Records an error for the stage of ctx (first one wins), cancels the graph
 * and returns `code` so an op can `return st_stage_fail(ctx, ST_EIO, ...)`.
 * Thread-safe. */
int st_stage_fail(st_stage_ctx_t *ctx, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Cancels a running graph from any thread (e.g. a SIGINT handler thread):
 * queues are canceled, threads exit, st_graph_run returns ST_ECANCELED. */
void st_graph_cancel(st_graph_t *g, const char *why);

/* 1 once the graph was canceled or failed (ops with long loops poll this). */
int st_graph_canceled(const st_graph_t *g);

/* The message of the first error ("stage read: data.tsv:12: ..."), or NULL. */
const char *st_graph_error(const st_graph_t *g);

/* Metrics of one stage, readable while the graph runs (values are atomics
 * read without a lock; they may be slightly inconsistent with each other). */
typedef struct st_stage_stats {
	const char *name;
	int n_threads;
	uint64_t items;          /* batches handled */
	uint64_t busy_ns;        /* summed over threads: time inside produce/process */
	uint64_t wait_ns;        /* summed: time blocked on queues */
	int queue_depth;         /* current length of the input queue */
	int queue_cap;
} st_stage_stats_t;

int st_graph_nstages(const st_graph_t *g);
void st_graph_stage_stats(const st_graph_t *g, int i, st_stage_stats_t *out);

/* Prints the compiled graph (stages, threads, queue capacities, pinning). */
void st_graph_print(const st_graph_t *g, FILE *f);

/* Frees the graph (not the ops' states). Safe on NULL. Must not be called
 * while st_graph_run is executing. */
void st_graph_destroy(st_graph_t *g);

#endif
