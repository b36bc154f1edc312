/*
 * comm.cu — NCCL communication of the GPU backend (contract: gpu.h): the
 * allreduce of dense gradients, and Algorithm 2 of
 * hierarchical-gpu-parameter-server.md (§4.1) that routes sparse updates
 * (and reads) to the GPU that owns each key.
 *
 * A communicator has one member per GPU this process drives; each member
 * has its NCCL communicator, a non-blocking stream on its device, and
 * exchange buffers that grow on demand (cudaMalloc, so the first batches
 * pay for them once).
 *
 * Algorithm 2, per call (each step over every local member, in stream order
 * on the member's stream; NCCL calls of all members inside one
 * ncclGroupStart/End, which is what lets one thread drive several GPUs):
 *   1. bucket the member's keys by owner rank (route.cu: stable, so a key's
 *      updates keep their order) and gather keys and rows into bucket order;
 *   2. allgather every rank's bucket offsets, so each rank knows what it
 *      will receive from whom (one small read-back: the host needs the
 *      sizes to post the receives);
 *   3. ncclSend each bucket to its owner, ncclRecv from every rank;
 *   4. accumulate the received rows into the owner's device table.
 * A get runs 1-3 with keys only, looks the keys up at the owner, and sends
 * the rows back the same way in reverse, then undoes the bucket order.
 *
 * The paper's intra-node exchange uses NVLink peer copies; NCCL's send/recv
 * uses the same links (P2P/NVLink transport) and also works across nodes.
 * Current device: every function restores the caller's current device.
 */
#include "cuda/gpu_internal.cuh"

#include <nccl.h>
#include <stdlib.h>
#include <string.h>

struct member {
	int rank, device;
	ncclComm_t comm;
	cudaStream_t stream;
	/* exchange buffers (device) and their capacities in elements */
	uint32_t *scratch, *off, *perm, *alloff;
	size_t cap_scratch, cap_perm;
	uint64_t *skeys, *rkeys;
	size_t cap_skeys, cap_rkeys;
	float *svals, *rvals;
	size_t cap_svals, cap_rvals;
	uint32_t *h_alloff;           /* page-locked [nranks × (nranks + 1)] */
	size_t recv_total;
	size_t *send_off, *recv_off;  /* host [nranks + 1] */
};

struct st_gpu_comm {
	int nranks, nlocal;
	struct member *m;
};

int st__gpu_nccl_fail(int result, const char *call, const char *file, int line)
{
	st_error("gpu: %s failed at %s:%d: %s", call, file, line,
		 ncclGetErrorString((ncclResult_t)result));
	switch ((ncclResult_t)result) {
	case ncclInvalidArgument:
	case ncclInvalidUsage:
		return ST_EINVAL;
	case ncclRemoteError:
		return ST_EIO;   /* a peer rank failed */
	default:
		return ST_EIO;
	}
}

/* Grows a device buffer to hold need elements of size sz (contents lost). */
static int ensure(void **p, size_t *cap, size_t need, size_t sz)
{
	if (need <= *cap && *p)
		return ST_OK;
	size_t c = *cap ? *cap : 1024;
	while (c < need)
		c *= 2;
	st_gpu_free(*p);
	*p = NULL;
	*cap = 0;
	int rc = st_gpu_alloc(p, c * sz);
	if (rc < 0)
		return rc;
	*cap = c;
	return ST_OK;
}

static int member_init(struct member *mb, int nranks)
{
	CU(cudaSetDevice(mb->device));
	CU(cudaStreamCreateWithFlags(&mb->stream, cudaStreamNonBlocking));
	size_t no = (size_t)nranks + 1;
	int rc;
	if ((rc = st_gpu_alloc((void **)&mb->off, no * sizeof(uint32_t))) < 0 ||
	    (rc = st_gpu_alloc((void **)&mb->alloff, (size_t)nranks * no * sizeof(uint32_t))) < 0 ||
	    (rc = st_gpu_host_alloc((void **)&mb->h_alloff,
				    (size_t)nranks * no * sizeof(uint32_t))) < 0)
		return rc;
	mb->send_off = (size_t *)calloc(no, sizeof(size_t));
	mb->recv_off = (size_t *)calloc(no, sizeof(size_t));
	return mb->send_off && mb->recv_off ? ST_OK : ST_ENOMEM;
}

