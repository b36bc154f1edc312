/*
 * dist_glue.c — the trainer in a multi-process job (docs/distributed.md):
 * attaching the sharded store (ops/dist) and the multi-process twin of the
 * job's policy, the end of training, and the model digest used to compare
 * runs.
 */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "ops/dist/dist.h"
#include "ops/sync/registry.h"
#include "ops/train/trainer_internal.h"
#include "runtime/err.h"

/* st.sync.auto across processes switches between a lockstep policy, whose
 * steps every rank takes together, and one whose ranks go at their own pace
 * (trainer.c, "auto across processes", has the protocol). kstep and shadow
 * keep replicas that a switch would have to merge, and hop_bw's steps are
 * a rank's own; they are not offered. */
int st_trainer_auto_dist_ok(const st_sync_cfg_t *cfg)
{
	static const char *const defaults[2] = { "allreduce", "async" };
	static const unsigned need[2] = { ST_POL_AUTO_SYNC, ST_POL_AUTO_ASYNC };
	for (int i = 0; i < 2; i++) {
		const st_sync_cfg_t *s = cfg->sub[i];
		const char *name = !s ? defaults[i] : s->name ? s->name : "async";
		const st_policy_t *p = st_policy_find(name);
		if (!p || !p->dist || !(p->caps & need[i])) {
			char sync[128], async[128];
			st_error("st.sync.auto across processes switches between a synchronous "
				 "policy (%s) and an asynchronous one (%s); its %s policy is '%s'",
				 st_policy_names(sync, sizeof sync, ST_POL_AUTO_SYNC, 1),
				 st_policy_names(async, sizeof async, ST_POL_AUTO_ASYNC, 1),
				 i ? "async" : "sync", name);
			return 0;
		}
	}
	return 1;
}

int st_trainer_attach_dist(st_trainer_t *tr, st_net_t *net, const st_job_t *job)
{
	const st_sync_cfg_t *scfg = &job->sync;
	const char *name = scfg->name ? scfg->name : "async";
	if (!st_policy_dist(st_policy_find(name))) {
		char names[256];
		st_error("sync policy '%s' does not run across processes yet (%s do)", name,
			 st_policy_names(names, sizeof names, 0, 1));
		return ST_EJOB;
	}
	if (tr->n_tables > ST_DIST_MAX_TABLES)
		return ST_EJOB;
	st_dist_cfg_t c = {
		.net = net, .owners = job->dist_owners, .compress = job->dist_compress,
		.n_tables = tr->n_tables, .dense_state = tr->dstate, .dense_t = &tr->dt,
		.n_workers = tr->env.n_workers,
		.params = { .model = tr->env.model, .params = tr->env.params,
			    .nparams = tr->env.nparams, .dense_opt = tr->env.dense_opt,
			    .sparse_opt = tr->env.sparse_opt },
	};
	for (int k = 0; k < tr->n_tables; k++) {
		c.tables[k] = tr->tables[k];
		c.dim[k] = (uint32_t)tr->tdim[k];
	}
	int rc = st_dist_create(&tr->dist, &c);
	if (rc < 0)
		return rc;
	tr->env.dist = tr->dist;
	rc = st_trainer_set_policy(tr, scfg);
	if (rc < 0) {
		st_dist_destroy(tr->dist);
		tr->dist = NULL;
		tr->env.dist = NULL;
	}
	return rc;
}

int st_trainer_dist_finish(st_trainer_t *tr, int *lost)
{
	int rc = st_dist_finish(tr->dist, lost);
	/* Asynchronous policies keep the dense parameters on rank 0 (the
	 * workers trained on copies): the final ones, for eval and digests. */
	if (rc >= 0 && !tr->dist_lockstep && st_dist_rank(tr->dist) != 0) {
		uint64_t v;
		rc = st_dist_dense(tr->dist, 0, NULL, tr->env.params, &v);
	}
	/* st.sync.auto: what it did, and a digest of this rank's final dense
	 * parameters — the same on every rank, whatever phase came last. */
	if (rc >= 0 && tr->auto_on)
		st_info("st.sync.auto: %llu switches, ended under %s; dense parameters digest "
			"%016llx", (unsigned long long)tr->switches, tr->sops->name,
			(unsigned long long)XXH3_64bits(tr->env.params,
							sizeof(float) * tr->env.nparams));
	return rc;
}

int st_trainer_dist_phase(st_trainer_t *tr)
{
	return st_dist_sync_begin(tr->dist);
}

void st_trainer_dist_pass(st_trainer_t *tr, int eval)
{
	tr->dist_drained = eval;
}

int st_trainer_dist_leave(st_trainer_t *tr, int *lost)
{
	return st_dist_finish(tr->dist, lost);
}

uint64_t st_trainer_digest(st_trainer_t *tr, int with_dense, uint64_t *rows)
{
	uint64_t h = st_dist_rows_digest(tr->tables, tr->n_tables, rows);
	if (with_dense)
		h ^= XXH3_64bits(tr->env.params, sizeof(float) * tr->env.nparams);
	return h;
}

void st_trainer_dist_stats(const st_trainer_t *tr, st_dist_stats_t *out)
{
	st_dist_stats(tr->dist, out);
}
