/*
 * resume.c — loading a checkpoint (ops/train/checkpoint.c writes them;
 * formats in docs/formats.md) back into a fresh trainer, and setting aside
 * checkpoints that are all damaged.
 *
 * Threads: resume restores each table from the calling thread and one
 * st-resume-1 helper (load_rows); nothing else runs meanwhile.
 *
 * A restore reads each row file once: it hashes the file as it loads it
 * and, if the file does not match its manifest, empties the tables and
 * falls back to the next older checkpoint (defer_rows, load_one,
 * st_trainer_resume).
 *
 * The file is long because a restore is one sequence — choose, load,
 * agree across ranks, fall back — whose steps share the damage report and
 * the manifest; the damaged-checkpoint bookkeeping (damage_t through
 * st_trainer_set_aside_damaged) is the part that would split off first.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ops/algo/owner.h"
#include "ops/dist/dist.h"
#include "ops/dump/ckpt.h"
#include "ops/train/checkpoint.h"
#include "ops/train/trainer_internal.h"
#include "ops/view/export.h"
#include "runtime/err.h"
#include "runtime/store/rowfmt.h"
#include "runtime/metrics.h"

static int parse_u64(const st_manifest_t *m, const char *key, uint64_t *v)
{
	const char *s = st_manifest_sync_get(m, key);
	if (!s)
		return ST_EFORMAT;
	char *end;
	*v = strtoull(s, &end, 10);
	return *end ? ST_EFORMAT : ST_OK;
}

/*
 * Restoring a table: rows go in a batch at a time, one st_table_resolve per
 * batch (each shard's lock taken once, the index prefetched) where a lookup
 * per row paid a lock and a cache miss each; and, for a table in RAM, from
 * LOAD_THREADS threads at once (the calling one and st-resume-<n> helpers):
 * each takes the next batch from the reader under the loader's lock, copies
 * it out (the reader's rows are valid only until its next call) and inserts
 * it while the next thread reads. Nothing else runs during resume, and the
 * rows of a checkpoint have distinct keys, so the order in which batches
 * land does not matter: values and metadata are the file's either way.
 *
 * A table with an SSD tier restores a row at a time from one thread, as
 * before: the rows resolve returns stay pinned until copied, and a batch
 * could pin more rows than the RAM tier holds.
 */
enum { LOAD_THREADS = 2, LOAD_BATCH_BYTES = 4 << 20 };

typedef struct loader {
	st_table_t *t;
	st_rows_reader_t *r;
	const st_dist_t *d;        /* resharding: keep the keys this rank owns; NULL: all */
	int me;
	const char *path;
	size_t nf;                 /* floats a row */
	size_t dim;                /* of which embedding (+ wide) floats */
	int prec;                  /* the table's row precision: a row file
				      is fp32, a compact row is rounded to it
				      (exact for a file a compact job wrote) */
	size_t max;                /* rows a batch */
	pthread_mutex_t mu;        /* the reader, rc, err, read and meter */
	int64_t read;              /* rows read from the file so far */
	st_meter_t meter;          /* the restore's progress line on a terminal */
	int rc;                    /* first error (< 0), else 0 */
	char *err;
	size_t errlen;
} loader_t;

/* One thread's copy of a batch. */
typedef struct load_buf {
	st_rows_row_t *rows;
	uint64_t *keys;
	uint32_t *last_step, *freq;
	float *vals;               /* [max * nf] */
	float **dst;
} load_buf_t;

static void load_fail(loader_t *L, int rc, const char *msg)
{
	pthread_mutex_lock(&L->mu);
	if (L->rc == 0) {
		L->rc = rc;
		snprintf(L->err, L->errlen, "%s", msg);
	}
	pthread_mutex_unlock(&L->mu);
}

/* Takes the next batch into b: its row count, 0 at the end, or < 0 after
 * any thread's failure. */
static int load_take(loader_t *L, load_buf_t *b)
{
	pthread_mutex_lock(&L->mu);
	int kept = 0, n;
	/* With a filter, batches whose rows all belong to other ranks are
	 * skipped: 0 means the end of the file. */
	do {
		n = L->rc < 0 ? L->rc : st_rows_reader_next_batch(L->r, b->rows, L->max);
		if (n < 0 && L->rc == 0) {
			L->rc = n;
			snprintf(L->err, L->errlen, "%s", st_rows_reader_error(L->r));
		}
		if (n > 0)
			st_meter_update(&L->meter, L->read += n, L->meter.total);
		for (int i = 0; i < n; i++) {
			if (L->d && st_dist_owner(L->d, b->rows[i].key) != L->me)
				continue;   /* another rank's row under the new world */
			b->keys[kept] = b->rows[i].key;
			b->last_step[kept] = b->rows[i].last_step;
			b->freq[kept] = b->rows[i].freq;
			memcpy(b->vals + (size_t)kept * L->nf, b->rows[i].vals, sizeof(float) * L->nf);
			kept++;
		}
	} while (n > 0 && kept == 0);
	pthread_mutex_unlock(&L->mu);
	return n < 0 ? n : kept;
}

