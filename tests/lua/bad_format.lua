return st.job {
  name = "format",
  data = {
    train = st.data.criteo2 { path = "tests/lua/data/train-*.tsv" },
  },
}
