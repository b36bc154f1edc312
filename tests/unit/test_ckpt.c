/* test_ckpt.c — checkpoint and export directories: write/commit/verify round
 * trip, retention, fallback past missing, damaged and truncated files, a full
 * disk at every stage (also in a row file large enough for dumpio's writer
 * thread), crash leftovers, rewriting a step, the compatibility check, and
 * export chains, and the two-phase commit of a multi-process checkpoint. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "dump_util.h"
#include "ops/dump/ckpt.h"
#include "runtime/err.h"

static char *root;

static int setup_one(void **state)
{
	(void)state;
	char *base = tu_mkdtemp("ckpt");
	root = tu_path(base, "run/nested");   /* begin creates missing parents */
	free(base);
	return 0;
}

static int teardown_one(void **state)
{
	(void)state;
	char *base = strdup(root);
	*strrchr(base, '/') = 0;
	*strrchr(base, '/') = 0;
	st__dumpio_rmtree(base);
	free(base);
	free(root);
	return 0;
}

/* Messages from the loaders, one per line. */
static char msgs[8192];

static void collect(void *arg, const char *msg)
{
	(void)arg;
	strncat(msgs, msg, sizeof msgs - strlen(msgs) - 2);
	strcat(msgs, "\n");
}

static float dense_w[6] = { 1, 2, 3, 4, 5, 6 };
static float row_vals[3][4] = { { 1, 2, 3, 4 }, { 5, 6, 7, 8 }, { 9, 10, 11, 12 } };

static st_manifest_t job_manifest(void)
{
	static st_manifest_shard_t shards[1] = { { 0, "data/train.tsv", 4096, 100 } };
	static st_manifest_kv_t st[1] = { { "round", "3" } };
	static uint64_t rng[2] = { 11, 22 };
	st_manifest_t m = {
		.job_name = "testjob", .job_hash = "hash-1", .model = "lr dim=2",
		.shards = shards, .n_shards = 1, .sync_policy = "gba", .sync_state = st,
		.n_sync_state = 1, .rng = rng, .n_rng = 2,
	};
	return m;
}

/* Writes a whole checkpoint (dense + a row table) at step; returns ST_E*. */
static int write_ckpt(int64_t step, int keep)
{
	st_ckpt_writer_t *w;
	char err[512] = "";
	int rc = st_ckpt_begin(root, step, &w, err, sizeof err);
	if (rc < 0)
		return rc;
	st_safetensors_tensor_t t = { .name = "w", .ndim = 2, .shape = { 2, 3 }, .f32 = dense_w };
	dense_w[0] = (float)step;   /* so each checkpoint differs */
	st_rows_row_t rows[3] = {
		{ 30, 1, 1, row_vals[2] }, { 10, 2, 2, row_vals[0] }, { 20, 3, 3, row_vals[1] },
	};
	st_rows_info_t info = { .table_id = 0, .dim = 2, .state_dim = 2 };
	st_manifest_t m = job_manifest();
	if ((rc = st_ckpt_write_dense(w, "dense.safetensors", &t, 1, NULL, 0)) == ST_OK &&
	    (rc = st_ckpt_write_rows(w, "table-0.rows", &info, rows, 3, NULL, 0)) == ST_OK)
		rc = st_ckpt_commit(w, &m, keep, collect, NULL);
	st_ckpt_writer_destroy(w);
	return rc;
}

static char *ckpt_dir(int64_t step)
{
	char name[64];
	snprintf(name, sizeof name, "ckpt-%012lld", (long long)step);
	return tu_path(root, name);
}

/* Names in root, sorted, joined by spaces. */
static char *listing(void)
{
	static char out[4096];
	out[0] = 0;
	struct dirent **de;
	int n = scandir(root, &de, NULL, alphasort);
	for (int i = 0; i < n; i++) {
		if (de[i]->d_name[0] != '.') {
			strcat(out, de[i]->d_name);
			strcat(out, " ");
		}
		free(de[i]);
	}
	if (n >= 0)
		free(de);
	return out;
}

