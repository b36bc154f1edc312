/*
 * bench_gemm.c — OpenBLAS sgemm GFLOP/s on the MLP shapes of the standard
 * model, against this CPU's fp32 peak (docs/benchmarks.md "Dense GEMM on
 * this CPU").
 *
 *   bench_gemm [SECONDS]         measure in this process's environment
 *   bench_gemm --compare [SEC]   run itself as child processes with
 *                                OPENBLAS_CORETYPE unset, =SkylakeX and
 *                                =Haswell, and print all three (AVX-512
 *                                CPUs only: SkylakeX kernels die of SIGILL
 *                                elsewhere)
 *   bench_gemm --layers [SEC]    per layer of the standard model's MLP
 *                                (429 → 400 → 400 → 400 → 1, batch 1024):
 *                                GFLOP/s of its forward, dX and dW GEMMs
 *                                and of the three together, one caller and
 *                                one OpenBLAS thread (a train worker), as a
 *                                share of the measured one-core FMA rate
 *
 * OPENBLAS_CORETYPE is read once when libopenblas loads, so each setting
 * needs its own process; --compare re-executes /proc/self/exe.
 *
 * Shapes (batch n = 1024, a 429 → 400 → 400 MLP; 429 = 26 slots × 16 + 13
 * dense), with the transposes ops/nn/nn.c uses for st_linear_*:
 *   fwd   Y [n×out]  = X [n×in] · Wᵀ        (NoTrans, Trans)
 *   dX    dX[n×in]   = dY[n×out] · W        (NoTrans, NoTrans)
 *   dW    dW[out×in] += dYᵀ · X             (Trans,   NoTrans)
 * Modes per shape:
 *   t1    one caller, openblas_set_num_threads(1)
 *   t2    one caller, openblas_set_num_threads(2)
 *   w2t1  two caller threads (as strata's train workers) at once, each with
 *         its own buffers, OpenBLAS threads 1; aggregate GFLOP/s
 *   w2t2  the same with OpenBLAS threads 2 (oversubscribed on 2 cores)
 * The limit: a loop of independent AVX-512 FMAs (16 accumulators, enough
 * to cover 4 cycles of latency on 2 pipes) measures what one core and both
 * cores really sustain, because a VM's /proc/cpuinfo shows the base clock,
 * not the boost clock the cores run at. The nominal peak (cores × GHz × 64:
 * 16 fp32 lanes × 2 FLOP per FMA × 2 FMA pipes) is printed beside it. On a
 * CPU without AVX-512 the loop is AVX2 + FMA (8 lanes, 12 accumulators)
 * and the nominal peak cores × GHz × 32.
 * Each figure is the best of 5 timed runs of >= SECONDS/5 each (default 1 s
 * per figure); best, not mean, because the machine is shared.
 */
#include <cblas.h>
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct {
	const char *name;
	CBLAS_TRANSPOSE ta, tb;
	int M, N, K;
} shape_t;

static const shape_t shapes[] = {
	{"fwd 1024x429 * (400x429)T", CblasNoTrans, CblasTrans, 1024, 400, 429},
	{"fwd 1024x400 * (400x400)T", CblasNoTrans, CblasTrans, 1024, 400, 400},
	{"dX  1024x400 * 400x429",    CblasNoTrans, CblasNoTrans, 1024, 429, 400},
	{"dX  1024x400 * 400x400",    CblasNoTrans, CblasNoTrans, 1024, 400, 400},
	{"dW  (1024x400)T * 1024x429", CblasTrans, CblasNoTrans, 400, 429, 1024},
	{"dW  (1024x400)T * 1024x400", CblasTrans, CblasNoTrans, 400, 400, 1024},
};
enum { N_SHAPES = sizeof shapes / sizeof shapes[0] };

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct {
	const shape_t *s;
	float *A, *B, *C;
	long iters;
	pthread_barrier_t *bar;
	double t;
} job_t;

