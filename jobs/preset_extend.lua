-- preset_extend.lua — a preset's layers, extended: the dnn preset's graph
-- (st.presets.dnn returns { layers = ..., output = ... }, the fields of
-- st.model.graph) with a factorization-machine term added to its logit,
-- i.e. DeepFM without the wide part (docs/models.md, "The presets as
-- graphs"). Same synthetic data as jobs/synthetic_dnn.lua.
--
--   strata plan jobs/preset_extend.lua      # the layers, with parameters and FLOPs
--   strata run jobs/preset_extend.lua
local st = require "strata"

-- The layers of st.model.dnn { hidden = { 400, 400 } }: x (dense features),
-- emb (the embeddings), x0 = concat(emb, x), mlp, out (the 1-wide logit).
local g = st.presets.dnn { hidden = { 400, 400 }, activation = "relu" }

-- Two more layers below them: the FM term over the embeddings, and the sum.
-- Every layer reads only layers above it; the output is the new sum.
table.insert(g.layers, { "fm", st.layer.fm { "emb" } })
table.insert(g.layers, { "logit", st.layer.add { "out", "fm" } })

return st.job {
  name = "preset_extend",
  seed = 42,
  data = {
    train = st.data.criteo { path = "data/synthetic/train-*.tsv" },
    eval = st.data.criteo { path = "data/synthetic/eval.tsv" },
    generate = st.gen { dir = "data/synthetic", rows = 1000000, eval_rows = 100000,
                        files = 2, zipf = 1.1, vocab = 100000, seed = 7 },
  },
  model = st.model.graph {
    emb_dim = 16,      -- fm needs one dimension for every slot
    layers = g.layers,
    output = "logit",
    optimizer = st.optim.adam { lr = 0.003 },
  },
  stages = {
    read = { threads = 1, queue = 4, batch_size = 8192 },
    train = { workers = 1, queue = 2, minibatch = 1024 },
  },
  sync = st.sync.async {},
}
