-- din_sum.lua — jobs/din.lua without attention: the same data, embeddings,
-- MLP and optimizer, but the behaviour history is sum-pooled into the
-- embed layer like any list field (pooling = "sum") — the baseline DIN is
-- compared with in docs/benchmarks.md ("DIN's attention on a planted
-- target signal").
--   strata gen --rows 1000000 --eval-rows 100000 --vocab 100000 --history 20 --out data/din
--   strata run jobs/din_sum.lua
local st = require "strata"

local function columns(history)
  local c = { "label" }
  for _ = 1, 13 do c[#c + 1] = "dense" end
  for _ = 1, 26 do c[#c + 1] = "cat" end
  c[#c + 1] = { "cat", name = "cand" }
  c[#c + 1] = history
  return c
end
local hist = { "cat", name = "hist", list = "^", max_len = 50, pooling = "sum" }

return st.job {
  name = "din_sum",
  seed = 42,
  data = {
    train = st.data.csv { path = "data/din/train-*.tsv", sep = "\t", header = false,
                          columns = columns(hist) },
    eval = st.data.csv { path = "data/din/eval.tsv", sep = "\t", header = false,
                         columns = columns(hist) },
  },
  model = st.model.graph {
    emb_dim = 8,
    layers = {
      { "e",   st.layer.embed {} },               -- every field, the history summed
      { "x",   st.layer.dense {} },
      { "h",   st.layer.concat { "e", "x" } },
      { "mlp", st.layer.mlp { "h", sizes = { 200, 80 } } },
      { "out", st.layer.linear { "mlp" } },
    },
    output = "out",
    optimizer = st.optim.adam { lr = 0.002 },
  },
  stages = {
    read = { threads = 1, batch_size = 4096 },
    train = { workers = 1, minibatch = 512 },
  },
  sync = st.sync.async {},
}
