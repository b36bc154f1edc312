return st.job {
  seed = 1,
  data = {
    eval = st.data.libsvm { path = "tests/lua/data/eval.tsv", slots = 0 },
  },
  sync = { policy = "asynch" },
  model = { type = "dnnn" },
}
