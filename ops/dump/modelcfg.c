/*
 * modelcfg.c — st_model_cfg_t <-> `key=value` text (modelcfg.h).
 *
 * One table lists every field with its key, kind and place in the struct;
 * encode walks it in order, decode looks each line's key up in it. A new
 * field of st_model_cfg_t needs one row here (and the round-trip test in
 * tests/unit/test_modelcfg.c compares every field, so a missing row shows).
 *
 * The optimizer groups (sparse_opt.*, dense_opt.*) are written whole when
 * the optimizer's name is set and not at all otherwise, because the
 * trainer reads a group only when its name is set (else the legacy fields).
 *
 * Threads: none; reentrant.
 */
#include "ops/dump/modelcfg.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/dump/dumpio.h"
#include "runtime/err.h"

#define MAX_LAYERS 16
#define MAX_SLOTS 65535

enum kind { K_STR, K_INT, K_BOOL, K_U64, K_DBL, K_LAYERS, K_SLOTDIMS };

enum {
	F_OPT = 1,      /* may be absent (strings: NULL; slot_dims: NULL; ints: 0,
			   and an int that is 0 is not written, so configs of
			   the models before the field stay byte for byte) */
	F_GRP_S = 2,    /* sparse_opt group: all or none */
	F_GRP_D = 4,    /* dense_opt group: all or none */
};

static const char *const type_names[] = { "lr", "dnn", "wdl", "deepfm", "dlrm", "dcnv2",
					   "graph", NULL };
/* enum st_node_kind's names (lang/job.h), the first word of a node line. */
static const char *const node_kinds[] = { "embed", "dense", "wide", "concat", "mlp",
					  "linear", "fm", "dot", "add", "cross", "attention",
					  "mmoe", "slice", NULL };
static const char *const pool_names[] = { "sum", "mean", NULL };
static const char *const act_names[] = { "relu", "sigmoid", "none", NULL };
static const char *const transform_names[] = { "log1p", "none", NULL };
static const char *const optim_names[] = { "sgd", "adagrad", "adam", "ftrl", NULL };

typedef struct field {
	const char *key;
	int kind;
	size_t off;                 /* of the value (K_LAYERS: the int array) */
	size_t noff;                /* K_LAYERS / K_SLOTDIMS: of the count */
	int flags;
	const char *const *names;   /* K_STR: the values strata knows */
	int min;                    /* K_INT, K_LAYERS, K_SLOTDIMS entries */
} field_t;

#define OFF(f) offsetof(st_model_cfg_t, f)

