#!/usr/bin/python3
"""torch_gpu.py — the PyTorch side of bench/gpu.sh: the standard CTR model
of bench/torch_ctr.py (26 slots × 16 summed per slot, 13 dense through
log1p, MLP 400-400-400 relu, AdaGrad rows lr 0.05 / init 0.1, Adam dense
lr 1e-3, minibatch 1024, one epoch in file order) on one GPU, with the
embedding as an nn.EmbeddingBag (mode "sum", one bag per example and slot,
padding_idx for missing and unseen keys).

    /usr/bin/python3 bench/torch_gpu.py --train 'DIR/train-*.tsv' --eval DIR/eval.tsv
        [--emb-on cuda|cpu] [--data host|cuda] [--tf32] [other torch_ctr.py flags]

--emb-on cpu keeps the EmbeddingBag and its AdaGrad on the host and only the
MLP on the GPU: PyTorch's usual way to train an embedding larger than GPU
memory, the peer of `bench_gpu --gpu-frac 0.25` (a model 4x its GPU budget).
--data host (default) keeps the pre-tensorized minibatches in pinned host
memory and copies each one to the GPU inside the timed loop, as bench_gpu
uploads each batch; --data cuda puts the whole data set on the GPU first.

Loading (files, ids) is torch_ctr.py's, not timed. Prints timings and, last,
one JSON line with train_ex_per_s and eval_auc. Exits 77 when CUDA is not
available to torch.
"""
import argparse
import glob
import json
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_ctr  # noqa: E402  (loader, auc, the reference dnn)

N_DENSE, N_SLOTS = torch_ctr.N_DENSE, torch_ctr.N_SLOTS


class Net(torch.nn.Module):
    """torch_ctr.py's model (same initialization from the same seed), with its
    nn.Embedding turned into an nn.EmbeddingBag holding the same rows."""

    def __init__(self, vocab, dim, hidden, emb_dev, dev):
        super().__init__()
        ref = torch_ctr.Net(vocab, dim, hidden)
        self.emb = torch.nn.EmbeddingBag.from_pretrained(
            ref.emb.weight.detach().clone(), freeze=False, mode="sum", sparse=True,
            padding_idx=vocab).to(emb_dev)
        self.dnn = ref.dnn.to(dev)
        self.dim, self.emb_dev, self.dev = dim, emb_dev, dev

    def forward(self, ids, dense):
        n = ids.shape[0]
        flat = ids.reshape(-1).to(self.emb_dev, non_blocking=True)
        offsets = torch.arange(0, flat.numel(), device=self.emb_dev)
        pooled = self.emb(flat, offsets).reshape(n, N_SLOTS, self.dim)
        return self.dnn(pooled.to(self.dev, non_blocking=True), None, dense)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", required=True)
    ap.add_argument("--eval", required=True)
    ap.add_argument("--emb-on", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--data", default="host", choices=["host", "cuda"])
    ap.add_argument("--tf32", action="store_true")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--emb-dim", type=int, default=16)
    ap.add_argument("--hidden", default="400,400,400")
    ap.add_argument("--minibatch", type=int, default=1024)
    ap.add_argument("--sparse-lr", type=float, default=0.05)
    ap.add_argument("--init-accum", type=float, default=0.1)
    ap.add_argument("--dense-lr", type=float, default=0.001)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("torch_gpu.py: no CUDA device: skipped")
        sys.exit(77)
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    hidden = tuple(int(h) for h in a.hidden.split(","))

    t = time.time()
    ytr, xtr, ktr = torch_ctr.load(sorted(glob.glob(a.train)))
    yev, xev, kev = torch_ctr.load([a.eval])
    uniq = np.unique(ktr[ktr != 0])
    V = len(uniq)

    def ids_of(k):
        i = np.searchsorted(uniq, k)
        i[i >= V] = 0
        ok = (k != 0) & (uniq[i] == k)
        return np.where(ok, i, V).astype(np.int64)

    data_dev = dev if a.data == "cuda" else torch.device("cpu")
    pin = a.data == "host"

    def tens(x):
        x = torch.from_numpy(x)
        return x.pin_memory() if pin else x.to(data_dev)

    ids_tr, x_tr, y_tr = tens(ids_of(ktr)), tens(xtr), tens(ytr)
    ids_ev, x_ev = tens(ids_of(kev)), tens(xev)
    load_s = time.time() - t

    emb_dev = dev if a.emb_on == "cuda" else torch.device("cpu")
    net = Net(V, a.emb_dim, hidden, emb_dev, dev)
    sopt = torch.optim.Adagrad([net.emb.weight], lr=a.sparse_lr,
                               initial_accumulator_value=a.init_accum, eps=1e-10)
    dopt = torch.optim.Adam(net.dnn.parameters(), lr=a.dense_lr)
    lossf = torch.nn.BCEWithLogitsLoss()
    n, mb = len(ytr), a.minibatch
    torch.cuda.synchronize()
    t = time.time()
    for _ in range(a.epochs):
        for lo in range(0, n, mb):
            hi = min(n, lo + mb)
            x = x_tr[lo:hi].to(dev, non_blocking=True)
            y = y_tr[lo:hi].to(dev, non_blocking=True)
            loss = lossf(net(ids_tr[lo:hi], x), y)
            sopt.zero_grad()
            dopt.zero_grad()
            loss.backward()
            sopt.step()
            dopt.step()
    torch.cuda.synchronize()
    train_s = time.time() - t

    t = time.time()
    with torch.no_grad():
        p = torch.cat([torch.sigmoid(net(ids_ev[lo:lo + 65536],
                                         x_ev[lo:lo + 65536].to(dev))).cpu()
                       for lo in range(0, len(yev), 65536)]).numpy()
    eval_auc = torch_ctr.auc(yev, p)
    eval_s = time.time() - t
    ex = n * a.epochs
    res = dict(system="torch-gpu", torch=torch.__version__,
               gpu=torch.cuda.get_device_name(0), emb_on=a.emb_on, data=a.data,
               train_rows=n, eval_rows=len(yev), epochs=a.epochs, vocab=V,
               load_s=round(load_s, 3), train_s=round(train_s, 3), eval_s=round(eval_s, 3),
               train_ex_per_s=round(ex / train_s, 1), eval_auc=round(eval_auc, 5))
    print("torch %s on %s (embedding on %s, data on %s): %d train rows (%d keys)"
          % (torch.__version__, res["gpu"], a.emb_on, a.data, n, V))
    print("  load %.2f s, train %.2f s (%.0f ex/s), eval %.2f s, auc %.5f"
          % (load_s, train_s, ex / train_s, eval_s, eval_auc))
    print(json.dumps(res))


if __name__ == "__main__":
    main()
