/*
 * trainer_test.h — test hooks of the trainer, compiled in always (like
 * Lua's failing test allocator), so that unit tests check the trainer's
 * internal books without including its private header
 * (ops/train/trainer_internal.h, which nothing outside ops/train
 * includes). Not for production callers.
 */
#ifndef ST_TRAINER_TEST_H
#define ST_TRAINER_TEST_H

#include <stddef.h>

/* The trainer (ops/train/trainer.h); declared here, not included, so that
 * this header depends on nothing. */
struct st_trainer;

/* Fault injection for the delta-tracking key sets (ops/train/store.c): -1
 * (the default) is inert; n >= 0 lets n more allocations of the sets
 * succeed and fails every later one with ST_ENOMEM until it is set back to
 * -1. Thread-safe (atomic). */
extern long st__trainer_keyset_fail_after;

/* ST_OK, or the error that lost a changed key since the last full export
 * (then deltas are refused). Thread-safe. */
int st__trainer_track_error(struct st_trainer *tr);

/* Keys of table k recorded as trained since the last export (delta
 * tracking; 0 before the first export). No stage running. */
size_t st__trainer_delta_keys(struct st_trainer *tr, int k);

/* 1 while the dump stage copies the state for a checkpoint (the gate then
 * holds even a cancelled pull; ops/train/checkpoint.c). Thread-safe. */
int st__trainer_snap_copying(struct st_trainer *tr);

#endif
