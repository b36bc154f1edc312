/*
 * heads.c — several heads of a layer graph (graph.h, st_lgraph_finish_heads;
 * docs/models.md "Several labels"): which nodes are heads, and the n × H
 * logits / dlogits that the model's loss reads and writes, example-major.
 *
 * One head is the graph of every model before heads: its node's own output
 * and gradient buffers are the logits and dlogits (no copy), so one-head
 * results stay bit for bit. With H > 1 a forward copies each head node's
 * n outputs into column h of ws->logits, and a backward first copies column
 * h of ws->dlogits into head h's gradient and marks it set, for every head
 * before any node's backward: a head that also feeds another node (or
 * another head) then receives that consumer's gradient on top, through
 * graph.c's accumulate-if-set rule.
 *
 * Threads: none of its own; as graph.c (a finished graph is read-only, a
 * workspace belongs to one worker).
 */
#include "ops/nn/graph_internal.h"

#include "runtime/err.h"

int st_lgraph_finish_heads(st_lgraph_t *g, int n_heads, const int *outs, uint64_t seed)
{
	if (n_heads < 1 || n_heads > ST_LGRAPH_MAX_HEADS) {
		st_error("graph: %d heads (1..%d)", n_heads, ST_LGRAPH_MAX_HEADS);
		return ST_EINVAL;
	}
	for (int h = 0; h < n_heads; h++) {
		int out = outs[h];
		if (out < 0)
			return out;
		if (out >= g->n_nodes || g->node[out].width != 1) {
			st_error("graph: the output node %d%s must be 1 wide (is %d)", out,
				 n_heads > 1 ? " of a head" : "",
				 out < g->n_nodes ? g->node[out].width : -1);
			return ST_EINVAL;
		}
		for (int k = 0; k < h; k++)
			if (outs[k] == out) {
				st_error("graph: heads %d and %d have the same output node %d", k,
					 h, out);
				return ST_EINVAL;
			}
		g->head[h] = out;
	}
	g->n_heads = n_heads;
	g->out = outs[0];
	return st__lgraph_finish_params(g, seed);
}

int st_lgraph_nheads(const st_lgraph_t *g) { return g->n_heads; }
int st_lgraph_head(const st_lgraph_t *g, int h) { return g->head[h]; }

int st__lgraph_is_head(const st_lgraph_t *g, int node)
{
	for (int h = 0; h < g->n_heads; h++)
		if (g->head[h] == node)
			return 1;
	return 0;
}

void st__lgraph_heads_pack(const st_lgraph_t *g, st_lgraph_ws_t *ws, uint32_t n)
{
	const int H = g->n_heads;
	for (int h = 0; H > 1 && h < H; h++) {
		const float *z = ws->out[g->head[h]];
		for (uint32_t i = 0; i < n; i++)
			ws->logits[(size_t)i * H + h] = z[i];
	}
}

void st__lgraph_heads_unpack(const st_lgraph_t *g, st_lgraph_ws_t *ws, uint32_t n)
{
	const int H = g->n_heads;
	for (int h = 0; H > 1 && h < H; h++) {
		float *d = ws->grad[g->head[h]];
		for (uint32_t i = 0; i < n; i++)
			d[i] = ws->dlogits[(size_t)i * H + h];
		ws->gset[g->head[h]] = 1;
	}
}