static void load_run(loader_t *L)
{
	load_buf_t b = { 0 };
	size_t m = L->max;
	b.rows = malloc(m * sizeof *b.rows);
	b.keys = malloc(m * sizeof *b.keys);
	b.last_step = malloc(m * sizeof *b.last_step);
	b.freq = malloc(m * sizeof *b.freq);
	b.vals = malloc(m * L->nf * sizeof *b.vals);
	b.dst = malloc(m * sizeof *b.dst);
	char msg[1024];
	int n = 0;
	if (!b.rows || !b.keys || !b.last_step || !b.freq || !b.vals || !b.dst) {
		snprintf(msg, sizeof msg, "%s: out of memory", L->path);
		load_fail(L, ST_ENOMEM, msg);
	} else {
		n = load_take(L, &b);
	}
	for (; n > 0; n = load_take(L, &b)) {
		/* The step only touches the metadata, which is overwritten below.
		 * A failed resolve may leave rows unset: NULL ones are not unpinned. */
		memset(b.dst, 0, (size_t)n * sizeof *b.dst);
		int rc = st_table_resolve(L->t, b.keys, (uint32_t)n, b.last_step[0], 1, b.dst);
		if (rc < 0) {
			st_table_unpin(L->t, b.dst, (uint32_t)n);
			snprintf(msg, sizeof msg, "%s: restoring rows: %s", L->path, st_strerror(rc));
			load_fail(L, rc, msg);
			break;
		}
		for (int i = 0; i < n && rc >= 0; i++) {
			if (!b.dst[i]) {
				/* Admission does not apply to restored rows: the row
				 * was admitted before. */
				snprintf(msg, sizeof msg, "%s: key %" PRIx64 " refused by admission while "
					 "restoring", L->path, b.keys[i]);
				load_fail(L, ST_EINVAL, msg);
				rc = ST_EINVAL;
				break;
			}
			const float *v = b.vals + (size_t)i * L->nf;
			if (L->prec == ST_ROW_FP32) {
				memcpy(b.dst[i], v, sizeof(float) * L->nf);
			} else {
				const uint32_t ew = st_rowfmt_words(L->prec, (uint32_t)L->dim);
				if (L->dim & 1)   /* the pad half of the last word */
					b.dst[i][ew - 1] = 0.0f;
				st_rowfmt_encode(L->prec, v, b.dst[i], L->dim);
				memcpy(b.dst[i] + ew, v + L->dim, sizeof(float) * (L->nf - L->dim));
			}
			st_table_meta_t *meta = st_table_meta(L->t, b.dst[i]);
			meta->last_step = b.last_step[i];
			meta->freq = b.freq[i];
		}
		st_table_unpin(L->t, b.dst, (uint32_t)n);
		if (rc < 0)
			break;
	}
	free(b.rows);
	free(b.keys);
	free(b.last_step);
	free(b.freq);
	free(b.vals);
	free(b.dst);
}

static void *load_main(void *arg)
{
	load_run(arg);
	return NULL;
}

/*
 * The verdict on a file hashed while it was loaded (mf: its manifest
 * entry), given how the load ended (rc) and the reader (NULL when it did
 * not open). The reader's whole-file sum is there when it reached the end
 * of the stream; a load that stopped earlier on damaged bytes (a key out
 * of order, a bad header) hashes the file once more so that the message
 * is the manifest's, as when every file was verified up front. Damage
 * sets *damaged and returns ST_ECORRUPT with "file 'x': ..." in err; a
 * file that matches its manifest keeps rc and err (the writer wrote a bad
 * file: not something an older checkpoint cures).
 */
static int judge(const char *dir, const st_manifest_file_t *mf, st_rows_reader_t *r, int rc,
		 int *damaged, char *err, size_t errlen)
{
	if (!mf || (rc < 0 && rc != ST_ECORRUPT && rc != ST_EFORMAT))
		return rc;
	char why[1024];
	st_dumpio_sum_t sum;
	int v;
	if (r && st_rows_reader_sum(r, &sum) == ST_OK)
		v = st_ckpt_check_sum(mf, &sum, why, sizeof why);
	else if (rc < 0)
		v = st_ckpt_verify_file(dir, mf, why, sizeof why);
	else
		v = ST_OK;   /* not reached: a load that ended well read to the end */
	if (v != ST_ECORRUPT && v != ST_ENOENT)
		return rc;
	*damaged = 1;
	snprintf(err, errlen, "%s", why);
	return ST_ECORRUPT;
}

