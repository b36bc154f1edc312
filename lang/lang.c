/*
 * lang.c — the Lua host: runs one job file in a sandboxed lua_State
 * (sandbox.c) and turns what it returns into the job IR (st_job_t).
 *
 * One fresh lua_State per st_job_load; nothing is shared between loads, so
 * loads on different threads are independent. A load: build the sandbox,
 * require "strata" as the global `st`, run the job file, run
 * strata.validate on its result (--set overrides, checks, defaults), and
 * convert the normalized table, whose shape validate.lua guarantees, into
 * st_job_t. Every problem becomes a diagnostic; nothing is printed here.
 */
#include "lang/lang.h"
#include "lang/lang_internal.h"
#include "runtime/err.h"
#include "runtime/batch.h"
#include "runtime/store/rowfmt.h"
#include "st_config.h"

#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#define LOAD_MEM_LIMIT ((size_t)512 << 20)

typedef struct load_ctx {
	const char *path;
	const st_load_opts_t *opts;
	st_diag_t *diag;
	st_job_t *job;              /* built by convert(); freed by caller on error */
	st__sandbox_t *sb;
} load_ctx_t;

/* ---- diagnostics ---------------------------------------------------- */

void st_diag_free(st_diag_t *d)
{
	if (!d)
		return;
	for (int i = 0; i < d->n; i++)
		free(d->msg[i]);
	d->n = 0;
}

/* Appends one message. The last slot is kept for a note that more
 * messages were dropped, so a flood of errors never goes unmentioned. */
