/*
 * export.c — a model view written as a serving export (export.h): dense
 * tensors with the model in their metadata, one row file per table with the
 * embedding part of each row, through the crash-safe directory protocol of
 * ckpt.h.
 *
 * Rows are copied into a st_rows_writer_t (rows.h) while the tables are
 * walked (st_table_foreach_all holds one shard lock at a time; the callback
 * only copies), then sorted and written. Memory: one copy of the exported
 * rows (dim floats + 24 bytes each) at a time, table by table.
 *
 * Threads: the caller's thread only; nothing may change the view's model or
 * tables meanwhile (the rows' floats and metadata are read without
 * synchronization).
 *
 * Lineage: before anything is written, the exports already in the root
 * numbered from the one this export follows (seq - 1 for a delta, seq for a
 * full export) must all be of this run (its job and lineage). Another run
 * writing into the same root would otherwise interleave its exports with
 * these (a delta of one run numbered after a full export of the other, or
 * one replacing the other's directory of the same name), and a loader would
 * apply one run's delta to the other's model; the export fails instead,
 * naming the other run (loaders refuse such a chain too, ckpt.h).
 */
#include "ops/view/export.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "ops/dump/ckpt.h"
#include "ops/dump/modelcfg.h"
#include "ops/nn/model.h"
#include "ops/dump/dumpio.h"
#include "runtime/err.h"
#include "runtime/store/rowfmt.h"
#include "runtime/store/table.h"


/* ---- a set of keys, for the one pass over an SSD tier ------------------- */

typedef struct keyset {
	uint64_t *keys;
	uint8_t *state;    /* 0 empty, 1 wanted, 2 found */
	size_t cap, n;
} keyset_t;

static inline uint64_t mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

static int keyset_init(keyset_t *s, size_t n)
{
	size_t cap = 16;
	while (cap < 2 * n)
		cap *= 2;
	s->keys = malloc(sizeof(uint64_t) * cap);
	s->state = calloc(cap, 1);
	s->cap = cap;
	s->n = 0;
	return s->keys && s->state ? ST_OK : ST_ENOMEM;
}

static void keyset_fini(keyset_t *s)
{
	free(s->keys);
	free(s->state);
	memset(s, 0, sizeof *s);
}

/* Adds a key (the caller adds distinct keys, at most the n of init). */
static void keyset_add(keyset_t *s, uint64_t key)
{
	size_t i = mix(key) & (s->cap - 1);
	while (s->state[i])
		i = (i + 1) & (s->cap - 1);
	s->keys[i] = key;
	s->state[i] = 1;
	s->n++;
}

/* 1 if key is wanted and not found yet (it is found now), else 0. */
static int keyset_take(keyset_t *s, uint64_t key)
{
	size_t i = mix(key) & (s->cap - 1);
	while (s->state[i]) {
		if (s->keys[i] == key) {
			if (s->state[i] != 1)
				return 0;
			s->state[i] = 2;
			return 1;
		}
		i = (i + 1) & (s->cap - 1);
	}
	return 0;
}

/* ---- rows --------------------------------------------------------------- */

typedef struct collect {
	st_rows_writer_t *w;
	const st_table_t *t;
	keyset_t *want;    /* NULL: every row */
	int rc;
	float *buf;        /* [dim]: a compact row decoded */
} collect_t;

/* Adds a table row to w. Row files are fp32 (docs/storage.md): a compact
 * table's row (storage.row_precision) is decoded into buf ([dim] floats of
 * w's info; exact, every 16-bit value is an fp32 one). */
static int write_row(st_rows_writer_t *w, const st_table_t *t, uint64_t key, const float *row,
		     float *buf)
{
	const st_table_meta_t *m = st_table_meta(t, (float *)(uintptr_t)row);
	const int prec = st_table_row_prec(t);
	if (prec != ST_ROW_FP32) {
		const st_rows_info_t *i = st_rows_writer_info(w);
		st_rowfmt_decode(prec, row, buf, i->dim);
		/* The state (fp32) follows the compact words; exports carry
		 * none, a writer with state_dim > 0 gets it copied. */
		memcpy(buf + i->dim, row + st_rowfmt_words(prec, i->dim),
		       sizeof(float) * i->state_dim);
		row = buf;
	}
	return st_rows_writer_add(w, key, m->last_step, m->freq, row);
}

