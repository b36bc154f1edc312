/*
 * dist_sync.h — helpers shared by the multi-process policies
 * (dist_policies.c, dist_shadow.c; private to ops/sync).
 */
#ifndef ST_DIST_SYNC_H
#define ST_DIST_SYNC_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "ops/sync/sync.h"

/* One worker's row gradients to their owners, applied on arrival (async,
 * shadow, hop_bs): the workers take turns (st_dist_push is one thread at a
 * time) and share the message arrays, grown once. */
typedef struct rowsend {
	pthread_mutex_t mu;
	uint64_t *keys;
	uint8_t *tab;
	float *grad;
	size_t cap;
} rowsend_t;

void st__rowsend_init(rowsend_t *r);
void st__rowsend_fini(rowsend_t *r);
struct st_dist_buf;
/* g's admitted rows to their owners: applied on arrival with optimizer
 * step t (st_dist_push), or with buf set a contribution to the owners'
 * gradient buffers (st_dist_push_buf, with g->owner_token). *bytes grows
 * by what the rows take. ST_OK or an error. */
int st__rowsend_push(const st_sync_env_t *env, rowsend_t *r, const st_sync_grads_t *g,
		     uint64_t t, const struct st_dist_buf *buf, uint64_t *bytes);

/* Hooks the multi-process policies often do not need. */
int st__sync_noop_begin_batch(void *self, uint32_t n_uniq);
void st__sync_noop_end_batch(void *self, int w);

#endif
