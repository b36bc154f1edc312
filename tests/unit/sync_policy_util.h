/* sync_policy_util.h — helpers shared by the sync policy tests
 * (test_sync_kstep.c, test_sync_shadow.c, test_sync_hybrid.c,
 * test_sync_gba.c, test_sync_baselines.c): optimizer settings, a small dnn
 * model and env to drive a policy's hooks by hand, and a learning run
 * through the trainer on generated data. Header-only (static inline
 * functions); include after <cmocka.h>. */
#ifndef ST_TEST_SYNC_POLICY_UTIL_H
#define ST_TEST_SYNC_POLICY_UTIL_H

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ops/gen/gen.h"
#include "ops/sync/sync.h"
#include "ops/sync/registry.h"
#include "ops/train/trainer.h"
#include "runtime/err.h"

static inline void util_set_opt(st_optim_cfg_t *o, const char *name, double lr)
{
	memset(o, 0, sizeof *o);
	o->name = (char *)name;
	o->lr = lr;
	o->eps = !strcmp(name, "adam") ? 1e-8 : 1e-10;
	o->beta1 = 0.9;
	o->beta2 = 0.999;
	o->init_accum = 0.1;
	o->beta = 1.0;
}

/* dnn, emb 8, MLP 64-32; AdaGrad rows, Adam dense (as test_trainer.c). */
static inline void util_make_job(st_job_t *j, const char *sync, st_sync_cfg_t *cfg)
{
	memset(j, 0, sizeof *j);
	j->seed = 1;
	j->minibatch = 256;
	j->train.n_dense = ST_GEN_N_DENSE;
	j->train.n_slots = ST_GEN_N_CAT;
	j->train_stage.threads = 1;
	j->sync = cfg ? *cfg : (st_sync_cfg_t){ .name = (char *)sync };
	j->sync.name = (char *)sync;
	st_model_cfg_t *m = &j->model;
	m->type = (char *)"dnn";
	m->emb_dim = 8;
	m->n_hidden = 2;
	m->hidden[0] = 64;
	m->hidden[1] = 32;
	m->init_scale = 0.05;
	util_set_opt(&m->sparse_opt, "adagrad", 0.05);
	m->sparse_opt.init_accum = 1e-4;
	util_set_opt(&m->dense_opt, "adam", 3e-3);
}

/* A policy driven by hand: model, optimizers and env. */
typedef struct {
	st_model_t *model;
	st_optim_t dopt, sopt;
	st_sync_cfg_t cfg;
	st_sync_env_t env;
	const st_sync_ops_t *ops;
	void *self;
} util_pol_t;

static inline int util_pol_create(util_pol_t *p, const char *name, int N,
				  const char *dense_opt, const char *sparse_opt, int n_params,
				  char **keys, double *vals, char **strs)
{
	memset(p, 0, sizeof *p);
	st_job_t job;
	util_make_job(&job, name, NULL);
	assert_int_equal(st_model_create(&p->model, &job.model, ST_GEN_N_DENSE, ST_GEN_N_CAT, 1),
			 ST_OK);
	st_optim_cfg_t oc;
	util_set_opt(&oc, dense_opt, 1e-2);
	assert_int_equal(st_optim_init(&p->dopt, &oc), ST_OK);
	util_set_opt(&oc, sparse_opt, 1.0);
	assert_int_equal(st_optim_init(&p->sopt, &oc), ST_OK);
	p->cfg = (st_sync_cfg_t){ .name = (char *)name, .n_params = n_params, .keys = keys,
				  .vals = vals, .strs = strs };
	p->env = (st_sync_env_t){ .n_workers = N, .cfg = &p->cfg, .model = p->model,
				  .params = st_model_params(p->model),
				  .nparams = st_model_nparams(p->model),
				  .dense_opt = &p->dopt, .sparse_opt = &p->sopt };
	p->ops = st_sync_find(name);
	assert_non_null(p->ops);
	int rc = p->ops->create(&p->self, &p->env);
	if (rc < 0)
		st_model_destroy(p->model);
	return rc;
}

