#!/usr/bin/python3
"""torch_din.py — the PyTorch side of bench/din.sh: jobs/din.lua (DIN) and
jobs/din_sum.lua (the history sum-pooled) written in PyTorch, trained on the
same `strata gen --history` files, for the eval AUC beside strata's.

    /usr/bin/python3 bench/torch_din.py --train 'DIR/train-*.tsv' --eval DIR/eval.tsv
        --model din|sum [--threads 2] [--emb-dim 8] [--hidden 200,80]
        [--att-hidden 36] [--minibatch 512] [--lr 0.002] [--seed 1]

Data: 42 TSV columns (label, I1..I13, C1..C26, the candidate's category, the
'^'-joined history). As strata's csv reader does with the jobs' settings: an
empty categorical field is a learnable per-slot missing key (missing =
"key", the csv default), an empty history is one missing key, a history
keeps its first 50 items (max_len = 50), dense values are log1p(max(x, 0))
with empty = 0. Keys get exact ids per slot (pd.factorize; unseen eval
values read as a zero row, as strata's unseen eval keys do).

Model: 27 single-valued fields (C1..C26, cand) of emb_dim 8 and the history
(its own table): din = tests/reference/models.py's Attention (hidden
--att-hidden, relu, a linear layer to 1, out = sum_t w_t k_t) with the
candidate as the query; sum = EmbeddingBag(sum) of the history. Then
concat(fields, din or sum, dense) -> MLP 200-80 relu -> 1 logit,
BCEWithLogits mean. Embedding rows uniform(-0.01, 0.01) trained by
SparseAdam, dense weights uniform(-1/sqrt(in), 1/sqrt(in)) with zero biases
trained by Adam, both lr 0.002 — strata's settings in the job files. One
pass in file order, minibatches of 512.

Prints the eval AUC and logloss and one JSON line at the end.
"""
import argparse
import glob
import json
import math
import os
import sys
import time

import numpy as np
import pandas as pd
import torch
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                "tests", "reference"))
import models  # noqa: E402

N_DENSE, N_CAT = 13, 27          # C1..C26 and the candidate
MAX_LEN = 50


def read(paths):
    frames = [pd.read_csv(p, sep="\t", header=None, dtype=str, keep_default_na=False,
                          na_filter=False, quoting=3) for p in paths]
    return pd.concat(frames, ignore_index=True)


class Vocab:
    """Exact ids per slot from the train values; unseen values map to -1."""

    def __init__(self, train_vals):
        self.codes, self.uniq = pd.factorize(train_vals)

    def lookup(self, vals):
        idx = pd.Index(self.uniq).get_indexer(vals)
        return idx


def prepare(df, vocabs=None):
    y = df[0].astype(np.float32).to_numpy()
    dense = df.iloc[:, 1:1 + N_DENSE].replace("", "0").astype(np.float64).to_numpy()
    x = np.log1p(np.maximum(dense, 0.0)).astype(np.float32)
    cats = df.iloc[:, 1 + N_DENSE:1 + N_DENSE + N_CAT].to_numpy()
    hist = df.iloc[:, 1 + N_DENSE + N_CAT].to_numpy()
    # An empty field is the slot's missing key: "" is a value like any other.
    lists = [h.split("^")[:MAX_LEN] if h else [""] for h in hist]
    lens = np.array([len(h) for h in lists], np.int64)
    flat = np.array([v for h in lists for v in h], dtype=object)
    if vocabs is None:
        vocabs = [Vocab(cats[:, s]) for s in range(N_CAT)] + [Vocab(flat)]
        ids = np.stack([vocabs[s].codes for s in range(N_CAT)], axis=1)
        hid = vocabs[N_CAT].codes
    else:
        ids = np.stack([vocabs[s].lookup(cats[:, s]) for s in range(N_CAT)], axis=1)
        hid = vocabs[N_CAT].lookup(flat)
    return dict(y=y, x=x, ids=ids.astype(np.int64), hid=np.asarray(hid, np.int64),
                lens=lens), vocabs