extern "C" void st_gpu_comm_destroy(st_gpu_comm_t *c)
{
	if (!c)
		return;
	int cur = 0;
	cudaGetDevice(&cur);
	for (int i = 0; i < c->nlocal; i++) {
		struct member *mb = &c->m[i];
		cudaSetDevice(mb->device);
		if (mb->comm)
			ncclCommDestroy(mb->comm);
		if (mb->stream)
			cudaStreamDestroy(mb->stream);
		st_gpu_free(mb->scratch);
		st_gpu_free(mb->off);
		st_gpu_free(mb->perm);
		st_gpu_free(mb->alloff);
		st_gpu_free(mb->skeys);
		st_gpu_free(mb->rkeys);
		st_gpu_free(mb->svals);
		st_gpu_free(mb->rvals);
		st_gpu_host_free(mb->h_alloff);
		free(mb->send_off);
		free(mb->recv_off);
	}
	cudaSetDevice(cur);
	free(c->m);
	free(c);
}

static st_gpu_comm_t *comm_alloc(int nranks, int nlocal)
{
	st_gpu_comm_t *c = (st_gpu_comm_t *)calloc(1, sizeof *c);
	if (!c)
		return NULL;
	c->nranks = nranks;
	c->nlocal = nlocal;
	c->m = (struct member *)calloc((size_t)nlocal, sizeof *c->m);
	if (!c->m) {
		free(c);
		return NULL;
	}
	return c;
}

static int init_local(st_gpu_comm_t *c, const int *devices)
{
	ncclComm_t *comms = (ncclComm_t *)calloc((size_t)c->nlocal, sizeof *comms);
	if (!comms)
		return ST_ENOMEM;
	int r = (int)ncclCommInitAll(comms, c->nlocal, devices);
	for (int i = 0; i < c->nlocal; i++) {
		c->m[i].comm = r == 0 ? comms[i] : NULL;
		c->m[i].rank = i;
		c->m[i].device = devices[i];
	}
	free(comms);
	NCCL(r);
	for (int i = 0; i < c->nlocal; i++) {
		int rc = member_init(&c->m[i], c->nranks);
		if (rc < 0)
			return rc;
	}
	return ST_OK;
}

extern "C" int st_gpu_comm_create_local(st_gpu_comm_t **out, int n, const int *devices)
{
	*out = NULL;
	if (n < 1) {
		st_error("gpu comm: %d devices (need >= 1)", n);
		return ST_EINVAL;
	}
	int cur = 0;
	CU(cudaGetDevice(&cur));
	st_gpu_comm_t *c = comm_alloc(n, n);
	if (!c)
		return ST_ENOMEM;
	int rc = init_local(c, devices);
	cudaSetDevice(cur);
	if (rc < 0) {
		st_gpu_comm_destroy(c);
		return rc;
	}
	*out = c;
	return ST_OK;
}

extern "C" int st_gpu_comm_unique_id(void *id)
{
	ncclUniqueId u;
	NCCL(ncclGetUniqueId(&u));
	memcpy(id, &u, ST_GPU_COMM_ID_BYTES);
	return ST_OK;
}

static int init_rank(st_gpu_comm_t *c, const void *id, int rank, int device)
{
	ncclUniqueId u;
	memcpy(&u, id, ST_GPU_COMM_ID_BYTES);
	c->m[0].rank = rank;
	c->m[0].device = device;
	CU(cudaSetDevice(device));
	NCCL(ncclCommInitRank(&c->m[0].comm, c->nranks, u, rank));
	return member_init(&c->m[0], c->nranks);
}

