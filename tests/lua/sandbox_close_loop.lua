-- sandbox: a __close handler that loops while the timeout unwinds it
while true do
  pcall(function()
    local x <close> = setmetatable({}, { __close = function() while true do end end })
    while true do end
  end)
end
