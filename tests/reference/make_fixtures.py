#!/usr/bin/python3
"""make_fixtures.py — golden fixtures for tests/unit/test_parity.c.

    /usr/bin/python3 tests/reference/make_fixtures.py [OUT_DIR [OPTIM|PRESET]]

(OPTIM: only the fixtures of that key of OPTIMS, e.g. multihot, or of that
key of PRESETS, e.g. dcnv2.)

Writes OUT_DIR (default tests/reference/fixtures)/<preset>_<optim>.bin for
every preset of models.py and every optimizer setting of OPTIMS below: the
config, the initial dense tensors and sparse rows, 20 minibatches, the
logits / loss / gradients of step 1 (before any update) and every parameter
after 20 steps (one optimizer step per minibatch). Everything is float32
and deterministic (seeded torch.Generator, one thread).

Optimizers follow ops/optim/optim.h. Dense tensors are updated by
torch.optim (SGD / Adagrad / Adam with weight_decay = l2) and, as a check of
the formulas, by this file's own `update` too: the script stops if the two
disagree. Sparse rows are updated by `update` only for the rows the step
touched (lazy weight decay; Adam with the table's step count t = the global
step number, as torch.optim.SparseAdam counts steps, but with optim.h's eps
placement sqrt(v / (1 - b2^t)) + eps like torch.optim.Adam). FTRL has no
torch.optim counterpart and is written here from optim.h (McMahan et al.
2013, Algorithm 1); its rows start at 0 as optim.h requires.

File format ("STFX1"): magic b"STFX1\\n", u32 record count, then records of
  u32 name length, name bytes (no NUL), u8 dtype, u32 ndim, u64 dims[ndim],
  raw little-endian data (prod(dims) elements)
with dtype 0 = f32, 1 = u64, 2 = u32, 3 = u16, 4 = string (u8 bytes),
5 = f64. Record names are listed in tests/reference/README.md.
"""
import math
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402

N_SLOTS, N_DENSE, DIM, MB, STEPS = 4, 3, 4, 8, 20
HIDDEN = (8, 4)
BOTTOM = (8, 4)                 # dlrm; last = DIM
VOCAB = (6, 10, 8, 12)          # local ids per slot
MULTI_SLOT = 3                  # 0..3 keys per example, values in [0.5, 2)
EMPTY_SLOT = 0                  # missing in ~25% of the examples

PRESETS = {
    # preset: (activation, pooling)  — sigmoid and mean pooling each covered once
    "lr": ("relu", "sum"),
    "dnn": ("relu", "sum"),
    "wdl": ("sigmoid", "sum"),
    "deepfm": ("relu", "mean"),
    "dlrm": ("relu", "sum"),
    "dcnv2": ("relu", "sum"),
    "din": ("relu", "sum"),
    "mmoe": ("relu", "sum"),
    "mtl": ("relu", "sum"),
    "mmoe_mtl": ("relu", "sum"),
}

# mtl (a layer graph with two heads, jobs/mtl.lua's shape; models.MTL):
# shared MLP HIDDEN over concat(e, x), heads "ctr" (label 0, click) and
# "cvr" (label 1, conversion), loss Σ_h MTL_WEIGHTS[h] · BCE_mean(z_h, y_h).
# Labels are [MB, 2] row-major (batch.<i>.labels): the click as the other
# fixtures draw it, and a conversion only on clicked examples (a coin flip
# from the fixture's generator). Record cfg.heads (f64: the weights) tells
# the C side to build the graph with one head per label.
MTL_WEIGHTS = (1.0, 0.5)
# mmoe_mtl (st.model.mmoe's graph on two labels; models.MMoEGraph with
# heads=True): the mmoe fixtures' experts, gates and towers, but each
# tower's logit the head of its label (out0: click, out1: conversion), with
# mtl's labels and loss weights.
HEADS = ("mtl", "mmoe_mtl")