static void alloc_job(job_t *j, const shape_t *s)
{
	size_t na = (size_t)s->M * s->K, nb = (size_t)s->K * s->N, nc = (size_t)s->M * s->N;
	j->s = s;
	j->A = malloc(na * sizeof(float));
	j->B = malloc(nb * sizeof(float));
	j->C = malloc(nc * sizeof(float));
	if (!j->A || !j->B || !j->C) {
		fprintf(stderr, "out of memory\n");
		exit(1);
	}
	for (size_t i = 0; i < na; i++)
		j->A[i] = (float)((i * 7919) % 1000) * 1e-3f - 0.5f;
	for (size_t i = 0; i < nb; i++)
		j->B[i] = (float)((i * 104729) % 1000) * 1e-3f - 0.5f;
	memset(j->C, 0, nc * sizeof(float));
}

static void free_job(job_t *j)
{
	free(j->A);
	free(j->B);
	free(j->C);
}

static void gemm(const job_t *j)
{
	const shape_t *s = j->s;
	/* Row-major leading dimensions follow from the stored (untransposed)
	 * shapes: op(A) is M×K, op(B) is K×N. */
	int lda = s->ta == CblasNoTrans ? s->K : s->M;
	int ldb = s->tb == CblasNoTrans ? s->N : s->K;
	cblas_sgemm(CblasRowMajor, s->ta, s->tb, s->M, s->N, s->K, 1.0f, j->A, lda,
		    j->B, ldb, 1.0f, j->C, s->N);
}

static void *worker(void *arg)
{
	job_t *j = arg;
	if (j->bar)
		pthread_barrier_wait(j->bar);
	double t0 = now_s();
	for (long i = 0; i < j->iters; i++)
		gemm(j);
	j->t = now_s() - t0;
	return NULL;
}

/* GFLOP/s of `workers` callers running iters gemms each at once. */
static double run_once(job_t *jobs, int workers, long iters)
{
	if (workers == 1) {
		jobs[0].iters = iters;
		jobs[0].bar = NULL;
		worker(&jobs[0]);
		return 2.0 * jobs[0].s->M * jobs[0].s->N * jobs[0].s->K * iters / jobs[0].t * 1e-9;
	}
	pthread_barrier_t bar;
	pthread_barrier_init(&bar, NULL, (unsigned)workers);
	pthread_t th[8];
	for (int w = 0; w < workers; w++) {
		jobs[w].iters = iters;
		jobs[w].bar = &bar;
		pthread_create(&th[w], NULL, worker, &jobs[w]);
	}
	double tmax = 0.0;
	for (int w = 0; w < workers; w++) {
		pthread_join(th[w], NULL);
		if (jobs[w].t > tmax)
			tmax = jobs[w].t;
	}
	pthread_barrier_destroy(&bar);
	const shape_t *s = jobs[0].s;
	return 2.0 * s->M * s->N * s->K * iters * workers / tmax * 1e-9;
}

static double measure(const shape_t *s, int workers, int blas_threads, double secs)
{
	job_t jobs[2];
	for (int w = 0; w < workers; w++)
		alloc_job(&jobs[w], s);
	openblas_set_num_threads(blas_threads);
	/* Warm up (thread pool start, page faults), then size the runs. */
	double t0 = now_s();
	long n = 0;
	while (now_s() - t0 < 0.05 || n < 2) {
		gemm(&jobs[0]);
		n++;
	}
	double per = (now_s() - t0) / (double)n;
	long iters = (long)(secs / 5.0 / per) + 1;
	double best = 0.0;
	for (int r = 0; r < 5; r++) {
		double g = run_once(jobs, workers, iters);
		if (g > best)
			best = g;
	}
	for (int w = 0; w < workers; w++)
		free_job(&jobs[w]);
	return best;
}

