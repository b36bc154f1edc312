/*
 * cmd_inspect.c — `strata inspect PATH`: what a checkpoint or export holds,
 * and whether it is intact (ops/dump).
 *
 * PATH may be a checkpoint or export directory (the full report: manifest,
 * every file with its checksum verdict, tensors, tables), a directory of them
 * (a list, newest first, and the export apply order), or a single .rows or
 * .safetensors file. Reading is streaming for row files, so inspecting a
 * large table costs one pass over it and little memory.
 *
 * Exit status: 0 everything verifies, 1 something is damaged or missing,
 * 2 usage error or PATH is not something strata wrote.
 */
#include "cli.h"
#include "ops/dump/ckpt.h"
#include "runtime/err.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

enum { KIND_OTHER, KIND_ROWS, KIND_SAFETENSORS };

static int sniff(const char *path)
{
	char magic[8];
	FILE *f = fopen(path, "rb");
	if (!f)
		return KIND_OTHER;
	size_t n = fread(magic, 1, sizeof magic, f);
	fclose(f);
	if (n == 8 && !memcmp(magic, "STRATARW", 8))
		return KIND_ROWS;
	size_t l = strlen(path);
	if (l >= 12 && !strcmp(path + l - 12, ".safetensors"))
		return KIND_SAFETENSORS;
	return KIND_OTHER;
}

/* One table: header line plus deleted keys; returns 0 or 1 (damaged). */
static int show_rows(const char *path, const char *label)
{
	st_rows_reader_t *r;
	char err[1024] = "";
	int rc = st_rows_reader_open(path, &r, err, sizeof err);
	if (rc < 0) {
		printf("  %-24s %s\n", label, err);
		return 1;
	}
	const st_rows_info_t *i = st_rows_reader_info(r);
	st_rows_row_t row;
	uint64_t first = 0, last = 0, n = 0;
	while ((rc = st_rows_reader_next(r, &row)) == 1) {
		if (!n)
			first = row.key;
		last = row.key;
		n++;
	}
	printf("  %-24s table %" PRIu64 "  %" PRIu64 " rows  dim %u  state_dim %u  %s",
	       label, i->table_id, i->n_rows, i->dim, i->state_dim,
	       i->flags & ST_ROWS_DELTA ? "delta" : "full");
	if (n)
		printf("  keys %016" PRIx64 "..%016" PRIx64, first, last);
	printf("\n");
	if (rc < 0) {
		printf("  %-24s DAMAGED: %s\n", "", st_rows_reader_error(r));
		st_rows_reader_close(r);
		return 1;
	}
	size_t nd;
	const uint64_t *d = st_rows_reader_deleted(r, &nd);
	if (i->flags & ST_ROWS_DELTA) {
		printf("  %-24s %zu deleted keys", "", nd);
		for (size_t k = 0; k < nd && k < 4; k++)
			printf("%s%016" PRIx64, k ? ", " : ": ", d[k]);
		printf("%s\n", nd > 4 ? ", ..." : "");
	}
	st_rows_reader_close(r);
	return 0;
}

/* The tensors of one safetensors file; returns 0 or 1. */
static int show_safetensors(const char *path, const char *label, uint64_t *params)
{
	st_safetensors_t *f;
	char err[1024] = "";
	int rc = st_safetensors_read(path, &f, err, sizeof err);
	if (rc < 0) {
		printf("  %s: %s\n", label, err);
		return 1;
	}
	uint64_t total = 0;
	for (int i = 0; i < f->n_tensors; i++)
		total += f->tensors[i].numel;
	printf("  %s: %d tensors, %" PRIu64 " params\n", label, f->n_tensors, total);
	for (int i = 0; i < f->n_tensors; i++) {
		const st_safetensors_tensor_t *t = &f->tensors[i];
		printf("    %-32s %-4s [", t->name, st_safetensors_dtype_name(t->dtype));
		for (int d = 0; d < t->ndim; d++)
			printf("%s%" PRId64, d ? ", " : "", t->shape[d]);
		printf("]\n");
	}
	for (int i = 0; i < f->n_meta; i++)
		printf("    metadata %s = %s\n", f->meta[i].key, f->meta[i].value);
	*params += total;
	st_safetensors_free(f);
	return 0;
}

static char *join(const char *a, const char *b)
{
	size_t n = strlen(a) + strlen(b) + 2;
	char *p = st_xmalloc(n);
	snprintf(p, n, "%s/%s", a, b);
	return p;
}

