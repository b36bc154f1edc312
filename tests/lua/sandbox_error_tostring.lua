-- sandbox: an error object with __tostring is shown through it
error(setmetatable({}, { __tostring = function() return "custom failure" end }))
