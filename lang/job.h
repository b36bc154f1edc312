/*
 * job.h — the job IR: a validated, plain-C description of one job file.
 *
 * lang/ builds it from the Lua table returned by the job file (after every
 * check passed and every --set override was applied); cli/ and ops/ read it.
 * All strings and arrays are owned by the job and freed by st_job_free.
 */
#ifndef ST_JOB_H
#define ST_JOB_H

#include <stdint.h>

enum st_bad_policy { ST_BAD_SKIP = 0, ST_BAD_FAIL = 1 };
/* stages.train.on_nonfinite: a minibatch whose training loss is NaN or
 * infinite stops the job (the default) or is counted with a warning. */
enum st_nonfinite_policy { ST_NONFINITE_FAIL = 0, ST_NONFINITE_WARN = 1 };
enum st_col_kind { ST_COL_IGNORE = 0, ST_COL_LABEL, ST_COL_DENSE, ST_COL_CAT };

/* What an empty categorical field becomes (a source's or a field's
 * `missing`): no key (the behaviour before list fields), or the field's
 * learnable missing key, st_read_key(slot, "<missing>"). */
enum st_missing { ST_MISSING_DROP = 0, ST_MISSING_KEY = 1 };

/* Per-slot pooling of a field (model.slot_pooling): 0 = model.pooling. */
/* NONE: keep the sequence for an attention layer (graph models only). */
enum st_pooling { ST_POOLING_MODEL = 0, ST_POOLING_SUM = 1, ST_POOLING_MEAN = 2,
		  ST_POOLING_NONE = 3 };

/* Options of one categorical slot of a CSV source (docs/job-language.md,
 * "List fields"). */
typedef struct st_slot_opt {
	char list_sep;         /* 0: one key per row; else the separator of a list */
	uint8_t keep_last;     /* a list past max_len keeps its last keys (else its first) */
	uint8_t missing;       /* enum st_missing, resolved (the field's or the source's) */
	uint32_t max_len;      /* list: keys kept per row; 0 = no limit */
} st_slot_opt_t;

/* One data source (train or eval). */
typedef struct st_source {
	char *format;          /* "criteo" | "libsvm" | "csv" */
	char **paths;          /* files matched by the job's globs, sorted; n_paths >= 1 */
	int n_paths;
	char **globs;          /* the job's path patterns, as written (n_globs >= 1);
				  st_job_expand_paths re-runs them. Until the files exist
				  (data.generate makes them, or check_paths was 0),
				  paths holds these patterns themselves. */
	int n_globs;
	int on_bad;            /* enum st_bad_policy */
	int max_report;        /* bad records reported in full (default 5) */
	double max_bad_fraction; /* on_bad = skip: a pass whose share of bad records
				    (bad / (bad + good)) is above this fails (0.1) */
	int64_t limit;         /* read at most this many rows; -1 = all */
	/* CSV schema (format == "csv"): one entry per column */
	char sep;              /* field separator, default ',' */
	int header;            /* 1: first line is a header and is skipped */
	int n_cols;
	uint8_t *col_kind;     /* enum st_col_kind per column */
	st_slot_opt_t *slot_opt; /* csv: [n_slots] options of the cat columns in
				    order; NULL: every slot single, missing = `missing` */
	int missing;           /* enum st_missing of fields without their own (csv,
				  criteo); libsvm has no empty fields */
	int dense_indicator;   /* csv, criteo: 1 = each dense feature j gets a 0/1
				  "was missing" feature at n_dense/2 + j (n_dense
				  counts both); 0 = a missing value is 0 */
	/* Derived shape: dense features and categorical slots per example.
	 * criteo: 13 / 26; libsvm: 0 / n_slots (job's `slots`, default 1); csv: from schema.
	 * dense_indicator doubles n_dense (criteo: 26). */
	int n_dense;
	int n_slots;
	/* Labels per example (docs/formats.md, "Several labels"): csv, one per
	 * LABEL column in column order; libsvm, the job's `labels` (the first
	 * n_labels tokens of a line); criteo 1. 0 reads as 1 (sources built
	 * before several labels). label_names[n_labels] (owned, NULL when
	 * n_labels <= 1 and unnamed) name them for heads: "label" for an
	 * unnamed single label, a csv column's name, or label<k> for libsvm. */
	int n_labels;
	char **label_names;
} st_source_t;

