"""models.py — PyTorch reference of strata's CTR model presets (ops/nn/model.h).

The dense part of every preset is an nn.Module whose state_dict names and
shapes are exactly the dense tensor names of ops/nn/model.h:

  lr:     logit = wide + dense(x)                                   dense.weight [1xD], dense.bias [1]
  dnn:    logit = out(MLP(concat(e_1..e_S, x)))                     mlp.<k>.weight/bias, out.weight/bias
  wdl:    logit = out(MLP(concat(e, x))) + wide + dense(x)
  deepfm: logit = out(MLP(concat(e, x))) + FM(e_1..e_S) + wide + dense(x)
  dlrm:   z0 = bot(x) (every bottom layer is followed by the activation, as in DLRM);
          logit = out(MLP(concat(z0, dot(z0, e_1..e_S))))           bot.<k>..., mlp.<k>..., out...
  dcnv2:  x_0 = concat(e, x); x_{l+1} = x_0 * (W_l x_l + b_l) + x_l  (DCN V2, Wang et al.
          2020, §3: the stacked structure, cross layers then the deep part);
          logit = out(MLP(x_L))                                      cross.<l>.weight/bias
          (full rank) or cross.<l>.v.weight [r x d], cross.<l>.u.weight/bias (W = U V,
          low rank r), mlp.<k>..., out...
  din:    (a layer graph, jobs/din.lua) logit = out(MLP(concat(e_s for s != k_slot,
          att(q, K), x))) with att = DIN's activation unit over the sequence slot
          k_slot, q = e_{q_slot} (Zhou et al. 2018, §4.3; class DIN)   din.att.<l>...
  mmoe:   (a layer graph, jobs/mmoe_graph.lua; class MMoEGraph) o = MMoE(concat(e, x))
          with E experts and T gates (Ma et al. 2018, §4.2); logit = Σ_t
          out<t>(tower<t>(o[:, t·h : (t+1)·h]))                     m.expert.<e>.<k>...,
          m.gate.<t>..., tower<t>.<k>..., out<t>...

x = log1p(max(x_raw, 0)) unless dense_transform == "none"; e_s is the pooled
(sum or mean, weighted by the key values) embedding of slot s; wide is the
sum over an example's keys of value * (last column of the key's row). Hidden
layers use the activation, the output layer is linear to one logit, and the
loss is BCEWithLogits averaged over the minibatch (summed for lr, as
ops/train/trainer.h says).

Sparse rows live outside the module: `pool` takes the pooled-embedding
inputs from per-slot row tables (one small table per slot, indexed by local
ids; the C side keys them as slot << 32 | local_id). Each row has
row_dim(preset, dim) floats: the embedding and, for presets with a wide part,
one wide weight in the last column.
"""
import math

import torch
from torch import nn

HAS_WIDE = {"lr": True, "dnn": False, "wdl": True, "deepfm": True, "dlrm": False,
            "dcnv2": False, "din": False, "mmoe": False, "mtl": False, "mmoe_mtl": False}
HAS_EMB = {"lr": False, "dnn": True, "wdl": True, "deepfm": True, "dlrm": True,
           "dcnv2": True, "din": True, "mmoe": True, "mtl": True, "mmoe_mtl": True}


def row_dim(preset, dim):
    """Floats per sparse row: the embedding (none for lr) + the wide weight."""
    return (dim if HAS_EMB[preset] else 0) + (1 if HAS_WIDE[preset] else 0)


def act_fn(name):
    return {"relu": torch.relu, "sigmoid": torch.sigmoid, "none": lambda t: t}[name]


class LowRank(nn.Module):
    """W = U V of a low-rank cross layer: v = Linear(d, r, bias=False), then
    u = Linear(r, d) whose bias is the layer's b (DCN V2 §3, eq. 2)."""

    def __init__(self, d, rank):
        super().__init__()
        self.v = nn.Linear(d, rank, bias=False)
        self.u = nn.Linear(rank, d)

    def forward(self, x):
        return self.u(self.v(x))


