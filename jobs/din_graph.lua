-- din_graph.lua — jobs/din.lua with DIN's graph written out layer by layer
-- instead of st.model.din: the same layers in the same order, so the same
-- model bit for bit (tests/e2e/din.sh trains both and compares the digests).
-- Start here to change DIN's graph (docs/models.md, "DIN: attention over a
-- behaviour sequence").
--
-- Data: as jobs/din.lua (strata gen --history ... --out data/din).
local st = require "strata"

-- label, I1..I13, C1..C26, then the candidate's category and the history.
local function columns(history)
  local c = { "label" }
  for _ = 1, 13 do c[#c + 1] = "dense" end
  for _ = 1, 26 do c[#c + 1] = "cat" end
  c[#c + 1] = { "cat", name = "cand" }
  c[#c + 1] = history
  return c
end
local hist = { "cat", name = "hist", list = "^", max_len = 50, pooling = "none" }

return st.job {
  name = "din_graph",
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
      { "e",   st.layer.embed {} },               -- every field but the history
      { "din", st.layer.attention { query = "cand", keys = "hist", hidden = { 36 },
                                    activation = "relu" } },
      { "x",   st.layer.dense {} },
      { "h",   st.layer.concat { "e", "din", "x" } },
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
