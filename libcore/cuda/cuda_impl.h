/*
 * cuda_impl.h: the cuda room's private state, shared by its files:
 * cuda_open.c (the device, the layout, open and close), cuda_dev.c (the
 * devices' descriptions), cuda_fwd.c (the forward pass), cuda_lib.c
 * (cuBLASLt and NCCL loaded with dlopen; the linear layers),
 * cuda_moe.c (a mixture of experts' routed FFN), cuda_load.c (weights:
 * a GGUF dequantized to bf16, or random by shape name), cuda_kv.c (the paged cache's blocks on the host, the batch's
 * descriptors, the scratch, the sequences), cuda_coll.c (TP
 * all-reduces, the KVP merge, sampling) and cuda_graph.c (decode graphs,
 * timing).
 *
 * Layouts on the device: the residual stream x is (n, dim) f32; matrix
 * inputs (norm outputs, attention output, SwiGLU output) are bf16; a
 * weight is (rows, cols) bf16 row-major, rows the outputs, and a product
 * y = x W^T comes out f32. Q, K and V are one matrix (this rank's Q heads'
 * rows, then its K rows, then its V rows), gate and up another (this
 * rank's gate rows, then its up rows), so that each is one GEMM.
 */
#ifndef MEDHA_CUDA_IMPL_H
#define MEDHA_CUDA_IMPL_H

#include "cuda/cuda.h"
#include "kvblocks.h"
#include "kernels.h" /* kernels/kernels.h (-iquote kernels) */

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <stddef.h>
#include <stdint.h>

#define CUDA_MAX_SEQS 256     /* sequences held at once by default */
#define CUDA_TOKENS 8192      /* scratch rows made at open */
#define CUDA_LT_WORK (32 << 20) /* cuBLASLt's workspace, bytes */
#define CUDA_LT_ALIGN 16      /* the GEMM operands' alignment, bytes */
#define CUDA_GEMM_SHAPES 32   /* GEMM shapes kept (a model has ~5) */
#define CUDA_GRAPHS 64        /* decode graphs kept (by sequences,
                                 logits rows, layers, KV bucket) */

/* cuBLASLt's entry points, from dlopen (the prototypes are the header's) */
struct cuda_lt {
	void *dl;
#define LT_FN(f) __typeof__(f) *f
	LT_FN(cublasLtCreate);
	LT_FN(cublasLtDestroy);
	LT_FN(cublasLtMatmulDescCreate);
	LT_FN(cublasLtMatmulDescDestroy);
	LT_FN(cublasLtMatmulDescSetAttribute);
	LT_FN(cublasLtMatrixLayoutCreate);
	LT_FN(cublasLtMatrixLayoutDestroy);
	LT_FN(cublasLtMatrixLayoutSetAttribute);
	LT_FN(cublasLtMatmulPreferenceCreate);
	LT_FN(cublasLtMatmulPreferenceDestroy);
	LT_FN(cublasLtMatmulPreferenceSetAttribute);
	LT_FN(cublasLtMatmulAlgoGetHeuristic);
	LT_FN(cublasLtMatmul);
};

/* NCCL's, from dlopen */
struct cuda_nccl {
	void *dl;
	LT_FN(ncclGetUniqueId);
	LT_FN(ncclCommInitRank);
	LT_FN(ncclAllReduce);
	LT_FN(ncclGetErrorString);
	LT_FN(ncclCommAbort);
	LT_FN(ncclCommGetAsyncError);
	LT_FN(ncclCommInitRankConfig); /* or NULL (NCCL before 2.14) */
#undef LT_FN
};

/*
 * One GEMM shape: y (m, n) f32 with row stride ldy = x (m, k) bf16 times
 * W (n, k) bf16 transposed. The descriptors are made once; m is set per
 * call. algo is chosen once (batch-invariant: the same kernel and K order
 * for every m); fast mode keeps one per power-of-two m instead.
 */
