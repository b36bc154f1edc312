/*
 * bench_mpi.c — the reference for strata's allreduce: MPI_Allreduce (sum,
 * float) timed the way bench_net times st_net_allreduce_f32, so that
 * bench/coll_mpi.sh can print both side by side (docs/benchmarks.md,
 * "Collectives against OpenMPI").
 *
 *   mpirun -np P bench_mpi [--floats N] [--iters K]
 *
 * For N floats (--floats, else 256Ki, 1Mi, 2Mi, 8Mi): one call checked
 * against the exact sum (small integers add exactly in any order), then 3
 * unmeasured calls on zeros, a barrier, K measured calls (--iters, else
 * bench_net's rule: 1000 up to 4Ki floats, 100 up to 512Ki, 20 above). The
 * time of a call is the slowest rank's total / K (MPI_MAX over ranks); algbw
 * = 4N / time, busbw = algbw x 2(P-1)/P. The same warm-up, repetitions,
 * buffer contents and reductions of the time as bench_net's allreduce, so
 * the two rows compare.
 *
 * Rank 0 prints one row per size starting with "mpi_allreduce", the same
 * columns as bench_net's "allreduce" rows. Exits 1 on a wrong sum or an MPI
 * error (MPI's default handler aborts the job), 2 on usage errors.
 *
 * Threads: one per rank (MPI_Init, not MPI_Init_thread).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { WARMUP = 3 };   /* bench_net's AR_WARMUP */

static long iters_for(size_t n, long iters)
{
	return iters ? iters : n <= 4096 ? 1000 : n <= (512u << 10) ? 100 : 20;
}

/* Returns 0, or 1 when the checked sum was wrong (rank 0 reports). */
static int run(size_t n, long iters, int r, int P)
{
	long k = iters_for(n, iters);
	float *buf = malloc(n * sizeof *buf);
	if (!buf) {
		fprintf(stderr, "bench_mpi: rank %d: out of memory for %zu floats\n", r, n);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	for (size_t i = 0; i < n; i++)
		buf[i] = (float)(i % 13) + (float)r;
	MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
	int bad = 0, anybad = 0;
	for (size_t i = 0; i < n && !bad; i++)
		bad = buf[i] != (float)P * (float)(i % 13) + (float)(P * (P - 1) / 2);
	MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
	if (anybad) {
		if (r == 0)
			fprintf(stderr, "bench_mpi: MPI_Allreduce of %zu floats gave a wrong sum\n", n);
		free(buf);
		return 1;
	}
	memset(buf, 0, n * sizeof *buf);
	for (int i = 0; i < WARMUP; i++)
		MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
	MPI_Barrier(MPI_COMM_WORLD);
	double t0 = MPI_Wtime();
	for (long i = 0; i < k; i++)
		MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
	double dt = MPI_Wtime() - t0, t = 0;
	MPI_Reduce(&dt, &t, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
	if (r == 0) {
		double per = t / (double)k, alg = 4.0 * (double)n / per * 1e-9;
		printf("%-13s %10zu %8ld %9.3f %9.3f %9.3f %9.3f\n", "mpi_allreduce", n, k, t,
		       per * 1e3, alg, alg * 2.0 * (P - 1) / P);
		fflush(stdout);
	}
	free(buf);
	return 0;
}

static long parse_count(const char *s)
{
	char *end;
	long v = strtol(s, &end, 0);
	if (end == s || v < 1)
		return -1;
	if (*end == 'k' || *end == 'K')
		v <<= 10, end++;
	else if (*end == 'm' || *end == 'M')
		v <<= 20, end++;
	return *end || v > (1L << 30) ? -1 : v;
}

int main(int argc, char **argv)
{
	size_t floats[] = { 256u << 10, 1u << 20, 2u << 20, 8u << 20 };
	int n_floats = 4;
	long iters = 0;
	for (int i = 1; i < argc; i++) {
		long v = i + 1 < argc ? parse_count(argv[i + 1]) : -1;
		if (!strcmp(argv[i], "--floats") && v > 0)
			floats[0] = (size_t)v, n_floats = 1, i++;
		else if (!strcmp(argv[i], "--iters") && v > 0)
			iters = v, i++;
		else {
			fprintf(stderr, "usage: mpirun -np P %s [--floats N] [--iters K]\n"
				"N takes k and m suffixes (x 1024); default 256k, 1m, 2m, 8m\n", argv[0]);
			return 2;
		}
	}
	MPI_Init(&argc, &argv);
	int r, P, rc = 0;
	MPI_Comm_rank(MPI_COMM_WORLD, &r);
	MPI_Comm_size(MPI_COMM_WORLD, &P);
	if (r == 0) {
		char lib[MPI_MAX_LIBRARY_VERSION_STRING];
		int len;
		MPI_Get_library_version(lib, &len);
		printf("bench_mpi: %d ranks, %.*s\n", P, (int)strcspn(lib, "\n"), lib);
		printf("%-13s %10s %8s %9s %9s %9s %9s\n", "what", "floats", "K", "total_s", "ms",
		       "algbw", "busbw");
		fflush(stdout);
	}
	for (int i = 0; i < n_floats && !rc; i++)
		rc = run(floats[i], iters, r, P);
	MPI_Finalize();
	return rc;
}
