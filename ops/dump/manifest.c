/*
 * manifest.c — emit and parse manifest.yaml (see manifest.h).
 *
 * Emitting goes through libyaml's event emitter, so quoting and escaping of
 * job names, paths and policy state are libyaml's, not ours; string values
 * are double-quoted so no YAML reader mistakes a hash like "1e10" for a
 * number. Parsing loads the one document with yaml_parser_load and walks a
 * fixed schema; every field is checked for type, repetition and presence.
 *
 * The file is long because the schema is one: emitting and parsing each
 * field sit side by side, so that a field added to one is seen missing
 * from the other (the optional "world" of multi-process checkpoints too).
 */
#include "ops/dump/manifest.h"
#include "runtime/err.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>
#include <yaml.h>

#define TRAILER "# manifest xxh3: "

static const char *const kind_names[] = { "checkpoint", "export-full", "export-delta" };

const char *st_manifest_kind_name(st_manifest_kind_t k)
{
	return (unsigned)k < 3 ? kind_names[k] : "?";
}

/* ---------------------------------------------------------------- emit */

typedef struct obuf {
	char *p;
	size_t len, cap;
	int oom;
} obuf_t;

static int out_handler(void *data, unsigned char *buf, size_t size)
{
	obuf_t *o = data;
	if (o->len + size + 128 > o->cap) {
		size_t cap = o->cap ? o->cap : 1024;
		while (cap < o->len + size + 128)
			cap *= 2;
		char *q = realloc(o->p, cap);
		if (!q) {
			o->oom = 1;
			return 0;
		}
		o->p = q;
		o->cap = cap;
	}
	memcpy(o->p + o->len, buf, size);
	o->len += size;
	return 1;
}

typedef struct em {
	yaml_emitter_t e;
	int ok;
	const char *bad;   /* a string libyaml refused (not UTF-8) */
} em_t;

static void ev(em_t *m, yaml_event_t *event)
{
	if (m->ok && !yaml_emitter_emit(&m->e, event))
		m->ok = 0;
}

static void scalar(em_t *m, const char *s, int quoted)
{
	yaml_event_t event;
	if (!m->ok)
		return;
	if (!yaml_scalar_event_initialize(&event, NULL, NULL, (yaml_char_t *)s, (int)strlen(s),
					  !quoted, quoted,
					  quoted ? YAML_DOUBLE_QUOTED_SCALAR_STYLE : YAML_PLAIN_SCALAR_STYLE)) {
		/* the only failure besides a tiny allocation: invalid UTF-8 */
		m->ok = 0;
		m->bad = s;
		return;
	}
	ev(m, &event);
}

static void key(em_t *m, const char *k)
{
	scalar(m, k, 0);
}

static void str(em_t *m, const char *k, const char *v)
{
	key(m, k);
	scalar(m, v, 1);
}

