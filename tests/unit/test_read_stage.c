/*
 * test_read_stage.c — the read stage inside a real graph: 2 reader threads
 * over 3 Criteo files, a counting sink; row totals, unique dense seq
 * numbers, epochs, limit, and errors that stop the graph with file:line.
 * Each case runs on the real Kaggle samples (ST_SHARED_DATA) and on three
 * synthetic files the test writes (read_fixtures.h); in a clone without the
 * shared data only the real-data cases skip, saying so.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ops/read/read.h"
#include "runtime/err.h"
#include "runtime/graph.h"
#include "read_fixtures.h"
#include "skip_util.h"

static const char *data_dir;
static char paths_buf[4][1024];
static char *paths[4];
static const char *real_rel[4] = {
	"criteo/Lapis-Hong_Wide-ResDNN/train.csv",
	"criteo/Lapis-Hong_Wide-ResDNN/dev.csv",
	"criteo/PaddlePaddle_PaddleRec/part-0",
	"criteo/no-such-file.tsv",
};
/* Synthetic files of 2300, 409 and 100 rows, and one that does not exist. */
static char tmp_dir[256];
static char spaths_buf[4][512];
static char *spaths[4];
static size_t sbytes[3];

/* Skips a case on the real samples unless all three are there. */
#define NEED_REAL()                          \
	do {                                 \
		for (int i_ = 0; i_ < 3; i_++) \
			TU_NEED_SHARED(real_rel[i_]); \
	} while (0)

/* The sink records every batch it sees; one thread, but locked anyway so
 * the test stays right if the stage gets more threads. */
#define MAX_SEQ 4096
struct sink {
	pthread_mutex_t mu;
	uint64_t rows, batches, eval_batches, too_big;
	unsigned char seen[MAX_SEQ];
	int dup;
};

static int sink_process(void *state, st_stage_ctx_t *ctx, st_batch_t *in,
			st_batch_t **out)
{
	struct sink *s = state;
	pthread_mutex_lock(&s->mu);
	s->rows += in->n;
	s->batches++;
	s->eval_batches += in->eval != 0;
	s->too_big += in->n > in->cap || in->n == 0;
	if (in->seq < MAX_SEQ) {
		s->dup += s->seen[in->seq];
		s->seen[in->seq] = 1;
	} else {
		s->dup++;
	}
	pthread_mutex_unlock(&s->mu);
	st_batch_destroy(in);
	*out = NULL;
	return 0;
}

static const st_stage_ops_t sink_ops = { .name = "sink", .process = sink_process };

static st_source_t criteo_src(int n_paths)
{
	st_source_t s;
	memset(&s, 0, sizeof s);
	s.format = (char *)"criteo";
	s.paths = paths;
	s.n_paths = n_paths;
	s.on_bad = ST_BAD_SKIP;
	s.max_report = 5;
	s.limit = -1;
	s.n_dense = 13;
	s.n_slots = 26;
	return s;
}

/* Runs read (2 threads) -> sink; returns st_graph_run's code. */
static int run_graph(const st_source_t *src, uint32_t batch, int epochs, int eval,
		     struct sink *s, st_read_stats_t *tot, char *err, size_t errlen)
{
	st_read_stage_t *rs;
	st_graph_t *g;
	memset(s, 0, sizeof *s);
	pthread_mutex_init(&s->mu, NULL);
	assert_int_equal(st_read_stage_create(&rs, src, batch, epochs, eval), 0);
	assert_int_equal(st_graph_create(&g), 0);
	st_stage_desc_t d;
	memset(&d, 0, sizeof d);
	for (int i = 0; i < ST_MAX_STAGE_THREADS; i++)
		d.cpus[i] = -1;
	d.name = "read";
	d.ops = &st_read_stage_ops;
	d.state = rs;
	d.n_threads = 2;
	d.queue_cap = 2;
	assert_int_equal(st_graph_add_stage(g, &d), 0);
	d.name = "sink";
	d.ops = &sink_ops;
	d.state = s;
	d.n_threads = 1;
	d.queue_cap = 2;
	assert_int_equal(st_graph_add_stage(g, &d), 0);
	int rc = st_graph_run(g);
	if (err)
		snprintf(err, errlen, "%s", st_graph_error(g) ? st_graph_error(g) : "");
	st_read_stage_totals(rs, tot);
	st_graph_destroy(g);
	st_read_stage_destroy(rs);
	pthread_mutex_destroy(&s->mu);
	return rc;
}