static void test_ckpt_write_commit_and_load(void **state)
{
	(void)state;
	st_ckpt_writer_t *w;
	char err[512] = "";
	assert_int_equal(st_ckpt_begin(root, 1000, &w, err, sizeof err), ST_OK);
	assert_non_null(strstr(st_ckpt_writer_tmpdir(w), "/ckpt-000000001000.tmp"));
	assert_non_null(strstr(st_ckpt_writer_dir(w), "/ckpt-000000001000"));
	st_safetensors_tensor_t t = { .name = "w", .ndim = 2, .shape = { 2, 3 }, .f32 = dense_w };
	st_kv_t meta = { "format", "pt" };
	assert_int_equal(st_ckpt_write_dense(w, "dense.safetensors", &t, 1, &meta, 1), ST_OK);
	st_rows_row_t rows[2] = { { 20, 3, 3, row_vals[1] }, { 10, 2, 2, row_vals[0] } };
	st_rows_info_t info = { .table_id = 0, .dim = 2, .state_dim = 2 };
	assert_int_equal(st_ckpt_write_rows(w, "table-0.rows", &info, rows, 2, NULL, 0), ST_OK);
	st_rows_info_t i1 = { .table_id = 1, .dim = 4 };
	st_rows_writer_t *b;
	assert_int_equal(st_rows_writer_create(&b, &i1), ST_OK);
	assert_int_equal(st_rows_writer_add(b, 7, 1, 1, row_vals[2]), ST_OK);
	assert_int_equal(st_ckpt_write_rows_from(w, "table-1.rows", b), ST_OK);
	st_rows_writer_destroy(b);
	char *own = tu_path(st_ckpt_writer_tmpdir(w), "notes.txt");
	tu_write(own, "hello\n", 6);
	free(own);
	assert_int_equal(st_ckpt_add_file(w, "notes.txt"), ST_OK);
	/* nothing is visible before the commit */
	st_ckpt_entry_t *e;
	size_t n;
	assert_int_equal(st_ckpt_list(root, &e, &n, err, sizeof err), ST_OK);
	assert_int_equal(n, 0);
	st_manifest_t m = job_manifest();
	m.created = 1700000000;
	assert_int_equal(st_ckpt_commit(w, &m, 3, collect, NULL), ST_OK);
	assert_int_equal(st_ckpt_commit(w, &m, 3, collect, NULL), ST_EINVAL);   /* twice */
	st_ckpt_writer_destroy(w);
	assert_string_equal(listing(), "ckpt-000000001000 ");

	char *dir;
	st_manifest_t *lm;
	msgs[0] = 0;
	assert_int_equal(st_ckpt_find_latest(root, &dir, &lm, collect, NULL, err, sizeof err), ST_OK);
	assert_string_equal(msgs, "");
	char *want = ckpt_dir(1000);
	assert_string_equal(dir, want);
	assert_int_equal(lm->kind, ST_MANIFEST_CHECKPOINT);
	assert_int_equal(lm->step, 1000);
	assert_int_equal(lm->created, 1700000000);
	assert_string_equal(lm->job_name, "testjob");
	assert_string_equal(lm->shards[0].file, "data/train.tsv");
	assert_int_equal(lm->shards[0].offset, 4096);
	assert_string_equal(st_manifest_sync_get(lm, "round"), "3");
	assert_int_equal(lm->rng[1], 22);
	assert_int_equal(lm->n_files, 4);
	assert_string_equal(lm->files[3].name, "notes.txt");
	assert_int_equal(lm->files[3].bytes, 6);
	/* the data reads back */
	char *p = tu_path(dir, "table-0.rows");
	st_rows_file_t *rf;
	assert_int_equal(st_rows_read(p, &rf, err, sizeof err), ST_OK);
	assert_int_equal(rf->info.flags, 0);
	assert_int_equal(rf->keys[0], 10);
	assert_true(rf->vals[4] == 5.0f);
	st_rows_file_free(rf);
	free(p);
	p = tu_path(dir, "dense.safetensors");
	st_safetensors_t *sf;
	assert_int_equal(st_safetensors_read(p, &sf, err, sizeof err), ST_OK);
	assert_memory_equal(st_safetensors_find(sf, "w")->f32, dense_w, sizeof dense_w);
	st_safetensors_free(sf);
	free(p);
	st_manifest_free(lm);
	free(dir);
	free(want);
}

static void test_ckpt_retention_keeps_newest(void **state)
{
	(void)state;
	for (int s = 1; s <= 5; s++)
		assert_int_equal(write_ckpt(s * 100, 0), ST_OK);
	assert_string_equal(listing(), "ckpt-000000000100 ckpt-000000000200 ckpt-000000000300 "
				       "ckpt-000000000400 ckpt-000000000500 ");
	assert_int_equal(write_ckpt(600, 3), ST_OK);
	assert_string_equal(listing(), "ckpt-000000000400 ckpt-000000000500 ckpt-000000000600 ");
	/* an older step written late is still ordered by step */
	assert_int_equal(write_ckpt(50, 3), ST_OK);
	assert_string_equal(listing(), "ckpt-000000000400 ckpt-000000000500 ckpt-000000000600 ");
	st_ckpt_entry_t *e;
	size_t n;
	assert_int_equal(st_ckpt_list(root, &e, &n, NULL, 0), ST_OK);
	assert_int_equal(n, 3);
	assert_int_equal(e[0].num, 600);
	assert_string_equal(e[2].name, "ckpt-000000000400");
	st_ckpt_entries_free(e, n);
}

static void corrupt_byte(const char *path, long at)
{
	FILE *f = fopen(path, "r+b");
	fseek(f, at, SEEK_SET);
	int c = fgetc(f);
	fseek(f, at, SEEK_SET);
	fputc(c ^ 0x10, f);
	fclose(f);
}

static void test_ckpt_falls_back_past_damage(void **state)
{
	(void)state;
	for (int s = 1; s <= 4; s++)
		assert_int_equal(write_ckpt(s * 100, 0), ST_OK);
	char *d4 = ckpt_dir(400), *d3 = ckpt_dir(300), *d2 = ckpt_dir(200), *d1 = ckpt_dir(100);
	char *p4 = tu_path(d4, "table-0.rows"), *p3 = tu_path(d3, "dense.safetensors");
	char *p2 = tu_path(d2, "table-0.rows"), *m1 = tu_path(d1, "manifest.yaml");
	corrupt_byte(p4, 70);           /* a flipped bit: checksum */
	unlink(p3);                     /* a lost file */
	assert_int_equal(truncate(p2, 50), 0);   /* a short file */
	char err[512] = "";
	char *dir;
	st_manifest_t *m;
	msgs[0] = 0;
	assert_int_equal(st_ckpt_find_latest(root, &dir, &m, collect, NULL, err, sizeof err), ST_OK);
	assert_string_equal(dir, d1);
	assert_int_equal(m->step, 100);
	st_manifest_free(m);
	free(dir);
	printf("%s", msgs);
	assert_non_null(strstr(msgs, "checkpoint ckpt-000000000400: file 'table-0.rows': checksum "
				     "mismatch (the manifest says xxh3 "));
	assert_non_null(strstr(msgs, ") — falling back to ckpt-000000000300\n"));
	assert_non_null(strstr(msgs, "checkpoint ckpt-000000000300: file 'dense.safetensors': missing "
				     "— falling back to ckpt-000000000200\n"));
	assert_non_null(strstr(msgs, "checkpoint ckpt-000000000200: file 'table-0.rows': size mismatch "
				     "(the manifest says 192 bytes, the file has 50) — falling back to "
				     "ckpt-000000000100\n"));
	/* verify alone says the same */
	assert_int_equal(st_ckpt_verify(d4, NULL, err, sizeof err), ST_ECORRUPT);
	assert_non_null(strstr(err, "file 'table-0.rows': checksum mismatch"));
	assert_int_equal(st_ckpt_verify(d3, NULL, err, sizeof err), ST_ENOENT);

	/* then the manifest of the last one is damaged: nothing verifies */
	corrupt_byte(m1, 20);
	msgs[0] = 0;
	assert_int_equal(st_ckpt_find_latest(root, &dir, &m, collect, NULL, err, sizeof err), ST_ENOENT);
	assert_null(dir);
	assert_null(m);
	assert_non_null(strstr(err, "none of the 4 checkpoints verifies"));
	assert_non_null(strstr(msgs, "checkpoint ckpt-000000000100: "));
	assert_non_null(strstr(msgs, "manifest.yaml: checksum mismatch"));
	assert_non_null(strstr(msgs, "— no older checkpoint left"));
	free(d4), free(d3), free(d2), free(d1), free(p4), free(p3), free(p2), free(m1);
}