extern "C" int st_gpu_comm_create_rank(st_gpu_comm_t **out, const void *id, int nranks, int rank,
				       int device)
{
	*out = NULL;
	if (nranks < 1 || rank < 0 || rank >= nranks) {
		st_error("gpu comm: rank %d of %d", rank, nranks);
		return ST_EINVAL;
	}
	int cur = 0;
	CU(cudaGetDevice(&cur));
	st_gpu_comm_t *c = comm_alloc(nranks, 1);
	if (!c)
		return ST_ENOMEM;
	int rc = init_rank(c, id, rank, device);
	cudaSetDevice(cur);
	if (rc < 0) {
		st_gpu_comm_destroy(c);
		return rc;
	}
	*out = c;
	return ST_OK;
}

extern "C" int st_gpu_comm_nlocal(const st_gpu_comm_t *c)
{
	return c->nlocal;
}

extern "C" int st_gpu_comm_nranks(const st_gpu_comm_t *c)
{
	return c->nranks;
}

extern "C" int st_gpu_comm_rank(const st_gpu_comm_t *c, int m)
{
	return c->m[m].rank;
}

extern "C" int st_gpu_comm_device(const st_gpu_comm_t *c, int m)
{
	return c->m[m].device;
}

extern "C" st_gpu_stream_t *st_gpu_comm_stream(st_gpu_comm_t *c, int m)
{
	return (st_gpu_stream_t *)(void *)c->m[m].stream;
}

static int sync_all(st_gpu_comm_t *c)
{
	for (int i = 0; i < c->nlocal; i++) {
		CU(cudaSetDevice(c->m[i].device));
		CU(cudaStreamSynchronize(c->m[i].stream));
	}
	return ST_OK;
}

extern "C" int st_gpu_comm_sync(st_gpu_comm_t *c)
{
	int cur = 0;
	CU(cudaGetDevice(&cur));
	int rc = sync_all(c);
	cudaSetDevice(cur);
	return rc;
}

/* ---- allreduce ----------------------------------------------------------- */

static int allreduce(st_gpu_comm_t *c, float *const *bufs, size_t n, float scale)
{
	NCCL(ncclGroupStart());
	for (int i = 0; i < c->nlocal; i++)
		NCCL(ncclAllReduce(bufs[i], bufs[i], n, ncclFloat, ncclSum, c->m[i].comm,
				   c->m[i].stream));
	NCCL(ncclGroupEnd());
	if (scale != 1.0f)
		for (int i = 0; i < c->nlocal; i++) {
			CU(cudaSetDevice(c->m[i].device));
			int rc = st_gpu_scale(n, scale, bufs[i], st_gpu_comm_stream(c, i));
			if (rc < 0)
				return rc;
		}
	return ST_OK;
}

extern "C" int st_gpu_allreduce_f32(st_gpu_comm_t *c, float *const *d_bufs, size_t n,
				    float scale)
{
	if (n == 0)
		return ST_OK;
	int cur = 0;
	CU(cudaGetDevice(&cur));
	int rc = allreduce(c, d_bufs, n, scale);
	cudaSetDevice(cur);
	return rc;
}

/* ---- Algorithm 2 ---------------------------------------------------------------- */

/* Steps 1-2 for every member: bucket keys[m][0..n[m]) into skeys (bucket
 * order, perm kept), allgather the offsets and read them back; fills
 * send_off / recv_off / recv_total and makes room for the received keys. */
