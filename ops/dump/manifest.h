/*
 * manifest.h — manifest.yaml of a checkpoint or export directory.
 *
 * The manifest says what a directory is (kind, job, step, export sequence),
 * where training stood (data position per reader shard, sync-policy state,
 * RNG state) and which files belong to it, each with its size and XXH3-64.
 * Its last line is "# manifest xxh3: <16 hex digits>", the XXH3-64 of every
 * byte before that line, so the manifest itself is verified too (YAML
 * readers see a comment). The schema with an example is in docs/formats.md.
 *
 * Emitted with libyaml's emitter and parsed with its document API. Parsing
 * is strict: unknown format versions, unknown or repeated fields, missing
 * required fields and values of the wrong type are errors that name the
 * file, the line and the field.
 *
 * Thread-safety: reentrant; a parsed manifest is immutable.
 */
#ifndef ST_DUMP_MANIFEST_H
#define ST_DUMP_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#include "ops/dump/dumpio.h"

#define ST_MANIFEST_VERSION 1
#define ST_MANIFEST_NAME "manifest.yaml"
#define ST_MANIFEST_MAX_WORLD 4096   /* ranks of a job (ST_NET_MAX_RANKS) */

typedef enum st_manifest_kind {
	ST_MANIFEST_CHECKPOINT = 0,
	ST_MANIFEST_EXPORT_FULL,
	ST_MANIFEST_EXPORT_DELTA,
} st_manifest_kind_t;

/* Where one reader shard stood: reading resumes at file index `offset` of
 * the read stage (file i of pass p over n files is p * n + i; `file` names
 * it for people), after its first `records` records. `offset` is a file
 * index, not a byte offset: records are skipped by count on resume. */
typedef struct st_manifest_shard {
	int64_t shard;
	char *file;
	uint64_t offset;      /* the read stage's file index (see above) */
	uint64_t records;
} st_manifest_shard_t;

typedef struct st_manifest_kv {
	char *key;
	char *value;
} st_manifest_kv_t;

/* One rank's part of a multi-process checkpoint: the files it wrote (its
 * shard of every table). */
typedef struct st_manifest_part {
	int64_t rank;
	char **files;         /* plain names, each also listed in `files` */
	size_t n_files;
} st_manifest_part_t;

typedef struct st_manifest_file {
	char *name;           /* a plain file name inside the directory */
	uint64_t bytes;
	uint64_t xxh3;
} st_manifest_file_t;

/*
 * The manifest. For emitting, the caller fills it in any storage (strings
 * are only read). A parsed manifest owns every pointer and is freed with
 * st_manifest_free; never pass a caller-built one to it.
 */
typedef struct st_manifest {
	int format_version;          /* parse: the file's (always 1 today); emit: ignored */
	st_manifest_kind_t kind;
	char *job_name;              /* required */
	char *job_hash;              /* required: identifies the job's model-relevant settings */
	char *model;                 /* optional model description (NULL = none) */
	char *lineage;               /* optional run lineage (NULL = none): the id the
					first full export of a run created, carried by
					its later exports and checkpoints; an export
					chain must not mix lineages (ops/dump/ckpt.h) */
	int64_t step;                /* training step, >= 0 */
	int64_t seq;                 /* exports: sequence number >= 0; checkpoints: -1 */
	int64_t created;             /* Unix seconds, UTC */
	st_manifest_shard_t *shards;
	size_t n_shards;
	char *sync_policy;           /* optional (NULL = none) */
	st_manifest_kv_t *sync_state;
	size_t n_sync_state;
	uint64_t *rng;
	size_t n_rng;
	st_manifest_file_t *files;
	size_t n_files;
	/* Multi-process checkpoints (optional "world" mapping; world_size 0:
	 * absent, a one-process checkpoint with table-<k>.rows). world_size
	 * ranks wrote it; rows are sharded by the owner function
	 * mix64(key ^ owner_salt) mod owners (ops/algo/owner.h); parts[r] lists
	 * rank r's files (n_parts == world_size once complete). */
	int64_t world_size;
	int64_t owners;
	uint64_t owner_salt;
	st_manifest_part_t *parts;
	size_t n_parts;
} st_manifest_t;

/* Emits m as YAML with the trailing checksum line. ST_OK and *out (a
 * NUL-terminated malloc'ed string the caller frees) and *len; ST_EINVAL for
 * a missing required field or a file name with '/' (message in err). */
int st_manifest_emit(const st_manifest_t *m, char **out, size_t *len, char *err, size_t errlen);

/* Parses text (len bytes; `name` labels messages). ST_OK and *out (free with
 * st_manifest_free); ST_EFORMAT for bad YAML, an unknown version, a missing
 * or unknown field; ST_ECORRUPT when the checksum line is missing or wrong;
 * ST_ENOMEM. */
int st_manifest_parse(const char *text, size_t len, const char *name, st_manifest_t **out,
		      char *err, size_t errlen);

/* emit + write + fsync (dumpio); *sum may be NULL. */
int st_manifest_write(const char *path, const st_manifest_t *m, st_dumpio_sum_t *sum,
		      char *err, size_t errlen);

/* read + parse; ST_ENOENT if the file is absent. */
int st_manifest_read(const char *path, st_manifest_t **out, char *err, size_t errlen);

void st_manifest_free(st_manifest_t *m);

/* The file entry named name, or NULL. */
const st_manifest_file_t *st_manifest_find_file(const st_manifest_t *m, const char *name);

/* Whether a manifest's world (if any) is complete: one part per rank
 * 0..world_size-1, each listed once, each part's files listed in `files`.
 * ST_OK (also for a manifest without a world); ST_ECORRUPT with a message
 * naming what is missing. Pure. */
int st_manifest_check_world(const st_manifest_t *m, char *err, size_t errlen);

/* Value of a sync-state key, or NULL. */
const char *st_manifest_sync_get(const st_manifest_t *m, const char *key);

/* "checkpoint", "export-full", "export-delta". */
const char *st_manifest_kind_name(st_manifest_kind_t k);

#endif
