#!/usr/bin/python3
"""criteo_dnn.py — the dnn preset of jobs/criteo_dnn.lua trained in PyTorch
on the same real Criteo rows, for docs/benchmarks.md "Model quality on real
Criteo".

    /usr/bin/python3 tests/reference/criteo_dnn.py [--seeds 1,2,3] [--epochs 3] [--missing key]
        [--dense-indicator]

Same hyper-parameters as jobs/criteo_dnn.lua (keep them in sync): 26 slots
× emb_dim 8, 13 dense features through log1p(max(x, 0)), MLP {64, 32} relu,
sum pooling, minibatch 64, 3 epochs in file order (no shuffling, as strata's
reader), AdaGrad on the embedding rows (lr 0.05, initial accumulator 0.1,
eps 1e-10), Adam on the dense tensors (lr 1e-3). Embedding rows start
uniform(-0.01, 0.01) (strata's init_scale), dense weights
uniform(-1/sqrt(in), 1/sqrt(in)) with zero biases (st_model_create).

Parsing as strata's Criteo reader: label, 13 integer fields (empty = 0),
26 categorical fields (empty = no key; with --missing key, the slot's
missing value, as strata's `missing = "key"`). Categorical values get one id per
distinct (slot, value) in the train file — a collision-free stand-in for
strata's 64-bit xxh3 keys; values never seen in training have no row and
contribute nothing (strata reads unseen eval keys as zeros). Prints the AUC
on dev.csv and test.csv per seed and their mean and spread.
"""
import argparse
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.environ.get("ST_SHARED_DATA", os.path.join(ROOT, "..", "shared", "data"))
DIR = os.path.join(DATA, "criteo", "Lapis-Hong_Wide-ResDNN")

N_DENSE, N_SLOTS = 13, 26
DIM, HIDDEN, MB, EPOCHS = 8, (64, 32), 64, 3
SPARSE_LR, INIT_ACCUM, EPS, DENSE_LR, INIT_SCALE = 0.05, 0.1, 1e-10, 1e-3, 0.01


def read_tsv(path):
    labels, dense, cats = [], [], []
    with open(path) as f:
        for line in f:
            c = line.rstrip("\n").split("\t")
            c += [""] * (1 + N_DENSE + N_SLOTS - len(c))
            labels.append(float(c[0]))
            row = [float(v) if v else 0.0 for v in c[1:1 + N_DENSE]]
            if INDICATOR:   # strata's dense_missing = "indicator"
                row += [0.0 if v else 1.0 for v in c[1:1 + N_DENSE]]
            dense.append(row)
            cats.append(c[1 + N_DENSE:1 + N_DENSE + N_SLOTS])
    return (np.array(labels, np.float32), np.array(dense, np.float32), cats)


MISSING = None  # "<missing>" under --missing key (strata's missing key)
INDICATOR = False  # --dense-indicator: 13 more 0/1 "was empty" dense features


def encode(cats, vocab, grow):
    """Per example and slot: list of ids (0 or 1 of them). Returns flat ids
    and per-bag offsets for nn.EmbeddingBag (n*S bags)."""
    ids, offsets = [], []
    for row in cats:
        for s, v in enumerate(row):
            offsets.append(len(ids))
            if not v:
                if MISSING is None:
                    continue
                v = MISSING
            k = (s, v)
            i = vocab.get(k)
            if i is None and grow:
                i = vocab[k] = len(vocab)
            if i is not None:
                ids.append(i)
    return np.array(ids, np.int64), np.array(offsets, np.int64)


def auc(y, p):
    """Exact AUC (ties get the average rank), as ops/metrics/auc.c."""
    order = np.argsort(p, kind="mergesort")
    ps, ys = p[order], y[order]
    ranks = np.empty(len(p))
    i = 0
    while i < len(p):
        j = i
        while j + 1 < len(p) and ps[j + 1] == ps[i]:
            j += 1
        ranks[i:j + 1] = (i + j) / 2.0 + 1
        i = j + 1
    npos = ys.sum()
    nneg = len(ys) - npos
    return (ranks[ys == 1].sum() - npos * (npos + 1) / 2) / (npos * nneg)


