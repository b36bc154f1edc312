-- strata.sync — sync policy constructors: st.sync.allreduce{}, async{},
-- hop_bs{b=}, bsp{b=}, hop_bw{b=}, gba{global_batch=, tolerance=}, kstep{k=},
-- shadow{algo=, alpha=}, hybrid{staleness=}, auto{sync=, async=, threshold=,
-- window=}.
local common = require "strata.common"
local schema = require "strata.schema"
return common.namespace("sync", "st.sync", schema.policies, "sync policy", "policies", true)
