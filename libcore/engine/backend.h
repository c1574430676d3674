/*
 * backend.h: the one interface every execution backend implements (cpu
 * now, sim and cuda to come; doc/DESIGN.md sections 4 and 7): sequences
 * held in the backend's paged KV cache, and a forward pass over a batch
 * of many sequences (batch.h) for a range of layers, hidden states in
 * and out, so that one worker runs the whole model, an SPP pipeline
 * stage, or (later) a KVP shard. A backend is a table of function
 * pointers (some optional, marked) over its private state, with what a
 * scheduler must agree on (the model's shape, the KV block size and
 * count) in info. Callers go through the medha_backend_* functions,
 * which check a call before it reaches the backend, so implementations
 * see only well-formed calls. One call at a time per backend.
 *
 * Hidden states are the residual stream: (n_tokens, dim) f32 rows in the
 * batch's token order. The last stage gives logits (optionally, rows as
 * batch.h says) and sampled tokens (optionally, one per sequence that
 * has a sampler); a backend that computes no logits (sim) still gives
 * tokens, so callers that only need tokens never ask for logits.
 *
 * Positions are claimed once per batch: the call that starts at the
 * backend's first layer (info.layer_lo) sets each sequence's cached
 * length to pos + n_tokens (pos at most the length before: a smaller pos
 * forgets the tail); a later call of the same batch finds them claimed
 * (pos + n_tokens at most the length). So a batch run as calls [0, k)
 * then [k, n) on one backend, stages pipelined (stage 0 a batch ahead
 * of stage 1), and two backends made for [0, k) and [k, n) with caches
 * of their own all give what whole calls give, bit for bit on cpu.
 *
 *	struct medha_backend *be;	(backend_cpu.h)
 *	struct medha_backend_cpu_opts o = { .n_threads = 4,
 *	    .kv_blocks = 1024 };
 *	if (medha_backend_cpu_open(&be, "model.gguf", &o, why, sizeof(why)))
 *		...;
 *	int n = be->info.shape.n_layers, k = n / 2, seq;
 *	medha_backend_seq_alloc(be, &seq);
 *	struct medha_batch_seq s = { .seq = seq, .pos = 0, .n_tokens = 5,
 *	    .logits = MEDHA_LOGITS_LAST };
 *	struct medha_batch b = { ids, 5, &s, 1 };
 *	float *h = malloc(5 * be->info.shape.dim * sizeof(float));
 *	struct medha_sampler *sp[1] = { greedy };
 *	int32_t next;
 *	struct medha_fwd f0 = { .b = &b, .layer_lo = 0, .layer_hi = k,
 *	    .h_out = h };			(stage 0: embed, layers [0, k))
 *	struct medha_fwd f1 = { .b = &b, .layer_lo = k, .layer_hi = n,
 *	    .h_in = h, .samplers = sp, .tokens = &next };	(stage 1)
 *	if (medha_backend_forward(be, &f0, why, sizeof(why)) != 0 ||
 *	    medha_backend_forward(be, &f1, why, sizeof(why)) != 0)
 *		...;
 *	(next is the greedy token after ids; s.pos = 5, ids = &next, ...)
 *	medha_backend_seq_free(be, seq);
 *	medha_backend_close(be);
 */
#ifndef MEDHA_BACKEND_H
#define MEDHA_BACKEND_H

#include "medha.h"
#include "batch.h"
#include "model/model.h"
#include "model/sample.h"

#include <stddef.h>
#include <stdint.h>

/* Where a collective's buffers are. */
enum medha_mem {
	MEDHA_MEM_HOST = 0,   /* the process's memory */
	MEDHA_MEM_DEVICE = 1, /* the backend's device memory (cuda) */
};

