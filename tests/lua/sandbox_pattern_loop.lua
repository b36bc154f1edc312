-- sandbox: many pattern calls, each under the budget, still meet the time limit
local s = string.rep("x", 3000)
while true do local _ = s:find("x.-y") end