/* The labels per example of src (1 for a source without the field). */
static inline int st_source_labels(const st_source_t *src)
{
	return src->n_labels > 1 ? src->n_labels : 1;
}

/* Settings of one pipeline stage. */
typedef struct st_stage_cfg {
	int threads;           /* >= 1 */
	int queue;             /* input queue capacity, >= 1 */
	char *near;            /* placement hint: NULL/"auto", a device class
			          ("disk", "gpu", "net"), or an OS device name */
} st_stage_cfg_t;

/* One optimizer's settings (ops/optim implements them). */
typedef struct st_optim_cfg {
	char *name;            /* "sgd" | "adagrad" | "adam" | "ftrl" */
	int rowwise;           /* adagrad only: 1 = one accumulator per row */
	double lr;             /* > 0 */
	double l2;             /* >= 0, added to the gradient as l2 * w */
	double eps;            /* adagrad (1e-10), adam (1e-8) */
	double beta1, beta2;   /* adam (0.9, 0.999) */
	double init_accum;     /* adagrad initial accumulator (0.1 for lr compat) */
	double l1, beta;       /* ftrl: l1 (0), beta (1.0); ftrl's alpha is lr */
} st_optim_cfg_t;

/* One layer of a model declared as a graph in the job file (type "graph";
 * ops/nn/graph.h's builders, docs/models.md). Fixed-size so a config stays
 * a plain value: nothing to free, copies are deep. */
enum st_node_kind {
	ST_NODE_EMBED, ST_NODE_DENSE, ST_NODE_WIDE, ST_NODE_CONCAT, ST_NODE_MLP,
	ST_NODE_LINEAR, ST_NODE_FM, ST_NODE_DOT, ST_NODE_ADD, ST_NODE_CROSS,
	ST_NODE_ATTENTION, ST_NODE_MMOE, ST_NODE_SLICE, ST_NODE_NKINDS
};
#define ST_MODEL_MAX_NODES 32
#define ST_NODE_MAX_IN 16
typedef struct st_model_node {
	int kind;              /* enum st_node_kind */
	char name[32];         /* the layer's name: the prefix of its tensors */
	int n_in;
	int in[ST_NODE_MAX_IN];   /* indices of earlier nodes */
	int n_sizes;
	int sizes[16];         /* mlp: layer sizes */
	/* dense: a = 1 for log1p; mlp: a = activation (0 none, 1 relu,
	 * 2 sigmoid: enum st_lgraph_act); linear: a = out; fm, dot: a = fields;
	 * cross: a = layers, b = rank (0 = full); attention: a = query slot,
	 * b = key (sequence) slot, c = activation (as mlp's a), sizes = its
	 * hidden sizes (may be none); mmoe: a = experts, b = tasks,
	 * c = activation (as mlp's a), sizes = each expert's layer sizes;
	 * slice: a = first column, b = width. */
	int a, b, c;
} st_model_node_t;

/* One head of a multi-task graph: layer `node` (its index in nodes[]) is
 * the logit of label `label` (index into the source's labels); `name` the
 * label's name (metrics, predict's header); `weight` its share of the
 * loss. */
#define ST_MODEL_MAX_HEADS 16
typedef struct st_model_head {
	int node;
	int label;
	double weight;
	char name[32];
} st_model_head_t;