/* GFLOP/s of the FMA loop on this thread for about secs seconds. */
__attribute__((target("avx512f"))) static double fma_loop(double secs)
{
	__m512 acc[16];
	const __m512 a = _mm512_set1_ps(0.9999999f), b = _mm512_set1_ps(1e-3f);
	for (int i = 0; i < 16; i++)
		acc[i] = _mm512_set1_ps((float)i);
	long iters = 0, chunk = 1 << 20;
	double t0 = now_s(), t;
	do {
		for (long k = 0; k < chunk; k++)
			/* Unrolled so the accumulators live in registers. */
#pragma GCC unroll 16
			for (int i = 0; i < 16; i++)
				acc[i] = _mm512_fmadd_ps(acc[i], a, b);
		iters += chunk;
		t = now_s() - t0;
	} while (t < secs);
	/* Use the result so the loop is not removed. */
	float sink = 0.0f;
	for (int i = 0; i < 16; i++)
		sink += _mm512_reduce_add_ps(acc[i]);
	volatile float keep = sink;
	(void)keep;
	return (double)iters * 16.0 * 16.0 * 2.0 / t * 1e-9;
}

/* The same with AVX2 + FMA: 8 lanes, 12 accumulators (2 pipes × 4+ cycles
 * of latency, leaving registers for the constants). */
__attribute__((target("avx2,fma"))) static double fma_loop_avx2(double secs)
{
	__m256 acc[12];
	const __m256 a = _mm256_set1_ps(0.9999999f), b = _mm256_set1_ps(1e-3f);
	for (int i = 0; i < 12; i++)
		acc[i] = _mm256_set1_ps((float)i);
	long iters = 0, chunk = 1 << 20;
	double t0 = now_s(), t;
	do {
		for (long k = 0; k < chunk; k++)
#pragma GCC unroll 12
			for (int i = 0; i < 12; i++)
				acc[i] = _mm256_fmadd_ps(acc[i], a, b);
		iters += chunk;
		t = now_s() - t0;
	} while (t < secs);
	float lanes[8], sink = 0.0f;
	for (int i = 0; i < 12; i++) {
		_mm256_storeu_ps(lanes, acc[i]);
		for (int l = 0; l < 8; l++)
			sink += lanes[l];
	}
	volatile float keep = sink;
	(void)keep;
	return (double)iters * 12.0 * 8.0 * 2.0 / t * 1e-9;
}

/* fp32 FLOP per cycle per core of the widest FMA this CPU has, 0 if none. */
static int fma_flop_per_cycle(void)
{
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx512f"))
		return 64;
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
		return 32;
	return 0;
}

typedef struct {
	double secs, gflops;
	pthread_barrier_t *bar;
} fma_job_t;

static void *fma_worker(void *arg)
{
	fma_job_t *j = arg;
	pthread_barrier_wait(j->bar);
	j->gflops = fma_flop_per_cycle() == 64 ? fma_loop(j->secs) : fma_loop_avx2(j->secs);
	return NULL;
}

/* Sum over `threads` threads of the FMA loop's GFLOP/s, best of 3. */
static double fma_peak(int threads, double secs)
{
	if (fma_flop_per_cycle() == 0)
		return 0.0;
	double best = 0.0;
	for (int r = 0; r < 3; r++) {
		pthread_barrier_t bar;
		pthread_barrier_init(&bar, NULL, (unsigned)threads);
		fma_job_t jobs[8];
		pthread_t th[8];
		for (int i = 0; i < threads; i++) {
			jobs[i] = (fma_job_t){secs, 0.0, &bar};
			pthread_create(&th[i], NULL, fma_worker, &jobs[i]);
		}
		double sum = 0.0;
		for (int i = 0; i < threads; i++) {
			pthread_join(th[i], NULL);
			sum += jobs[i].gflops;
		}
		pthread_barrier_destroy(&bar);
		if (sum > best)
			best = sum;
	}
	return best;
}

