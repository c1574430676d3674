/*
 * pred.h: the runtime predictor. Given a model shape, a GPU and the
 * parallel layout (tp, spp, kvp), it says how long the operators of one
 * batch take on one worker, and how much KV memory a worker has.
 *
 * Two sources of operator times, one interface:
 *  - analytic: a roofline per kernel from the GPU's peak FLOP/s and
 *    bandwidths times efficiencies that depend on the kernel's shape
 *    (calibrated from published measurements, see pred.c), plus the
 *    fixed costs of kernel launches and all-reduces;
 *  - table: per-layer times measured by medha-prof (man/medha-profile.5),
 *    interpolated; an operator the table lacks falls back to analytic.
 *
 * Every medha_pred_* time is in seconds for ONE pipeline stage (that is,
 * ceil(n_layers / spp) layers) on one worker of a TP group, unless said
 * otherwise. The scheduler composes them into batch times.
 *
 *	struct medha_pred p;
 *	const struct medha_gpu *g = medha_gpu_find("a100");
 *	struct medha_pred_model m;
 *	medha_model_resolve("llama3-8b", &m);
 *	medha_pred_init(&p, g, &m, 8, 2, 1);
 *	double t = medha_pred_linear(&p, 512) + medha_pred_attn_prefill(&p, 512,
 *0);
 */
#ifndef MEDHA_PRED_H
#define MEDHA_PRED_H

#include "medha.h"
#include "model/model.h"
#include "sched/netcost.h"

#include <stddef.h>
#include <stdint.h>

struct medha_gpu {
	const char *name;
	double peak_flops; /* dense bf16 FLOP/s */
	double hbm_bw;     /* bytes/s */
	double mem_bytes;  /* HBM capacity */
	double nvlink_bw;  /* bytes/s per GPU, one direction, inside a node */
	double net_bw;     /* bytes/s per GPU across nodes (InfiniBand) */
	int gpus_per_node; /* NVLink domain size */
	double eff_flops;  /* GEMM efficiency plateau: fraction of peak that
	                      large, well-shaped GEMMs reach (cpu: measured,
	                      above 1 for int8 products) */
	double gemm_fill;  /* output tiles (128 x 128) of lost work per GEMM:
	                      a GEMM of T tiles runs at eff_flops * T /
	                      (T + gemm_fill); about half a wave of the SMs */
	double eff_attn;   /* attention efficiency plateau at long context */
	double attn_half;  /* kv + chunk tokens at which attention reaches
	                      half its plateau */
	double eff_bw;     /* achievable fraction of HBM bandwidth */
	double eff_link;   /* achievable fraction of link bandwidth (sends,
	                      and all-reduces across nodes) */
	double ar_busbw;   /* all-reduce bus bandwidth inside a node, bytes/s
	                      (time = 2 (n-1)/n bytes / ar_busbw + ar_lat_s) */
	double ar_lat_s;   /* fixed latency of one all-reduce inside a node */
	double launch_s;   /* host time to launch one kernel without CUDA
	                      graphs: a layer takes at least its kernels x
	                      this (the host runs ahead of the GPU otherwise) */
	double kernel_s;   /* GPU time per kernel beyond its roofline (launch
	                      latency, ramp and tail), with or without graphs */
	double comm_lat_s; /* latency of a send or a step across nodes */
	int tp_uneven;     /* TP may split the heads unevenly (the cpu
	                      backend: medha_tp_share), up to one kv head
	                      per rank; otherwise TP divides the query heads
	                      and divides or is a multiple of the kv heads */
};

/* Built-in GPUs: "a100" (80 GB SXM), "h100" (SXM 80 GB), "h200" (SXM 141
   GB, 4.8 TB/s, the H100's compute); any case. NULL if unknown. */
const struct medha_gpu *medha_gpu_find(const char *name);

/*
 * A model as the predictor sees it: the engine's shape (model.h) plus how
 * it is served. The predictor uses n_layers, dim, n_heads, n_kv_heads,
 * head_dim, ffn_dim and vocab of c; the rest is filled for the record.
 */
struct medha_pred_model {
	char name[64];
	struct medha_model_config c; /* the one shape type */
	double w_bytes;  /* bytes per weight as served (2 for bf16) */
	double kv_bytes; /* bytes per KV element (2 for bf16) */
};

/*
 * Built-in names ("llama3-8b", "llama3-70b", "smollm2-135m", "qwen2.5-7b",
 * "qwen3-32b", "gemma3-27b", "llama3.1-70b", and the mixtures of
 * experts "mixtral-8x7b", "qwen3-30b-a3b", "qwen3-235b-a22b",
 * "llama4-scout"; any case),
 * else a path to a GGUF file: its shape is medha_model_config_read()'s,
 * with vocab the rows of token_embd.weight (else llama.vocab_size, else
 * the length of tokenizer.ggml.tokens), and its name general.name (else
 * the file name without ".gguf"); bf16 serving is assumed for w_bytes and
 * kv_bytes. Fills *m (the caller's). Returns 0, MEDHA_ENOTFOUND (neither
 * a built-in name nor a readable file), or MEDHA_EFORMAT, MEDHA_ERANGE,
 * MEDHA_EUNSUP or the GGUF reader's error for a file that does not give a
 * usable llama shape.
 */
