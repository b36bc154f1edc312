-- adversarial: run --quiet --set data.generate.dir="$TMP/d" --set data.train.path="$TMP/d/train-00000.tsv" --set model.optimizer.lr=1e38 --set stages.train.on_nonfinite=warn
-- exit: 0
-- expect: warning: the training loss is NaN at step [0-9]+.*training goes on
-- expect: warning: [0-9]+ minibatch(es)? had a non-finite training loss in this pass
-- expect: trained 4000 examples
-- stages.train.on_nonfinite = "warn": a NaN loss is reported once and
-- counted, and training goes on to the end of the data.
local st = require "strata"
return st.job {
  name = "b2_nonfinite_warn",
  data = {
    train = st.data.criteo { path = "UNSET/train-00000.tsv" },
    generate = st.gen { dir = "UNSET", rows = 4000, vocab = 100, seed = 5 },
  },
  model = st.model.lr { optimizer = st.optim.sgd { lr = 0.05 } },
  stages = { read = { batch_size = 512 }, train = { minibatch = 128 } },
}
