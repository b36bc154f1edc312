-- Phases allreduce -> async on generated data (tests/e2e/cli.sh sets the
-- data folder): both phases run on one model and print a line each.
local st = require "strata"
return st.job {
  name = "gen_phases",
  data = {
    train = st.data.criteo { path = "UNSET/train-*.tsv" },
    eval = st.data.criteo { path = "UNSET/eval.tsv" },
    generate = st.gen { dir = "UNSET", rows = 200000, eval_rows = 30000, files = 2,
                        zipf = 1.1, vocab = 100000, seed = 3 },
  },
  model = st.model.dnn { emb_dim = 8, hidden = { 64, 32 },
                         optimizer = st.optim.adam { lr = 0.003 } },
  stages = {
    read = { threads = 1, queue = 4, batch_size = 4096 },
    train = { workers = 2, minibatch = 256 },
  },
  stragglers = st.stragglers { worker = 1, slowdown = 2.0 },
  phases = {
    { name = "warmup", rows = 50000, sync = st.sync.allreduce {} },
    { name = "rest", sync = st.sync.async {} },
  },
}
