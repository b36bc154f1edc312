/*
 * tier.c — glue between the host tier (runtime/store/table.h rows) and one
 * device table (contract: gpu.h, "host tier glue"): a batch's pull makes
 * its unique keys resident and pinned on the GPU, its push copies the rows
 * back to the host and unpins them (hierarchical-gpu-parameter-server.md
 * Algorithm 1, lines 9 and 16; the device table is a cache of the host
 * tier, §3 "the upper-level module acts as a high-speed cache").
 *
 * Pull, for n distinct keys:
 *   1. look the keys up on the device, pinning the rows found (hits);
 *   2. read the slots back; the keys with slot -1 and a host row are misses;
 *   3. when the free rows do not cover the misses, evict every unpinned row
 *      (rows of batches in flight are pinned and stay);
 *   4. copy the misses' host rows into a page-locked staging buffer, upload
 *      them and insert them (pinned);
 *   5. patch the misses' slots into the slot array on the device.
 * Push copies the rows of the batch's slots device -> page-locked staging ->
 * host rows, then unpins every slot. Because every push writes back, a row
 * that is resident but unpinned always equals its host copy, which is what
 * makes dropping it at eviction safe. A caller that changes host rows behind
 * the device's back (another process's updates) must evict them first.
 *
 * Plain C over the gpu.h primitives; no kernels of its own. One host thread
 * uses a tier at a time; the table and stream belong to the caller.
 */
#include "cuda/gpu.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/err.h"

struct st_gpu_tier {
	st_gpu_table_t *t;
	st_gpu_stream_t *s;
	uint32_t max, rf;
	/* page-locked staging */
	uint64_t *h_keys;
	int32_t *h_slots, *h_mslots;
	uint32_t *h_idx;
	float *h_rows;
	/* device */
	uint64_t *d_keys;
	int32_t *d_mslots;
	uint32_t *d_idx;
	float *d_rows;
	uint32_t *miss;      /* host: positions of the misses */
	st_gpu_tier_stats_t st;
};

void st_gpu_tier_destroy(st_gpu_tier_t *x)
{
	if (!x)
		return;
	st_gpu_host_free(x->h_keys);
	st_gpu_host_free(x->h_slots);
	st_gpu_host_free(x->h_mslots);
	st_gpu_host_free(x->h_idx);
	st_gpu_host_free(x->h_rows);
	st_gpu_free(x->d_keys);
	st_gpu_free(x->d_mslots);
	st_gpu_free(x->d_idx);
	st_gpu_free(x->d_rows);
	free(x->miss);
	free(x);
}

int st_gpu_tier_create(st_gpu_tier_t **out, st_gpu_table_t *t, uint32_t max_keys,
		       st_gpu_stream_t *s)
{
	*out = NULL;
	st_gpu_tier_t *x = calloc(1, sizeof *x);
	if (!x)
		return ST_ENOMEM;
	x->t = t;
	x->s = s;
	x->max = max_keys;
	x->rf = st_gpu_table_row_floats(t);
	size_t m = max_keys ? max_keys : 1, rows = m * x->rf * sizeof(float);
	int rc;
	x->miss = malloc(m * sizeof *x->miss);
	if (!x->miss)
		rc = ST_ENOMEM;
	else if ((rc = st_gpu_host_alloc((void **)&x->h_keys, m * sizeof(uint64_t))) >= 0 &&
		 (rc = st_gpu_host_alloc((void **)&x->h_slots, m * sizeof(int32_t))) >= 0 &&
		 (rc = st_gpu_host_alloc((void **)&x->h_mslots, m * sizeof(int32_t))) >= 0 &&
		 (rc = st_gpu_host_alloc((void **)&x->h_idx, m * sizeof(uint32_t))) >= 0 &&
		 (rc = st_gpu_host_alloc((void **)&x->h_rows, rows)) >= 0 &&
		 (rc = st_gpu_alloc((void **)&x->d_keys, m * sizeof(uint64_t))) >= 0 &&
		 (rc = st_gpu_alloc((void **)&x->d_mslots, m * sizeof(int32_t))) >= 0 &&
		 (rc = st_gpu_alloc((void **)&x->d_idx, m * sizeof(uint32_t))) >= 0)
		rc = st_gpu_alloc((void **)&x->d_rows, rows);
	if (rc < 0) {
		st_gpu_tier_destroy(x);
		return rc;
	}
	*out = x;
	return ST_OK;
}

void st_gpu_tier_stats(const st_gpu_tier_t *x, st_gpu_tier_stats_t *out)
{
	*out = x->st;
}

/* Makes room for m more rows, evicting unpinned rows if needed. */
static int make_room(st_gpu_tier_t *x, uint32_t m)
{
	int64_t avail = st_gpu_table_free_rows(x->t, x->s);
	if (avail >= 0 && avail < (int64_t)m) {
		x->st.evictions++;
		avail = st_gpu_table_evict(x->t, x->s);
	}
	if (avail < 0)
		return (int)avail;
	if (avail < (int64_t)m) {
		st_error("gpu tier: %u rows to load but only %lld free after eviction (%llu "
			 "rows, the rest pinned by batches in flight); give the device "
			 "table more rows or keep fewer batches in flight", m, (long long)avail,
			 (unsigned long long)st_gpu_table_capacity(x->t));
		return ST_ENOSPC;
	}
	return ST_OK;
}