class CTRModel(nn.Module):
    """Dense part of a preset. forward(pooled [n,S,d] or None, wide [n] or
    None, x_raw [n,D]) -> logits [n]."""

    def __init__(self, preset, n_dense, n_slots, dim, hidden, bottom=(),
                 activation="relu", dense_transform="log1p", n_cross=0, cross_rank=0):
        super().__init__()
        self.preset, self.n_dense, self.n_slots, self.dim = preset, n_dense, n_slots, dim
        self.act = act_fn(activation)
        self.dense_transform = dense_transform
        if HAS_WIDE[preset]:
            self.dense = nn.Linear(n_dense, 1)
        if preset == "lr":
            return
        if preset == "dlrm":
            assert bottom and bottom[-1] == dim, "dlrm: last bottom size = emb_dim"
            self.bot = nn.ModuleList()
            prev = n_dense
            for h in bottom:
                self.bot.append(nn.Linear(prev, h))
                prev = h
            F = n_slots + 1
            prev = dim + F * (F - 1) // 2
            rows, cols = torch.tril_indices(F, F, offset=-1)
            # (1,0), (2,0), (2,1), (3,0), ... as nn.h's st_dot_forward
            self.register_buffer("tri_a", rows, persistent=False)
            self.register_buffer("tri_b", cols, persistent=False)
        else:
            prev = n_slots * dim + n_dense
        if preset == "dcnv2":
            # declared before the MLP: state_dict (and strata's tensor) order
            self.cross = nn.ModuleList(
                nn.Linear(prev, prev) if cross_rank == 0 else LowRank(prev, cross_rank)
                for _ in range(n_cross))
        self.mlp = nn.ModuleList()
        for h in hidden:
            self.mlp.append(nn.Linear(prev, h))
            prev = h
        self.out = nn.Linear(prev, 1)

    def transform(self, x_raw):
        if self.dense_transform == "none":
            return x_raw
        return torch.log1p(torch.clamp(x_raw, min=0.0))

    def forward(self, pooled, wide, x_raw):
        x = self.transform(x_raw)
        n = x.shape[0]
        logit = torch.zeros(n, dtype=x.dtype)
        if self.preset == "lr":
            return wide + self.dense(x).squeeze(1)
        if self.preset == "dlrm":
            z0 = x
            for lin in self.bot:
                z0 = self.act(lin(z0))
            Z = torch.cat([z0.unsqueeze(1), pooled], dim=1)          # [n, F, d]
            G = torch.bmm(Z, Z.transpose(1, 2))                       # [n, F, F]
            h = torch.cat([z0, G[:, self.tri_a, self.tri_b]], dim=1)
        else:
            h = torch.cat([pooled.reshape(n, -1), x], dim=1)
        if self.preset == "dcnv2":
            x0 = h
            for c in self.cross:
                h = x0 * c(h) + h
        for lin in self.mlp:
            h = self.act(lin(h))
        logit = self.out(h).squeeze(1)
        if self.preset in ("wdl", "deepfm"):
            logit = logit + wide + self.dense(x).squeeze(1)
        if self.preset == "deepfm":
            s = pooled.sum(dim=1)
            logit = logit + 0.5 * (s * s - (pooled * pooled).sum(dim=1)).sum(dim=1)
        return logit


class Attention(nn.Module):
    """DIN's local activation unit (Zhou et al., KDD 2018, §4.3), as
    ops/nn/attention.h: w_t = MLP([k_t, q, k_t - q, k_t * q]) with hidden
    layers and the activation, then a linear layer to 1; out = sum_t w_t k_t
    (no softmax). att = ModuleList of the Linears: att.<l>.weight/bias."""

    def __init__(self, dim, hidden, activation):
        super().__init__()
        self.act = act_fn(activation)
        self.att = nn.ModuleList()
        prev = 4 * dim
        for h in list(hidden) + [1]:
            self.att.append(nn.Linear(prev, h))
            prev = h

    def forward(self, q, K, ex):
        """q [n, d] queries, K [P, d] the keys of every example in order,
        ex [P] the example of each key -> [n, d]."""
        Q = q[ex]
        h = torch.cat([K, Q, K - Q, K * Q], dim=1)
        for i, lin in enumerate(self.att):
            h = lin(h)
            if i + 1 < len(self.att):
                h = self.act(h)
        return torch.zeros_like(q).index_add(0, ex, h * K)


