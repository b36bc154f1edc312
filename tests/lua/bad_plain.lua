-- Plain tables instead of constructors: names are checked the same way.
return st.job {
  name = "plain",
  data = {
    train = { format = "parquet", path = "tests/lua/data/train-*.tsv" },
    eval = { format = "criteo2", path = "tests/lua/data/eval.tsv" },
  },
  model = { type = "lr", optimizer = { type = "adagrd", lr = 0.1 } },
  sync = "hop",
}
