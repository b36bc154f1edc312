-- strata.data — data source constructors: st.data.criteo{...},
-- st.data.libsvm{...}, st.data.csv{...}. They only record their fields;
-- validate.lua checks them (so every error is reported, not just the first).
local common = require "strata.common"
local schema = require "strata.schema"
return common.namespace("data", "st.data", schema.formats, "data format", "formats", false)
