#!/usr/bin/python3
"""torch_mhot.py — the PyTorch side of bench/mhot.sh: the standard CTR model
on multi-hot synthetic data, pooled with nn.EmbeddingBag, end to end.

    /usr/bin/python3 bench/torch_mhot.py --train 'DIR/train-*.tsv' --eval DIR/eval.tsv
        [--threads 2] [--minibatch 1024] [--batch-rows 8192]

Data: `strata gen --multi-hot L` TSV, 40 columns, every categorical field a
'^'-joined list of 8-hex-digit values (or empty). Model: the dnn preset of
tests/reference/models.py (26 slots x emb_dim 16 SUM-pooled per slot with
one nn.EmbeddingBag(mode="sum", sparse=True) over per-sample offsets, one
bag per (example, slot); 13 dense features through log1p(max(x, 0)); MLP
400-400-400 relu), BCEWithLogits mean loss; AdaGrad (lr 0.05, initial
accumulator 0.1, eps 1e-10) on the sparse embedding gradient, Adam (lr
1e-3) on the dense tensors; one epoch in file order, minibatch 1024 — the
settings of bench/mhot_strata.lua.

Loader (numpy, no per-key Python): each file is split into its 40 fields;
the list fields of every row are joined with '^' and, since every value is
exactly 8 hex digits, the joined bytes are viewed as 9-byte tokens, so the
keys come out with one reshape; the per-field key counts are 1 + the
number of '^'. Keys get exact ids (no collisions) from pandas' hash table,
pd.factorize, in order of first appearance; eval keys are looked up in it
(pd.Index.get_indexer), unseen ones map to a zero padding row.

Why this loader (the peer at its best, measured on the 200k-row file, 443
MB, 48 M keys, on the 2-core machine of docs/benchmarks.md): pandas'
read_csv (C parser) took 21.1 s against this split's 12.8 s, since every
list cell becomes a Python str before the join; np.unique + searchsorted
for the ids took 42.4 s against pd.factorize's 4.5 s. pyarrow is not
packaged for Debian 12.

Also prints the embedding bytes each system moves per example: EmbeddingBag
gathers one row per key occurrence (and its sparse gradient has one row per
occurrence); strata pulls one row per unique key of a read batch
(--batch-rows) and pushes one gradient row per unique key.
"""
import argparse
import glob
import json
import math
import os
import sys
import time

T0 = time.time()

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402

N_DENSE, N_SLOTS = 13, 26
N_COLS = 1 + N_DENSE + N_SLOTS