/* Loads rows file dir/name into table k. mf: its manifest entry when it is
 * to be hashed while it loads (the choice checked only its size), else
 * NULL. */
static int load_rows(st_trainer_t *tr, int k, const char *dir, const char *name,
		     const st_manifest_file_t *mf, const st_dist_t *filter, int *damaged,
		     char *err, size_t errlen)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	st_rows_reader_t *r;
	int rc = st_rows_reader_open(path, &r, err, errlen);
	if (rc < 0)
		return judge(dir, mf, NULL, rc, damaged, err, errlen);
	const st_rows_info_t *info = st_rows_reader_info(r);
	if (info->dim != (uint32_t)tr->rows.tdim[k] || info->state_dim != (uint32_t)tr->rows.tstate[k]) {
		snprintf(err, errlen, "%s: rows of %u + %u floats, the job's table %d has %d + %d",
			 path, info->dim, info->state_dim, k, tr->rows.tdim[k], tr->rows.tstate[k]);
		st_rows_reader_close(r);
		return ST_EINVAL;
	}
	int ram = !st_table_ssd(st__trainer_table(tr, k));
	/* Every row of the file lands here unless a new world filters them:
	 * the index is sized once instead of growing under the load. */
	if (ram && !filter && st_table_reserve(st__trainer_table(tr, k), info->n_rows) < 0) {
		snprintf(err, errlen, "%s: out of memory for %llu rows", path,
			 (unsigned long long)info->n_rows);
		st_rows_reader_close(r);
		return ST_ENOMEM;
	}
	size_t nf = (size_t)info->dim + info->state_dim;
	/* A batch of up to ST_ROWS_BATCH_MAX rows, at most LOAD_BATCH_BYTES of
	 * floats per thread however wide the rows. */
	size_t max = LOAD_BATCH_BYTES / (sizeof(float) * nf);
	max = max < 1 ? 1 : max > ST_ROWS_BATCH_MAX ? ST_ROWS_BATCH_MAX : max;
	loader_t L = { .t = st__trainer_table(tr, k), .r = r, .path = path, .nf = nf,
		       .dim = info->dim, .prec = tr->rows.prec,
		       .max = ram ? max : 1, .err = err, .errlen = errlen, .d = filter,
		       .me = filter ? st_dist_rank(filter) : 0 };
	pthread_mutex_init(&L.mu, NULL);
	char what[96];
	const char *base = strrchr(path, '/');
	snprintf(what, sizeof what, "strata: restoring %.64s", base ? base + 1 : path);
	st_meter_init(&L.meter, what, "rows");
	L.meter.total = (int64_t)info->n_rows;
	pthread_t tid[LOAD_THREADS];
	int started = 0;
	for (int i = 1; ram && i < LOAD_THREADS; i++) {
		if (pthread_create(&tid[started], NULL, load_main, &L) != 0)
			break;   /* fewer threads: the same work, slower */
		char tname[16];
		snprintf(tname, sizeof tname, "st-resume-%d", i);
		pthread_setname_np(tid[started], tname);
		started++;
	}
	load_run(&L);
	for (int i = 0; i < started; i++)
		pthread_join(tid[i], NULL);
	st_meter_fini(&L.meter);
	pthread_mutex_destroy(&L.mu);
	rc = judge(dir, mf, r, L.rc < 0 ? L.rc : ST_OK, damaged, err, errlen);
	st_rows_reader_close(r);
	return rc;
}

/*
 * Damaged checkpoints. st_ckpt_find_latest reports each checkpoint that
 * fails verification and falls back to the next older one; when none is
 * left it returns ST_ENOENT, as it does for an empty directory. Resume must
 * tell the two apart: starting from the beginning over damaged checkpoints
 * would hide the damage, and retention (newest step numbers first) would
 * then delete the new run's checkpoints in favour of the damaged ones. So
 * the reports are kept, the directory is searched for ckpt-<step>
 * directories that st_ckpt_list never lists (no manifest.yaml), and
 * "checkpoints, none usable" is an error of its own (ST_ECORRUPT).
 */
typedef struct damage {
	int n;                  /* checkpoints that failed verification */
	char what[2048];        /* "ckpt-X: why; ckpt-Y: why" (cut short if long) */
	size_t len;
} damage_t;

static void damage_add(damage_t *d, const char *name, const char *why, size_t why_len)
{
	d->n++;
	if (d->len >= sizeof d->what - 1)
		return;
	int w = snprintf(d->what + d->len, sizeof d->what - d->len, "%s%s: %.*s",
			 d->len ? "; " : "", name, (int)why_len, why);
	d->len = w < 0 ? d->len : d->len + (size_t)w;
	if (d->len >= sizeof d->what)
		d->len = sizeof d->what - 1;
}

/* st_ckpt_msg_fn: logs the report as st_ckpt_find_latest would, and keeps
 * "ckpt-X: why" without its "— falling back ..." tail. */