struct cuda_gemm {
	int n, k, ldy;
	cublasLtMatmulDesc_t desc;
	cublasLtMatrixLayout_t a, b, d;
	int have;                          /* algo chosen */
	int warned;                        /* bit 0: NOT_SUPPORTED, 1:
	                                      INVALID_VALUE, said */
	cublasLtMatmulAlgo_t algo;
	int own_m;                         /* the m own was chosen at (0) */
	cublasLtMatmulAlgo_t own;          /* for an m algo refused */
	uint32_t fast_have;                /* fast mode: bit i: fast[i] */
	cublasLtMatmulAlgo_t fast[32];     /* by ceil(log2 m) */
};

/* One layer's weights on the device (this rank's share). */
struct cuda_layer {
	float *attn_norm, *ffn_norm; /* (dim) f32 */
	uint16_t *wqkv;              /* (qd + 2 kvd, dim) */
	uint16_t *wo;                /* (dim, qd): this rank's columns */
	uint16_t *wgu;               /* (2 ff, dim) */
	uint16_t *wdown;             /* (dim, ff): this rank's columns */
	int ff;                      /* this rank's rows of wgu's halves:
	                                the FFN's (c->ff) or, in a routed
	                                layer, the shared expert's (c->sfw;
	                                0: none, wgu and wdown NULL) */
	/* a routed layer's (medha_layer_moe), or NULL */
	float *router;               /* (rrows, dim) f32: the router's rows,
	                                then qwen2moe's shared-expert gate */
	int rrows;                   /* n_expert (+ 1 with the gate) */
	uint16_t *egu;               /* (n_expert, 2 efw, dim) each expert's
	                                gate rows then up rows, this rank's */
	uint16_t *edown;             /* (n_expert, dim, efw): this rank's
	                                columns of each expert's down */
	/* the other families' (model.h's struct medha_layer), or NULL */
	float *bqkv;                 /* (qd + 2 kvd) this rank's Q, K, V
	                                biases, as wqkv's rows */
	float *qn, *kn;              /* (head_dim) Q/K norms */
	float *post_a, *post_f;      /* (dim) post-attention, post-FFN */
};

/*
 * A batch's descriptors: one pinned host buffer and one device buffer of
 * the same layout, copied in one transfer per batch. Offsets in bytes.
 */
struct cuda_desc {
	char *h;          /* pinned */
	char *d;          /* device */
	size_t cap;       /* bytes of each */
	size_t o_qstart, o_nq, o_pos, o_base, o_kvlen, o_toff, o_app;
	size_t o_tpos, o_tok, o_rows, o_table, len;
	struct medha_k_seqs s; /* device pointers into d */
};

/* A decode step's key (all sequences one token) and its graph. */
enum {
	CUDA_G_FREE,     /* no key */
	CUDA_G_SEEN,     /* its first step ran eagerly */
	CUDA_G_CAPTURED, /* exec replays it */
	CUDA_G_REFUSED,  /* its capture failed: eager, never again */
};
struct cuda_graph {
	int used;        /* CUDA_G_* */
	int n_seqs, nrows, lo, hi;
	int64_t kv_cap;  /* the max_kv bucket it was captured at */
	size_t dlen;     /* descriptor bytes it reads */
	cudaGraphExec_t exec;
	uint64_t last;   /* for eviction */
};

/* The weights on the device: written by the load (cuda_load.c), read
   only after it. */
struct cuda_weights {
	uint16_t *embd, *out;       /* (vocab, dim) or NULL */
	float *onorm, *freqs;       /* (dim), (n_rot / 2) or NULL */
	float *ones;                /* (head_dim) ones: llama4's Q/K norms
	                               without weights, or NULL */
	struct medha_k_rope rope[2]; /* RoPE of each kind (medha_layer_rope:
	                                the model's, a window layer's own) */
	struct cuda_layer *L;       /* (n_layers), [lo, hi) filled */
	size_t wbytes;              /* weight bytes on the device */
};

/* The paged KV cache (cuda_kv.c): the blocks on the device, the tables
   on the host. */
struct cuda_kv {
	int kv_type;                /* MEDHA_KV_F16 or MEDHA_KV_BF16 */
	int max_seqs;
	void *kvmem;                /* (hi - lo, 2, n_blocks, nkv, 16, hd) */
	struct medha_k_kv_layer *kvl; /* (n_layers), [lo, hi) filled */
	struct medha_kvblocks bt;   /* which blocks each sequence holds */
	char *seen;                 /* (bt.max_seqs) batch checks */
};

