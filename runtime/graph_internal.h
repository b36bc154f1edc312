/*
 * graph_internal.h — test hooks of the graph engine (not a public API).
 */
#ifndef ST_GRAPH_INTERNAL_H
#define ST_GRAPH_INTERNAL_H

#include "graph.h"

/* Replaces st_batch_destroy for every batch the engine itself frees (drained
 * queues at shutdown, the last stage's *out, a batch whose push failed, *out
 * of a failing op). Tests use it to count frees; fn must free the batch.
 * Call before st_graph_run. */
void st__graph_set_free_hook(st_graph_t *g, void (*fn)(st_batch_t *b));

#endif
