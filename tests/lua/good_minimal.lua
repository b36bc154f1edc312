-- The smallest valid job: everything else takes its default.
return st.job {
  name = "minimal",
  data = { train = st.data.criteo { path = "tests/lua/data/train-*.tsv" } },
}