/* A routed FFN's scratch (cuda_moe.c), for cap tokens of k experts
   each: nk = cap * k sorted rows. */
struct cuda_moe_scratch {
	int cap;
	float *xf;                  /* (cap, dim) the norm in f32 (router) */
	float *lg;                  /* (cap, rrows) router logits */
	int32_t *sel, *row, *src;   /* (nk) kernels.h's struct medha_k_moe */
	float *wt;                  /* (nk) */
	float *gsh;                 /* (cap) */
	int32_t *off;               /* (n_expert + 1) */
	int32_t *tiles;             /* (medha_k_moe_tiles(cap), 3) */
	uint16_t *xg;               /* (nk, dim) the rows, sorted */
	float *egu;                 /* (nk, 2 efw) the experts' gate, up */
	uint16_t *eact;             /* (nk, efw) their SwiGLU */
	float *ys;                  /* (nk, dim) their down */
	float *sh;                  /* (cap, dim) the shared expert's */
};

/* Scratch, grown to the largest batch (rows for cap_t tokens, cap_r
   logits rows; cuda_grow), and the host staging. */
struct cuda_scratch {
	int cap_t, cap_r;
	float *x, *qkv, *y, *gu, *attf, *lse, *hrows, *logits;
	uint16_t *xn, *att, *act, *hn;
	int32_t *ids;
	void *awork;                /* attention workspace */
	size_t awork_cap;
	void *ltwork;               /* cuBLASLt's */
	struct cuda_moe_scratch moe; /* a mixture of experts' */
	struct cuda_desc desc;
	/* pinned host staging: hidden states, merge parts, logits rows */
	float *hb;
	size_t hb_cap;              /* floats */
	int32_t *hids;              /* (cap_r) pinned argmax results */
	float *mrg;                 /* KVP exchange buffers (host) */
	size_t mrg_cap;
	float *mrgd;                /* one sequence's parts (device) */
	size_t mrgd_cap;            /* floats */
};

/* The libraries loaded with dlopen (cuda_lib.c): cuBLASLt with the
   GEMM shapes and algorithms chosen, NCCL with this rank's communicator
   (cuda_coll.c). */
struct cuda_libs {
	struct cuda_lt lt;
	cublasLtHandle_t lth;
	struct cuda_gemm gemm[CUDA_GEMM_SHAPES];
	int n_gemm;
	int fast;                   /* MEDHA_CUDA_GEMM=fast */
	int gemm_m;                 /* the m algorithms are chosen at */
	struct cuda_nccl nc;
	ncclComm_t nccl;            /* or NULL: not set up */
	double nccl_timeout;        /* s a step may wait on its peers
	                               (MEDHA_NCCL_TIMEOUT, 120) */
};

/* The running call, its timing, the decode graphs (cuda_graph.c). */
struct cuda_runtime {
	const struct medha_cuda_call *f; /* the forward call running */
	int graphs;                 /* decode graphs on (MEDHA_CUDA_GRAPHS) */
	struct cuda_graph g[CUDA_GRAPHS];
	uint64_t gclock;
	int capturing;
	/* where a timed call's time goes (f->times): events in pairs, each
	   pair's kind 0 attention, 1 a KVP merge, 2 the head */
	cudaEvent_t *ev;
	int *ev_kind;
	int n_ev, ev_cap;
	int timing;
};

/*
 * The room: what it runs (the device, its stream, the shape, the layers
 * and TP share held; set at open), and its state by lifetime.
 */
struct medha_cuda {
	int dev;
	cudaStream_t st;
	struct medha_model_config c;
	int lo, hi;                 /* layers held */
	int tp, tpr;
	struct medha_tp_share sh;
	int nh, nkv, qd, kvd, qkvd, ff; /* this rank's widths */
	int elo, efw, slo, sfw;     /* its first row and rows of each
	                               expert's FFN and of the shared
	                               expert's (medha_stage_layers) */
	int gw;                     /* the widest of ff and sfw (scratch) */
	int use_nccl;               /* TP over NCCL of its own (opts.nccl) */

	struct cuda_weights w;
	struct cuda_kv kv;
	struct cuda_scratch s;
	struct cuda_libs lib;
	struct cuda_runtime rt;
};

