/*
 * history.h — the behaviour history of `strata gen --history L` (issue 19):
 * a target-dependent signal that a model can find only by comparing the
 * candidate with the items of the history, which is what DIN's attention
 * (ops/nn/attention.h) does and a sum over the history does not.
 *
 * Model of one row (its own random stream, keyed by (seed, row), so every
 * other field of the row is what it is without history):
 *   - the user's interest u, uniform over ST_GEN_HIST_CATS categories;
 *   - a history of n items, n uniform in 0..L (0: an empty history); each
 *     item's category is u with probability 1/2, else uniform;
 *   - the candidate's category c: u with probability 0.35, else uniform;
 *   - the logit gains ST_GEN_HIST_BETA × (share of the history in c), i.e.
 *     beta × m / n with m the history items of category c (0 when n = 0).
 * The history alone says nothing about the click (u is not printed, and the
 * items' categories are spread the same whatever the label) and the
 * candidate's category alone says little: the signal is in their match.
 *
 * Printed as two more columns after Criteo's 40: the candidate's category
 * (8 hex digits) and the history's categories joined by '^' (empty when
 * n = 0); read them as { "cat" } and { "cat", list = "^", pooling = "none" }
 * (jobs/din.lua).
 */
#ifndef ST_GEN_HISTORY_H
#define ST_GEN_HISTORY_H

#include <stdint.h>

#define ST_GEN_HIST_CATS 64
#define ST_GEN_HIST_BETA 3.0

/* Draws row `row`'s history of at most max_len items: *n, cat[0 .. *n-1],
 * *cand. Returns the row's term of the logit. Thread-safe (pure). */
double st__gen_history(uint64_t seed, uint64_t row, int max_len, uint8_t *n,
		       uint16_t *cat, uint16_t *cand);

/* The logit term of a drawn history (the value st__gen_history returned). */
double st__gen_history_term(int n, const uint16_t *cat, uint16_t cand);

/* The printed value of category c in column col (0: candidate, 1: history). */
uint32_t st__gen_history_value(uint64_t seed, int col, uint16_t c);

#endif
