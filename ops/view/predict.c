/*
 * predict.c — a serving export loaded into a model and tables of the
 * predictor's own, scored through a model view (predict.h).
 *
 * Loading: the export chain is listed without verification
 * (st_ckpt_list_exports, verify = 0) and then every member is verified
 * here, so that a damaged one fails the open instead of silently ending the
 * chain early; a member written by another run (st_ckpt_check_lineage)
 * fails it too. The rows of each table are merged in memory, in key order:
 * the full export's sorted rows, then each delta's sorted rows replacing or
 * adding, then its sorted deleted keys removing — three-way merges, no hash
 * table. An export several processes wrote has a file per table and rank
 * (the manifest's world, complete once verified): its files are merged the
 * same way, in rank order. Only then are the model (ops/nn, from the metadata: the same
 * preset, shape and seed the trainer built) and its tables (one per
 * distinct row width in slot order, as the trainer groups them, RAM only,
 * without optimizer state) built and filled, with the dense tensors of the
 * newest export. Memory at the peak: the tables plus two copies of one
 * table's embedding rows.
 *
 * Scoring is the scorer of the predictor's view (score.h): the shared
 * lookup never creates a row (an absent key reads as zeros) and the forward
 * pass runs in minibatches of the export's minibatch, which is what the
 * trainer's eval does; nothing is ever trained.
 *
 * Threads: open and close on the caller's thread; score on one thread at a
 * time (plus the scorer's workers when opts.threads > 1).
 */
#include "ops/view/predict.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cblas.h>

#include "ops/dump/dumpio.h"
#include "ops/dump/modelcfg.h"
#include "ops/nn/model.h"
#include "ops/view/export.h"
#include "ops/view/score.h"
#include "runtime/graph.h"
#include "runtime/err.h"

#define DEFAULT_MINIBATCH 1024

struct st_predictor {
	st_model_t *model;
	st_table_t *tables[ST_VIEW_MAX_TABLES];
	int *slot_table;              /* [n_slots] */
	st_view_t view;
	st_scorer_t *scorer;
	st_model_cfg_t cfg;
	st_predictor_info_t info;
	char *full, *last;
};

/* One table's rows while the chain is applied: keys ascending, dim floats
 * per row. */
typedef struct tab {
	uint64_t *keys;
	float *vals;
	size_t n;
	uint32_t dim;
} tab_t;

/* The strata.* metadata of one export (pointers into its safetensors). */
typedef struct meta {
	const char *format, *model, *n_dense, *n_slots, *slot_tables, *seed, *minibatch;
} meta_t;


static char *path_join(const char *dir, const char *name)
{
	size_t n = strlen(dir) + strlen(name) + 2;
	char *p = malloc(n);
	if (p)
		snprintf(p, n, "%s/%s", dir, name);
	return p;
}

/* A whole decimal number in [lo, hi]: ST_OK and *out, or ST_EINVAL. */
static int parse_num(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
	if (!s || !(*s >= '0' && *s <= '9'))
		return ST_EINVAL;
	uint64_t v = 0;
	for (; *s; s++) {
		if (*s < '0' || *s > '9' || v > (UINT64_MAX - 9) / 10)
			return ST_EINVAL;
		v = v * 10 + (uint64_t)(*s - '0');
	}
	if (v < lo || v > hi)
		return ST_EINVAL;
	*out = v;
	return ST_OK;
}

static void read_meta(const st_safetensors_t *f, meta_t *m)
{
	m->format = st_safetensors_meta(f, "strata.format");
	m->model = st_safetensors_meta(f, "strata.model");
	m->n_dense = st_safetensors_meta(f, "strata.n_dense");
	m->n_slots = st_safetensors_meta(f, "strata.n_slots");
	m->slot_tables = st_safetensors_meta(f, "strata.slot_tables");
	m->seed = st_safetensors_meta(f, "strata.seed");
	m->minibatch = st_safetensors_meta(f, "strata.minibatch");
}

static int same(const char *a, const char *b)
{
	return (!a && !b) || (a && b && !strcmp(a, b));
}

