/*
 * blend.h — ShadowSync's sync updates (Zheng et al., "ShadowSync:
 * Performing Synchronization in the Background for Highly Scalable
 * Distributed Training", shadowsync-background-sync.md §3.3, Algorithms
 * 2-4), written once for both transports: one process, where every worker
 * thread is a trainer with its own replica (ops/sync/shadow.c), and many,
 * where every rank is a trainer whose workers share its replica
 * (ops/sync/dist_shadow.c). A shadow thread syncs replica w^(i) with
 *
 *   EASGD (Algorithm 2)  line 4: w^PS <- (1 - a) w^PS + a w^(i)
 *                        line 5: w^(i) <- (1 - a) w^(i) + a w^PS
 *   MA    (Algorithm 3)  lines 5-6: w^global <- AllReduce(w^(i)) / n
 *                        line 7: w^(i) <- (1 - a) w^(i) + a w^global
 *   BMUF  (Algorithm 4)  lines 5-6: w^copy <- AllReduce(w^(i)) / n
 *                        lines 7-9: w^global <- w^global + eta (w^copy -
 *                        w^global) (a plain block step: line 8's momentum
 *                        is optional)
 *                        line 10: w^(i) <- (1 - a) w^(i) + a w^global
 *
 * with a the elastic parameter alpha ("the interpolation is asymmetric:
 * w^(i) and w^PS are not equal after this update", §3.3). The mean of the
 * replicas is the transport's: one process reads the other threads'
 * replicas; ranks allreduce theirs (a sum, which the blends take times a
 * scale, 1 / n).
 *
 * Memory: the replica w^(i) is written by Hogwild workers while a shadow
 * thread blends it — they race on purpose, as in the paper ("worker
 * threads didn't stop training"). So every read and write of a replica
 * here is a relaxed atomic, element by element: a blend that lands
 * between a worker's load and store is lost and the other way round,
 * nothing is torn (TSan-clean). w^PS, w^global and the means are the
 * caller's own.
 *
 * Threads: none; the caller serializes calls on one w^PS or w^global.
 */
#ifndef ST_ALGO_BLEND_H
#define ST_ALGO_BLEND_H

#include <stddef.h>

/* Algorithm 2 line 4: ps <- (1 - alpha) ps + alpha x (x: a replica,
 * read with relaxed loads). */
void st_algo_blend_ps(float *ps, const float *x, size_t n, float alpha);

/* Algorithm 2 line 5, Algorithm 3 line 7, Algorithm 4 line 10:
 * w <- (1 - alpha) w + alpha (c * scale), w a replica (relaxed). */
void st_algo_blend_toward(float *w, const float *c, float scale, size_t n, float alpha);

/* Algorithm 4 lines 7-9: glob <- glob + eta (c * scale - glob), c * scale
 * being the mean of the replicas. */
void st_algo_blend_bmuf_step(float *glob, const float *c, float scale, size_t n, float eta);

/* Algorithm 3 line 6 / Algorithm 4 line 6 in one process: out <- the mean
 * of the n_reps replicas reps[0..n_reps) as they are (relaxed loads), each
 * element summed in replica order. */
void st_algo_blend_mean(float *out, float *const *reps, int n_reps, size_t n);

#endif