static void note_damage(void *arg, const char *msg)
{
	st_warn("%s", msg);
	const char *p = msg, *name, *why, *end = NULL;
	if (strncmp(p, "checkpoint ", 11))
		return;
	name = p + 11;
	why = strstr(name, ": ");
	if (!why)
		return;
	for (const char *q = strstr(why, " \xe2\x80\x94 "); q; q = strstr(q + 1, " \xe2\x80\x94 "))
		end = q;   /* the last dash: the reason may hold one */
	char nm[128];
	snprintf(nm, sizeof nm, "%.*s", (int)(why - name), name);
	why += 2;
	damage_add(arg, nm, why, end ? (size_t)(end - why) : strlen(why));
}

/* 1 if name is ckpt-<digits> with nothing after (a final name). */
static int final_ckpt_name(const char *name)
{
	if (strncmp(name, "ckpt-", 5))
		return 0;
	const char *p = name + 5;
	if (!*p)
		return 0;
	for (; *p; p++)
		if (*p < '0' || *p > '9')
			return 0;
	return 1;
}

static int is_dir(const char *path)
{
	struct stat sb;
	return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* Adds the checkpoints under root that have a final name but no manifest
 * (st_ckpt_list leaves them out: the writer renames a directory into place
 * only after its manifest, so one without is damaged). */
static void note_bare(const char *root, damage_t *d)
{
	DIR *dd = opendir(root);
	if (!dd)
		return;
	struct dirent *de;
	char path[4200];
	while ((de = readdir(dd))) {
		if (!final_ckpt_name(de->d_name))
			continue;
		snprintf(path, sizeof path, "%s/%s", root, de->d_name);
		if (!is_dir(path))
			continue;
		snprintf(path, sizeof path, "%s/%s/%s", root, de->d_name, ST_MANIFEST_NAME);
		struct stat sb;
		if (stat(path, &sb) == 0)
			continue;
		static const char why[] = "manifest.yaml is missing";
		st_warn("checkpoint %s: %s", de->d_name, why);
		damage_add(d, de->d_name, why, sizeof why - 1);
	}
	closedir(dd);
}

int st_trainer_set_aside_damaged(const st_trainer_ckpt_cfg_t *cfg, char *err, size_t errlen)
{
	err[0] = 0;
	DIR *dd = opendir(cfg->dir);
	if (!dd) {
		int e = errno;
		snprintf(err, errlen, "%s: cannot list: %s", cfg->dir, strerror(e));
		return -e;
	}
	int rc = ST_OK, moved = 0;
	struct dirent *de;
	char from[4200], to[4300];
	while ((de = readdir(dd)) && rc >= 0) {
		if (!final_ckpt_name(de->d_name))
			continue;
		snprintf(from, sizeof from, "%s/%s", cfg->dir, de->d_name);
		if (!is_dir(from))
			continue;
		/* ckpt-X.damaged, or .damaged-2, -3 ... when an earlier one is there */
		int i;
		for (i = 1; i < 100; i++) {
			if (i == 1)
				snprintf(to, sizeof to, "%s.damaged", from);
			else
				snprintf(to, sizeof to, "%s.damaged-%d", from, i);
			struct stat sb;
			if (lstat(to, &sb) < 0 && errno == ENOENT)
				break;
		}
		if (i == 100 || rename(from, to) < 0) {
			rc = i == 100 ? ST_EIO : -errno;
			snprintf(err, errlen, "%s: cannot move it aside: %s", from,
				 i == 100 ? "too many .damaged copies" : strerror(errno));
			break;
		}
		st_warn("damaged checkpoint %s moved aside to %s", from, to);
		moved++;
	}
	closedir(dd);
	return rc < 0 ? rc : moved;
}

/* Across processes: how every rank's load went (a collective), so that all
 * go on, all stop, or all try an older checkpoint. A rank that failed said
 * why; the others name it. A rank that found a file it loads damaged
 * (*damaged, err = "file 'x': ...") sends why: then every rank returns
 * ST_ECORRUPT with *damaged and the first such rank's why in err (rank 0
 * reports it when it chooses again), unless some rank failed otherwise,
 * which stops all. Also the barrier after which ranks may pull from each
 * other: every shard is loaded. */
typedef struct verdict {
	int32_t rc, damaged;
	char why[1024];
} verdict_t;

static int agree(st_trainer_t *tr, int rc, int *damaged, char *err, size_t errlen)
{
	st_net_t *net = st_dist_net(tr->dist.d);
	const int P = st_net_size(net);
	verdict_t mine = { .rc = rc, .damaged = *damaged };
	if (*damaged)
		snprintf(mine.why, sizeof mine.why, "%s", err);
	verdict_t *all = calloc((size_t)P, sizeof *all);
	if (!all) {
		/* not a damage: no rank may retry alone */
		*damaged = 0;
		snprintf(err, errlen, "out of memory");
		return ST_ENOMEM;
	}
	int g = st_net_allgather(net, &mine, sizeof mine, all);
	int bad = -1, dmg = -1;
	for (int r = 0; g >= 0 && r < P; r++) {
		if (all[r].rc < 0 && !all[r].damaged && bad < 0)
			bad = r;
		if (all[r].damaged && dmg < 0)
			dmg = r;
	}
	const int own_hard = rc < 0 && !*damaged;
	if (g < 0) {
		if (!own_hard) {
			snprintf(err, errlen, "the other ranks: %s", st_strerror(g));
			rc = g;
		}
		*damaged = 0;
	} else if (bad >= 0) {
		if (!own_hard) {
			snprintf(err, errlen, "rank %d could not load its part of the checkpoint (see "
				 "its messages)", bad);
			rc = all[bad].rc == ST_EINVAL ? ST_EINVAL : ST_EIO;
		}
		*damaged = 0;
	} else if (dmg >= 0) {
		snprintf(err, errlen, "%.*s", (int)sizeof all[dmg].why, all[dmg].why);
		*damaged = 1;
		rc = ST_ECORRUPT;
	}
	free(all);
	return rc;
}

/*
 * Restore in one pass (docs/operations.md). Verifying every file before
 * loading read the row files twice — the hash, then the load — and the
 * rows of a large checkpoint are nearly all of it. So the choice checks
 * only the size of the row files of tables in RAM, and load_rows hashes
 * them as it reads them (st_rows_reader_sum): a mismatch is found after
 * the rows were inserted, so the tables are emptied and the next older
 * checkpoint is chosen, reported as if its verification had failed.
 * Everything else is verified before a byte is loaded: the manifest, the
 * dense file (small), and the row files of tables with an SSD tier, whose
 * rows go to the SSD store as they load and could not be taken out again
 * as cheaply (st_table_clear empties RAM tables only).
 *
 * st_ckpt_defer_fn: 1 for the row files of tables in RAM (a one-process
 * file table-K.rows or a shard table-K.rank-R-of-W.rows). Whoever loads
 * such a file hashes it: on the writer's world each rank its own shard, on
 * another every rank every shard (load_tables).
 */
static int defer_rows(void *arg, const st_manifest_t *m, const st_manifest_file_t *f)
{
	(void)m;
	const st_trainer_t *tr = arg;
	int k, r, w, n = -1;
	if (!(sscanf(f->name, "table-%d.rows%n", &k, &n) == 1 && n > 0 && !f->name[n])) {
		n = -1;
		if (!(sscanf(f->name, "table-%d.rank-%d-of-%d.rows%n", &k, &r, &w, &n) == 3 &&
		      n > 0 && !f->name[n]))
			return 0;
	}
	return k >= 0 && k < tr->rows.n_tables && !st_table_ssd(st__trainer_table(tr, k));
}

/* The newest complete checkpoint that verifies (the files o->defer picks
 * by size only; o->rejected reported and passed over): *dir and *m (the
 * caller's). ST_ENOENT: none at all; ST_ECORRUPT with out->none_verifies:
 * some, none usable. dmg collects the reports across calls. */
static int choose(const st_trainer_ckpt_cfg_t *cfg, const st_ckpt_find_opts_t *o,
		  damage_t *dmg, char **dir, st_manifest_t **m, st_trainer_resume_t *out,
		  char *err, size_t errlen)
{
	int rc = st_ckpt_find_latest_opts(cfg->dir, o, dir, m, note_damage, dmg, err, errlen);
	if (rc == ST_ENOENT) {
		note_bare(cfg->dir, dmg);
		if (dmg->n) {
			snprintf(err, errlen, "%s: %d checkpoint%s, none usable: %s", cfg->dir, dmg->n,
				 dmg->n == 1 ? "" : "s", dmg->what);
			out->none_verifies = 1;
			rc = ST_ECORRUPT;
		}
	}
	return rc;
}

/* What rank 0 chose, for the other ranks of a multi-process job. */
typedef struct chosen {
	int32_t rc, none_verifies;
	char dir[4096];
	char err[2048];
} chosen_t;

/* Another rank than 0, once rank 0 chose dir (having verified its small
 * files and row files of tables with an SSD tier, and checked the size of
 * the others): reads the manifest and verifies again the files this rank
 * will read — the dense file and, on the writer's own world, its own
 * shard; on another world every shard, all of which it reads
 * (load_tables) — the row files of tables in RAM by size only, as they are
 * hashed while they load. Verifying the other ranks' shards too cost a
 * 2-process restore a second full pass over the checkpoint
 * (docs/benchmarks.md, "Multi-process checkpoints"). A file that fails is
 * damage (*damaged, "file 'x': why" in err, ST_OK and *out): the ranks
 * agree on it as on damage found while loading. */
static int verify_mine(st_trainer_t *tr, const char *dir, st_manifest_t **out, int *damaged,
		       char *err, size_t errlen)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/manifest.yaml", dir);
	st_manifest_t *m;
	int rc = st_manifest_read(path, &m, err, errlen);
	if (rc < 0)
		return rc;
	st_dist_t *d = tr->dist.d;
	const int me = st_dist_rank(d);
	const int same = m->world_size == st_dist_size(d) && m->owners == st_dist_owners(d) &&
			 m->owner_salt == st_algo_owner_salt() && (size_t)me < m->n_parts;
	for (size_t i = 0; i < m->n_files && rc >= 0; i++) {
		const char *name = m->files[i].name;
		/* another rank's shard on the writer's own world (rank 0's part
		 * also lists the dense file, which every rank reads) */
		int theirs = 0;
		for (size_t r = 0; same && !strncmp(name, "table-", 6) && r < m->n_parts && !theirs;
		     r++)
			for (size_t j = 0; r != (size_t)me && j < m->parts[r].n_files; j++)
				theirs |= !strcmp(m->parts[r].files[j], name);
		if (theirs)
			continue;
		rc = defer_rows(tr, m, &m->files[i]) ? st_ckpt_check_size(dir, &m->files[i], err, errlen)
						     : st_ckpt_verify_file(dir, &m->files[i], err, errlen);
	}
	if (rc == ST_ECORRUPT || rc == ST_ENOENT) {
		*damaged = 1;
		rc = ST_OK;
	}
	if (rc < 0) {
		char why[1024];
		snprintf(why, sizeof why, "%s", err);
		snprintf(err, errlen, "%s: %s", dir, why);
		st_manifest_free(m);
		return rc;
	}
	*out = m;
	return ST_OK;
}