static int defer_rows(void *arg, const st_manifest_t *m, const st_manifest_file_t *f)
{
	(void)m;
	++*(int *)arg;
	return !strcmp(f->name, "table-0.rows");
}

/* Single-pass restore (docs/operations.md, "Restore in one pass"): the
 * deferred row files are checked by size only, so a flipped bit is not found by the choice; the
 * loader finds it (its reader's sum against the manifest, with
 * verify_file's message) and rejects the checkpoint, which is reported as
 * a failed verification and passed over. A short deferred file is still
 * found up front. */
static void test_ckpt_find_defers_and_rejects(void **state)
{
	(void)state;
	for (int s = 1; s <= 3; s++)
		assert_int_equal(write_ckpt(s * 100, 0), ST_OK);
	char *d3 = ckpt_dir(300), *d2 = ckpt_dir(200), *d1 = ckpt_dir(100);
	char *p3 = tu_path(d3, "table-0.rows"), *p2 = tu_path(d2, "table-0.rows");
	corrupt_byte(p3, 192 - 33);     /* the last float of the last row */
	assert_int_equal(truncate(p2, 100), 0);
	int calls = 0;
	st_ckpt_find_opts_t o = { .defer = defer_rows, .defer_arg = &calls };
	char err[512] = "", why[512] = "";
	char *dir;
	st_manifest_t *m;
	msgs[0] = 0;
	assert_int_equal(st_ckpt_find_latest_opts(root, &o, &dir, &m, collect, NULL, err, sizeof err),
			 ST_OK);
	assert_string_equal(dir, d3);
	assert_true(calls >= 2);
	assert_string_equal(msgs, "");
	/* the loader's verdict: the same words as st_ckpt_verify_file's */
	const st_manifest_file_t *f = NULL;
	for (size_t i = 0; i < m->n_files; i++)
		if (!strcmp(m->files[i].name, "table-0.rows"))
			f = &m->files[i];
	assert_non_null(f);
	st_rows_reader_t *r;
	assert_int_equal(st_rows_reader_open(p3, &r, err, sizeof err), ST_OK);
	st_rows_row_t rows[4];
	while (st_rows_reader_next_batch(r, rows, 4) > 0)
		;
	st_dumpio_sum_t sum;
	assert_int_equal(st_rows_reader_sum(r, &sum), ST_OK);
	st_rows_reader_close(r);
	assert_int_equal(st_ckpt_check_sum(f, &sum, why, sizeof why), ST_ECORRUPT);
	assert_int_equal(st_ckpt_verify_file(d3, f, err, sizeof err), ST_ECORRUPT);
	assert_string_equal(why, err);
	assert_int_equal(st_ckpt_check_size(d3, f, err, sizeof err), ST_OK);
	st_manifest_free(m);
	free(dir);

	o.rejected = "ckpt-000000000300";
	o.rejected_step = 300;
	o.why = why;
	assert_int_equal(st_ckpt_find_latest_opts(root, &o, &dir, &m, collect, NULL, err, sizeof err),
			 ST_OK);
	assert_string_equal(dir, d1);
	printf("%s", msgs);
	char want[1024];
	snprintf(want, sizeof want, "checkpoint ckpt-000000000300: %s — falling back to "
		 "ckpt-000000000200\n", why);
	assert_non_null(strstr(msgs, want));
	assert_non_null(strstr(msgs, "checkpoint ckpt-000000000200: file 'table-0.rows': size mismatch "
				     "(the manifest says 192 bytes, the file has 100) — falling back to "
				     "ckpt-000000000100\n"));
	st_manifest_free(m);
	free(dir);

	/* the oldest rejected too: nothing left, said as find_latest says it */
	o.rejected = "ckpt-000000000100";
	o.rejected_step = 100;
	msgs[0] = 0;
	assert_int_equal(st_ckpt_find_latest_opts(root, &o, &dir, &m, collect, NULL, err, sizeof err),
			 ST_ENOENT);
	assert_null(dir);
	assert_non_null(strstr(msgs, "checkpoint ckpt-000000000100: file 'table-0.rows': checksum "
				     "mismatch (the manifest says xxh3 "));
	assert_non_null(strstr(msgs, "— no older checkpoint left\n"));
	free(d3), free(d2), free(d1), free(p3), free(p2);
}

