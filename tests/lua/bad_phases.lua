-- Errors of phases, stragglers and st.sync.auto (test_lang pins them).
return st.job {
  name = "ph",
  data = { train = st.data.criteo { path = "tests/lua/data/train-*.tsv" } },
  stages = { train = { workers = 3 } },
  stragglers = st.stragglers { worker = 3, slowdown = 0.5 },
  sync = st.sync.auto { sync = st.sync.auto {}, async = "asynch", threshold = 1 },
  phases = {
    { name = "sync", rows = 0, sync = st.sync.allreduce {} },
    { name = "sync", sync = "asyn" },
  },
}