def bags(ids, offsets, lo, hi, n_ex):
    """Slice examples lo..hi-1 out of the flat bag arrays."""
    b0, b1 = lo * N_SLOTS, hi * N_SLOTS
    k0 = offsets[b0]
    k1 = offsets[b1] if b1 < len(offsets) else len(ids)
    return ids[k0:k1], offsets[b0:b1] - k0


def run(seed, epochs, data):
    torch.manual_seed(seed)
    (ytr, xtr, itr, otr), evals, nvocab = data
    emb = torch.nn.EmbeddingBag(nvocab, DIM, mode="sum", sparse=True)
    with torch.no_grad():
        emb.weight.uniform_(-INIT_SCALE, INIT_SCALE)
    model = models.CTRModel("dnn", N_DENSE * (2 if INDICATOR else 1), N_SLOTS, DIM, HIDDEN)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("weight"):
                b = 1.0 / math.sqrt(p.shape[1])
                p.uniform_(-b, b)
            else:
                p.zero_()
    sopt = torch.optim.Adagrad(emb.parameters(), lr=SPARSE_LR,
                               initial_accumulator_value=INIT_ACCUM, eps=EPS)
    dopt = torch.optim.Adam(model.parameters(), lr=DENSE_LR)
    lossf = torch.nn.BCEWithLogitsLoss()
    n = len(ytr)
    for _ in range(epochs):
        for lo in range(0, n, MB):
            hi = min(n, lo + MB)
            ids, offs = bags(itr, otr, lo, hi, n)
            pooled = emb(torch.from_numpy(ids), torch.from_numpy(offs)).view(hi - lo, N_SLOTS, DIM)
            logit = model(pooled, None, torch.from_numpy(xtr[lo:hi]))
            loss = lossf(logit, torch.from_numpy(ytr[lo:hi]))
            sopt.zero_grad()
            dopt.zero_grad()
            loss.backward()
            sopt.step()
            dopt.step()
    out = {}
    with torch.no_grad():
        for name, (y, x, ids, offs) in evals.items():
            pooled = emb(torch.from_numpy(ids), torch.from_numpy(offs)).view(len(y), N_SLOTS, DIM)
            p = torch.sigmoid(model(pooled, None, torch.from_numpy(x))).numpy()
            out[name] = auc(y, p)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="1,2,3,4,5")
    ap.add_argument("--epochs", type=int, default=EPOCHS)
    ap.add_argument("--missing", choices=("drop", "key"), default="drop")
    ap.add_argument("--dense-indicator", action="store_true")
    a = ap.parse_args()
    global MISSING, INDICATOR
    MISSING = "<missing>" if a.missing == "key" else None
    INDICATOR = a.dense_indicator
    torch.set_num_threads(1)
    vocab = {}
    ytr, xtr, ctr = read_tsv(os.path.join(DIR, "train.csv"))
    itr, otr = encode(ctr, vocab, True)
    evals = {}
    for name in ("dev", "test"):
        y, x, c = read_tsv(os.path.join(DIR, name + ".csv"))
        evals[name] = (y, x) + encode(c, vocab, False)
    data = ((ytr, xtr, itr, otr), evals, len(vocab))
    res = {"dev": [], "test": []}
    for seed in [int(s) for s in a.seeds.split(",")]:
        r = run(seed, a.epochs, data)
        print("seed %d  dev auc %.4f  test auc %.4f" % (seed, r["dev"], r["test"]))
        for k in res:
            res[k].append(r[k])
    for k in res:
        v = np.array(res[k])
        print("%-4s auc mean %.4f  std %.4f  min %.4f  max %.4f  (%d seeds, torch %s)"
              % (k, v.mean(), v.std(), v.min(), v.max(), len(v), torch.__version__))


if __name__ == "__main__":
    main()