/* seq numbers 0..batches-1 each seen once */
static void assert_seq_dense(const struct sink *s)
{
	assert_int_equal(s->dup, 0);
	for (uint64_t i = 0; i < s->batches; i++)
		assert_int_equal(s->seen[i], 1);
}

static void test_read_stage_three_files_two_threads(void **state)
{
	(void)state;
	NEED_REAL();
	st_source_t src = criteo_src(3);
	struct sink s;
	st_read_stats_t tot;
	assert_int_equal(run_graph(&src, 500, 1, 0, &s, &tot, NULL, 0), 0);
	/* train.csv 7200 + dev.csv 409 + part-0 100 (SOURCES.md) */
	assert_int_equal(s.rows, 7709);
	assert_int_equal(tot.rows, 7709);
	assert_int_equal(tot.bad, 0);
	assert_int_equal(tot.bytes, 1744474 + 98922 + 24174);
	assert_int_equal(s.too_big, 0);
	/* per file: ceil(7200/500) + ceil(409/500) + ceil(100/500) batches */
	assert_int_equal(s.batches, 15 + 1 + 1);
	assert_int_equal(s.eval_batches, 0);
	assert_seq_dense(&s);
}

static void test_read_stage_epochs_and_eval(void **state)
{
	(void)state;
	NEED_REAL();
	st_source_t src = criteo_src(2);
	src.paths = paths + 1;   /* dev.csv and part-0 */
	struct sink s;
	st_read_stats_t tot;
	assert_int_equal(run_graph(&src, 1000, 3, 1, &s, &tot, NULL, 0), 0);
	assert_int_equal(s.rows, 3 * (409 + 100));
	assert_int_equal(s.batches, 6);
	assert_int_equal(s.eval_batches, 6);
	assert_seq_dense(&s);
}

static void test_read_stage_limit_is_exact(void **state)
{
	(void)state;
	NEED_REAL();
	st_source_t src = criteo_src(3);
	struct sink s;
	st_read_stats_t tot;
	src.limit = 1234;
	assert_int_equal(run_graph(&src, 100, 2, 0, &s, &tot, NULL, 0), 0);
	assert_int_equal(s.rows, 1234);
	assert_int_equal(tot.rows, 1234);
	assert_seq_dense(&s);
	src.limit = 0;
	assert_int_equal(run_graph(&src, 100, 1, 0, &s, &tot, NULL, 0), 0);
	assert_int_equal(s.rows, 0);
}

static void test_read_stage_errors_stop_the_graph(void **state)
{
	(void)state;
	NEED_REAL();
	struct sink s;
	st_read_stats_t tot;
	char err[1024];
	st_source_t src = criteo_src(4);   /* paths[3] does not exist */
	int rc = run_graph(&src, 256, 1, 0, &s, &tot, err, sizeof err);
	assert_int_equal(rc, ST_ENOENT);
	assert_non_null(strstr(err, "no-such-file.tsv: cannot open"));

	/* A bad record under "fail": the graph error names file:line. */
	const char *td = tu_test_data();
	char bad[1024];
	snprintf(bad, sizeof bad, "%s/read/criteo_bad.tsv", td);
	char *one[1] = { bad };
	src = criteo_src(1);
	src.paths = one;
	src.on_bad = ST_BAD_FAIL;
	rc = run_graph(&src, 256, 1, 0, &s, &tot, err, sizeof err);
	assert_int_equal(rc, ST_EBADREC);
	assert_non_null(strstr(err, "criteo_bad.tsv:2: field 0 (label): '2' is not a label (0 or 1)"));
	src.on_bad = ST_BAD_SKIP;
	assert_int_equal(run_graph(&src, 256, 1, 0, &s, &tot, err, sizeof err), 0);
	assert_int_equal(s.rows, 3);
	assert_int_equal(tot.bad, 6);
}

