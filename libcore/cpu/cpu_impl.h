/*
 * cpu_impl.h: the CPU backend's state, shared by its files (cpu.c, the
 * forward pass; cpu_moe.c, the routed FFN of mixture-of-experts layers).
 * Not a public header: cpu.h is the backend's interface.
 */
#ifndef MEDHA_CPU_IMPL_H
#define MEDHA_CPU_IMPL_H

#include "cpu/cpu.h"

struct medha_cpu_moe;

struct medha_cpu {
	const struct medha_model *m;
	struct medha_kvcache *kv;
	struct medha_threadpool *tp;
	int nt;     /* threads */
	int ref;    /* f32 reference numerics */
	int shards; /* KVP test mode: key ranges per sequence (1: off) */
	int compat; /* llama.cpp's attention order (opts.llama_compat) */
	int drop;   /* opts.window_drop */
	int lo, hi; /* the layers it runs, [lo, hi) (opts.layer_lo/hi) */
	int tpn, tpr; /* TP: rank tpr of tpn (1, 0) */
	int ep;       /* EP: the experts split whole over the TP ranks */
	struct medha_tp_share *share; /* (tpn) what each rank holds */
	int nh, nkv;  /* query and kv heads of this rank */
	/* (n_layers, W_N) the matrices it multiplies by: the model's, or
	   views of its rows (TP) */
	const struct medha_tensor *(*w)[7];
	struct medha_tensor *view; /* (n_layers, 7) the TP views, or NULL */
	/* (n_layers * 7 + 1) the matrices repacked for the integer kernel
	   (medha_pack; data NULL: multiply the tensor itself), the last
	   the output's, made at its first use */
	struct medha_pack *pk;
	int out_packed; /* the output's pack was tried */
	medha_gather_fn gather;    /* TP all-gather, and its argument */
	void *garg;
	const struct medha_batch_kv *kvx; /* KVP pieces of the batch, or NULL */
	int nmerge;                       /* its sequences marked merge */
	medha_merge_fn merge;             /* KVP merge, and its argument */
	void *marg;
	char gwhy[256]; /* why the last gather failed */
	int timing;     /* measure the operators: MEDHA_CPU_TIME_* */
	struct medha_cpu_times times; /* of the last call, when timing */

	int cap;       /* tokens the buffers below hold */
	float *x;      /* (cap, dim) the residual stream */
	float *xn;     /* (cap, max(dim, q_dim)) normed rows, product outputs */
	float *q;      /* (cap, n_heads * head_dim) */
	float *k;      /* (cap, n_kv_heads * head_dim) */
	float *v;      /* (cap, n_kv_heads * head_dim) */
	float *att;    /* (cap, n_heads * head_dim) attention output */
	float *lse;    /* (cap, n_heads) its log-sum-exp */
	float *g;      /* (cap, ffn_dim) gate, then silu(gate) * up */
	float *u;      /* (cap, ffn_dim) up */
	float *cs;     /* (2, cap, n_rot) cos/sin pairs per token: RoPE
	                  kinds 0 and 1 (medha_layer_rope) */
	float *part_o; /* (shards, cap, n_heads * head_dim) shard mode */
	float *part_l; /* (shards, cap, n_heads) shard mode */
	float *yl;     /* (cap, rank 0's dim rows) a TP rank's rows of an
	                  output projection */
	float *gb;     /* (tp, cap, rank 0's share of the widest of q_dim,
	                  dim and ffn_dim) what a TP gather receives */

	struct medha_attn_seq *as; /* (as_cap) */
	int as_cap;
	float *ascr;         /* (nt, ascr_per) attention scratch */
	size_t ascr_per;     /* floats per thread */
	size_t ascr_cap;     /* floats allocated */
	unsigned char *seen; /* (kv max_seqs) duplicate check */
	struct medha_act act;
	float *tscale; /* (cap) each token's q scale on NoPE layers (llama4's
	                  temperature), or NULL */
	float *ones;   /* (head_dim) 1s: llama4's Q/K norm without weights */
	struct medha_cpu_moe *moe; /* the routed layers' state, or NULL */
};

/* The clock the operators are timed by (c->timing on). */
static inline double
medha_cpu_clock(const struct medha_cpu *c)
{
	return c->timing == MEDHA_CPU_TIME_THREAD ? medha_thread_cpu()
	                                          : medha_now();
}

/* The matrices of a layer, in c->w order. */
enum { W_Q, W_K, W_V, W_O, W_GATE, W_UP, W_DOWN };


/* v = rows [lo, hi) of the matrix w (a TP rank's share). */
const struct medha_tensor *medha_cpu_rows_view(struct medha_tensor *v,
    const struct medha_tensor *w, int lo, int hi);

/*
 * TP: this rank's (n, w[tpr]) part of an output, mine, gathered from
 * every rank (c->gather, as layer and kind) into dst (n, W), rank r's
 * part at columns [lo[r], lo[r] + w[r]); gb receives the ranks' parts,
 * tpn * n * w[0] floats (rank 0's is the largest). dst may be mine. 0
 * or the gather's error (its reason in c->gwhy).
 */
int medha_cpu_gather(struct medha_cpu *c, int layer, int kind,
    const float *mine, int n, float *dst, const int *lo, const int *w,
    float *gb);

/* gate, up and down of one token's SwiGLU (act: the model's ffn_act) as
   the dense FFN does them: g = act(g) * u over n */
void medha_cpu_glu(const struct medha_cpu *c, float *g, const float *u,
    int64_t n);

/*
 * The routed FFN (cpu_moe.c). init: the experts' views and packs of the
 * layers [c->lo, c->hi) that are routed (c->moe stays NULL where none
 * is), a TP rank's rows of each expert (medha_stage_layers of its rows,
 * and of dim for down), or with EP its experts whole; 0 or MEDHA_ENOMEM
 * with why. ffn: layer l's FFN of the n rows of c->xn (normed), its
 * output into c->xn; with TP four all-gathers (kinds 2 and 3: the
 * shared expert's SwiGLU and down; 4 and 5: the experts'), with EP
 * three (2, 3, and 6: the experts' outputs, cpu.h); 0, MEDHA_ENOMEM or
 * the gather's error. free: c->moe.
 */
int medha_cpu_moe_init(struct medha_cpu *c, char *why, size_t whylen);
int medha_cpu_moe_ffn(struct medha_cpu *c, int l, int n);
void medha_cpu_moe_free(struct medha_cpu *c);

#endif