int medha_model_resolve(const char *name_or_path, struct medha_pred_model *m);
#define MEDHA_MODEL_NAMES                                              \
	"llama3-8b, llama3-70b, smollm2-135m, qwen2.5-7b, qwen3-32b, " \
	"gemma3-27b, llama3.1-70b, mixtral-8x7b, qwen3-30b-a3b, "          \
	"qwen3-235b-a22b, llama4-scout"

/* Weights of one transformer layer (attention + MLP; a routed layer's
   router, every expert and the shared one), in parameters: the mean
   over the layers. */
double medha_model_layer_params(const struct medha_pred_model *m);

/*
 * The experts a batch of B tokens touches, expected, each choosing k of
 * E at random: E (1 - (1 - k / E)^B) (0 for a dense model). A step reads
 * those experts' weights once each.
 */
double medha_moe_experts_touched(const struct medha_model_config *c, double B);

struct medha_table; /* measured operator times (pred_table.c) */

struct medha_pred {
	struct medha_gpu gpu;
	struct medha_pred_model model;
	int tp, spp, kvp;
	int stage_layers;          /* ceil(n_layers / spp) */
	/* of them, as a share of the model's (medha_pred_init): layers
	   with a sliding window of `window` keys (0: none, all global) */
	double stage_window;
	int window;
	double moe_share;          /* the layers whose FFN is routed, as a
	                              share (0: a dense model) */
	int ep;                    /* experts split whole over the TP ranks
	                              (medha_pred_set_ep) */
	struct medha_table *table; /* owned; NULL: analytic only */
	struct medha_net net;      /* the links between its machines, for
	                              the simulator (netcost.h; all zero
	                              after medha_pred_init: none) */
};

/*
 * Returns MEDHA_EINVAL if tp, spp or kvp < 1, spp > n_layers, or tp does
 * not divide the query heads (and the KV heads, or they it).
 */
int medha_pred_init(struct medha_pred *p, const struct medha_gpu *g,
    const struct medha_pred_model *m, int tp, int spp, int kvp);
/*
 * Expert parallelism over the TP group (cpu/cpu.h EP): each worker holds
 * n_expert / tp experts whole and runs the rows routed to them (of T
 * tokens, T k / tp rows through the experts of its share that they
 * touch, medha_moe_experts_touched / tp, at their whole width), and the
 * routed layers' experts' outputs are all-gathered
 * (medha_pred_ep_bytes) in place of TP's gathers of the experts' rows.
 * Returns 0, or MEDHA_EINVAL (the model has no experts, or tp does not
 * divide them) with why.
 */
int medha_pred_set_ep(struct medha_pred *p, char *why, size_t whylen);
/* The bytes one worker sends per token in a routed layer's exchange of
   the experts' outputs with EP (k dim / tp values at the model's
   activation width, 2 bytes); 0 without EP. */
double medha_pred_ep_bytes(const struct medha_pred *p);
/* The experts one worker reads (whole, EP; else its rows of each) for
   a batch of T tokens in a routed layer, expected. */
double medha_pred_experts_read(const struct medha_pred *p, double T);

/*
 * Load measured times from a profile CSV (man/medha-profile.5); p keeps
 * them. Returns 0, MEDHA_EIO, or MEDHA_EFORMAT with why filled in.
 */
int medha_pred_load_table(struct medha_pred *p, const char *path, char *why,
    size_t whylen);
void medha_pred_free(struct medha_pred *p);

/* Non-attention work of `tokens` tokens: QKV, O, MLP, norms, TP all-reduce
   (and the routed FFN: medha_pred_moe_ffn where the table has it). */
double medha_pred_linear(const struct medha_pred *p, int64_t tokens);
/*
 * A mixture of experts (pred_moe.c): the routed FFN of `tokens` tokens
 * over the stage's routed layers, from a profile's moe_ffn rows (which
 * medha-prof writes with that time taken out of its linear rows); 0
 * where the table has none (the linear rows, or the analytic model,
 * hold it then). Between measured batch sizes the time is interpolated
 * along the experts the batch touches (medha_moe_experts_touched), not
 * along its tokens: the weights read grow with those.
 */
double medha_pred_moe_ffn(const struct medha_pred *p, int64_t tokens);
/* Attention of a prefill chunk of `chunk` tokens after `kv` cached tokens. */
double
medha_pred_attn_prefill(const struct medha_pred *p, int64_t chunk, int64_t kv);
/* Attention of `n_seqs` decode tokens reading `kv_total` cached tokens in all.
 */