# din (a layer graph, jobs/din.lua; models.DIN): DIN's attention over slot
# DIN_K (MULTI_SLOT: 0-3 weighted keys, an empty sequence in ~25% of the
# examples) with slot DIN_Q's embedding as the query; its MLP has hidden
# sizes DIN_ATT with DIN_ATT_ACT. The C side builds the graph by hand from
# record cfg.din (u32: query slot, key slot, activation as lang/job.h's
# mlp a — 0 none, 1 relu, 2 sigmoid — then the hidden sizes); slot DIN_K
# has pooling "none" (cfg.slot_pooling 3). In the multihot fixture the
# query slot (1) pools by sum, so q is its sum as attention.h defines it.
DIN_Q, DIN_K, DIN_ATT, DIN_ATT_ACT = 1, 3, (8, 4), "sigmoid"

# mmoe (a layer graph, jobs/mmoe_graph.lua; models.MMoEGraph): MMoE with
# MMOE_E experts of sizes MMOE_SIZES (MMOE_ACT after each layer) and
# MMOE_T gates over concat(e, x); task t's tower is an MLP of HIDDEN with
# the preset's activation, then out<t>; the logit is the towers' sum. The
# C side builds the graph by hand from record cfg.mmoe (u32: experts,
# tasks, expert activation as lang/job.h's mlp a, then the expert sizes).
MMOE_E, MMOE_T, MMOE_SIZES, MMOE_ACT = 3, 2, (8, 6), "relu"

# dcnv2: N_CROSS cross layers over concat(e, x) (width 4 * 4 + 3 = 19), full
# rank for some optimizer settings and rank CROSS_RANK for the others, so
# both forms of W meet every kind of update between them.
N_CROSS, CROSS_RANK = 2, 3
LOW_RANK_OPTIMS = ("adagrad_row", "adam", "multihot")


def opt(name, lr, l2=0.0, rowwise=0, eps=0.0, beta1=0.9, beta2=0.999,
        init_accum=0.0, l1=0.0, beta=1.0):
    return dict(name=name, rowwise=rowwise, lr=lr, l2=l2, eps=eps, beta1=beta1,
                beta2=beta2, init_accum=init_accum, l1=l1, beta=beta)


# fixture suffix: (sparse optimizer, dense optimizer)
OPTIMS = {
    "sgd": (opt("sgd", 0.1, l2=1e-3), opt("sgd", 0.1, l2=1e-3)),
    "adagrad": (opt("adagrad", 0.1, l2=1e-3, eps=1e-10, init_accum=0.1),
                opt("adagrad", 0.05, l2=1e-3, eps=1e-10, init_accum=0.1)),
    # row-wise only for sparse rows; the dense tensors use element-wise adagrad
    "adagrad_row": (opt("adagrad", 0.1, rowwise=1, eps=1e-10, init_accum=0.1),
                    opt("adagrad", 0.05, eps=1e-10, init_accum=0.1)),
    # SparseAdam has no weight decay: l2 = 0 on the rows, 1e-3 on dense
    "adam": (opt("adam", 0.01, eps=1e-8), opt("adam", 0.01, l2=1e-3, eps=1e-8)),
    # FTRL for the rows (they start at 0), plain SGD for the dense tensors
    "ftrl": (opt("ftrl", 1.0, l2=1e-3, l1=1e-4, beta=1.0), opt("sgd", 0.1)),
    # multi-hot input pooled per slot by nn.EmbeddingBag (see MULTIHOT)
    "multihot": (opt("sgd", 0.1, l2=1e-3), opt("sgd", 0.1, l2=1e-3)),
}

# The "multihot" fixtures (issue 18): every slot is a list field. Keys per
# example and slot are drawn from MH_LEN[s] = (lo, hi) (lo 0: the bag may be
# empty), values 1 (EmbeddingBag's mean takes no per-sample weights), and
# each slot pools its own way, overriding the preset's pooling:
# cfg.slot_pooling holds lang/job.h's enum st_pooling (1 sum, 2 mean). The
# pooled vectors come from torch.nn.functional.embedding_bag with
# per-sample offsets, one bag per (example, slot), so the reference does not
# share models.pool's code.
MH_LEN = ((0, 4), (1, 8), (0, 6), (1, 3))
MH_POOL = ("mean", "sum", "mean", "mean")

OPT_FIELDS = ("rowwise", "lr", "l2", "eps", "beta1", "beta2", "init_accum", "l1", "beta")


# ---- optimizers of optim.h (float32 tensors, in place) ----------------------