static void test_ckpt_empty_or_missing_root(void **state)
{
	(void)state;
	char err[512] = "";
	char *dir;
	st_manifest_t *m;
	assert_int_equal(st_ckpt_find_latest(root, &dir, &m, collect, NULL, err, sizeof err), ST_ENOENT);
	assert_non_null(strstr(err, "no complete checkpoint"));
	st_ckpt_entry_t *e;
	size_t n = 5;
	assert_int_equal(st_ckpt_list(root, &e, &n, err, sizeof err), ST_OK);
	assert_int_equal(n, 0);
	assert_null(e);
	assert_int_equal(st_ckpt_list_exports(root, 1, &e, &n, collect, NULL, err, sizeof err), ST_OK);
	assert_int_equal(n, 0);
}

/* A full disk at any point of writing returns ST_ENOSPC, removes the .tmp
 * directory and leaves the older checkpoint as it was. */
static void test_ckpt_disk_full_keeps_older(void **state)
{
	(void)state;
	assert_int_equal(write_ckpt(100, 2), ST_OK);
	char *d1 = ckpt_dir(100);
	char err[512] = "";
	assert_int_equal(st_ckpt_verify(d1, NULL, err, sizeof err), ST_OK);
	/* bytes available: during the dense file, the row file, the manifest */
	long long limits[] = { 0, 30, 100, 200, 300, 400, 500 };
	for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++) {
		tu_disk_limit(limits[i], 0);
		int rc = write_ckpt(200, 2);
		tu_disk_unlimited();
		assert_int_equal(rc, ST_ENOSPC);
		assert_string_equal(listing(), "ckpt-000000000100 ");
		assert_int_equal(st_ckpt_verify(d1, NULL, err, sizeof err), ST_OK);
	}
	/* fsync reports the full disk (delayed allocation): on a file, or on the
	 * .tmp directory just before the rename */
	for (int mode = 1; mode <= 2; mode++) {
		tu_disk_limit(-1, mode);
		int rc = write_ckpt(200, 2);
		tu_disk_unlimited();
		assert_int_equal(rc, ST_ENOSPC);
		assert_string_equal(listing(), "ckpt-000000000100 ");
	}

	/* the error text and later calls of a failed writer */
	st_ckpt_writer_t *w;
	assert_int_equal(st_ckpt_begin(root, 300, &w, err, sizeof err), ST_OK);
	st_safetensors_tensor_t t = { .name = "w", .ndim = 1, .shape = { 6 }, .f32 = dense_w };
	tu_disk_limit(8, 0);
	assert_int_equal(st_ckpt_write_dense(w, "dense.safetensors", &t, 1, NULL, 0), ST_ENOSPC);
	tu_disk_unlimited();
	assert_non_null(strstr(st_ckpt_error(w), "dense.safetensors: write failed: No space left on device"));
	assert_false(tu_exists(st_ckpt_writer_tmpdir(w)));
	assert_int_equal(st_ckpt_write_dense(w, "other.safetensors", &t, 1, NULL, 0), ST_ENOSPC);
	st_manifest_t m = job_manifest();
	assert_int_equal(st_ckpt_commit(w, &m, 2, collect, NULL), ST_ENOSPC);
	st_ckpt_writer_destroy(w);
	/* the manifest is the file that does not fit */
	assert_int_equal(st_ckpt_begin(root, 300, &w, err, sizeof err), ST_OK);
	assert_int_equal(st_ckpt_write_dense(w, "dense.safetensors", &t, 1, NULL, 0), ST_OK);
	tu_disk_limit(100, 0);
	assert_int_equal(st_ckpt_commit(w, &m, 2, collect, NULL), ST_ENOSPC);
	tu_disk_unlimited();
	assert_non_null(strstr(st_ckpt_error(w), "manifest.yaml: write failed"));
	assert_false(tu_exists(st_ckpt_writer_tmpdir(w)));
	st_ckpt_writer_destroy(w);
	assert_string_equal(listing(), "ckpt-000000000100 ");
	/* and with space back, the next checkpoint works */
	assert_int_equal(write_ckpt(200, 2), ST_OK);
	assert_string_equal(listing(), "ckpt-000000000100 ckpt-000000000200 ");
	free(d1);
}

/* A row table larger than one 8 MiB staging buffer is written by dumpio's
 * writer thread (as the trainer's checkpoints are, from a builder). The
 * file size limit (EFBIG) or a full disk hit in the middle of it fails the
 * checkpoint with the file's name and the reason, removes the .tmp
 * directory, and leaves the older checkpoint the newest one, intact. */