/* Across processes rank 0 chooses (the ranks would otherwise race a
 * writer or a damage differently) and tells the others, which verify the
 * same checkpoint themselves before they read it (verify_mine: *damaged).
 * A collective: every rank calls it. */
static int choose_dist(st_trainer_t *tr, const st_trainer_ckpt_cfg_t *cfg,
		       const st_ckpt_find_opts_t *o, damage_t *dmg, char **dir, st_manifest_t **m,
		       int *damaged, st_trainer_resume_t *out, char *err, size_t errlen)
{
	st_net_t *net = st_dist_net(tr->dist.d);
	chosen_t *c = calloc(1, sizeof *c);
	if (!c) {
		snprintf(err, errlen, "out of memory");
		return ST_ENOMEM;
	}
	if (st_net_rank(net) == 0) {
		c->rc = choose(cfg, o, dmg, dir, m, out, err, errlen);
		c->none_verifies = out->none_verifies;
		snprintf(c->dir, sizeof c->dir, "%s", *dir ? *dir : "");
		snprintf(c->err, sizeof c->err, "%s", err);
	}
	int rc = st_net_bcast(net, 0, c, sizeof *c);
	if (rc < 0) {
		snprintf(err, errlen, "cannot learn rank 0's checkpoint: %s", st_strerror(rc));
	} else if (st_net_rank(net) == 0) {
		rc = c->rc;
	} else {
		rc = c->rc;
		out->none_verifies = c->none_verifies;
		snprintf(err, errlen, "%s", c->err);
		if (rc >= 0)
			rc = verify_mine(tr, c->dir, m, damaged, err, errlen);
		if (rc >= 0 && !(*dir = strdup(c->dir)))
			rc = ST_ENOMEM;
	}
	free(c);
	return rc < 0 ? rc : ST_OK;
}