def load(paths):
    L, D, K, C = [], [], [], []
    for p in paths:
        with open(p, "rb") as f:
            buf = f.read()
        fields = buf.replace(b"\n", b"\t").split(b"\t")
        if fields and fields[-1] == b"":
            fields.pop()
        n = len(fields) // N_COLS
        a = np.array(fields, dtype=object).reshape(n, N_COLS)
        L.append(a[:, 0].astype(np.float32))
        d = a[:, 1:1 + N_DENSE].astype("S24")
        D.append(np.where(d == b"", b"0", d).astype(np.float32))
        cats = a[:, 1 + N_DENSE:]                                   # [n, 26] bytes
        lens = np.frompyfunc(len, 1, 1)(cats).astype(np.int64)
        cnt = np.where(lens > 0, (lens + 1) // 9, 0)               # keys per field
        joined = b"^".join(c for c in cats.ravel() if c) + b"^"
        tok = np.frombuffer(joined, dtype=np.uint8).reshape(-1, 9)[:, :8]
        raw = np.ascontiguousarray(tok).view(np.uint64).ravel()
        slot = np.repeat(np.tile(np.arange(N_SLOTS, dtype=np.uint64), n), cnt.ravel())
        K.append(raw ^ (slot * np.uint64(0x9E3779B97F4A7C15)))
        C.append(cnt)
    return np.concatenate(L), np.concatenate(D), np.concatenate(K), np.concatenate(C)


def auc(y, p):
    order = np.argsort(p, kind="mergesort")
    ps, ys = p[order], y[order]
    _, first, counts = np.unique(ps, return_index=True, return_counts=True)
    ranks = np.repeat(first + (counts + 1) / 2.0, counts)
    npos = ys.sum()
    nneg = len(ys) - npos
    return float((ranks[ys == 1].sum() - npos * (npos + 1) / 2) / (npos * nneg))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", required=True)
    ap.add_argument("--eval", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--minibatch", type=int, default=1024)
    ap.add_argument("--batch-rows", type=int, default=8192)
    ap.add_argument("--emb-dim", type=int, default=16)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    dim, hidden = a.emb_dim, (400, 400, 400)

    t = time.time()
    ytr, xtr, ktr, ctr = load(sorted(glob.glob(a.train)))
    yev, xev, kev, cev = load([a.eval])
    codes, uniq = pd.factorize(ktr)
    V = len(uniq)
    id_tr = codes.astype(np.int64)
    id_ev = pd.Index(uniq).get_indexer(kev).astype(np.int64)
    id_ev[id_ev < 0] = V
    # bag b = example * 26 + slot starts at off[b]; row i's keys start at roff[i]
    off_tr = np.concatenate([[0], np.cumsum(ctr.ravel())[:-1]]).astype(np.int64)
    off_ev = np.concatenate([[0], np.cumsum(cev.ravel())[:-1]]).astype(np.int64)
    load_s = time.time() - t

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                    "..", "tests", "reference"))
    import models
    emb = torch.nn.EmbeddingBag(V + 1, dim, mode="sum", sparse=True, padding_idx=V)
    dnn = models.CTRModel("dnn", N_DENSE, N_SLOTS, dim, hidden)
    with torch.no_grad():
        emb.weight.uniform_(-0.01, 0.01)
        emb.weight[V].zero_()
        for name, p in dnn.named_parameters():
            if name.endswith("weight"):
                b = 1.0 / math.sqrt(p.shape[1])
                p.uniform_(-b, b)
            else:
                p.zero_()
    sopt = torch.optim.Adagrad([emb.weight], lr=0.05, initial_accumulator_value=0.1, eps=1e-10)
    dopt = torch.optim.Adam(dnn.parameters(), lr=1e-3)
    lossf = torch.nn.BCEWithLogitsLoss()

    def forward(ids, off, x, lo, hi):
        b0, b1 = lo * N_SLOTS, hi * N_SLOTS
        k0 = off[b0]
        k1 = off[b1] if b1 < len(off) else len(ids)
        pooled = emb(torch.from_numpy(ids[k0:k1]), torch.from_numpy(off[b0:b1] - k0))
        return dnn(pooled.view(hi - lo, N_SLOTS, dim), None, torch.from_numpy(x[lo:hi]))

    n, mb = len(ytr), a.minibatch
    y_tr = torch.from_numpy(ytr)
    t = time.time()
    for lo in range(0, n, mb):
        hi = min(n, lo + mb)
        loss = lossf(forward(id_tr, off_tr, xtr, lo, hi), y_tr[lo:hi])
        sopt.zero_grad()
        dopt.zero_grad()
        loss.backward()
        sopt.step()
        dopt.step()
    train_s = time.time() - t
    with torch.no_grad():
        p = torch.cat([torch.sigmoid(forward(id_ev, off_ev, xev, lo, min(len(yev), lo + 8192)))
                       for lo in range(0, len(yev), 8192)]).numpy()
    eval_auc = auc(yev, p)
    total_s = time.time() - T0

    # embedding bytes per example (forward gather + gradient rows)
    row = dim * 4
    keys_per_ex = len(ktr) / n
    rstart = np.concatenate([[0], np.cumsum(ctr.sum(axis=1))]).astype(np.int64)
    uniq_rows = 0
    for lo in range(0, n, a.batch_rows):
        hi = min(n, lo + a.batch_rows)
        uniq_rows += len(np.unique(id_tr[rstart[lo]:rstart[hi]]))
    res = dict(system="torch", torch=torch.__version__, threads=a.threads, train_rows=n,
               eval_rows=len(yev), vocab=V, keys_per_example=round(keys_per_ex, 2),
               load_s=round(load_s, 3), train_s=round(train_s, 3), total_s=round(total_s, 3),
               e2e_ex_per_s=round(n / total_s, 1), train_ex_per_s=round(n / train_s, 1),
               eval_auc=round(eval_auc, 5),
               torch_emb_bytes_per_ex=round(2 * keys_per_ex * row, 1),
               strata_emb_bytes_per_ex=round(2 * uniq_rows * row / n, 1))
    print("torch %s, %d threads: %d train rows, %.2f keys/example, %d distinct keys"
          % (torch.__version__, a.threads, n, keys_per_ex, V))
    print("  load %.2f s, train %.2f s (%.0f ex/s), total %.2f s (%.0f ex/s), eval auc %.5f"
          % (load_s, train_s, n / train_s, total_s, n / total_s, eval_auc))
    print("  embedding bytes per example (rows read + gradient rows written): EmbeddingBag "
          "%.0f, strata unique rows per %d-row batch %.0f"
          % (res["torch_emb_bytes_per_ex"], a.batch_rows, res["strata_emb_bytes_per_ex"]))
    print(json.dumps(res))


if __name__ == "__main__":
    main()