#define OPT_GROUP(g, flag)                                                         \
	{ #g ".name", K_STR, OFF(g.name), 0, flag, optim_names, 0 },               \
	{ #g ".rowwise", K_BOOL, OFF(g.rowwise), 0, flag, NULL, 0 },               \
	{ #g ".lr", K_DBL, OFF(g.lr), 0, flag, NULL, 0 },                          \
	{ #g ".l2", K_DBL, OFF(g.l2), 0, flag, NULL, 0 },                          \
	{ #g ".eps", K_DBL, OFF(g.eps), 0, flag, NULL, 0 },                        \
	{ #g ".beta1", K_DBL, OFF(g.beta1), 0, flag, NULL, 0 },                    \
	{ #g ".beta2", K_DBL, OFF(g.beta2), 0, flag, NULL, 0 },                    \
	{ #g ".init_accum", K_DBL, OFF(g.init_accum), 0, flag, NULL, 0 },          \
	{ #g ".l1", K_DBL, OFF(g.l1), 0, flag, NULL, 0 },                          \
	{ #g ".beta", K_DBL, OFF(g.beta), 0, flag, NULL, 0 }

static const field_t fields[] = {
	{ "type", K_STR, OFF(type), 0, 0, type_names, 0 },
	{ "emb_dim", K_INT, OFF(emb_dim), 0, 0, NULL, 0 },
	{ "slot_dims", K_SLOTDIMS, OFF(slot_dims), OFF(n_slot_dims), F_OPT, NULL, 0 },
	{ "pooling", K_STR, OFF(pooling), 0, F_OPT, pool_names, 0 },
	/* enum st_pooling per slot: only when a list field set its own */
	{ "slot_pooling", K_SLOTDIMS, OFF(slot_pooling), OFF(n_slot_pooling), F_OPT, NULL, 0 },
	{ "hidden", K_LAYERS, OFF(hidden), OFF(n_hidden), 0, NULL, 1 },
	{ "bottom", K_LAYERS, OFF(bottom), OFF(n_bottom), 0, NULL, 1 },
	{ "n_cross", K_INT, OFF(n_cross), 0, F_OPT, NULL, 0 },
	{ "cross_rank", K_INT, OFF(cross_rank), 0, F_OPT, NULL, 0 },
	{ "activation", K_STR, OFF(activation), 0, F_OPT, act_names, 0 },
	{ "dense_transform", K_STR, OFF(dense_transform), 0, F_OPT, transform_names, 0 },
	{ "init_scale", K_DBL, OFF(init_scale), 0, 0, NULL, 0 },
	OPT_GROUP(sparse_opt, F_GRP_S),
	OPT_GROUP(dense_opt, F_GRP_D),
	{ "admit_min_count", K_INT, OFF(admit_min_count), 0, 0, NULL, 0 },
	{ "admit_prob", K_DBL, OFF(admit_prob), 0, 0, NULL, 0 },
	{ "ttl_steps", K_U64, OFF(ttl_steps), 0, 0, NULL, 0 },
	{ "optimizer", K_STR, OFF(optimizer), 0, F_OPT, optim_names, 0 },
	{ "lr", K_DBL, OFF(lr), 0, 0, NULL, 0 },
	{ "lr_dense", K_DBL, OFF(lr_dense), 0, 0, NULL, 0 },
	{ "l2", K_DBL, OFF(l2), 0, 0, NULL, 0 },
	{ "init_accum", K_DBL, OFF(init_accum), 0, 0, NULL, 0 },
	/* a graph's output node; the nodes are node.<i> lines after these */
	{ "node_out", K_INT, OFF(node_out), 0, F_OPT, NULL, 0 },
};
#define N_FIELDS (sizeof fields / sizeof fields[0])


#define AT(cfg, f, T) ((T *)((char *)(cfg) + (f)->off))
#define CAT(cfg, f, T) ((const T *)((const char *)(cfg) + (f)->off))
#define COUNT(cfg, f) ((int *)((char *)(cfg) + (f)->noff))
#define CCOUNT(cfg, f) ((const int *)((const char *)(cfg) + (f)->noff))

/* ---- encode ------------------------------------------------------------- */

typedef struct sbuf {
	char *p;
	size_t len, cap;
	int oom;
} sbuf_t;

static void sb_printf(sbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf_t *b, const char *fmt, ...)
{
	if (b->oom)
		return;
	for (;;) {
		va_list ap;
		va_start(ap, fmt);
		int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
		va_end(ap);
		if (n < 0) {
			b->oom = 1;
			return;
		}
		if (b->p && b->len + (size_t)n < b->cap) {
			b->len += (size_t)n;
			return;
		}
		size_t cap = b->cap ? b->cap : 512;
		while (cap <= b->len + (size_t)n)
			cap *= 2;
		char *np = realloc(b->p, cap);
		if (!np) {
			b->oom = 1;
			return;
		}
		b->p = np;
		b->cap = cap;
	}
}

static void put_list(sbuf_t *b, const char *key, const int *v, int n)
{
	sb_printf(b, "%s=", key);
	for (int i = 0; i < n; i++)
		sb_printf(b, "%s%d", i ? "," : "", v[i]);
	sb_printf(b, "\n");
}

/* One layer of a graph model as "node.<i>=<kind> <name>[ in=a,b][ key=v...]":
 * the keys per kind are dense log1p, mlp sizes and act, linear size, fm and
 * dot fields, cross layers and rank, attention query and keys (slots),
 * sizes and act, mmoe experts, tasks, sizes and act, slice offset and width
 * (lang/job.h's a, b and c, by name). */
static const char *const act_words[] = { "none", "relu", "sigmoid", NULL };

/* A layer name as the job language allows it (validate.lua): a Lua
 * identifier of 1..16 characters, since it prefixes tensor names. */
static int layer_name_ok(const char *s, size_t cap)
{
	size_t n = strnlen(s, cap);
	if (n == 0 || n > 16 || (*s >= '0' && *s <= '9'))
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
			return 0;
	return 1;
}

static int put_node(sbuf_t *b, int i, const st_model_node_t *nd, char *err, size_t errlen)
{
	if (nd->kind < 0 || nd->kind >= ST_NODE_NKINDS || !memchr(nd->name, 0, sizeof nd->name) ||
	    !layer_name_ok(nd->name, sizeof nd->name) || nd->n_in < 0 ||
	    nd->n_in > ST_NODE_MAX_IN || nd->n_sizes < 0 || nd->n_sizes > MAX_LAYERS ||
	    (nd->kind == ST_NODE_MLP && (nd->a < 0 || nd->a > 2)) ||
	    (nd->kind == ST_NODE_ATTENTION && (nd->c < 0 || nd->c > 2 || nd->a < 0 ||
					       nd->b < 0)) ||
	    (nd->kind == ST_NODE_MMOE && (nd->c < 0 || nd->c > 2 || nd->a < 0 || nd->b < 0)) ||
	    (nd->kind == ST_NODE_SLICE && (nd->a < 0 || nd->b < 0))) {
		st__dumpio_seterr(err, errlen, "model config: node %d is malformed", i);
		return ST_EINVAL;
	}
	sb_printf(b, "node.%d=%s %s", i, node_kinds[nd->kind], nd->name);
	if (nd->n_in) {
		sb_printf(b, " in=");
		for (int k = 0; k < nd->n_in; k++)
			sb_printf(b, "%s%d", k ? "," : "", nd->in[k]);
	}
	switch (nd->kind) {
	case ST_NODE_DENSE: sb_printf(b, " log1p=%d", nd->a); break;
	case ST_NODE_MLP:
		sb_printf(b, " sizes=");
		for (int k = 0; k < nd->n_sizes; k++)
			sb_printf(b, "%s%d", k ? "," : "", nd->sizes[k]);
		sb_printf(b, " act=%s", act_words[nd->a]);
		break;
	case ST_NODE_LINEAR: sb_printf(b, " size=%d", nd->a); break;
	case ST_NODE_FM:
	case ST_NODE_DOT: sb_printf(b, " fields=%d", nd->a); break;
	case ST_NODE_CROSS: sb_printf(b, " layers=%d rank=%d", nd->a, nd->b); break;
	case ST_NODE_ATTENTION:
		sb_printf(b, " query=%d keys=%d", nd->a, nd->b);
		if (nd->n_sizes) {
			sb_printf(b, " sizes=");
			for (int k = 0; k < nd->n_sizes; k++)
				sb_printf(b, "%s%d", k ? "," : "", nd->sizes[k]);
		}
		sb_printf(b, " act=%s", act_words[nd->c]);
		break;
	case ST_NODE_MMOE:
		sb_printf(b, " experts=%d tasks=%d sizes=", nd->a, nd->b);
		for (int k = 0; k < nd->n_sizes; k++)
			sb_printf(b, "%s%d", k ? "," : "", nd->sizes[k]);
		sb_printf(b, " act=%s", act_words[nd->c]);
		break;
	case ST_NODE_SLICE: sb_printf(b, " offset=%d width=%d", nd->a, nd->b); break;
	}
	sb_printf(b, "\n");
	return ST_OK;
}

int st_modelcfg_encode(const st_model_cfg_t *cfg, char **out, char *err, size_t errlen)
{
	*out = NULL;
	sbuf_t b = { 0 };
	for (size_t i = 0; i < N_FIELDS; i++) {
		const field_t *f = &fields[i];
		if ((f->flags & F_GRP_S) && !cfg->sparse_opt.name)
			continue;
		if ((f->flags & F_GRP_D) && !cfg->dense_opt.name)
			continue;
		switch (f->kind) {
		case K_STR: {
			const char *s = *CAT(cfg, f, char *const);
			if (!s) {
				if (f->flags & F_OPT)
					continue;
				st__dumpio_seterr(err, errlen, "model config: %s is not set", f->key);
				free(b.p);
				return ST_EINVAL;
			}
			if (strchr(s, '\n') || strchr(s, '\r')) {
				st__dumpio_seterr(err, errlen, "model config: %s has a line break", f->key);
				free(b.p);
				return ST_EINVAL;
			}
			sb_printf(&b, "%s=%s\n", f->key, s);
			break;
		}
		case K_INT:
		case K_BOOL:
			if ((f->flags & F_OPT) && *CAT(cfg, f, int) == 0)
				continue;
			sb_printf(&b, "%s=%d\n", f->key, *CAT(cfg, f, int));
			break;
		case K_U64:
			sb_printf(&b, "%s=%" PRIu64 "\n", f->key, *CAT(cfg, f, uint64_t));
			break;
		case K_DBL: {
			double v = *CAT(cfg, f, double);
			if (!isfinite(v)) {
				st__dumpio_seterr(err, errlen, "model config: %s is %g, not a finite number",
				       f->key, v);
				free(b.p);
				return ST_EINVAL;
			}
			sb_printf(&b, "%s=%.17g\n", f->key, v);
			break;
		}
		case K_LAYERS: {
			int n = *CCOUNT(cfg, f);
			if (n < 0 || n > MAX_LAYERS) {
				st__dumpio_seterr(err, errlen, "model config: %d %s layers (0..%d)", n, f->key,
				       MAX_LAYERS);
				free(b.p);
				return ST_EINVAL;
			}
			put_list(&b, f->key, CAT(cfg, f, int), n);
			break;
		}
		case K_SLOTDIMS: {
			const int *v = *CAT(cfg, f, int *const);
			int n = *CCOUNT(cfg, f);
			if (!v || n == 0)
				continue;
			if (n < 0 || n > MAX_SLOTS) {
				st__dumpio_seterr(err, errlen, "model config: %d slot dims (1..%d)", n, MAX_SLOTS);
				free(b.p);
				return ST_EINVAL;
			}
			put_list(&b, f->key, v, n);
			break;
		}
		}
	}
	if (cfg->n_nodes < 0 || cfg->n_nodes > ST_MODEL_MAX_NODES) {
		st__dumpio_seterr(err, errlen, "model config: %d nodes (0..%d)", cfg->n_nodes,
				  ST_MODEL_MAX_NODES);
		free(b.p);
		return ST_EINVAL;
	}
	for (int i = 0; i < cfg->n_nodes; i++) {
		int rc = put_node(&b, i, &cfg->nodes[i], err, errlen);
		if (rc < 0) {
			free(b.p);
			return rc;
		}
	}
	/* A multi-task graph's heads, after its nodes (none: nothing written,
	 * so every config before heads encodes as it did). */
	if (cfg->n_heads < 0 || cfg->n_heads > ST_MODEL_MAX_HEADS) {
		st__dumpio_seterr(err, errlen, "model config: %d heads (0..%d)", cfg->n_heads,
				  ST_MODEL_MAX_HEADS);
		free(b.p);
		return ST_EINVAL;
	}
	for (int i = 0; i < cfg->n_heads; i++) {
		const st_model_head_t *hd = &cfg->heads[i];
		if (hd->node < 0 || hd->node >= cfg->n_nodes || hd->label < 0 ||
		    !(hd->weight > 0) || !isfinite(hd->weight) ||
		    !memchr(hd->name, 0, sizeof hd->name) || !hd->name[0] ||
		    strpbrk(hd->name, " \n=")) {
			st__dumpio_seterr(err, errlen, "model config: head %d is malformed", i);
			free(b.p);
			return ST_EINVAL;
		}
		sb_printf(&b, "head.%d=%d %d %.17g %s\n", i, hd->node, hd->label, hd->weight,
			  hd->name);
	}
	if (b.oom) {
		free(b.p);
		st__dumpio_seterr(err, errlen, "model config: out of memory");
		return ST_ENOMEM;
	}
	*out = b.p;
	return ST_OK;
}

/* ---- decode ------------------------------------------------------------- */

/* A whole decimal integer in [lo, hi]: optional '-', digits, nothing else.
 * ST_OK, or ST_EINVAL for anything else. */
static int parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
	if (!(*s == '-' || (*s >= '0' && *s <= '9')))
		return ST_EINVAL;
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		return ST_EINVAL;
	*out = v;
	return 0;
}

static int parse_u64(const char *s, uint64_t *out)
{
	if (!(*s >= '0' && *s <= '9'))
		return ST_EINVAL;
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || *end)
		return ST_EINVAL;
	*out = v;
	return 0;
}

static int parse_dbl(const char *s, double *out)
{
	if (!*s || *s == ' ' || *s == '\t')
		return ST_EINVAL;
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno == ERANGE && (v == HUGE_VAL || v == -HUGE_VAL))
		return ST_EINVAL;
	if (end == s || *end || !isfinite(v))
		return ST_EINVAL;
	*out = v;
	return 0;
}

/* "a,b,c" (or "" for none when allow_empty) of integers >= min into a
 * malloc'ed array of up to max entries. ST_OK, ST_EINVAL (syntax/range),
 * ST_ENOMEM. */
static int parse_list(const char *s, int min, int max, int allow_empty, int **out, int *n)
{
	*out = NULL;
	*n = 0;
	if (!*s)
		return allow_empty ? ST_OK : ST_EINVAL;
	int cnt = 1;
	for (const char *p = s; *p; p++)
		cnt += *p == ',';
	if (cnt > max)
		return ST_EINVAL;
	int *v = malloc(sizeof(int) * (size_t)cnt);
	if (!v)
		return ST_ENOMEM;
	const char *p = s;
	for (int i = 0; i < cnt; i++) {
		const char *c = strchr(p, ',');
		size_t len = c ? (size_t)(c - p) : strlen(p);
		char tok[24];
		int64_t x;
		if (len == 0 || len >= sizeof tok) {
			free(v);
			return ST_EINVAL;
		}
		memcpy(tok, p, len);
		tok[len] = 0;
		if (parse_i64(tok, min, INT32_MAX, &x) < 0) {
			free(v);
			return ST_EINVAL;
		}
		v[i] = (int)x;
		p = c ? c + 1 : p + len;
	}
	*out = v;
	*n = cnt;
	return 0;
}

static int known(const char *const *names, const char *s)
{
	for (; *names; names++)
		if (!strcmp(*names, s))
			return 1;
	return 0;
}

static void names_list(const char *const *names, char *buf, size_t n)
{
	size_t o = 0;
	buf[0] = 0;
	for (; *names && o < n; names++)
		o += (size_t)snprintf(buf + o, n - o, "%s%s", o ? ", " : "", *names);
}

/* One value into cfg. ST_OK, ST_EFORMAT (message), ST_ENOMEM. */
static int set_value(st_model_cfg_t *cfg, const field_t *f, const char *v, int line,
		     char *err, size_t errlen)
{
	int64_t x;
	switch (f->kind) {
	case K_STR: {
		if (!known(f->names, v)) {
			char list[128];
			names_list(f->names, list, sizeof list);
			st__dumpio_seterr(err, errlen, "line %d: %s '%s' is not one of %s", line, f->key, v, list);
			return ST_EFORMAT;
		}
		char *s = strdup(v);
		if (!s)
			return ST_ENOMEM;
		*AT(cfg, f, char *) = s;
		return ST_OK;
	}
	case K_INT:
		if (parse_i64(v, f->min, INT32_MAX, &x) < 0) {
			st__dumpio_seterr(err, errlen, "line %d: %s '%s' is not an integer >= %d", line, f->key, v,
			       f->min);
			return ST_EFORMAT;
		}
		*AT(cfg, f, int) = (int)x;
		return ST_OK;
	case K_BOOL:
		if (strcmp(v, "0") && strcmp(v, "1")) {
			st__dumpio_seterr(err, errlen, "line %d: %s '%s' is not 0 or 1", line, f->key, v);
			return ST_EFORMAT;
		}
		*AT(cfg, f, int) = v[0] == '1';
		return ST_OK;
	case K_U64:
		if (parse_u64(v, AT(cfg, f, uint64_t)) < 0) {
			st__dumpio_seterr(err, errlen, "line %d: %s '%s' is not an unsigned 64-bit integer", line,
			       f->key, v);
			return ST_EFORMAT;
		}
		return ST_OK;
	case K_DBL:
		if (parse_dbl(v, AT(cfg, f, double)) < 0) {
			st__dumpio_seterr(err, errlen, "line %d: %s '%s' is not a finite number", line, f->key, v);
			return ST_EFORMAT;
		}
		return ST_OK;
	case K_LAYERS:
	case K_SLOTDIMS: {
		int *list, n;
		int layers = f->kind == K_LAYERS;
		int rc = parse_list(v, layers ? f->min : 0, layers ? MAX_LAYERS : MAX_SLOTS,
				    layers, &list, &n);
		if (rc == ST_ENOMEM)
			return rc;
		if (rc < 0) {
			if (layers)
				st__dumpio_seterr(err, errlen, "line %d: %s '%s' is not a comma-separated list of "
				       "at most %d layer sizes >= %d", line, f->key, v, MAX_LAYERS, f->min);
			else
				st__dumpio_seterr(err, errlen, "line %d: %s '%s' is not a comma-separated list of "
				       "1..%d dims >= 0", line, f->key, v, MAX_SLOTS);
			return ST_EFORMAT;
		}
		if (layers) {
			if (n)
				memcpy(AT(cfg, f, int), list, sizeof(int) * (size_t)n);
			free(list);
		} else {
			*AT(cfg, f, int *) = list;
		}
		*COUNT(cfg, f) = n;
		return ST_OK;
	}
	}
	return ST_EFORMAT;
}

/* Parses "<kind> <name>[ key=value...]" (put_node's line) as node <idx>,
 * which must be the next one (node.0, node.1, ... in order, each input an
 * earlier node). ST_OK or ST_EFORMAT (message). Modifies v. */
/* "head.<i>=<node> <label> <weight> <name>": head i of a multi-task graph,
 * the next one in order. */
static int parse_head(st_model_cfg_t *cfg, const char *idx, char *v, int line, char *err,
		      size_t errlen)
{
	int64_t i, node, label;
	double w;
	char *save = NULL;
	char *t[5];
	int n = 0;
	for (char *tok = strtok_r(v, " ", &save); tok && n < 5; tok = strtok_r(NULL, " ", &save))
		t[n++] = tok;
	if (parse_i64(idx, 0, ST_MODEL_MAX_HEADS - 1, &i) < 0 || i != cfg->n_heads || n != 4 ||
	    parse_i64(t[0], 0, ST_MODEL_MAX_NODES - 1, &node) < 0 ||
	    parse_i64(t[1], 0, 65535, &label) < 0 || parse_dbl(t[2], &w) < 0 || !(w > 0) ||
	    !isfinite(w) || strlen(t[3]) >= sizeof cfg->heads[0].name) {
		st__dumpio_seterr(err, errlen, "line %d: head.%.20s is not head.%d=<layer> <label> "
				  "<weight > 0> <name> (heads come in order, at most %d)", line, idx,
				  cfg->n_heads, ST_MODEL_MAX_HEADS);
		return ST_EFORMAT;
	}
	st_model_head_t *hd = &cfg->heads[i];
	memset(hd, 0, sizeof *hd);
	hd->node = (int)node;
	hd->label = (int)label;
	hd->weight = w;
	strcpy(hd->name, t[3]);
	cfg->n_heads++;
	return ST_OK;
}

static int parse_node(st_model_cfg_t *cfg, const char *idx, char *v, int line, char *err,
		      size_t errlen)
{
	int64_t i;
	if (parse_i64(idx, 0, ST_MODEL_MAX_NODES - 1, &i) < 0 || i != cfg->n_nodes) {
		st__dumpio_seterr(err, errlen, "line %d: node.%.20s is not node.%d (nodes come "
				  "in order, at most %d)", line, idx, cfg->n_nodes, ST_MODEL_MAX_NODES);
		return ST_EFORMAT;
	}
	st_model_node_t *nd = &cfg->nodes[i];
	memset(nd, 0, sizeof *nd);
	nd->kind = -1;
	int ntok = 0, bad = 0, slots = 0;   /* attention: query= and keys= seen */
	for (char *save = NULL, *t = strtok_r(v, " ", &save); t && !bad;
	     t = strtok_r(NULL, " ", &save), ntok++) {
		if (ntok == 0) {
			for (int k = 0; node_kinds[k]; k++)
				if (!strcmp(t, node_kinds[k]))
					nd->kind = k;
			bad = nd->kind < 0;
			continue;
		}
		if (ntok == 1) {
			bad = !layer_name_ok(t, strlen(t));
			if (!bad)
				strcpy(nd->name, t);
			continue;
		}
		char *e = strchr(t, '=');
		if (!e) {
			bad = 1;
			break;
		}
		*e++ = 0;
		int *list = NULL, n = 0;
		int64_t x = 0;
		if (!strcmp(t, "in") || !strcmp(t, "sizes")) {
			int in = t[0] == 'i';
			if (parse_list(e, in ? 0 : 1, in ? ST_NODE_MAX_IN : MAX_LAYERS, 0, &list,
				       &n) < 0) {
				bad = 1;
				break;
			}
			for (int k = 0; in && k < n; k++)
				bad |= list[k] >= i;
			memcpy(in ? nd->in : nd->sizes, list, sizeof(int) * (size_t)n);
			*(in ? &nd->n_in : &nd->n_sizes) = n;
			free(list);
		} else if (!strcmp(t, "act")) {
			/* mlp's activation is a, attention's and mmoe's c (lang/job.h) */
			int *act = nd->kind == ST_NODE_ATTENTION || nd->kind == ST_NODE_MMOE
					   ? &nd->c : &nd->a;
			*act = -1;
			for (int k = 0; act_words[k]; k++)
				if (!strcmp(e, act_words[k]))
					*act = k;
			bad = *act < 0;
		} else if (parse_i64(e, 0, INT32_MAX, &x) < 0) {
			bad = 1;
		} else if (!strcmp(t, "log1p") || !strcmp(t, "size") || !strcmp(t, "fields") ||
			   !strcmp(t, "layers")) {
			nd->a = (int)x;
		} else if (!strcmp(t, "rank")) {
			nd->b = (int)x;
		} else if (!strcmp(t, "keys")) {
			nd->b = (int)x;
			slots |= 2;
		} else if (!strcmp(t, "query")) {
			nd->a = (int)x;
			slots |= 1;
		} else if (!strcmp(t, nd->kind == ST_NODE_SLICE ? "offset" : "experts")) {
			nd->a = (int)x;
			slots |= 4;
		} else if (!strcmp(t, nd->kind == ST_NODE_SLICE ? "width" : "tasks")) {
			nd->b = (int)x;
			slots |= 8;
		} else {
			bad = 1;
		}
	}
	/* An attention layer reads two different slots; a line without them
	 * (as "attention a") is no layer. */
	if (nd->kind == ST_NODE_ATTENTION && (slots != 3 || nd->a == nd->b))
		bad = 1;
	/* mmoe needs experts= and tasks=, slice offset= and width=. */
	if ((nd->kind == ST_NODE_MMOE || nd->kind == ST_NODE_SLICE) && slots != 12)
		bad = 1;
	if (bad || ntok < 2) {
		st__dumpio_seterr(err, errlen, "line %d: node.%d is not '<kind> <name>[ in=i,j]"
				  "[ key=value...]' with a known kind and keys", line, (int)i);
		return ST_EFORMAT;
	}
	cfg->n_nodes++;
	return ST_OK;
}

int st_modelcfg_decode(const char *text, st_model_cfg_t *cfg, char *err, size_t errlen)
{
	memset(cfg, 0, sizeof *cfg);
	int line_of[N_FIELDS] = { 0 };
	int rc = ST_OK, line = 0;
	char *buf = NULL;
	size_t cap = 0;
	const char *p = text;
	while (*p && rc == ST_OK) {
		line++;
		const char *nl = strchr(p, '\n');
		size_t len = nl ? (size_t)(nl - p) : strlen(p);
		if (len + 1 > cap) {
			cap = len + 1 > 256 ? len + 1 : 256;
			char *nb = realloc(buf, cap);
			if (!nb) {
				rc = ST_ENOMEM;
				break;
			}
			buf = nb;
		}
		memcpy(buf, p, len);
		buf[len] = 0;
		p = nl ? nl + 1 : p + len;
		char *eq = strchr(buf, '=');
		if (!len) {
			st__dumpio_seterr(err, errlen, "line %d: empty line", line);
			rc = ST_EFORMAT;
			break;
		}
		if (!eq) {
			st__dumpio_seterr(err, errlen, "line %d: '%.60s' is not key=value", line, buf);
			rc = ST_EFORMAT;
			break;
		}
		*eq = 0;
		if (!strncmp(buf, "node.", 5)) {
			rc = parse_node(cfg, buf + 5, eq + 1, line, err, errlen);
			continue;
		}
		if (!strncmp(buf, "head.", 5)) {
			rc = parse_head(cfg, buf + 5, eq + 1, line, err, errlen);
			continue;
		}
		size_t i;
		for (i = 0; i < N_FIELDS && strcmp(fields[i].key, buf); i++)
			;
		if (i == N_FIELDS) {
			st__dumpio_seterr(err, errlen, "line %d: unknown key '%.60s'", line, buf);
			rc = ST_EFORMAT;
			break;
		}
		if (line_of[i]) {
			st__dumpio_seterr(err, errlen, "line %d: %s given twice (first on line %d)", line,
			       fields[i].key, line_of[i]);
			rc = ST_EFORMAT;
			break;
		}
		line_of[i] = line;
		rc = set_value(cfg, &fields[i], eq + 1, line, err, errlen);
	}
	free(buf);
	/* Required keys; an optimizer group is all or nothing. */
	int grp_s = 0, grp_d = 0;
	for (size_t i = 0; i < N_FIELDS && rc == ST_OK; i++) {
		grp_s |= (fields[i].flags & F_GRP_S) && line_of[i];
		grp_d |= (fields[i].flags & F_GRP_D) && line_of[i];
	}
	for (size_t i = 0; i < N_FIELDS && rc == ST_OK; i++) {
		const field_t *f = &fields[i];
		int need = !(f->flags & (F_OPT | F_GRP_S | F_GRP_D)) ||
			   ((f->flags & F_GRP_S) && grp_s) || ((f->flags & F_GRP_D) && grp_d);
		if (need && !line_of[i]) {
			if (f->flags & (F_GRP_S | F_GRP_D))
				st__dumpio_seterr(err, errlen, "%s is missing (the other %s.* keys are given)",
				       f->key, (f->flags & F_GRP_S) ? "sparse_opt" : "dense_opt");
			else
				st__dumpio_seterr(err, errlen, "%s is missing", f->key);
			rc = ST_EFORMAT;
		}
	}
	if (rc == ST_OK && cfg->type && !strcmp(cfg->type, "graph") &&
	    (cfg->n_nodes == 0 || cfg->node_out >= cfg->n_nodes)) {
		st__dumpio_seterr(err, errlen, "a graph model needs node.<i> lines up to its "
				  "node_out %d (has %d)", cfg->node_out, cfg->n_nodes);
		rc = ST_EFORMAT;
	}
	for (int h = 0; rc == ST_OK && h < cfg->n_heads; h++)
		if (cfg->heads[h].node >= cfg->n_nodes) {
			st__dumpio_seterr(err, errlen, "head.%d's layer %d is no node (has %d)", h,
					  cfg->heads[h].node, cfg->n_nodes);
			rc = ST_EFORMAT;
		}
	if (rc == ST_ENOMEM)
		st__dumpio_seterr(err, errlen, "model config: out of memory");
	if (rc < 0)
		st_modelcfg_fini(cfg);
	return rc;
}

void st_modelcfg_fini(st_model_cfg_t *cfg)
{
	if (!cfg)
		return;
	for (size_t i = 0; i < N_FIELDS; i++) {
		const field_t *f = &fields[i];
		if (f->kind == K_STR)
			free(*AT(cfg, f, char *));
		else if (f->kind == K_SLOTDIMS)
			free(*AT(cfg, f, int *));
	}
	memset(cfg, 0, sizeof *cfg);
}

int st_modelcfg_equal(const st_model_cfg_t *a, const st_model_cfg_t *b)
{
	char *ea = NULL, *eb = NULL;
	int eq = st_modelcfg_encode(a, &ea, NULL, 0) == ST_OK &&
		 st_modelcfg_encode(b, &eb, NULL, 0) == ST_OK && !strcmp(ea, eb);
	free(ea);
	free(eb);
	return eq;
}
