-- Sources under data.generate.dir need not exist yet.
return st.job {
  name = "gen",
  data = {
    train = st.data.criteo { path = "tests/lua/gen-absent/train-*.tsv" },
    eval = st.data.criteo { path = "./tests/lua/gen-absent/eval.tsv" },
    generate = st.gen { dir = "tests/lua/gen-absent", rows = 1000, files = 2 },
  },
}
