/*
 * safetensors.h — the dense part of checkpoints and exports in the
 * safetensors format, loadable by `safetensors.torch.load_file`.
 *
 * Layout (docs/formats.md has the byte table): u64 little-endian N, N bytes
 * of JSON header padded with spaces to a multiple of 8, then the tensor data.
 * The header maps each tensor name to {"dtype", "shape", "data_offsets":
 * [begin, end]} (offsets relative to the first data byte) and may hold
 * "__metadata__": {string: string}.
 *
 * strata writes F32 only. The reader accepts every dtype of the format (so a
 * foreign file can be inspected), checks everything the reference
 * implementation checks — header length, UTF-8, JSON syntax, known dtypes,
 * shape x dtype size = byte length, tensors covering the data with no gap or
 * overlap — and more: duplicate names, unknown fields and trailing bytes are
 * errors too. Every rejection is ST_EFORMAT (or ST_ECORRUPT for a file
 * shorter than its header says) with "path: what is wrong" in err.
 *
 * Thread-safety: functions are reentrant; a st_safetensors_t may be read by
 * any number of threads once loaded.
 */
#ifndef ST_DUMP_SAFETENSORS_H
#define ST_DUMP_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "ops/dump/dumpio.h"

#define ST_SAFETENSORS_MAX_DIMS 8
/* The reference implementation refuses headers above 100 MB; so do we. */
#define ST_SAFETENSORS_MAX_HEADER ((uint64_t)100000000)

typedef enum st_safetensors_dtype {
	ST_SAFETENSORS_BOOL, ST_SAFETENSORS_U8, ST_SAFETENSORS_I8,
	ST_SAFETENSORS_F8_E5M2, ST_SAFETENSORS_F8_E4M3,
	ST_SAFETENSORS_I16, ST_SAFETENSORS_U16, ST_SAFETENSORS_F16, ST_SAFETENSORS_BF16,
	ST_SAFETENSORS_I32, ST_SAFETENSORS_U32, ST_SAFETENSORS_F32,
	ST_SAFETENSORS_F64, ST_SAFETENSORS_I64, ST_SAFETENSORS_U64,
	ST_SAFETENSORS_NDTYPES
} st_safetensors_dtype_t;

/* A string pair of "__metadata__" (and of the manifest's string maps). */
typedef struct st_kv {
	const char *key;
	const char *value;
} st_kv_t;

/* One tensor. For writing the caller fills name, ndim, shape and f32 (dtype
 * is ignored: strata writes F32); nothing is copied or kept. For reading,
 * every field is set and points into the st_safetensors_t. */
typedef struct st_safetensors_tensor {
	const char *name;
	int ndim;                                /* 0 (a scalar) .. MAX_DIMS */
	int64_t shape[ST_SAFETENSORS_MAX_DIMS];
	st_safetensors_dtype_t dtype;
	const float *f32;      /* the data when dtype is F32, else NULL */
	const void *data;      /* reading: the raw little-endian bytes */
	uint64_t numel;        /* reading: product of shape (1 for a scalar) */
	uint64_t nbytes;       /* reading: numel x dtype size */
} st_safetensors_tensor_t;

/* A loaded file. Tensors are in file data order. Freed by st_safetensors_free. */
typedef struct st_safetensors {
	st_safetensors_tensor_t *tensors;
	int n_tensors;
	st_kv_t *meta;         /* "__metadata__" pairs, in header order */
	int n_meta;
	uint64_t header_len;   /* N */
	void *priv_;           /* owns every string and data byte above */
} st_safetensors_t;

/*
 * Writes tensors t[0..n) and metadata meta[0..n_meta) to path, data in the
 * given order, and fsyncs it. Names must be non-empty, distinct and not
 * "__metadata__"; metadata keys distinct. Streams the data straight from the
 * caller's arrays (no copy). Returns ST_OK and fills *sum (size and XXH3 of
 * the whole file; may be NULL), ST_EINVAL for bad arguments, ST_ENOSPC /
 * ST_EIO / ST_ENOMEM; on failure nothing is left at path and err (may be
 * NULL) holds "path: reason". The caller keeps ownership of everything.
 */
int st_safetensors_write(const char *path, const st_safetensors_tensor_t *t, int n,
			 const st_kv_t *meta, int n_meta, st_dumpio_sum_t *sum,
			 char *err, size_t errlen);

/* Reads and validates a whole file. Returns ST_OK and *out (the caller frees
 * it with st_safetensors_free), ST_ENOENT / ST_EIO, ST_ENOMEM, ST_EFORMAT
 * for a malformed file, ST_ECORRUPT for one shorter than its header. Data
 * pointers are aligned to their element size (an F32 tensor whose begin
 * offset is not a multiple of 4 is refused as malformed). */
int st_safetensors_read(const char *path, st_safetensors_t **out, char *err, size_t errlen);

/* The same checks on a file image in memory (what read uses; also for the
 * fuzzers). The bytes are copied; `name` only labels messages. */
int st_safetensors_parse(const void *buf, size_t len, const char *name,
			 st_safetensors_t **out, char *err, size_t errlen);

/* Tensor by name, or NULL. */
const st_safetensors_tensor_t *st_safetensors_find(const st_safetensors_t *f, const char *name);

/* Metadata value by key, or NULL. */
const char *st_safetensors_meta(const st_safetensors_t *f, const char *key);

/* Frees everything of a loaded file (NULL-safe). */
void st_safetensors_free(st_safetensors_t *f);

/* "F32" etc., and the element size in bytes. */
const char *st_safetensors_dtype_name(st_safetensors_dtype_t d);
size_t st_safetensors_dtype_size(st_safetensors_dtype_t d);

#endif
