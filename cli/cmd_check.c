/*
 * cmd_check.c — `strata check` (load and validate a job, nothing runs) and
 * `strata plan` (the stage graph of a job and where its threads would go on
 * a topology: the job runner's own graph and placement, ops/runner/runner.h).
 */
#include "cli.h"
#include "lang/lang.h"
#include "ops/runner/runner.h"
#include "runtime/err.h"
#include "runtime/graph.h"
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
