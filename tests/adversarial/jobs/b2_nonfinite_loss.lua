-- adversarial: run --quiet --set data.generate.dir="$TMP/d" --set data.train.path="$TMP/d/train-00000.tsv" --set data.eval.path="$TMP/d/eval.tsv" --set model.optimizer.lr=1e38
-- exit: 1
-- expect: the training loss is NaN at step [0-9]+, minibatch [0-9]+ of [0-9]+ \(read batch [0-9]+, worker 0\)
-- expect: the model diverged and training stopped there
-- expect: stages.train.on_nonfinite = "warn"
-- A learning rate far too high makes the loss NaN within a few steps. The
-- run used to train on, score NaN predictions and exit 0; it stops now at
-- the batch where it happened (on_nonfinite = "fail", the default), before
-- any eval, naming the step.
local st = require "strata"
return st.job {
  name = "b2_nonfinite_loss",
  data = {
    train = st.data.criteo { path = "UNSET/train-00000.tsv" },
    eval = st.data.criteo { path = "UNSET/eval.tsv" },
    generate = st.gen { dir = "UNSET", rows = 4000, eval_rows = 500, vocab = 100, seed = 5 },
  },
  model = st.model.lr { optimizer = st.optim.sgd { lr = 0.05 } },
  stages = { read = { batch_size = 512 }, train = { minibatch = 128 } },
}