class DIN(nn.Module):
    """jobs/din.lua's graph: logit = out(MLP(concat(e (every slot but the
    sequence, in slot order), din(q = e_{q_slot}, keys of k_slot), x)))."""

    def __init__(self, n_dense, n_slots, dim, hidden, att_hidden, activation,
                 att_activation, q_slot, k_slot, dense_transform="log1p"):
        super().__init__()
        self.q_slot, self.k_slot = q_slot, k_slot
        self.act = act_fn(activation)
        self.dense_transform = dense_transform
        self.din = Attention(dim, att_hidden, att_activation)   # first: tensor order
        self.mlp = nn.ModuleList()
        prev = (n_slots - 1) * dim + dim + n_dense
        for h in hidden:
            self.mlp.append(nn.Linear(prev, h))
            prev = h
        self.out = nn.Linear(prev, 1)

    def forward(self, pooled, K, ex, x_raw):
        """pooled [n, S, d] (the sequence slot's entry is ignored; the
        query slot's must be its sum pooling), K [P, d] and ex [P] the
        sequence's keys (sequence()), x_raw [n, D] -> logits [n]."""
        x = x_raw if self.dense_transform == "none" else torch.log1p(torch.clamp(x_raw, min=0.0))
        n, S = pooled.shape[0], pooled.shape[1]
        keep = [s for s in range(S) if s != self.k_slot]
        a = self.din(pooled[:, self.q_slot, :], K, ex)
        h = torch.cat([pooled[:, keep, :].reshape(n, -1), a, x], dim=1)
        for lin in self.mlp:
            h = self.act(lin(h))
        return self.out(h).squeeze(1)


class MMoE(nn.Module):
    """Multi-gate mixture of experts (Ma et al., KDD 2018, §4.2), as
    ops/nn/mmoe.h: E expert MLPs (every layer followed by the activation)
    and T softmax gates over the same input; the output is the T gated sums
    side by side. expert = ModuleList of ModuleLists declared before gate,
    so the state_dict order is mmoe.h's packed order."""

    def __init__(self, d_in, n_experts, sizes, n_tasks, activation):
        super().__init__()
        self.act = act_fn(activation)
        self.expert = nn.ModuleList()
        for _ in range(n_experts):
            layers, prev = nn.ModuleList(), d_in
            for h in sizes:
                layers.append(nn.Linear(prev, h))
                prev = h
            self.expert.append(layers)
        self.gate = nn.ModuleList(nn.Linear(d_in, n_experts) for _ in range(n_tasks))

    def forward(self, x):
        fs = []
        for layers in self.expert:
            h = x
            for lin in layers:
                h = self.act(lin(h))
            fs.append(h)
        F = torch.stack(fs, dim=1)                                   # [n, E, h]
        return torch.cat([torch.einsum("ne,neh->nh", torch.softmax(g(x), dim=1), F)
                          for g in self.gate], dim=1)


class MMoEGraph(nn.Module):
    """jobs/mmoe_graph.lua's graph with one head: m = MMoE(concat(e, x)),
    then per task t a tower (MLP of `hidden` with the activation) over
    task t's columns and a linear layer to 1; the logit is the towers' sum
    (both gates get a gradient from one label). heads=True: no sum, one
    logit per task -> [n, T], task t the head of label t (st.model.mmoe's
    graph, fixtures mmoe_mtl_*)."""

    def __init__(self, n_dense, n_slots, dim, hidden, activation, n_experts, expert_sizes,
                 expert_activation, n_tasks, dense_transform="log1p", heads=False):
        super().__init__()
        self.heads = heads
        self.act = act_fn(activation)
        self.dense_transform = dense_transform
        self.h = expert_sizes[-1]
        self.n_tasks = n_tasks
        self.m = MMoE(n_slots * dim + n_dense, n_experts, expert_sizes, n_tasks,
                      expert_activation)
        for t in range(n_tasks):   # tower0, out0, tower1, out1: the graph's order
            tower, prev = nn.ModuleList(), self.h
            for h in hidden:
                tower.append(nn.Linear(prev, h))
                prev = h
            setattr(self, "tower%d" % t, tower)
            setattr(self, "out%d" % t, nn.Linear(prev, 1))

    def forward(self, pooled, x_raw):
        x = x_raw if self.dense_transform == "none" else torch.log1p(torch.clamp(x_raw, min=0.0))
        n = x.shape[0]
        o = self.m(torch.cat([pooled.reshape(n, -1), x], dim=1))
        logit = None
        for t in range(self.n_tasks):
            z = o[:, t * self.h:(t + 1) * self.h]
            for lin in getattr(self, "tower%d" % t):
                z = self.act(lin(z))
            z = getattr(self, "out%d" % t)(z)
            if self.heads:
                logit = z if logit is None else torch.cat([logit, z], dim=1)
            else:
                z = z.squeeze(1)
                logit = z if logit is None else logit + z
        return logit


