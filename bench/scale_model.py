#!/usr/bin/env python3
"""scale_model.py -- a model of step time for multi-process training, from
quantities measured on this machine (bench/scale.sh measures them and calls
this), checked against the measured 1- and 2-process runs and projected to
P = 1, 2, 4, 8 on a machine with more cores (docs/benchmarks.md, "Scaling
model").

    scale_model.py MEASURED.json [--target-cores T] [--x1 EXAMPLES_PER_S]

MEASURED.json (bench/scale.sh writes it):
  batch          examples per step per process (1024)
  cores_here     cores of this machine
  x1             examples/s of one process (allreduce of one worker)
  cpu1           cores one process keeps busy: (user + sys) / wall of that run
  dense_floats   dense parameters (= floats of a dense gradient), D
  runs           {"policy": {"x": ex/s at P=2, "bpe": bytes sent per example
                 (all ranks), "rt": round trips per step}}
  lat_s          one-way latency of strata's transport, 8 bytes (shm median)
  p2p_Bps        strata's p2p bandwidth at the dense message size (shm)
  ar_busbw_Bps   strata's allreduce busbw at D floats, P = 2 (shm)
  w1_us          CPU microseconds (user + sys, all threads) per example, 1 process
  runs[p]["w"]   the same at P = 2 (both processes)
  cpu_per_byte_s CPU seconds (both ends) per byte strata's transport moves
  t_apply_s, t_add_s  assumed: an Adam apply and a buffer add of D floats

Two checks against the 2-process runs here: examples/s (which another
job's load on the same cores distorts: the model gives P processes P
times the cores of one, a shared machine does not), and CPU per example,
which load hardly changes: w(2) = w1 + bytes sent per example x
cpu_per_byte (compute is the same work at any P; the transport's CPU is
what is added). --x1 replaces the measured one-process speed in the
projection (a quiet machine's number where this run's was slowed).

The model, per policy, for P processes of one worker each on a machine of
C cores (every input above is measured once here; everything else is an
assumption, listed in the docs and printed):

  compute     t_c(P) = batch / x1 * max(1, P * cpu1 / C)
              (one process's step as measured; P processes slow down only
              when they need more cores than there are)
  sparse      s(P) = bytes per step per rank that are not the dense
              gradient, scaled from the 2-process run by the share of keys
              another rank owns: s(2) * 2 (P-1) / P; time s(P) / p2p
  latency     rt(P) * 2 * lat (round trips per step, measured at P = 2,
              the same at every P: a pull asks all owners at once, the
              collectives' rounds are 1 or 2; barrier-like ones grow as
              log2 P but are not per step)
  allreduce, hybrid{staleness}: dense by allreduce, blocking:
              T = t_c + 2 (P-1)/P * 4D / busbw + latency + sparse
              hybrid: the pulls run up to `staleness` steps ahead, so the
              sparse time and the pull's round trip hide behind compute:
              T = t_c + 2 (P-1)/P * 4D / busbw + (rt - 1) * 2 lat
              + max(0, sparse - t_c)
              examples/s = P * batch / T
  async, gba: rank 0 is the dense parameter server. A worker's step:
              T_w = t_c + 2 * 4D / p2p + latency + sparse (its gradient out,
              the parameters back, at P = 1 nothing); rank 0 serves the
              P - 1 other ranks' gradients one at a time, each 2 * 4D of
              messages through its one link plus an optimizer apply
              (async: every gradient; gba: one global step per P
              contributions, the others only added to the buffer):
              t_srv = 2 * 4D / p2p + t_apply (async) or + t_add + t_apply / P
              (gba); examples/s = batch * min(P / T_w, 1 / t_srv_per_step)
              where rank 0 handles (P - 1) remote gradients per P steps.
"""
import json
import sys


def overhead_us(m, policy):
    """CPU per example the 2-process run spent beyond compute and the
    transport's bytes (per-message work, wake-ups, the policy's own
    bookkeeping): measured minus the bytes-only prediction, >= 0."""
    r = m["runs"].get(policy) or {}
    if not r.get("w"):
        return 0.0
    return max(0.0, r["w"] - m["w1_us"] - r["bpe"] * m["cpu_per_byte_s"] * 1e6)