/* ---- applying the chain ----------------------------------------------------- */

static void tab_free(tab_t *t)
{
	free(t->keys);
	free(t->vals);
	memset(t, 0, sizeof *t);
}

/* The rows of a full export's table file, embedding part only. */
static int tab_load(tab_t *t, const st_rows_file_t *f)
{
	const size_t n = f->info.n_rows, dim = t->dim, stride = dim + f->info.state_dim;
	t->keys = malloc(sizeof(uint64_t) * (n ? n : 1));
	t->vals = malloc(sizeof(float) * (n ? n * dim : 1));
	if (!t->keys || !t->vals)
		return ST_ENOMEM;
	if (n)
		memcpy(t->keys, f->keys, sizeof(uint64_t) * n);
	for (size_t i = 0; i < n; i++)
		memcpy(t->vals + i * dim, f->vals + i * stride, sizeof(float) * dim);
	t->n = n;
	return ST_OK;
}

/* Applies a delta file: its rows replace or add, then its deleted keys
 * remove (a key is never both, rows.h). Both sides are sorted. */
static int tab_apply(tab_t *t, const st_rows_file_t *d)
{
	const size_t nr = d->info.n_rows, nd = d->info.n_deleted, dim = t->dim;
	const size_t stride = dim + d->info.state_dim, cap = t->n + nr;
	uint64_t *keys = malloc(sizeof(uint64_t) * (cap ? cap : 1));
	float *vals = malloc(sizeof(float) * (cap ? cap * dim : 1));
	if (!keys || !vals) {
		free(keys);
		free(vals);
		return ST_ENOMEM;
	}
	size_t i = 0, j = 0, k = 0, o = 0;
	while (i < t->n || j < nr) {
		if (j < nr && (i == t->n || d->keys[j] <= t->keys[i])) {
			if (i < t->n && t->keys[i] == d->keys[j])
				i++;   /* replaced */
			keys[o] = d->keys[j];
			memcpy(vals + o * dim, d->vals + j * stride, sizeof(float) * dim);
			o++;
			j++;
			continue;
		}
		uint64_t key = t->keys[i];
		while (k < nd && d->deleted[k] < key)
			k++;
		if (!(k < nd && d->deleted[k] == key)) {
			keys[o] = key;
			memcpy(vals + o * dim, t->vals + i * dim, sizeof(float) * dim);
			o++;
		}
		i++;
	}
	free(t->keys);
	free(t->vals);
	t->keys = keys;
	t->vals = vals;
	t->n = o;
	return ST_OK;
}

/* Only files the (verified) manifest lists are read: anything else in the
 * directory was never checked. */
static int listed(const st_manifest_t *m, const char *name, char *err, size_t errlen)
{
	if (st_manifest_find_file(m, name))
		return ST_OK;
	st__dumpio_seterr(err, errlen, "file '%s' is not listed in its manifest", name);
	return ST_ECORRUPT;
}

/* Reads dir/name (a row file of table k) and checks it is table k of the
 * right width and kind. */
static int read_table(const char *dir, const st_manifest_t *m, const char *ename,
		      const char *name, int k, uint32_t dim, int delta, st_rows_file_t **out,
		      char *err, size_t errlen)
{
	if (listed(m, name, err, errlen) < 0)
		return ST_ECORRUPT;
	char *path = path_join(dir, name);
	if (!path)
		return ST_ENOMEM;
	int rc = st_rows_read(path, out, err, errlen);
	free(path);
	if (rc < 0)
		return rc == ST_ENOENT ? ST_ECORRUPT : rc;
	const st_rows_info_t *i = &(*out)->info;
	if (i->table_id != (uint64_t)k || i->dim != dim || !(i->flags & ST_ROWS_DELTA) != !delta) {
		st__dumpio_seterr(err, errlen, "export %s: %s is table %" PRIu64 " of dim %u (%s); the model's "
		       "table %d has dim %u and the export is a %s", ename, name, i->table_id, i->dim,
		       (i->flags & ST_ROWS_DELTA) ? "delta" : "full", k, dim,
		       delta ? "delta" : "full export");
		st_rows_file_free(*out);
		*out = NULL;
		return ST_EFORMAT;
	}
	return ST_OK;
}