static void test_ckpt_large_table_write_failure_keeps_older(void **state)
{
	(void)state;
	assert_int_equal(write_ckpt(100, 2), ST_OK);
	enum { N = 300000, NF = 6 };   /* 300000 rows of 40 bytes: 12 MB */
	float *vals = malloc(sizeof(float) * N * NF);
	assert_non_null(vals);
	for (size_t i = 0; i < (size_t)N * NF; i++)
		vals[i] = (float)i;
	st_rows_info_t info = { .table_id = 0, .dim = 4, .state_dim = 2 };
	st_rows_writer_t *b;
	assert_int_equal(st_rows_writer_create(&b, &info), ST_OK);
	for (size_t i = 0; i < N; i++)
		assert_int_equal(st_rows_writer_add(b, (i * 7919) % N + 1, 1, 1, vals + i * NF), ST_OK);
	st_safetensors_tensor_t t = { .name = "w", .ndim = 2, .shape = { 2, 3 }, .f32 = dense_w };
	st_manifest_t m = job_manifest();
	char err[512] = "";
	void (*old_sig)(int) = signal(SIGXFSZ, SIG_IGN);
	struct rlimit old;
	assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
	for (int how = 0; how < 2; how++) {
		st_ckpt_writer_t *w;
		assert_int_equal(st_ckpt_begin(root, 200, &w, err, sizeof err), ST_OK);
		assert_int_equal(st_ckpt_write_dense(w, "dense.safetensors", &t, 1, NULL, 0), ST_OK);
		struct rlimit lim = { 10 << 20, old.rlim_max };
		if (how == 0)
			assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
		else
			tu_disk_limit(9 << 20, 0);
		int rc = st_ckpt_write_rows_from(w, "table-0.rows", b);
		if (how == 0)
			assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
		else
			tu_disk_unlimited();
		assert_int_equal(rc, how == 0 ? -EFBIG : ST_ENOSPC);
		assert_non_null(strstr(st_ckpt_error(w), how == 0 ? "table-0.rows: write failed: File too large"
								 : "table-0.rows: write failed: No space left on device"));
		assert_false(tu_exists(st_ckpt_writer_tmpdir(w)));
		assert_int_equal(st_ckpt_commit(w, &m, 2, collect, NULL), rc);
		st_ckpt_writer_destroy(w);
		assert_string_equal(listing(), "ckpt-000000000100 ");
		char *d1 = ckpt_dir(100);
		assert_int_equal(st_ckpt_verify(d1, NULL, err, sizeof err), ST_OK);
		free(d1);
	}
	signal(SIGXFSZ, old_sig);
	/* without the limit the same builder makes a checkpoint */
	st_ckpt_writer_t *w;
	assert_int_equal(st_ckpt_begin(root, 200, &w, err, sizeof err), ST_OK);
	assert_int_equal(st_ckpt_write_dense(w, "dense.safetensors", &t, 1, NULL, 0), ST_OK);
	assert_int_equal(st_ckpt_write_rows_from(w, "table-0.rows", b), ST_OK);
	assert_int_equal(st_ckpt_commit(w, &m, 2, collect, NULL), ST_OK);
	st_ckpt_writer_destroy(w);
	assert_string_equal(listing(), "ckpt-000000000100 ckpt-000000000200 ");
	char *d2 = ckpt_dir(200);
	assert_int_equal(st_ckpt_verify(d2, NULL, err, sizeof err), ST_OK);
	free(d2);
	st_rows_writer_destroy(b);
	free(vals);
}

/* A crash leaves a .tmp directory (possibly with a manifest in it): loaders
 * ignore it, the next writer deletes it. Directories without a manifest or
 * with foreign names are never listed. */
static void test_ckpt_crash_leftovers(void **state)
{
	(void)state;
	assert_int_equal(write_ckpt(100, 0), ST_OK);
	/* a checkpoint that "crashed" just before its rename: complete inside */
	st_ckpt_writer_t *w;
	char err[512] = "";
	assert_int_equal(st_ckpt_begin(root, 900, &w, err, sizeof err), ST_OK);
	char *d1 = ckpt_dir(100), *src = tu_path(d1, "manifest.yaml");
	char *dst = tu_path(st_ckpt_writer_tmpdir(w), "manifest.yaml");
	size_t len;
	uint8_t *b = tu_read(src, &len);
	tu_write(dst, b, len);
	free(b);
	/* leak the writer's directory as a crash would: no destroy yet */
	char *stale = strdup(st_ckpt_writer_tmpdir(w));
	char *odd = tu_path(root, "ckpt-000000000700");   /* no manifest */
	mkdir(odd, 0755);
	char *foreign = tu_path(root, "ckpt-latest");
	mkdir(foreign, 0755);
	char *dead = tu_path(root, "ckpt-000000000050.tmp");   /* half-deleted by retention */
	mkdir(dead, 0755);
	char *dir;
	st_manifest_t *m;
	assert_int_equal(st_ckpt_find_latest(root, &dir, &m, collect, NULL, err, sizeof err), ST_OK);
	assert_string_equal(dir, d1);
	st_manifest_free(m);
	free(dir);
	/* the next writer cleans the .tmp directories, not foreign names */
	assert_int_equal(write_ckpt(200, 0), ST_OK);
	assert_false(tu_exists(stale));
	assert_false(tu_exists(dead));
	assert_true(tu_exists(odd));
	assert_true(tu_exists(foreign));
	assert_string_equal(listing(), "ckpt-000000000100 ckpt-000000000200 ckpt-000000000700 "
				       "ckpt-latest ");
	st_ckpt_writer_destroy(w);   /* its .tmp is already gone: harmless */
	/* a writer dropped without commit removes its directory */
	assert_int_equal(st_ckpt_begin(root, 300, &w, err, sizeof err), ST_OK);
	char *t3 = strdup(st_ckpt_writer_tmpdir(w));
	assert_true(tu_exists(t3));
	st_ckpt_writer_destroy(w);
	assert_false(tu_exists(t3));
	free(t3), free(d1), free(src), free(dst), free(stale), free(odd), free(foreign), free(dead);
}

/* Writing a step that exists (after a resume) replaces it whole. */
static void test_ckpt_rewrite_same_step(void **state)
{
	(void)state;
	assert_int_equal(write_ckpt(100, 0), ST_OK);
	char *d = ckpt_dir(100), *p = tu_path(d, "table-0.rows");
	unlink(p);   /* the old one is damaged, too */
	assert_int_equal(write_ckpt(100, 0), ST_OK);
	char err[512] = "";
	assert_int_equal(st_ckpt_verify(d, NULL, err, sizeof err), ST_OK);
	assert_string_equal(listing(), "ckpt-000000000100 ");
	free(p);
	free(d);
}