double medha_pred_attn_decode(const struct medha_pred *p, int64_t n_seqs,
    int64_t kv_total);
/* Sending `tokens` hidden states from one stage to the next. */
double medha_pred_spp_send(const struct medha_pred *p, int64_t tokens);
/* Merging the partial attention outputs of `tokens` query tokens spread
 * over `groups` KVP groups (all-gather of outputs and log-sum-exps). */
double
medha_pred_kvp_merge(const struct medha_pred *p, int64_t tokens, int groups);
/* Output projection for `n_seqs` last tokens (last stage only; whole op). */
double medha_pred_lm_head(const struct medha_pred *p, int64_t n_seqs);

/*
 * Operators, as named in a profile table (man/medha-profile.5). Added
 * for the table reader and for tests that compare the two sources.
 */
enum medha_op {
	MEDHA_OP_LINEAR = 0,   /* tokens */
	MEDHA_OP_ATTN_PREFILL, /* chunk, kv cached before it */
	MEDHA_OP_ATTN_DECODE,  /* sequences, kv (table: per sequence) */
	MEDHA_OP_SPP_SEND,     /* tokens */
	MEDHA_OP_KVP_MERGE,    /* tokens, groups */
	MEDHA_OP_LM_HEAD,      /* sequences */
	MEDHA_OP_MOE_FFN,      /* tokens: one routed layer's FFN (pred_moe.c) */
	MEDHA_OP_COUNT
};

/* "linear", "attn_prefill", ...; NULL if op is out of range. */
const char *medha_op_name(int op);
/* Operator by table name, or MEDHA_ENOTFOUND. */
int medha_op_find(const char *name);

/*
 * The analytic time of op for p, as the medha_pred_* function of that op
 * returns it when no table is loaded (seconds per stage; kv is kv_total
 * for attn_decode, groups for kvp_merge, ignored by one-argument ops).
 */
double medha_pred_analytic(const struct medha_pred *p, int op, int64_t tokens,
    int64_t kv);

/*
 * Interpolated table time of op at (tokens, kv), in seconds per layer
 * (linear, attn_prefill, attn_decode, kvp_merge) or per operation
 * (spp_send, lm_head). kv means what it means to the medha_pred_*
 * function of op: for attn_decode the total over all sequences (the
 * table's per-sequence kv is converted at load). Returns 1 and sets
 * *sec, or 0 when t is NULL or has no rows for op. O(log n).
 */
int medha_table_lookup(const struct medha_table *t, int op, double tokens,
    double kv, double *sec);
/*
 * The largest tokens and kv that t measured for op (kv as the table
 * has it: per sequence for attn_decode; 0 for one-argument ops), past
 * which a lookup extrapolates. Returns 1, or 0 when t has no rows for op.
 */
int medha_table_extent(const struct medha_table *t, int op, double *tokens,
    double *kv);
/*
 * A one-argument op's grid as the lookup interpolates it: *x its token
 * points (ascending), *y their seconds (non-decreasing), *n of them.
 * Returns 1, or 0 when t is NULL, op takes two arguments or t has no
 * rows for it. The arrays are t's.
 */
int medha_table_row(const struct medha_table *t, int op, const double **x,
    const double **y, int *n);

/*
 * medha_model_resolve() with the reason for a failure in why (GGUF
 * errors, unknown names). medha_model_resolve() logs that reason at
 * MEDHA_LOG_WARN when a GGUF file fails to read. The reasons of this and
 * of medha_pred_load_table() leave out the path; callers prefix it.
 */
int medha_model_resolve_why(const char *name_or_path,
    struct medha_pred_model *m, char *why, size_t whylen);
/* A built-in model of that name into *m: 0, or MEDHA_ENOTFOUND (no file
   is looked at). */
int medha_model_builtin(const char *name, struct medha_pred_model *m);

/* Model weights held by one worker, bytes. */
double medha_pred_weight_bytes(const struct medha_pred *p);
/* KV bytes one token position costs on one worker over all of its
   layers (a KV block's unit: window layers included as global ones). */
double medha_pred_kv_bytes_per_token(const struct medha_pred *p);
/*
 * KV bytes a request of `tokens` tokens holds on one worker when its
 * window layers keep only the last window + chunk positions (the keys
 * a chunk of `chunk` tokens still reads): per layer type, global layers
 * x tokens + window layers x min(tokens, window + chunk).
 */
double
medha_pred_kv_bytes(const struct medha_pred *p, int64_t tokens, int64_t chunk);
/*
 * Tokens of KV one KVP group can hold: (mem_bytes * mem_util - weights
 * - 1 GiB activation reserve) / kv bytes per token; 0 if nothing is left.
 */
int64_t medha_pred_kv_capacity(const struct medha_pred *p, double mem_util);

#endif