/* Table k of export dir (manifest m) applied to t: loaded (a full export)
 * or patched (a delta). A table is one file, table-<k>.rows, or, in an
 * export several processes wrote (m has a world), one file per rank,
 * table-<k>.rank-<r>-of-<P>.rows, each holding the rows (and, in a delta,
 * the deleted keys) its rank owns: the owners partition the keys, so the
 * files are merged in rank order. Every rank's file must be listed: the
 * verified manifest's world is complete (st_manifest_check_world), and a
 * file missing from the list is ST_ECORRUPT here too. */
static int load_table(tab_t *t, const char *dir, const st_manifest_t *m, const char *ename,
		      int k, int delta, char *err, size_t errlen)
{
	const int world = m->world_size > 0 ? (int)m->world_size : 0;
	int rc = ST_OK;
	for (int r = 0; r < (world ? world : 1) && rc >= 0; r++) {
		char name[64];
		st_export_rows_name(name, sizeof name, k, r, world);
		st_rows_file_t *rf = NULL;
		if ((rc = read_table(dir, m, ename, name, k, t->dim, delta, &rf, err, errlen)) < 0)
			break;
		rc = delta || r > 0 ? tab_apply(t, rf) : tab_load(t, rf);
		st_rows_file_free(rf);
	}
	return rc;
}

/* ---- building the model -------------------------------------------------- */

/* Parses the base export's metadata into p (cfg, shape) and slot_tables. */
static int parse_meta(st_predictor_t *p, const meta_t *m, const char *where, int **slot_tables,
		      char *err, size_t errlen)
{
	static const char *const need[] = { "strata.format", "strata.model", "strata.n_dense",
					    "strata.n_slots", "strata.slot_tables", "strata.seed" };
	const char *const have[] = { m->format, m->model, m->n_dense, m->n_slots, m->slot_tables,
				     m->seed };
	for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
		if (!have[i]) {
			st__dumpio_seterr(err, errlen, "%s: no %s in its metadata: not a strata export", where,
			       need[i]);
			return ST_EFORMAT;
		}
	if (strcmp(m->format, ST_EXPORT_FORMAT)) {
		st__dumpio_seterr(err, errlen, "%s: strata.format '%s', this strata reads format %s", where,
		       m->format, ST_EXPORT_FORMAT);
		return ST_EFORMAT;
	}
	uint64_t nd, ns, seed, mb = 0;
	if (parse_num(m->n_dense, 0, 1u << 20, &nd) < 0 || parse_num(m->n_slots, 1, 65535, &ns) < 0 ||
	    parse_num(m->seed, 0, UINT64_MAX, &seed) < 0 ||
	    (m->minibatch && parse_num(m->minibatch, 1, 1u << 24, &mb) < 0)) {
		st__dumpio_seterr(err, errlen, "%s: bad strata.n_dense '%s', n_slots '%s', seed '%s' or "
		       "minibatch '%s'", where, m->n_dense, m->n_slots, m->seed,
		       m->minibatch ? m->minibatch : "");
		return ST_EFORMAT;
	}
	char why[256];
	int rc = st_modelcfg_decode(m->model, &p->cfg, why, sizeof why);
	if (rc < 0) {
		st__dumpio_seterr(err, errlen, "%s: strata.model: %s", where,
		       rc == ST_ENOMEM ? "out of memory" : why);
		return rc;
	}
	int *st = malloc(sizeof(int) * ns);
	if (!st)
		return ST_ENOMEM;
	const char *s = m->slot_tables;
	for (uint64_t i = 0; i < ns; i++) {
		char *end;
		long v = (*s >= '0' && *s <= '9') ? strtol(s, &end, 10) : -1;
		if (v < 0 || v >= 16 || (*end != ',' && *end) || (*end == ',') != (i + 1 < ns)) {
			st__dumpio_seterr(err, errlen, "%s: strata.slot_tables '%.80s' is not %" PRIu64
			       " table indexes", where, m->slot_tables, ns);
			free(st);
			return ST_EFORMAT;
		}
		st[i] = (int)v;
		s = *end ? end + 1 : end;
	}
	p->info.n_dense = (int)nd;
	p->info.n_slots = (int)ns;
	p->info.seed = seed;
	p->info.minibatch = (int)mb;
	*slot_tables = st;
	return ST_OK;
}

