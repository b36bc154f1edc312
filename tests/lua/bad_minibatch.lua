return st.job {
  name = "minibatch",
  data = { train = st.data.criteo { path = "tests/lua/data/train-*.tsv" } },
  stages = {
    read = { batch_size = 256 },
    train = {
      workers = 2,
      minibatch = 512,
    },
  },
}