static inline void util_pol_destroy(util_pol_t *p)
{
	p->ops->destroy(p->self);
	st_model_destroy(p->model);
}

/* Deterministic pseudo-random gradient of worker w at step s. */
static inline void util_grad(float *g, size_t n, int w, uint64_t s, float scale)
{
	uint64_t x = (uint64_t)w * 0x9e3779b97f4a7c15ull + s * 0xbf58476d1ce4e5b9ull + 1;
	for (size_t j = 0; j < n; j++) {
		x ^= x >> 12;
		x ^= x << 25;
		x ^= x >> 27;
		g[j] = scale * ((float)((x * 0x2545f4914f6cdd1dull) >> 40) / (float)(1 << 24) - 0.5f);
	}
}

/* ---- learning through the trainer ---------------------------------------- */

static inline st_batch_t *util_gen_batch(st_gen_t *gen, uint64_t first, uint32_t n,
					 int eval)
{
	st_batch_t *b;
	assert_int_equal(st_batch_create(&b, n, ST_GEN_N_DENSE, ST_GEN_N_CAT, n * 27), ST_OK);
	assert_int_equal(st_gen_fill_batch(gen, first, b, n), ST_OK);
	b->eval = eval;
	b->seq = first / n;
	return b;
}

static inline void util_run_batch(st_trainer_t *tr, st_batch_t *b)
{
	st_stage_ctx_t ctx = { .stage = "test", .thread_idx = 0, .n_threads = 1 };
	st_batch_t *out;
	assert_int_equal(st_trainer_pull_ops.process(tr, &ctx, b, &out), ST_OK);
	assert_int_equal(st_trainer_train_ops.process(tr, &ctx, b, &out), ST_OK);
	assert_int_equal(st_trainer_push_ops.process(tr, &ctx, b, &out), ST_OK);
	assert_int_equal(st_trainer_dump_ops.process(tr, &ctx, b, &out), ST_OK);
	assert_null(out);
}

/* Trains `rows` generated rows (a multiple of 4096, in batches of 4096)
 * with `workers` workers and the policy cfg; returns the progressive AUC,
 * *eval_auc the AUC on 32k held-out rows, *ss the policy's stats. */
static inline double util_learn(const st_sync_cfg_t *cfg, int workers, uint64_t rows,
				double *eval_auc, st_sync_stats_t *ss)
{
	st_gen_t *gen;
	st_gen_opts_t o = { .rows = 1, .files = 1, .seed = 1, .zipf = 1.1, .vocab = 100000 };
	assert_int_equal(st_gen_create(&gen, &o), ST_OK);
	st_job_t job;
	util_make_job(&job, cfg->name, (st_sync_cfg_t *)cfg);
	job.train_stage.threads = workers;
	st_trainer_t *tr;
	assert_int_equal(st_trainer_create(&tr, &job, NULL), ST_OK);
	for (uint64_t r = 0; r < rows; r += 4096)
		util_run_batch(tr, util_gen_batch(gen, r, 4096, 0));
	double auc, loss;
	uint64_t n;
	st_trainer_progress(tr, &auc, &loss, &n);
	assert_int_equal(n, rows);
	st_trainer_reset_eval(tr);
	for (uint64_t r = 0; r < 32768; r += 8192)
		util_run_batch(tr, util_gen_batch(gen, ST_GEN_EVAL_BASE + r, 8192, 1));
	double cal;
	uint64_t en;
	assert_int_equal(st_trainer_eval_result(tr, eval_auc, NULL, &cal, &en), ST_OK);
	st_trainer_sync_stats(tr, ss);
	print_message("%-9s x%d: progressive auc %.4f logloss %.4f, eval auc %.4f, %llu "
		      "updates, %llu steps, %llu dropped, %llu bytes 'sent'\n", cfg->name,
		      workers, auc, loss, *eval_auc, (unsigned long long)ss->updates,
		      (unsigned long long)ss->steps, (unsigned long long)ss->dropped,
		      (unsigned long long)ss->bytes);
	st_trainer_destroy(tr);
	st_gen_destroy(gen);
	return auc;
}

#endif
