/*
 * ckpt.h — checkpoint and export directories: crash-safe writing,
 * retention, verified loading with fallback, export chains.
 *
 * A checkpoint is <root>/ckpt-<step, 12 digits>/ holding data files
 * (safetensors, row files, or any file the caller adds) and manifest.yaml,
 * which lists every file with its size and XXH3-64. Writing happens in
 * <root>/ckpt-<step>.tmp/: each file is fsynced as it is closed, the manifest
 * is written last, the directory is fsynced, renamed to its final name, and
 * the root is fsynced. A directory under a final name therefore always has
 * a complete manifest; a crash leaves at most a .tmp directory, which loaders
 * ignore and the next writer removes.
 *
 * Exports are <root>/export-<seq, 12 digits>-full/ or -delta/ in the same
 * formats. A delta holds only the rows given to it plus deleted keys. Export
 * sequence numbers count up by one per export, full or delta, so the deltas
 * to apply after a full export are the ones numbered right after it with no
 * gap.
 *
 * One writer per root at a time (the trainer's dump stage); loaders may run
 * concurrently with a writer, since they see only final names. Messages for
 * people go to err buffers or to the st_ckpt_msg_fn callback, never to
 * stdout.
 */
#ifndef ST_DUMP_CKPT_H
#define ST_DUMP_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "ops/dump/manifest.h"
#include "ops/dump/rows.h"
#include "ops/dump/safetensors.h"

typedef struct st_ckpt_writer st_ckpt_writer_t;

/* ---------------------------------------------------------------- writing */

/* Starts checkpoint `step` (>= 0) under root (created if missing, with its
 * parents). Removes stale ckpt-*.tmp directories first. ST_OK and *out (the
 * caller commits and/or destroys it); ST_EINVAL, ST_ENOSPC, ST_EIO with the
 * message in err. */
int st_ckpt_begin(const char *root, int64_t step, st_ckpt_writer_t **out,
		  char *err, size_t errlen);

/* Starts export `seq` (>= 0), full or delta. Removes stale export-*.tmp. */
int st_ckpt_export_begin(const char *root, int64_t seq, int delta, st_ckpt_writer_t **out,
			 char *err, size_t errlen);

/* The temporary directory being filled (for st_ckpt_add_file callers), and
 * the final directory the commit will create. Owned by w. */
const char *st_ckpt_writer_tmpdir(const st_ckpt_writer_t *w);
const char *st_ckpt_writer_dir(const st_ckpt_writer_t *w);

/* Writes dense tensors as safetensors file `file` (a plain name) into the
 * checkpoint; see st_safetensors_write. Nothing is kept from the arguments. */
int st_ckpt_write_dense(st_ckpt_writer_t *w, const char *file, const st_safetensors_tensor_t *t,
			int n, const st_kv_t *meta, int n_meta);

/* Writes a row file; see st_rows_write (rows and deleted are sorted in
 * place). info->flags must have ST_ROWS_DELTA in a delta export and not
 * elsewhere (ST_EINVAL otherwise), so that a reader of a lone file knows
 * whether it replaces a table or patches one. */
int st_ckpt_write_rows(st_ckpt_writer_t *w, const char *file, const st_rows_info_t *info,
		       st_rows_row_t *rows, size_t n, uint64_t *deleted, size_t n_deleted);

/* Writes what a row builder holds (st_rows_writer_finish), with the same
 * rule for its flags. b stays the caller's. */
int st_ckpt_write_rows_from(st_ckpt_writer_t *w, const char *file, st_rows_writer_t *b);

/* Registers a file the caller wrote and closed in st_ckpt_writer_tmpdir:
 * fsyncs it and records its size and XXH3. */
int st_ckpt_add_file(st_ckpt_writer_t *w, const char *file);

/*
 * Multi-process checkpoints (docs/distributed.md, "Checkpoints of
 * multi-process jobs"): rank 0 begins the checkpoint (st_ckpt_begin: it
 * cleans stale .tmp directories and creates this one); every other rank,
 * once told the directory exists, joins it and writes its own files into
 * it. A joined writer never commits, never cleans and never removes the
 * directory, not even after a failed write: rank 0, told of the failure,
 * destroys its own writer, which removes the whole .tmp. The files each
 * rank wrote (and fsynced) go to rank 0, which adds them with
 * st_ckpt_add_entry and commits once every rank reported.
 *
 * st_ckpt_join: ST_OK and *out (destroy it; it never commits); ST_ENOENT
 * when <root>/ckpt-<step>.tmp does not exist. */