static const st_manifest_file_t *manifest_file(const st_manifest_t *m, const char *name)
{
	for (size_t i = 0; i < m->n_files; i++)
		if (!strcmp(m->files[i].name, name))
			return &m->files[i];
	return NULL;
}

/* Reads the rows of the tables in RAM (ssd = 0) or of those with an SSD
 * tier (ssd = 1) of checkpoint dir into this rank's tables: from the one
 * file of a one-process checkpoint, or from each rank's shard of a
 * multi-process one; in a multi-process job only the rows this rank owns
 * under the current world (their optimizer state and counters move with
 * them). The same world as the writer's (size, owners, owner function)
 * reads only this rank's own shard. Row files of tables in RAM are hashed
 * as they load (defer_rows): damage sets *damaged. */
static int load_tables(st_trainer_t *tr, const char *dir, const st_manifest_t *m, int ssd,
		       int *damaged, char *err, size_t errlen)
{
	st_dist_t *d = tr->dist.d;
	const int W = (int)m->world_size, me = d ? st_dist_rank(d) : 0;
	const int same = d && W == st_dist_size(d) && m->owners == st_dist_owners(d) &&
			 m->owner_salt == st_algo_owner_salt();
	char name[64];
	int rc = ST_OK;
	for (int k = 0; k < tr->rows.n_tables && rc >= 0; k++) {
		if (!st_table_ssd(st__trainer_table(tr, k)) != !ssd)
			continue;
		for (int r = 0; r < (W > 0 ? W : 1) && rc >= 0; r++) {
			if (same && r != me)
				continue;
			st_export_rows_name(name, sizeof name, k, r, W);
			const st_manifest_file_t *mf = manifest_file(m, name);
			if (mf && !defer_rows(tr, m, mf))
				mf = NULL;   /* verified before */
			rc = load_rows(tr, k, dir, name, mf, same ? NULL : d, damaged, err, errlen);
		}
	}
	return rc;
}

