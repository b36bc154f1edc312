/*
 * dist_msg.h — the messages of the two-phase commit that multi-process
 * checkpoints (dist_ckpt.c) and exports (dist_export.c) share: each rank
 * reports its files to rank 0, which records the world in the manifest
 * (docs/distributed.md, "Checkpoints of multi-process jobs"). Private to
 * ops/train.
 */
#ifndef ST_TRAIN_DIST_MSG_H
#define ST_TRAIN_DIST_MSG_H

#include <stddef.h>
#include <stdint.h>

#include "ops/dump/ckpt.h"
#include "runtime/net/net.h"

enum { CH_UP = 0x4000, CH_DOWN = 0x4001, CH_AT = 0x4005, CH_END = 0x4006 };
enum { M_COPIED = 1, M_GO, M_REPORT, M_RESULT, M_DRAINED, M_COPY, M_ENDED, M_DENSE, M_AT,
       M_MISSED };
enum { CK_NAME_MAX = 64 };

typedef struct ck_msg {
	uint32_t type;
	int32_t ok;            /* 1: this rank's part went well */
	int64_t step;          /* the checkpoint's step (rank 0's GO names it) */
	/* REPORT: what the manifest needs of this rank */
	uint64_t pass_seq;     /* global batches of the pass up to its last one */
	uint64_t file, rec;    /* its data position after that batch */
	uint64_t examples, pass_examples;
	uint32_t n_files;
	uint32_t n_floats;     /* DENSE: the replica's floats that follow */
} ck_msg_t;

typedef struct ck_file {
	char name[CK_NAME_MAX];
	uint64_t bytes, xxh3;
} ck_file_t;

/* Rank 0's view of the world it records: each rank's files (a part per
 * rank, in rank order) and the names they point to. */
typedef struct world {
	st_manifest_t m;
	char **names;          /* every part's file names (one allocation each) */
	size_t n_names;
} world_t;

/* m (and nf file entries) to dst on channel ch; a failure is logged. */
int st__ck_send(st_net_t *net, int dst, uint32_t ch, const ck_msg_t *m, const ck_file_t *f,
		size_t nf);
/* The next well-formed message from src on ch (the caller frees *out):
 * its payload is n_files file entries or n_floats floats. A wait re-checks
 * every 0.5 s that src is alive: ST_EPEER when it is not. */
int st__ck_recv_any(st_net_t *net, int src, uint32_t ch, ck_msg_t **out);
/* As st__ck_recv_any, waiting at most timeout_s: ST_EAGAIN when nothing
 * came (and src is alive). */
int st__ck_try_recv(st_net_t *net, int src, uint32_t ch, double timeout_s, ck_msg_t **out);
/* The next message of `type` and `step` (any step: -1) from src; others
 * are leftovers of an abandoned checkpoint or export and go. */
int st__ck_recv(st_net_t *net, int src, uint32_t ch, uint32_t type, int64_t step,
		ck_msg_t **out);
/* Rank 0's world: rank's nf files as its part (names copied). ST_OK or
 * ST_ENOMEM; st__ck_world_free frees what was added. */
int st__ck_world_add(world_t *wd, int rank, const ck_file_t *f, size_t nf);
void st__ck_world_free(world_t *wd);
/* The files w wrote, as a message's list (malloc'ed; NULL: no memory). */
ck_file_t *st__ck_files_of(st_ckpt_writer_t *w, size_t *nf);

#endif
