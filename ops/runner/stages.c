/*
 * stages.c — the stage graph read -> pull -> train -> push -> dump of a run
 * and its placement on the machine's topology (shared with `strata plan`).
 *
 * Placement: each stage's threads go where the job's `near` asks; the read
 * stage on "auto" goes near the disk holding its data when the topology
 * knows that disk. Threads are pinned only when every stage thread can own
 * a core, and never in a multi-process job (every rank would take the same
 * cores).
 *
 * With an observer's batch_end, the dump stage is wrapped so that each
 * training batch is reported after the trainer's dump op handled it (its
 * interval checkpoint, if due, is written by then). Without one the graph
 * is exactly the trainer's stages.
 */
#include "ops/runner/runner_internal.h"
#include "runtime/err.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

const char *const st_runner_stage_names[ST_RUNNER_NSTAGES] = {
	"read", "pull", "train", "push", "dump",
};

const st_stage_cfg_t *st_runner_stage_cfg(const st_job_t *job, int i)
{
	const st_stage_cfg_t *c[ST_RUNNER_NSTAGES] = {
		&job->read, &job->pull, &job->train_stage, &job->push, &job->dump,
	};
	return c[i];
}

/* Name of the block device (whole disk, e.g. "nvme0n1") holding `path`,
 * from /sys/dev/block/MAJ:MIN; ST_OK, or ST_ENOENT if unknown (tmpfs, overlay). */
static int disk_of(const char *path, char *name, size_t size)
{
	struct stat sb;
	char link[128], real[PATH_MAX];
	if (stat(path, &sb) < 0)
		return ST_ENOENT;
	snprintf(link, sizeof link, "/sys/dev/block/%u:%u", major(sb.st_dev), minor(sb.st_dev));
	if (!realpath(link, real))
		return ST_ENOENT;
	char part[PATH_MAX + 16];
	snprintf(part, sizeof part, "%s/partition", real);
	if (access(part, F_OK) == 0) {  /* a partition: its parent is the disk */
		char *slash = strrchr(real, '/');
		if (!slash)
			return ST_ENOENT;
		*slash = 0;
	}
	const char *base = strrchr(real, '/');
	base = base ? base + 1 : real;
	if (!*base || strlen(base) >= size)
		return ST_ENOENT;
	snprintf(name, size, "%s", base);
	return ST_OK;
}

int st_runner_place(const st_topo_t *topo, const st_job_t *job, st_place_req_t *reqs,
		    int detect_data_disk)
{
	/* reqs[0].near may point here until the next call on this thread. */
	static _Thread_local char disk[64];
	for (int i = 0; i < ST_RUNNER_NSTAGES; i++) {
		const st_stage_cfg_t *c = st_runner_stage_cfg(job, i);
		memset(&reqs[i], 0, sizeof reqs[i]);
		reqs[i].stage = st_runner_stage_names[i];
		reqs[i].near = c->near;
		reqs[i].n_threads = c->threads;
	}
	/* The read stage, left on "auto", goes near the disk its data is on
	 * when the topology knows that disk (kstep paper, Section 3.1: I/O work
	 * on the cores co-located with the device). */
	const char *rn = reqs[0].near;
	if (detect_data_disk && (!rn || !strcmp(rn, "auto")) && job->train.n_paths > 0 &&
	    disk_of(job->train.paths[0], disk, sizeof disk) == 0 &&
	    st_topo_has_device(topo, disk))
		reqs[0].near = disk;
	return st_topo_place(topo, reqs, ST_RUNNER_NSTAGES);
}