typedef struct st_model_cfg {
	char *type;            /* "lr", "dnn", "wdl", "deepfm", "dlrm", "dcnv2", "graph" */
	int emb_dim;           /* embedding dimension of every slot (lr: 1) */
	int *slot_dims;        /* NULL, or n_slot_dims per-slot dimensions overriding emb_dim */
	int n_slot_dims;
	char *pooling;         /* "sum" (default) | "mean" */
	int *slot_pooling;     /* NULL, or n_slot_pooling enum st_pooling per slot
				  (a list field's own pooling; 0 = `pooling`) */
	int n_slot_pooling;
	int n_hidden;
	int hidden[16];        /* MLP layer sizes (dlrm: the top MLP before the output) */
	int n_bottom;
	int bottom[16];        /* dlrm bottom MLP over dense features; last = emb_dim */
	int n_cross;           /* dcnv2: cross layers (0..16) before the MLP */
	int cross_rank;        /* dcnv2: rank of each cross layer's W = U Vᵀ; 0 = full */
	char *activation;      /* "relu" (default) | "sigmoid" | "none", hidden layers */
	double init_scale;     /* new embedding rows: uniform(-s, s) from (seed, key); lr: 0 */
	st_optim_cfg_t sparse_opt;  /* embedding rows (and wide weights) */
	st_optim_cfg_t dense_opt;   /* dense tensors */
	/* Feature admission: a new key gets a row only after min_count
	 * occurrences (0/1 = always), or with probability admit_prob (1 = always);
	 * until admitted it reads as zeros and gets no update. */
	int admit_min_count;
	double admit_prob;
	uint64_t ttl_steps;    /* evict rows not touched for this many steps; 0 = never */
	/* Legacy mirrors of sparse_opt/dense_opt kept for the lr model. */
	char *optimizer;       /* == sparse_opt.name */
	double lr;             /* == sparse_opt.lr */
	double lr_dense;       /* == dense_opt.lr */
	double l2;             /* == sparse_opt.l2 */
	double init_accum;     /* == sparse_opt.init_accum */
	char *dense_transform; /* "log1p" (default) | "none" */
	/* type "graph": the layers in order (inputs above readers) and the
	 * output node's index; 0 nodes for the presets. */
	int n_nodes;
	int node_out;
	st_model_node_t nodes[ST_MODEL_MAX_NODES];
	/* A preset's layers as its Lua function built them (stdlib/strata/
	 * presets.lua), held in nodes[0 .. n_preset_nodes-1] with output
	 * preset_out, while n_nodes stays 0: the config still reads, saves and
	 * hashes as the preset it names, whose fields determine these layers.
	 * st_model_create builds them; 0 (a config read back from a checkpoint
	 * or an export, an API caller's) builds the preset with the C reference
	 * twin, the same model. Not saved (ops/dump/modelcfg.c). */
	int n_preset_nodes;
	int preset_out;
	/* type "graph" with model.heads (docs/models.md, "Several labels"): one
	 * head per label, each a 1-wide layer's logit trained with logistic
	 * loss on its label, the loss Σ weight · logloss. 0 heads: the one
	 * head node_out on label 0, weight 1 (every model before heads). */
	int n_heads;
	st_model_head_t heads[ST_MODEL_MAX_HEADS];
} st_model_cfg_t;

/* Sync policy: a name plus numeric parameters kept as key/value pairs. */
typedef struct st_sync_cfg {
	char *name;            /* "allreduce", "async", "hop_bs", "bsp", "hop_bw",
				  "gba", "kstep", "shadow", "hybrid", "auto" */
	int n_params;
	char **keys;
	double *vals;          /* numeric value of each key */
	char **strs;           /* string value of each key, or NULL */
	/* "auto" only (params threshold, window): the policy while worker
	 * speeds agree (sub[0], `sync`) and while they diverge (sub[1],
	 * `async`); both owned, NULL for every other policy. */
	struct st_sync_cfg *sub[2];
} st_sync_cfg_t;

/* Straggler injection (st.stragglers): after worker w computes a minibatch
 * in t seconds it waits (slowdown - 1) * t before handing its gradients on. */
typedef struct st_straggler_cfg {
	int enabled;
	int worker;            /* the slowed worker, 0-based; -1 with random */
	int random;            /* 1: each (worker, step) slowed with probability */
	double probability;
	double slowdown;       /* >= 1 */
	uint64_t seed;
	uint64_t steps;        /* > 0: only each worker's first `steps` minibatches */
} st_straggler_cfg_t;

/* One phase of a job (`phases`): trains with its own policy, continuing
 * from the model state the previous phase left. */
typedef struct st_phase {
	char *name;
	st_sync_cfg_t sync;
	int has_data;          /* 1: `data` given (else the job's train source) */
	st_source_t data;
	int64_t rows;          /* read at most this many rows of the source; -1 = all */
	int validate;          /* score the slice with the current model first
				  (progressive validation), then train on it */
} st_phase_t;

