-- adversarial: check
-- exit: 2
-- expect: a_gc_finalizer.lua:9: setmetatable: a job file may not use __gc
-- expect: nothing was run
-- Finalizers run with hooks off (during collection and in lua_close, after
-- the loader had removed its hook anyway): this one held `strata check`
-- forever.
local st = require "strata"
setmetatable({}, { __gc = function() while true do end end })
return st.job { name = "x", data = { train = st.data.criteo { path = "tests/lua/data/train-*.tsv" } } }