void st__runner_placement(st_runner_t *r)
{
	const st_job_t *job = r->job;
	r->pin = r->opts.pin;
	if (st_topo_load(&r->topo, r->opts.topology) < 0 ||
	    st_runner_place(r->topo, job, r->place, r->opts.topology == NULL) < 0) {
		st__runner_say(r, ST_LOG_WARN, "topology unavailable: stage threads are not pinned");
		r->pin = 0;
	} else if (r->pin) {
		/* Pinning pays when every stage thread can own a core. With more
		 * threads than cores, fixed placement stacks busy threads (train
		 * workers, pull) on one core while another idles, and lockstep
		 * workers then wait on the slowest: measured on 2 cores, the
		 * standard DNN ran at 45.8k ex/s pinned and 81.3k unpinned
		 * (docs/benchmarks.md). Then the kernel balances them instead. */
		int total = 0;
		for (int i = 0; i < ST_RUNNER_NSTAGES; i++)
			total += st_runner_stage_cfg(job, i)->threads;
		if (total > st_topo_ncores(r->topo)) {
			st__runner_say(r, ST_LOG_INFO, "%d stage threads on %d cores: threads are not "
				       "pinned (the kernel balances them)", total,
				       st_topo_ncores(r->topo));
			r->pin = 0;
		}
	}
	if (r->dist && r->pin) {
		/* Every rank would place its threads on the same cores: leave
		 * the ranks' threads to the kernel (rank-aware placement is
		 * future work, docs/distributed.md). */
		st__runner_say(r, ST_LOG_INFO, "multi-process job: stage threads are not pinned");
		r->pin = 0;
	}
}

/* The dump stage with batch_end (state: the runner): the trainer's dump op,
 * then the report. */
static int tap_process(void *state, st_stage_ctx_t *ctx, st_batch_t *b, st_batch_t **out)
{
	st_runner_t *r = state;
	const uint64_t seq = b->seq;
	const int eval = b->eval;
	/* The trainer's dump op frees b. */
	int rc = st_trainer_dump_ops.process(r->model, ctx, b, out);
	if (rc >= 0 && !eval)
		r->obs->batch_end(r->ud, seq);
	return rc;
}

static const st_stage_ops_t tap_ops = {
	.name = "dump",
	.process = tap_process,
};

/* Builds the graph; dump_ops/dump_state replace the trainer's dump stage
 * when not NULL. */
static int build(st_graph_t **out, const st_job_t *job, const st_place_req_t *place, int pin,
		 void *read_state, void *trainer, const st_stage_ops_t *dump_ops,
		 void *dump_state)
{
	const st_stage_ops_t *ops[ST_RUNNER_NSTAGES] = {
		&st_read_stage_ops, &st_trainer_pull_ops, &st_trainer_train_ops,
		&st_trainer_push_ops, dump_ops ? dump_ops : &st_trainer_dump_ops,
	};
	st_graph_t *g = NULL;
	int rc = st_graph_create(&g);
	if (rc < 0)
		return rc;
	for (int i = 0; i < ST_RUNNER_NSTAGES; i++) {
		const st_stage_cfg_t *c = st_runner_stage_cfg(job, i);
		st_stage_desc_t d;
		memset(&d, 0, sizeof d);
		d.name = st_runner_stage_names[i];
		d.ops = ops[i];
		d.state = i == 0 ? read_state : (i == 4 && dump_state) ? dump_state : trainer;
		/* The train stage is one graph thread; it runs the job's
		 * workers itself (trainer.h). */
		d.n_threads = i == ST__RUNNER_TRAIN_STAGE ? 1 : c->threads;
		d.queue_cap = c->queue;
		for (int t = 0; t < ST_MAX_STAGE_THREADS; t++)
			d.cpus[t] = (pin && t < c->threads && t < 64) ? place[i].cpus[t] : -1;
		if ((rc = st_graph_add_stage(g, &d)) < 0) {
			st_graph_destroy(g);
			return rc;
		}
	}
	*out = g;
	return ST_OK;
}

int st_runner_build_graph(st_graph_t **out, const st_job_t *job, const st_place_req_t *place,
			  int pin, void *read_state, void *trainer)
{
	return build(out, job, place, pin, read_state, trainer, NULL, NULL);
}

int st__runner_graph(st_runner_t *r, st_graph_t **out, void *rs)
{
	const int tap = r->obs && r->obs->batch_end;
	return build(out, r->job, r->place, r->pin, rs, r->model, tap ? &tap_ops : NULL,
		     tap ? r : NULL);
}