/*
 * The collectives of a sharded forward pass, as explicit operations
 * among the replica's workers (layout.h), each with the memory space of
 * its buffers. The caller implements them (the live worker over
 * net/coll.h, in host memory: a space it cannot reach is MEDHA_EUNSUP);
 * the arithmetic around them is the backend's: which rows go where, the
 * KVP merge of partial outputs by their log-sum-exps. A backend with
 * collectives of its own (cuda over NCCL) is handed the caller's once
 * before its first sharded call (ops->comm_init) to bootstrap them, its
 * NCCL unique id travelling through all_gather, and keeps them as the
 * fallback. Tags are the caller's: every member calls an operation with
 * the same (layer, kind) in the same order within one forward call.
 * Each returns 0 or a MEDHA_E* code with a reason in why.
 */
struct medha_comm {
	/* TP, among this worker's stage's TP ranks: all (tp * len bytes)
	   gets rank i's mine at all + i * len, this rank's included */
	int (*all_gather)(void *arg, int layer, int kind, const void *mine,
	    size_t len, void *all, int mem, char *why, size_t whylen);
	/* TP: x (n floats) becomes the sum of every rank's x, added in rank
	   order so that all hold the same bits (optional) */
	int (*all_reduce)(void *arg, int layer, int kind, float *x, size_t n,
	    int mem, char *why, size_t whylen);
	/* KVP: with group `group` (not this one; the same TP rank and
	   stage there): send len bytes of buf and receive rlen bytes into
	   rbuf, which that group sends in the same call */
	int (*exchange)(void *arg, int layer, int group, const void *buf,
	    size_t len, void *rbuf, size_t rlen, int mem, char *why,
	    size_t whylen);
	/* SPP: len bytes of hidden states to the next stage, and from the
	   stage before (the same TP rank and group). The live worker moves
	   host hidden states with them around a forward call; a backend
	   that keeps them on its device may call them itself */
	int (*send_next)(void *arg, const void *buf, size_t len, int mem,
	    char *why, size_t whylen);
	int (*recv_prev)(void *arg, void *buf, size_t len, int mem, char *why,
	    size_t whylen);
	int tp, tp_rank;   /* TP ranks of the stage, this one's (1, 0) */
	int kvp, kvp_rank; /* KVP groups, this one's (1, 0) */
	void *arg;
};

/*
 * Where one forward call's time went (medha_fwd.times, for profilers:
 * medha-prof(1)). The wrapper measures total on the monotonic clock; a
 * backend that can tell its operators apart fills the rest and sets
 * split (the cpu backend: attention and merge over all layers run, the
 * final norm and logits), and one that cannot leaves them 0.
 */
struct medha_fwd_times {
	double total; /* the whole call, s */
	double attn;  /* attention over the KV cache, every layer run, s */
	double merge; /* KVP merges of partial attention outputs, s */
	double head;  /* the final norm and the logits, s */
	double moe;   /* the routed FFN of a mixture of experts' layers
	                 (router, experts, shared expert), every layer run,
	                 s; 0 for a dense model (cpu backend) */
	double experts; /* the experts the tokens chose, summed over the
	                   routed layers run (cpu backend; 0 for others) */
	int split;    /* 1 if attn, merge and head were measured */
};

/*
 * One forward call: layers [layer_lo, layer_hi) of batch b. All memory
 * is the caller's; the backend reads b, h_in and samplers and writes
 * h_out, logits and tokens (and advances the samplers' generators).
 */
struct medha_fwd {
	/* the batch (batch.h); b->tokens may be NULL when layer_lo > 0 */
	const struct medha_batch *b;
	/* run layers [lo, hi), lo < hi, within info.layer_lo/hi */
	int layer_lo, layer_hi;
	/* (b->n_tokens, dim) the stream entering layer_lo: required when
	   layer_lo > 0, NULL at 0 (the embeddings of b->tokens) */
	const float *h_in;
	/* (b->n_tokens, dim) out: the stream leaving layer_hi - 1: required
	   when layer_hi < n_layers, NULL when it is n_layers */
	float *h_out;
	/* optional out, only when layer_hi == n_layers:
	   medha_batch_logit_rows(b) rows of vocab floats */
	float *logits;
	/* optional, only when layer_hi == n_layers: (b->n_seqs) a sampler
	   per sequence (NULL entries allowed), drawn in batch order; a
	   sequence with one must be in MEDHA_LOGITS_LAST */
	struct medha_sampler *const *samplers;
	/* (b->n_seqs) out, required with samplers: the token sampled for
	   each sequence with a sampler, -1 for the others; ignored
	   without samplers */
	int32_t *tokens;
	/* the collectives: required when info.tp > 1 or kv marks a merge */
	const struct medha_comm *comm;
	/* KVP (optional): (b->n_seqs) where each sequence's piece starts,
	   whether it appends, whether it merges (batch.h); NULL: every
	   sequence alone from position 0 */
	const struct medha_batch_kv *kv;
	/* optional out: where the call's time went (cleared first) */
	struct medha_fwd_times *times;
	/* with times: timed by the calling thread's CPU time
	   (medha_thread_cpu), not the wall clock; only for a cpu backend
	   of one thread, which runs every task on the caller */
	int thread_clock;
};