static void test_ckpt_rejects_bad_file_names(void **state)
{
	(void)state;
	static const char *const bad[] = { "a/b", "manifest.yaml", "", "..", "dup" };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		st_ckpt_writer_t *w;
		char err[512] = "";
		assert_int_equal(st_ckpt_begin(root, 1, &w, err, sizeof err), ST_OK);
		st_safetensors_tensor_t t = { .name = "w", .ndim = 1, .shape = { 6 }, .f32 = dense_w };
		if (!strcmp(bad[i], "dup"))
			assert_int_equal(st_ckpt_write_dense(w, "dup", &t, 1, NULL, 0), ST_OK);
		assert_int_equal(st_ckpt_write_dense(w, bad[i], &t, 1, NULL, 0), ST_EINVAL);
		assert_false(tu_exists(st_ckpt_writer_tmpdir(w)));
		st_manifest_t m = job_manifest();
		assert_int_equal(st_ckpt_commit(w, &m, 0, collect, NULL), ST_EINVAL);
		st_ckpt_writer_destroy(w);
	}
	/* a full checkpoint refuses deleted keys; add_file of a missing file */
	st_ckpt_writer_t *w;
	assert_int_equal(st_ckpt_begin(root, 1, &w, NULL, 0), ST_OK);
	st_rows_info_t info = { .dim = 4 };
	uint64_t del = 5;
	assert_int_equal(st_ckpt_write_rows(w, "t.rows", &info, NULL, 0, &del, 1), ST_EINVAL);
	st_ckpt_writer_destroy(w);
	/* row files are delta in delta exports and full elsewhere */
	assert_int_equal(st_ckpt_begin(root, 1, &w, NULL, 0), ST_OK);
	info.flags = ST_ROWS_DELTA;
	assert_int_equal(st_ckpt_write_rows(w, "t.rows", &info, NULL, 0, NULL, 0), ST_EINVAL);
	assert_string_equal(st_ckpt_error(w), "t.rows: a checkpoint holds full row files (flags "
					      "without ST_ROWS_DELTA)");
	st_ckpt_writer_destroy(w);
	assert_int_equal(st_ckpt_export_begin(root, 1, 1, &w, NULL, 0), ST_OK);
	st_rows_writer_t *b;
	info.flags = 0;
	assert_int_equal(st_rows_writer_create(&b, &info), ST_OK);
	assert_int_equal(st_ckpt_write_rows_from(w, "t.rows", b), ST_EINVAL);
	assert_non_null(strstr(st_ckpt_error(w), "t.rows: a delta export holds delta row files (flags with ST_ROWS_DELTA)"));
	st_rows_writer_destroy(b);
	st_ckpt_writer_destroy(w);
	assert_int_equal(st_ckpt_begin(root, 1, &w, NULL, 0), ST_OK);
	assert_int_equal(st_ckpt_add_file(w, "absent"), ST_ENOENT);
	st_ckpt_writer_destroy(w);
	assert_string_equal(listing(), "");
	char err[512];
	assert_int_equal(st_ckpt_begin(root, -1, &w, err, sizeof err), ST_EINVAL);
}

static void test_ckpt_compat_check(void **state)
{
	(void)state;
	st_manifest_t m = job_manifest();
	m.step = 500;
	char err[512] = "";
	assert_int_equal(st_ckpt_check_compat(&m, "hash-1", "lr dim=2", err, sizeof err), ST_OK);
	assert_int_equal(st_ckpt_check_compat(&m, NULL, NULL, err, sizeof err), ST_OK);
	assert_int_equal(st_ckpt_check_compat(&m, "hash-2", NULL, err, sizeof err), ST_EINVAL);
	assert_string_equal(err, "checkpoint of job 'testjob' at step 500 does not fit this job: "
				 "job hash differs (checkpoint 'hash-1', this job 'hash-2'). Restore "
				 "the job that wrote it, or start without resuming");
	assert_int_equal(st_ckpt_check_compat(&m, "hash-2", "lr dim=4", err, sizeof err), ST_EINVAL);
	assert_non_null(strstr(err, "; model differs (checkpoint 'lr dim=2', this job 'lr dim=4')"));
	m.model = NULL;
	assert_int_equal(st_ckpt_check_compat(&m, NULL, "lr dim=4", err, sizeof err), ST_EINVAL);
	assert_non_null(strstr(err, "model differs (checkpoint '(none)'"));
}

/* Writes export seq: a full one has rows 10, 20; a delta updates 20 and
 * deletes 10. */
static int write_export(int64_t seq, int delta, int keep)
{
	st_ckpt_writer_t *w;
	int rc = st_ckpt_export_begin(root, seq, delta, &w, NULL, 0);
	if (rc < 0)
		return rc;
	st_safetensors_tensor_t t = { .name = "w", .ndim = 1, .shape = { 6 }, .f32 = dense_w };
	st_rows_row_t full[2] = { { 20, 1, 1, row_vals[1] }, { 10, 1, 1, row_vals[0] } };
	st_rows_row_t upd[1] = { { 20, 2, 2, row_vals[2] } };
	uint64_t del[1] = { 10 };
	st_rows_info_t info = { .dim = 2, .state_dim = 0, .flags = delta ? ST_ROWS_DELTA : 0 };
	st_manifest_t m = job_manifest();
	m.step = seq * 10;
	if ((rc = st_ckpt_write_dense(w, "dense.safetensors", &t, 1, NULL, 0)) == ST_OK &&
	    (rc = delta ? st_ckpt_write_rows(w, "table-0.rows", &info, upd, 1, del, 1)
			: st_ckpt_write_rows(w, "table-0.rows", &info, full, 2, NULL, 0)) == ST_OK)
		rc = st_ckpt_commit(w, &m, keep, collect, NULL);
	st_ckpt_writer_destroy(w);
	return rc;
}

static char *chain(void)
{
	static char out[2048];
	out[0] = 0;
	st_ckpt_entry_t *e;
	size_t n;
	char err[512] = "";
	assert_int_equal(st_ckpt_list_exports(root, 1, &e, &n, collect, NULL, err, sizeof err), ST_OK);
	for (size_t i = 0; i < n; i++) {
		strcat(out, e[i].name);
		strcat(out, " ");
	}
	st_ckpt_entries_free(e, n);
	return out;
}

