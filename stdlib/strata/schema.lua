-- strata.schema — the fields every job table may hold: names, types,
-- ranges and defaults. validate.lua walks these lists; docs/job-language.md
-- documents them. Field order is the order errors are reported in.
--
-- A field is { name, type, ... } with type one of
--   int, num, str, bool  scalars (int accepts 2.0 and stores 2)
--   size                 bytes: integer or "2GiB", "512MiB", "10GB", ...
--   paths                a glob string or a non-empty list of glob strings
--   ints                 a list of integers
--   dims                 an integer, or a list of integers (one per slot)
--   section              a sub-table checked by its own code in validate.lua
-- and options: required, default, min (>=), gt (>), max (<=), lt (<),
-- enum (list of strings), nonempty (strings), char (a one-character string),
-- maxlen (lists).
--
-- Every int, num, size, ints and dims field has an upper bound: a value
-- must fit the C type lang/lang.c stores it in (an int field silently
-- wrapping, 2^32 + 1 becoming 1, is how a job used to run with settings its
-- author never wrote) and stay within what the runtime can do. Numbers must
-- also be finite: inf and NaN are refused everywhere. An int field without
-- max is a 64-bit integer (at most 2^63 - 1). docs/job-language.md lists
-- the bounds; S.limits names the shared ones.
local core = select(3, ...)
local S = {}

local L = {
	int_max = 2147483647,    -- a C int
	flt_max = 3.4e38,        -- a C float (optimizer settings, init_scale: ops/optim)
	count = 1000000,         -- epochs, kept checkpoints/exports, reported records
	threads = 64,            -- ST_MAX_STAGE_THREADS (runtime/graph.h)
	ranks = 4096,            -- ST_NET_MAX_RANKS (runtime/net/net.h)
	slots = 65536,           -- a batch keeps slot numbers in 16 bits (runtime/batch.h)
	labels = 16,             -- ST_BATCH_MAX_LABELS (runtime/batch.h)
	emb_dim = 4096,          -- embedding width of one slot
	layer = 65536,           -- neurons of one MLP layer
	batch = 1048576,         -- examples per batch (2^20)
	queue = 4096,            -- batches a stage queue holds
	secs = 31536000,         -- 365 days: every timer fits a time_t in nanoseconds
	file_bytes = 1073741824, -- storage.ssd.file_size (runtime/store/ssd.c: 1 GiB)
	double_int = 9007199254740992, -- 2^53: sync settings are kept as doubles
}
S.limits = L

S.formats = { "criteo", "libsvm", "csv" }
S.models = { "lr", "dnn", "wdl", "deepfm", "dlrm", "dcnv2" }
-- Every st.model.<type>: the presets and "graph" (a model written layer by
-- layer). Messages about an unknown type list the presets (`listed`).
-- din is a preset too (presets.lua) but is handed to C as a graph (it has no
-- C twin), so it is not one of S.models, the presets ops/nn/model.c builds.
S.model_types = { "lr", "dnn", "wdl", "deepfm", "dlrm", "dcnv2", "din", "mmoe", "graph",
	listed = S.models }
-- Layer kinds of st.model.graph (ops/nn/graph.h's node kinds, in the order
-- of enum st_node_kind in lang/job.h).
S.layers = { "embed", "dense", "wide", "concat", "mlp", "linear", "fm", "dot", "add", "cross",
	"attention", "mmoe", "slice" }
