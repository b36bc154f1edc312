-- The Taobao display-ad sample (../shared/data/taobao_ad, 100 rows) with its
-- '^'-separated click_sequence read as a list field: the most recent 50
-- clicks, mean-pooled; every other id a single field; empty fields are
-- learnable missing keys (the csv default). docs/job-language.md, "List fields".
return st.job {
  name = "taobao-lists",
  data = {
    train = st.data.csv {
      path = "../shared/data/taobao_ad/reczoo_FuxiCTR/train_sample.csv",
      -- clk, time_stamp, userid .. brand (7 ids), price, cms_segid ..
      -- new_user_class_level (8 ids), click_sequence. Positional columns,
      -- so that the job checks without the file (schema = {...} by header
      -- names works as well, once the file is there).
      columns = { "label", "ignore", "cat", "cat", "cat", "cat", "cat", "cat", "cat",
                  "dense", "cat", "cat", "cat", "cat", "cat", "cat", "cat", "cat",
                  { "cat", list = "^", max_len = 50, keep = "last", pooling = "mean" } },
    },
  },
  model = st.model.dnn { emb_dim = 8, hidden = { 16 } },
  stages = { read = { batch_size = 32 }, train = { minibatch = 16 } },
}