/* What a backend holds and runs; filled by its constructor. */
struct medha_backend_info {
	const char *name;                /* "cpu", "sim", ... (static) */
	struct medha_model_config shape; /* the model's hyper-parameters,
	                                    vocab included */
	int layer_lo, layer_hi;          /* the layers it runs, [lo, hi) */
	int block_size;                  /* positions per KV block (16,
	                                    MEDHA_KV_BLOCK) */
	int64_t n_blocks;                /* KV blocks in its pool */
	int max_seqs;                    /* sequences held at once */
	int kv_type;                     /* MEDHA_KV_F32 or MEDHA_KV_F16
	                                    (cpu/kvcache.h) */
	int tp, tp_rank;                 /* TP rank tp_rank of tp: it holds
	                                    that share of the heads and
	                                    weights (1, 0: all) */
	int ep;                          /* its TP ranks split the experts
	                                    whole (params.ep) (0) */
	unsigned caps;                   /* MEDHA_BACKEND_* (the registry's) */
};

/*
 * The table an implementation fills. impl is its state. Required slots
 * first; the optional ones may be NULL (the medha_backend_* wrapper then
 * answers MEDHA_EUNSUP).
 */
struct medha_backend_ops {
	/* An empty sequence: *seq is its handle. 0 or MEDHA_ENOSPACE. */
	int (*seq_alloc)(void *impl, int *seq);
	/* Free a sequence and give its KV blocks back; a bad handle is
	   ignored. */
	void (*seq_free)(void *impl, int seq);
	/*
	 * Run f, already checked against info (shape, range, which buffers
	 * are given) by medha_backend_forward(); the backend checks the
	 * rest (sequence handles, positions against its cache) and fills
	 * f->tokens where samplers are given. 0 or a MEDHA_E* code with a
	 * reason in why.
	 */
	int (*forward)(void *impl, const struct medha_fwd *f, char *why,
	    size_t whylen);
	/* Free impl and everything it owns. */
	void (*close)(void *impl);

	/* optional: positions cached for seq, MEDHA_EINVAL (bad handle) */
	int64_t (*seq_len)(void *impl, int seq);
	/* optional: KV blocks left in the pool */
	int64_t (*free_blocks)(void *impl);
	/* optional: the caller waits a while for its next call (idle
	   threads may sleep) */
	void (*idle)(void *impl);
	/* optional: the collectives the caller implements (engine comm
	   above), before the first forward call that needs them and again
	   when the replica's peers change: a backend with collectives of its
	   own sets them up through them. 0 or MEDHA_E* with why */
	int (*comm_init)(void *impl, const struct medha_comm *c, char *why,
	    size_t whylen);
	/* optional, for profilers: seq gets n cached positions (blocks
	   reserved, the tail past n forgotten) holding arbitrary finite
	   K/V, written to memory, without running the model. 0,
	   MEDHA_EINVAL (bad handle, n < 0) or MEDHA_ENOSPACE */
	int (*seq_fill)(void *impl, int seq, int64_t n);
	/* optional (prefix caching, MEDHA_BACKEND_FORK): dst, holding
	   exactly from positions (from a multiple of block_size), takes
	   src's positions [from, to): full blocks shared, a last partial
	   block copied; a shared block is copied before a write. 0,
	   MEDHA_EINVAL, MEDHA_ENOSPACE or MEDHA_ENOMEM */
	int (*seq_fork)(void *impl, int dst, int src, int64_t from,
	    int64_t to);
	/* optional (MEDHA_BACKEND_FORK): seq keeps its positions [0, n)
	   (n at most its length), its later blocks let go. 0 or
	   MEDHA_EINVAL */
	int (*seq_trim)(void *impl, int seq, int64_t n);
	/* optional (a mixture of experts): out[e], e < n, gets the tokens
	   routed to expert e since the backend opened, summed over the
	   routed layers it runs (a token counts once per expert it chose,
	   per layer); returns the model's experts (0: no routed layer
	   here) */
	int (*expert_tokens)(void *impl, uint64_t *out, int n);
};

