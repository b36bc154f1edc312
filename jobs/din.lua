-- din.lua — DIN (Zhou et al., "Deep Interest Network for Click-Through
-- Rate Prediction", KDD 2018): the candidate's embedding attends over the
-- behaviour history (st.layer.attention, §4.3's activation unit), and the
-- attention's output joins the other pooled fields and the dense features
-- in the MLP. The history column is a list field kept as a sequence
-- (pooling = "none"); st.model.din builds the graph (stdlib/strata/
-- presets.lua; jobs/din_graph.lua writes the same graph out by hand), and
-- jobs/din_sum.lua is the same model with the history sum-pooled instead
-- (the comparison of docs/benchmarks.md).
--
-- Data: strata gen's synthetic Criteo-like rows with a behaviour history
-- whose match with the candidate drives the click (gen.h, --history):
--   strata gen --rows 1000000 --eval-rows 100000 --vocab 100000 --history 20 --out data/din
--   strata run jobs/din.lua
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
  name = "din",
  seed = 42,
  data = {
    train = st.data.csv { path = "data/din/train-*.tsv", sep = "\t", header = false,
                          columns = columns(hist) },
    eval = st.data.csv { path = "data/din/eval.tsv", sep = "\t", header = false,
                         columns = columns(hist) },
  },
  model = st.model.din {
    emb_dim = 8,
    query = "cand", keys = "hist",   -- the candidate attends over the history
    att_hidden = { 36 },             -- the attention's MLP (then 1 score per key)
    hidden = { 200, 80 },            -- the MLP over concat(embeddings, attention, dense)
    optimizer = st.optim.adam { lr = 0.002 },
  },
  stages = {
    read = { threads = 1, batch_size = 4096 },
    train = { workers = 1, minibatch = 512 },
  },
  sync = st.sync.async {},
}