/* Steps 4-5: stage, upload and insert the m misses, patch their slots. */
static int load_misses(st_gpu_tier_t *x, const uint64_t *keys, float *const *host_rows,
		       uint32_t n, uint32_t m, int32_t *d_slots)
{
	const size_t rb = (size_t)x->rf * sizeof(float);
	for (uint32_t j = 0; j < m; j++) {
		x->h_keys[j] = keys[x->miss[j]];
		memcpy(x->h_rows + (size_t)j * x->rf, host_rows[x->miss[j]], rb);
	}
	int rc;
	if ((rc = st_gpu_upload(x->d_keys, x->h_keys, m * sizeof(uint64_t), x->s)) < 0 ||
	    (rc = st_gpu_upload(x->d_rows, x->h_rows, m * rb, x->s)) < 0)
		return rc;
	rc = st_gpu_table_insert(x->t, x->d_keys, x->d_rows, m, x->d_mslots, 1, x->s);
	if (rc < 0) {
		/* Unpin whatever this insert did pin (slots of failed keys are -1). */
		st_gpu_table_unpin(x->t, x->d_mslots, m, x->s);
		return rc;
	}
	x->st.h2d_bytes += (uint64_t)m * (rb + sizeof(uint64_t));
	if ((rc = st_gpu_download(x->h_mslots, x->d_mslots, m * sizeof(int32_t), x->s)) < 0 ||
	    (rc = st_gpu_stream_sync(x->s)) < 0)
		return rc;
	for (uint32_t j = 0; j < m; j++)
		x->h_slots[x->miss[j]] = x->h_mslots[j];
	if ((rc = st_gpu_upload(d_slots, x->h_slots, n * sizeof(int32_t), x->s)) < 0)
		return rc;
	return st_gpu_stream_sync(x->s);
}

int st_gpu_tier_pull(st_gpu_tier_t *x, const uint64_t *keys, float *const *host_rows,
		     uint32_t n, int32_t *d_slots)
{
	if (n > x->max) {
		st_error("gpu tier: pull of %u keys, staging is sized for %u", n, x->max);
		return ST_EINVAL;
	}
	if (n == 0)
		return ST_OK;
	int rc;
	memcpy(x->h_keys, keys, n * sizeof *keys);
	if ((rc = st_gpu_upload(x->d_keys, x->h_keys, n * sizeof *keys, x->s)) < 0 ||
	    (rc = st_gpu_table_lookup(x->t, x->d_keys, n, d_slots, 1, x->s)) < 0 ||
	    (rc = st_gpu_download(x->h_slots, d_slots, n * sizeof(int32_t), x->s)) < 0 ||
	    (rc = st_gpu_stream_sync(x->s)) < 0)
		return rc;
	uint32_t m = 0;
	for (uint32_t i = 0; i < n; i++) {
		if (x->h_slots[i] >= 0)
			x->st.hits++;
		else if (host_rows[i])
			x->miss[m++] = i;
		else
			x->st.absent++;
	}
	x->st.misses += m;
	if (m == 0)
		return ST_OK;
	rc = make_room(x, m);
	if (rc == ST_OK)
		rc = load_misses(x, keys, host_rows, n, m, d_slots);
	if (rc < 0)
		st_gpu_table_unpin(x->t, d_slots, n, x->s);
	return rc;
}

int st_gpu_tier_push(st_gpu_tier_t *x, const int32_t *d_slots, float *const *host_rows,
		     uint32_t n)
{
	if (n > x->max) {
		st_error("gpu tier: push of %u keys, staging is sized for %u", n, x->max);
		return ST_EINVAL;
	}
	if (n == 0)
		return ST_OK;
	int rc;
	if ((rc = st_gpu_download(x->h_slots, d_slots, n * sizeof(int32_t), x->s)) < 0 ||
	    (rc = st_gpu_stream_sync(x->s)) < 0)
		return rc;
	uint32_t m = 0;
	for (uint32_t i = 0; i < n; i++)
		if (x->h_slots[i] >= 0 && host_rows[i]) {
			x->miss[m] = i;
			x->h_idx[m++] = (uint32_t)x->h_slots[i];
		}
	const size_t rb = (size_t)x->rf * sizeof(float);
	if (m &&
	    ((rc = st_gpu_upload(x->d_idx, x->h_idx, m * sizeof(uint32_t), x->s)) < 0 ||
	     (rc = st_gpu_gather_rows(st_gpu_table_values(x->t), x->rf, x->d_idx, m, x->d_rows,
				      x->s)) < 0 ||
	     (rc = st_gpu_download(x->h_rows, x->d_rows, m * rb, x->s)) < 0))
		return rc;
	if ((rc = st_gpu_table_unpin(x->t, d_slots, n, x->s)) < 0 ||
	    (rc = st_gpu_stream_sync(x->s)) < 0)
		return rc;
	for (uint32_t j = 0; j < m; j++)
		memcpy(host_rows[x->miss[j]], x->h_rows + (size_t)j * x->rf, rb);
	x->st.d2h_bytes += (uint64_t)m * rb;
	return ST_OK;
}