struct medha_backend {
	const struct medha_backend_ops *ops; /* static, the implementation's */
	void *impl;                          /* owned, freed by ops->close */
	struct medha_backend_info info;
};

/*
 * Check f against be->info, set f->tokens to -1 (when samplers are
 * given) and run it. A malformed call (an empty or inconsistent batch, a
 * token outside the vocabulary at layer 0, a layer range not within the
 * backend's, h_in missing past layer 0 or given at it, h_out missing
 * before the last layer or given at it, logits or samplers before the
 * last layer, samplers without tokens or on a sequence not in
 * MEDHA_LOGITS_LAST, a KVP merge without collectives or whose groups are
 * not two or more of comm's with this one's among them) is refused with MEDHA_EINVAL and a reason before
 * the backend sees it. Otherwise returns the backend's answer: 0,
 * MEDHA_EINVAL (a bad sequence or position), MEDHA_ENOSPACE (no KV
 * blocks left), MEDHA_ENOMEM, with a reason in why.
 */
int medha_backend_forward(struct medha_backend *be, const struct medha_fwd *f,
    char *why, size_t whylen);

/* A new empty sequence's handle in *seq: 0 or MEDHA_ENOSPACE. */
int medha_backend_seq_alloc(struct medha_backend *be, int *seq);
/* Free a sequence (its KV blocks go back); a bad handle is ignored. */
void medha_backend_seq_free(struct medha_backend *be, int seq);
/* Positions cached, MEDHA_EINVAL (bad handle) or MEDHA_EUNSUP. */
int64_t medha_backend_seq_len(struct medha_backend *be, int seq);
/* Prefix caching (ops seq_fork, seq_trim above): 0, their errors, or
 * MEDHA_EUNSUP. */
int medha_backend_seq_fork(struct medha_backend *be, int dst, int src,
    int64_t from, int64_t to);
int medha_backend_seq_trim(struct medha_backend *be, int seq, int64_t n);
/*
 * For profilers (medha-prof): give seq n cached positions of arbitrary
 * finite K/V without running the model, so that a batch can be timed at
 * any context at once. 0, MEDHA_EINVAL, MEDHA_ENOSPACE or MEDHA_EUNSUP.
 */
int medha_backend_seq_fill(struct medha_backend *be, int seq, int64_t n);
/*
 * The caller's collectives, for a backend that sets up its own from them
 * (ops->comm_init): 0, MEDHA_EUNSUP (it has none: it uses the caller's
 * in each call) or the backend's error, with why.
 */
int medha_backend_comm_init(struct medha_backend *be,
    const struct medha_comm *c, char *why, size_t whylen);
/* KV blocks left in the pool, or MEDHA_EUNSUP. */
int64_t medha_backend_free_blocks(struct medha_backend *be);
/* The caller will wait a while before its next call (a live worker
   between batches): the backend's idle threads may sleep. */
void medha_backend_idle(struct medha_backend *be);
/* Tokens routed to each expert (ops.expert_tokens): the model's experts,
   out[e] filled for e < n; 0 where the backend has no such count or
   no routed layer. */
int medha_backend_expert_tokens(struct medha_backend *be, uint64_t *out,
    int n);