/* "cpu MHz" of the first processor in /proc/cpuinfo, or 0. */
static double cpu_ghz(void)
{
	FILE *f = fopen("/proc/cpuinfo", "r");
	char line[256];
	double mhz = 0.0;
	if (!f)
		return 0.0;
	while (fgets(line, sizeof line, f))
		if (strncmp(line, "cpu MHz", 7) == 0) {
			char *c = strchr(line, ':');
			if (c)
				mhz = atof(c + 1);
			break;
		}
	fclose(f);
	return mhz / 1000.0;
}

static int run_here(double secs)
{
	const char *ct = getenv("OPENBLAS_CORETYPE");
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	double ghz = cpu_ghz();
	/* AVX-512 fp32: 16 lanes × 2 FLOP per FMA × 2 FMA pipes per core
	 * (AVX2: 8 lanes, 32). */
	const int fpc = fma_flop_per_cycle();
	const char *isa = fpc == 64 ? "AVX-512" : "AVX2";
	double peak1 = ghz * fpc;
	const char *l2 = getenv("OPENBLAS_L2_SIZE");
	printf("OPENBLAS_CORETYPE=%s OPENBLAS_L2_SIZE=%s\n", ct ? ct : "(unset)",
	       l2 ? l2 : "(unset)");
	printf("corename: %s\nconfig: %s\n", openblas_get_corename(), openblas_get_config());
	printf("cpus %ld, %.3f GHz (/proc/cpuinfo cpu MHz); fp32 %s peak %.1f GFLOP/s per core, %.1f total\n",
	       cores, ghz, isa, peak1, peak1 * (double)cores);
	double fma1 = fma_peak(1, 0.3), fma2 = fma_peak(2, 0.3);
	printf("measured %s FMA loop: %.1f GFLOP/s on 1 thread (= %.2f GHz x %d), %.1f on 2 threads\n",
	       isa, fma1, fpc ? fma1 / fpc : 0.0, fpc, fma2);
	if (fma1 > peak1) {
		/* Percentages against what the cores really do. */
		peak1 = fma1;
	}
	printf("%-28s %8s %8s %8s %8s   (GFLOP/s; %% of 1-core / 2-core peak)\n",
	       "shape", "t1", "t2", "w2t1", "w2t2");
	double sum[4] = {0};
	for (int i = 0; i < N_SHAPES; i++) {
		double g[4];
		g[0] = measure(&shapes[i], 1, 1, secs);
		g[1] = measure(&shapes[i], 1, 2, secs);
		g[2] = measure(&shapes[i], 2, 1, secs);
		g[3] = measure(&shapes[i], 2, 2, secs);
		printf("%-28s %8.1f %8.1f %8.1f %8.1f   t1 %.0f%% t2 %.0f%% w2t1 %.0f%%\n",
		       shapes[i].name, g[0], g[1], g[2], g[3], 100.0 * g[0] / peak1,
		       100.0 * g[1] / (peak1 * 2), 100.0 * g[2] / (peak1 * 2));
		for (int k = 0; k < 4; k++)
			sum[k] += 1.0 / g[k];
	}
	/* Harmonic mean = the rate of one forward + backward of the MLP, where
	 * every shape runs once (time adds up, not rate). */
	printf("%-28s %8.1f %8.1f %8.1f %8.1f\n", "fwd+bwd (harmonic mean)",
	       N_SHAPES / sum[0], N_SHAPES / sum[1], N_SHAPES / sum[2], N_SHAPES / sum[3]);
	fflush(stdout);
	return 0;
}

/* --layers: each dense layer of the standard model at batch 1024, the
 * three GEMMs st_linear_forward/backward run for it (dX also for the first
 * layer: the embeddings need their gradient). */
