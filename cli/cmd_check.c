/*
 * cmd_check.c — `strata check` (load and validate a job, nothing runs) and
 * `strata plan` (the stage graph of a job and where its threads would go on
 * a topology: the job runner's own graph and placement, ops/runner/runner.h).
 */
#include "cli.h"
#include "lang/lang.h"
#include "ops/nn/graph.h"
#include "ops/nn/model.h"
#include "ops/runner/runner.h"
#include "ops/train/rowplan.h"
#include "runtime/err.h"
#include "runtime/graph.h"
#include "runtime/store/rowfmt.h"
#include "runtime/topo.h"

#include <stdlib.h>
#include <string.h>

int st_cmd_check(int argc, char **argv)
{
	st_cli_opts_t o;
	int ec = st_cli_parse(argc, argv, "check", "job,set,verbose", &o);
	if (ec) {
		free(o.sets);
		return ec;
	}
	st_job_t *job = NULL;
	ec = st_cli_load_job(&o, 1, &job);
	if (ec == ST_EXIT_OK) {
		if (o.verbose)
			st_job_dump(job, stdout);
		printf("%s: ok (job '%s')\n", o.job_path, job->name);
	}
	st_job_free(job);
	free(o.sets);
	return ec;
}

static void print_dot(const st_job_t *job, const st_place_req_t *place)
{
	printf("digraph \"%s\" {\n  rankdir=LR;\n  node [shape=box];\n", job->name);
	for (int i = 0; i < ST_RUNNER_NSTAGES; i++) {
		const st_stage_cfg_t *c = st_runner_stage_cfg(job, i);
		printf("  %s [label=\"%s\\n%d thread%s\\npackage %d%s%s\"];\n",
		       st_runner_stage_names[i], st_runner_stage_names[i], c->threads,
		       c->threads == 1 ? "" : "s", place[i].package,
		       place[i].device[0] ? "\\nnear " : "", place[i].device);
		if (i > 0)
			printf("  %s -> %s [label=\"queue %d\"];\n", st_runner_stage_names[i - 1],
			       st_runner_stage_names[i], c->queue);
	}
	printf("}\n");
}

/* The dense model as its layer graph: one line per node with its output
 * width, parameters and FLOPs per example (forward + backward). A graph
 * model's nodes carry their layer names; an mlp of no sizes or a cross of
 * no layers makes no node (it is its input). */
static void print_model(const st_job_t *job)
{
	const st_model_cfg_t *mc = &job->model;
	st_model_t *m = NULL;
	if (st_model_create(&m, mc, job->train.n_dense, job->train.n_slots, job->seed) < 0) {
		printf("\nmodel %s: cannot be built (see above)\n", mc->type);
		return;
	}
	const st_lgraph_t *g = st_model_graph(m);
	int n = st_lgraph_nnodes(g);
	const char *name[64] = { 0 };
	int id[ST_MODEL_MAX_NODES], next = 0;
	/* A preset's layers come from its Lua function (lang/job.h). */
	int n_nodes = mc->n_nodes ? mc->n_nodes : mc->n_preset_nodes;
	for (int i = 0; i < n_nodes; i++) {
		const st_model_node_t *nd = &mc->nodes[i];
		if ((nd->kind == ST_NODE_MLP && nd->n_sizes == 0) ||
		    (nd->kind == ST_NODE_CROSS && nd->a == 0)) {
			id[i] = id[nd->in[0]];
			continue;
		}
		id[i] = next++;
		if (id[i] < 64)
			name[id[i]] = nd->name;
	}
	printf("\nmodel %s: %d nodes, %zu dense parameters, %.4g MFLOP per example "
	       "(forward + backward)\n", mc->type, n, st_model_nparams(m),
	       st_model_flops_per_example(m) / 1e6);
	int per_key = 0;
	printf("  %3s  %-16s %-9s %-20s %8s %12s %14s\n", "#", "layer", "kind", "inputs",
	       "width", "parameters", "FLOPs/example");
	for (int i = 0; i < n; i++) {
		st_lgraph_node_info_t in;
		if (st_lgraph_node_info(g, i, &in) < 0)
			break;
		char ins[64] = "-";
		size_t o = 0;
		for (int k = 0; k < in.n_in && o < sizeof ins; k++)
			if (in.in[k] < 64 && name[in.in[k]])
				o += (size_t)snprintf(ins + o, sizeof ins - o, "%s%s", k ? "," : "",
						      name[in.in[k]]);
			else
				o += (size_t)snprintf(ins + o, sizeof ins - o, "%s%d", k ? "," : "",
						      in.in[k]);
		printf("  %3d  %-16s %-9s %-20s %8d %12zu %14.0f%s\n", i,
		       i < 64 && name[i] ? name[i] : "", in.kind, ins, in.width, in.nparams,
		       in.flops, strcmp(in.kind, "attention") ? "" : " *");
		per_key |= !strcmp(in.kind, "attention");
	}
	/* An attention layer's cost grows with the example's sequence, which
	 * the plan does not know: its FLOPs (and the total's share of them)
	 * are for one key. */
	if (per_key)
		printf("  * per key of the attended sequence: an example costs this times "
		       "its sequence's length\n");
	/* Several heads: which layer's logit learns which label. */
	for (int h = 0; h < mc->n_heads; h++)
		printf("  head %d: label '%s' (label %d of the data) <- layer '%s', loss weight %g\n",
		       h, mc->heads[h].name, mc->heads[h].label + 1, mc->nodes[mc->heads[h].node].name,
		       mc->heads[h].weight);
	st_model_destroy(m);
}

