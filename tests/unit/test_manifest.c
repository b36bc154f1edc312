/* test_manifest.c — manifest.yaml: emit/parse round trips with awkward
 * strings, the checksum line, every rejection with its message and line,
 * truncation at every byte, and a cross-read with Python's yaml. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "dump_util.h"
#include "skip_util.h"
#include "ops/dump/manifest.h"
#include "runtime/err.h"

static char *dir;

static int setup(void **state)
{
	(void)state;
	dir = tu_mkdtemp("manifest");
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	st__dumpio_rmtree(dir);
	free(dir);
	return 0;
}

static st_manifest_shard_t shards[] = {
	{ 0, "data/train-00000.tsv", 123456789, 1000 },
	{ 1, "data/with space: and \"quotes\".tsv", 0, 0 },
};
static st_manifest_kv_t sync_state[] = {
	{ "round", "17" },
	{ "weights", "0.5,0.25" },
	{ "empty", "" },
	{ "multi\nline", "yes" },
};
static uint64_t rng[] = { 0, 1, UINT64_MAX, 0x9e3779b97f4a7c15ULL };
static st_manifest_file_t files[] = {
	{ "dense.safetensors", 4096, 0x0123456789abcdefULL },
	{ "table-0.rows", 0, 0 },
	{ "t\xc3\xa9st.rows", 1, UINT64_MAX },
};

static st_manifest_t full_manifest(void)
{
	st_manifest_t m = {
		.kind = ST_MANIFEST_CHECKPOINT,
		.job_name = "ctr: \"quoted\" #not-a-comment",
		.job_hash = "1e10",   /* would be a number to a careless YAML reader */
		.model = "wide_deep emb=16 mlp=[256,128] true null",
		.step = 123456,
		.seq = -1,
		.created = 1700000000,
		.shards = shards, .n_shards = 2,
		.sync_policy = "gba",
		.sync_state = sync_state, .n_sync_state = 4,
		.rng = rng, .n_rng = 4,
		.files = files, .n_files = 3,
	};
	return m;
}

static void assert_same(const st_manifest_t *a, const st_manifest_t *b)
{
	assert_int_equal(a->kind, b->kind);
	assert_string_equal(a->job_name, b->job_name);
	assert_string_equal(a->job_hash, b->job_hash);
	if (a->model)
		assert_string_equal(a->model, b->model);
	else
		assert_null(b->model);
	assert_int_equal(a->step, b->step);
	assert_int_equal(a->seq, b->seq);
	assert_int_equal(a->created, b->created);
	assert_int_equal(a->n_shards, b->n_shards);
	for (size_t i = 0; i < a->n_shards; i++) {
		assert_int_equal(a->shards[i].shard, b->shards[i].shard);
		assert_string_equal(a->shards[i].file, b->shards[i].file);
		assert_int_equal(a->shards[i].offset, b->shards[i].offset);
		assert_int_equal(a->shards[i].records, b->shards[i].records);
	}
	if (a->sync_policy)
		assert_string_equal(a->sync_policy, b->sync_policy);
	else
		assert_null(b->sync_policy);
	assert_int_equal(a->n_sync_state, b->n_sync_state);
	for (size_t i = 0; i < a->n_sync_state; i++) {
		assert_string_equal(a->sync_state[i].key, b->sync_state[i].key);
		assert_string_equal(a->sync_state[i].value, b->sync_state[i].value);
	}
	assert_int_equal(a->n_rng, b->n_rng);
	for (size_t i = 0; i < a->n_rng; i++)
		assert_true(a->rng[i] == b->rng[i]);
	assert_int_equal(a->n_files, b->n_files);
	for (size_t i = 0; i < a->n_files; i++) {
		assert_string_equal(a->files[i].name, b->files[i].name);
		assert_true(a->files[i].bytes == b->files[i].bytes);
		assert_true(a->files[i].xxh3 == b->files[i].xxh3);
	}
}