static int inspect_dir(const char *dir)
{
	char *mpath = join(dir, ST_MANIFEST_NAME);
	st_manifest_t *m;
	char err[1024] = "";
	int rc = st_manifest_read(mpath, &m, err, sizeof err);
	free(mpath);
	if (rc < 0) {
		printf("%s: cannot use the manifest: %s\n", dir, err);
		return ST_EXIT_FAILED;
	}
	char when[32];
	time_t t = (time_t)m->created;
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
	printf("%s %s\n", st_manifest_kind_name(m->kind), dir);
	printf("  job      %s (hash %s)\n", m->job_name, m->job_hash);
	if (m->model)
		printf("  model    %s\n", m->model);
	if (m->lineage)
		printf("  lineage  %s\n", m->lineage);
	printf("  step     %" PRId64 "\n", m->step);
	if (m->kind != ST_MANIFEST_CHECKPOINT)
		printf("  seq      %" PRId64 "\n", m->seq);
	printf("  created  %s\n", when);
	if (m->sync_policy) {
		printf("  sync     %s", m->sync_policy);
		for (size_t i = 0; i < m->n_sync_state; i++)
			printf("%s%s=%s", i ? ", " : " (", m->sync_state[i].key, m->sync_state[i].value);
		printf("%s\n", m->n_sync_state ? ")" : "");
	}
	for (size_t i = 0; i < m->n_shards; i++)
		printf("  data     shard %" PRId64 ": %s at byte %" PRIu64 " (%" PRIu64 " records)\n",
		       m->shards[i].shard, m->shards[i].file, m->shards[i].offset, m->shards[i].records);
	if (m->n_rng)
		printf("  rng      %zu words\n", m->n_rng);
	if (m->world_size > 0) {
		printf("  world    %" PRId64 " rank%s; rows owned by mix64(key ^ %016" PRIx64 ") mod %"
		       PRId64 "\n", m->world_size, m->world_size == 1 ? "" : "s", m->owner_salt,
		       m->owners);
		for (size_t i = 0; i < m->n_parts; i++) {
			printf("  shard    rank %" PRId64 ":", m->parts[i].rank);
			for (size_t j = 0; j < m->parts[i].n_files; j++)
				printf("%s %s", j ? "," : "", m->parts[i].files[j]);
			printf("\n");
		}
	}

	int bad = 0;
	printf("files:\n");
	char first_bad[1100] = "";
	for (size_t i = 0; i < m->n_files; i++) {
		const st_manifest_file_t *f = &m->files[i];
		rc = st_ckpt_verify_file(dir, f, err, sizeof err);
		printf("  %-24s %12" PRIu64 " bytes  xxh3 %016" PRIx64 "  %s\n", f->name, f->bytes,
		       f->xxh3, rc == ST_OK ? "ok" : err);
		if (rc != ST_OK && !first_bad[0]) {
			int64_t owner = -1;   /* the rank whose shard holds it */
			for (size_t p = 0; p < m->n_parts && owner < 0; p++)
				for (size_t j = 0; j < m->parts[p].n_files; j++)
					if (!strcmp(m->parts[p].files[j], f->name))
						owner = m->parts[p].rank;
			if (owner >= 0)
				snprintf(first_bad, sizeof first_bad, "rank %" PRId64 "'s shard: %s",
					 owner, err);
			else
				snprintf(first_bad, sizeof first_bad, "%s", err);
		}
		bad += rc != ST_OK;
	}
	if (m->world_size > 0) {
		/* A multi-process checkpoint is whole when every rank's shard is
		 * listed and every file is intact; loaders take no other. */
		int w = st_manifest_check_world(m, err, sizeof err);
		if (w < 0 || first_bad[0])
			printf("complete: no (%s)\n", w < 0 ? err : first_bad);
		else
			printf("complete: yes (the shards of all %" PRId64 " ranks)\n", m->world_size);
		bad += w < 0;
	}
	uint64_t params = 0;
	int n_dense = 0, n_rows = 0;
	for (size_t i = 0; i < m->n_files; i++) {
		char *p = join(dir, m->files[i].name);
		if (sniff(p) == KIND_SAFETENSORS) {
			if (!n_dense++)
				printf("dense:\n");
			bad += show_safetensors(p, m->files[i].name, &params);
		}
		free(p);
	}
	if (n_dense)
		printf("  total dense params: %" PRIu64 "\n", params);
	for (size_t i = 0; i < m->n_files; i++) {
		char *p = join(dir, m->files[i].name);
		if (sniff(p) == KIND_ROWS) {
			if (!n_rows++)
				printf("tables:\n");
			bad += show_rows(p, m->files[i].name);
		}
		free(p);
	}
	if (bad)
		printf("DAMAGED: %d problem%s; loaders skip this %s and fall back to an older one\n",
		       bad, bad == 1 ? "" : "s", m->kind == ST_MANIFEST_CHECKPOINT ? "checkpoint" : "export");
	else
		printf("verified: all %zu files match the manifest\n", m->n_files);
	st_manifest_free(m);
	return bad ? ST_EXIT_FAILED : ST_EXIT_OK;
}