typedef struct st_job {
	char *name;
	char *file;            /* path of the job file */
	uint64_t seed;
	int epochs;            /* passes over the train source, >= 1 */

	st_source_t train;
	int has_eval;
	st_source_t eval;

	st_model_cfg_t model;

	int batch_size;        /* examples per batch, >= 1 */
	int minibatch;         /* examples per optimizer step, >= 1, <= batch_size */
	int on_nonfinite;      /* enum st_nonfinite_policy (stages.train.on_nonfinite) */
	/* Stage settings. The train stage is `train_stage` because `train` is
	 * the train data source above (its threads = the job's `workers`). */
	st_stage_cfg_t read, pull, train_stage, push, dump;

	uint64_t mem_bytes;    /* host-tier budget; 0 = unlimited */
	int row_prec;          /* storage.row_precision: enum st_row_prec
				  (runtime/store/rowfmt.h), 0 = fp32 */
	char *ssd_path;        /* NULL: no SSD tier */
	uint64_t ssd_bytes;     /* SSD budget; 0 = unlimited */
	uint64_t ssd_file_bytes; /* bytes per SSD file */
	int ssd_queue_depth;
	char *ssd_read;         /* "auto", "block" or "file" */
	double ssd_lru;         /* LRU segment's share of the RAM tier */

	st_sync_cfg_t sync;
	st_straggler_cfg_t stragglers;
	int n_phases;          /* 0: one training pass with `sync` */
	st_phase_t *phases;

	char *out_dir;         /* output directory (checkpoints, exports); NULL = none */
	char *ckpt_dir;        /* checkpoint root; NULL = no checkpoints */
	uint64_t ckpt_every;   /* train batches between checkpoints; 0 = not by count */
	double ckpt_secs;      /* seconds between checkpoints; 0 = not by time */
	int ckpt_keep;         /* newest complete checkpoints kept; 0 = all */
	int resume;            /* continue from the newest complete checkpoint */
	char *export_dir;      /* serving exports after each phase and at the end; NULL = none */
	int export_delta;      /* exports after the first carry only the changes */
	int export_keep;       /* full exports kept (with their deltas); 0 = all */
	int dist_owners;       /* multi-process: ranks owning sparse rows; 0 = all */
	int dist_run;          /* set by the CLI: this process is one rank of a
				* multi-process job (the trainer's policy then
				* comes with st_trainer_attach_dist) */
	int dist_compress;     /* compressed pulls and pushes on the wire */
	double dist_timeout;   /* seconds before a silent peer counts as dead */
	int dist_prefetch;     /* step reads issued ahead per worker; -1 = default */
	char *metrics_path;    /* JSON-lines metrics file; NULL = none */
	double progress_secs;  /* seconds between progress lines (default 1) */

	/* Synthetic data (data.generate): when enabled and used, `strata run`
	 * generates the train (and eval) data with these settings when the
	 * files are absent. */
	struct {
		int enabled;
		int used;          /* some source (train, eval, a phase's data) is
				      under dir: only then does `strata run`
				      generate */
		char *dir;
		int64_t rows, eval_rows;
		int files;
		uint64_t seed;
		double zipf;
		uint64_t vocab;
		int days;          /* 0: train-*.tsv; > 0: day-000.tsv .. (drifting) */
		double drift;      /* per-day renewed share of weight variance */
		int multi_hot;     /* 0, or lists of 1..multi_hot keys per field (ops/gen/gen.h) */
		int labels;        /* 1, or 2: click and a planted conversion (ops/gen/conv.h) */
	} gen;
} st_job_t;

/* Frees everything the job owns, and the job. Safe on NULL. */
void st_job_free(st_job_t *job);

/* Looks up a numeric sync parameter; returns def when absent. */
double st_job_sync_param(const st_job_t *job, const char *key, double def);

/* The same on any policy settings (a phase's, auto's sub-policies). */
double st_sync_cfg_param(const st_sync_cfg_t *cfg, const char *key, double def);

#endif
