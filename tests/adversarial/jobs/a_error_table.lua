-- adversarial: check
-- exit: 2
-- expect: a_error_table.lua:8: error object is a table \{\}
-- expect: nothing was run
-- A job that raises a table used to be reported as "table: 0x55d0c...",
-- which says nothing; now the error object is described at its line.
local st = require "strata"
error({})