/* ---- cuda_lib.c ---- */
int cuda_err(char *why, size_t whylen, int e, const char *what);
/* 0 where e (a CUDA runtime call's or a kernel launcher's result) is 0,
   else cuda_err's code with its reason naming what */
int cuda_ok(int e, const char *what, char *why, size_t whylen);
int cuda_lt_open(struct medha_cuda *c, char *why, size_t whylen);
void cuda_lt_close(struct medha_cuda *c);
int cuda_nccl_load(struct medha_cuda *c, char *why, size_t whylen);
void cuda_nccl_close(struct medha_cuda *c);
int cuda_gemm(struct medha_cuda *c, const uint16_t *w, int n, int k,
    const uint16_t *x, int m, float *y, int ldy, float beta, char *why,
    size_t whylen);

/* ---- cuda_load.c ---- */
int cuda_load_gguf(struct medha_cuda *c, const struct medha_model *m,
    char *why, size_t whylen);
int cuda_load_random(struct medha_cuda *c, uint64_t seed, char *why,
    size_t whylen);
void cuda_free_weights(struct medha_cuda *c);
int cuda_malloc(void **p, size_t n, char *why, size_t whylen,
    const char *what);

/* ---- cuda_kv.c ---- */
int cuda_kv_init(struct medha_cuda *c, int64_t n_blocks, char *why,
    size_t whylen);
void cuda_kv_free(struct medha_cuda *c);
size_t cuda_kv_block_bytes(const struct medha_cuda *c);
int cuda_check_batch(struct medha_cuda *c, const struct medha_cuda_call *f,
    int claim, char *why, size_t whylen);
int64_t cuda_keys_of(const struct medha_cuda *c,
    const struct medha_cuda_call *f, int i);
int cuda_desc_build(struct medha_cuda *c, const struct medha_cuda_call *f,
    int64_t kv_cap, char *why, size_t whylen);
int cuda_grow(struct medha_cuda *c, int n_tokens, int nrows, char *why,
    size_t whylen);

/* ---- cuda_coll.c ---- */
int cuda_all_reduce(struct medha_cuda *c, int layer, int kind, float *y,
    size_t n, char *why, size_t whylen);
int cuda_kvp_merge(struct medha_cuda *c, int layer, int n_tokens, char *why,
    size_t whylen);
int cuda_head_out(struct medha_cuda *c, const struct medha_cuda_call *f,
    int nrows, char *why, size_t whylen);
int cuda_stage(struct medha_cuda *c, size_t floats, char *why, size_t whylen);
int cuda_sync(struct medha_cuda *c, const char *what, char *why, size_t whylen);
void cuda_nccl_abort(struct medha_cuda *c);

/* ---- cuda_graph.c ---- */
int cuda_graph_step(struct medha_cuda *c, const struct medha_cuda_call *f,
    int nrows, int *done, char *why, size_t whylen);
void cuda_graph_free(struct medha_cuda *c);

/* ---- cuda_graph.c: timing ---- */
int cuda_mark(struct medha_cuda *c, int kind, char *why, size_t whylen);
int cuda_times(struct medha_cuda *c, struct medha_cuda_times *t, char *why,
    size_t whylen);
void cuda_events_free(struct medha_cuda *c);

/* ---- cuda_moe.c ---- */
int cuda_moe_half(struct medha_cuda *c, int l, int n, char *why,
    size_t whylen);
int cuda_moe_grow(struct medha_cuda *c, int n_tokens, char *why,
    size_t whylen);
void cuda_moe_free(struct medha_cuda *c);

/* ---- cuda_fwd.c ---- */
int cuda_reduce_add(struct medha_cuda *c, int l, int kind, int n,
    const float *post, char *why, size_t whylen);
int cuda_run_layers(struct medha_cuda *c, const struct medha_cuda_call *f,
    int nrows, char *why, size_t whylen);
int cuda_is_decode(const struct medha_cuda_call *f);
int cuda_upload_h(struct medha_cuda *c, const struct medha_cuda_call *f,
    char *why, size_t whylen);
int cuda_attn_work(struct medha_cuda *c, char *why, size_t whylen);

#endif
