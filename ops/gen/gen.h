/*
 * gen.h — synthetic Criteo-like click data with a known ground truth.
 *
 * Every row is a pure function of (seed, row index): a counter-based RNG keyed
 * by both drives it, so rows can be produced in any order, by any number of
 * threads, and the output is byte-identical. Train rows are indices
 * 0 .. rows-1; eval rows are ST_GEN_EVAL_BASE + 0 .. eval_rows-1 (a disjoint
 * stream from the same distribution, independent of `rows`).
 *
 * Model of a row:
 *   - 26 categorical slots: value index v ~ Zipf(zipf) over [0, vocab)
 *     (Hörmann's rejection-inversion: no tables, so vocab may be 1e9); the
 *     printed value is 8 lowercase hex digits of hash(seed, slot, v); each
 *     (slot, v) has a hidden weight N(0, sigma_slot) from hash(seed, slot, v).
 *     Some slots carry signal, some are noise; each slot is missing (empty
 *     field) with a small per-slot probability.
 *   - 13 integer fields I1..I13: log-normal counts driven by a per-row latent,
 *     sometimes missing, I2 sometimes negative (as in Criteo); they add a
 *     hidden linear term on log1p(max(x, 0)).
 *   - label ~ Bernoulli(sigmoid(b0 + sum of weights + dense term)), with b0
 *     calibrated (on a fixed sample) so the positive rate is about 0.25.
 *
 * Days (opts.days = D > 0): D consecutive "days" whose hidden model drifts,
 * for online learning (predict day d+1 with what was learned up to day d).
 * Row i of day d is a pure function of (seed, d, i); day 0 is exactly the
 * undrifted generator (the same rows, weights and b0 as days = 0). With
 * a = sqrt(1 - drift), day d's weight of (slot, v) is
 *     w_d = a * w_{d-1} + sqrt(drift) * N(0, sigma_slot)
 * with the innovation a hash of (seed, slot, v, d): an AR(1) that keeps the
 * weight variance, so corr(w_0, w_d) = a^d = (1 - drift)^(d/2). Nothing is
 * tabled: a weight of day d costs d hashing steps. On every fourth slot
 * (s % 4 == 3) popularity drifts too: rank r of day d is value index
 * (r - floor(10 * drift * d)) mod vocab, so values from the far tail become
 * the most frequent ones ("new items") while old ones slide down the ranks.
 * Each day has its own calibrated b0 (positive rate about 0.25 every day).
 *
 * Multi-hot (opts.multi_hot = L > 0, days 0 only; issue 18): every present
 * categorical field is a list of n keys, n uniform in 1..L per row and
 * field (L = 100 is MLPerf's multi-hot Criteo range; L = 19 averages 10).
 * Key 0 is the single-hot value of the field; keys 1..n-1 are further Zipf
 * draws. The field's term of the hidden logit is the sum of its keys'
 * weights over sqrt(n) (a pooled signal with the variance of one weight), so
 * a model that pools the list sees all of it and one that reads the first
 * key only sees 1/sqrt(n) of it. Files print a list as its keys' hex values
 * joined by '^' (read them with st.data.csv, sep "\t", no header, list
 * columns: docs/job-language.md); the output is not the single-hot one.
 * History (opts.history = L > 0, days and multi_hot 0; issue 19): two more
 * columns, a candidate's category and a '^'-joined history of 0..L
 * categories, whose match adds to the logit (ops/gen/history.h).
 * Cross (opts.cross = K > 0, days and multi_hot 0; issue 19): the logit
 * gains K planted pairwise terms, beta × z(a, v_a) × z(b, v_b) for slot
 * pairs (0,1) .. (2K-2, 2K-1) with per-value latents z (ops/gen/cross.h); no
 * column and no random draw is added, only labels and b0 change.
 * Labels (opts.labels = 2, days and multi_hot 0; issue 19): a second label
 * column, a conversion planted on clicked rows (ops/gen/conv.h).
 * (Days:) st_gen_write then writes day-000.tsv .. day-<D-1>.tsv (rows split
 * evenly, in order) and eval.tsv from the last day's distribution.
 */
#ifndef ST_GEN_H
#define ST_GEN_H