static void test_ckpt_export_chains(void **state)
{
	(void)state;
	assert_int_equal(write_export(0, 0, 0), ST_OK);
	assert_int_equal(write_export(1, 1, 0), ST_OK);
	assert_int_equal(write_export(2, 1, 0), ST_OK);
	assert_string_equal(chain(), "export-000000000000-full export-000000000001-delta "
				     "export-000000000002-delta ");
	char *p = tu_path(root, "export-000000000001-delta/table-0.rows");
	st_rows_file_t *f;
	char err[512] = "";
	assert_int_equal(st_rows_read(p, &f, err, sizeof err), ST_OK);
	assert_int_equal(f->info.flags, ST_ROWS_DELTA);
	assert_int_equal(f->info.n_rows, 1);
	assert_int_equal(f->deleted[0], 10);
	st_rows_file_free(f);
	free(p);
	st_manifest_t *m;
	char *e2 = tu_path(root, "export-000000000002-delta");
	assert_int_equal(st_ckpt_verify(e2, &m, err, sizeof err), ST_OK);
	free(e2);
	assert_int_equal(m->kind, ST_MANIFEST_EXPORT_DELTA);
	assert_int_equal(m->seq, 2);
	assert_int_equal(m->step, 20);
	st_manifest_free(m);

	/* a newer full export starts a new chain */
	assert_int_equal(write_export(3, 0, 0), ST_OK);
	assert_int_equal(write_export(4, 1, 0), ST_OK);
	assert_string_equal(chain(), "export-000000000003-full export-000000000004-delta ");
	/* ...unless it is damaged: back to the older chain, which stops before it */
	char *d3 = tu_path(root, "export-000000000003-full/dense.safetensors");
	corrupt_byte(d3, 3);
	msgs[0] = 0;
	assert_string_equal(chain(), "export-000000000000-full export-000000000001-delta "
				     "export-000000000002-delta ");
	assert_non_null(strstr(msgs, "export export-000000000003-full: file 'dense.safetensors': "
				     "checksum mismatch"));
	assert_non_null(strstr(msgs, "— falling back to export-000000000000-full"));
	assert_non_null(strstr(msgs, "export export-000000000003-full: not a delta following "
				     "export-000000000000-full"));
	/* a damaged delta ends the chain before it */
	char *d2 = tu_path(root, "export-000000000002-delta/table-0.rows");
	corrupt_byte(d2, 70);
	msgs[0] = 0;
	assert_string_equal(chain(), "export-000000000000-full export-000000000001-delta ");
	assert_non_null(strstr(msgs, "export export-000000000002-delta: file 'table-0.rows': checksum "
				     "mismatch"));
	/* a missing delta is a gap */
	char *dd1 = tu_path(root, "export-000000000001-delta");
	st__dumpio_rmtree(dd1);
	msgs[0] = 0;
	assert_string_equal(chain(), "export-000000000000-full ");
	assert_non_null(strstr(msgs, "export export-000000000002-delta: sequence gap (expected 1)"));
	/* a full export refuses deleted keys */
	st_ckpt_writer_t *w;
	assert_int_equal(st_ckpt_export_begin(root, 9, 0, &w, NULL, 0), ST_OK);
	st_rows_info_t info = { .dim = 2 };
	uint64_t del = 1;
	assert_int_equal(st_ckpt_write_rows(w, "t.rows", &info, NULL, 0, &del, 1), ST_EINVAL);
	assert_non_null(strstr(st_ckpt_error(w), "deleted keys given for a full row file"));
	st_ckpt_writer_destroy(w);
	free(d3), free(d2), free(dd1);
}

static void test_ckpt_export_retention(void **state)
{
	(void)state;
	assert_int_equal(write_export(0, 0, 2), ST_OK);
	assert_int_equal(write_export(1, 1, 2), ST_OK);
	assert_int_equal(write_export(2, 0, 2), ST_OK);
	assert_int_equal(write_export(3, 1, 2), ST_OK);
	assert_int_equal(write_export(4, 0, 2), ST_OK);
	/* the newest 2 full exports and what follows the older of them */
	assert_string_equal(listing(), "export-000000000002-full export-000000000003-delta "
				       "export-000000000004-full ");
	assert_int_equal(write_export(5, 1, 1), ST_OK);
	assert_string_equal(listing(), "export-000000000004-full export-000000000005-delta ");
	/* checkpoints and exports share a root without touching each other */
	assert_int_equal(write_ckpt(100, 1), ST_OK);
	assert_int_equal(write_ckpt(200, 1), ST_OK);
	assert_string_equal(listing(), "ckpt-000000000200 export-000000000004-full "
				       "export-000000000005-delta ");
	assert_string_equal(chain(), "export-000000000004-full export-000000000005-delta ");
}

/* A multi-process checkpoint's two phases, in one process: rank 0 begins,
 * "rank 1" joins the .tmp and writes its shard, rank 0 adds rank 1's file
 * by its reported size and checksum and commits with the world; the result
 * verifies and is complete. A joined writer cannot commit, and its failure
 * leaves the .tmp to rank 0; a wrong reported size is refused; with a
 * part missing from the world, verify says incomplete and find_latest
 * falls back. */