/* ---- the same cases on the synthetic files ---- */

static void test_read_stage_synth_three_files_two_threads(void **state)
{
	(void)state;
	st_source_t src = criteo_src(3);
	src.paths = spaths;
	struct sink s;
	st_read_stats_t tot;
	assert_int_equal(run_graph(&src, 500, 1, 0, &s, &tot, NULL, 0), 0);
	assert_int_equal(s.rows, 2300 + 409 + 100);
	assert_int_equal(tot.rows, 2809);
	assert_int_equal(tot.bad, 0);
	assert_int_equal(tot.bytes, sbytes[0] + sbytes[1] + sbytes[2]);
	assert_int_equal(s.too_big, 0);
	/* per file: ceil(2300/500) + ceil(409/500) + ceil(100/500) batches */
	assert_int_equal(s.batches, 5 + 1 + 1);
	assert_int_equal(s.eval_batches, 0);
	assert_seq_dense(&s);
}

static void test_read_stage_synth_epochs_and_eval(void **state)
{
	(void)state;
	st_source_t src = criteo_src(2);
	src.paths = spaths + 1;
	struct sink s;
	st_read_stats_t tot;
	assert_int_equal(run_graph(&src, 1000, 3, 1, &s, &tot, NULL, 0), 0);
	assert_int_equal(s.rows, 3 * (409 + 100));
	assert_int_equal(s.batches, 6);
	assert_int_equal(s.eval_batches, 6);
	assert_seq_dense(&s);
}

static void test_read_stage_synth_limit_is_exact(void **state)
{
	(void)state;
	st_source_t src = criteo_src(3);
	src.paths = spaths;
	struct sink s;
	st_read_stats_t tot;
	src.limit = 1234;
	assert_int_equal(run_graph(&src, 100, 2, 0, &s, &tot, NULL, 0), 0);
	assert_int_equal(s.rows, 1234);
	assert_int_equal(tot.rows, 1234);
	assert_seq_dense(&s);
	src.limit = 0;
	assert_int_equal(run_graph(&src, 100, 1, 0, &s, &tot, NULL, 0), 0);
	assert_int_equal(s.rows, 0);
}

static void test_read_stage_synth_errors_stop_the_graph(void **state)
{
	(void)state;
	struct sink s;
	st_read_stats_t tot;
	char err[1024];
	st_source_t src = criteo_src(4);   /* spaths[3] does not exist */
	src.paths = spaths;
	int rc = run_graph(&src, 256, 1, 0, &s, &tot, err, sizeof err);
	assert_int_equal(rc, ST_ENOENT);
	assert_non_null(strstr(err, "no-such-file.tsv: cannot open"));

	/* A bad record under "fail": the graph error names file:line. */
	const char *td = tu_test_data();
	char bad[1024];
	snprintf(bad, sizeof bad, "%s/read/criteo_bad.tsv", td);
	char *one[1] = { bad };
	src = criteo_src(1);
	src.paths = one;
	src.on_bad = ST_BAD_FAIL;
	rc = run_graph(&src, 256, 1, 0, &s, &tot, err, sizeof err);
	assert_int_equal(rc, ST_EBADREC);
	assert_non_null(strstr(err, "criteo_bad.tsv:2: field 0 (label): '2' is not a label (0 or 1)"));
	src.on_bad = ST_BAD_SKIP;
	assert_int_equal(run_graph(&src, 256, 1, 0, &s, &tot, err, sizeof err), 0);
	assert_int_equal(s.rows, 3);
	assert_int_equal(tot.bad, 6);
}