static int plan_exchange(st_gpu_comm_t *c, const uint64_t *const *keys, const uint32_t *n)
{
	const int R = c->nranks;
	const size_t no = (size_t)R + 1;
	for (int i = 0; i < c->nlocal; i++) {
		struct member *mb = &c->m[i];
		st_gpu_stream_t *s = (st_gpu_stream_t *)(void *)mb->stream;
		CU(cudaSetDevice(mb->device));
		int rc;
		if ((rc = ensure((void **)&mb->scratch, &mb->cap_scratch,
				 st_gpu_route_scratch_words(n[i], (uint32_t)R), 4)) < 0 ||
		    (rc = ensure((void **)&mb->perm, &mb->cap_perm, n[i], 4)) < 0 ||
		    (rc = ensure((void **)&mb->skeys, &mb->cap_skeys, n[i], 8)) < 0 ||
		    (rc = st_gpu_route_plan(keys[i], n[i], (uint32_t)R, mb->scratch, mb->off,
					    mb->perm, s)) < 0 ||
		    (rc = st_gpu_gather_keys(keys[i], mb->perm, n[i], mb->skeys, s)) < 0)
			return rc;
	}
	NCCL(ncclGroupStart());
	for (int i = 0; i < c->nlocal; i++)
		NCCL(ncclAllGather(c->m[i].off, c->m[i].alloff, no, ncclUint32, c->m[i].comm,
				   c->m[i].stream));
	NCCL(ncclGroupEnd());
	for (int i = 0; i < c->nlocal; i++) {
		struct member *mb = &c->m[i];
		CU(cudaSetDevice(mb->device));
		CU(cudaMemcpyAsync(mb->h_alloff, mb->alloff, (size_t)R * no * sizeof(uint32_t),
				   cudaMemcpyDeviceToHost, mb->stream));
	}
	int rc = sync_all(c);
	if (rc < 0)
		return rc;
	for (int i = 0; i < c->nlocal; i++) {
		struct member *mb = &c->m[i];
		const uint32_t *mine = mb->h_alloff + (size_t)mb->rank * no;
		mb->recv_off[0] = 0;
		for (int q = 0; q < R; q++) {
			const uint32_t *theirs = mb->h_alloff + (size_t)q * no;
			mb->send_off[q] = mine[q];
			mb->recv_off[q + 1] = mb->recv_off[q] + (theirs[mb->rank + 1] -
								 theirs[mb->rank]);
		}
		mb->send_off[R] = mine[R];
		mb->recv_total = mb->recv_off[R];
		CU(cudaSetDevice(mb->device));
		if ((rc = ensure((void **)&mb->rkeys, &mb->cap_rkeys, mb->recv_total, 8)) < 0)
			return rc;
	}
	return ST_OK;
}

/* Step 3 (or its reverse): every member sends the buckets of sbuf (offsets
 * send_off) to their owners and receives recv_off-sized pieces into rbuf,
 * width elements of size esz per key; reverse swaps the roles. */
static int exchange(st_gpu_comm_t *c, int which, size_t width, int reverse)
{
	const int R = c->nranks;
	ncclDataType_t type = which == 0 ? ncclUint64 : ncclFloat;
	NCCL(ncclGroupStart());
	for (int i = 0; i < c->nlocal; i++) {
		struct member *mb = &c->m[i];
		const size_t *so = reverse ? mb->recv_off : mb->send_off;
		const size_t *ro = reverse ? mb->send_off : mb->recv_off;
		char *sb, *rb;
		size_t esz = which == 0 ? 8 : 4;
		if (which == 0) {
			sb = (char *)mb->skeys;
			rb = (char *)mb->rkeys;
		} else {
			sb = (char *)(reverse ? mb->rvals : mb->svals);
			rb = (char *)(reverse ? mb->svals : mb->rvals);
		}
		for (int q = 0; q < R; q++) {
			size_t ns = (so[q + 1] - so[q]) * width, nr = (ro[q + 1] - ro[q]) * width;
			if (ns)
				NCCL(ncclSend(sb + so[q] * width * esz, ns, type, q, mb->comm,
					      mb->stream));
			if (nr)
				NCCL(ncclRecv(rb + ro[q] * width * esz, nr, type, q, mb->comm,
					      mb->stream));
		}
	}
	NCCL(ncclGroupEnd());
	return ST_OK;
}

