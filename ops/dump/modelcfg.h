/*
 * modelcfg.h — a model configuration (st_model_cfg_t of lang/job.h) as text,
 * so that an export carries the model it was trained with and a predictor
 * can rebuild exactly that model (ops/view/predict.h).
 *
 * The text is one `key=value` line per field, '\n'-terminated, in a fixed
 * order (docs/formats.md, "Export metadata", has the list):
 *
 *   type=dnn
 *   emb_dim=8
 *   slot_dims=8,8,4          (only when the job gave per-slot dims)
 *   pooling=sum              (string fields the job left unset are omitted)
 *   slot_pooling=2,1,0       (only when a list field set its own: enum st_pooling per slot)
 *   hidden=64,32             (may be empty: "hidden=")
 *   bottom=
 *   activation=relu
 *   dense_transform=log1p
 *   init_scale=0.050000000000000003
 *   sparse_opt.name=adagrad  (sparse_opt.* and dense_opt.*: all ten keys,
 *   sparse_opt.rowwise=0      or none when the optimizer's name is unset)
 *   ...
 *   admit_min_count=0
 *   admit_prob=0
 *   ttl_steps=0
 *   optimizer=adagrad        (the legacy mirrors of sparse_opt/dense_opt)
 *   lr=0.050000000000000003
 *   ...
 *
 * Every field of st_model_cfg_t is encoded, those that change the forward
 * pass and the shapes (type, dims, pooling, layers, activation, dense
 * transform) and, for completeness, those of training (optimizers, init,
 * admission, TTL). Doubles are written with 17 significant digits, so
 * decode(encode(c)) equals c exactly.
 *
 * Decoding is strict: an unknown or repeated key, a missing required key, a
 * value that does not parse or is out of range (a type, pooling, activation,
 * transform or optimizer name strata does not know, a layer size < 1, more
 * than 16 layers), a line without '=' or an empty line is ST_EFORMAT with
 * "line N: ..." in err. Required: every key except the optional string
 * fields (pooling, activation, dense_transform, optimizer), slot_dims and
 * the optimizer groups.
 *
 * Thread-safety: reentrant; nothing is shared.
 */
#ifndef ST_DUMP_MODELCFG_H
#define ST_DUMP_MODELCFG_H

#include <stddef.h>

#include "lang/job.h"

/* Encodes cfg. Returns ST_OK and *out (a NUL-terminated malloc'ed string
 * the caller frees); ST_EINVAL when cfg cannot be written so that it reads
 * back (no type, a string with a newline, more than 16 layers, a negative
 * count, a NaN or infinite number), with the field in err; ST_ENOMEM. cfg
 * is only read. */
int st_modelcfg_encode(const st_model_cfg_t *cfg, char **out, char *err, size_t errlen);

/* Decodes text into *cfg, which it zeroes first. On ST_OK every string and
 * array of *cfg is owned by cfg and released by st_modelcfg_fini. On
 * ST_EFORMAT (message in err) or ST_ENOMEM *cfg holds nothing to release
 * (calling st_modelcfg_fini on it is still safe). */
int st_modelcfg_decode(const char *text, st_model_cfg_t *cfg, char *err, size_t errlen);

/* Frees what st_modelcfg_decode put into cfg and zeroes it. Safe twice and
 * on a zeroed struct. Never pass a cfg owned by a st_job_t. */
void st_modelcfg_fini(st_model_cfg_t *cfg);

/* 1 if a and b encode to the same text (every field equal; unset strings
 * equal only unset ones; slot_dims NULL equals an empty list), else 0. */
int st_modelcfg_equal(const st_model_cfg_t *a, const st_model_cfg_t *b);

#endif