S.optimizers = { "sgd", "adagrad", "adam", "ftrl" }
-- Sync policies: the registry's table (ops/sync/policies.def), in its
-- order; S.meta_policies[name] is true for a policy that switches between
-- two others (auto), whose sub-policies validate.lua checks.
S.policies, S.meta_policies = {}, {}
for _, p in ipairs(core.policies) do
	S.policies[#S.policies + 1] = p.name
	S.meta_policies[p.name] = p.meta
end
S.stages = { "read", "pull", "train", "push", "dump" }
S.col_kinds = { "ignore", "label", "dense", "cat" }   -- order = enum st_col_kind

S.job = {
	{ "name", "str", required = true, nonempty = true },
	{ "seed", "int", min = 0, default = 42 },
	{ "epochs", "int", min = 1, max = L.count, default = 1 },
	{ "data", "section" },
	{ "model", "section" },
	{ "stages", "section" },
	{ "storage", "section" },
	{ "sync", "section" },
	{ "stragglers", "section" },
	{ "phases", "section" },
	{ "output", "section" },
	{ "checkpoint", "section" },
	{ "export", "section" },
	{ "resume", "bool", default = false },
	{ "dist", "section" },
}

-- export = { dir = ..., delta = true, keep = K }: serving exports after each
-- phase (slice) and at the end of training.
S.export = {
	{ "dir", "str", required = true, nonempty = true },
	{ "delta", "bool", default = true },
	{ "keep", "int", min = 0, max = L.count, default = 0 },
}

-- dist = { owners = K, compress = false, timeout = T }: multi-process jobs
-- (docs/distributed.md). Ranks 0..K-1 own the sparse rows (0 = every rank);
-- compress: unique-key lists with 16-bit indices and fp16 rows scaled by
-- their block's max norm on the wire; timeout: seconds a rank waits for a
-- peer before calling it dead; prefetch: minibatches whose step reads
-- (async, shadow) a worker issues ahead of the one it trains (none given:
-- the trainer's default; validate.lua refuses it with hop_bs).
S.dist = {
	{ "owners", "int", min = 0, max = L.ranks, default = 0 },
	{ "compress", "bool", default = false },
	{ "timeout", "num", min = 1, max = L.secs, default = 60 },
	{ "prefetch", "int", min = 0, max = 8 },
}

-- checkpoint = { dir = ..., every = N batches, every_secs = T, keep = K }
S.checkpoint = {
	{ "dir", "str", required = true, nonempty = true },
	{ "every", "int", min = 0, default = 0 },
	{ "every_secs", "num", min = 0, max = L.secs, default = 0 },
	{ "keep", "int", min = 0, max = L.count, default = 3 },
}

-- st.stragglers{...}: one slowed worker (0-based, like the st-train-<n>
-- threads) or a random schedule. validate.lua checks which fields go together.
S.stragglers = {
	{ "worker", "int", min = 0, max = L.threads - 1 },
	{ "random", "bool", default = false },
	{ "probability", "num", min = 0, max = 1 },
	{ "slowdown", "num", min = 1, max = 1000, required = true },
	{ "seed", "int", min = 0 },          -- default: the job's seed
	{ "steps", "int", min = 1 },         -- slow only the first `steps` minibatches
}

-- One entry of `phases`; data and sync are checked like data.train and sync.
S.phase = {
	{ "name", "str", required = true, nonempty = true },
	{ "rows", "int", min = 1 },          -- default: all rows of the source
	{ "validate", "bool", default = false }, -- score the slice before training on it
	{ "data", "section" },
	{ "sync", "section" },
}

S.data = {
	{ "train", "section" },
	{ "eval", "section" },
	{ "generate", "section" },
}

local common_source = {
	{ "path", "paths", required = true },
	{ "on_bad_record", "str", enum = { "skip", "fail" }, default = "skip" },
	{ "max_report", "int", min = 0, max = L.count, default = 5 },
	-- on_bad_record = "skip": a pass with more bad records than this share
	-- of all its records fails (docs/job-language.md says why 0.1)
	{ "max_bad_fraction", "num", min = 0, max = 1, default = 0.1 },
	{ "limit", "int", min = -1, default = -1 },
}
local function with(base, extra)
	local t = {}
	for _, f in ipairs(base) do t[#t + 1] = f end
	for _, f in ipairs(extra) do t[#t + 1] = f end
	return t
end
-- missing: what an empty categorical field becomes. "key" is a learnable
-- per-field missing key (the hash of "<missing>" in the field's slot),
-- "drop" no key at all. criteo keeps "drop" by default: its golden and
-- bit-identical results, and `strata predict --format criteo` (which has
-- no job to say otherwise), read it that way (docs/job-language.md).
S.missing = { "key", "drop" }
-- dense_missing: an empty dense value is 0 ("zero"), or 0 plus a 0/1
-- "was missing" feature per dense column ("indicator", which doubles the
-- dense features the model sees).
S.dense_missing = { "zero", "indicator" }
S.source = {
	criteo = with(common_source, {
		{ "missing", "str", enum = S.missing, default = "drop" },
		{ "dense_missing", "str", enum = S.dense_missing, default = "zero" },
	}),
	libsvm = with(common_source, {
		{ "slots", "int", min = 1, max = L.slots, default = 1 },
		-- the first `labels` tokens of a line are its labels (docs/formats.md);
		-- label_names names them (default label1 .. label<k>; "label" for one)
		{ "labels", "int", min = 1, max = L.labels, default = 1 },
		{ "label_names", "section" },
	}),
	csv = with(common_source, {
		{ "sep", "str", char = true, default = "," },
		{ "header", "bool", default = true },
		{ "columns", "section" },
		{ "schema", "section" },
		{ "missing", "str", enum = S.missing, default = "key" },
		{ "dense_missing", "str", enum = S.dense_missing, default = "zero" },
	}),
}
-- A categorical column declared as a table (docs/job-language.md, "List
-- fields"): { "clicks", list = "^", max_len = 50, keep = "last",
-- pooling = "mean", missing = "drop" } in schema.cat, or
-- { "cat", list = "^", ... } in columns. validate.lua checks how the
-- options go together.
S.max_list = 65535
S.cat_field = {
	{ "name", "str", nonempty = true },
	{ "list", "str", char = true },      -- absent: one key per row
	{ "max_len", "int", min = 1, max = S.max_list },  -- list only; default: no limit
	{ "keep", "str", enum = { "first", "last" } },    -- list only; default "first"
	{ "pooling", "str", enum = { "sum", "mean", "none" } }, -- default: model.pooling
	{ "missing", "str", enum = S.missing },           -- default: the source's
}
S.csv_schema = {
	-- one column name, or a list of them (several labels, named by their columns)
	{ "label", "section" },
	{ "dense", "section" },
	{ "cat", "section" },
	{ "ignore", "section" },
}

S.gen = {
	{ "dir", "str", required = true, nonempty = true },
	{ "rows", "int", min = 1, default = 1000000 },
	{ "eval_rows", "int", min = 0, default = 0 },
	{ "files", "int", min = 1, max = 10000, default = 1 },
	{ "zipf", "num", gt = 0, max = 100, default = 1.1 },
	{ "vocab", "int", min = 1, default = 1000000 },
	{ "seed", "int", min = 0 },          -- default: the job's seed
	-- days > 0: day-000.tsv .. day-<days-1>.tsv with a drifting hidden
	-- model (ops/gen/gen.h); validate.lua checks files, rows and drift.
	{ "days", "int", min = 0, max = 365, default = 0 },
	{ "drift", "num", min = 0, max = 1, default = 0.1 },
	-- lists of 1..multi_hot keys per categorical field ('^'-joined; read
	-- them with st.data.csv list columns); 0: one key. Not with days.
	{ "multi_hot", "int", min = 0, max = 100, default = 0 },
	-- 2: a second label column, a conversion on clicked rows (ops/gen/conv.h);
	-- not with days or multi_hot. Read it with two csv label columns.
	{ "labels", "int", min = 1, max = 2, default = 1 },
}

local model_common = {
	{ "optimizer", "section" },
	{ "l2", "num", min = 0, max = L.flt_max, default = 0.0 },
	{ "dense_transform", "str", enum = { "log1p", "none" }, default = "log1p" },
}
-- The neural presets share every field; dlrm adds `bottom`. emb_dim is
-- `dims`: one integer for every slot, or a list with one per slot.
local deep = with(model_common, {
	{ "sparse_optimizer", "section" },
	{ "dense_optimizer", "section" },
	{ "emb_dim", "dims", min = 1, max = L.emb_dim, default = 8 },
	{ "pooling", "str", enum = { "sum", "mean" }, default = "sum" },
	{ "hidden", "ints", min = 1, max = L.layer, maxlen = 16, default = { 256, 128 } },
	{ "activation", "str", enum = { "relu", "sigmoid", "none" }, default = "relu" },
	{ "init_scale", "num", min = 0, max = L.flt_max, default = 0.01 },
	{ "admission", "section" },
	{ "ttl", "int", min = 0, default = 0 },
})
-- The fields every graph-built model has (st.model.graph, din, mmoe): the
-- optimizers, the embeddings and the rows' lifecycle; each adds its own.
local graph_common = {
	{ "optimizer", "section" },
	{ "l2", "num", min = 0, max = L.flt_max, default = 0.0 },
	{ "sparse_optimizer", "section" },
	{ "dense_optimizer", "section" },
	{ "emb_dim", "dims", min = 1, max = L.emb_dim, default = 8 },
	{ "pooling", "str", enum = { "sum", "mean" }, default = "sum" },
	{ "init_scale", "num", min = 0, max = L.flt_max, default = 0.01 },
	{ "admission", "section" },
	{ "ttl", "int", min = 0, default = 0 },
}
S.model = {
	lr = with(model_common, {
		{ "emb_dim", "int", min = 1, max = 1, default = 1 },
	}),
	dnn = deep, wdl = deep, deepfm = deep,
	dlrm = with(deep, {
		{ "bottom", "ints", min = 1, max = L.layer, maxlen = 16 },   -- default {64, emb_dim}
	}),
	-- DCNv2 (ops/nn/model.h): cross layers over concat(embeddings, dense)
	-- before the MLP; cross_rank 0 = full-rank W, r = W = U Vᵀ of rank r
	-- (validate.lua checks r against the layers' width).
	dcnv2 = with(deep, {
		{ "cross_layers", "int", min = 0, max = 16, default = 3 },
		{ "cross_rank", "int", min = 0, max = L.layer, default = 0 },
	}),
	-- DIN (presets.lua, build.din): the fields of a graph without its layers,
	-- plus the attention's query/keys (fields of data.train, checked where
	-- the attention layer is), its MLP (att_hidden, att_activation: the
	-- attention layer's hidden and activation) and the MLP over the features.
	din = with(graph_common, {
		{ "dense_transform", "str", enum = { "log1p", "none" }, default = "log1p" },
		{ "query", "str", required = true, nonempty = true },
		{ "keys", "str", required = true, nonempty = true },
		{ "att_hidden", "ints", min = 1, max = L.layer, maxlen = 15, default = { 36 } },
		{ "att_activation", "str", enum = { "relu", "sigmoid", "none" }, default = "relu" },
		{ "hidden", "ints", min = 1, max = L.layer, maxlen = 16, default = { 200, 80 } },
		{ "activation", "str", enum = { "relu", "sigmoid", "none" }, default = "relu" },
	}),
	-- MMoE (presets.lua, build.mmoe): the fields of a graph without its
	-- layers, plus the experts (experts, expert_hidden), the towers (hidden,
	-- empty for none), and the labels (one task and head each; default every
	-- label of data.train, in order) with their loss weights (default 1).
	mmoe = with(graph_common, {
		{ "dense_transform", "str", enum = { "log1p", "none" }, default = "log1p" },
		{ "labels", "strs", maxlen = L.labels },
		{ "weights", "nums", min = 0, max = L.flt_max, maxlen = L.labels },
		{ "experts", "int", min = 1, max = 64, default = 4 },
		{ "expert_hidden", "ints", min = 1, max = L.layer, maxlen = 15, default = { 64, 32 } },
		{ "hidden", "ints", min = 1, max = L.layer, maxlen = 16, default = { 16 } },
		{ "activation", "str", enum = { "relu", "sigmoid", "none" }, default = "relu" },
	}),
	-- A layer graph written in the job (docs/models.md, "Writing a model in
	-- the job file"): `layers` is a list of { name, st.layer.<kind>{...} },
	-- `output` names the 1-wide logit. validate.lua (V:graph) checks it.
	graph = with(graph_common, {
		{ "layers", "section" },
		-- `output` (one head on the data's one label) or `heads` (one per
		-- label: { label =, output =, weight = }); V:graph checks them
		{ "output", "str", nonempty = true },
		{ "heads", "section" },
	}),
}
-- The fields of each st.layer.<kind>{...}, besides its inputs (the list
-- part: names of layers above it). `inputs` is how many it takes: a number,
-- or { min } for "at least".
S.layer = {
	embed = { inputs = 0 },
	dense = { inputs = 0, { "transform", "str", enum = { "log1p", "none" }, default = "log1p" } },
	wide = { inputs = 0 },
	concat = { inputs = { 1 } },
	mlp = { inputs = 1,
		{ "sizes", "ints", required = true, min = 1, max = L.layer, maxlen = 16 },
		{ "activation", "str", enum = { "relu", "sigmoid", "none" }, default = "relu" } },
	linear = { inputs = 1, { "size", "int", min = 1, max = L.layer, default = 1 } },
	fm = { inputs = 1, { "fields", "int", min = 1, max = L.slots } },
	dot = { inputs = 1, { "fields", "int", min = 2, max = 1024 } },
	add = { inputs = { 2 } },
	cross = { inputs = 1,
		{ "layers", "int", min = 0, max = 16, default = 3 },
		{ "rank", "int", min = 0, max = L.layer, default = 0 } },
	-- DIN's target attention (ops/nn/attention.h): query = a single-valued
	-- cat field (the candidate item), keys = a list field with pooling =
	-- "none" (the behaviour sequence), both named in data.train; hidden =
	-- the attention MLP's sizes before its layer to 1 ({} = that layer alone)
	attention = { inputs = 0,
		{ "query", "str", required = true, nonempty = true },
		{ "keys", "str", required = true, nonempty = true },
		{ "hidden", "ints", min = 1, max = L.layer, maxlen = 15, default = { 36 } },
		{ "activation", "str", enum = { "relu", "sigmoid", "none" }, default = "relu" } },
	-- MMoE (ops/nn/mmoe.h; Ma et al. 2018, §4.2): `experts` MLPs of sizes
	-- expert_hidden (each followed by activation) over the input and one
	-- softmax gate per task; the output is the tasks' gated sums side by
	-- side (tasks × the last size wide). experts >= 1 and tasks >= 1 are
	-- checked in validate.lua, in mmoe's words.
	mmoe = { inputs = 1,
		{ "experts", "int", max = 64, default = 4 },
		{ "expert_hidden", "ints", required = true, min = 1, max = L.layer, maxlen = 8 },
		{ "tasks", "int", max = 16, default = 2 },
		{ "activation", "str", enum = { "relu", "sigmoid", "none" }, default = "relu" } },
	-- One task's columns of an mmoe (task 1..tasks), for that task's tower.
	slice = { inputs = 1, { "task", "int", required = true, max = 16 } },
}
-- model.admission: one of the two rules (neither: admit every key).
S.admission = {
	{ "min_count", "int", min = 0, max = L.int_max },
	{ "probability", "num", gt = 0, max = 1 },
}

-- Defaults that depend on the preset (adagrad's init_accum) are filled by
-- validate.lua, not here.
local function optim(lr, extra)
	return with({
		{ "lr", "num", gt = 0, max = L.flt_max, default = lr },
		{ "lr_dense", "num", gt = 0, max = L.flt_max },    -- default: lr
		{ "l2", "num", min = 0, max = L.flt_max },         -- default: the model's l2
	}, extra)
end
S.optim = {
	sgd = optim(0.01, {}),
	adagrad = optim(0.05, {
		{ "rowwise", "bool", default = false },
		{ "init_accum", "num", min = 0, max = L.flt_max },  -- default: lr 0.1, others 0
		{ "eps", "num", gt = 0, max = L.flt_max, default = 1e-10 },
	}),
	adam = optim(0.001, {
		{ "beta1", "num", min = 0, lt = 1, default = 0.9 },
		{ "beta2", "num", min = 0, lt = 1, default = 0.999 },
		{ "eps", "num", gt = 0, max = L.flt_max, default = 1e-8 },
	}),
	ftrl = optim(0.05, {
		{ "beta", "num", min = 0, max = L.flt_max, default = 1.0 },
		{ "l1", "num", min = 0, max = L.flt_max, default = 0.0 },
	}),
}

S.stage = {
	read = {
		{ "threads", "int", min = 1, max = L.threads, default = 1 },
		{ "queue", "int", min = 1, max = L.queue, default = 4 },
		{ "batch_size", "int", min = 1, max = L.batch, default = 8192 },
		{ "near", "str", nonempty = true },
	},
	train = {
		{ "workers", "int", min = 1, max = L.threads, default = 1 },
		{ "queue", "int", min = 1, max = L.queue, default = 4 },
		{ "minibatch", "int", min = 1, max = L.batch },  -- default 512, clamped to batch_size
		{ "near", "str", nonempty = true },
		-- a NaN or infinite training loss: stop the job, or warn and go on
		{ "on_nonfinite", "str", enum = { "fail", "warn" }, default = "fail" },
	},
}
S.stage.pull = {
	{ "threads", "int", min = 1, max = L.threads, default = 1 },
	{ "queue", "int", min = 1, max = L.queue, default = 4 },
	{ "near", "str", nonempty = true },
}
S.stage.push = S.stage.pull
S.stage.dump = S.stage.pull

S.storage = {
	{ "mem", "size", default = 0 },
	{ "ssd", "section" },
	-- bits of a row's embedding (+ wide weight) values in the RAM and SSD
	-- tiers; the optimizer state stays fp32 (docs/storage.md)
	{ "row_precision", "str", enum = { "fp32", "bf16", "fp16" }, default = "fp32" },
}
S.ssd = {
	{ "path", "str", required = true, nonempty = true },
	{ "budget", "size", default = 0 },
	{ "file_size", "size", max = L.file_bytes, default = 4194304 },
	{ "queue_depth", "int", min = 1, max = 4096, default = 128 },
	{ "read", "str", enum = { "auto", "block", "file" }, default = "auto" },
	{ "lru", "num", gt = 0, lt = 1, default = 0.5 },
}

S.output = {
	{ "dir", "str", nonempty = true },
	{ "metrics", "str", nonempty = true },
	{ "progress", "num", gt = 0, max = L.secs, default = 1.0 },
}

S.sync = {
	allreduce = {},
	async = {},
	hop_bs = { { "b", "int", min = 0, max = L.int_max, required = true } },
	bsp = { { "b", "int", min = 1, max = L.int_max, required = true } },
	hop_bw = { { "b", "int", min = 0, max = L.int_max, required = true } },
	gba = {
		{ "global_batch", "int", min = 1, max = L.double_int, required = true },
		{ "tolerance", "int", min = 0, max = L.int_max, default = 1 },
	},
	kstep = { { "k", "int", min = 1, max = L.int_max, required = true } },
	shadow = {
		{ "algo", "str", enum = { "easgd", "ma", "bmuf" }, default = "easgd" },
		{ "alpha", "num", gt = 0, max = 1, default = 0.5 },
		-- BMUF's block step size (shadowsync-background-sync.md, Algorithm 4)
		{ "eta", "num", gt = 0, max = L.flt_max, default = 1.0 },
		-- 0: sync in the background thread (ShadowSync); n > 0: fixed-rate
		-- sync in the foreground every n steps of each worker (the paper's
		-- baseline)
		{ "every", "int", min = 0, max = L.int_max, default = 0 },
	},
	hybrid = { { "staleness", "int", min = 0, max = L.int_max, required = true } },
	-- Switches between `sync` (worker speeds agree) and `async` (they
	-- diverge by more than threshold over `window` steps).
	-- A huge threshold (1e9) is how a job says "never switch": bounded only
	-- by the float it is kept in.
	auto = {
		{ "sync", "section" },               -- default st.sync.allreduce{}
		{ "async", "section" },              -- default st.sync.async{}
		{ "threshold", "num", gt = 1, max = L.flt_max, default = 1.5 },
		{ "window", "int", min = 1, max = 1024, default = 20 },
	},
}

return S