#include <stdint.h>

#include "runtime/batch.h"

#define ST_GEN_N_DENSE 13
#define ST_GEN_N_CAT 26
#define ST_GEN_EVAL_BASE (UINT64_C(1) << 62)
#define ST_GEN_MAX_DAYS 365
#define ST_GEN_MAX_LIST 100   /* opts.multi_hot at most */

typedef struct st_gen_opts {
	const char *dir;     /* output directory (st_gen_write only) */
	int64_t rows;        /* train rows */
	int64_t eval_rows;   /* eval rows (eval.tsv), 0 = none */
	int files;           /* train files, >= 1 */
	uint64_t seed;
	double zipf;         /* Zipf exponent, > 0 (1.1 is Criteo-like) */
	uint64_t vocab;      /* distinct values per slot, >= 1 */
	int threads;         /* writer threads; <= 0: one per online CPU */
	int days;            /* 0: no days (train-*.tsv); 1..ST_GEN_MAX_DAYS: day-NNN.tsv
				with a drifting model; st_gen_write needs files == 1
				and rows >= days then */
	double drift;        /* in [0, 1]: share of each weight's variance renewed
				per day (unused when days == 0) */
	int multi_hot;       /* 0: one key per field; 1..ST_GEN_MAX_LIST: lists of
				1..multi_hot keys (days must be 0) */
	int history;         /* 0: none; 1..ST_GEN_MAX_LIST: a behaviour history of
				0..history items with a target-dependent signal,
				two more columns (ops/gen/history.h; days and
				multi_hot must be 0; files only, no fill_batch) */
	int cross;           /* 0: none; 1..ST_GEN_MAX_CROSS: planted pairwise
				cross terms in the logit (ops/gen/cross.h; days
				and multi_hot must be 0) */
	int labels;          /* 0 or 1: the click; 2: click and a planted
				conversion on clicked rows (ops/gen/conv.h; days
				and multi_hot must be 0; files only) */
} st_gen_opts_t;

/* One generated row, before it is printed. */
typedef struct st_gen_row {
	int label;                        /* 0 or 1 */
	int8_t conv;                      /* labels 2: the conversion (0 or 1;
					     conv.h); else -1, not printed */
	double logit;                     /* true logit: the Bayes-optimal score */
	uint32_t dense_missing;           /* bit j set: I(j+1) is an empty field */
	int64_t dense[ST_GEN_N_DENSE];    /* 0 where missing */
	uint32_t cat_missing;             /* bit s set: C(s+1) is an empty field */
	uint32_t cat[ST_GEN_N_CAT];       /* printed as %08x */
	uint64_t cat_idx[ST_GEN_N_CAT];   /* value index: the Zipf rank (0 = most
					     frequent), shifted on the slots
					     whose popularity drifts */
	/* Multi-hot: keys of field s (n_keys[s] of them, 1 when single-hot;
	 * key 0 is cat[s]). list_idx, when the caller points it at
	 * ST_GEN_N_CAT * ST_GEN_MAX_LIST values, receives key i's value index
	 * at [s * ST_GEN_MAX_LIST + i] (the formatter and st_gen_logit need
	 * it); NULL: not stored. */
	uint8_t n_keys[ST_GEN_N_CAT];
	uint64_t *list_idx;
	/* History (opts.history > 0, else has_hist = 0): the candidate's and
	 * the n_hist history items' categories (ops/gen/history.h). */
	uint8_t has_hist, n_hist;
	uint16_t cand_cat;
	uint64_t hist_seed;  /* the generator's seed, for printing the values */
	uint16_t hist_cat[ST_GEN_MAX_LIST];
} st_gen_row_t;

typedef struct st_gen st_gen_t;

/* Validates opts and calibrates b0 (a few ms). Returns ST_OK and *out, or
 * ST_EINVAL (logged) / ST_ENOMEM. Caller destroys. The object is immutable
 * after creation: every function below is thread-safe on it. opts->dir is
 * not copied and not used by the object. */
int st_gen_create(st_gen_t **out, const st_gen_opts_t *o);
void st_gen_destroy(st_gen_t *g);

/* Fills *r with row `row` (see the index spaces above) of day 0, which is
 * the only day when opts.days == 0. Thread-safe. */