/* Free the backend and all it owns; be may be NULL. */
void medha_backend_close(struct medha_backend *be);

/* ---- the registry: backends by name ---- */

/* What a backend kind can do (medha_backend_kind.caps, info.caps). */
enum medha_backend_cap {
	MEDHA_BACKEND_COMPUTES = 1 << 0, /* real numerics: logits from the
	                                    model (sim only waits the
	                                    predicted time) */
	MEDHA_BACKEND_TP = 1 << 1,       /* a TP rank's share of a layer */
	MEDHA_BACKEND_SPP = 1 << 2,      /* a pipeline stage's layers */
	MEDHA_BACKEND_KVP = 1 << 3,      /* KVP pieces and merges */
	MEDHA_BACKEND_FILL = 1 << 4,     /* seq_fill: profilers can time a
	                                    batch at any context */
	MEDHA_BACKEND_GPU = 1 << 5,      /* runs on a GPU */
	MEDHA_BACKEND_FORK = 1 << 6,     /* seq_fork, seq_trim: sequences
	                                    share KV blocks (prefix caching;
	                                    sequences kept for it do not
	                                    count in max_seqs) */
	MEDHA_BACKEND_EP = 1 << 8,       /* expert parallelism over the TP
	                                    ranks (params.ep) */
	MEDHA_BACKEND_WINDOW_KV = 1 << 7, /* (info.caps only) its window
	                                    layers give back the KV blocks
	                                    their window no longer sees; it
	                                    forks no sequence from positions
	                                    a window left (params.window_kv) */
};

/* How to open a backend; each kind reads what it needs (the rest 0). */
struct medha_backend_params {
	const char *model; /* cpu, cuda: a GGUF path; sim: a built-in model
	                      name or a GGUF path */
	const char *gpu;   /* sim: the predictor's device ("a100") */
	int tp, tp_rank;   /* TP: rank tp_rank of tp (1, 0) */
	int ep;            /* cpu, sim: the TP ranks hold n_expert / tp
	                      experts whole, not their rows of every
	                      expert (cpu/cpu.h EP); refused by a kind
	                      without MEDHA_BACKEND_EP (0) */
	int spp, stage;    /* SPP: the layers of stage `stage` of spp (1, 0) */
	int kvp;           /* sim: KVP groups of the replica (1) */
	int n_threads;     /* cpu: threads in all (0: 1) */
	int max_seqs;      /* sequences at once (0: the backend's default) */
	int64_t kv_blocks; /* KV blocks (0: the backend's default) */
	int kv_type;       /* MEDHA_KV_F32 (0), MEDHA_KV_F16 or
	                      MEDHA_KV_BF16 (cuda: f16 or bf16, 0: bf16) */
	int ref;           /* cpu: f32 reference numerics */
	int window_kv;     /* cpu: window layers keep only the KV blocks
	                      their window sees (no prefix caching: see
	                      MEDHA_BACKEND_WINDOW_KV) */
	double speed;      /* sim: waits divided by this (0: 1) */
	double mem_util;   /* cuda: the share of the GPU's free memory at
	                      open that weights, scratch and the KV cache
	                      may take, when kv_blocks is 0 (0: 0.9) */
	int device;        /* cuda: the CUDA device's index (0) */
	int coll;          /* cuda: MEDHA_COLL_NCCL (0: its own TP
	                      collectives over NCCL) or MEDHA_COLL_HOST
	                      (the caller's struct medha_comm, --coll nng) */
	uint64_t seed;     /* cuda: random weights' seed for a model given
	                      by shape name ("llama3-8b") (0: 1) */
};

/* medha_backend_params.coll */
enum medha_coll_kind {
	MEDHA_COLL_NCCL = 0,
	MEDHA_COLL_HOST = 1,
};

/*
 * A device a kind runs on, as the registry describes it (after
 * ggml-backend's device registry): what a program may ask without
 * including a vendor's headers (the cuda kind's: the CUDA runtime's
 * properties; no context is made).
 */
