-- mmoe.lua — two tasks, click and conversion, learned by one MMoE model
-- (Ma et al. 2018): st.model.mmoe builds shared experts, one softmax gate
-- and one tower per label, and a head per label (docs/models.md, "MMoE").
-- Its data plants a conversion on clicked rows (strata gen --labels 2,
-- docs/models.md "Several labels"), so the two labels are correlated but
-- not the same task.
--
--   strata run jobs/mmoe.lua     (generates data/mtl first, as jobs/mtl.lua)
local st = require "strata"

local function columns()
  local c = { { "label", name = "click" }, { "label", name = "conversion" } }
  for _ = 1, 13 do c[#c + 1] = "dense" end
  for _ = 1, 26 do c[#c + 1] = "cat" end
  return c
end

return st.job {
  name = "mmoe",
  seed = 42,
  data = {
    train = st.data.csv { path = "data/mtl/train-*.tsv", sep = "\t", header = false,
                          columns = columns() },
    eval = st.data.csv { path = "data/mtl/eval.tsv", sep = "\t", header = false,
                         columns = columns() },
    generate = st.gen { dir = "data/mtl", rows = 200000, eval_rows = 50000, vocab = 100000,
                        seed = 7, labels = 2 },
  },
  model = st.model.mmoe {
    emb_dim = 8,
    experts = 4, expert_hidden = { 64, 32 },   -- shared by the tasks
    hidden = { 16 },                           -- each task's tower
    -- labels = { "click", "conversion" },     -- the default: every label, in order
    -- weights = { 1, 1 },                     -- each head's loss weight
    optimizer = st.optim.adam { lr = 0.002 },
  },
  stages = {
    read = { threads = 1, batch_size = 4096 },
    train = { workers = 1, minibatch = 512 },
  },
  sync = st.sync.async {},
}