/* The model and tables of the decoded metadata, and the view of them. */
static int build_model(st_predictor_t *p, const int *slot_tables, const char *where,
		       char *err, size_t errlen)
{
	const int ns = p->info.n_slots;
	if (p->cfg.slot_dims && p->cfg.n_slot_dims != ns) {
		st__dumpio_seterr(err, errlen, "%s: strata.model has %d slot dims for %d slots", where,
		       p->cfg.n_slot_dims, ns);
		return ST_EFORMAT;
	}
	/* The model exactly as the trainer built it: its preset, shape and
	 * seed (the dense parameters are then replaced by the export's). */
	int rc = st_model_create(&p->model, &p->cfg, p->info.n_dense, ns, p->info.seed);
	if (rc < 0) {
		st__dumpio_seterr(err, errlen, "%s: %s", where, rc == ST_ENOMEM ? "out of memory" :
		       "the model in its metadata cannot be built (see the message above)");
		return rc == ST_ENOMEM ? rc : ST_EFORMAT;
	}
	/* One table per distinct row width, in slot order (the trainer's
	 * grouping); the export's slot -> table map must be that one. */
	int tdim[ST_VIEW_MAX_TABLES], nt = 0, mt = 0;
	if (!(p->slot_table = malloc(sizeof(int) * (size_t)ns)))
		return ST_ENOMEM;
	for (int s = 0; s < ns; s++) {
		const int rd = st_model_row_dim(p->model, s);
		int t = 0;
		while (t < nt && tdim[t] != rd)
			t++;
		if (t == nt) {
			if (nt == ST_VIEW_MAX_TABLES) {
				st__dumpio_seterr(err, errlen, "%s: the model has more than %d distinct "
				       "slot dims", where, ST_VIEW_MAX_TABLES);
				return ST_EFORMAT;
			}
			tdim[nt++] = rd;
		}
		p->slot_table[s] = t;
		mt = slot_tables[s] + 1 > mt ? slot_tables[s] + 1 : mt;
		if (slot_tables[s] != t) {
			st__dumpio_seterr(err, errlen, "%s: strata.slot_tables puts slot %d in table %d, the "
			       "model's dims put it elsewhere", where, s, slot_tables[s]);
			return ST_EFORMAT;
		}
	}
	if (mt != nt) {
		st__dumpio_seterr(err, errlen, "%s: strata.slot_tables names %d tables, the model has %d", where,
		       mt, nt);
		return ST_EFORMAT;
	}
	/* Every row is set from the export: no initialization, no admission,
	 * no optimizer state. */
	for (int t = 0; t < nt; t++) {
		const st_table_opts_t to = { .dim = (uint32_t)tdim[t], .n_shards = 64 };
		if ((rc = st_table_create(&p->tables[t], &to)) < 0)
			return rc;
	}
	p->info.n_tables = nt;
	p->view = (st_view_t){
		.model = p->model, .cfg = &p->cfg, .n_dense = p->info.n_dense, .n_slots = ns,
		.seed = p->info.seed, .minibatch = p->info.minibatch, .n_tables = nt,
		.slot_table = p->slot_table, .name = "predict",
	};
	memcpy(p->view.tables, p->tables, sizeof p->tables);
	return ST_OK;
}

/* Creates (absent) the row of key in table t and sets its dim floats. */
static int set_row(st_table_t *t, uint64_t key, const float *row, uint32_t dim)
{
	float *r;
	int rc = st_table_get_or_create(t, key, 0, &r);
	if (rc < 0)
		return rc;
	if (!r)
		return ST_EINVAL;   /* not admitted: cannot happen, every key is */
	memcpy(r, row, sizeof(float) * dim);
	return ST_OK;
}

