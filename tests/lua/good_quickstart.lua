-- A valid job: the quickstart shape, with data that `generate` would make.
local st = require "strata"
return st.job {
  name = "quickstart",
  seed = 42,
  epochs = 1,
  data = {
    train = st.data.criteo { path = "tests/lua/data/train-*.tsv", on_bad_record = "skip", max_report = 5 },
    eval  = st.data.criteo { path = "tests/lua/data/eval.tsv" },
    generate = st.gen { dir = "tests/lua/gen", rows = 2000000, eval_rows = 200000,
                        files = 4, zipf = 1.1, vocab = 1000000, seed = 7 },
  },
  model = st.model.lr { optimizer = st.optim.adagrad { lr = 0.05, init_accum = 0.1 }, l2 = 0.0 },
  stages = {
    read  = { threads = 2, queue = 4, batch_size = 8192, near = "auto" },
    pull  = { threads = 1, queue = 4 },
    train = { workers = 1, queue = 2, minibatch = 512 },
    push  = { threads = 1, queue = 4 },
    dump  = { threads = 1, queue = 4 },
  },
  storage = { mem = "2GiB" },
  sync = st.sync.async {},
  output = { dir = "out/quickstart", metrics = "out/quickstart/metrics.jsonl", progress = 1.0 },
}
