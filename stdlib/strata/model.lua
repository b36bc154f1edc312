-- strata.model — model constructors: st.model.lr{...} (implemented) and
-- st.model.dnn/wdl/deepfm/dlrm{...} (validated; the runtime reports them as
-- not implemented yet).
local common = require "strata.common"
local schema = require "strata.schema"
return common.namespace("model", "st.model", schema.models, "model type", "models", true)
