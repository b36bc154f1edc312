/*
 * job.c — the job IR's own functions: freeing, sync parameter lookup, path
 * expansion and a printable dump. Plain C; no Lua here, so cli/ and ops/ can
 * use the IR without a Lua state.
 *
 * Invariant: every string and array a st_job_t points to was allocated with
 * malloc by lang/ and is owned by the job; st_job_free releases all of it.
 */
#include "lang/job.h"
#include "lang/lang.h"
#include "lang/lang_internal.h"
#include "runtime/err.h"
#include "runtime/store/rowfmt.h"

#include <glob.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void free_strv(char **v, int n)
{
	if (!v)
		return;
	for (int i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

static void source_fini(st_source_t *s)
{
	free(s->format);
	free_strv(s->paths, s->n_paths);
	free_strv(s->globs, s->n_globs);
	free(s->col_kind);
	free(s->slot_opt);
	free_strv(s->label_names, s->label_names ? s->n_labels : 0);
}

static void sync_fini(st_sync_cfg_t *c)
{
	free(c->name);
	free_strv(c->keys, c->n_params);
	free_strv(c->strs, c->n_params);
	free(c->vals);
	for (int i = 0; i < 2; i++)
		if (c->sub[i]) {
			sync_fini(c->sub[i]);
			free(c->sub[i]);
		}
}

void st_job_free(st_job_t *job)
{
	if (!job)
		return;
	free(job->name);
	free(job->file);
	source_fini(&job->train);
	source_fini(&job->eval);
	free(job->model.type);
	free(job->model.optimizer);
	free(job->model.slot_dims);
	free(job->model.slot_pooling);
	free(job->model.pooling);
	free(job->model.activation);
	free(job->model.sparse_opt.name);
	free(job->model.dense_opt.name);
	free(job->model.dense_transform);
	st_stage_cfg_t *stages[] = { &job->read, &job->pull, &job->train_stage, &job->push, &job->dump };
	for (size_t i = 0; i < sizeof(stages) / sizeof(stages[0]); i++)
		free(stages[i]->near);
	free(job->ssd_path);
	free(job->ssd_read);
	free(job->ckpt_dir);
	free(job->export_dir);
	sync_fini(&job->sync);
	for (int i = 0; job->phases && i < job->n_phases; i++) {
		free(job->phases[i].name);
		sync_fini(&job->phases[i].sync);
		source_fini(&job->phases[i].data);
	}
	free(job->phases);
	free(job->out_dir);
	free(job->metrics_path);
	free(job->gen.dir);
	free(job);
}

double st_sync_cfg_param(const st_sync_cfg_t *cfg, const char *key, double def)
{
	for (int i = 0; i < cfg->n_params; i++)
		if (cfg->keys[i] && !strcmp(cfg->keys[i], key))
			return cfg->vals[i];
	return def;
}

double st_job_sync_param(const st_job_t *job, const char *key, double def)
{
	return st_sync_cfg_param(&job->sync, key, def);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int st__job_expand(st_source_t *src, int log)
{
	int cap = 16, n = 0;
	char **paths = st_xcalloc((size_t)cap, sizeof(char *));
	for (int i = 0; i < src->n_globs; i++) {
		glob_t g;
		memset(&g, 0, sizeof(g));
		if (glob(src->globs[i], 0, NULL, &g) == 0) {
			for (size_t k = 0; k < g.gl_pathc; k++) {
				if (n == cap) {
					cap *= 2;
					char **np = realloc(paths, (size_t)cap * sizeof(char *));
					if (!np)
						st_die("out of memory expanding data paths");
					paths = np;
				}
				paths[n++] = st_xstrdup(g.gl_pathv[k]);
			}
		}
		globfree(&g);
	}
	if (n == 0) {
		free(paths);
		if (log) {
			for (int i = 0; i < src->n_globs; i++)
				st_error("data path '%s' matches no file", src->globs[i]);
		}
		return ST_ENOENT;
	}
	/* Several globs may match the same file; read it once. */
	qsort(paths, (size_t)n, sizeof(char *), cmp_str);
	int w = 0;
	for (int i = 0; i < n; i++) {
		if (w > 0 && !strcmp(paths[w - 1], paths[i]))
			free(paths[i]);
		else
			paths[w++] = paths[i];
	}
	free_strv(src->paths, src->n_paths);
	src->paths = paths;
	src->n_paths = w;
	return ST_OK;
}

int st_job_expand_paths(st_source_t *src)
{
	return st__job_expand(src, 1);
}

/* Prints a string field, or (none) for NULL, quoted so that spaces show. */
static void put_str(FILE *f, const char *key, const char *v)
{
	if (v)
		fprintf(f, "%s = \"%s\"\n", key, v);
	else
		fprintf(f, "%s = (none)\n", key);
}

static void dump_sync(FILE *f, const char *pre, const st_sync_cfg_t *c)
{
	fprintf(f, "%s = \"%s\"\n", pre, c->name ? c->name : "");
	for (int i = 0; i < c->n_params; i++) {
		if (c->strs[i])
			fprintf(f, "%s.%s = \"%s\"\n", pre, c->keys[i], c->strs[i]);
		else
			fprintf(f, "%s.%s = %g\n", pre, c->keys[i], c->vals[i]);
	}
	static const char *const sub[2] = { "sync", "async" };
	for (int i = 0; i < 2; i++)
		if (c->sub[i]) {
			char p2[96];
			snprintf(p2, sizeof p2, "%s.%s", pre, sub[i]);
			dump_sync(f, p2, c->sub[i]);
		}
}

static void dump_source(FILE *f, const char *pre, const st_source_t *s)
{
	static const char *const kinds[] = { "ignore", "label", "dense", "cat" };
	char k[64];
	snprintf(k, sizeof(k), "%s.format", pre);
	put_str(f, k, s->format);
	for (int i = 0; i < s->n_globs; i++)
		fprintf(f, "%s.globs[%d] = \"%s\"\n", pre, i + 1, s->globs[i]);
	for (int i = 0; i < s->n_paths; i++)
		fprintf(f, "%s.paths[%d] = \"%s\"\n", pre, i + 1, s->paths[i]);
	fprintf(f, "%s.on_bad_record = %s\n", pre, s->on_bad == ST_BAD_FAIL ? "fail" : "skip");
	fprintf(f, "%s.max_report = %d\n", pre, s->max_report);
	fprintf(f, "%s.max_bad_fraction = %g\n", pre, s->max_bad_fraction);
	fprintf(f, "%s.limit = %" PRId64 "\n", pre, s->limit);
	if (s->format && !strcmp(s->format, "csv")) {
		fprintf(f, "%s.sep = \"%c\"\n", pre, s->sep);
		fprintf(f, "%s.header = %s\n", pre, s->header ? "true" : "false");
		for (int i = 0; i < s->n_cols; i++)
			fprintf(f, "%s.columns[%d] = %s\n", pre, i + 1,
				s->col_kind[i] < 4 ? kinds[s->col_kind[i]] : "?");
		for (int i = 0; s->slot_opt && i < s->n_slots; i++) {
			const st_slot_opt_t *o = &s->slot_opt[i];
			if (o->list_sep)
				fprintf(f, "%s.slot[%d] = list '%c' max_len %u keep %s missing %s\n",
					pre, i, o->list_sep, o->max_len,
					o->keep_last ? "last" : "first", o->missing ? "key" : "drop");
		}
	}
	if (s->format && strcmp(s->format, "libsvm")) {
		fprintf(f, "%s.missing = %s\n", pre, s->missing ? "key" : "drop");
		fprintf(f, "%s.dense_missing = %s\n", pre,
			s->dense_indicator ? "indicator" : "zero");
	}
	fprintf(f, "%s.n_dense = %d\n", pre, s->n_dense);
	fprintf(f, "%s.n_slots = %d\n", pre, s->n_slots);
	/* Only several labels print: a one-label job's dump stays as it was. */
	for (int i = 0; s->n_labels > 1 && i < s->n_labels; i++)
		fprintf(f, "%s.labels[%d] = \"%s\"\n", pre, i + 1,
			s->label_names ? s->label_names[i] : "?");
}

static void dump_stage(FILE *f, const char *name, const st_stage_cfg_t *c)
{
	fprintf(f, "stages.%s.%s = %d\n", name, strcmp(name, "train") ? "threads" : "workers",
		c->threads);
	fprintf(f, "stages.%s.queue = %d\n", name, c->queue);
	char k[64];
	snprintf(k, sizeof(k), "stages.%s.near", name);
	put_str(f, k, c->near);
}

static void dump_optim(FILE *f, const char *pre, const st_optim_cfg_t *o)
{
	fprintf(f, "%s = \"%s\" {lr = %g, l2 = %g", pre, o->name ? o->name : "?", o->lr, o->l2);
	if (o->name && !strcmp(o->name, "adagrad"))
		fprintf(f, ", rowwise = %s, init_accum = %g, eps = %g",
			o->rowwise ? "true" : "false", o->init_accum, o->eps);
	else if (o->name && !strcmp(o->name, "adam"))
		fprintf(f, ", beta1 = %g, beta2 = %g, eps = %g", o->beta1, o->beta2, o->eps);
	else if (o->name && !strcmp(o->name, "ftrl"))
		fprintf(f, ", beta = %g, l1 = %g", o->beta, o->l1);
	fprintf(f, "}\n");
}

int st_job_dump(const st_job_t *job, FILE *f)
{
	put_str(f, "name", job->name);
	put_str(f, "file", job->file);
	fprintf(f, "seed = %" PRIu64 "\n", job->seed);
	fprintf(f, "epochs = %d\n", job->epochs);
	dump_source(f, "data.train", &job->train);
	if (job->has_eval)
		dump_source(f, "data.eval", &job->eval);
	else
		fprintf(f, "data.eval = (none)\n");
	if (job->gen.enabled) {
		put_str(f, "data.generate.dir", job->gen.dir);
		fprintf(f, "data.generate.rows = %" PRId64 "\n", job->gen.rows);
		fprintf(f, "data.generate.eval_rows = %" PRId64 "\n", job->gen.eval_rows);
		fprintf(f, "data.generate.files = %d\n", job->gen.files);
		fprintf(f, "data.generate.zipf = %g\n", job->gen.zipf);
		fprintf(f, "data.generate.vocab = %" PRIu64 "\n", job->gen.vocab);
		fprintf(f, "data.generate.seed = %" PRIu64 "\n", job->gen.seed);
		fprintf(f, "data.generate.days = %d\n", job->gen.days);
		fprintf(f, "data.generate.drift = %g\n", job->gen.drift);
		if (job->gen.multi_hot)
			fprintf(f, "data.generate.multi_hot = %d\n", job->gen.multi_hot);
		if (job->gen.labels > 1)
			fprintf(f, "data.generate.labels = %d\n", job->gen.labels);
		fprintf(f, "data.generate.used = %s\n", job->gen.used ? "true" : "false");
	} else {
		fprintf(f, "data.generate = (none)\n");
	}
	const st_model_cfg_t *m = &job->model;
	put_str(f, "model.type", m->type);
	fprintf(f, "model.emb_dim = %d\n", m->emb_dim);
	fprintf(f, "model.hidden = {");
	for (int i = 0; i < m->n_hidden; i++)
		fprintf(f, "%s%d", i ? ", " : "", m->hidden[i]);
	fprintf(f, "}\n");
	if (m->slot_dims) {
		fprintf(f, "model.slot_dims = {");
		for (int i = 0; i < m->n_slot_dims; i++)
			fprintf(f, "%s%d", i ? ", " : "", m->slot_dims[i]);
		fprintf(f, "}\n");
	}
	put_str(f, "model.pooling", m->pooling);
	if (m->slot_pooling) {
		fprintf(f, "model.slot_pooling = {");
		for (int i = 0; i < m->n_slot_pooling; i++)
			fprintf(f, "%s%s", i ? ", " : "",
				m->slot_pooling[i] == ST_POOLING_MEAN ? "mean"
				: m->slot_pooling[i] == ST_POOLING_NONE ? "none" : "sum");
		fprintf(f, "}\n");
	}
	put_str(f, "model.activation", m->activation);
	if (m->n_bottom) {
		fprintf(f, "model.bottom = {");
		for (int i = 0; i < m->n_bottom; i++)
			fprintf(f, "%s%d", i ? ", " : "", m->bottom[i]);
		fprintf(f, "}\n");
	}
	if (m->type && !strcmp(m->type, "dcnv2")) {
		fprintf(f, "model.cross_layers = %d\n", m->n_cross);
		fprintf(f, "model.cross_rank = %d\n", m->cross_rank);
	}
	/* A graph's layers, or a preset's as its Lua function built them
	 * (model.preset_layers: what st_model_create builds; not saved). */
	int graph = m->n_nodes > 0;
	int n_nodes = graph ? m->n_nodes : m->n_preset_nodes;
	const char *key = graph ? "layers" : "preset_layers";
	for (int i = 0; i < n_nodes; i++) {
		const st_model_node_t *nd = &m->nodes[i];
		fprintf(f, "model.%s[%d] = %s kind=%d in={", key, i + 1, nd->name, nd->kind);
		for (int k = 0; k < nd->n_in; k++)
			fprintf(f, "%s%d", k ? ", " : "", nd->in[k]);
		fprintf(f, "} sizes={");
		for (int k = 0; k < nd->n_sizes; k++)
			fprintf(f, "%s%d", k ? ", " : "", nd->sizes[k]);
		fprintf(f, "} a=%d b=%d", nd->a, nd->b);
		if (nd->kind == ST_NODE_ATTENTION)   /* its activation */
			fprintf(f, " c=%d", nd->c);
		fprintf(f, "\n");
	}
	if (n_nodes && m->n_heads == 0)
		fprintf(f, "model.%s = %s\n", graph ? "output" : "preset_output",
			m->nodes[graph ? m->node_out : m->preset_out].name);
	for (int i = 0; i < m->n_heads; i++)
		fprintf(f, "model.heads[%d] = label %s (%d) output %s weight %g\n", i + 1,
			m->heads[i].name, m->heads[i].label, m->nodes[m->heads[i].node].name,
			m->heads[i].weight);
	fprintf(f, "model.init_scale = %g\n", m->init_scale);
	dump_optim(f, "model.sparse_optimizer", &m->sparse_opt);
	dump_optim(f, "model.dense_optimizer", &m->dense_opt);
	fprintf(f, "model.admission.min_count = %d\n", m->admit_min_count);
	fprintf(f, "model.admission.probability = %g\n", m->admit_prob);
	fprintf(f, "model.ttl = %" PRIu64 "\n", m->ttl_steps);
	put_str(f, "model.optimizer", m->optimizer);
	fprintf(f, "model.optimizer.lr = %g\n", m->lr);
	fprintf(f, "model.optimizer.lr_dense = %g\n", m->lr_dense);
	fprintf(f, "model.optimizer.init_accum = %g\n", m->init_accum);
	fprintf(f, "model.l2 = %g\n", m->l2);
	put_str(f, "model.dense_transform", m->dense_transform);
	fprintf(f, "stages.read.batch_size = %d\n", job->batch_size);
	fprintf(f, "stages.train.minibatch = %d\n", job->minibatch);
	fprintf(f, "stages.train.on_nonfinite = %s\n",
		job->on_nonfinite == ST_NONFINITE_WARN ? "warn" : "fail");
	dump_stage(f, "read", &job->read);
	dump_stage(f, "pull", &job->pull);
	dump_stage(f, "train", &job->train_stage);
	dump_stage(f, "push", &job->push);
	dump_stage(f, "dump", &job->dump);
	fprintf(f, "storage.mem = %" PRIu64 "\n", job->mem_bytes);
	if (job->row_prec)   /* printed only when set: fp32 dumps stay as they were */
		fprintf(f, "storage.row_precision = %s\n", st_rowfmt_name(job->row_prec));
	put_str(f, "storage.ssd.path", job->ssd_path);
	fprintf(f, "storage.ssd.budget = %" PRIu64 "\n", job->ssd_bytes);
	if (job->ssd_path) {
		fprintf(f, "storage.ssd.file_size = %" PRIu64 "\n", job->ssd_file_bytes);
		fprintf(f, "storage.ssd.queue_depth = %d\n", job->ssd_queue_depth);
		put_str(f, "storage.ssd.read", job->ssd_read);
		fprintf(f, "storage.ssd.lru = %g\n", job->ssd_lru);
	}
	dump_sync(f, "sync", &job->sync);
	const st_straggler_cfg_t *sg = &job->stragglers;
	if (sg->enabled && sg->random)
		fprintf(f, "stragglers = random, probability %g, slowdown %g, seed %" PRIu64 "\n",
			sg->probability, sg->slowdown, sg->seed);
	else if (sg->enabled)
		fprintf(f, "stragglers = worker %d, slowdown %g\n", sg->worker, sg->slowdown);
	if (sg->enabled && sg->steps)
		fprintf(f, "stragglers.steps = %" PRIu64 "\n", sg->steps);
	for (int p = 0; p < job->n_phases; p++) {
		const st_phase_t *ph = &job->phases[p];
		char pre[64];
		snprintf(pre, sizeof pre, "phases[%d]", p + 1);
		fprintf(f, "%s.name = \"%s\"\n", pre, ph->name ? ph->name : "");
		fprintf(f, "%s.rows = %" PRId64 "\n", pre, ph->rows);
		if (ph->has_data) {
			snprintf(pre, sizeof pre, "phases[%d].data", p + 1);
			dump_source(f, pre, &ph->data);
		}
		snprintf(pre, sizeof pre, "phases[%d].sync", p + 1);
		dump_sync(f, pre, &ph->sync);
	}
	put_str(f, "output.dir", job->out_dir);
	put_str(f, "output.metrics", job->metrics_path);
	fprintf(f, "output.progress = %g\n", job->progress_secs);
	return ferror(f) ? ST_EIO : ST_OK;
}