def state_init(o, w):
    if o["name"] == "sgd":
        return {}
    if o["name"] == "adagrad":
        shape = (1,) if o["rowwise"] else w.shape
        return {"acc": torch.full(shape, o["init_accum"], dtype=torch.float32)}
    if o["name"] == "adam":
        return {"m": torch.zeros_like(w), "v": torch.zeros_like(w)}
    if o["name"] == "ftrl":
        return {"z": torch.zeros_like(w), "n": torch.zeros_like(w)}
    raise ValueError(o["name"])


def update(o, w, st, g, t):
    k = o["name"]
    if k == "ftrl":
        lr, l1, l2, beta = o["lr"], o["l1"], o["l2"], o["beta"]
        z, n = st["z"], st["n"]
        sigma = (torch.sqrt(n + g * g) - torch.sqrt(n)) / lr
        z += g - sigma * w
        n += g * g
        w_new = -(z - torch.sign(z) * l1) / ((beta + torch.sqrt(n)) / lr + l2)
        w.copy_(torch.where(z.abs() <= l1, torch.zeros_like(w), w_new))
        return
    g = g + o["l2"] * w if o["l2"] else g.clone()
    if k == "sgd":
        w -= o["lr"] * g
    elif k == "adagrad":
        if o["rowwise"]:
            st["acc"] += (g * g).mean()
        else:
            st["acc"] += g * g
        w -= o["lr"] * g / (torch.sqrt(st["acc"]) + o["eps"])
    elif k == "adam":
        b1, b2 = o["beta1"], o["beta2"]
        st["m"].mul_(b1).add_((1 - b1) * g)
        st["v"].mul_(b2).add_((1 - b2) * g * g)
        bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
        w -= o["lr"] * (st["m"] / bc1) / (torch.sqrt(st["v"] / bc2) + o["eps"])
    else:
        raise ValueError(k)


def torch_optim(o, params):
    if o["name"] == "sgd":
        return torch.optim.SGD(params, lr=o["lr"], weight_decay=o["l2"])
    if o["name"] == "adagrad":
        assert not o["rowwise"]
        return torch.optim.Adagrad(params, lr=o["lr"], weight_decay=o["l2"],
                                   initial_accumulator_value=o["init_accum"], eps=o["eps"])
    if o["name"] == "adam":
        return torch.optim.Adam(params, lr=o["lr"], betas=(o["beta1"], o["beta2"]),
                                eps=o["eps"], weight_decay=o["l2"])
    raise ValueError(o["name"])


# ---- data ------------------------------------------------------------------

def make_batches(gen):
    """STEPS minibatches of MB examples: dict of numpy arrays, keys in slot
    order within an example (as the readers emit them)."""
    out = []
    for _ in range(STEPS):
        row_off, slots, local, vals = [0], [], [], []
        for _i in range(MB):
            for s in range(N_SLOTS):
                if s == EMPTY_SLOT and torch.rand(1, generator=gen).item() < 0.25:
                    continue
                nk = int(torch.randint(0, 4, (1,), generator=gen)) if s == MULTI_SLOT else 1
                for _k in range(nk):      # duplicates possible: aggregated per key
                    slots.append(s)
                    local.append(int(torch.randint(0, VOCAB[s], (1,), generator=gen)))
                    v = 0.5 + 1.5 * torch.rand(1, generator=gen).item() if s == MULTI_SLOT else 1.0
                    vals.append(v)
            row_off.append(len(slots))
        dense = torch.randint(-2, 60, (MB, N_DENSE), generator=gen).float()
        dense[torch.rand(MB, N_DENSE, generator=gen) < 0.3] = 0.0
        labels = (torch.rand(MB, generator=gen) < 0.4).float()
        out.append(dict(row_off=np.array(row_off, np.uint32),
                        slots=np.array(slots, np.uint16),
                        local=np.array(local, np.int64),
                        vals=np.array(vals, np.float32),
                        dense=dense.numpy().astype(np.float32),
                        labels=labels.numpy().astype(np.float32)))
    return out


