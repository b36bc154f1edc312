-- adversarial: run --quiet --metrics /dev/full --set data.generate.dir="$TMP/d" --set data.train.path="$TMP/d/train-00000.tsv"
-- exit: 1
-- expect: metrics: cannot write /dev/full: No space left on device
-- expect: the job ran, but the metrics file /dev/full is incomplete
-- A full disk under the metrics file (/dev/full fails every write with
-- ENOSPC) used to leave a 0-byte file and exit 0: every write, flush and
-- close is checked now, the path is named and the run exits 1.
local st = require "strata"
return st.job {
  name = "b2_metrics_full",
  data = {
    train = st.data.criteo { path = "UNSET/train-00000.tsv" },
    generate = st.gen { dir = "UNSET", rows = 2000, vocab = 100, seed = 5 },
  },
  model = st.model.lr {},
  stages = { read = { batch_size = 512 }, train = { minibatch = 128 } },
}
