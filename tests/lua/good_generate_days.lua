-- data.generate with days: day-000.tsv .. day-006.tsv under generate.dir.
return st.job {
  name = "gen-days",
  data = {
    train = st.data.criteo { path = "tests/lua/gen-days-absent/day-*.tsv" },
    eval = st.data.criteo { path = "tests/lua/gen-days-absent/eval.tsv" },
    generate = st.gen {
      dir = "tests/lua/gen-days-absent",
      rows = 7000,
      days = 7,
      drift = 0.2,
    },
  },
}