static int64_t dist_accumulate(st_gpu_comm_t *c, st_gpu_table_t *const *tables,
			       const uint64_t *const *keys, const float *const *vals,
			       const uint32_t *n, uint32_t ncols, int mode)
{
	int rc = plan_exchange(c, keys, n);
	if (rc < 0)
		return rc;
	for (int i = 0; i < c->nlocal; i++) {
		struct member *mb = &c->m[i];
		CU(cudaSetDevice(mb->device));
		if ((rc = ensure((void **)&mb->svals, &mb->cap_svals, (size_t)n[i] * ncols, 4)) < 0 ||
		    (rc = ensure((void **)&mb->rvals, &mb->cap_rvals, mb->recv_total * ncols, 4)) < 0 ||
		    (rc = st_gpu_gather_rows(vals[i], ncols, mb->perm, n[i], mb->svals,
					     (st_gpu_stream_t *)(void *)mb->stream)) < 0)
			return rc;
	}
	if ((rc = exchange(c, 0, 1, 0)) < 0 || (rc = exchange(c, 1, ncols, 0)) < 0)
		return rc;
	int64_t total = 0;
	for (int i = 0; i < c->nlocal; i++) {
		struct member *mb = &c->m[i];
		CU(cudaSetDevice(mb->device));
		rc = st_gpu_table_accumulate(tables[i], mb->rkeys, mb->rvals,
					     (uint32_t)mb->recv_total, ncols, mode,
					     (st_gpu_stream_t *)(void *)mb->stream);
		if (rc < 0)
			return rc;
		total += (int64_t)mb->recv_total;
	}
	rc = sync_all(c);
	return rc < 0 ? rc : total;
}

extern "C" int64_t st_gpu_dist_accumulate(st_gpu_comm_t *c, st_gpu_table_t *const *tables,
					  const uint64_t *const *d_keys,
					  const float *const *d_vals, const uint32_t *n,
					  uint32_t ncols, int mode)
{
	int cur = 0;
	CU(cudaGetDevice(&cur));
	int64_t rc = dist_accumulate(c, tables, d_keys, d_vals, n, ncols, mode);
	cudaSetDevice(cur);
	return rc;
}

static int dist_get(st_gpu_comm_t *c, st_gpu_table_t *const *tables,
		    const uint64_t *const *keys, const uint32_t *n, float *const *out)
{
	int rc = plan_exchange(c, keys, n);
	if (rc < 0 || (rc = exchange(c, 0, 1, 0)) < 0)
		return rc;
	const uint32_t rf = st_gpu_table_row_floats(tables[0]);
	for (int i = 0; i < c->nlocal; i++) {
		struct member *mb = &c->m[i];
		st_gpu_stream_t *s = (st_gpu_stream_t *)(void *)mb->stream;
		CU(cudaSetDevice(mb->device));
		if ((rc = ensure((void **)&mb->svals, &mb->cap_svals, (size_t)n[i] * rf, 4)) < 0 ||
		    (rc = ensure((void **)&mb->rvals, &mb->cap_rvals, mb->recv_total * rf, 4)) < 0 ||
		    (rc = st_gpu_table_get(tables[i], mb->rkeys, (uint32_t)mb->recv_total,
					   mb->rvals, s)) < 0)
			return rc;
	}
	if ((rc = exchange(c, 1, rf, 1)) < 0)
		return rc;
	for (int i = 0; i < c->nlocal; i++) {
		struct member *mb = &c->m[i];
		CU(cudaSetDevice(mb->device));
		rc = st_gpu_scatter_rows(mb->svals, rf, mb->perm, n[i], out[i],
					 (st_gpu_stream_t *)(void *)mb->stream);
		if (rc < 0)
			return rc;
	}
	return sync_all(c);
}

extern "C" int st_gpu_dist_get(st_gpu_comm_t *c, st_gpu_table_t *const *tables,
			       const uint64_t *const *d_keys, const uint32_t *n,
			       float *const *d_out)
{
	int cur = 0;
	CU(cudaGetDevice(&cur));
	int rc = dist_get(c, tables, d_keys, n, d_out);
	cudaSetDevice(cur);
	return rc;
}