static void print_msg(void *arg, const char *msg)
{
	(void)arg;
	printf("  note: %s\n", msg);
}

static int inspect_root(const char *root)
{
	st_ckpt_entry_t *e;
	size_t n;
	char err[1024] = "";
	if (st_ckpt_list(root, &e, &n, err, sizeof err) < 0) {
		fprintf(stderr, "strata inspect: %s\n", err);
		return ST_EXIT_FAILED;
	}
	st_ckpt_entry_t *x;
	size_t nx;
	/* Verified apply order: the same walk `strata predict` will make. */
	int rc = st_ckpt_list_exports(root, 1, &x, &nx, print_msg, NULL, err, sizeof err);
	if (rc < 0) {
		st_ckpt_entries_free(e, n);
		fprintf(stderr, "strata inspect: %s\n", err);
		return ST_EXIT_FAILED;
	}
	if (!n && !nx) {
		fprintf(stderr, "strata inspect: %s: no checkpoint, export or manifest.yaml here\n", root);
		return ST_EXIT_USAGE;
	}
	printf("%s: %zu checkpoint%s (newest first; not verified, inspect one for that)\n", root, n,
	       n == 1 ? "" : "s");
	for (size_t i = 0; i < n; i++)
		printf("  %s  step %" PRId64 "\n", e[i].name, e[i].num);
	printf("exports in apply order (verified): %zu\n", nx);
	for (size_t i = 0; i < nx; i++)
		printf("  %s  seq %" PRId64 "  %s\n", x[i].name, x[i].num, st_manifest_kind_name(x[i].kind));
	/* A chain that mixes runs is refused by `strata predict`: say so. */
	int ec = ST_EXIT_OK;
	st_manifest_t *base = NULL;
	for (size_t i = 0; i < nx && ec == ST_EXIT_OK; i++) {
		char *mp = join(x[i].path, ST_MANIFEST_NAME);
		st_manifest_t *m = NULL;
		int r = st_manifest_read(mp, &m, err, sizeof err);
		free(mp);
		if (r >= 0 && i > 0)
			r = st_ckpt_check_lineage(base, x[0].name, m, x[i].name, err, sizeof err);
		if (r < 0) {
			printf("  note: %s\n", err);
			ec = ST_EXIT_FAILED;
		}
		if (i == 0)
			base = m;
		else
			st_manifest_free(m);
	}
	st_manifest_free(base);
	st_ckpt_entries_free(e, n);
	st_ckpt_entries_free(x, nx);
	return ec;
}

int st_cmd_inspect(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "help", no_argument, NULL, 'h' },
		{ 0, 0, 0, 0 },
	};
	optind = 1;
	opterr = 0;
	int c;
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		if (c == 'h') {
			st_cli_help_for("inspect", stdout);
			return ST_EXIT_OK;
		}
		fprintf(stderr, "strata inspect: unknown option '%s'\n"
			"Run 'strata help inspect' for usage.\n", argv[optind - 1]);
		return ST_EXIT_USAGE;
	}
	if (optind + 1 != argc) {
		fprintf(stderr, "strata inspect: %s\nRun 'strata help inspect' for usage.\n",
			optind >= argc ? "missing PATH" : "expects one PATH");
		return ST_EXIT_USAGE;
	}
	const char *path = argv[optind];
	struct stat st;
	if (stat(path, &st) < 0) {
		fprintf(stderr, "strata inspect: %s: no such file or directory\n", path);
		return ST_EXIT_USAGE;
	}
	if (S_ISDIR(st.st_mode)) {
		char *m = join(path, ST_MANIFEST_NAME);
		int has = stat(m, &st) == 0;
		free(m);
		return has ? inspect_dir(path) : inspect_root(path);
	}
	uint64_t params = 0;
	switch (sniff(path)) {
	case KIND_ROWS:
		printf("row file %s\n", path);
		return show_rows(path, strrchr(path, '/') ? strrchr(path, '/') + 1 : path)
		       ? ST_EXIT_FAILED : ST_EXIT_OK;
	case KIND_SAFETENSORS:
		printf("safetensors file %s\n", path);
		return show_safetensors(path, "dense", &params) ? ST_EXIT_FAILED : ST_EXIT_OK;
	default:
		fprintf(stderr, "strata inspect: %s: not a checkpoint, export, row or safetensors file\n",
			path);
		return ST_EXIT_USAGE;
	}
}