int st_ckpt_join(const char *root, int64_t step, st_ckpt_writer_t **out, char *err,
		 size_t errlen);

/* The same for export `seq` begun by st_ckpt_export_begin (multi-process
 * exports, docs/distributed.md): joins <root>/export-<seq>-full|delta.tmp. */
int st_ckpt_export_join(const char *root, int64_t seq, int delta, st_ckpt_writer_t **out,
			char *err, size_t errlen);

/* The files written so far (owned by w, valid until its next call). */
const st_manifest_file_t *st_ckpt_writer_files(const st_ckpt_writer_t *w, size_t *n);

/* Records a file another process wrote and fsynced into this writer's .tmp
 * directory, with the size and XXH3 it reported. The size is checked
 * against the file (ST_ENOENT, ST_ECORRUPT); the checksum is the
 * writer's word (every reader verifies it). ST_OK or the error (the writer
 * is then poisoned as by a failed write). */
int st_ckpt_add_entry(st_ckpt_writer_t *w, const char *file, uint64_t bytes, uint64_t xxh3);

/*
 * Writes manifest.yaml from m and publishes the directory. From m the
 * writer takes job_name, job_hash, model, step (exports only; a checkpoint's
 * step is the one given to begin), created (0 = now), shards, sync and rng;
 * it sets kind, seq and files itself (world_size, owners, owner_salt and
 * parts are taken as given: a multi-process checkpoint). m is only read.
 *
 * Then retention: with keep > 0, checkpoints keep the newest `keep`
 * complete ones; exports keep the newest `keep` full exports and everything
 * numbered after the oldest of them. Stale .tmp directories go too. keep = 0
 * removes nothing. Retention failures are reported through msg (may be NULL:
 * then logged as warnings) and do not fail the commit.
 *
 * Returns ST_OK, or the first error of this writer (a failed write_* call
 * already removed the .tmp directory; then nothing was published and older
 * checkpoints are untouched). ST_ENOSPC means the disk is full.
 */
typedef void st_ckpt_msg_fn(void *arg, const char *msg);
int st_ckpt_commit(st_ckpt_writer_t *w, const st_manifest_t *m, int keep,
		   st_ckpt_msg_fn *msg, void *arg);

/* "what failed" of the writer's first error ("" if none). Owned by w. */
const char *st_ckpt_error(const st_ckpt_writer_t *w);

/* Frees w; an uncommitted .tmp directory is removed (NULL-safe). */
void st_ckpt_writer_destroy(st_ckpt_writer_t *w);

/* ---------------------------------------------------------------- reading */

typedef struct st_ckpt_entry {
	char *path;               /* <root>/<name> */
	char *name;               /* ckpt-000000001000, export-000000000003-delta */
	st_manifest_kind_t kind;
	int64_t num;              /* step of a checkpoint, seq of an export */
} st_ckpt_entry_t;

/* Complete checkpoints under root (final name, manifest.yaml present), newest
 * first. Not verified. ST_OK with *out (free with st_ckpt_entries_free) and
 * *n (0 and *out = NULL when there are none or root does not exist), or
 * ST_EIO / ST_ENOMEM. */
int st_ckpt_list(const char *root, st_ckpt_entry_t **out, size_t *n, char *err, size_t errlen);

void st_ckpt_entries_free(st_ckpt_entry_t *e, size_t n);

/* Checks one file of a manifest: present, of the listed size, with the
 * listed XXH3. ST_OK, ST_ENOENT ("file 'x': missing"), ST_ECORRUPT ("file
 * 'x': size mismatch" / "checksum mismatch"), ST_EIO. The message names the
 * file, not the directory. */
int st_ckpt_verify_file(const char *dir, const st_manifest_file_t *f, char *err, size_t errlen);

/* The cheap half of st_ckpt_verify_file: present and of the listed size
 * (a short file is the common damage), for a file the caller hashes
 * while it reads it. Same codes and messages. */
int st_ckpt_check_size(const char *dir, const st_manifest_file_t *f, char *err, size_t errlen);