def make_batches_multihot(gen):
    """STEPS minibatches of MB multi-hot examples (MH_LEN keys per slot,
    values 1, duplicates possible), in make_batches' layout."""
    out = []
    for _ in range(STEPS):
        row_off, slots, local = [0], [], []
        for _i in range(MB):
            for s in range(N_SLOTS):
                lo, hi = MH_LEN[s]
                nk = int(torch.randint(lo, hi + 1, (1,), generator=gen))
                for _k in range(nk):
                    slots.append(s)
                    local.append(int(torch.randint(0, VOCAB[s], (1,), generator=gen)))
            row_off.append(len(slots))
        dense = torch.randint(-2, 60, (MB, N_DENSE), generator=gen).float()
        dense[torch.rand(MB, N_DENSE, generator=gen) < 0.3] = 0.0
        labels = (torch.rand(MB, generator=gen) < 0.4).float()
        out.append(dict(row_off=np.array(row_off, np.uint32),
                        slots=np.array(slots, np.uint16),
                        local=np.array(local, np.int64),
                        vals=np.ones(len(slots), np.float32),
                        dense=dense.numpy().astype(np.float32),
                        labels=labels.numpy().astype(np.float32)))
    return out


def pool_bag(preset, tables, dim, modes, n, row_off, slots, local):
    """models.pool's outputs from nn.functional.embedding_bag: one bag per
    (example, slot) with per-sample offsets, mode modes[s] per slot; the
    wide term is a sum bag over the last column."""
    S = len(tables)
    pooled, wide = [], torch.zeros(n) if models.HAS_WIDE[preset] else None
    for s in range(S):
        ids, offs = [], []
        for i in range(n):
            offs.append(len(ids))
            for k in range(int(row_off[i]), int(row_off[i + 1])):
                if int(slots[k]) == s:
                    ids.append(int(local[k]))
        it = torch.tensor(ids, dtype=torch.int64)
        ot = torch.tensor(offs, dtype=torch.int64)
        if models.HAS_EMB[preset]:
            pooled.append(torch.nn.functional.embedding_bag(it, tables[s][:, :dim], ot,
                                                            mode=modes[s]))
        if wide is not None:
            wide = wide + torch.nn.functional.embedding_bag(it, tables[s][:, -1:], ot,
                                                            mode="sum").squeeze(1)
    return (torch.stack(pooled, dim=1) if pooled else None), wide


def key_of(s, l):
    return (int(s) << 32) | int(l)


# ---- writer -------------------------------------------------------------------

class Writer:
    DT = {np.float32: 0, np.uint64: 1, np.uint32: 2, np.uint16: 3, np.float64: 5}

    def __init__(self):
        self.recs = []

    def add(self, name, arr):
        if isinstance(arr, str):
            data, dt, dims = arr.encode(), 4, (len(arr),)
        else:
            a = np.ascontiguousarray(arr)
            dt = self.DT[a.dtype.type]
            data, dims = a.astype(a.dtype.newbyteorder("<")).tobytes(), a.shape
        nb = name.encode()
        rec = struct.pack("<I", len(nb)) + nb + struct.pack("<BI", dt, len(dims))
        rec += struct.pack("<%dQ" % len(dims), *dims) + data
        self.recs.append(rec)

    def save(self, path):
        with open(path, "wb") as f:
            f.write(b"STFX1\n" + struct.pack("<I", len(self.recs)) + b"".join(self.recs))


def f32(t):
    return t.detach().numpy().astype(np.float32)


# ---- one fixture -------------------------------------------------------------