static void test_manifest_round_trip(void **state)
{
	(void)state;
	st_manifest_t m = full_manifest();
	char *text;
	size_t len = 0;
	char err[512] = "";
	assert_int_equal(st_manifest_emit(&m, &text, &len, err, sizeof err), ST_OK);
	assert_int_equal(strlen(text), len);
	assert_non_null(strstr(text, "format_version: 1\n"));
	assert_non_null(strstr(text, "created: 2023-11-14T22:13:20Z\n"));
	assert_non_null(strstr(text, "xxh3: \"0123456789abcdef\""));
	assert_non_null(strstr(text, "\n# manifest xxh3: "));
	st_manifest_t *p;
	int rc = st_manifest_parse(text, len, "m.yaml", &p, err, sizeof err);
	if (rc)
		fprintf(stderr, "%s\n%s\n", err, text);
	assert_int_equal(rc, ST_OK);
	assert_int_equal(p->format_version, 1);
	assert_same(&m, p);
	assert_string_equal(st_manifest_sync_get(p, "round"), "17");
	assert_null(st_manifest_sync_get(p, "nope"));
	assert_int_equal(st_manifest_find_file(p, "table-0.rows")->bytes, 0);
	assert_null(st_manifest_find_file(p, "nope"));
	st_manifest_free(p);
	free(text);

	/* minimal: no model, no positions, no sync, no rng, no files; an export */
	st_manifest_t e = { .kind = ST_MANIFEST_EXPORT_DELTA, .job_name = "j", .job_hash = "h",
			    .step = 0, .seq = 0, .created = 0 };
	assert_int_equal(st_manifest_emit(&e, &text, &len, err, sizeof err), ST_OK);
	assert_int_equal(st_manifest_parse(text, len, "e.yaml", &p, err, sizeof err), ST_OK);
	assert_same(&e, p);
	assert_string_equal(st_manifest_kind_name(p->kind), "export-delta");
	st_manifest_free(p);
	free(text);
}

static void test_manifest_file_write_and_read(void **state)
{
	(void)state;
	st_manifest_t m = full_manifest();
	char *path = tu_path(dir, "manifest.yaml");
	st_dumpio_sum_t sum;
	char err[512] = "";
	assert_int_equal(st_manifest_write(path, &m, &sum, err, sizeof err), ST_OK);
	st_manifest_t *p;
	assert_int_equal(st_manifest_read(path, &p, err, sizeof err), ST_OK);
	assert_same(&m, p);
	st_manifest_free(p);
	char *missing = tu_path(dir, "nope.yaml");
	assert_int_equal(st_manifest_read(missing, &p, err, sizeof err), ST_ENOENT);
	assert_non_null(strstr(err, "nope.yaml"));
	tu_disk_limit(10, 0);
	assert_int_equal(st_manifest_write(path, &m, NULL, err, sizeof err), ST_ENOSPC);
	tu_disk_unlimited();
	assert_false(tu_exists(path));
	free(missing);
	free(path);
}

static void test_manifest_emit_rejects_bad_input(void **state)
{
	(void)state;
	char *text;
	size_t len = 0;
	char err[512] = "";
	st_manifest_t m = full_manifest();
	m.job_hash = NULL;
	assert_int_equal(st_manifest_emit(&m, &text, &len, err, sizeof err), ST_EINVAL);
	assert_non_null(strstr(err, "the job hash is required"));
	m = full_manifest();
	st_manifest_file_t bad[1] = { { "../escape", 1, 1 } };
	m.files = bad;
	m.n_files = 1;
	assert_int_equal(st_manifest_emit(&m, &text, &len, err, sizeof err), ST_EINVAL);
	assert_non_null(strstr(err, "must be a plain name"));
	m = full_manifest();
	m.kind = ST_MANIFEST_EXPORT_FULL;
	m.seq = -1;
	assert_int_equal(st_manifest_emit(&m, &text, &len, err, sizeof err), ST_EINVAL);
	m = full_manifest();
	m.job_name = "bad \xff utf-8";
	assert_int_equal(st_manifest_emit(&m, &text, &len, err, sizeof err), ST_EINVAL);
	assert_non_null(strstr(err, "is not valid UTF-8"));
}