/* Compares the size and XXH3 of file f, as a reader computed them
 * (st_rows_reader_sum), with its manifest entry: ST_OK, or ST_ECORRUPT with
 * st_ckpt_verify_file's message ("file 'x': checksum mismatch (...)"). Pure. */
int st_ckpt_check_sum(const st_manifest_file_t *f, const st_dumpio_sum_t *sum, char *err,
		      size_t errlen);

/* Parses dir/manifest.yaml and verifies every file it lists. ST_OK and, if
 * m is non-NULL, *m (free with st_manifest_free); else the first failure. */
int st_ckpt_verify(const char *dir, st_manifest_t **m, char *err, size_t errlen);

/*
 * The newest checkpoint under root that verifies. Each one that does not is
 * reported through msg (NULL: logged as a warning) as
 *   "checkpoint ckpt-X: file 'Y': checksum mismatch (...) — falling back to ckpt-W"
 * and the next older one is tried. ST_OK with *dir (malloc'ed path) and *m
 * (both the caller's); ST_ENOENT when no checkpoint verifies (err says
 * whether there were none or all failed).
 */
int st_ckpt_find_latest(const char *root, char **dir, st_manifest_t **m,
			st_ckpt_msg_fn *msg, void *arg, char *err, size_t errlen);

/*
 * st_ckpt_find_latest for a loader that verifies while it loads
 * (docs/operations.md, "Restore in one pass"):
 *   - defer (may be NULL) picks the files of manifest m that are checked
 *     by size only here: the caller hashes them as it reads them and
 *     compares with st_ckpt_check_sum. Called any number of times per file.
 *   - rejected (may be NULL): the directory name of a checkpoint this
 *     function chose before and the caller then found damaged, its step
 *     and why ("file 'x': checksum mismatch (...)"). It is reported as a
 *     failed verification would be ("checkpoint ckpt-X: why — falling back
 *     to ckpt-W") and only checkpoints older than its step are tried.
 * o may be NULL (st_ckpt_find_latest). Same returns.
 */
typedef int st_ckpt_defer_fn(void *arg, const st_manifest_t *m, const st_manifest_file_t *f);
typedef struct st_ckpt_find_opts {
	st_ckpt_defer_fn *defer;
	void *defer_arg;
	const char *rejected;
	int64_t rejected_step;
	const char *why;
} st_ckpt_find_opts_t;
int st_ckpt_find_latest_opts(const char *root, const st_ckpt_find_opts_t *o, char **dir,
			     st_manifest_t **m, st_ckpt_msg_fn *msg, void *arg, char *err,
			     size_t errlen);

/* Compares a checkpoint's job hash and model description with the current
 * job's (either may be NULL to skip that comparison). ST_OK if they match;
 * ST_EINVAL with a message naming the mismatch, both values, and what to do. */
int st_ckpt_check_compat(const st_manifest_t *m, const char *job_hash, const char *model,
			 char *err, size_t errlen);

/*
 * Exports in apply order: the newest full export, then the deltas numbered
 * right after it (seq + 1, + 2, ...) up to the first gap. With verify != 0
 * each one is verified: a full export that fails is reported and the
 * previous full one is tried; a delta that fails ends the chain there (the
 * later deltas build on it). ST_OK with *out and *n (*n = 0 when there is no
 * usable full export); ST_EIO / ST_ENOMEM.
 */
int st_ckpt_list_exports(const char *root, int verify, st_ckpt_entry_t **out, size_t *n,
			 st_ckpt_msg_fn *msg, void *arg, char *err, size_t errlen);

/*
 * Whether export m (directory name `name`) may be applied on top of the full
 * export base (`base_name`) of its chain: both written by one run, i.e. with
 * the same job name and the same lineage (manifest.h). Exports written
 * before lineages existed have none; two such exports of one job match, so
 * old chains stay loadable, while an export with a lineage never matches
 * one without (a run always starts its chain with a full export of its
 * own). The sequence numbers alone cannot tell: two runs writing into one
 * export directory interleave them. ST_OK, or ST_ECORRUPT with a message
 * naming both runs and what to do. Pure.
 */
int st_ckpt_check_lineage(const st_manifest_t *base, const char *base_name,
			  const st_manifest_t *m, const char *name, char *err, size_t errlen);

#endif
