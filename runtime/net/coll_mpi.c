/*
 * coll_mpi.c — the dense allreduce through the MPI library, for jobs that
 * run under mpirun and ask for it (STRATA_NET_COLL=mpi; net.h).
 *
 * Why: issue 21 asks strata's allreduce to be at least as fast as
 * OpenMPI's MPI_Allreduce measured in the same run, and, where the
 * hand-written one cannot match it, to use the library's where the job
 * runs under mpirun. coll.c's direct reduce-scatter + allgather reached
 * 0.20–0.95 of OpenMPI's on this machine (docs/benchmarks.md, "Collectives
 * against OpenMPI"), whose collectives have years of tuning behind them
 * (shared-memory segments on one node, topology-aware algorithms across
 * nodes). Everything else (rows, barriers, the failure detector) stays on
 * strata's own transport; only st_net_allreduce_f32 goes to MPI.
 *
 * One MPI_Allreduce per call, in place. The standard does not promise
 * that every rank gets the same bits (it only recommends it), and replicas
 * of the dense parameters must not drift apart; OpenMPI's algorithms
 * (ring, recursive doubling, reduce + broadcast, Rabenseifner's) do give
 * the same bits for a commutative sum, and the library's call measured
 * ~18% faster here than the decomposition that guarantees it
 * (MPI_Reduce_scatter + MPI_Allgatherv: each element summed by one rank,
 * then copied; 3.2–3.4 against 2.7–2.85 ms for 2Mi floats at P = 2). So
 * the property is checked instead of paid for: the first 3 calls and every
 * 256th compare an XXH3 of the result across the ranks (one 16-byte
 * MPI_Allreduce), and a difference fails the call with a message saying to
 * unset STRATA_NET_COLL. What MPI does not keep is coll.c's rank order
 * inside a sum: it may add ((x0 + x1) + (x2 + x3)). At P = 2 both orders
 * are x0 + x1 (floating-point addition is commutative, only not
 * associative), so a 2-process job gives the same bits either way
 * (tests/e2e/dist.sh checks it); at P > 2 the results agree with one
 * process of P workers to rounding, not to the bit.
 *
 * Failure: MPI collectives cannot be interrupted. A call fails with
 * ST_EPEER at once when strata's detector already knows a dead rank; a rank
 * that dies during a call is mpirun's to handle (it ends the job when a
 * process exits abnormally, naming it), and a rank that stalls without
 * dying blocks the others until mpirun or the user ends the job —
 * docs/distributed.md says so.
 *
 * Bytes: MPI's traffic does not pass through net.c's counters; each call
 * adds what a bandwidth-optimal allreduce sends per rank, 2(P−1)/P × 4n
 * bytes, to bytes_sent and bytes_sent_coll, and 2 rounds, so the
 * dense-traffic metrics (st_net_bytes_sent_coll, the k-step report) stay
 * meaningful; the check's 16 bytes are not counted.
 */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "runtime/err.h"
#include "runtime/net/net_internal.h"

/* STRATA_NET_COLL: unset or "strata" → 0, "mpi" → 1, anything else → -1
 * (logged). */
int st__net_coll_choice(void)
{
	const char *v = getenv("STRATA_NET_COLL");
	if (!v || !*v || !strcmp(v, "strata"))
		return 0;
	if (!strcmp(v, "mpi"))
		return 1;
	st_error("net: STRATA_NET_COLL=%s: expected \"strata\" (strata's own allreduce, the "
		 "default) or \"mpi\" (the MPI library's, under mpirun)", v);
	return -1;
}

#if ST_HAVE_MPI
#include <mpi.h>

/* 1 when buf[0..n) has the same bits on every rank. */
static int same_everywhere(const float *buf, size_t n)
{
	uint64_t h = XXH3_64bits(buf, n * sizeof *buf), v[2] = { h, ~h };
	if (MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD) !=
	    MPI_SUCCESS)
		return 0;
	return v[0] == ~v[1];   /* max(h) == min(h) */
}

