-- Inconsistent list declarations: every one is reported at its line.
return st.job {
  name = "csv-lists-bad",
  data = {
    train = st.data.csv { path = "tests/lua/data/lists.csv",
                          schema = { label = "click", dense = { "price" },
                                     cat = { { "site", keep = "last" },
                                             { "clicks", list = ",",
                                               max_len = 0 },
                                             { "tags", list = "|", pooling = "none" } } } },
  },
  model = st.model.dnn { emb_dim = 4 },
}
