-- mtl.lua — multi-task learning: one shared-bottom model, two heads, two
-- labels (click and conversion), trained together with loss
-- logloss(click) + logloss(conversion) (docs/models.md, "Several labels").
--
-- Data: generated on first run (as `strata gen --labels 2 --rows 200000
-- --eval-rows 50000 --vocab 100000 --seed 7 --out data/mtl`): click,
-- conversion on clicked rows, 13 ints, 26 categorical values.
--
--   strata run jobs/mtl.lua
--
-- The progressive and eval metrics name both heads (auc, auc_conversion);
-- strata predict writes one score column per head.
local st = require "strata"

local function columns()
  local c = { { "label", name = "click" }, { "label", name = "conversion" } }
  for _ = 1, 13 do c[#c + 1] = "dense" end
  for _ = 1, 26 do c[#c + 1] = "cat" end
  return c
end

return st.job {
  name = "mtl",
  seed = 42,
  data = {
    train = st.data.csv { path = "data/mtl/train-*.tsv", sep = "\t", header = false,
                          columns = columns() },
    eval = st.data.csv { path = "data/mtl/eval.tsv", sep = "\t", header = false,
                         columns = columns() },
    generate = st.gen { dir = "data/mtl", rows = 200000, eval_rows = 50000, vocab = 100000,
                        seed = 7, labels = 2 },
  },
  model = st.model.graph {
    emb_dim = 8,
    layers = {
      { "e",      st.layer.embed {} },
      { "x",      st.layer.dense {} },
      { "h",      st.layer.concat { "e", "x" } },
      { "bottom", st.layer.mlp { "h", sizes = { 128, 64 } } },   -- shared
      { "ctr",    st.layer.linear { "bottom" } },                -- click head
      { "cvr_t",  st.layer.mlp { "bottom", sizes = { 32 } } },   -- conversion tower
      { "cvr",    st.layer.linear { "cvr_t" } },                 -- conversion head
    },
    heads = {
      { label = "click", output = "ctr" },
      { label = "conversion", output = "cvr", weight = 1.0 },
    },
    optimizer = st.optim.adam { lr = 0.002 },
  },
  stages = {
    read = { threads = 1, batch_size = 4096 },
    train = { workers = 1, minibatch = 512 },
  },
  sync = st.sync.async {},
}