/* Empties the tables in RAM after a load found damage (nothing else was
 * changed: see load_one). */
static int clear_ram_tables(st_trainer_t *tr, char *err, size_t errlen)
{
	for (int k = 0; k < tr->rows.n_tables; k++) {
		st_table_t *t = st__trainer_table(tr, k);
		int rc = st_table_ssd(t) ? ST_OK : st_table_clear(t);
		if (rc < 0) {
			snprintf(err, errlen, "table %d: cannot empty it after a damaged checkpoint: %s",
				 k, st_strerror(rc));
			return rc;
		}
	}
	return ST_OK;
}

/*
 * Loads checkpoint dir (manifest m, chosen and verified but for the row
 * files load_rows hashes) into the trainer. In order: everything that can
 * be checked without the rows (compatibility, the dense tensors' names and
 * shapes, the counters), the rows of the tables in RAM, the ranks' verdict
 * (agree), the rows of the tables with an SSD tier, and only then the dense
 * parameters and counters: a damage found in the rows (*damaged, on every
 * rank) has changed the RAM tables alone, which clear_ram_tables empties,
 * so an older checkpoint — or a start from the beginning, when every one is
 * damaged — finds the trainer as it was. *damaged may come in set (this
 * rank's verify_mine found damage): then it loads nothing and only agrees.
 */
