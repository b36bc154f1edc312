#!/usr/bin/python3
"""torch_ctr.py — the PyTorch side of bench/ctr.sh: the standard CTR model
trained on strata's synthetic Criteo TSV, end to end and from memory.

    /usr/bin/python3 bench/torch_ctr.py --train 'DIR/train-*.tsv' --eval DIR/eval.tsv
        [--threads 2] [--epochs 1] [--emb-dim 16] [--hidden 400,400,400]
        [--minibatch 1024] [--sparse-lr 0.05] [--init-accum 0.1] [--dense-lr 0.001]
        [--model dnn|dcnv2 [--cross-layers 3] [--cross-rank 0]]

Model (the dnn preset of tests/reference/models.py): 26 slots × emb_dim 16
summed per slot (at most one key per slot in Criteo), 13 dense features
through log1p(max(x, 0)) inside the forward, MLP 400-400-400 relu, one logit,
BCEWithLogits mean loss; AdaGrad (torch.optim.Adagrad on a sparse
nn.Embedding gradient, lr 0.05, initial accumulator 0.1, eps 1e-10) for the
embedding rows, Adam (lr 1e-3) for the dense tensors; embedding rows start
uniform(-0.01, 0.01), dense weights uniform(-1/sqrt(in), 1/sqrt(in)), biases 0
— the settings of bench/ctr_strata.lua. --model dcnv2 puts
models.py's DCNv2 cross layers (full rank, or W = U V of rank --cross-rank)
in front of the MLP, initialized by the same rule (bench/cross.sh).

Loader (--loader numpy, the default; --loader pandas reads with pandas'
read_csv instead, same keys): each file is
read in ~64 MB chunks cut at line ends; a chunk is split on TAB/LF into
fields, turned into a numpy byte-string array [n × 40]; labels and the 13
integer fields (empty = 0) are converted by numpy; each categorical field
(8 hex digits, empty = missing) is viewed as 8 raw bytes = a uint64 and
mixed with its slot into a 64-bit key. Keys get exact ids from pandas' hash
table (pd.factorize over the train keys: no collisions, like strata's 64-bit
store; np.unique + searchsorted took 10x longer); eval keys never
seen in training map to a zero padding row (strata reads unseen eval keys as
zeros). Training reads the data in file order, minibatches of 1024, one pass
per epoch.

Timings (printed, and as one JSON line at the end):
  load_s     read + parse + ids + tensors, train and eval files
  train_s    the training loop alone over pre-tensorized minibatches (b)
  eval_s     scoring the eval set
  total_s    start of the script to the AUC (a)
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
CHUNK = 64 << 20
MIX = np.uint64(0x9E3779B97F4A7C15)


def parse_chunk(buf):
    fields = buf.replace(b"\n", b"\t").split(b"\t")
    if fields and fields[-1] == b"":
        fields.pop()
    n = len(fields) // N_COLS
    if n * N_COLS != len(fields):
        raise ValueError("ragged rows: every line needs %d TAB-separated fields" % N_COLS)
    a = np.array(fields, dtype="S16").reshape(n, N_COLS)
    labels = a[:, 0].astype(np.float32)
    d = a[:, 1:1 + N_DENSE]
    dense = np.where(d == b"", b"0", d).astype(np.float32)
    raw = np.ascontiguousarray(a[:, 1 + N_DENSE:].astype("S8")).view(np.uint64)
    return labels, dense, slot_keys(raw)


def slot_keys(raw):
    """[n, 26] values (8 raw bytes as a uint64; 0 = missing) -> 64-bit keys
    mixing value and slot; a missing value stays 0."""
    slot = np.arange(1, N_SLOTS + 1, dtype=np.uint64)
    keys = (raw ^ (slot * MIX)) * MIX
    keys[raw == 0] = 0
    return keys


def load(paths):
    L, D, K = [], [], []
    for p in paths:
        with open(p, "rb") as f:
            rest = b""
            while True:
                blk = f.read(CHUNK)
                if not blk:
                    break
                blk = rest + blk
                cut = blk.rfind(b"\n") + 1
                rest = blk[cut:]
                if cut:
                    l, d, k = parse_chunk(blk[:cut])
                    L.append(l), D.append(d), K.append(k)
            if rest:
                l, d, k = parse_chunk(rest + b"\n")
                L.append(l), D.append(d), K.append(k)
    return np.concatenate(L), np.concatenate(D), np.concatenate(K)


def load_pandas(paths):
    """pandas' C parser (read_csv): labels and dense columns as float32
    (empty = 0), each categorical column read as text and viewed as 8 raw
    bytes = a uint64, mixed with its slot as parse_chunk does (same keys)."""
    L, D, K = [], [], []
    dt = {c: np.float32 for c in range(1 + N_DENSE)}
    dt.update({c: "S8" for c in range(1 + N_DENSE, N_COLS)})
    for p in paths:
        for df in pd.read_csv(p, sep="\t", header=None, names=range(N_COLS), dtype=dt,
                              engine="c", na_filter=True, keep_default_na=False,
                              na_values=[""], chunksize=1 << 20):
            L.append(df[0].to_numpy(np.float32))
            D.append(df.iloc[:, 1:1 + N_DENSE].fillna(0).to_numpy(np.float32))
            c = df.iloc[:, 1 + N_DENSE:].fillna("").to_numpy()
            K.append(slot_keys(np.ascontiguousarray(c.astype("S8")).view(np.uint64)))
    return np.concatenate(L), np.concatenate(D), np.concatenate(K)


class Net(torch.nn.Module):
    def __init__(self, vocab, dim, hidden, preset="dnn", n_cross=0, cross_rank=0):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab + 1, dim, padding_idx=vocab, sparse=True)
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                        "..", "tests", "reference"))
        import models
        self.dnn = models.CTRModel(preset, N_DENSE, N_SLOTS, dim, hidden,
                                   n_cross=n_cross, cross_rank=cross_rank)
        with torch.no_grad():
            self.emb.weight.uniform_(-0.01, 0.01)
            self.emb.weight[vocab].zero_()
            for name, p in self.dnn.named_parameters():
                if name.endswith("weight"):
                    b = 1.0 / math.sqrt(p.shape[1])
                    p.uniform_(-b, b)
                else:
                    p.zero_()

    def forward(self, ids, dense):
        return self.dnn(self.emb(ids), None, dense)


def auc(y, p):
    order = np.argsort(p, kind="mergesort")
    ps, ys = p[order], y[order]
    # average ranks over ties
    _, first, counts = np.unique(ps, return_index=True, return_counts=True)
    ranks = np.repeat(first + (counts + 1) / 2.0, counts)
    npos = ys.sum()
    nneg = len(ys) - npos
    return float((ranks[ys == 1].sum() - npos * (npos + 1) / 2) / (npos * nneg))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", required=True, help="glob of train TSV files")
    ap.add_argument("--eval", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--emb-dim", type=int, default=16)
    ap.add_argument("--hidden", default="400,400,400")
    ap.add_argument("--minibatch", type=int, default=1024)
    ap.add_argument("--sparse-lr", type=float, default=0.05)
    ap.add_argument("--init-accum", type=float, default=0.1)
    ap.add_argument("--dense-lr", type=float, default=0.001)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--model", choices=("dnn", "dcnv2"), default="dnn")
    ap.add_argument("--cross-layers", type=int, default=3, help="dcnv2 only")
    ap.add_argument("--cross-rank", type=int, default=0, help="dcnv2 only; 0 = full rank")
    ap.add_argument("--loader", choices=("numpy", "pandas"), default="numpy",
                    help="numpy chunk split (default) or pandas read_csv")
    ap.add_argument("--bf16", action="store_true",
                    help="torch.autocast('cpu', bfloat16) over forward and loss (fp32 "
                         "weights and optimizer state): fast only on CPUs with "
                         "avx512_bf16 or AMX")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    hidden = tuple(int(h) for h in a.hidden.split(","))

    t = time.time()
    paths = sorted(glob.glob(a.train))
    loader = load_pandas if a.loader == "pandas" else load
    ytr, xtr, ktr = loader(paths)
    yev, xev, kev = loader([a.eval])
    # ids from pandas' hash table (pd.factorize: one pass, no sort; 10x
    # faster than np.unique + searchsorted on 48 M keys here); key 0 is a
    # missing field: it keeps a row of the table but reads the padding row
    codes, uniq = pd.factorize(ktr.ravel())
    V = len(uniq)
    id_tr = codes.astype(np.int64).reshape(ktr.shape)
    id_tr[ktr == 0] = V
    id_ev = pd.Index(uniq).get_indexer(kev.ravel()).astype(np.int64).reshape(kev.shape)
    id_ev[(id_ev < 0) | (kev == 0)] = V
    ids_tr, ids_ev = torch.from_numpy(id_tr), torch.from_numpy(id_ev)
    x_tr, x_ev = torch.from_numpy(xtr), torch.from_numpy(xev)
    y_tr = torch.from_numpy(ytr)
    load_s = time.time() - t

    net = Net(V, a.emb_dim, hidden, a.model,
              a.cross_layers if a.model == "dcnv2" else 0, a.cross_rank)
    sopt = torch.optim.Adagrad([net.emb.weight], lr=a.sparse_lr,
                               initial_accumulator_value=a.init_accum, eps=1e-10)
    dopt = torch.optim.Adam(net.dnn.parameters(), lr=a.dense_lr)
    lossf = torch.nn.BCEWithLogitsLoss()
    n, mb = len(ytr), a.minibatch
    t = time.time()
    for _ in range(a.epochs):
        for lo in range(0, n, mb):
            hi = min(n, lo + mb)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
                loss = lossf(net(ids_tr[lo:hi], x_tr[lo:hi]).float(), y_tr[lo:hi])
            sopt.zero_grad()
            dopt.zero_grad()
            loss.backward()
            sopt.step()
            dopt.step()
    train_s = time.time() - t

    t = time.time()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
        p = torch.cat([torch.sigmoid(net(ids_ev[lo:lo + 65536], x_ev[lo:lo + 65536]).float())
                       for lo in range(0, len(yev), 65536)]).numpy()
    eval_auc = auc(yev, p)
    eval_s = time.time() - t
    total_s = time.time() - T0
    ex = n * a.epochs
    dense_params = sum(p.numel() for p in net.dnn.parameters())
    res = dict(system="torch", model=a.model, dense_params=dense_params,
               torch=torch.__version__, threads=a.threads,
               loader=a.loader, precision="bf16" if a.bf16 else "fp32",
               train_rows=n, eval_rows=len(yev), epochs=a.epochs, vocab=V,
               load_s=round(load_s, 3), train_s=round(train_s, 3), eval_s=round(eval_s, 3),
               total_s=round(total_s, 3), e2e_ex_per_s=round(ex / total_s, 1),
               train_ex_per_s=round(ex / train_s, 1), eval_auc=round(eval_auc, 5))
    print("torch %s, %d threads, %s loader, %s: %d train rows (%d keys), %d eval rows"
          % (torch.__version__, a.threads, a.loader, res["precision"], n, V, len(yev)))
    print("  load %.2f s, train %.2f s (%.0f ex/s), eval %.2f s, total %.2f s (%.0f ex/s)"
          % (load_s, train_s, ex / train_s, eval_s, total_s, ex / total_s))
    print("  %s, %d dense params, eval auc %.5f" % (a.model, dense_params, eval_auc))
    print(json.dumps(res))


if __name__ == "__main__":
    main()