def model(m, policy, P, cores, calibrated=False):
    """(examples/s, step seconds). calibrated adds overhead_us, measured at
    P = 2, scaled like the remote share of the keys, 2 (P-1) / P, as time
    on the step's critical path (one thread: the conservative reading)."""
    batch, D = m["batch"], m["dense_floats"]
    lat, p2p, bus = m["lat_s"], m["p2p_Bps"], m["ar_busbw_Bps"]
    t_c = batch / m["x1"] * max(1.0, P * m["cpu1"] / cores)
    if calibrated and P > 1:
        t_c += batch * overhead_us(m, policy) * 1e-6 * 2 * (P - 1) / P
    r2 = m["runs"].get(policy) or m["runs"]["allreduce"]
    # Bytes per step per rank at P = 2: bytes per example x the examples of
    # one rank's step (all ranks' bytes / all ranks' examples).
    per_rank_2 = r2["bpe"] * batch
    dense_2 = {"allreduce": 2 * (2 - 1) / 2 * 4 * D, "hybrid": 2 * (2 - 1) / 2 * 4 * D,
               "async": 4 * D, "gba": 4 * D}[policy]   # async/gba: rank 1 out, rank 0 back
    sparse_2 = max(0.0, per_rank_2 - dense_2)
    sparse = sparse_2 * 2 * (P - 1) / P if P > 1 else 0.0
    t_sparse = sparse / p2p
    rt = r2["rt"] if P > 1 else 0.0
    t_lat = rt * 2 * lat
    if policy in ("allreduce", "hybrid"):
        t_ar = 2 * (P - 1) / P * 4 * D / bus if P > 1 else 0.0
        if policy == "allreduce":
            T = t_c + t_ar + t_lat + t_sparse
        else:
            T = t_c + t_ar + max(0.0, rt - 1) * 2 * lat + max(0.0, t_sparse - t_c)
        return P * batch / T, T
    # async, gba: the dense parameter server on rank 0.
    t_dense = 2 * 4 * D / p2p if P > 1 else 0.0
    T_w = t_c + t_dense + t_lat + t_sparse
    t_apply = m["t_apply_s"]
    t_add = m["t_add_s"]
    if P == 1:
        return batch / T_w, T_w
    # Per P steps (one from each rank) rank 0 receives P - 1 gradients.
    if policy == "async":
        srv = (P - 1) * (2 * 4 * D / p2p) + P * t_apply
    else:
        srv = (P - 1) * (2 * 4 * D / p2p) + P * t_add + t_apply
    x = batch * min(P / T_w, P / srv)
    return x, P * batch / x


def main():
    args = sys.argv[1:]
    if not args:
        print(__doc__)
        sys.exit(2)
    m = json.load(open(args[0]))
    target = 16
    if "--target-cores" in args:
        target = int(args[args.index("--target-cores") + 1])
    x1_override = None
    if "--x1" in args:
        x1_override = float(args[args.index("--x1") + 1])
    here = m["cores_here"]
    pols = ["allreduce", "hybrid", "async", "gba"]
    print("inputs (measured here): x1 %.0f ex/s, one process keeps %.2f cores busy, D = %d floats"
          % (m["x1"], m["cpu1"], m["dense_floats"]))
    print("  one-way latency %.1f us, p2p %.2f GB/s, allreduce busbw %.2f GB/s (P = 2, D floats)"
          % (m["lat_s"] * 1e6, m["p2p_Bps"] / 1e9, m["ar_busbw_Bps"] / 1e9))
    print("  assumed: optimizer apply of D floats %.2f ms, buffer add %.2f ms"
          % (m["t_apply_s"] * 1e3, m["t_add_s"] * 1e3))
    for pol in pols:
        r = m["runs"].get(pol)
        if r:
            print("  %-9s P=2: %.0f ex/s, %.0f bytes/example, %.2f round trips/step"
                  % (pol, r["x"], r["bpe"], r["rt"]))
    print()
    print("check on this machine (%d cores): predicted vs measured examples/s, and CPU us per"
          " example" % here)
    print("%-10s %2s %10s %10s %9s %8s %8s %9s" % ("policy", "P", "pred ex/s", "meas ex/s",
                                                   "pred/meas", "pred us", "meas us",
                                                   "pred/meas"))
    for pol in pols:
        for P in (1, 2):
            if P == 1 and pol != "allreduce":
                continue
            r = {} if P == 1 else (m["runs"].get(pol) or {})
            meas = m["x1"] if P == 1 else r.get("x")
            x, _ = model(m, pol, P, here)
            w_pred = m["w1_us"] + (0 if P == 1 else r.get("bpe", 0) * m["cpu_per_byte_s"] * 1e6)
            w_meas = m["w1_us"] if P == 1 else r.get("w")
            print("%-10s %2d %10.0f %10s %9s %8.2f %8s %9s" % (
                pol, P, x, "%.0f" % meas if meas else "-", "%.2f" % (x / meas) if meas else "-",
                w_pred, "%.2f" % w_meas if w_meas else "-",
                "%.2f" % (w_pred / w_meas) if w_meas else "-"))
    print("CPU per example the bytes do not explain (measured at P = 2, us): " +
          ", ".join("%s %.2f" % (p, overhead_us(m, p)) for p in pols))
    runs = [("measured here", m)]
    if x1_override:
        q = dict(m)
        q["x1"] = x1_override
        runs.append(("at %.0f ex/s (--x1)" % x1_override, q))
    for label, mm in runs:
        print()
        print("projection: %d cores, one process %s, same transport (shared memory on one "
              "host); bytes-only model, then with the unexplained CPU of P = 2 on the critical "
              "path (calibrated)" % (target, label))
        print("%-10s %2s %10s %9s %9s | %10s %9s %9s" % ("policy", "P", "ex/s", "vs P=1",
                                                         "step ms", "cal ex/s", "vs P=1",
                                                         "step ms"))
        for pol in pols:
            x1, _ = model(mm, pol, 1, target)
            for P in (1, 2, 4, 8):
                x, T = model(mm, pol, P, target)
                xc, Tc = model(mm, pol, P, target, calibrated=True)
                print("%-10s %2d %10.0f %9.2f %9.2f | %10.0f %9.2f %9.2f" % (
                    pol, P, x, x / x1, T * 1e3, xc, xc / x1, Tc * 1e3))


if __name__ == "__main__":
    main()
