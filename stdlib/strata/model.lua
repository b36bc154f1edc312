-- strata.model — model constructors: st.model.lr{...} and the neural presets
-- st.model.dnn/wdl/deepfm/dlrm/dcnv2{...}, and st.model.graph{...}, a
-- model written layer by layer (st.layer.*); fields in schema.lua, checks in
-- validate.lua (V:model).
local common = require "strata.common"
local schema = require "strata.schema"
return common.namespace("model", "st.model", schema.model_types, "model type", "models", true)