struct medha_backend_device {
	char name[256];         /* "NVIDIA H200" */
	uint64_t mem_bytes;     /* its memory */
	int cc_major, cc_minor; /* cuda: compute capability (9, 0) */
	int units;              /* cuda: multiprocessors */
};

struct medha_backend_kind {
	const char *name;  /* "cpu", "sim", "cuda" */
	unsigned caps;     /* MEDHA_BACKEND_* */
	const char *about; /* one line for usage text */
	/* NULL: a kind this build knows (a scheduler drives its workers)
	   but cannot run (not built here) */
	int (*open)(struct medha_backend **be,
	    const struct medha_backend_params *p, char *why, size_t whylen);
};

/* Every kind this build knows, in a fixed order; *n gets their count. */
const struct medha_backend_kind *medha_backend_kinds(int *n);

/* The kind named name, or NULL. */
const struct medha_backend_kind *medha_backend_find(const char *name);

/*
 * Open a backend of kind name with p. On success *be is the caller's,
 * for medha_backend_close(). Returns 0, MEDHA_EUNSUP (an unknown kind,
 * or one not built into this program) or the kind's own errors, with a
 * reason in why.
 */
int medha_backend_open(struct medha_backend **be, const char *name,
    const struct medha_backend_params *p, char *why, size_t whylen);

/*
 * Device `index` of kind name described into *d (the registry's device
 * questions, devices.c: apart from the table of openers, so that a
 * program that only asks links no backend). Returns 0, MEDHA_EUNSUP (an
 * unknown kind, one without devices or not built into this program, or
 * no device), MEDHA_EINVAL (no such index) or the kind's own errors,
 * with a reason in why.
 */
int medha_backend_device(const char *name, int index,
    struct medha_backend_device *d, char *why, size_t whylen);

/* ---- for implementations ---- */

/*
 * A backend over ops (static) and impl with info (copied; info.caps,
 * when 0, from the registry's kind of info.name). Returns 0,
 * and then *be owns impl (medha_backend_close() calls ops->close), or
 * MEDHA_ENOMEM, and then impl stays the caller's.
 */
int medha_backend_new(struct medha_backend **be,
    const struct medha_backend_ops *ops, void *impl,
    const struct medha_backend_info *info);

/*
 * tokens[i] (b->n_seqs) = medha_sample(samplers[i], the row of its last
 * token) for each sequence with a sampler and a row, in batch order; -1
 * for the others. logits (borrowed) holds medha_batch_logit_rows(b) rows
 * of vocab floats; it may be NULL when no sequence has a sampler.
 */
void medha_backend_sample(const struct medha_batch *b, const float *logits,
    int vocab, struct medha_sampler *const *samplers, int32_t *tokens);

/*
 * The KVP exchange's layout, the same for every backend (their groups
 * trade these buffers): floats of the merged sequences of b that every
 * group in mask holds a piece of (kv[e].groups), rows of row floats a
 * token; and into p, the rows of out and lse (ro and rl floats a token,
 * every token of b) of the merged sequences group bit g holds a piece
 * of too: per sequence in batch order, its out rows then its lse rows.
 */
size_t medha_kvp_pair_floats(const struct medha_batch *b,
    const struct medha_batch_kv *kv, uint64_t mask, size_t row);
void medha_kvp_pack(const struct medha_batch *b,
    const struct medha_batch_kv *kv, uint64_t g, const float *out,
    const float *lse, size_t ro, size_t rl, float *p);
/*
 * The exchange itself, in host memory through cm->exchange: this
 * group's parts packed at *buf + at[me], and each other group g's
 * received at *buf + at[g] (at: kvp + 1 offsets, at[kvp] the send
 * buffer); *buf (of *cap floats) grows as needed. Both groups of a pair
 * run the same sequences in the same order, so each knows what the
 * other sends. 0 or a MEDHA_E* code with why.
 */
int medha_kvp_exchange(const struct medha_batch *b,
    const struct medha_batch_kv *kv, const struct medha_comm *cm, int layer,
    const float *out, const float *lse, size_t ro, size_t rl, float **buf,
    size_t *cap, size_t *at, char *why, size_t whylen);

#endif