static void test_ckpt_two_phase_commit(void **state)
{
	(void)state;
	char err[512] = "";
	assert_int_equal(write_ckpt(5, 0), ST_OK);   /* the older one to fall back to */
	st_ckpt_writer_t *w0, *w1;
	assert_int_equal(st_ckpt_join(root, 9, &w1, err, sizeof err), ST_ENOENT);
	assert_int_equal(st_ckpt_begin(root, 9, &w0, err, sizeof err), ST_OK);
	assert_int_equal(st_ckpt_join(root, 9, &w1, err, sizeof err), ST_OK);
	st_rows_row_t rows[1] = { { 10, 2, 2, row_vals[0] } };
	st_rows_info_t info = { .table_id = 0, .dim = 2, .state_dim = 2 };
	assert_int_equal(st_ckpt_write_rows(w1, "table-0.rank-1-of-2.rows", &info, rows, 1, NULL, 0),
			 ST_OK);
	size_t n;
	const st_manifest_file_t *f1 = st_ckpt_writer_files(w1, &n);
	assert_int_equal(n, 1);
	st_manifest_file_t rep = { strdup(f1[0].name), f1[0].bytes, f1[0].xxh3 };
	st_manifest_t m = job_manifest();
	assert_int_equal(st_ckpt_commit(w1, &m, 0, collect, NULL), ST_EINVAL);   /* joined */
	st_ckpt_writer_destroy(w1);   /* leaves the .tmp and its file */
	rows[0].key = 11;
	assert_int_equal(st_ckpt_write_rows(w0, "table-0.rank-0-of-2.rows", &info, rows, 1, NULL, 0),
			 ST_OK);
	assert_int_equal(st_ckpt_add_entry(w0, rep.name, rep.bytes, rep.xxh3), ST_OK);
	char *f0[] = { "table-0.rank-0-of-2.rows" }, *f1n[] = { rep.name };
	st_manifest_part_t parts[2] = { { 0, f0, 1 }, { 1, f1n, 1 } };
	m.world_size = 2;
	m.owners = 2;
	m.owner_salt = 7;
	m.parts = parts;
	m.n_parts = 2;
	assert_int_equal(st_ckpt_commit(w0, &m, 0, collect, NULL), ST_OK);
	st_ckpt_writer_destroy(w0);
	char *d9 = ckpt_dir(9);
	st_manifest_t *got;
	assert_int_equal(st_ckpt_verify(d9, &got, err, sizeof err), ST_OK);
	assert_int_equal(got->world_size, 2);
	assert_int_equal(got->n_files, 2);
	st_manifest_free(got);

	/* A wrong reported size poisons rank 0's writer: nothing published. */
	assert_int_equal(st_ckpt_begin(root, 12, &w0, err, sizeof err), ST_OK);
	assert_int_equal(st_ckpt_join(root, 12, &w1, err, sizeof err), ST_OK);
	assert_int_equal(st_ckpt_write_rows(w1, "table-0.rank-1-of-2.rows", &info, rows, 1, NULL, 0),
			 ST_OK);
	f1 = st_ckpt_writer_files(w1, &n);
	assert_int_equal(st_ckpt_add_entry(w0, f1[0].name, f1[0].bytes + 1, f1[0].xxh3), ST_ECORRUPT);
	st_ckpt_writer_destroy(w1);
	assert_int_equal(st_ckpt_commit(w0, &m, 0, collect, NULL), ST_ECORRUPT);
	st_ckpt_writer_destroy(w0);
	assert_null(strstr(listing(), "ckpt-000000000012"));

	/* Rank 1's part missing from the world: incomplete, skipped. */
	assert_int_equal(st_ckpt_begin(root, 14, &w0, err, sizeof err), ST_OK);
	assert_int_equal(st_ckpt_write_rows(w0, "table-0.rank-0-of-2.rows", &info, rows, 1, NULL, 0),
			 ST_OK);
	m.n_parts = 1;
	assert_int_equal(st_ckpt_commit(w0, &m, 0, collect, NULL), ST_OK);
	st_ckpt_writer_destroy(w0);
	char *d14 = ckpt_dir(14);
	assert_int_equal(st_ckpt_verify(d14, NULL, err, sizeof err), ST_ECORRUPT);
	assert_non_null(strstr(err, "rank 1 of 2 wrote no shard"));
	char *dir;
	msgs[0] = 0;
	assert_int_equal(st_ckpt_find_latest(root, &dir, &got, collect, NULL, err, sizeof err), ST_OK);
	assert_string_equal(dir, d9);
	assert_non_null(strstr(msgs, "incomplete"));
	free(dir);
	st_manifest_free(got);
	free(d9);
	free(d14);
	free(rep.name);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_ckpt_write_commit_and_load, setup_one, teardown_one),
		cmocka_unit_test_setup_teardown(test_ckpt_retention_keeps_newest, setup_one, teardown_one),
		cmocka_unit_test_setup_teardown(test_ckpt_falls_back_past_damage, setup_one, teardown_one),
		cmocka_unit_test_setup_teardown(test_ckpt_find_defers_and_rejects, setup_one, teardown_one),
		cmocka_unit_test_setup_teardown(test_ckpt_empty_or_missing_root, setup_one, teardown_one),
		cmocka_unit_test_setup_teardown(test_ckpt_disk_full_keeps_older, setup_one, teardown_one),
		cmocka_unit_test_setup_teardown(test_ckpt_large_table_write_failure_keeps_older,
						setup_one, teardown_one),
		cmocka_unit_test_setup_teardown(test_ckpt_crash_leftovers, setup_one, teardown_one),
		cmocka_unit_test_setup_teardown(test_ckpt_rewrite_same_step, setup_one, teardown_one),
		cmocka_unit_test_setup_teardown(test_ckpt_rejects_bad_file_names, setup_one, teardown_one),
		cmocka_unit_test_setup_teardown(test_ckpt_compat_check, setup_one, teardown_one),
		cmocka_unit_test_setup_teardown(test_ckpt_export_chains, setup_one, teardown_one),
		cmocka_unit_test_setup_teardown(test_ckpt_export_retention, setup_one, teardown_one),
		cmocka_unit_test_setup_teardown(test_ckpt_two_phase_commit, setup_one, teardown_one),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
