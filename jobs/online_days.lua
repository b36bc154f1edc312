-- Online learning over synthetic "days" (kstep-adam-terabyte-training.md,
-- Section 5; persia-hybrid-training.md, Section 4.2.4): every day is first
-- scored by the model trained on all earlier days (progressive validation),
-- then trained on; after each day a delta export ships the rows that changed
-- to serving and a checkpoint is written. The generator's hidden model
-- drifts from day to day, so the per-day AUC table shows how well the model
-- keeps up. Serve the exports with `strata predict out/online/export ...`.
--   strata run jobs/online_days.lua
--   strata run jobs/online_days.lua --resume     (after a crash)
local st = require "strata"

local DAYS = 8
local days = {}
for day = 0, DAYS - 1 do
  days[#days + 1] = {
    name = string.format("day-%03d", day),
    data = st.data.criteo { path = string.format("data/online/day-%03d.tsv", day) },
    validate = true,
  }
end

return st.job {
  name = "online_days",
  seed = 3,
  data = {
    train = st.data.criteo { path = "data/online/day-000.tsv" },
    generate = st.gen { dir = "data/online", rows = DAYS * 100000, eval_rows = 0,
                        days = DAYS, drift = 0.3, vocab = 100000, seed = 11 },
  },
  model = st.model.dnn { emb_dim = 8, hidden = { 64, 32 },
                         optimizer = st.optim.adam { lr = 0.003 } },
  stages = {
    read = { batch_size = 4096 },
    train = { workers = 1, minibatch = 256 },
  },
  sync = st.sync.allreduce {},
  phases = days,
  export = { dir = "out/online/export", delta = true },
  checkpoint = { dir = "out/online/ckpt", keep = 2 },
  output = { metrics = "out/online/metrics.jsonl" },
}
