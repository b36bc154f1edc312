-- sandbox: a loop in C that calls functions runs no Lua instruction
local s = string.rep("x", 1000000)
while true do string.gsub(s, "x", pcall) end