static int load_one(st_trainer_t *tr, const st_trainer_ckpt_cfg_t *cfg, const char *dir,
		    const st_manifest_t *m, int *damaged, st_trainer_resume_t *out, char *err,
		    size_t errlen)
{
	int rc = *damaged ? ST_ECORRUPT : st_ckpt_check_compat(m, cfg->job_hash, cfg->model, err,
								 errlen);
	st_safetensors_t *f = NULL;
	char path[4200];
	if (rc >= 0) {
		snprintf(path, sizeof path, "%s/dense.safetensors", dir);
		rc = st_safetensors_read(path, &f, err, errlen);
	}
	float *params = st_model_params(tr->model);
	int nt = st_model_ntensors(tr->model);
	/* at[i]: tensor i of the model in f; at[nt]: the dense optimizer state */
	int *at = calloc((size_t)nt + 1, sizeof *at);
	if (!at && rc >= 0) {
		snprintf(err, errlen, "out of memory");
		rc = ST_ENOMEM;
	}
	for (int i = 0; i < nt && rc >= 0; i++) {
		const st_tensor_info_t *ti = st_model_tensor(tr->model, i);
		size_t numel = 1;
		for (int d = 0; d < ti->ndim; d++)
			numel *= (size_t)ti->shape[d];
		int j;
		for (j = 0; j < f->n_tensors && strcmp(f->tensors[j].name, ti->name); j++)
			;
		if (j == f->n_tensors || !f->tensors[j].f32 || f->tensors[j].numel != numel) {
			snprintf(err, errlen, "%s: tensor %s %s", path, ti->name,
				 j == f->n_tensors ? "is missing" : "has another shape or type");
			rc = ST_EINVAL;
			break;
		}
		at[i] = j;
	}
	size_t nds = st_sync_dense_state_floats(&tr->pol.env);
	if (rc >= 0) {
		int j;
		for (j = 0; j < f->n_tensors && strcmp(f->tensors[j].name, "optim.dense_state"); j++)
			;
		if (j == f->n_tensors || !f->tensors[j].f32 || f->tensors[j].numel != nds) {
			snprintf(err, errlen, "%s: optim.dense_state is missing or of another size", path);
			rc = ST_EINVAL;
		} else {
			at[nt] = j;
		}
	}
	uint64_t dt = 0, gs = 0, ex = 0, pb = 0, pe = 0, pd = 0, bs = 0;
	const char *phs = st_manifest_sync_get(m, "phase");
	if (rc >= 0 && (parse_u64(m, "dense_steps", &dt) < 0 || parse_u64(m, "global_steps", &gs) < 0 ||
			parse_u64(m, "examples", &ex) < 0 || parse_u64(m, "pass_batches", &pb) < 0 ||
			parse_u64(m, "pass_examples", &pe) < 0 || parse_u64(m, "pass_done", &pd) < 0 ||
			!phs || m->n_shards < 1)) {
		snprintf(err, errlen, "%s: manifest lacks the trainer's counters or data position", dir);
		rc = ST_EFORMAT;
	}
	if (rc >= 0)
		rc = load_tables(tr, dir, m, 0, damaged, err, errlen);
	if (tr->dist.d)
		rc = agree(tr, rc, damaged, err, errlen);
	if (rc >= 0) {
		rc = load_tables(tr, dir, m, 1, damaged, err, errlen);
		if (tr->dist.d)
			rc = agree(tr, rc, damaged, err, errlen);
	}
	if (rc >= 0) {
		for (int i = 0; i < nt; i++) {
			const st_tensor_info_t *ti = st_model_tensor(tr->model, i);
			memcpy(params + ti->offset, f->tensors[at[i]].f32,
			       sizeof(float) * f->tensors[at[i]].numel);
		}
		memcpy(tr->pol.dstate, f->tensors[at[nt]].f32, sizeof(float) * nds);
	}
	/* pass_batches counts read batches of the writer's size; the read stage
	 * numbers this job's batches (which rank takes which, the interval).
	 * Checkpoints before batch_size was recorded were read as they are. */
	if (rc >= 0 && st_manifest_sync_get(m, "batch_size") && parse_u64(m, "batch_size", &bs) >= 0 &&
	    bs > 0 && cfg->batch_size > 0 && bs != (uint64_t)cfg->batch_size)
		pb = (pb * bs + (uint64_t)cfg->batch_size - 1) / (uint64_t)cfg->batch_size;
	if (rc >= 0) {
		/* Across processes rank 0 carries the job's examples; each other
		 * rank counts its own from here (a checkpoint sums them). */
		const int rank0 = !tr->dist.d || st_dist_rank(tr->dist.d) == 0;
		tr->pol.dt = dt;
		tr->step.gstep = gs;
		tr->batches = (uint64_t)m->step;
		tr->examples_done = rank0 ? ex : 0;
		tr->ckpt.step = m->step;
		tr->ckpt.pulled = (uint64_t)m->step;
		if (m->lineage)
			st_trainer_set_lineage(tr, m->lineage);
		tr->ckpt.pos_file = m->shards[0].offset;
		tr->ckpt.pos_rec = m->shards[0].records;
		out->step = (uint64_t)m->step;
		out->file = m->shards[0].offset;
		out->records = m->shards[0].records;
		out->examples = ex;
		out->phase = strtoll(phs, NULL, 10);
		out->pass_batches = pb;
		out->pass_examples = pe;
		out->pass_done = (int)pd;
		snprintf(out->dir, sizeof out->dir, "%s", dir);
	}
	free(at);
	st_safetensors_free(f);
	return rc;
}

int st_trainer_resume(st_trainer_t *tr, const st_trainer_ckpt_cfg_t *cfg,
		      st_trainer_resume_t *out, char *err, size_t errlen)
{
	err[0] = 0;
	out->none_verifies = 0;
	damage_t *dmg = calloc(1, sizeof *dmg);
	if (!dmg) {
		snprintf(err, errlen, "out of memory");
		return ST_ENOMEM;
	}
	st_ckpt_find_opts_t o = { .defer = defer_rows, .defer_arg = tr };
	char rejected[256], why[1024];
	int rc, damaged;
	/* Each round passes over the checkpoint it found damaged: the steps
	 * tried fall, so the loop ends. */
	do {
		char *dir = NULL;
		st_manifest_t *m = NULL;
		damaged = 0;
		rc = tr->dist.d ? choose_dist(tr, cfg, &o, dmg, &dir, &m, &damaged, out, err, errlen)
				: choose(cfg, &o, dmg, &dir, &m, out, err, errlen);
		if (rc >= 0)
			rc = load_one(tr, cfg, dir, m, &damaged, out, err, errlen);
		if (rc >= 0 || !damaged) {
			damaged = 0;
		} else {
			/* Reported by rank 0's next choice, as a failed
			 * verification: "checkpoint ckpt-X: file 'y': checksum
			 * mismatch (...) — falling back to ckpt-W". */
			const char *base = strrchr(dir, '/');
			base = base ? base + 1 : dir;
			snprintf(rejected, sizeof rejected, "%s", base);
			snprintf(why, sizeof why, "%s", err);
			o.rejected = rejected;
			o.rejected_step = strtoll(base + 5, NULL, 10);   /* ckpt-<step> */
			o.why = why;
			if ((rc = clear_ram_tables(tr, err, errlen)) < 0)
				damaged = 0;
		}
		free(dir);
		st_manifest_free(m);
	} while (damaged);
	free(dmg);
	return rc;
}
