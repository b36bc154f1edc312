-- adversarial: run --quiet
-- exit: 1
-- expect: the train data \(tests/adversarial/data/b2_garbage.tsv\): 12 of 12 records \(100.0%\) are bad
-- expect: more than its max_bad_fraction \(0.1\) allows \(not one good record\); the pass failed
-- expect: b2_garbage.tsv:1: field 0 \(label\)
-- Every record of the train data is garbage (tests/adversarial/data/
-- b2_garbage.tsv, written by hand: CSV, HTML, JSON, short and long rows,
-- labels that are not 0/1, an integer out of range). Under on_bad_record =
-- "skip" the job used to train 0 examples and exit 0; a pass whose records
-- are more than max_bad_fraction (default 0.1) bad fails now.
local st = require "strata"
return st.job {
  name = "b2_bad_records_all",
  data = { train = st.data.criteo { path = "tests/adversarial/data/b2_garbage.tsv", on_bad_record = "skip" } },
  model = st.model.lr {},
  stages = { read = { batch_size = 512 }, train = { minibatch = 128 } },
}
