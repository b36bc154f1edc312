-- sandbox: finalizers run with hooks off, so __gc is refused
local t = setmetatable({}, { __gc = function() while true do end end })
return st.job { name = "gc", data = { train = st.data.criteo { path = "tests/lua/data/train-*.tsv" } } }