/* Copies every model tensor from f, by name, checking dtype and shape. */
static int load_dense(st_predictor_t *p, const st_safetensors_t *f, const char *where,
		      char *err, size_t errlen)
{
	st_model_t *m = p->model;
	float *params = st_model_params(m);
	const int n = st_model_ntensors(m);
	for (int i = 0; i < n; i++) {
		const st_tensor_info_t *ti = st_model_tensor(m, i);
		const st_safetensors_tensor_t *t = st_safetensors_find(f, ti->name);
		if (!t) {
			st__dumpio_seterr(err, errlen, "%s: no tensor '%s', which the model has", where, ti->name);
			return ST_EFORMAT;
		}
		int ok = t->dtype == ST_SAFETENSORS_F32 && t->ndim == ti->ndim;
		for (int d = 0; ok && d < ti->ndim; d++)
			ok = t->shape[d] == ti->shape[d];
		if (!ok) {
			char have[64] = "", want[64] = "";
			size_t o = 0, w = 0;
			for (int d = 0; d < t->ndim && o < sizeof have; d++)
				o += (size_t)snprintf(have + o, sizeof have - o, "%s%" PRId64, d ? "," : "",
						      t->shape[d]);
			for (int d = 0; d < ti->ndim && w < sizeof want; d++)
				w += (size_t)snprintf(want + w, sizeof want - w, "%s%d", d ? "," : "",
						      ti->shape[d]);
			st__dumpio_seterr(err, errlen, "%s: tensor '%s' is %s [%s], the model's is F32 [%s]", where,
			       ti->name, st_safetensors_dtype_name(t->dtype), have, want);
			return ST_EFORMAT;
		}
		memcpy(params + ti->offset, t->f32, sizeof(float) * t->numel);
	}
	if (f->n_tensors != n) {
		for (int i = 0; i < f->n_tensors; i++)
			if (st_model_find_tensor(m, f->tensors[i].name) < 0) {
				st__dumpio_seterr(err, errlen, "%s: tensor '%s' is not part of the model", where,
				       f->tensors[i].name);
				break;
			}
		return ST_EFORMAT;
	}
	return ST_OK;
}

/* ---- open ----------------------------------------------------------------- */

static int read_dense(const char *dir, const st_manifest_t *m, st_safetensors_t **f,
		      char *err, size_t errlen)
{
	if (listed(m, ST_EXPORT_DENSE, err, errlen) < 0)
		return ST_ECORRUPT;
	char *path = path_join(dir, ST_EXPORT_DENSE);
	if (!path)
		return ST_ENOMEM;
	int rc = st_safetensors_read(path, f, err, errlen);
	free(path);
	return rc == ST_ENOENT ? ST_ECORRUPT : rc;
}

