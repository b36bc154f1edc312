-- sandbox: C pattern matching runs no Lua instruction; its worst case is bounded
local s = string.rep("a", 5000)
local i = s:find(string.rep("a*", 10) .. "b")