/* Seals hand-written YAML with its checksum line. */
static char *seal(const char *yaml, size_t *len)
{
	size_t n = strlen(yaml);
	char *t = malloc(n + 64);
	memcpy(t, yaml, n);
	*len = n + (size_t)sprintf(t + n, "# manifest xxh3: %016" PRIx64 "\n", XXH3_64bits(yaml, n));
	return t;
}

#define HEAD "format_version: 1\nkind: checkpoint\n"
#define JOB "job:\n  name: \"j\"\n  hash: \"h\"\n"
#define STEP "step: 10\ncreated: 2024-01-31T12:00:00Z\n"
#define FILES "files:\n  - name: \"a\"\n    bytes: 1\n    xxh3: \"0000000000000001\"\n"

static void test_manifest_rejects_bad_documents(void **state)
{
	(void)state;
	static const struct {
		const char *yaml;
		int code;
		const char *msg;
	} cases[] = {
		{ HEAD JOB STEP FILES, ST_OK, "" },
		{ "format_version: 2\nkind: checkpoint\nnew_field: 1\n", ST_EFORMAT,
		  "m.yaml:1: format_version 2 is not supported (this strata reads version 1)" },
		{ "format_version: one\n", ST_EFORMAT, "'one' is not a non-negative integer" },
		{ "kind: checkpoint\n" JOB STEP FILES, ST_EFORMAT,
		  "missing required field 'format_version'" },
		{ HEAD STEP FILES, ST_EFORMAT, "manifest: missing required field 'job'" },
		{ HEAD JOB FILES "created: 2024-01-31T12:00:00Z\n", ST_EFORMAT,
		  "missing required field 'step'" },
		{ HEAD JOB STEP, ST_EFORMAT, "missing required field 'files'" },
		{ HEAD "job:\n  name: \"j\"\n" STEP FILES, ST_EFORMAT,
		  "m.yaml:4: job: missing required field 'hash'" },
		{ HEAD "job:\n  name: \"j\"\n  hash: \"h\"\n  owner: x\n" STEP FILES, ST_EFORMAT,
		  "m.yaml:6: job: unknown field 'owner'" },
		{ HEAD JOB STEP FILES "extra: 1\n", ST_EFORMAT, "manifest: unknown field 'extra'" },
		{ HEAD JOB STEP FILES "step: 11\n", ST_EFORMAT, "field 'step' appears twice" },
		{ HEAD "job: [1]\n" STEP FILES, ST_EFORMAT, "job must be a mapping" },
		{ HEAD "job:\n  name: [x]\n  hash: \"h\"\n" STEP FILES, ST_EFORMAT,
		  "job: field 'name' must be a string" },
		{ HEAD JOB "step: -1\ncreated: 2024-01-31T12:00:00Z\n" FILES, ST_EFORMAT,
		  "'-1' is not a non-negative integer" },
		{ HEAD JOB "step: \"10\"\ncreated: 2024-01-31T12:00:00Z\n" FILES, ST_EFORMAT,
		  "field 'step' must be a plain integer" },
		{ HEAD JOB "step: 9223372036854775808\ncreated: 2024-01-31T12:00:00Z\n" FILES,
		  ST_EFORMAT, "9223372036854775808 is too large" },
		{ HEAD JOB "step: \ncreated: 2024-01-31T12:00:00Z\n" FILES, ST_EFORMAT,
		  "field 'step' is empty" },
		{ HEAD JOB "step: 1\ncreated: 2024-13-31T12:00:00Z\n" FILES, ST_EFORMAT,
		  "field 'created' must be a UTC time" },
		{ HEAD JOB "step: 1\ncreated: 2024-01-31 12:00:00\n" FILES, ST_EFORMAT,
		  "field 'created' must be a UTC time" },
		{ "format_version: 1\nkind: snapshot\n" JOB STEP FILES, ST_EFORMAT,
		  "field 'kind' must be checkpoint, export-full or export-delta" },
		{ "format_version: 1\nkind: export-full\n" JOB STEP FILES, ST_EFORMAT,
		  "missing required field 'seq' (exports have one)" },
		{ HEAD JOB STEP "seq: 1\n" FILES, ST_EFORMAT, "a checkpoint has no field 'seq'" },
		{ HEAD JOB STEP "files: {}\n", ST_EFORMAT, "files must be a list" },
		{ HEAD JOB STEP "files:\n  - name: \"a\"\n    bytes: 1\n", ST_EFORMAT,
		  "files entry: missing required field 'xxh3'" },
		{ HEAD JOB STEP "files:\n  - name: \"a\"\n    bytes: 1\n    xxh3: \"00000000000000zz\"\n",
		  ST_EFORMAT, "xxh3 must be 16 lowercase hex digits" },
		{ HEAD JOB STEP "files:\n  - name: \"a\"\n    bytes: 1\n    xxh3: \"01\"\n",
		  ST_EFORMAT, "xxh3 must be 16 lowercase hex digits" },
		{ HEAD JOB STEP "files:\n  - name: \"../a\"\n    bytes: 1\n    xxh3: \"0000000000000001\"\n",
		  ST_EFORMAT, "'../a' is not a plain file name" },
		{ HEAD JOB STEP FILES "  - name: \"a\"\n    bytes: 2\n    xxh3: \"0000000000000002\"\n",
		  ST_EFORMAT, "'a' is listed twice" },
		{ HEAD JOB STEP FILES "files_extra: 1\n", ST_EFORMAT, "unknown field 'files_extra'" },
		{ HEAD JOB STEP FILES "sync:\n  state: {}\n", ST_EFORMAT,
		  "sync: missing required field 'policy'" },
		{ HEAD JOB STEP FILES "sync:\n  policy: \"gba\"\n  state: [1]\n", ST_EFORMAT,
		  "sync: field 'state' must be a mapping of strings" },
		{ HEAD JOB STEP FILES "sync:\n  policy: \"gba\"\n  state: {a: [1]}\n", ST_EFORMAT,
		  "keys and values must be strings" },
		{ HEAD JOB STEP FILES "sync:\n  policy: \"gba\"\n  state: {a: \"1\", a: \"2\"}\n", ST_EFORMAT,
		  "sync state: key 'a' appears twice" },
		{ HEAD JOB STEP FILES "rng: [1, -2]\n", ST_EFORMAT, "'-2' is not a non-negative integer" },
		{ HEAD JOB STEP FILES "rng: 5\n", ST_EFORMAT, "rng must be a list" },
		{ HEAD JOB STEP FILES "rng: [18446744073709551616]\n", ST_EFORMAT, "is too large" },
		{ HEAD JOB STEP FILES "data_position:\n  - shard: 0\n    file: \"x\"\n    records: 1\n",
		  ST_EFORMAT, "data_position entry: missing required field 'offset'" },
		{ HEAD JOB STEP FILES "data_position: {}\n", ST_EFORMAT, "data_position must be a list" },
		{ HEAD JOB STEP FILES "data_position:\n  - 5\n", ST_EFORMAT,
		  "data_position entry must be a mapping" },
		{ "- 1\n- 2\n", ST_EFORMAT, "manifest must be a mapping" },
		{ "[1]: 2\n", ST_EFORMAT, "keys must be plain strings" },
		{ "", ST_EFORMAT, "empty manifest" },
		{ "a: [\n", ST_EFORMAT, "invalid YAML" },
		{ "a: b\n  c: d\n", ST_EFORMAT, "invalid YAML" },
		{ HEAD JOB STEP FILES "---\nb: 2\n", ST_EFORMAT, "more than one YAML document" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		size_t len;
		char *t = seal(cases[i].yaml, &len);
		st_manifest_t *m = NULL;
		char err[512] = "";
		int rc = st_manifest_parse(t, len, "m.yaml", &m, err, sizeof err);
		if (rc != cases[i].code || !strstr(err, cases[i].msg) ||
		    (rc == ST_OK) != (m != NULL) || (rc && strncmp(err, "m.yaml", 6))) {
			fprintf(stderr, "case %zu:\n%s-> rc %d '%s', wanted %d '%s'\n", i, cases[i].yaml,
				rc, err, cases[i].code, cases[i].msg);
			fail();
		}
		st_manifest_free(m);
		free(t);
	}
}

static void test_manifest_checksum_line(void **state)
{
	(void)state;
	st_manifest_t m = full_manifest();
	char *text;
	size_t len = 0;
	char err[512] = "";
	assert_int_equal(st_manifest_emit(&m, &text, &len, NULL, 0), ST_OK);
	st_manifest_t *p = NULL;
	/* any edited byte before the checksum line */
	for (size_t at = 0; at < len; at++) {
		char *t = malloc(len);
		memcpy(t, text, len);
		t[at] ^= 0x01;
		int rc = st_manifest_parse(t, len, "m.yaml", &p, err, sizeof err);
		if (rc != ST_ECORRUPT) {
			fprintf(stderr, "edit at %zu: rc %d '%s'\n", at, rc, err);
			fail();
		}
		free(t);
	}
	/* truncation at every byte (dropping only the final newline is fine) */
	for (size_t cut = 0; cut + 1 < len; cut++) {
		int rc = st_manifest_parse(text, cut, "m.yaml", &p, err, sizeof err);
		if (rc != ST_ECORRUPT) {
			fprintf(stderr, "cut at %zu: rc %d '%s'\n", cut, rc, err);
			fail();
		}
	}
	assert_int_equal(st_manifest_parse(text, len - 1, "m.yaml", &p, err, sizeof err), ST_OK);
	st_manifest_free(p);
	/* the messages */
	const char *no_line = HEAD JOB STEP FILES;
	assert_int_equal(st_manifest_parse(no_line, strlen(no_line), "m.yaml", &p, err, sizeof err),
			 ST_ECORRUPT);
	assert_non_null(strstr(err, "m.yaml: truncated or damaged: the last line must be "
				    "'# manifest xxh3: <16 hex digits>'"));
	char *t = malloc(len + 8);   /* room for the longer line below */
	memcpy(t, text, len + 1);
	char *h = strstr(t, "# manifest xxh3: ") + 17;
	*h = *h == '0' ? '1' : '0';
	assert_int_equal(st_manifest_parse(t, len, "m.yaml", &p, err, sizeof err), ST_ECORRUPT);
	assert_non_null(strstr(err, "m.yaml: checksum mismatch"));
	strcpy(h + 16, " x\n");
	assert_int_equal(st_manifest_parse(t, strlen(t), "m.yaml", &p, err, sizeof err), ST_ECORRUPT);
	assert_non_null(strstr(err, "damaged checksum line"));
	free(t);
	free(text);
}

/* Python's yaml reads the same values (the checksum line is a comment). */
static const char py_yaml[] =
	"import sys\n"
	"try:\n"
	"    import yaml\n"
	"except ImportError:\n"
	"    print('skip: python has no yaml'); sys.exit(77)\n"
	"m = yaml.safe_load(open(sys.argv[1], encoding='utf-8'))\n"
	"assert m['format_version'] == 1 and m['kind'] == 'checkpoint', m\n"
	"assert m['job']['hash'] == '1e10' and m['job']['name'] == 'ctr: \"quoted\" #not-a-comment'\n"
	"assert m['step'] == 123456\n"
	"assert m['rng'] == [0, 1, 2**64 - 1, 0x9e3779b97f4a7c15], m['rng']\n"
	"assert m['data_position'][1]['file'] == 'data/with space: and \"quotes\".tsv'\n"
	"assert m['data_position'][0]['offset'] == 123456789\n"
	"assert m['sync']['state']['multi\\nline'] == 'yes' and m['sync']['state']['empty'] == ''\n"
	"assert [f['name'] for f in m['files']] == ['dense.safetensors', 'table-0.rows', 't\\u00e9st.rows']\n"
	"assert int(m['files'][0]['xxh3'], 16) == 0x0123456789abcdef\n"
	"print('python yaml reads the manifest')\n";

static void test_manifest_python_yaml_reads_it(void **state)
{
	(void)state;
	if (!tu_python())
		TU_SKIP("no python3 (or $ST_PYTHON) to read the manifest with yaml");
	st_manifest_t m = full_manifest();
	char *path = tu_path(dir, "py.yaml");
	assert_int_equal(st_manifest_write(path, &m, NULL, NULL, 0), ST_OK);
	char args[4200];
	snprintf(args, sizeof args, "'%s'", path);
	int rc = tu_run_python(dir, "check_yaml.py", py_yaml, args);
	free(path);
	if (rc == 77)
		TU_SKIP("%s has no yaml module to read the manifest with", tu_python());
	assert_int_equal(rc, 0);
}

/* job.lineage: written when set, read back; a manifest without it (all
 * manifests before lineages existed) reads as lineage NULL; a lineage that
 * is not a string is refused. */
static void test_manifest_lineage(void **state)
{
	(void)state;
	st_manifest_t e = { .kind = ST_MANIFEST_EXPORT_FULL, .job_name = "j", .job_hash = "h",
			    .lineage = "00ff00ff00ff00ff", .step = 3, .seq = 0, .created = 0 };
	char *text;
	size_t len = 0;
	char err[512] = "";
	assert_int_equal(st_manifest_emit(&e, &text, &len, err, sizeof err), ST_OK);
	assert_non_null(strstr(text, "  lineage: \"00ff00ff00ff00ff\"\n"));
	st_manifest_t *p;
	assert_int_equal(st_manifest_parse(text, len, "l.yaml", &p, err, sizeof err), ST_OK);
	assert_string_equal(p->lineage, "00ff00ff00ff00ff");
	st_manifest_free(p);
	free(text);
	e.lineage = NULL;
	assert_int_equal(st_manifest_emit(&e, &text, &len, err, sizeof err), ST_OK);
	assert_null(strstr(text, "lineage"));
	assert_int_equal(st_manifest_parse(text, len, "old.yaml", &p, err, sizeof err), ST_OK);
	assert_null(p->lineage);
	st_manifest_free(p);
	free(text);
}

/* world: a multi-process checkpoint's world size, owner function and
 * per-rank parts round-trip; a manifest without it reads as world size 0
 * (one process) and is complete; a missing part, a part listed twice or a
 * part file that is not among the files makes it incomplete. */
static void test_manifest_world(void **state)
{
	(void)state;
	st_manifest_file_t wf[] = { { "dense.safetensors", 10, 1 },
				    { "table-0.rank-0-of-2.rows", 20, 2 },
				    { "table-0.rank-1-of-2.rows", 30, 3 } };
	char *f0[] = { "table-0.rank-0-of-2.rows" }, *f1[] = { "table-0.rank-1-of-2.rows" };
	st_manifest_part_t parts[] = { { 0, f0, 1 }, { 1, f1, 1 } };
	st_manifest_t m = { .kind = ST_MANIFEST_CHECKPOINT, .job_name = "j", .job_hash = "h",
			    .step = 8, .seq = -1, .created = 0, .files = wf, .n_files = 3,
			    .world_size = 2, .owners = 2, .owner_salt = 0x6a09e667f3bcc909ULL,
			    .parts = parts, .n_parts = 2 };
	char *text;
	size_t len = 0;
	char err[512] = "";
	assert_int_equal(st_manifest_emit(&m, &text, &len, err, sizeof err), ST_OK);
	assert_non_null(strstr(text, "owner_salt: \"6a09e667f3bcc909\""));
	st_manifest_t *p;
	assert_int_equal(st_manifest_parse(text, len, "w.yaml", &p, err, sizeof err), ST_OK);
	assert_same(&m, p);
	assert_int_equal(p->world_size, 2);
	assert_int_equal(p->owners, 2);
	assert_true(p->owner_salt == 0x6a09e667f3bcc909ULL);
	assert_int_equal(p->n_parts, 2);
	assert_int_equal(p->parts[1].rank, 1);
	assert_int_equal(p->parts[1].n_files, 1);
	assert_string_equal(p->parts[1].files[0], "table-0.rank-1-of-2.rows");
	assert_int_equal(st_manifest_check_world(p, err, sizeof err), ST_OK);
	st_manifest_free(p);
	free(text);

	/* rank 1 never reported: incomplete */
	m.n_parts = 1;
	assert_int_equal(st_manifest_check_world(&m, err, sizeof err), ST_ECORRUPT);
	assert_non_null(strstr(err, "rank 1 of 2 wrote no shard"));
	/* rank 0 twice */
	st_manifest_part_t twice[] = { { 0, f0, 1 }, { 0, f0, 1 } };
	m.parts = twice;
	m.n_parts = 2;
	assert_int_equal(st_manifest_check_world(&m, err, sizeof err), ST_ECORRUPT);
	assert_non_null(strstr(err, "listed twice"));
	/* a part's file that the manifest does not list */
	m.parts = parts;
	m.n_files = 2;
	assert_int_equal(st_manifest_check_world(&m, err, sizeof err), ST_ECORRUPT);
	assert_non_null(strstr(err, "table-0.rank-1-of-2.rows"));

	/* no world: a one-process manifest, complete, read as world size 0 */
	st_manifest_t o = { .kind = ST_MANIFEST_CHECKPOINT, .job_name = "j", .job_hash = "h",
			    .step = 1, .seq = -1, .created = 0 };
	assert_int_equal(st_manifest_emit(&o, &text, &len, err, sizeof err), ST_OK);
	assert_null(strstr(text, "world"));
	assert_int_equal(st_manifest_parse(text, len, "o.yaml", &p, err, sizeof err), ST_OK);
	assert_int_equal(p->world_size, 0);
	assert_int_equal(st_manifest_check_world(p, err, sizeof err), ST_OK);
	st_manifest_free(p);
	free(text);

	/* owners above the world size: refused */
	const char *bad = "format_version: 1\nkind: checkpoint\njob: {name: j, hash: h}\n"
			  "step: 1\ncreated: 2024-01-01T00:00:00Z\nfiles: []\n"
			  "world: {size: 2, owners: 3, owner_salt: \"0000000000000000\", parts: []}\n";
	char doc[1024];
	int n = snprintf(doc, sizeof doc, "%s# manifest xxh3: %016" PRIx64 "\n", bad,
			 (uint64_t)XXH3_64bits(bad, strlen(bad)));
	assert_int_equal(st_manifest_parse(doc, (size_t)n, "b.yaml", &p, err, sizeof err),
			 ST_EFORMAT);
	assert_non_null(strstr(err, "owners at most size"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_manifest_round_trip),
		cmocka_unit_test(test_manifest_file_write_and_read),
		cmocka_unit_test(test_manifest_emit_rejects_bad_input),
		cmocka_unit_test(test_manifest_rejects_bad_documents),
		cmocka_unit_test(test_manifest_checksum_line),
		cmocka_unit_test(test_manifest_python_yaml_reads_it),
		cmocka_unit_test(test_manifest_lineage),
		cmocka_unit_test(test_manifest_world),
	};
	return tu_exit(cmocka_run_group_tests(tests, setup, teardown),
		       sizeof tests / sizeof tests[0]);
}