int st__net_mpi_open(st_net_t *net)
{
	int inited = 0, provided = 0, mrank = -1, msize = -1;
	MPI_Initialized(&inited);
	if (!inited) {
		if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
			st_error("net: STRATA_NET_COLL=mpi: MPI_Init_thread failed (run the job "
				 "under mpirun, or unset STRATA_NET_COLL)");
			return ST_EINVAL;
		}
		net->mpi_owned = 1;
	} else {
		MPI_Query_thread(&provided);
	}
	net->mpi_on = 1;
	MPI_Comm_rank(MPI_COMM_WORLD, &mrank);
	MPI_Comm_size(MPI_COMM_WORLD, &msize);
	if (provided < MPI_THREAD_SERIALIZED) {
		st_error("net: STRATA_NET_COLL=mpi: the MPI library gives thread level %d, strata "
			 "calls its collectives from more than one thread (needs "
			 "MPI_THREAD_SERIALIZED, %d)", provided, (int)MPI_THREAD_SERIALIZED);
		return ST_EINVAL;
	}
	if (mrank != net->rank || msize != net->size) {
		st_error("net: STRATA_NET_COLL=mpi: MPI says rank %d of %d, strata's launcher "
			 "(%s) rank %d of %d; run the job under mpirun, where both agree",
			 mrank, msize, net->cfg.source[0] ? net->cfg.source : "environment",
			 net->rank, net->size);
		return ST_EINVAL;
	}
	st_info("net: rank %d: dense allreduce through MPI (STRATA_NET_COLL=mpi)", net->rank);
	return ST_OK;
}

void st__net_mpi_close(st_net_t *net)
{
	if (!net->mpi_on)
		return;
	net->mpi_on = 0;
	/* MPI_Finalize waits for every rank: with one known dead it could hang,
	 * so leave without it (mpirun ends the job anyway). */
	if (net->mpi_owned && st_net_dead(net, NULL) == 0)
		MPI_Finalize();
}

int st__net_mpi_allreduce(st_net_t *net, float *buf, size_t n)
{
	const int P = net->size;
	int first = -1;
	if (st_net_dead(net, &first) > 0) {
		st_error("net: allreduce through MPI: rank %d is dead", first);
		return ST_EPEER;
	}
	if (n > (size_t)INT32_MAX) {   /* MPI counts are int */
		for (size_t off = 0; off < n; off += (size_t)INT32_MAX) {
			size_t m = n - off < (size_t)INT32_MAX ? n - off : (size_t)INT32_MAX;
			int rc = st__net_mpi_allreduce(net, buf + off, m);
			if (rc != ST_OK)
				return rc;
		}
		return ST_OK;
	}
	int rc = MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
	if (rc != MPI_SUCCESS) {
		st_error("net: allreduce through MPI failed (MPI error %d)", rc);
		return ST_EPEER;
	}
	/* Test only (tests/e2e/dist.sh): rank ST__NET_MPI_SKEW changes its
	 * result by one bit, as an allreduce that summed differently would,
	 * to show that the check below catches it. */
	const char *skew = getenv("ST__NET_MPI_SKEW");
	if (skew && atoi(skew) == net->rank && n > 0) {
		uint32_t u;
		memcpy(&u, buf, sizeof u);
		u ^= 1;
		memcpy(buf, &u, sizeof u);
	}
	const uint64_t call = net->mpi_calls++;
	if ((call < 3 || call % 256 == 0) && !same_everywhere(buf, n)) {
		st_error("net: allreduce through MPI gave different bits on different ranks (call "
			 "%llu, %zu floats): the replicas would drift apart; unset "
			 "STRATA_NET_COLL to use strata's own allreduce", (unsigned long long)call, n);
		return ST_EPEER;
	}
	uint64_t bytes = (uint64_t)(2.0 * (P - 1) / P * 4.0 * (double)n);
	atomic_fetch_add(&net->bytes_sent, bytes);
	atomic_fetch_add(&net->bytes_sent_coll, bytes);
	atomic_fetch_add(&net->coll_rounds, 2);
	return ST_OK;
}

#else

int st__net_mpi_open(st_net_t *net)
{
	st_error("net: STRATA_NET_COLL=mpi, but strata was built without MPI (install "
		 "libopenmpi-dev and rebuild: meson setup -Dmpi=enabled)");
	return ST_EINVAL;
}

void st__net_mpi_close(st_net_t *net)
{
	(void)net;
}

int st__net_mpi_allreduce(st_net_t *net, float *buf, size_t n)
{
	(void)net, (void)buf, (void)n;
	return ST_EINVAL;
}

#endif
