-- strata.optim — optimizer constructors: st.optim.sgd/adagrad/adam/ftrl{lr=...}.
local common = require "strata.common"
local schema = require "strata.schema"
return common.namespace("optim", "st.optim", schema.optimizers, "optimizer", "optimizers", true)
