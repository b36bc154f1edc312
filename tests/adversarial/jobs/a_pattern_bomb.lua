-- adversarial: check
-- exit: 2
-- expect: a_pattern_bomb.lua:10: string.find: the pattern 'a\*a\*a\*a\*a\*a\*a\*a\*a\*a\*b' could take more than 1e\+30 steps
-- expect: nothing was run
-- Lua's pattern matcher is C that backtracks and runs no instruction, so the
-- watchdog never saw this search, which takes longer than the universe has
-- existed. Each pattern call's worst case is now bounded before it runs.
local st = require "strata"
local s = string.rep("a", 5000)
local i = s:find(string.rep("a*", 10) .. "b")
return st.job { name = "x" }