def make_fixture(preset, oname, seed):
    act, pooling = PRESETS[preset]
    sp, dn = OPTIMS[oname]
    gen = torch.Generator().manual_seed(seed)
    dim = 1 if preset == "lr" else DIM
    rdim = models.row_dim(preset, dim)
    rank = CROSS_RANK if oname in LOW_RANK_OPTIMS else 0
    if preset in ("mmoe", "mmoe_mtl"):
        model = models.MMoEGraph(N_DENSE, N_SLOTS, dim, HIDDEN, act, MMOE_E, MMOE_SIZES,
                                 MMOE_ACT, MMOE_T, heads=preset == "mmoe_mtl")
    elif preset == "mtl":
        model = models.MTL(N_DENSE, N_SLOTS, dim, HIDDEN, act)
    elif preset == "din":
        model = models.DIN(N_DENSE, N_SLOTS, dim, HIDDEN, DIN_ATT, act, DIN_ATT_ACT,
                           DIN_Q, DIN_K)
    else:
        model = models.CTRModel(preset, N_DENSE, N_SLOTS, dim, HIDDEN,
                                BOTTOM if preset == "dlrm" else (), act,
                                n_cross=N_CROSS if preset == "dcnv2" else 0,
                                cross_rank=rank)
    models.init_dense(model, gen)
    scale = 0.0 if sp["name"] == "ftrl" else 0.5
    if preset == "din" and scale:
        # Attention weights a key by a product of embeddings, so its
        # gradients scale with |row|^2 and more: larger rows give the
        # fixture attention gradients far above the comparison's atol.
        scale = 1.5
    tables = [(torch.rand(VOCAB[s], rdim, generator=gen) * 2 - 1) * scale
              for s in range(N_SLOTS)]
    multihot = oname == "multihot"
    batches = make_batches_multihot(gen) if multihot else make_batches(gen)
    if preset in HEADS:
        for b in batches:
            click = b["labels"]
            conv = click * (torch.rand(len(click), generator=gen) < 0.5).numpy().astype(np.float32)
            b["labels"] = np.stack([click, conv], axis=1).astype(np.float32)

    w = Writer()
    w.add("cfg.preset", preset)
    w.add("cfg.activation", act)
    w.add("cfg.pooling", pooling)
    w.add("cfg.dense_transform", "log1p")
    w.add("cfg.loss", "sum" if preset == "lr" else "mean")
    u32 = lambda *v: np.array(v, np.uint32)  # noqa: E731
    w.add("cfg.n_dense", u32(N_DENSE))
    w.add("cfg.n_slots", u32(N_SLOTS))
    w.add("cfg.emb_dim", u32(dim))
    w.add("cfg.row_dim", u32(rdim))
    w.add("cfg.hidden", u32(*(HIDDEN if preset != "lr" else ())))
    w.add("cfg.bottom", u32(*(BOTTOM if preset == "dlrm" else ())))
    if preset == "dcnv2":
        w.add("cfg.cross", u32(N_CROSS, rank))     # cross layers, rank (0 = full)
    pools = [2 if m == "mean" else 1 for m in MH_POOL] if multihot else None
    if preset == "din":
        acts = {"none": 0, "relu": 1, "sigmoid": 2}
        w.add("cfg.din", u32(DIN_Q, DIN_K, acts[DIN_ATT_ACT], *DIN_ATT))
        pools = pools or [1] * N_SLOTS
        pools[DIN_K] = 3                          # none: the sequence
        assert pools[DIN_Q] == 1, "the query slot must pool by sum"
    if preset in ("mmoe", "mmoe_mtl"):
        acts = {"none": 0, "relu": 1, "sigmoid": 2}
        w.add("cfg.mmoe", u32(MMOE_E, MMOE_T, acts[MMOE_ACT], *MMOE_SIZES))
    if pools:
        w.add("cfg.slot_pooling", u32(*pools))
    if preset in HEADS:
        w.add("cfg.heads", np.array(MTL_WEIGHTS, np.float64))
    w.add("cfg.minibatch", u32(MB))
    w.add("cfg.steps", u32(STEPS))
    for tag, o in (("sparse", sp), ("dense", dn)):
        w.add("opt.%s.name" % tag, o["name"])
        w.add("opt.%s.params" % tag, np.array([o[f] for f in OPT_FIELDS], np.float64))

    names = [n for n, _ in model.named_parameters()]
    for n, p in model.named_parameters():
        w.add("init.dense." + n, f32(p))
    keys = np.array([key_of(s, l) for s in range(N_SLOTS) for l in range(VOCAB[s])], np.uint64)
    w.add("init.rows.keys", keys)
    w.add("init.rows.values", np.concatenate([f32(t) for t in tables]))
    for i, b in enumerate(batches):
        bk = np.array([key_of(s, l) for s, l in zip(b["slots"], b["local"])], np.uint64)
        w.add("batch.%d.row_off" % i, b["row_off"])
        w.add("batch.%d.keys" % i, bk)
        w.add("batch.%d.slots" % i, b["slots"])
        w.add("batch.%d.vals" % i, b["vals"])
        w.add("batch.%d.dense" % i, b["dense"])
        w.add("batch.%d.labels" % i, b["labels"])

    # dense optimizer: torch.optim on the module, and `update` on a copy
    topt = torch_optim(dn, list(model.parameters())) if dn["name"] != "ftrl" else None
    mirror = {n: p.detach().clone() for n, p in model.named_parameters()}
    mstate = {n: state_init(dn, p) for n, p in mirror.items()}
    rstate = [[state_init(sp, tables[s][l]) for l in range(VOCAB[s])] for s in range(N_SLOTS)]
    # lr trains on the summed loss (ops/train/trainer.h "Loss scale"), the
    # neural presets on the mean over the minibatch
    reduction = "sum" if preset == "lr" else "mean"
    lossf = torch.nn.BCEWithLogitsLoss(reduction=reduction)

    for t in range(1, STEPS + 1):
        b = batches[t - 1]
        tabs = [tb.clone().requires_grad_(True) for tb in tables]
        model.zero_grad()
        if multihot:
            pooled, wide = pool_bag(preset, tabs, dim, MH_POOL, MB, b["row_off"],
                                    b["slots"], b["local"])
        else:
            pooled, wide = models.pool(preset, tabs, dim, pooling == "mean", MB,
                                       torch.from_numpy(b["row_off"].astype(np.int64)),
                                       torch.from_numpy(b["slots"].astype(np.int64)),
                                       torch.from_numpy(b["local"]),
                                       torch.from_numpy(b["vals"]))
        if preset == "din":
            K, ex = models.sequence(tabs, DIN_K, dim, MB,
                                    torch.from_numpy(b["row_off"].astype(np.int64)),
                                    torch.from_numpy(b["slots"].astype(np.int64)),
                                    torch.from_numpy(b["local"]),
                                    torch.from_numpy(b["vals"]))
            logit = model(pooled, K, ex, torch.from_numpy(b["dense"]))
        elif preset in ("mmoe", "mmoe_mtl"):
            logit = model(pooled, torch.from_numpy(b["dense"]))
        else:
            logit = model(pooled, wide, torch.from_numpy(b["dense"]))
        if preset in HEADS:
            y = torch.from_numpy(b["labels"])
            loss = sum(wh * lossf(logit[:, h], y[:, h]) for h, wh in enumerate(MTL_WEIGHTS))
        else:
            loss = lossf(logit, torch.from_numpy(b["labels"]))
        loss.backward()
        touched = sorted(set(zip(b["slots"].tolist(), b["local"].tolist())))
        if t == 1:
            w.add("step1.logits", f32(logit))
            w.add("step1.loss", np.array([loss.item()], np.float32))
            for n, p in model.named_parameters():
                w.add("step1.grad." + n, f32(p.grad))
            w.add("step1.grad_rows.keys", np.array([key_of(s, l) for s, l in touched], np.uint64))
            w.add("step1.grad_rows.values", np.stack([f32(tabs[s].grad[l]) for s, l in touched]))
        # dense update (both ways), then touched rows
        grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
        if topt is not None:
            topt.step()
        for n in names:
            update(dn, mirror[n], mstate[n], grads[n], t)
        for s, l in touched:
            update(sp, tables[s][l], rstate[s][l], tabs[s].grad[l].detach(), t)

    for n, p in model.named_parameters():
        err = (p.detach() - mirror[n]).abs().max().item()
        assert err <= 1e-5 + 1e-5 * p.detach().abs().max().item(), \
            "%s %s: optim.h formula differs from torch.optim on %s by %g" % (preset, oname, n, err)
        w.add("final.dense." + n, f32(p))
    w.add("final.rows.keys", keys)
    w.add("final.rows.values", np.concatenate([f32(t) for t in tables]))
    return w


def main():
    torch.set_num_threads(1)
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "fixtures")
    only = sys.argv[2] if len(sys.argv) > 2 else None   # e.g. "multihot" or "dcnv2"
    os.makedirs(out, exist_ok=True)
    total = 0
    for pi, preset in enumerate(PRESETS):
        for oi, oname in enumerate(OPTIMS):
            if only and only not in (oname, preset):
                continue
            path = os.path.join(out, "%s_%s.bin" % (preset, oname))
            make_fixture(preset, oname, 1000 + 10 * pi + oi).save(path)
            total += os.path.getsize(path)
            print("%-28s %7d bytes" % (os.path.basename(path), os.path.getsize(path)))
    print("total %d bytes (torch %s)" % (total, torch.__version__))


if __name__ == "__main__":
    main()