void st_gen_row(const st_gen_t *g, uint64_t row, st_gen_row_t *r);

/* Fills *r with row `row` of day `day` (0 <= day < max(days, 1); asserted):
 * features drawn from the day's popularity, label and r->logit from the day's
 * hidden model. Row indices are per day (day-NNN.tsv holds rows 0 .. n-1 of
 * its day; eval.tsv holds ST_GEN_EVAL_BASE + i of the last day). Costs about
 * `day` hashing steps per signal slot more than day 0. Thread-safe. */
void st_gen_day_row(const st_gen_t *g, int day, uint64_t row, st_gen_row_t *r);

/* The true logit of the features of r (r->dense, r->cat_idx, the missing
 * masks) under day `day`'s hidden model and b0: r->logit when `day` is the
 * day r was drawn from, and the Bayes-optimal score of a model frozen at
 * `day` otherwise. Thread-safe. */
double st_gen_logit(const st_gen_t *g, int day, const st_gen_row_t *r);

/* The hidden weight of value index v of slot `slot` on day `day` (0 for the
 * noise slots). Thread-safe. */
double st_gen_weight(const st_gen_t *g, int day, int slot, uint64_t v);

/* The calibrated intercept of day `day`. Thread-safe. */
double st_gen_b0(const st_gen_t *g, int day);

/* Formats row r as one Criteo TSV line (label, 13 ints, 26 hex values, 40
 * tab-separated fields, '\n'-terminated) into buf, which must hold at least
 * ST_GEN_MAX_LINE bytes. Returns the length written. A multi-hot row
 * (r->list_idx set) needs st_gen_max_line(g) bytes and st_gen_format_list. */
#define ST_GEN_MAX_LINE 640
int st_gen_format(const st_gen_row_t *r, char *buf);
int st_gen_format_list(const st_gen_t *g, const st_gen_row_t *r, char *buf);
/* The longest line g can format. */
size_t st_gen_max_line(const st_gen_t *g);

/* Appends rows first_row .. first_row+n-1 to batch b (b->n + n <= b->cap,
 * b->n_dense == 13, b->n_slots == 26): labels, dense values as floats (missing
 * = 0), and one key per present slot made by st_read_key(slot, hex, 8) on the
 * same 8 hex digits the files contain (key_val 1); multi-hot: every key of
 * the list, in order, first_only = 0 (st_gen_fill_batch_ex with first_only
 * keeps key 0 only: the "first key only" reading of the same rows). Returns ST_OK, ST_EINVAL
 * (shape), or ST_ENOMEM (key growth). Thread-safe on g; b is the caller's. */
int st_gen_fill_batch(const st_gen_t *g, uint64_t first_row, st_batch_t *b,
		      uint32_t n);

int st_gen_fill_batch_ex(const st_gen_t *g, uint64_t first_row, st_batch_t *b,
			 uint32_t n, int first_only);

/* The same for rows of day `day` (see st_gen_day_row). */
int st_gen_day_fill_batch(const st_gen_t *g, int day, uint64_t first_row,
			  st_batch_t *b, uint32_t n);

/* Writes o->dir/train-00000.tsv .. train-<files-1>.tsv (rows split evenly
 * and in order across files), or with o->days = D > 0 o->dir/day-000.tsv ..
 * day-<D-1>.tsv (day d holds rows*(d+1)/D - rows*d/D rows: the split adds up
 * to rows), and o->dir/eval.tsv when eval_rows > 0 (of the last day). Creates
 * dir (and parents). Each file is written under a hidden temporary name and
 * renamed when complete, so an interrupted or failed run never leaves a file
 * that looks complete. Output is byte-identical for the same opts whatever
 * o->threads is. progress (may be NULL) is called from one writer thread at a
 * time, in order, with no lock held, after each chunk is written; rows_total
 * counts train and eval rows. Returns ST_OK, ST_EINVAL, ST_ENOMEM, or ST_EIO
 * with the path and reason logged. Not reentrant on the same dir. */
int st_gen_write(const st_gen_opts_t *o,
		 void (*progress)(int64_t rows_done, int64_t rows_total, void *arg),
		 void *arg);

#endif