static int setup(void **state)
{
	(void)state;
	snprintf(tmp_dir, sizeof tmp_dir, "/tmp/st-test-read-stage-XXXXXX");
	if (!mkdtemp(tmp_dir))
		return -1;
	static const uint32_t rows[3] = { 2300, 409, 100 };
	static const char *names[4] = { "a.tsv", "b.tsv", "c.tsv", "no-such-file.tsv" };
	for (int i = 0; i < 4; i++) {
		snprintf(spaths_buf[i], sizeof spaths_buf[i], "%s/%s", tmp_dir, names[i]);
		spaths[i] = spaths_buf[i];
		if (i < 3) {
			tf_criteo_t e;
			tf_criteo_write(spaths[i], rows[i], 100 + (uint64_t)i, 0, &e);
			sbytes[i] = e.bytes;
			tf_criteo_free(&e);
		}
	}
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	for (int i = 0; i < 3; i++)
		unlink(spaths[i]);
	return rmdir(tmp_dir);
}

/* Runs the read stage of src (one thread, rank `shard` of `shards`) into a
 * sink and returns st_read_stage_check_bad's verdict on the pass. */
static int run_check_bad(const st_source_t *src, int shard, int shards)
{
	struct sink s;
	memset(&s, 0, sizeof s);
	pthread_mutex_init(&s.mu, NULL);
	st_read_stage_t *rs;
	st_graph_t *g;
	assert_int_equal(st_read_stage_create(&rs, src, 2, 1, 0), 0);
	if (shards > 1)
		assert_int_equal(st_read_stage_shard(rs, shard, shards), 0);
	assert_int_equal(st_graph_create(&g), 0);
	st_stage_desc_t d;
	memset(&d, 0, sizeof d);
	for (int i = 0; i < ST_MAX_STAGE_THREADS; i++)
		d.cpus[i] = -1;
	d.name = "read";
	d.ops = &st_read_stage_ops;
	d.state = rs;
	d.n_threads = 1;
	d.queue_cap = 2;
	assert_int_equal(st_graph_add_stage(g, &d), 0);
	d.name = "sink";
	d.ops = &sink_ops;
	d.state = &s;
	assert_int_equal(st_graph_add_stage(g, &d), 0);
	st_graph_run(g);
	int rc = st_read_stage_check_bad(rs, "train");
	st_graph_destroy(g);
	st_read_stage_destroy(rs);
	pthread_mutex_destroy(&s.mu);
	return rc;
}

/* The share of bad records of a pass against max_bad_fraction:
 * criteo_bad.tsv has 3 good and 6 bad records (2/3 bad). The share is of
 * every record read, so each rank of a sharded read sees the same one. */
static void test_read_stage_bad_fraction(void **state)
{
	(void)state;
	const char *td = tu_test_data();
	char bad[1024];
	snprintf(bad, sizeof bad, "%s/read/criteo_bad.tsv", td);
	char *one[1] = { bad };
	st_source_t src = criteo_src(1);
	src.paths = one;
	src.max_bad_fraction = 0.1;
	assert_int_equal(run_check_bad(&src, 0, 1), ST_EBADREC);
	src.max_bad_fraction = 0.67;        /* 6 / 9 = 0.667: allowed, warned */
	assert_int_equal(run_check_bad(&src, 0, 1), ST_OK);
	src.max_bad_fraction = 0.66;
	for (int r = 0; r < 2; r++)
		assert_int_equal(run_check_bad(&src, r, 2), ST_EBADREC);
	src.max_bad_fraction = 1.0;         /* never fails */
	assert_int_equal(run_check_bad(&src, 0, 1), ST_OK);
	/* Under "fail" the first bad record stopped the pass already. */
	src.max_bad_fraction = 0.1;
	src.on_bad = ST_BAD_FAIL;
	assert_int_equal(run_check_bad(&src, 0, 1), ST_OK);
	/* Good data only: nothing to say. */
	src = criteo_src(1);
	src.paths = spaths + 2;   /* synthetic, so a clone without ../shared/data runs it */
	assert_int_equal(run_check_bad(&src, 0, 1), ST_OK);
}

