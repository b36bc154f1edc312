-- emb_dim 0, two admission rules, a negative ftrl beta, a bad pooling.
return st.job {
  name = "bad-wdl",
  data = { train = st.data.criteo { path = "tests/lua/data/train-*.tsv" } },
  model = st.model.wdl {
    emb_dim = 0,
    pooling = "max",
    admission = { min_count = 2, probability = 0.5 },
    optimizer = st.optim.ftrl { beta = -1 },
  },
}