static void num(em_t *m, const char *k, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void num(em_t *m, const char *k, const char *fmt, ...)
{
	char b[64];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(b, sizeof b, fmt, ap);
	va_end(ap);
	if (k)
		key(m, k);
	scalar(m, b, 0);
}

static void map_start(em_t *m, int flow)
{
	yaml_event_t event;
	if (m->ok && !yaml_mapping_start_event_initialize(&event, NULL, NULL, 1,
			flow ? YAML_FLOW_MAPPING_STYLE : YAML_BLOCK_MAPPING_STYLE)) {
		m->ok = 0;
		return;
	}
	ev(m, &event);
}

static void map_end(em_t *m)
{
	yaml_event_t event;
	if (m->ok && !yaml_mapping_end_event_initialize(&event)) {
		m->ok = 0;
		return;
	}
	ev(m, &event);
}

static void seq_start(em_t *m, int flow)
{
	yaml_event_t event;
	if (m->ok && !yaml_sequence_start_event_initialize(&event, NULL, NULL, 1,
			flow ? YAML_FLOW_SEQUENCE_STYLE : YAML_BLOCK_SEQUENCE_STYLE)) {
		m->ok = 0;
		return;
	}
	ev(m, &event);
}

static void seq_end(em_t *m)
{
	yaml_event_t event;
	if (m->ok && !yaml_sequence_end_event_initialize(&event)) {
		m->ok = 0;
		return;
	}
	ev(m, &event);
}

static int check_emit(const st_manifest_t *m, char *err, size_t errlen)
{
	const char *missing = !m->job_name ? "job name" : !m->job_hash ? "job hash" : NULL;
	if (missing) {
		st__dumpio_seterr(err, errlen, "manifest: the %s is required", missing);
		return ST_EINVAL;
	}
	if ((unsigned)m->kind > ST_MANIFEST_EXPORT_DELTA || m->step < 0 ||
	    (m->kind != ST_MANIFEST_CHECKPOINT && m->seq < 0)) {
		st__dumpio_seterr(err, errlen, "manifest: bad kind, step or export sequence");
		return ST_EINVAL;
	}
	for (size_t i = 0; i < m->n_files; i++) {
		const char *n = m->files[i].name;
		if (!n || !*n || strchr(n, '/') || !strcmp(n, ".") || !strcmp(n, "..")) {
			st__dumpio_seterr(err, errlen, "manifest: file name '%s' must be a plain name "
					  "inside the directory", n ? n : "(null)");
			return ST_EINVAL;
		}
	}
	for (size_t i = 0; i < m->n_shards; i++)
		if (!m->shards[i].file) {
			st__dumpio_seterr(err, errlen, "manifest: data position %zu has no file", i);
			return ST_EINVAL;
		}
	for (size_t i = 0; i < m->n_sync_state; i++)
		if (!m->sync_state[i].key || !m->sync_state[i].value) {
			st__dumpio_seterr(err, errlen, "manifest: sync state %zu lacks key or value", i);
			return ST_EINVAL;
		}
	if (m->world_size < 0 || (m->world_size > 0 && m->owners < 1)) {
		st__dumpio_seterr(err, errlen, "manifest: bad world size or owners");
		return ST_EINVAL;
	}
	for (size_t i = 0; i < m->n_parts; i++)
		for (size_t j = 0; j < m->parts[i].n_files; j++) {
			const char *n = m->parts[i].files[j];
			if (!n || !*n || strchr(n, '/')) {
				st__dumpio_seterr(err, errlen, "manifest: rank %" PRId64 "'s file '%s' "
						  "must be a plain name", m->parts[i].rank,
						  n ? n : "(null)");
				return ST_EINVAL;
			}
		}
	return ST_OK;
}

int st_manifest_emit(const st_manifest_t *m, char **out, size_t *len, char *err, size_t errlen)
{
	*out = NULL;
	*len = 0;
	int rc = check_emit(m, err, errlen);
	if (rc < 0)
		return rc;
	obuf_t o = { 0 };
	em_t e = { .ok = 1 };
	if (!yaml_emitter_initialize(&e.e))
		return ST_ENOMEM;
	yaml_emitter_set_output(&e.e, out_handler, &o);
	yaml_emitter_set_unicode(&e.e, 1);
	yaml_emitter_set_width(&e.e, -1);   /* never fold long paths */
	yaml_event_t event;
	if (yaml_stream_start_event_initialize(&event, YAML_UTF8_ENCODING))
		ev(&e, &event);
	if (yaml_document_start_event_initialize(&event, NULL, NULL, NULL, 1))
		ev(&e, &event);
	map_start(&e, 0);
	num(&e, "format_version", "%d", ST_MANIFEST_VERSION);
	key(&e, "kind");
	scalar(&e, st_manifest_kind_name(m->kind), 0);
	key(&e, "job");
	map_start(&e, 0);
	str(&e, "name", m->job_name);
	str(&e, "hash", m->job_hash);
	if (m->model)
		str(&e, "model", m->model);
	if (m->lineage)
		str(&e, "lineage", m->lineage);
	map_end(&e);
	num(&e, "step", "%" PRId64, m->step);
	if (m->kind != ST_MANIFEST_CHECKPOINT)
		num(&e, "seq", "%" PRId64, m->seq);
	char tbuf[32];
	time_t t = (time_t)m->created;
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(tbuf, sizeof tbuf, "%Y-%m-%dT%H:%M:%SZ", &tm);
	key(&e, "created");
	scalar(&e, tbuf, 0);
	key(&e, "data_position");
	seq_start(&e, 0);
	for (size_t i = 0; i < m->n_shards; i++) {
		map_start(&e, 0);
		num(&e, "shard", "%" PRId64, m->shards[i].shard);
		str(&e, "file", m->shards[i].file);
		num(&e, "offset", "%" PRIu64, m->shards[i].offset);
		num(&e, "records", "%" PRIu64, m->shards[i].records);
		map_end(&e);
	}
	seq_end(&e);
	if (m->sync_policy) {
		key(&e, "sync");
		map_start(&e, 0);
		str(&e, "policy", m->sync_policy);
		key(&e, "state");
		map_start(&e, 0);
		for (size_t i = 0; i < m->n_sync_state; i++)
			str(&e, m->sync_state[i].key, m->sync_state[i].value);
		map_end(&e);
		map_end(&e);
	}
	key(&e, "rng");
	seq_start(&e, 1);
	for (size_t i = 0; i < m->n_rng; i++)
		num(&e, NULL, "%" PRIu64, m->rng[i]);
	seq_end(&e);
	key(&e, "files");
	seq_start(&e, 0);
	for (size_t i = 0; i < m->n_files; i++) {
		map_start(&e, 0);
		str(&e, "name", m->files[i].name);
		num(&e, "bytes", "%" PRIu64, m->files[i].bytes);
		char h[24];
		snprintf(h, sizeof h, "%016" PRIx64, m->files[i].xxh3);
		str(&e, "xxh3", h);
		map_end(&e);
	}
	seq_end(&e);
	if (m->world_size > 0) {
		/* Only multi-process checkpoints have it, so older readers still
		 * read every one-process manifest. */
		key(&e, "world");
		map_start(&e, 0);
		num(&e, "size", "%" PRId64, m->world_size);
		num(&e, "owners", "%" PRId64, m->owners);
		char salt[24];
		snprintf(salt, sizeof salt, "%016" PRIx64, m->owner_salt);
		str(&e, "owner_salt", salt);
		key(&e, "parts");
		seq_start(&e, 0);
		for (size_t i = 0; i < m->n_parts; i++) {
			map_start(&e, 0);
			num(&e, "rank", "%" PRId64, m->parts[i].rank);
			key(&e, "files");
			seq_start(&e, 1);
			for (size_t j = 0; j < m->parts[i].n_files; j++)
				scalar(&e, m->parts[i].files[j], 1);
			seq_end(&e);
			map_end(&e);
		}
		seq_end(&e);
		map_end(&e);
	}
	map_end(&e);
	if (yaml_document_end_event_initialize(&event, 1))
		ev(&e, &event);
	if (yaml_stream_end_event_initialize(&event))
		ev(&e, &event);
	if (e.bad) {
		yaml_emitter_delete(&e.e);
		free(o.p);
		st__dumpio_seterr(err, errlen, "manifest: a string is not valid UTF-8: \"%.40s\"", e.bad);
		return ST_EINVAL;
	}
	int ok = e.ok && yaml_emitter_flush(&e.e);
	int nomem = o.oom || !e.e.problem || e.e.error == YAML_MEMORY_ERROR;
	char problem[200];
	snprintf(problem, sizeof problem, "%s", e.e.problem ? e.e.problem : "out of memory");
	yaml_emitter_delete(&e.e);
	if (!ok || o.oom) {
		free(o.p);
		st__dumpio_seterr(err, errlen, "manifest: YAML emitter failed: %s", problem);
		return nomem ? ST_ENOMEM : ST_EINVAL;
	}
	/* out_handler keeps 128 bytes spare for this line */
	o.len += (size_t)snprintf(o.p + o.len, 128, TRAILER "%016" PRIx64 "\n",
				  XXH3_64bits(o.p, o.len));
	*out = o.p;
	*len = o.len;
	return ST_OK;
}

int st_manifest_write(const char *path, const st_manifest_t *m, st_dumpio_sum_t *sum,
		      char *err, size_t errlen)
{
	char *text;
	size_t len;
	int rc = st_manifest_emit(m, &text, &len, err, errlen);
	if (rc < 0)
		return rc;
	st__dumpio_t *f;
	rc = st__dumpio_open(&f, path, err, errlen);
	if (rc == ST_OK) {
		st__dumpio_write(f, text, len);
		rc = st__dumpio_close(f, sum, err, errlen);
	}
	free(text);
	return rc;
}

/* ---------------------------------------------------------------- parse */

typedef struct ps {
	yaml_document_t *doc;
	const char *name;
	char *err;
	size_t errlen;
	int rc;
} ps_t;

static int perr(ps_t *p, const yaml_node_t *n, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int perr(ps_t *p, const yaml_node_t *n, const char *fmt, ...)
{
	char what[300];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof what, fmt, ap);
	va_end(ap);
	if (n)
		st__dumpio_seterr(p->err, p->errlen, "%s:%zu: %s", p->name,
				  (size_t)n->start_mark.line + 1, what);
	else
		st__dumpio_seterr(p->err, p->errlen, "%s: %s", p->name, what);
	p->rc = ST_EFORMAT;
	return ST_EFORMAT;
}

static yaml_node_t *node(ps_t *p, int id)
{
	return yaml_document_get_node(p->doc, id);
}

static const char *sval(const yaml_node_t *n)
{
	return (const char *)n->data.scalar.value;
}

/* A field's value, known by name; each field of a mapping at most once. */
typedef struct field {
	const char *name;
	int required;
	yaml_node_t *val;
	yaml_node_t *key;
} field_t;

/* Matches the pairs of mapping n against fields[] (NULL-terminated name).
 * Unknown and repeated keys are errors. */
static int fields_of(ps_t *p, yaml_node_t *n, const char *what, field_t *fields)
{
	if (!n || n->type != YAML_MAPPING_NODE)
		return perr(p, n, "%s must be a mapping", what);
	for (yaml_node_pair_t *pr = n->data.mapping.pairs.start; pr < n->data.mapping.pairs.top; pr++) {
		yaml_node_t *k = node(p, pr->key);
		if (!k || k->type != YAML_SCALAR_NODE)
			return perr(p, k, "%s: keys must be plain strings", what);
		field_t *f = fields;
		while (f->name && strcmp(f->name, sval(k)))
			f++;
		if (!f->name)
			return perr(p, k, "%s: unknown field '%s'", what, sval(k));
		if (f->val)
			return perr(p, k, "%s: field '%s' appears twice", what, sval(k));
		f->val = node(p, pr->value);
		f->key = k;
	}
	for (field_t *f = fields; f->name; f++)
		if (f->required && !f->val)
			return perr(p, n, "%s: missing required field '%s'", what, f->name);
	return ST_OK;
}

static int get_str(ps_t *p, field_t *f, const char *what, char **out)
{
	if (f->val->type != YAML_SCALAR_NODE)
		return perr(p, f->val, "%s: field '%s' must be a string", what, f->name);
	*out = strdup(sval(f->val));
	if (!*out)
		return p->rc = ST_ENOMEM;
	return ST_OK;
}

/* A plain unsigned decimal integer (no sign, no spaces, no base prefixes). */
static int get_u64(ps_t *p, yaml_node_t *v, const char *what, const char *fname, uint64_t max,
		   uint64_t *out)
{
	if (v->type != YAML_SCALAR_NODE || v->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
		return perr(p, v, "%s: field '%s' must be a plain integer", what, fname);
	const char *s = sval(v);
	uint64_t x = 0;
	if (!*s)
		return perr(p, v, "%s: field '%s' is empty", what, fname);
	for (const char *c = s; *c; c++) {
		if (*c < '0' || *c > '9')
			return perr(p, v, "%s: field '%s': '%s' is not a non-negative integer", what, fname, s);
		unsigned d = (unsigned)(*c - '0');
		if (x > (max - d) / 10)
			return perr(p, v, "%s: field '%s': %s is too large", what, fname, s);
		x = x * 10 + d;
	}
	*out = x;
	return ST_OK;
}

static int get_i64(ps_t *p, field_t *f, const char *what, int64_t *out)
{
	uint64_t v;
	int rc = get_u64(p, f->val, what, f->name, INT64_MAX, &v);
	if (rc == ST_OK)
		*out = (int64_t)v;
	return rc;
}

static int parse_time(ps_t *p, field_t *f, int64_t *out)
{
	int Y, M, D, h, m, s, n = 0;
	const char *str_ = f->val->type == YAML_SCALAR_NODE ? sval(f->val) : "";
	if (sscanf(str_, "%4d-%2d-%2dT%2d:%2d:%2dZ%n", &Y, &M, &D, &h, &m, &s, &n) != 6 ||
	    str_[n] || n != 20 || M < 1 || M > 12 || D < 1 || D > 31 || h > 23 || m > 59 || s > 60)
		return perr(p, f->val, "field 'created' must be a UTC time like 2024-01-31T12:00:00Z");
	struct tm tm = { .tm_year = Y - 1900, .tm_mon = M - 1, .tm_mday = D,
			 .tm_hour = h, .tm_min = m, .tm_sec = s };
	*out = (int64_t)timegm(&tm);
	return ST_OK;
}

static int seq_of(ps_t *p, yaml_node_t *n, const char *what)
{
	if (n->type != YAML_SEQUENCE_NODE)
		return perr(p, n, "%s must be a list", what);
	return ST_OK;
}

static size_t seq_len(const yaml_node_t *n)
{
	return (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
}

/* The optional "world" of a multi-process checkpoint (manifest.h). Its
 * completeness is st_manifest_check_world's: a parsed manifest may lack a
 * part, and the checkpoint is then reported incomplete, not unreadable. */
static int parse_world(ps_t *p, yaml_node_t *w, st_manifest_t *m)
{
	field_t wf[] = { { "size", 1, 0, 0 }, { "owners", 1, 0, 0 }, { "owner_salt", 1, 0, 0 },
			 { "parts", 1, 0, 0 }, { NULL, 0, 0, 0 } };
	uint64_t size, owners;
	if (fields_of(p, w, "world", wf) < 0 ||
	    get_u64(p, wf[0].val, "world", "size", ST_MANIFEST_MAX_WORLD, &size) < 0 ||
	    get_u64(p, wf[1].val, "world", "owners", ST_MANIFEST_MAX_WORLD, &owners) < 0)
		return p->rc;
	if (size < 1 || owners < 1 || owners > size)
		return perr(p, w, "world: size and owners must be at least 1, owners at most size");
	m->world_size = (int64_t)size;
	m->owners = (int64_t)owners;
	const char *h = wf[2].val->type == YAML_SCALAR_NODE ? sval(wf[2].val) : "";
	if (strlen(h) != 16 || strspn(h, "0123456789abcdef") != 16)
		return perr(p, wf[2].val, "world: owner_salt must be 16 lowercase hex digits");
	m->owner_salt = strtoull(h, NULL, 16);
	yaml_node_t *pl = wf[3].val;
	if (seq_of(p, pl, "world.parts") < 0)
		return p->rc;
	size_t n = seq_len(pl);
	m->parts = calloc(n ? n : 1, sizeof *m->parts);
	if (!m->parts)
		return p->rc = ST_ENOMEM;
	for (size_t i = 0; i < n; i++) {
		field_t pf[] = { { "rank", 1, 0, 0 }, { "files", 1, 0, 0 }, { NULL, 0, 0, 0 } };
		st_manifest_part_t *pt = &m->parts[i];
		m->n_parts = i + 1;
		if (fields_of(p, node(p, pl->data.sequence.items.start[i]), "world.parts entry", pf) < 0 ||
		    get_i64(p, &pf[0], "world.parts", &pt->rank) < 0 ||
		    seq_of(p, pf[1].val, "world.parts files") < 0)
			return p->rc;
		size_t nf = seq_len(pf[1].val);
		pt->files = calloc(nf ? nf : 1, sizeof *pt->files);
		if (!pt->files)
			return p->rc = ST_ENOMEM;
		for (size_t j = 0; j < nf; j++) {
			yaml_node_t *fn = node(p, pf[1].val->data.sequence.items.start[j]);
			if (!fn || fn->type != YAML_SCALAR_NODE)
				return perr(p, fn, "world.parts: file names must be strings");
			pt->n_files = j + 1;
			if (!(pt->files[j] = strdup(sval(fn))))
				return p->rc = ST_ENOMEM;
			if (!*pt->files[j] || strchr(pt->files[j], '/'))
				return perr(p, fn, "world.parts: '%s' is not a plain file name",
					    pt->files[j]);
		}
	}
	return ST_OK;
}

int st_manifest_check_world(const st_manifest_t *m, char *err, size_t errlen)
{
	if (m->world_size <= 0)
		return ST_OK;
	for (int64_t r = 0; r < m->world_size; r++) {
		const st_manifest_part_t *pt = NULL;
		for (size_t i = 0; i < m->n_parts; i++) {
			if (m->parts[i].rank != r)
				continue;
			if (pt) {
				st__dumpio_seterr(err, errlen, "incomplete: rank %" PRId64 "'s shard "
						  "is listed twice", r);
				return ST_ECORRUPT;
			}
			pt = &m->parts[i];
		}
		if (!pt) {
			st__dumpio_seterr(err, errlen, "incomplete: rank %" PRId64 " of %" PRId64
					  " wrote no shard", r, m->world_size);
			return ST_ECORRUPT;
		}
		for (size_t j = 0; j < pt->n_files; j++)
			if (!st_manifest_find_file(m, pt->files[j])) {
				st__dumpio_seterr(err, errlen, "incomplete: rank %" PRId64 "'s file "
						  "'%s' is not among the files", r, pt->files[j]);
				return ST_ECORRUPT;
			}
	}
	if (m->n_parts != (size_t)m->world_size) {
		st__dumpio_seterr(err, errlen, "incomplete: %zu shards for a world of %" PRId64,
				  m->n_parts, m->world_size);
		return ST_ECORRUPT;
	}
	return ST_OK;
}

static int parse_doc(ps_t *p, st_manifest_t *m)
{
	yaml_node_t *root = yaml_document_get_root_node(p->doc);
	if (!root)
		return perr(p, NULL, "empty manifest");
	enum { F_VER, F_KIND, F_JOB, F_STEP, F_SEQ, F_CREATED, F_DATA, F_SYNC, F_RNG, F_FILES,
	       F_WORLD };
	field_t top[] = {
		{ "format_version", 1, 0, 0 }, { "kind", 1, 0, 0 }, { "job", 1, 0, 0 },
		{ "step", 1, 0, 0 }, { "seq", 0, 0, 0 }, { "created", 1, 0, 0 },
		{ "data_position", 0, 0, 0 }, { "sync", 0, 0, 0 }, { "rng", 0, 0, 0 },
		{ "files", 1, 0, 0 }, { "world", 0, 0, 0 }, { NULL, 0, 0, 0 },
	};
	/* The version comes first: a newer manifest may have fields this
	 * version does not know, and "unsupported version" is the message that
	 * helps then. */
	if (root->type == YAML_MAPPING_NODE) {
		for (yaml_node_pair_t *pr = root->data.mapping.pairs.start;
		     pr < root->data.mapping.pairs.top; pr++) {
			yaml_node_t *k = node(p, pr->key), *v = node(p, pr->value);
			if (k && k->type == YAML_SCALAR_NODE && !strcmp(sval(k), "format_version")) {
				uint64_t ver;
				if (get_u64(p, v, "manifest", "format_version", INT32_MAX, &ver) < 0)
					return p->rc;
				if (ver != ST_MANIFEST_VERSION)
					return perr(p, v, "format_version %" PRIu64 " is not supported "
						    "(this strata reads version %d)", ver, ST_MANIFEST_VERSION);
				m->format_version = (int)ver;
			}
		}
	}
	if (fields_of(p, root, "manifest", top) < 0)
		return p->rc;

	const char *k = top[F_KIND].val->type == YAML_SCALAR_NODE ? sval(top[F_KIND].val) : "";
	int kind = -1;
	for (int i = 0; i < 3; i++)
		if (!strcmp(k, kind_names[i]))
			kind = i;
	if (kind < 0)
		return perr(p, top[F_KIND].val, "field 'kind' must be checkpoint, export-full or "
			    "export-delta");
	m->kind = (st_manifest_kind_t)kind;

	/* lineage is optional: manifests written before it existed load as
	 * having none. */
	field_t job[] = { { "name", 1, 0, 0 }, { "hash", 1, 0, 0 }, { "model", 0, 0, 0 },
			  { "lineage", 0, 0, 0 }, { NULL, 0, 0, 0 } };
	if (fields_of(p, top[F_JOB].val, "job", job) < 0 ||
	    get_str(p, &job[0], "job", &m->job_name) < 0 ||
	    get_str(p, &job[1], "job", &m->job_hash) < 0 ||
	    (job[2].val && get_str(p, &job[2], "job", &m->model) < 0) ||
	    (job[3].val && get_str(p, &job[3], "job", &m->lineage) < 0))
		return p->rc;
	if (get_i64(p, &top[F_STEP], "manifest", &m->step) < 0)
		return p->rc;
	m->seq = -1;
	if (m->kind != ST_MANIFEST_CHECKPOINT && !top[F_SEQ].val)
		return perr(p, root, "manifest: missing required field 'seq' (exports have one)");
	if (m->kind == ST_MANIFEST_CHECKPOINT && top[F_SEQ].val)
		return perr(p, top[F_SEQ].key, "manifest: a checkpoint has no field 'seq'");
	if (top[F_SEQ].val && get_i64(p, &top[F_SEQ], "manifest", &m->seq) < 0)
		return p->rc;
	if (parse_time(p, &top[F_CREATED], &m->created) < 0)
		return p->rc;

	if (top[F_DATA].val) {
		yaml_node_t *d = top[F_DATA].val;
		if (seq_of(p, d, "data_position") < 0)
			return p->rc;
		size_t n = seq_len(d);
		m->shards = calloc(n ? n : 1, sizeof *m->shards);
		if (!m->shards)
			return p->rc = ST_ENOMEM;
		for (size_t i = 0; i < n; i++) {
			field_t sf[] = { { "shard", 1, 0, 0 }, { "file", 1, 0, 0 }, { "offset", 1, 0, 0 },
					 { "records", 1, 0, 0 }, { NULL, 0, 0, 0 } };
			st_manifest_shard_t *s = &m->shards[i];
			m->n_shards = i + 1;
			if (fields_of(p, node(p, d->data.sequence.items.start[i]), "data_position entry", sf) < 0 ||
			    get_i64(p, &sf[0], "data_position", &s->shard) < 0 ||
			    get_str(p, &sf[1], "data_position", &s->file) < 0 ||
			    get_u64(p, sf[2].val, "data_position", "offset", UINT64_MAX, &s->offset) < 0 ||
			    get_u64(p, sf[3].val, "data_position", "records", UINT64_MAX, &s->records) < 0)
				return p->rc;
		}
	}
	if (top[F_SYNC].val) {
		field_t sf[] = { { "policy", 1, 0, 0 }, { "state", 0, 0, 0 }, { NULL, 0, 0, 0 } };
		if (fields_of(p, top[F_SYNC].val, "sync", sf) < 0 ||
		    get_str(p, &sf[0], "sync", &m->sync_policy) < 0)
			return p->rc;
		if (sf[1].val) {
			yaml_node_t *st = sf[1].val;
			if (st->type != YAML_MAPPING_NODE)
				return perr(p, st, "sync: field 'state' must be a mapping of strings");
			size_t n = (size_t)(st->data.mapping.pairs.top - st->data.mapping.pairs.start);
			m->sync_state = calloc(n ? n : 1, sizeof *m->sync_state);
			if (!m->sync_state)
				return p->rc = ST_ENOMEM;
			for (size_t i = 0; i < n; i++) {
				yaml_node_pair_t *pr = &st->data.mapping.pairs.start[i];
				yaml_node_t *kn = node(p, pr->key), *vn = node(p, pr->value);
				if (kn->type != YAML_SCALAR_NODE || vn->type != YAML_SCALAR_NODE)
					return perr(p, kn, "sync state: keys and values must be strings");
				for (size_t j = 0; j < i; j++)
					if (!strcmp(m->sync_state[j].key, sval(kn)))
						return perr(p, kn, "sync state: key '%s' appears twice", sval(kn));
				m->n_sync_state = i + 1;
				if (!(m->sync_state[i].key = strdup(sval(kn))) ||
				    !(m->sync_state[i].value = strdup(sval(vn))))
					return p->rc = ST_ENOMEM;
			}
		}
	}
	if (top[F_RNG].val) {
		yaml_node_t *r = top[F_RNG].val;
		if (seq_of(p, r, "rng") < 0)
			return p->rc;
		size_t n = seq_len(r);
		m->rng = calloc(n ? n : 1, sizeof *m->rng);
		if (!m->rng)
			return p->rc = ST_ENOMEM;
		m->n_rng = n;
		for (size_t i = 0; i < n; i++)
			if (get_u64(p, node(p, r->data.sequence.items.start[i]), "rng", "rng",
				    UINT64_MAX, &m->rng[i]) < 0)
				return p->rc;
	}
	yaml_node_t *fl = top[F_FILES].val;
	if (seq_of(p, fl, "files") < 0)
		return p->rc;
	size_t n = seq_len(fl);
	m->files = calloc(n ? n : 1, sizeof *m->files);
	if (!m->files)
		return p->rc = ST_ENOMEM;
	for (size_t i = 0; i < n; i++) {
		field_t ff[] = { { "name", 1, 0, 0 }, { "bytes", 1, 0, 0 }, { "xxh3", 1, 0, 0 },
				 { NULL, 0, 0, 0 } };
		st_manifest_file_t *f = &m->files[i];
		m->n_files = i + 1;
		yaml_node_t *fn = node(p, fl->data.sequence.items.start[i]);
		if (fields_of(p, fn, "files entry", ff) < 0 || get_str(p, &ff[0], "files", &f->name) < 0 ||
		    get_u64(p, ff[1].val, "files", "bytes", UINT64_MAX, &f->bytes) < 0)
			return p->rc;
		if (!*f->name || strchr(f->name, '/') || !strcmp(f->name, ".") || !strcmp(f->name, ".."))
			return perr(p, ff[0].val, "files: '%s' is not a plain file name", f->name);
		for (size_t j = 0; j < i; j++)
			if (!strcmp(m->files[j].name, f->name))
				return perr(p, ff[0].val, "files: '%s' is listed twice", f->name);
		const char *h = ff[2].val->type == YAML_SCALAR_NODE ? sval(ff[2].val) : "";
		char *end = NULL;
		if (strlen(h) != 16 || strspn(h, "0123456789abcdef") != 16)
			return perr(p, ff[2].val, "files: '%s': xxh3 must be 16 lowercase hex digits",
				    f->name);
		f->xxh3 = strtoull(h, &end, 16);
	}
	if (top[F_WORLD].val)
		return parse_world(p, top[F_WORLD].val, m);
	return ST_OK;
}

void st_manifest_free(st_manifest_t *m)
{
	if (!m)
		return;
	free(m->job_name);
	free(m->job_hash);
	free(m->model);
	free(m->lineage);
	for (size_t i = 0; i < m->n_shards; i++)
		free(m->shards[i].file);
	free(m->shards);
	free(m->sync_policy);
	for (size_t i = 0; i < m->n_sync_state; i++) {
		free(m->sync_state[i].key);
		free(m->sync_state[i].value);
	}
	free(m->sync_state);
	free(m->rng);
	for (size_t i = 0; i < m->n_files; i++)
		free(m->files[i].name);
	free(m->files);
	for (size_t i = 0; i < m->n_parts; i++) {
		for (size_t j = 0; j < m->parts[i].n_files; j++)
			free(m->parts[i].files[j]);
		free(m->parts[i].files);
	}
	free(m->parts);
	free(m);
}

int st_manifest_parse(const char *text, size_t len, const char *name, st_manifest_t **out,
		      char *err, size_t errlen)
{
	*out = NULL;
	/* The checksum line: the last line, covering every byte before it. */
	size_t tl = strlen(TRAILER);
	size_t start = len;
	if (start && text[start - 1] == '\n')
		start--;
	while (start && text[start - 1] != '\n')
		start--;
	if (len - start < tl + 16 || memcmp(text + start, TRAILER, tl)) {
		st__dumpio_seterr(err, errlen, "%s: truncated or damaged: the last line must be "
				  "'" TRAILER "<16 hex digits>'", name);
		return ST_ECORRUPT;
	}
	char hex[17];
	memcpy(hex, text + start + tl, 16);
	hex[16] = 0;
	size_t rest = len - start - tl - 16;
	if (strspn(hex, "0123456789abcdef") != 16 || rest > 1 ||
	    (rest == 1 && text[len - 1] != '\n')) {
		st__dumpio_seterr(err, errlen, "%s: damaged checksum line", name);
		return ST_ECORRUPT;
	}
	uint64_t want = strtoull(hex, NULL, 16), got = XXH3_64bits(text, start);
	if (want != got) {
		st__dumpio_seterr(err, errlen, "%s: checksum mismatch: the manifest hashes to %016"
				  PRIx64 " but its last line says %016" PRIx64, name, got, want);
		return ST_ECORRUPT;
	}

	yaml_parser_t parser;
	yaml_document_t doc;
	if (!yaml_parser_initialize(&parser))
		return ST_ENOMEM;
	yaml_parser_set_input_string(&parser, (const unsigned char *)text, start);
	if (!yaml_parser_load(&parser, &doc)) {
		st__dumpio_seterr(err, errlen, "%s:%zu: invalid YAML: %s", name,
				  (size_t)parser.problem_mark.line + 1,
				  parser.problem ? parser.problem : "out of memory");
		int rc = parser.error == YAML_MEMORY_ERROR ? ST_ENOMEM : ST_EFORMAT;
		yaml_parser_delete(&parser);
		return rc;
	}
	st_manifest_t *m = calloc(1, sizeof *m);
	ps_t p = { .doc = &doc, .name = name, .err = err, .errlen = errlen, .rc = ST_OK };
	int rc = m ? parse_doc(&p, m) : ST_ENOMEM;
	if (rc == ST_OK) {
		/* one document only */
		yaml_document_t extra;
		if (yaml_parser_load(&parser, &extra)) {
			if (yaml_document_get_root_node(&extra))
				rc = perr(&p, NULL, "more than one YAML document");
			yaml_document_delete(&extra);
		}
	}
	yaml_document_delete(&doc);
	yaml_parser_delete(&parser);
	if (rc < 0) {
		if (rc == ST_ENOMEM)
			st__dumpio_seterr(err, errlen, "%s: out of memory", name);
		st_manifest_free(m);
		return rc;
	}
	*out = m;
	return ST_OK;
}

int st_manifest_read(const char *path, st_manifest_t **out, char *err, size_t errlen)
{
	uint8_t *buf;
	size_t len;
	*out = NULL;
	int rc = st__dumpio_read_all(path, (size_t)64 << 20, &buf, &len, err, errlen);
	if (rc < 0)
		return rc;
	rc = st_manifest_parse((const char *)buf, len, path, out, err, errlen);
	free(buf);
	return rc;
}

const st_manifest_file_t *st_manifest_find_file(const st_manifest_t *m, const char *name)
{
	for (size_t i = 0; i < m->n_files; i++)
		if (!strcmp(m->files[i].name, name))
			return &m->files[i];
	return NULL;
}

const char *st_manifest_sync_get(const st_manifest_t *m, const char *key)
{
	for (size_t i = 0; i < m->n_sync_state; i++)
		if (!strcmp(m->sync_state[i].key, key))
			return m->sync_state[i].value;
	return NULL;
}