int st_predictor_open(st_predictor_t **out, const char *root, const st_predictor_opts_t *opts,
		      char *err, size_t errlen)
{
	*out = NULL;
	struct stat sb;
	if (stat(root, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
		st__dumpio_seterr(err, errlen, "%s: %s", root, stat(root, &sb) != 0 ? "no such directory"
									  : "not a directory");
		return ST_ENOENT;
	}
	st_ckpt_entry_t *e = NULL;
	size_t ne = 0;
	int rc = st_ckpt_list_exports(root, 0, &e, &ne, opts ? opts->msg : NULL,
				      opts ? opts->arg : NULL, err, errlen);
	if (rc < 0)
		return rc;
	if (!ne) {
		st__dumpio_seterr(err, errlen, "%s: no complete full export (a directory export-<seq>-full "
		       "with its manifest.yaml)", root);
		return ST_ENOENT;
	}
	st_predictor_t *p = calloc(1, sizeof *p);
	tab_t *tabs = NULL;
	int *slot_tables = NULL;
	st_safetensors_t *base = NULL, *dense = NULL;
	st_rows_file_t *rf = NULL;
	st_manifest_t **mans = calloc(ne, sizeof *mans);
	char why[1024] = "";
	if (!p || !mans) {
		rc = ST_ENOMEM;
		goto out;
	}
	p->info.threads = opts && opts->threads > 0 ? opts->threads : 1;

	/* Every member of the chain must verify (no silent fallback). */
	for (size_t i = 0; i < ne; i++) {
		if ((rc = st_ckpt_verify(e[i].path, &mans[i], why, sizeof why)) < 0) {
			st__dumpio_seterr(err, errlen, "export %s: %s", e[i].name, why);
			if (rc != ST_ENOMEM && rc != ST_EIO)
				rc = ST_ECORRUPT;
			goto out;
		}
		p->info.seq = mans[i]->seq;
		p->info.step = mans[i]->step;
	}
	p->info.n_exports = ne;
	if (!(p->full = strdup(e[0].name)) || !(p->last = strdup(e[ne - 1].name))) {
		rc = ST_ENOMEM;
		goto out;
	}

	/* The model, from the full export's metadata. */
	char where[600];
	snprintf(where, sizeof where, "export %s: %s", e[0].name, ST_EXPORT_DENSE);
	if ((rc = read_dense(e[0].path, mans[0], &base, why, sizeof why)) < 0) {
		st__dumpio_seterr(err, errlen, "export %s: %s", e[0].name, why);
		goto out;
	}
	meta_t bm;
	read_meta(base, &bm);
	if ((rc = parse_meta(p, &bm, where, &slot_tables, err, errlen)) < 0)
		goto out;
	if (opts && opts->minibatch > 0)
		p->info.minibatch = opts->minibatch;
	else if (!p->info.minibatch)
		p->info.minibatch = DEFAULT_MINIBATCH;
	if ((rc = build_model(p, slot_tables, where, err, errlen)) < 0)
		goto out;

	/* Rows: the full export's, then each delta applied. */
	const int nt = p->info.n_tables;
	if (!(tabs = calloc((size_t)nt, sizeof *tabs))) {
		rc = ST_ENOMEM;
		goto out;
	}
	for (int k = 0; k < nt; k++)
		tabs[k].dim = (uint32_t)st_view_row_dim(&p->view, k);
	for (size_t i = 0; i < ne; i++) {
		const int delta = e[i].kind == ST_MANIFEST_EXPORT_DELTA;
		if (i > 0) {
			/* A delta must come from the same model. */
			st_safetensors_free(dense);
			dense = NULL;
			if ((rc = read_dense(e[i].path, mans[i], &dense, why, sizeof why)) < 0) {
				st__dumpio_seterr(err, errlen, "export %s: %s", e[i].name, why);
				goto out;
			}
			meta_t dm;
			read_meta(dense, &dm);
			const char *diff = !same(dm.format, bm.format) ? "strata.format"
					   : !same(dm.model, bm.model) ? "strata.model"
					   : !same(dm.n_dense, bm.n_dense) ? "strata.n_dense"
					   : !same(dm.n_slots, bm.n_slots) ? "strata.n_slots"
					   : !same(dm.slot_tables, bm.slot_tables) ? "strata.slot_tables"
					   : NULL;
			if (diff) {
				st__dumpio_seterr(err, errlen, "export %s: its %s differs from that of %s: the "
				       "exports come from different models", e[i].name, diff, e[0].name);
				rc = ST_EFORMAT;
				goto out;
			}
			/* The same model is not enough: a delta of another run
			 * (two runs sharing the directory) holds rows computed
			 * against another full export. Refused, never skipped. */
			if ((rc = st_ckpt_check_lineage(mans[0], e[0].name, mans[i], e[i].name, err,
							errlen)) < 0)
				goto out;
		}
		for (int k = 0; k < nt; k++) {
			why[0] = 0;
			rc = load_table(&tabs[k], e[i].path, mans[i], e[i].name, k, delta, why,
					sizeof why);
			if (rc == ST_EFORMAT)
				st__dumpio_seterr(err, errlen, "%s", why);
			else if (rc < 0 && rc != ST_ENOMEM)
				st__dumpio_seterr(err, errlen, "export %s: %s", e[i].name, why);
			if (rc < 0)
				goto out;
		}
	}

	/* Dense tensors of the newest export, rows into the tables. */
	snprintf(where, sizeof where, "export %s: %s", e[ne - 1].name, ST_EXPORT_DENSE);
	if ((rc = load_dense(p, dense ? dense : base, where, err, errlen)) < 0)
		goto out;
	for (int k = 0; k < nt; k++) {
		for (size_t i = 0; i < tabs[k].n && rc >= 0; i++)
			if ((rc = set_row(p->tables[k], tabs[k].keys[i],
					  tabs[k].vals + i * tabs[k].dim, tabs[k].dim)) < 0 &&
			    rc != ST_ENOMEM)
				st__dumpio_seterr(err, errlen, "%s: table %d: cannot load the row of key %016" PRIx64
				       ": %s", root, k, tabs[k].keys[i], st_strerror(rc));
		p->info.rows += tabs[k].n;
		tab_free(&tabs[k]);
		if (rc < 0)
			goto out;
	}
	/* strata runs its own scoring workers; OpenBLAS's pool on top of
	 * them oversubscribes the cores, as in training (ops/train), and the
	 * trainer's eval ran on one BLAS thread. An explicit
	 * OPENBLAS_NUM_THREADS from the user wins. */
	if (!getenv("OPENBLAS_NUM_THREADS"))
		openblas_set_num_threads(1);
	if ((rc = st_scorer_create(&p->scorer, &p->view, p->info.threads, p->info.minibatch)) < 0) {
		if (rc == ST_EINVAL)
			st__dumpio_seterr(err, errlen, "%s: %d scoring threads (1..%d)", root,
					  p->info.threads, ST_MAX_STAGE_THREADS);
		else if (rc != ST_ENOMEM)
			st__dumpio_seterr(err, errlen, "%s: cannot start the scoring threads: %s",
					  root, st_strerror(rc));
		goto out;
	}
	p->info.model = &p->cfg;
	p->info.full = p->full;
	p->info.last = p->last;
out:
	if (rc == ST_ENOMEM)
		st__dumpio_seterr(err, errlen, "%s: out of memory loading the exports", root);
	for (int k = 0; tabs && p && k < p->info.n_tables; k++)
		tab_free(&tabs[k]);
	free(tabs);
	free(slot_tables);
	st_rows_file_free(rf);
	st_safetensors_free(base);
	st_safetensors_free(dense);
	for (size_t i = 0; mans && i < ne; i++)
		st_manifest_free(mans[i]);
	free(mans);
	st_ckpt_entries_free(e, ne);
	if (rc < 0) {
		st_predictor_close(p);
		return rc;
	}
	*out = p;
	return ST_OK;
}

/* ---- scoring ----------------------------------------------------------------- */

int st_predictor_score(st_predictor_t *p, st_batch_t *b, float *out)
{
	if ((int)b->n_dense != p->info.n_dense || (int)b->n_slots > p->info.n_slots)
		return ST_EINVAL;
	/* one score per head and example, whatever labels the data has */
	const uint32_t H = (uint32_t)st_model_nheads(p->model);
	int rc = st_batch_reserve_pred(b, H);
	if (rc < 0)
		return rc;
	b->eval = 1;
	rc = st_scorer_run(p->scorer, b);
	if (rc < 0)
		return rc;
	if (out && b->n)
		memcpy(out, b->pred, sizeof(float) * b->n * H);
	return ST_OK;
}

void st_predictor_info(const st_predictor_t *p, st_predictor_info_t *info)
{
	*info = p->info;
}

const st_view_t *st_predictor_view(const st_predictor_t *p)
{
	return &p->view;
}

void st_predictor_close(st_predictor_t *p)
{
	if (!p)
		return;
	st_scorer_destroy(p->scorer);
	for (int k = 0; k < ST_VIEW_MAX_TABLES; k++)
		st_table_destroy(p->tables[k]);
	st_model_destroy(p->model);
	free(p->slot_table);
	st_modelcfg_fini(&p->cfg);
	free(p->full);
	free(p->last);
	free(p);
}
