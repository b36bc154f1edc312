-- phases, stragglers and st.sync.auto together (test_lang).
return st.job {
  name = "ph",
  data = { train = st.data.criteo { path = "tests/lua/data/train-*.tsv" } },
  stages = { train = { workers = 3 } },
  stragglers = st.stragglers { worker = 2, slowdown = 3.0, steps = 50 },
  sync = st.sync.auto { async = st.sync.gba { global_batch = 1024, tolerance = 2 }, threshold = 2 },
  phases = {
    { name = "sync", rows = 400, sync = st.sync.allreduce {} },
    { name = "gba", data = st.data.criteo { path = "tests/lua/data/train-*.tsv" } },
  },
}
