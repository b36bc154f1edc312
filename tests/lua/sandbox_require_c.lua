-- sandbox: require_c must fail
local ok = true
require "lpeg"
return st.job { name = "x", data = { train = st.data.criteo { path = "tests/lua/data/eval.tsv" } } }
