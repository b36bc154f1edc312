-- Two labels, one head per label (docs/models.md, "Several labels"): the
-- csv names its label columns, the graph declares a head on each.
return st.job {
  name = "heads",
  data = {
    train = st.data.csv { path = "tests/lua/data/two_labels.csv",
                          columns = { { "label", name = "click" }, { "label", name = "conversion" },
                                      "dense", "cat", "cat" } },
    eval = st.data.csv { path = "tests/lua/data/two_labels.csv",
                         schema = { label = { "click", "conversion" }, dense = { "price" },
                                    cat = { "site", "ad" } } },
  },
  model = st.model.graph {
    emb_dim = 4,
    layers = {
      { "e",      st.layer.embed {} },
      { "x",      st.layer.dense {} },
      { "h",      st.layer.concat { "e", "x" } },
      { "bottom", st.layer.mlp { "h", sizes = { 8 } } },
      { "ctr",    st.layer.linear { "bottom" } },
      { "cvr",    st.layer.linear { "bottom" } },
    },
    heads = {
      { label = "conversion", output = "cvr", weight = 0.5 },
      { label = "click", output = "ctr" },
    },
  },
}
