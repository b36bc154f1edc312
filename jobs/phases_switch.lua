-- Two phases on one model: synchronous allreduce first, then asynchronous
-- training (the GBA paper's "switch between synchronous and asynchronous
-- training without re-tuning", docs/job-language.md "phases"). Worker 1 is
-- a straggler three times slower than the others, so the async phase shows
-- higher throughput; each phase prints its own line and is evaluated.
--   strata run jobs/phases_switch.lua
local st = require "strata"
return st.job {
  name = "phases_switch",
  data = {
    train = st.data.criteo { path = "data/phases/train-*.tsv" },
    eval = st.data.criteo { path = "data/phases/eval.tsv" },
    generate = st.gen { dir = "data/phases", rows = 200000, eval_rows = 30000,
                        files = 2, vocab = 100000, seed = 7 },
  },
  model = st.model.dnn { emb_dim = 8, hidden = { 64, 32 },
                         optimizer = st.optim.adam { lr = 0.003 } },
  stages = {
    read = { batch_size = 4096 },
    train = { workers = 2, minibatch = 256 },
  },
  stragglers = st.stragglers { worker = 1, slowdown = 3.0 },
  phases = {
    { name = "sync", rows = 100000, sync = st.sync.allreduce {} },
    { name = "async", sync = st.sync.async {} },
  },
  output = { metrics = "out/phases_switch/metrics.jsonl" },
}