def sequence(tables, k_slot, dim, n, row_off, slots, local, vals):
    """The keys of slot k_slot in CSR order: K [P, dim] = val * row, and
    ex [P] the example of each (torch tensors in, as pool's)."""
    counts = row_off[1:] - row_off[:-1]
    ex = torch.repeat_interleave(torch.arange(n), counts)
    sel = slots == k_slot
    return tables[k_slot][local[sel]][:, :dim] * vals[sel].unsqueeze(1), ex[sel]


def pool(preset, tables, dim, mean, n, row_off, slots, local, vals):
    """Pooled embeddings [n, S, dim] (None for lr) and wide [n] (None when
    the preset has none) from per-slot tables[s] [vocab_s, row_dim].
    row_off [n+1], slots/local/vals per key (torch tensors)."""
    S = len(tables)
    counts = row_off[1:] - row_off[:-1]
    ex = torch.repeat_interleave(torch.arange(n), counts)
    pooled = torch.zeros(n, S, dim) if HAS_EMB[preset] else None
    wide = torch.zeros(n) if HAS_WIDE[preset] else None
    cnt = torch.zeros(n, S)
    for s in range(S):
        sel = slots == s
        if not bool(sel.any()):
            continue
        rows = tables[s][local[sel]] * vals[sel].unsqueeze(1)       # [k, row_dim]
        e = ex[sel]
        if pooled is not None:
            pooled[:, s, :] = pooled[:, s, :].index_add(0, e, rows[:, :dim])
        if wide is not None:
            wide = wide.index_add(0, e, rows[:, -1])
        cnt[:, s] = cnt[:, s].index_add(0, e, torch.ones(int(sel.sum())))
    if mean and pooled is not None:
        pooled = pooled / torch.clamp(cnt, min=1.0).unsqueeze(2)
    return pooled, wide


class MTL(nn.Module):
    """A two-head shared-bottom graph (jobs/mtl.lua's shape, docs/models.md
    "Several labels"): h = MLP(concat(e_1..e_S, x)) shared, then two linear
    heads ctr(h) and cvr(h), one logit per label -> logits [n, 2] (column 0
    click, 1 conversion). The loss is Σ_h w_h · BCEWithLogits_mean(z_h, y_h)
    (make_fixtures.py, MTL_WEIGHTS)."""

    def __init__(self, n_dense, n_slots, dim, hidden, activation, dense_transform="log1p"):
        super().__init__()
        self.act = act_fn(activation)
        self.dense_transform = dense_transform
        self.mlp = nn.ModuleList()
        prev = n_slots * dim + n_dense
        for h in hidden:
            self.mlp.append(nn.Linear(prev, h))
            prev = h
        self.ctr = nn.Linear(prev, 1)
        self.cvr = nn.Linear(prev, 1)

    def forward(self, pooled, wide, x_raw):
        x = x_raw if self.dense_transform == "none" else torch.log1p(torch.clamp(x_raw, min=0.0))
        n = x.shape[0]
        h = torch.cat([pooled.reshape(n, -1), x], dim=1)
        for lin in self.mlp:
            h = self.act(lin(h))
        return torch.cat([self.ctr(h), self.cvr(h)], dim=1)


def init_dense(model, gen):
    """uniform(-1/sqrt(in), 1/sqrt(in)) weights, zero biases (model.h's
    st_model_create rule) — but with small nonzero biases so that their
    gradients and updates are exercised by the fixtures."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("weight"):
                b = 1.0 / math.sqrt(p.shape[1])
                p.copy_(torch.rand(p.shape, generator=gen) * 2 * b - b)
            else:
                p.copy_(torch.rand(p.shape, generator=gen) * 0.2 - 0.1)