static void diag_add(st_diag_t *d, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void diag_add(st_diag_t *d, const char *fmt, ...)
{
	if (d->n >= ST_DIAG_MAX)
		return;
	if (d->n == ST_DIAG_MAX - 1) {
		d->msg[d->n++] = st_xstrdup("too many errors; the rest are not shown");
		return;
	}
	va_list ap;
	va_start(ap, fmt);
	char *s = NULL;
	if (vasprintf(&s, fmt, ap) < 0)
		st_die("out of memory formatting a diagnostic");
	va_end(ap);
	d->msg[d->n++] = s;
}

/* ---- conversion of the normalized table ------------------------------ */

/* The getters below are the second line of defence behind validate.lua's
 * ranges: a number the C field cannot hold (a fraction for an integer,
 * 2^32 + 1 for an int, a negative count for a uint64_t, inf or NaN) raises
 * instead of being cast. A cast is how 4294967297 hidden neurons used to
 * become 1; validate.lua lets no such value through, so reaching one of
 * these errors means the validator and the IR disagree. */

/* Raises "field k = value is outside lo..hi". Stack: [value] -> raises. */
static int out_of_range(lua_State *L, const char *k, lua_Integer lo, lua_Integer hi)
{
	return luaL_error(L, "the job field '%s' = %s does not fit its C type (an integer in "
			  "%I..%I); the validator should have refused it", k,
			  luaL_tolstring(L, -1, NULL), lo, hi);
}

/* The number at the top of the stack (field k) as an integer in [lo, hi].
 * Stack: [v] -> [v], or raises. */
static int64_t to_int_in(lua_State *L, const char *k, int64_t lo, int64_t hi)
{
	int isint = 0;
	lua_Integer i = lua_tointegerx(L, -1, &isint);
	if (!isint || i < lo || i > hi)
		out_of_range(L, k, lo, hi);
	return i;
}

/* Integer field k of table t within [lo, hi]; def when absent. */
static int64_t get_int_in(lua_State *L, int t, const char *k, int64_t def, int64_t lo,
			  int64_t hi)
{
	int64_t v = def;
	if (lua_getfield(L, t, k) == LUA_TNUMBER)
		v = to_int_in(L, k, lo, hi);
	lua_pop(L, 1);
	return v;
}

static int64_t get_int(lua_State *L, int t, const char *k, int64_t def)
{
	return get_int_in(L, t, k, def, INT64_MIN, INT64_MAX);
}

static int get_i32(lua_State *L, int t, const char *k, int def)
{
	return (int)get_int_in(L, t, k, def, INT_MIN, INT_MAX);
}

/* A uint64_t field: counts, seeds and byte sizes are never negative. */
static uint64_t get_u64(lua_State *L, int t, const char *k, uint64_t def)
{
	return (uint64_t)get_int_in(L, t, k, (int64_t)def, 0, INT64_MAX);
}

static double get_num(lua_State *L, int t, const char *k, double def)
{
	double v = def;
	if (lua_getfield(L, t, k) == LUA_TNUMBER) {
		v = lua_tonumber(L, -1);
		if (!isfinite(v))
			luaL_error(L, "the job field '%s' = %s is not a finite number; the "
				   "validator should have refused it", k, luaL_tolstring(L, -1, NULL));
	}
	lua_pop(L, 1);
	return v;
}

static char *get_str(lua_State *L, int t, const char *k)
{
	lua_getfield(L, t, k);
	char *s = lua_type(L, -1) == LUA_TSTRING ? st_xstrdup(lua_tostring(L, -1)) : NULL;
	lua_pop(L, 1);
	return s;
}

static int get_bool(lua_State *L, int t, const char *k)
{
	lua_getfield(L, t, k);
	int v = lua_toboolean(L, -1);
	lua_pop(L, 1);
	return v;
}

/* Pushes field k of table t when it is a table; returns its absolute index
 * or 0 (nothing pushed). */
static int push_table(lua_State *L, int t, const char *k)
{
	if (lua_getfield(L, t, k) == LUA_TTABLE)
		return lua_gettop(L);
	lua_pop(L, 1);
	return 0;
}

static void convert_source(lua_State *L, int t, st_source_t *s)
{
	s->format = get_str(L, t, "format");
	int g = push_table(L, t, "globs");
	if (g) {
		int n = (int)lua_rawlen(L, g);
		s->globs = st_xcalloc((size_t)n + 1, sizeof(char *));
		for (int i = 1; i <= n; i++) {
			lua_rawgeti(L, g, i);
			s->globs[s->n_globs++] = st_xstrdup(lua_tostring(L, -1));
			lua_pop(L, 1);
		}
		lua_pop(L, 1);
	}
	/* Files that `gen` will make, or that the caller chose not to check,
	 * may not exist yet: keep the patterns as paths and let the runtime
	 * call st_job_expand_paths once they do. */
	if (st__job_expand(s, 0) != ST_OK) {
		s->paths = st_xcalloc((size_t)s->n_globs + 1, sizeof(char *));
		for (int i = 0; i < s->n_globs; i++)
			s->paths[i] = st_xstrdup(s->globs[i]);
		s->n_paths = s->n_globs;
	}
	s->on_bad = (int)get_int_in(L, t, "on_bad", ST_BAD_SKIP, ST_BAD_SKIP, ST_BAD_FAIL);
	s->max_report = get_i32(L, t, "max_report", 5);
	s->max_bad_fraction = get_num(L, t, "max_bad_fraction", 0.1);
	s->limit = get_int(L, t, "limit", -1);
	char *sep = get_str(L, t, "sep");
	s->sep = sep && sep[0] ? sep[0] : ',';
	free(sep);
	s->header = get_bool(L, t, "header");
	int c = push_table(L, t, "cols");
	if (c) {
		int n = (int)lua_rawlen(L, c);
		s->col_kind = st_xcalloc((size_t)n + 1, 1);
		for (int i = 1; i <= n; i++) {
			lua_rawgeti(L, c, i);
			s->col_kind[i - 1] = (uint8_t)to_int_in(L, "cols", ST_COL_IGNORE, ST_COL_CAT);
			lua_pop(L, 1);
		}
		s->n_cols = n;
		lua_pop(L, 1);
	}
	s->n_dense = get_i32(L, t, "n_dense", 0);
	s->n_slots = get_i32(L, t, "n_slots", 0);
	/* labels: the label names in order (validate.lua; absent: one label). */
	int ln = push_table(L, t, "labels");
	s->n_labels = 1;
	if (ln) {
		int n = (int)lua_rawlen(L, ln);
		if (n < 1 || n > ST_BATCH_MAX_LABELS)
			luaL_error(L, "the job's source has %d labels (1..%d)", n,
				   ST_BATCH_MAX_LABELS);
		s->n_labels = n;
		s->label_names = st_xcalloc((size_t)n + 1, sizeof(char *));
		for (int i = 1; i <= n; i++) {
			lua_rawgeti(L, ln, i);
			const char *nm = lua_tostring(L, -1);
			s->label_names[i - 1] = st_xstrdup(nm ? nm : "label");
			lua_pop(L, 1);
		}
		lua_pop(L, 1);
	}
	s->missing = (int)get_int_in(L, t, "missing", ST_MISSING_DROP, ST_MISSING_DROP,
				     ST_MISSING_KEY);
	s->dense_indicator = get_bool(L, t, "dense_indicator");
	int so = push_table(L, t, "slot_opts");
	if (so) {
		int n = (int)lua_rawlen(L, so);
		if (n != s->n_slots)
			luaL_error(L, "the job's source has %d slot options for %d slots; the "
				   "validator should have made one per slot", n, s->n_slots);
		s->slot_opt = st_xcalloc((size_t)n + 1, sizeof *s->slot_opt);
		for (int i = 1; i <= n; i++) {
			lua_rawgeti(L, so, i);
			int o = lua_gettop(L);
			st_slot_opt_t *op = &s->slot_opt[i - 1];
			char *ls = get_str(L, o, "list");
			op->list_sep = ls && ls[0] ? ls[0] : 0;
			free(ls);
			op->max_len = (uint32_t)get_int_in(L, o, "max_len", 0, 0, 65535);
			op->keep_last = (uint8_t)get_bool(L, o, "keep_last");
			op->missing = (uint8_t)get_int_in(L, o, "missing", 0, ST_MISSING_DROP,
							  ST_MISSING_KEY);
			lua_pop(L, 1);
		}
		lua_pop(L, 1);
	}
}

static void convert_stage(lua_State *L, int stages, const char *name, st_stage_cfg_t *c)
{
	int t = push_table(L, stages, name);
	c->threads = 1;
	c->queue = 4;
	if (!t)
		return;
	c->threads = get_i32(L, t, "threads", 1);
	c->queue = get_i32(L, t, "queue", 4);
	c->near = get_str(L, t, "near");
	lua_pop(L, 1);
}

/* Reads a list of at most `max` ints into out; returns the count. A longer
 * list, or an entry out of int range, raises (nothing is dropped). */
static int get_ints(lua_State *L, int t, const char *k, int *out, int max)
{
	int h = push_table(L, t, k);
	if (!h)
		return 0;
	lua_Unsigned len = lua_rawlen(L, h);
	if (len > (lua_Unsigned)max)
		luaL_error(L, "the job field '%s' lists %I entries, at most %d fit; the "
			   "validator should have refused it", k, (lua_Integer)len, max);
	int n = (int)len;
	for (int i = 1; i <= n; i++) {
		lua_rawgeti(L, h, i);
		out[i - 1] = (int)to_int_in(L, k, INT_MIN, INT_MAX);
		lua_pop(L, 1);
	}
	lua_pop(L, 1);
	return n;
}

static void convert_optim(lua_State *L, int t, const char *k, st_optim_cfg_t *o)
{
	int p = push_table(L, t, k);
	if (!p)
		return;
	o->name = get_str(L, p, "name");
	o->rowwise = get_bool(L, p, "rowwise");
	o->lr = get_num(L, p, "lr", 0.0);
	o->l2 = get_num(L, p, "l2", 0.0);
	o->eps = get_num(L, p, "eps", 0.0);
	o->beta1 = get_num(L, p, "beta1", 0.0);
	o->beta2 = get_num(L, p, "beta2", 0.0);
	o->init_accum = get_num(L, p, "init_accum", 0.0);
	o->l1 = get_num(L, p, "l1", 0.0);
	o->beta = get_num(L, p, "beta", 0.0);
	lua_pop(L, 1);
}

/* A graph model's normalized layers (validate.lua's V:graph: nodes = {
 * {kind=, name=, inputs={...}, sizes={...}, a=, b=} }, output) into mc. */
static void convert_nodes(lua_State *L, int m, st_model_cfg_t *mc)
{
	static const char *const kinds[] = { "embed", "dense", "wide", "concat", "mlp",
					     "linear", "fm", "dot", "add", "cross",
					     "attention", "mmoe", "slice" };
	int t = push_table(L, m, "nodes");
	if (!t)
		return;
	lua_Unsigned len = lua_rawlen(L, t);
	if (len > ST_MODEL_MAX_NODES)
		luaL_error(L, "the model lists %I layers, at most %d fit; the validator "
			   "should have refused it", (lua_Integer)len, ST_MODEL_MAX_NODES);
	for (int i = 1; i <= (int)len; i++) {
		lua_rawgeti(L, t, i);
		int nt = lua_gettop(L);
		st_model_node_t *nd = &mc->nodes[i - 1];
		char *kind = get_str(L, nt, "kind");
		char *name = get_str(L, nt, "name");
		nd->kind = -1;
		for (int k = 0; k < ST_NODE_NKINDS; k++)
			if (kind && !strcmp(kind, kinds[k]))
				nd->kind = k;
		if (nd->kind < 0 || !name || strlen(name) >= sizeof nd->name)
			luaL_error(L, "model layer %d: kind '%s' or name not what the "
				   "validator allows", i, kind ? kind : "?");
		strcpy(nd->name, name);
		free(kind);
		free(name);
		nd->n_in = get_ints(L, nt, "inputs", nd->in, ST_NODE_MAX_IN);
		nd->n_sizes = get_ints(L, nt, "sizes", nd->sizes, 16);
		nd->a = get_i32(L, nt, "a", 0);
		nd->b = get_i32(L, nt, "b", 0);
		nd->c = get_i32(L, nt, "c", 0);
		lua_pop(L, 1);
	}
	lua_pop(L, 1);
	mc->n_nodes = (int)len;
	mc->node_out = get_i32(L, m, "output", 0);
	/* heads = { {node=, label=, weight=, name=} } (validate.lua's V:heads) */
	int h = push_table(L, m, "heads");
	if (!h)
		return;
	int nh = (int)lua_rawlen(L, h);
	if (nh < 1 || nh > ST_MODEL_MAX_HEADS)
		luaL_error(L, "the model has %d heads (1..%d); the validator should have "
			   "refused it", nh, ST_MODEL_MAX_HEADS);
	for (int i = 1; i <= nh; i++) {
		lua_rawgeti(L, h, i);
		int ht = lua_gettop(L);
		st_model_head_t *hd = &mc->heads[i - 1];
		hd->node = get_i32(L, ht, "node", 0);
		hd->label = get_i32(L, ht, "label", 0);
		hd->weight = get_num(L, ht, "weight", 1.0);
		char *name = get_str(L, ht, "name");
		if (!name || strlen(name) >= sizeof hd->name)
			luaL_error(L, "model head %d: its label name must be 1..%d bytes", i,
				   (int)sizeof hd->name - 1);
		strcpy(hd->name, name);
		free(name);
		lua_pop(L, 1);
	}
	lua_pop(L, 1);
	mc->n_heads = nh;
}

/* The normalized model table at index m (validate.lua's V:model). */
static void convert_model(lua_State *L, int m, st_model_cfg_t *mc)
{
	mc->type = get_str(L, m, "type");
	mc->emb_dim = get_i32(L, m, "emb_dim", 1);
	int sd = push_table(L, m, "slot_dims");
	if (sd) {
		int n = (int)lua_rawlen(L, sd);
		lua_pop(L, 1);
		mc->slot_dims = st_xcalloc((size_t)n + 1, sizeof(int));
		mc->n_slot_dims = get_ints(L, m, "slot_dims", mc->slot_dims, n);
	}
	mc->pooling = get_str(L, m, "pooling");
	int sp = push_table(L, m, "slot_pooling");
	if (sp) {
		int n = (int)lua_rawlen(L, sp);
		lua_pop(L, 1);
		mc->slot_pooling = st_xcalloc((size_t)n + 1, sizeof(int));
		mc->n_slot_pooling = get_ints(L, m, "slot_pooling", mc->slot_pooling, n);
	}
	mc->n_hidden = get_ints(L, m, "hidden", mc->hidden, 16);
	mc->n_bottom = get_ints(L, m, "bottom", mc->bottom, 16);
	mc->n_cross = get_i32(L, m, "cross_layers", 0);
	mc->cross_rank = get_i32(L, m, "cross_rank", 0);
	mc->activation = get_str(L, m, "activation");
	mc->init_scale = get_num(L, m, "init_scale", 0.0);
	convert_optim(L, m, "sparse_opt", &mc->sparse_opt);
	convert_optim(L, m, "dense_opt", &mc->dense_opt);
	mc->admit_min_count = get_i32(L, m, "admit_min_count", 0);
	mc->admit_prob = get_num(L, m, "admit_prob", 1.0);
	mc->ttl_steps = get_u64(L, m, "ttl", 0);
	/* Legacy mirrors: copies, so each field is freed on its own. */
	mc->optimizer = mc->sparse_opt.name ? st_xstrdup(mc->sparse_opt.name) : NULL;
	mc->lr = mc->sparse_opt.lr;
	mc->lr_dense = mc->dense_opt.lr;
	mc->l2 = mc->sparse_opt.l2;
	mc->init_accum = mc->sparse_opt.init_accum;
	mc->dense_transform = get_str(L, m, "dense_transform");
	convert_nodes(L, m, mc);
	if (mc->type && strcmp(mc->type, "graph")) {
		/* A preset's layers (presets.lua): built, not saved (job.h). */
		mc->n_preset_nodes = mc->n_nodes;
		mc->preset_out = mc->node_out;
		mc->n_nodes = 0;
		mc->node_out = 0;
	}
}

/* One normalized policy table {name=, params={{key=, num=, str=}...},
 * sync=, async=} at index t into c (auto's sub-policies recursively). */
static void convert_sync(lua_State *L, int t, st_sync_cfg_t *c)
{
	c->name = get_str(L, t, "name");
	int p = push_table(L, t, "params");
	if (p) {
		int n = (int)lua_rawlen(L, p);
		c->keys = st_xcalloc((size_t)n + 1, sizeof(char *));
		c->vals = st_xcalloc((size_t)n + 1, sizeof(double));
		c->strs = st_xcalloc((size_t)n + 1, sizeof(char *));
		for (int i = 1; i <= n; i++) {
			lua_rawgeti(L, p, i);
			int e = lua_gettop(L);
			int k = c->n_params;
			c->keys[k] = get_str(L, e, "key");
			c->vals[k] = get_num(L, e, "num", 0);
			c->strs[k] = get_str(L, e, "str");
			c->n_params++;
			lua_pop(L, 1);
		}
		lua_pop(L, 1);
	}
	static const char *const sub[2] = { "sync", "async" };
	for (int i = 0; i < 2; i++) {
		int st = push_table(L, t, sub[i]);
		if (st) {
			c->sub[i] = st_xcalloc(1, sizeof *c->sub[i]);
			convert_sync(L, st, c->sub[i]);
			lua_pop(L, 1);
		}
	}
}

/* Fills ctx->job from the normalized table. Runs under lua_pcall (a memory
 * error longjmps out; the caller frees the partial job).
 * Stack: [ctx, norm] -> []. */
static int convert(lua_State *L)
{
	load_ctx_t *ctx = lua_touserdata(L, 1);
	const int t = 2;
	st_job_t *j = ctx->job;
	j->name = get_str(L, t, "name");
	j->file = st_xstrdup(ctx->path);
	j->seed = get_u64(L, t, "seed", 42);
	j->epochs = get_i32(L, t, "epochs", 1);

	int s = push_table(L, t, "train");
	if (s) {
		convert_source(L, s, &j->train);
		lua_pop(L, 1);
	}
	s = push_table(L, t, "eval");
	if (s) {
		j->has_eval = 1;
		convert_source(L, s, &j->eval);
		lua_pop(L, 1);
	}

	int m = push_table(L, t, "model");
	if (m) {
		convert_model(L, m, &j->model);
		lua_pop(L, 1);
	}

	j->batch_size = get_i32(L, t, "batch_size", 8192);
	j->minibatch = get_i32(L, t, "minibatch", 512);
	j->on_nonfinite = get_i32(L, t, "on_nonfinite", ST_NONFINITE_FAIL);
	int st = push_table(L, t, "stages");
	convert_stage(L, st, "read", &j->read);
	convert_stage(L, st, "pull", &j->pull);
	convert_stage(L, st, "train", &j->train_stage);
	convert_stage(L, st, "push", &j->push);
	convert_stage(L, st, "dump", &j->dump);
	if (st)
		lua_pop(L, 1);

	j->mem_bytes = get_u64(L, t, "mem_bytes", 0);
	{
		char *rp = get_str(L, t, "row_precision");
		int p = st_rowfmt_parse(rp);
		j->row_prec = p < 0 ? 0 : p;   /* the validator allows only known names */
		free(rp);
	}
	j->ssd_path = get_str(L, t, "ssd_path");
	j->ssd_bytes = get_u64(L, t, "ssd_bytes", 0);
	j->ssd_file_bytes = get_u64(L, t, "ssd_file_bytes", 4 << 20);
	j->ssd_queue_depth = get_i32(L, t, "ssd_queue_depth", 128);
	j->ssd_read = get_str(L, t, "ssd_read");
	j->ssd_lru = get_num(L, t, "ssd_lru", 0.5);

	int sy = push_table(L, t, "sync");
	if (sy) {
		convert_sync(L, sy, &j->sync);
		lua_pop(L, 1);
	}
	int sg = push_table(L, t, "stragglers");
	if (sg) {
		st_straggler_cfg_t *c = &j->stragglers;
		c->enabled = 1;
		c->random = get_bool(L, sg, "random");
		c->worker = get_i32(L, sg, "worker", -1);
		c->probability = get_num(L, sg, "probability", 0);
		c->slowdown = get_num(L, sg, "slowdown", 1);
		c->seed = get_u64(L, sg, "seed", 0);
		c->steps = get_u64(L, sg, "steps", 0);
		lua_pop(L, 1);
	}
	int ph = push_table(L, t, "phases");
	if (ph) {
		int n = (int)lua_rawlen(L, ph);
		j->phases = st_xcalloc((size_t)n + 1, sizeof *j->phases);
		for (int i = 1; i <= n; i++) {
			lua_rawgeti(L, ph, i);
			int e = lua_gettop(L);
			st_phase_t *p = &j->phases[j->n_phases++];
			p->name = get_str(L, e, "name");
			p->rows = get_int(L, e, "rows", -1);
			p->validate = get_bool(L, e, "validate");
			int d = push_table(L, e, "data");
			if (d) {
				p->has_data = 1;
				convert_source(L, d, &p->data);
				lua_pop(L, 1);
			}
			int ps = push_table(L, e, "sync");
			if (ps) {
				convert_sync(L, ps, &p->sync);
				lua_pop(L, 1);
			}
			lua_pop(L, 1);
		}
		lua_pop(L, 1);
	}

	j->out_dir = get_str(L, t, "out_dir");
	j->ckpt_dir = get_str(L, t, "ckpt_dir");
	j->ckpt_every = get_u64(L, t, "ckpt_every", 0);
	j->ckpt_secs = get_num(L, t, "ckpt_secs", 0.0);
	j->ckpt_keep = get_i32(L, t, "ckpt_keep", 3);
	j->dist_owners = get_i32(L, t, "dist_owners", 0);
	j->dist_compress = get_bool(L, t, "dist_compress");
	j->dist_timeout = get_num(L, t, "dist_timeout", 60.0);
	j->dist_prefetch = get_i32(L, t, "dist_prefetch", -1);
	j->resume = get_bool(L, t, "resume");
	j->export_dir = get_str(L, t, "export_dir");
	j->export_delta = get_bool(L, t, "export_delta");
	j->export_keep = get_i32(L, t, "export_keep", 0);
	j->metrics_path = get_str(L, t, "metrics_path");
	j->progress_secs = get_num(L, t, "progress_secs", 1.0);

	int g = push_table(L, t, "gen");
	if (g) {
		j->gen.enabled = 1;
		j->gen.used = get_bool(L, g, "used");
		j->gen.dir = get_str(L, g, "dir");
		j->gen.rows = get_int(L, g, "rows", 0);
		j->gen.eval_rows = get_int(L, g, "eval_rows", 0);
		j->gen.files = get_i32(L, g, "files", 1);
		j->gen.seed = get_u64(L, g, "seed", 0);
		j->gen.zipf = get_num(L, g, "zipf", 1.1);
		j->gen.vocab = get_u64(L, g, "vocab", 0);
		j->gen.days = get_i32(L, g, "days", 0);
		j->gen.drift = get_num(L, g, "drift", 0.1);
		j->gen.multi_hot = get_i32(L, g, "multi_hot", 0);
		j->gen.labels = get_i32(L, g, "labels", 1);
		lua_pop(L, 1);
	}
	return 0;
}

/* ---- loading ---------------------------------------------------------- */

static int file_readable(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static const char *default_stdlib(void)
{
	const char *e = getenv("STRATA_STDLIB");
	if (e && *e)
		return e;
	if (file_readable(ST_STDLIB_DIR_SRC "/strata/init.lua"))
		return ST_STDLIB_DIR_SRC;
	return ST_STDLIB_DIR_INSTALL;
}

/* Reports a failed lua_pcall of job or library code: the watchdog's message
 * when it stopped the load (the error object is then whatever the
 * unwinding ended with), the memory limit for LUA_ERRMEM (Lua's memory
 * errors carry no location; say whose memory it was), else `what` and the
 * error message at -1. Returns 0, for load_main to return. */
static int failed(load_ctx_t *ctx, lua_State *L, int rc, const char *what)
{
	if (ctx->sb->stopped)
		diag_add(ctx->diag, "%s", ctx->sb->stop_msg);
	else if (rc == LUA_ERRMEM)
		diag_add(ctx->diag, "%s: not enough memory (a job file may use at most %zu MiB)",
			 ctx->path, LOAD_MEM_LIMIT >> 20);
	else
		diag_add(ctx->diag, "%s%s", what, lua_tostring(L, -1));
	return 0;
}

/* The whole load, under lua_pcall so that a memory error anywhere becomes a
 * diagnostic. The watchdog stays on to the end (lua_close included), so
 * the conversion and the close are bounded too. Stack: [ctx] -> []. */
static int load_main(lua_State *L)
{
	load_ctx_t *ctx = lua_touserdata(L, 1);
	st_diag_t *d = ctx->diag;
	const st_load_opts_t *o = ctx->opts;

	st__sandbox_watch(L);
	st__sandbox_open(L);
	lua_pushcfunction(L, st__sandbox_msgh);
	int h = lua_gettop(L);

	/* st, both as a global and through require "strata" */
	lua_getglobal(L, "require");
	lua_pushliteral(L, "strata");
	int rc = lua_pcall(L, 1, 1, h);
	if (rc != LUA_OK) {
		char what[PATH_MAX + 64];
		snprintf(what, sizeof what, "cannot load the strata library from '%s': ",
			 ctx->sb->stdlib);
		return failed(ctx, L, rc, what);
	}
	lua_setglobal(L, "st");
	st__sandbox_lock(L);

	size_t len = 0;
	char why[128];
	char *src = st__sandbox_read_file(ctx->path, &len, why, sizeof why);
	if (!src) {
		diag_add(d, "%s: cannot read the job file: %s", ctx->path, why);
		return 0;
	}
	lua_pushlstring(L, src, len);
	int srci = lua_gettop(L);
	lua_pushfstring(L, "@%s", ctx->path);
	rc = luaL_loadbufferx(L, src, len, lua_tostring(L, -1), "t");
	free(src);
	if (rc != LUA_OK) {
		diag_add(d, "%s", lua_tostring(L, -1));
		return 0;
	}
	lua_remove(L, -2);      /* chunk name */
	lua_Debug ar;
	lua_pushvalue(L, -1);
	lua_getinfo(L, ">S", &ar);
	lua_pushstring(L, ar.short_src);
	int filei = lua_gettop(L);
	lua_pushvalue(L, filei - 1);     /* the chunk */
	rc = lua_pcall(L, 0, 1, h);
	if (rc != LUA_OK)
		return failed(ctx, L, rc, "");
	int resi = lua_gettop(L);

	/* validate.run(result, ctx) -> normalized, errors */
	lua_getglobal(L, "require");
	lua_pushliteral(L, "strata.validate");
	rc = lua_pcall(L, 1, 1, h);
	if (rc != LUA_OK)
		return failed(ctx, L, rc, "cannot load the job validator: ");
	lua_getfield(L, -1, "run");
	lua_pushvalue(L, resi);
	lua_createtable(L, 0, 4);
	lua_pushvalue(L, filei);
	lua_setfield(L, -2, "file");
	lua_pushvalue(L, srci);
	lua_setfield(L, -2, "source");
	lua_pushboolean(L, o && o->check_paths);
	lua_setfield(L, -2, "check_paths");
	lua_createtable(L, o ? o->n_sets : 0, 0);
	for (int i = 0; o && i < o->n_sets; i++) {
		lua_pushstring(L, o->sets[i]);
		lua_rawseti(L, -2, i + 1);
	}
	lua_setfield(L, -2, "sets");
	rc = lua_pcall(L, 2, 2, h);
	if (rc != LUA_OK)
		return failed(ctx, L, rc, "");
	int normi = lua_gettop(L) - 1, errsi = lua_gettop(L);
	int nerr = lua_istable(L, errsi) ? (int)lua_rawlen(L, errsi) : 0;
	for (int i = 1; i <= nerr; i++) {
		lua_rawgeti(L, errsi, i);
		diag_add(d, "%s", lua_tostring(L, -1));
		lua_pop(L, 1);
	}
	if (nerr > 0 || !lua_istable(L, normi)) {
		if (nerr == 0)
			diag_add(d, "%s: the job validator returned nothing", ctx->path);
		return 0;
	}
	ctx->job = st_xcalloc(1, sizeof(st_job_t));
	lua_pushcfunction(L, convert);
	lua_pushlightuserdata(L, ctx);
	lua_pushvalue(L, normi);
	lua_call(L, 2, 0);
	return 0;
}

int st_job_load(const char *path, const st_load_opts_t *opts, st_job_t **out,
		st_diag_t *diag)
{
	memset(diag, 0, sizeof(*diag));
	*out = NULL;

	st__sandbox_t *sb = st_xcalloc(1, sizeof(*sb));
	sb->limit = LOAD_MEM_LIMIT;
	sb->time_limit_s = opts && opts->time_limit_s > 0 ? opts->time_limit_s
		: ST__LOAD_TIME_LIMIT_S;
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	sb->deadline = (double)t0.tv_sec + 1e-9 * (double)t0.tv_nsec + sb->time_limit_s;
	sb->interrupt_gen0 = st__sandbox_interrupt_gen();
	const char *lib = opts && opts->stdlib_dir ? opts->stdlib_dir : default_stdlib();
	snprintf(sb->stdlib, sizeof(sb->stdlib), "%s", lib);
	const char *slash = strrchr(path, '/');
	if (slash)
		snprintf(sb->jobdir, sizeof(sb->jobdir), "%.*s",
			 (int)(slash == path ? 1 : slash - path), path);
	else
		snprintf(sb->jobdir, sizeof(sb->jobdir), ".");

	load_ctx_t ctx = { .path = path, .opts = opts, .diag = diag, .sb = sb };
	lua_State *L = lua_newstate(st__sandbox_alloc, sb);
	if (!L) {
		free(sb);
		diag_add(diag, "%s: not enough memory to start Lua", path);
		return ST_EJOB;
	}
	lua_pushcfunction(L, load_main);
	lua_pushlightuserdata(L, &ctx);
	if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
		if (sb->stopped)
			diag_add(diag, "%s", sb->stop_msg);
		else
			diag_add(diag, "%s: %s", path, lua_tostring(L, -1) ? lua_tostring(L, -1)
				 : "error while loading the job");
	}
	lua_close(L);
	int interrupted = sb->stopped == ST__STOP_INTERRUPT;
	free(sb);

	if (diag->n > 0 || !ctx.job) {
		st_job_free(ctx.job);
		if (diag->n == 0)
			diag_add(diag, "%s: the job could not be loaded", path);
		return interrupted ? ST_ECANCELED : ST_EJOB;
	}
	*out = ctx.job;
	return ST_OK;
}