class Net(nn.Module):
    def __init__(self, sizes, hist_size, dim, hidden, att_hidden, kind):
        super().__init__()
        self.kind, self.dim = kind, dim
        self.off = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        # one extra zero row at the end of each table: unseen eval values
        self.emb = nn.Embedding(int(self.off[-1]) + 1, dim, sparse=True)
        self.hemb = nn.Embedding(hist_size + 1, dim, sparse=True)
        with torch.no_grad():
            for e in (self.emb, self.hemb):
                e.weight.uniform_(-0.01, 0.01)
                e.weight[-1].zero_()
        if kind == "din":
            self.din = models.Attention(dim, att_hidden, "relu")
        self.mlp = nn.ModuleList()
        prev = (N_CAT + 1) * dim + N_DENSE
        for h in hidden:
            self.mlp.append(nn.Linear(prev, h))
            prev = h
        self.out = nn.Linear(prev, 1)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.startswith(("emb", "hemb")):
                    continue
                if name.endswith("weight"):
                    b = 1.0 / math.sqrt(p.shape[1])
                    p.uniform_(-b, b)
                else:
                    p.zero_()

    def forward(self, ids, hid, lens, x):
        n = ids.shape[0]
        e = self.emb(ids + torch.from_numpy(self.off[:-1]))          # [n, 27, d]
        K = self.hemb(hid)                                             # [P, d]
        ex = torch.repeat_interleave(torch.arange(n), lens)
        if self.kind == "din":
            h = self.din(e[:, N_CAT - 1, :], K, ex)                    # cand = query
        else:
            h = torch.zeros(n, self.dim).index_add(0, ex, K)
        z = torch.cat([e.reshape(n, -1), h, x], dim=1)
        for lin in self.mlp:
            z = torch.relu(lin(z))
        return self.out(z).squeeze(1)


def batches(d, mb, net=None):
    n = len(d["y"])
    starts = np.concatenate([[0], np.cumsum(d["lens"])])
    for a in range(0, n, mb):
        b = min(a + mb, n)
        yield (torch.from_numpy(d["ids"][a:b]), torch.from_numpy(d["hid"][starts[a]:starts[b]]),
               torch.from_numpy(d["lens"][a:b]), torch.from_numpy(d["x"][a:b]),
               torch.from_numpy(d["y"][a:b]))


def auc(y, p):
    r = pd.Series(p).rank().to_numpy()
    npos = y.sum()
    nneg = len(y) - npos
    return (r[y == 1].sum() - npos * (npos + 1) / 2) / (npos * nneg)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", required=True)
    ap.add_argument("--eval", required=True)
    ap.add_argument("--model", choices=("din", "sum"), required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--emb-dim", type=int, default=8)
    ap.add_argument("--hidden", default="200,80")
    ap.add_argument("--att-hidden", default="36")
    ap.add_argument("--minibatch", type=int, default=512)
    ap.add_argument("--lr", type=float, default=0.002)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    t0 = time.time()
    tr, vocabs = prepare(read(sorted(glob.glob(a.train))))
    ev, _ = prepare(read(sorted(glob.glob(a.eval))), vocabs)
    sizes = [len(v.uniq) for v in vocabs[:N_CAT]]
    hsize = len(vocabs[N_CAT].uniq)
    # unseen eval values: the zero row at the end of their table
    total = int(np.sum(sizes))
    for s in range(N_CAT):
        col = ev["ids"][:, s]
        col[col < 0] = total - int(np.concatenate([[0], np.cumsum(sizes)])[s])
    ev["hid"][ev["hid"] < 0] = hsize
    t_load = time.time() - t0

    net = Net(sizes, hsize, a.emb_dim, [int(h) for h in a.hidden.split(",")],
              [int(h) for h in a.att_hidden.split(",") if h], a.model)
    sp = [net.emb.weight, net.hemb.weight]
    dn = [p for n, p in net.named_parameters() if not n.startswith(("emb", "hemb"))]
    opt_s = torch.optim.SparseAdam(sp, lr=a.lr)
    opt_d = torch.optim.Adam(dn, lr=a.lr)
    lossf = nn.BCEWithLogitsLoss()
    t1 = time.time()
    for ids, hid, lens, x, y in batches(tr, a.minibatch):
        opt_s.zero_grad()
        opt_d.zero_grad()
        loss = lossf(net(ids, hid, lens, x), y)
        loss.backward()
        opt_s.step()
        opt_d.step()
    t_train = time.time() - t1
    with torch.no_grad():
        p = torch.cat([torch.sigmoid(net(ids, hid, lens, x))
                       for ids, hid, lens, x, _ in batches(ev, 8192)]).numpy()
    y = ev["y"]
    pc = np.clip(p, 1e-7, 1 - 1e-7)
    ll = float(-np.mean(y * np.log(pc) + (1 - y) * np.log(1 - pc)))
    res = dict(model=a.model, auc=float(auc(y, p)), logloss=ll, train_rows=len(tr["y"]),
               eval_rows=len(y), load_s=round(t_load, 1), train_s=round(t_train, 1),
               torch=torch.__version__)
    print("torch %s: eval auc %.4f logloss %.4f (%d train rows, %.1f s training)" %
          (a.model, res["auc"], ll, res["train_rows"], t_train))
    print(json.dumps(res))


if __name__ == "__main__":
    main()
