/*
 * mkckpt.c — writes the checkpoint and export fixtures that inspect.sh
 * inspects, through the real ops/dump writers (so the fixtures always match
 * the current formats; none is checked in).
 *
 *   mkckpt DIR   ->  DIR/ckpt-000000001000/, DIR/ckpt-000000002000/,
 *                    DIR/export-000000000000-full/, DIR/export-000000000001-delta/
 *
 * Exit 0 on success, 1 with a message otherwise.
 */
#include <stdio.h>
#include <stdlib.h>

#include "ops/dump/ckpt.h"
#include "runtime/err.h"

static float vals[1000 * 16];

static int fail(st_ckpt_writer_t *w, int rc)
{
	fprintf(stderr, "mkckpt: %s (%s)\n", st_ckpt_error(w), st_strerror(rc));
	st_ckpt_writer_destroy(w);
	return 1;
}

/* delta < 0: a checkpoint at step; else export seq `step`, full or delta. */
static int write_one(const char *root, int64_t step, int delta)
{
	st_ckpt_writer_t *w;
	char err[512] = "";
	int rc = delta < 0 ? st_ckpt_begin(root, step, &w, err, sizeof err)
			   : st_ckpt_export_begin(root, step, delta, &w, err, sizeof err);
	if (rc < 0) {
		fprintf(stderr, "mkckpt: %s\n", err);
		return 1;
	}
	st_safetensors_tensor_t t[3] = {
		{ .name = "mlp.0.weight", .ndim = 2, .shape = { 16, 8 }, .f32 = vals },
		{ .name = "mlp.0.bias", .ndim = 1, .shape = { 16 }, .f32 = vals },
		{ .name = "out.weight", .ndim = 2, .shape = { 1, 16 }, .f32 = vals },
	};
	st_kv_t meta = { "format", "pt" };
	if ((rc = st_ckpt_write_dense(w, "dense.safetensors", t, 3, &meta, 1)) < 0)
		return fail(w, rc);
	/* table 0: dim 8 + 8 Adagrad state; a delta carries 5 rows and 3 deletions */
	size_t n = delta > 0 ? 5 : 1000;
	st_rows_row_t *rows = malloc(n * sizeof *rows);
	for (size_t i = 0; i < n; i++)
		rows[i] = (st_rows_row_t){ (uint64_t)(n - i) * 7919u, (uint32_t)step, 1, vals + 16 * i };
	uint64_t del[3] = { 3, 1, 2 };
	uint32_t flags = delta > 0 ? ST_ROWS_DELTA : 0;
	st_rows_info_t info = { .table_id = 0, .dim = 8, .state_dim = 8, .flags = flags };
	rc = st_ckpt_write_rows(w, "table-0.rows", &info, rows, n, delta > 0 ? del : NULL,
				delta > 0 ? 3 : 0);
	free(rows);
	if (rc < 0)
		return fail(w, rc);
	st_rows_writer_t *b;
	st_rows_info_t i1 = { .table_id = 1, .dim = 4, .flags = flags };
	if (st_rows_writer_create(&b, &i1) < 0)
		return fail(w, ST_ENOMEM);
	for (uint64_t k = 0; k < 10; k++)
		st_rows_writer_add(b, k * 1000003u, (uint32_t)step, (uint32_t)k, vals + k);
	rc = st_ckpt_write_rows_from(w, "table-1.rows", b);
	st_rows_writer_destroy(b);
	if (rc < 0)
		return fail(w, rc);
	st_manifest_shard_t shards[2] = { { 0, "data/train-00000.tsv", 1048576, 9000 },
					  { 1, "data/train-00001.tsv", 2048, 12 } };
	st_manifest_kv_t sync[1] = { { "round", "3" } };
	uint64_t rng[2] = { 42, 4242 };
	st_manifest_t m = { .job_name = "fixture", .job_hash = "abc123", .model = "dnn emb=8 mlp=[16,1]",
			    .step = delta < 0 ? step : 1000 + step, .created = 1714564800,
			    .shards = shards, .n_shards = 2, .sync_policy = "gba",
			    .sync_state = sync, .n_sync_state = 1, .rng = rng, .n_rng = 2 };
	if ((rc = st_ckpt_commit(w, &m, 0, NULL, NULL)) < 0)
		return fail(w, rc);
	st_ckpt_writer_destroy(w);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: mkckpt DIR\n");
		return 1;
	}
	for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++)
		vals[i] = (float)(i % 97) * 0.01f;
	return write_one(argv[1], 1000, -1) || write_one(argv[1], 2000, -1) ||
	       write_one(argv[1], 0, 0) || write_one(argv[1], 1, 1);
}
