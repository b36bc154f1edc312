/*
 * registry.c — binds policies.def to the policies' ops. The only place
 * that looks a policy up by name.
 */
#include "ops/sync/registry.h"

#include <stdio.h>
#include <string.h>

/* Twice through policies.def: first every ops object is declared (an
 * absent one, ST_NO_OPS, as a name nobody defines or uses), then the table
 * takes their addresses (NULL for ST_NO_OPS) — constant initializers at
 * every optimization level. */
#define ST_OPS(x) x
#define ST_NO_OPS st_sync_no_ops_declared_only
#define ST_POLICY(name, local, dist, caps, lag, ckpt, summary) \
	extern const st_sync_ops_t local, dist;
#include "ops/sync/policies.def"
#undef ST_POLICY
#undef ST_OPS
#undef ST_NO_OPS

#define ST_OPS(x) (&(x))
#define ST_NO_OPS NULL
#define ST_POLICY(name, local, dist, caps, lag, ckpt, summary) \
	{ #name, local, dist, caps, lag, ckpt, summary },
const st_policy_t st_policies[] = {
#include "ops/sync/policies.def"
};
#undef ST_POLICY
#undef ST_OPS
#undef ST_NO_OPS
const size_t st_n_policies = sizeof st_policies / sizeof st_policies[0];

const st_policy_t *st_policy_find(const char *name)
{
	if (!name)
		name = "async";
	for (size_t i = 0; i < st_n_policies; i++)
		if (!strcmp(st_policies[i].name, name))
			return &st_policies[i];
	return NULL;
}

const st_sync_ops_t *st_sync_find(const char *name)
{
	const st_policy_t *p = name ? st_policy_find(name) : NULL;
	return p ? p->local : NULL;
}

const st_sync_ops_t *st_sync_find_dist(const char *name)
{
	const st_policy_t *p = name ? st_policy_find(name) : NULL;
	return p ? p->dist : NULL;
}

int st_policy_dist(const st_policy_t *p)
{
	return p && (p->dist || (p->caps & ST_POL_META));
}

void st_policy_print_table(FILE *f)
{
	static const struct { unsigned bit; const char *word; } cap[] = {
		{ ST_POL_PHASE, "phase" }, { ST_POL_THREAD, "thread" },
		{ ST_POL_AUTO_SYNC, "auto-sync" }, { ST_POL_AUTO_ASYNC, "auto-async" },
		{ ST_POL_STEP_PER_BATCH, "step-per-batch" }, { ST_POL_META, "meta" },
		{ ST_POL_DIST_CKPT, "dist-checkpoint" },
	};
	fprintf(f, "| policy | one process | across processes | capabilities | a checkpoint holds "
		"| what it does |\n|---|---|---|---|---|---|\n");
	for (size_t i = 0; i < st_n_policies; i++) {
		const st_policy_t *p = &st_policies[i];
		fprintf(f, "| `%s` | %s | %s | ", p->name,
			p->local || (p->caps & ST_POL_META) ? "yes" : "no",
			st_policy_dist(p) ? "yes" : "no");
		int k = 0;
		for (size_t c = 0; c < sizeof cap / sizeof cap[0]; c++)
			if (p->caps & cap[c].bit)
				fprintf(f, "%s%s", k++ ? ", " : "", cap[c].word);
		if (p->lag_param)
			fprintf(f, "%slag: `%s`", k++ ? ", " : "", p->lag_param);
		fprintf(f, " | %s | %s |\n", p->checkpoint, p->summary);
	}
}

const char *st_policy_names(char *buf, size_t len, unsigned all, int dist)
{
	size_t n = 0, k = 0, count = 0;
	if (len)
		buf[0] = 0;
	for (size_t i = 0; i < st_n_policies; i++)
		count += (st_policies[i].caps & all) == all && (!dist || st_policy_dist(&st_policies[i]));
	for (size_t i = 0; i < st_n_policies && n < len; i++) {
		const st_policy_t *p = &st_policies[i];
		if ((p->caps & all) != all || (dist && !st_policy_dist(p)))
			continue;
		k++;
		int w = snprintf(buf + n, len - n, "%s%s", k == 1 ? "" : k == count ? " and " : ", ",
				 p->name);
		n += w > 0 ? (size_t)w : 0;
	}
	return buf;
}