/* st_table_foreach_all callback: runs with a shard lock held, so it only
 * copies (the builder's allocation is the one call that may fail). */
static void add_row(uint64_t key, float *row, void *arg)
{
	collect_t *c = arg;
	if (c->rc < 0 || (c->want && !keyset_take(c->want, key)))
		return;
	c->rc = write_row(c->w, c->t, key, row, c->buf);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

/* The delta rows of table t: the current state of every key of k. */
static int delta_rows(st_table_t *t, const st_export_keys_t *k, st_rows_writer_t *w, float *buf)
{
	size_t n = k->n_touched + k->n_deleted;
	if (!n)
		return ST_OK;
	if ((k->n_touched && !k->touched) || (k->n_deleted && !k->deleted))
		return ST_EINVAL;
	uint64_t *keys = malloc(sizeof(uint64_t) * n);
	if (!keys)
		return ST_ENOMEM;
	if (k->n_touched)
		memcpy(keys, k->touched, sizeof(uint64_t) * k->n_touched);
	if (k->n_deleted)
		memcpy(keys + k->n_touched, k->deleted, sizeof(uint64_t) * k->n_deleted);
	qsort(keys, n, sizeof *keys, cmp_u64);
	size_t u = 0;
	for (size_t i = 0; i < n; i++)
		if (!u || keys[u - 1] != keys[i])
			keys[u++] = keys[i];
	const int tiered = st_table_ssd(t) != NULL;
	keyset_t miss = { 0 };
	int rc = tiered ? keyset_init(&miss, u) : ST_OK;
	for (size_t i = 0; i < u && rc >= 0; i++) {
		float *row = st_table_find(t, keys[i]);
		if (row) {
			rc = write_row(w, t, keys[i], row, buf);
		} else if (tiered) {
			keyset_add(&miss, keys[i]);
		} else {
			rc = st_rows_writer_delete(w, keys[i]);
		}
	}
	free(keys);
	if (rc >= 0 && miss.n) {
		/* Keys not in RAM: one pass over the table finds those on SSD;
		 * the rest have no row anywhere. */
		collect_t c = { .w = w, .t = t, .want = &miss, .buf = buf };
		rc = st_table_foreach_all(t, add_row, &c);
		if (rc >= 0)
			rc = c.rc;
		for (size_t i = 0; i < miss.cap && rc >= 0; i++)
			if (miss.state[i] == 1)
				rc = st_rows_writer_delete(w, miss.keys[i]);
	}
	keyset_fini(&miss);
	return rc;
}

/* ---- metadata ------------------------------------------------------------ */

static char *join_ints(const int *v, int n)
{
	size_t cap = (size_t)n * 12 + 1, o = 0;
	char *s = malloc(cap);
	if (!s)
		return NULL;
	s[0] = 0;
	for (int i = 0; i < n; i++)
		o += (size_t)snprintf(s + o, cap - o, "%s%d", i ? "," : "", v[i]);
	return s;
}

/* "dnn emb=8 hidden=[64,32] dense=13 slots=26" for the manifest. */
static void describe(const st_model_cfg_t *mc, int n_dense, int n_slots, char *buf, size_t n)
{
	size_t o = (size_t)snprintf(buf, n, "%s emb=%d hidden=[", mc->type, mc->emb_dim);
	for (int i = 0; i < mc->n_hidden && o < n; i++)
		o += (size_t)snprintf(buf + o, n - o, "%s%d", i ? "," : "", mc->hidden[i]);
	if (o < n)
		snprintf(buf + o, n - o, "] dense=%d slots=%d", n_dense, n_slots);
}

/* The lineage rule above: ST_OK, or ST_EINVAL with the other run's export
 * named in err (ST_EIO if an export's manifest cannot be read). A root that
 * does not exist yet holds nothing. */
static int check_root(const char *root, uint64_t seq, int delta, const char *job_name,
		      const char *lineage, char *err, size_t errlen)
{
	const uint64_t from = delta && seq > 0 ? seq - 1 : seq;
	DIR *d = opendir(root);
	if (!d)
		return ST_OK;
	int rc = ST_OK;
	struct dirent *de;
	while (rc >= 0 && (de = readdir(d))) {
		unsigned long long num;
		char kind[8];
		int len = 0;
		if (sscanf(de->d_name, "export-%12llu-%5[a-z]%n", &num, kind, &len) != 2 ||
		    de->d_name[len] || (strcmp(kind, "full") && strcmp(kind, "delta")) ||
		    num < from)
			continue;
		char path[4352];
		snprintf(path, sizeof path, "%s/%s/" ST_MANIFEST_NAME, root, de->d_name);
		st_manifest_t *m = NULL;
		char why[512] = "";
		if (st_manifest_read(path, &m, why, sizeof why) < 0) {
			st__dumpio_seterr(err, errlen, "export %" PRIu64 ": %s/%s is there and its "
					  "manifest cannot be read (%s); an export of another run? "
					  "give each run its own export.dir", seq, root, de->d_name, why);
			rc = ST_EIO;
			break;
		}
		const int ours = !strcmp(m->job_name, job_name) && m->lineage &&
				 !strcmp(m->lineage, lineage);
		if (!ours) {
			st__dumpio_seterr(err, errlen, "export %" PRIu64 ": %s/%s was written by "
					  "another run (job '%s', lineage %s; this run is job '%s', "
					  "lineage %s), so this %s export would %s it. Two runs write "
					  "into one export directory: give each run its own export.dir",
					  seq, root, de->d_name, m->job_name,
					  m->lineage ? m->lineage : "(none)", job_name, lineage,
					  delta ? "delta" : "full",
					  num == seq ? "replace or sit beside" : "be applied after");
			rc = ST_EINVAL;
		}
		st_manifest_free(m);
	}
	closedir(d);
	return rc;
}

/* The model's codec string and the manifest's job hash of it. */
static int model_hash(const st_view_t *v, char **model, char hash[17], char *err, size_t errlen)
{
	int rc = st_modelcfg_encode(v->cfg, model, err, errlen);
	if (rc < 0)
		return rc;
	XXH3_state_t *hs = XXH3_createState();
	if (!hs) {
		free(*model);
		*model = NULL;
		return ST_ENOMEM;
	}
	XXH3_64bits_reset(hs);
	XXH3_64bits_update(hs, *model, strlen(*model));
	char shape[64];
	int sl = snprintf(shape, sizeof shape, "n_dense=%d\nn_slots=%d\n", v->n_dense, v->n_slots);
	XXH3_64bits_update(hs, shape, (size_t)sl);
	snprintf(hash, 17, "%016" PRIx64, (uint64_t)XXH3_64bits_digest(hs));
	XXH3_freeState(hs);
	return ST_OK;
}

/* err from the writer's own message when it has one. */
static int wr_err(st_ckpt_writer_t *w, int rc, uint64_t seq, char *err, size_t errlen)
{
	if (rc >= 0)
		return rc;
	if (w && *st_ckpt_error(w))
		st__dumpio_seterr(err, errlen, "%s", st_ckpt_error(w));
	else
		st__dumpio_seterr(err, errlen, "export %" PRIu64 ": %s", seq, st_strerror(rc));
	return rc;
}

int st_export_begin(const st_view_t *v, const char *root, uint64_t seq, int delta,
		    st_ckpt_writer_t **out, char *err, size_t errlen)
{
	*out = NULL;
	if (seq > (uint64_t)INT64_MAX || !root) {
		st__dumpio_seterr(err, errlen, "export: bad arguments (seq %" PRIu64 ")", seq);
		return ST_EINVAL;
	}
	char why[256];
	if (st_view_check(v, why, sizeof why) < 0) {
		st__dumpio_seterr(err, errlen, "export %" PRIu64 ": %s", seq, why);
		return ST_EINVAL;
	}
	/* The run's lineage: made by its first full export, carried by the
	 * rest, so a chain can refuse a delta of another run (ckpt.h). */
	const char *lineage = !delta ? st_view_lineage_new(v) : v->lineage ? v->lineage : "";
	const char *job_name = v->name ? v->name : "strata";
	int rc;
	if (*lineage && (rc = check_root(root, seq, delta, job_name, lineage, err, errlen)) < 0)
		return rc;
	return st_ckpt_export_begin(root, (int64_t)seq, delta, out, err, errlen);
}

int st_export_write_dense(const st_view_t *v, st_ckpt_writer_t *w, uint64_t seq, char *err,
			  size_t errlen)
{
	const int n_slots = v->n_slots, n_dense = v->n_dense;
	st_model_t *m = v->model;
	char *model = NULL, *slot_tables = NULL;
	st_safetensors_tensor_t *ten = NULL;
	int rc = st_modelcfg_encode(v->cfg, &model, err, errlen);
	if (rc < 0)
		return rc;
	const int n_ten = st_model_ntensors(m);
	const float *params = st_model_params(m);
	if (!(slot_tables = join_ints(v->slot_table, n_slots)) ||
	    !(ten = calloc((size_t)(n_ten ? n_ten : 1), sizeof *ten))) {
		st__dumpio_seterr(err, errlen, "export %" PRIu64 ": out of memory", seq);
		rc = ST_ENOMEM;
		goto out;
	}
	for (int i = 0; i < n_ten; i++) {
		const st_tensor_info_t *ti = st_model_tensor(m, i);
		ten[i].name = ti->name;
		ten[i].ndim = ti->ndim;
		for (int d = 0; d < ti->ndim; d++)
			ten[i].shape[d] = ti->shape[d];
		ten[i].f32 = params + ti->offset;
	}
	char nd[16], ns[16], seed[24], mb[16];
	snprintf(nd, sizeof nd, "%d", n_dense);
	snprintf(ns, sizeof ns, "%d", n_slots);
	snprintf(seed, sizeof seed, "%" PRIu64, v->seed);
	snprintf(mb, sizeof mb, "%d", v->minibatch);
	const st_kv_t meta[] = {
		{ "strata.format", ST_EXPORT_FORMAT }, { "strata.model", model },
		{ "strata.n_dense", nd }, { "strata.n_slots", ns },
		{ "strata.slot_tables", slot_tables }, { "strata.seed", seed },
		{ "strata.minibatch", mb },
	};
	rc = wr_err(w, st_ckpt_write_dense(w, ST_EXPORT_DENSE, ten, n_ten, meta,
					   (int)(sizeof meta / sizeof meta[0])), seq, err, errlen);
out:
	free(ten);
	free(model);
	free(slot_tables);
	return rc;
}

void st_export_rows_name(char *buf, size_t len, int table, int rank, int world)
{
	if (world > 0)
		snprintf(buf, len, "table-%d.rank-%d-of-%d.rows", table, rank, world);
	else
		snprintf(buf, len, "table-%d.rows", table);
}

int st_export_write_tables(const st_view_t *v, st_ckpt_writer_t *w, uint64_t seq,
			   const st_export_delta_t *delta, int rank, int world, char *err,
			   size_t errlen)
{
	const int nt = v->n_tables;
	if (delta && (delta->n_tables != nt || (nt && !delta->tables))) {
		st__dumpio_seterr(err, errlen, "export %" PRIu64 ": the delta lists %d tables, the "
				  "trainer has %d", seq, delta->n_tables, nt);
		return ST_EINVAL;
	}
	int rc = ST_OK;
	for (int k = 0; k < nt && rc >= 0; k++) {
		st_table_t *t = v->tables[k];
		st_rows_info_t info = {
			.table_id = (uint64_t)k,
			.dim = (uint32_t)st_view_row_dim(v, k),
			.state_dim = 0,
			.flags = delta ? ST_ROWS_DELTA : 0,
		};
		st_rows_writer_t *b;
		if ((rc = st_rows_writer_create(&b, &info)) < 0) {
			if (rc == ST_EINVAL)
				st__dumpio_seterr(err, errlen, "export %" PRIu64 ": table %d has no "
						  "slot", seq, k);
			else
				st__dumpio_seterr(err, errlen, "export %" PRIu64 ": %s", seq,
						  st_strerror(rc));
			return rc;
		}
		float *buf = malloc(sizeof(float) * (info.dim + info.state_dim));
		if (!buf) {
			rc = ST_ENOMEM;
		} else if (delta) {
			rc = delta_rows(t, &delta->tables[k], b, buf);
		} else {
			collect_t c = { .w = b, .t = t, .buf = buf };
			rc = st_table_foreach_all(t, add_row, &c);
			if (rc >= 0)
				rc = c.rc;
		}
		free(buf);
		if (rc < 0) {
			/* Before the builder reaches the writer: say it here. */
			if (rc == ST_EINVAL)
				st__dumpio_seterr(err, errlen, "export %" PRIu64 ": table %d: a key "
						  "list is NULL with a nonzero count", seq, k);
			else
				st__dumpio_seterr(err, errlen, "export %" PRIu64 ": table %d: reading "
						  "rows: %s", seq, k, st_strerror(rc));
		} else {
			char name[64];
			st_export_rows_name(name, sizeof name, k, rank, world);
			rc = wr_err(w, st_ckpt_write_rows_from(w, name, b), seq, err, errlen);
		}
		st_rows_writer_destroy(b);
	}
	return rc;
}

int st_export_commit(const st_view_t *v, st_ckpt_writer_t *w, uint64_t seq, int64_t step,
		     int keep, const st_manifest_t *world, char *err, size_t errlen)
{
	if (step < 0) {
		st__dumpio_seterr(err, errlen, "export %" PRIu64 ": bad step %" PRId64, seq, step);
		return ST_EINVAL;
	}
	char *model = NULL, hash[17], desc[256];
	int rc = model_hash(v, &model, hash, err, errlen);
	if (rc < 0)
		return rc;
	describe(v->cfg, v->n_dense, v->n_slots, desc, sizeof desc);
	st_manifest_t man = {
		.job_name = (char *)(v->name ? v->name : "strata"),
		.job_hash = hash,
		.model = desc,
		.lineage = v->lineage && *v->lineage ? (char *)v->lineage : NULL,
		.step = step,
	};
	if (world) {
		man.world_size = world->world_size;
		man.owners = world->owners;
		man.owner_salt = world->owner_salt;
		man.parts = world->parts;
		man.n_parts = world->n_parts;
	}
	rc = wr_err(w, st_ckpt_commit(w, &man, keep, NULL, NULL), seq, err, errlen);
	free(model);
	return rc;
}

int st_export_write(const st_view_t *v, const char *root, uint64_t seq, int64_t step,
		    const st_export_delta_t *delta, int keep, char *err, size_t errlen)
{
	if (seq > (uint64_t)INT64_MAX || step < 0 || !root) {
		st__dumpio_seterr(err, errlen, "export: bad arguments (seq %" PRIu64 ", step %"
				  PRId64 ")", seq, step);
		return ST_EINVAL;
	}
	char why[256];
	if (st_view_check(v, why, sizeof why) < 0) {
		st__dumpio_seterr(err, errlen, "export %" PRIu64 ": %s", seq, why);
		return ST_EINVAL;
	}
	if (delta && (delta->n_tables != v->n_tables || (v->n_tables && !delta->tables))) {
		st__dumpio_seterr(err, errlen, "export %" PRIu64 ": the delta lists %d tables, the "
				  "trainer has %d", seq, delta->n_tables, v->n_tables);
		return ST_EINVAL;
	}
	/* The model must encode before anything is written. */
	char *model = NULL;
	int rc = st_modelcfg_encode(v->cfg, &model, err, errlen);
	free(model);
	if (rc < 0) {
		if (rc == ST_ENOMEM)
			st__dumpio_seterr(err, errlen, "export %" PRIu64 ": out of memory", seq);
		return rc;
	}
	st_ckpt_writer_t *w = NULL;
	rc = st_export_begin(v, root, seq, delta != NULL, &w, err, errlen);
	if (rc >= 0)
		rc = st_export_write_dense(v, w, seq, err, errlen);
	if (rc >= 0)
		rc = st_export_write_tables(v, w, seq, delta, 0, 0, err, errlen);
	if (rc >= 0)
		rc = st_export_commit(v, w, seq, step, keep, NULL, err, errlen);
	st_ckpt_writer_destroy(w);
	return rc;
}