static int run_layers(double secs)
{
	static const int dims[] = {429, 400, 400, 400, 1};
	const int n = 1024, nl = 4;
	const int fpc = fma_flop_per_cycle();
	/* The FMA rate before and after the table, the larger one as 100%:
	 * on a shared VM the clock moves with the neighbours' load. */
	double fma1 = fma_peak(1, 0.5);
	printf("corename: %s; OPENBLAS_CORETYPE=%s\n", openblas_get_corename(),
	       getenv("OPENBLAS_CORETYPE") ? getenv("OPENBLAS_CORETYPE") : "(unset)");
	printf("measured %s FMA loop, 1 thread: %.1f GFLOP/s before the table\n",
	       fpc == 64 ? "AVX-512" : "AVX2", fma1);
	double g_fwd[4], g_dx[4], g_dw[4], ms[4];
	for (int l = 0; l < nl; l++) {
		int in = dims[l], out = dims[l + 1];
		shape_t sh[3] = {
			{"fwd", CblasNoTrans, CblasTrans, n, out, in},
			{"dX", CblasNoTrans, CblasNoTrans, n, in, out},
			{"dW", CblasTrans, CblasNoTrans, out, in, n},
		};
		double flop = 2.0 * n * in * out;
		g_fwd[l] = measure(&sh[0], 1, 1, secs);
		g_dx[l] = measure(&sh[1], 1, 1, secs);
		g_dw[l] = measure(&sh[2], 1, 1, secs);
		ms[l] = (flop / g_fwd[l] + flop / g_dx[l] + flop / g_dw[l]) * 1e-6;
	}
	double after = fma_peak(1, 0.5);
	printf("measured %s FMA loop, 1 thread: %.1f GFLOP/s after the table\n",
	       fpc == 64 ? "AVX-512" : "AVX2", after);
	if (after > fma1)
		fma1 = after;
	printf("%% peak: of %.1f GFLOP/s\n", fma1);
	printf("%-16s %8s %8s %8s %8s %7s %9s\n", "layer (in→out)", "fwd", "dX", "dW",
	       "fwd+bwd", "% peak", "ms/step");
	double tot_flop = 0.0, tot_s = 0.0;
	for (int l = 0; l < nl; l++) {
		int in = dims[l], out = dims[l + 1];
		double flop = 2.0 * n * in * out, t = ms[l] * 1e-3;
		double gall = 3.0 * flop / t * 1e-9;
		char name[32];
		snprintf(name, sizeof name, "L%d %d→%d", l + 1, in, out);
		printf("%-16s %8.1f %8.1f %8.1f %8.1f %6.0f%% %9.3f\n", name, g_fwd[l], g_dx[l],
		       g_dw[l], gall, fma1 > 0 ? 100.0 * gall / fma1 : 0.0, ms[l]);
		tot_flop += 3.0 * flop;
		tot_s += t;
	}
	double gt = tot_flop / tot_s * 1e-9;
	printf("%-16s %8s %8s %8s %8.1f %6.0f%% %9.3f\n", "MLP total", "", "", "", gt,
	       fma1 > 0 ? 100.0 * gt / fma1 : 0.0, tot_s * 1e3);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "--layers") == 0) {
		double secs = argc > 2 ? atof(argv[2]) : 1.0;
		return run_layers(secs > 0.0 ? secs : 1.0);
	}
	int compare = argc > 1 && strcmp(argv[1], "--compare") == 0;
	double secs = argc > 1 + compare ? atof(argv[1 + compare]) : 1.0;
	if (secs <= 0.0)
		secs = 1.0;
	if (!compare)
		return run_here(secs);

	static const char *types[] = {NULL, "SkylakeX", "Haswell"};
	char sbuf[32];
	snprintf(sbuf, sizeof sbuf, "%g", secs);
	for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
		fflush(stdout);
		pid_t pid = fork();
		if (pid < 0) {
			perror("fork");
			return 1;
		}
		if (pid == 0) {
			if (types[t])
				setenv("OPENBLAS_CORETYPE", types[t], 1);
			else
				unsetenv("OPENBLAS_CORETYPE");
			execl("/proc/self/exe", argv[0], sbuf, (char *)NULL);
			perror("exec");
			_exit(127);
		}
		int st;
		waitpid(pid, &st, 0);
		printf("\n");
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
			return 1;
	}
	return 0;
}