/* Millions of rows, or thousands under a million. */
static void print_rows(double r)
{
	if (r >= 1e6)
		printf(" %11.2fM", r / 1e6);
	else
		printf(" %11.1fk", r / 1e3);
}

/* Bytes per row and rows per GiB of each embedding table, in fp32 and in
 * the job's storage.row_precision (ops/train/rowplan.h). */
static void print_rows_plan(const st_job_t *job)
{
	st_rowplan_t p[16];
	int n = 0;
	if (st_rowplan(job, p, 16, &n) < 0) {
		printf("\nembedding rows: cannot be sized (see above)\n");
		return;
	}
	const double gib = 1024.0 * 1024.0 * 1024.0;
	printf("\nembedding rows (storage.row_precision = %s; optimizer state fp32; RAM "
	       "measured at %d rows):\n", st_rowfmt_name(job->row_prec), ST_ROWPLAN_SAMPLE);
	printf("  %5s %5s %5s %5s  %-9s %8s %10s %12s %10s %12s\n", "table", "dim", "state",
	       "slots", "precision", "values B", "RAM B/row", "rows/GiB RAM", "SSD B/row",
	       "rows/GiB SSD");
	for (int t = 0; t < n; t++)
		for (int i = 0; i < (p[t].prec == ST_ROW_FP32 ? 1 : 2); i++) {
			if (i == 0)
				printf("  %5d %5d %5d %5d", t, p[t].dim, p[t].state_dim, p[t].slots);
			else
				printf("  %5s %5s %5s %5s", "", "", "", "");
			printf("  %-9s %8u %10.1f", st_rowfmt_name(i ? p[t].prec : ST_ROW_FP32),
			       p[t].payload[i], p[t].ram_bytes[i]);
			print_rows(gib / p[t].ram_bytes[i]);
			printf(" %10u", p[t].ssd_bytes[i]);
			print_rows(gib / p[t].ssd_bytes[i]);
			printf("\n");
		}
}

int st_cmd_plan(int argc, char **argv)
{
	st_cli_opts_t o;
	int ec = st_cli_parse(argc, argv, "plan", "job,set,topology,dot,verbose", &o);
	if (ec) {
		free(o.sets);
		return ec;
	}
	st_job_t *job = NULL;
	st_topo_t *topo = NULL;
	st_graph_t *g = NULL;
	st_place_req_t place[ST_RUNNER_NSTAGES];
	if ((ec = st_cli_load_job(&o, 0, &job)) != ST_EXIT_OK)
		goto out;
	ec = ST_EXIT_USAGE;
	int rc = st_topo_load(&topo, o.topology);
	if (rc < 0) {
		fprintf(stderr, "strata plan: cannot load topology %s: %s\n",
			o.topology ? o.topology : "of this machine", st_strerror(rc));
		goto out;
	}
	if (st_runner_place(topo, job, place, o.topology == NULL) < 0) {
		fprintf(stderr, "strata plan: placement failed (see above)\n");
		goto out;
	}
	if (o.dot) {
		print_dot(job, place);
		ec = ST_EXIT_OK;
		goto out;
	}
	printf("job %s (%s)\n\n", job->name, job->file);
	printf("topology%s%s: %d package%s, %d cores\n", o.topology ? " " : "",
	       o.topology ? o.topology : " (this machine)", st_topo_npackages(topo),
	       st_topo_npackages(topo) == 1 ? "" : "s", st_topo_ncores(topo));
	if (o.verbose)
		st_topo_print(topo, stdout);
	if (st_runner_build_graph(&g, job, place, 1, NULL, NULL) < 0) {
		fprintf(stderr, "strata plan: cannot compile the graph\n");
		goto out;
	}
	printf("\ngraph:\n");
	st_graph_print(g, stdout);
	print_model(job);
	print_rows_plan(job);
	printf("\nplacement:\n");
	for (int i = 0; i < ST_RUNNER_NSTAGES; i++) {
		printf("  %-6s package %d%s%s%s  cpus", st_runner_stage_names[i], place[i].package,
		       place[i].device[0] ? "  near " : "", place[i].device,
		       place[i].near && strcmp(place[i].near, "auto") ? "" : "");
		for (int t = 0; t < place[i].n_threads && t < 64; t++)
			printf(" %d", place[i].cpus[t]);
		printf("\n");
	}
	int total = 0;
	for (int i = 0; i < ST_RUNNER_NSTAGES; i++)
		total += st_runner_stage_cfg(job, i)->threads;
	if (total > st_topo_ncores(topo))
		printf("\nnote: %d stage threads on %d cores: `strata run` leaves them unpinned "
		       "and the kernel balances them\n", total, st_topo_ncores(topo));
	ec = ST_EXIT_OK;
out:
	st_graph_destroy(g);
	st_topo_destroy(topo);
	st_job_free(job);
	free(o.sets);
	return ec;
}