/* The list and missing counts of a pass leave out the records a resume
 * drops (st_read_stage_seek): a csv list field, 4 rows of which the first
 * 2 are skipped. */
static void test_read_stage_seek_field_counts(void **state)
{
	(void)state;
	char path[600];
	snprintf(path, sizeof path, "%s/lists.csv", tmp_dir);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs("1,a^^b\n0,\n1,c^d\n0,^\n", f);   /* skipped: 1 empty item, 1 empty list */
	fclose(f);
	static uint8_t kinds[] = { ST_COL_LABEL, ST_COL_CAT };
	static st_slot_opt_t so[1] = { { .list_sep = '^', .missing = ST_MISSING_KEY } };
	char *pp[1] = { path };
	st_source_t src;
	memset(&src, 0, sizeof src);
	src.format = (char *)"csv";
	src.paths = pp;
	src.n_paths = 1;
	src.on_bad = ST_BAD_FAIL;
	src.limit = -1;
	src.sep = ',';
	src.n_cols = 2;
	src.col_kind = kinds;
	src.slot_opt = so;
	src.n_slots = 1;
	for (int seek = 0; seek <= 1; seek++) {
		struct sink s;
		memset(&s, 0, sizeof s);
		pthread_mutex_init(&s.mu, NULL);
		st_read_stage_t *rs;
		st_graph_t *g;
		assert_int_equal(st_read_stage_create(&rs, &src, 2, 1, 0), 0);
		if (seek)
			assert_int_equal(st_read_stage_seek(rs, 0, 2, 1, 2), 0);
		assert_int_equal(st_graph_create(&g), 0);
		st_stage_desc_t d;
		memset(&d, 0, sizeof d);
		for (int i = 0; i < ST_MAX_STAGE_THREADS; i++)
			d.cpus[i] = -1;
		d.name = "read";
		d.ops = &st_read_stage_ops;
		d.state = rs;
		d.n_threads = 1;
		d.queue_cap = 2;
		assert_int_equal(st_graph_add_stage(g, &d), 0);
		d.name = "sink";
		d.ops = &sink_ops;
		d.state = &s;
		assert_int_equal(st_graph_add_stage(g, &d), 0);
		assert_int_equal(st_graph_run(g), 0);
		st_read_stats_t tot;
		st_read_stage_totals(rs, &tot);
		st_graph_destroy(g);
		st_read_stage_destroy(rs);
		pthread_mutex_destroy(&s.mu);
		/* all rows: empty items 1 + 1 ("a^^b", "^": 2 -> "^" has 2 empty
		 * items), so 1 + 2 = 3; empty lists "" and "^" = 2 */
		assert_int_equal(tot.list_items_empty, seek ? 2 : 3);
		assert_int_equal(tot.lists_empty, seek ? 1 : 2);
		assert_int_equal(tot.missing_keys, seek ? 1 : 2);
	}
	unlink(path);
}

int main(void)
{
	data_dir = getenv("ST_SHARED_DATA");
	for (int i = 0; i < 4; i++) {
		snprintf(paths_buf[i], sizeof paths_buf[i], "%s/%s",
			 data_dir ? data_dir : "/nonexistent", real_rel[i]);
		paths[i] = paths_buf[i];
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_read_stage_three_files_two_threads),
		cmocka_unit_test(test_read_stage_epochs_and_eval),
		cmocka_unit_test(test_read_stage_limit_is_exact),
		cmocka_unit_test(test_read_stage_errors_stop_the_graph),
		cmocka_unit_test(test_read_stage_synth_three_files_two_threads),
		cmocka_unit_test(test_read_stage_synth_epochs_and_eval),
		cmocka_unit_test(test_read_stage_synth_limit_is_exact),
		cmocka_unit_test(test_read_stage_synth_errors_stop_the_graph),
		cmocka_unit_test(test_read_stage_bad_fraction),
		cmocka_unit_test(test_read_stage_seek_field_counts),
	};
	return tu_exit(cmocka_run_group_tests(tests, setup, teardown),
		       sizeof tests / sizeof tests[0]);
}
