-- sandbox: a message handler that loops is stopped too (Lua runs it with hooks off)
local function f() while true do end end
while true do xpcall(f, function() while true do end end) end
