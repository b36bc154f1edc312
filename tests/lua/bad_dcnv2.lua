-- dcnv2: at most 16 cross layers; a rank at or above the cross width
-- (26 x 8 + 13 = 221 for criteo) is no low rank.
return st.job {
  name = "bad-dcnv2",
  data = { train = st.data.criteo { path = "tests/lua/data/train-*.tsv" } },
  model = st.model.dcnv2 {
    emb_dim = 8,
    cross_layers = 17,
    cross_rank = 221,
  },
}
