/*
 * pool.h — the trainer's worker pool: N workers that run one round of work
 * together, the calling thread being worker 0 (ops/train/pool.c has the
 * pool's whole life: threads, handshake, barriers, shutdown).
 *
 * A round: st_pool_run(p, fn, arg) makes every worker w in 0..N-1 call
 * fn(arg, w) once and returns when all N have returned. The caller runs
 * worker 0's share itself (it is the train stage's graph thread); workers
 * 1..N-1 are threads of the pool ("<name>-<w>", e.g. "st-train-1"). The
 * rounds are ordered: everything a worker wrote in a round happens before
 * anything the caller does after st_pool_run returns, and everything the
 * caller wrote before st_pool_run happens before the round.
 *
 * Thread-safety: every function but st_pool_run's fn is called from one
 * thread (the owner's), never from inside fn.
 */
#ifndef ST_TRAIN_POOL_H
#define ST_TRAIN_POOL_H

#include <pthread.h>
#include <stdint.h>
#include <semaphore.h>

typedef void (*st_pool_fn)(void *arg, int w);

typedef struct st_pool_thread {
	struct st_pool *pool;
	int idx;
	int cpu;                   /* OS cpu to pin to, -1 = none */
	pthread_t tid;
} st_pool_thread_t;

/* Caller-owned storage (st_pool_init / st_pool_fini); fields are the
 * pool's. */
typedef struct st_pool {
	int n;
	char name[12];             /* thread name prefix */
	int started;
	pthread_barrier_t bar;     /* start and end of every round */
	sem_t ready;               /* start handshake */
	st_pool_fn fn;             /* this round's work (the exit sentinel to stop) */
	void *arg;
	int64_t trace_id;           /* this round's batch id, for the trace's
				     * worker spans (written between rounds) */
	st_pool_thread_t *t;       /* [n]; t[0] is the caller's */
} st_pool_t;

/* A pool of n >= 1 workers whose threads are named "<name>-<w>" (name at
 * most 10 characters, so names fit the OS's 15). Starts no thread.
 * ST_OK or ST_ENOMEM (then st_pool_fini is safe). */
int st_pool_init(st_pool_t *p, int n, const char *name);
/* Stops the threads (st_pool_stop) and frees the pool. Safe after a
 * failed init and twice. */
void st_pool_fini(st_pool_t *p);

/* Pins worker w (1 .. n-1; worker 0 is the caller, pinned by whoever runs
 * it) to cpus[w] when w < ncpus and cpus[w] >= 0. Before st_pool_start. */
void st_pool_pin(st_pool_t *p, const int *cpus, int ncpus);

/* Starts workers 1..n-1 and waits until each runs (named and pinned).
 * No-op when started. ST_OK; a thread that cannot be created aborts (an
 * impossible init failure). */
int st_pool_start(st_pool_t *p);

/* Ends every worker thread: an exit sentinel in place of a round's work,
 * then joins them. No-op when not started; the pool may start again. */
void st_pool_stop(st_pool_t *p);

/* One round (see above); starts the threads first if needed. */
void st_pool_run(st_pool_t *p, st_pool_fn fn, void *arg);

#endif
