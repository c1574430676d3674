/*
 * cuda_open.c: opening the cuda room on a device (cuda.h): the device
 * and its stream, the layers and TP share it holds, the libraries, the
 * weights (cuda_load.c), the scratch and the KV cache in what the
 * device's free memory leaves; and closing it.
 */
#include "cuda/cuda_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The device, or why there is none. */
static int
device(struct medha_cuda *c, const struct medha_cuda_opts *p, char *why,
    size_t whylen)
{
	int n = 0, rc;

	if ((rc = medha_cuda_devices(&n, why, whylen)) != 0)
		return rc;
	if (p->device < 0 || p->device >= n)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "cuda: device %d: there are %d (0 to %d)", p->device, n,
		    n - 1);
	c->dev = p->device;
	if ((rc = cuda_ok(cudaSetDevice(c->dev), "cudaSetDevice", why,
	         whylen)) != 0)
		return rc;
	return cuda_ok(cudaStreamCreateWithFlags(&c->st, cudaStreamNonBlocking),
	    "cudaStreamCreate", why, whylen);
}

/* Layers, TP share, widths and switches from p and the shape in c->c. */
static int
layout(struct medha_cuda *c, const struct medha_cuda_opts *p, char *why,
    size_t whylen)
{
	const struct medha_model_config *mc = &c->c;
	const char *e;

	c->lo = 0;
	c->hi = mc->n_layers;
	if (p->spp > 1) {
		if (p->spp > mc->n_layers || p->stage < 0 ||
		    p->stage >= p->spp)
			return medha_why(why, whylen, MEDHA_EINVAL,
			    "stage %d of %d: the model has %d layers",
			    p->stage, p->spp, mc->n_layers);
		medha_stage_layers(mc->n_layers, p->spp, p->stage, &c->lo,
		    &c->hi);
	}
	c->tp = p->tp > 1 ? p->tp : 1;
	c->tpr = p->tp > 1 ? p->tp_rank : 0;
	if (medha_tp_share(mc, c->tp, c->tpr, &c->sh) != 0)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "TP rank %d of %d: the model has %d kv heads (tp may be "
		    "at most that, or %d)",
		    c->tpr, c->tp, mc->n_kv_heads, MEDHA_TP_MAX);
	c->nh = c->sh.h_hi - c->sh.h_lo;
	c->nkv = c->sh.kv_hi - c->sh.kv_lo;
	c->qd = c->nh * mc->head_dim;
	c->kvd = c->nkv * mc->head_dim;
	c->qkvd = c->qd + 2 * c->kvd;
	c->ff = c->sh.f_hi - c->sh.f_lo;
	/* a mixture of experts: each expert's rows, and the shared one's,
	   split as the cpu backend splits them (cpu_moe.c) */
	medha_stage_layers(mc->a.expert_ffn_dim, c->tp, c->tpr, &c->elo,
	    &c->efw);
	c->efw -= c->elo;
	medha_stage_layers(mc->a.shexp_ffn_dim, c->tp, c->tpr, &c->slo,
	    &c->sfw);
	c->sfw -= c->slo;
	c->gw = c->ff > c->sfw ? c->ff : c->sfw;
	if (mc->a.n_expert > 0 && c->efw < 1)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "TP rank %d of %d: an expert has %d rows (tp may be at "
		    "most that)",
		    c->tpr, c->tp, mc->a.expert_ffn_dim);
	if (p->kv_type != 0 && p->kv_type != MEDHA_KV_F16 &&
	    p->kv_type != MEDHA_KV_BF16)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "cuda: KV type %d: f16 (%d) or bf16 (%d, the default) "
		    "only",
		    p->kv_type, MEDHA_KV_F16, MEDHA_KV_BF16);
	c->kv.kv_type =
	    p->kv_type == MEDHA_KV_F16 ? MEDHA_KV_F16 : MEDHA_KV_BF16;
	c->kv.max_seqs = p->max_seqs > 0 ? p->max_seqs : CUDA_MAX_SEQS;
	c->use_nccl = p->nccl;
	e = getenv("MEDHA_CUDA_GEMM");
	c->lib.fast = e != NULL && strcmp(e, "fast") == 0;
	e = getenv("MEDHA_CUDA_GEMM_M");
	c->lib.gemm_m = e != NULL && atoi(e) > 0 ? atoi(e) : 128;
	e = getenv("MEDHA_NCCL_TIMEOUT");
	c->lib.nccl_timeout = e != NULL && atof(e) > 0 ? atof(e) : 120;
	e = getenv("MEDHA_CUDA_GRAPHS");
	c->rt.graphs = !(e != NULL && strcmp(e, "0") == 0);
	if (p->max_seqs < 0 || p->kv_blocks < 0 || p->mem_util < 0 ||
	    p->mem_util > 1)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "cuda: negative sequences (%d) or KV blocks (%lld), or "
		    "mem_util %g outside [0, 1]",
		    p->max_seqs, (long long)p->kv_blocks, p->mem_util);
	return 0;
}

/* KV blocks: p's, or what mem_util of the free memory at open leaves. */
static int
kv_blocks(struct medha_cuda *c, const struct medha_cuda_opts *p,
    size_t free0, int64_t *n, char *why, size_t whylen)
{
	size_t fr, tot, per = cuda_kv_block_bytes(c);
	double util = p->mem_util > 0 ? p->mem_util : 0.9, budget;
	int rc;

	if (p->kv_blocks > 0) {
		*n = p->kv_blocks;
		return 0;
	}
	if ((rc = cuda_ok(cudaMemGetInfo(&fr, &tot), "cudaMemGetInfo", why,
	         whylen)) != 0)
		return rc;
	/* what weights and scratch took since open comes off the share */
	budget = (double)free0 * util - ((double)free0 - (double)fr);
	*n = budget > 0 ? (int64_t)(budget / (double)per) : 0;
	if (*n > INT32_MAX)
		*n = INT32_MAX;
	if (*n < 1)
		return medha_why(why, whylen, MEDHA_ENOMEM,
		    "cuda: no room for a KV cache: %.2f GB free at open, "
		    "mem_util %.2f, weights and scratch took %.2f GB",
		    (double)free0 / 1e9, util,
		    ((double)free0 - (double)fr) / 1e9);
	return 0;
}

/*
 * What the cuda backend cannot run of a model, refused naming it (the
 * cpu backend runs every model medha loads): the attention kernels have
 * instances for head sizes 64, 128 and 256 only (256, Gemma 2/3's, on
 * the simple kernel alone: kernels/attn.cu); the routing kernels hold a
 * top-k of MEDHA_K_MOE_KMAX at most and the sort's counts in shared
 * memory (kernels/moe.cu).
 */
int
medha_cuda_runnable(const struct medha_model_config *mc, char *why,
    size_t whylen)
{
	const struct medha_arch *a = &mc->a;

	if (a->n_expert > 0 && (a->n_expert_used > MEDHA_K_MOE_KMAX ||
	                           a->n_expert > 4096))
		return medha_why(why, whylen, MEDHA_EUNSUP,
		    "cuda: %s: top-%d of %d experts is not supported (a "
		    "top-k of %d and 4096 experts at most; the cpu backend "
		    "runs it)",
		    a->name, a->n_expert_used, a->n_expert, MEDHA_K_MOE_KMAX);
	if (mc->head_dim != 64 && mc->head_dim != 128 && mc->head_dim != 256)
		return medha_why(why, whylen, MEDHA_EUNSUP,
		    "cuda: %s: a head size (attention.key_length) of %d is "
		    "not supported (64, 128 or 256; the cpu backend runs it)",
		    mc->a.name[0] != '\0' ? mc->a.name : "model",
		    mc->head_dim);
	return 0;
}

/* RoPE of each kind (medha_layer_rope) from the model's description, as
   the cpu backend makes its tables (medha_model_rope); m NULL (random
   weights): no frequency factors. */
static void
ropes(struct medha_cuda *c, const struct medha_model *m)
{
	struct medha_model shape = {.c = c->c};

	for (int kind = 0; kind < 2; kind++) {
		struct medha_rope r;
		medha_model_rope(m != NULL ? m : &shape, kind, &r);
		c->w.rope[kind] = (struct medha_k_rope){r.base, r.freq_scale,
		    r.ext_factor, r.mscale, {r.corr[0], r.corr[1]},
		    kind == 0 && r.freqs != NULL ? c->w.freqs : NULL,
		    c->c.a.rope_type == MEDHA_ROPE_NEOX};
		if (kind == 1 && !(r.base > 0)) /* no window layer's own */
			c->w.rope[1] = c->w.rope[0];
	}
}

/* The room on c (shape in c->c), weights from m or random. */
static int
make(struct medha_cuda *c, const struct medha_model *m,
    const struct medha_cuda_opts *p, char *why, size_t whylen)
{
	size_t free0, tot;
	int64_t nb = 0;
	int rc;

	if ((rc = device(c, p, why, whylen)) != 0 ||
	    (rc = layout(c, p, why, whylen)) != 0)
		return rc;
	if ((rc = cuda_ok(cudaMemGetInfo(&free0, &tot), "cudaMemGetInfo", why,
	         whylen)) != 0)
		return rc;
	if ((rc = cuda_lt_open(c, why, whylen)) != 0 ||
	    (rc = cuda_malloc(&c->s.ltwork, CUDA_LT_WORK, why, whylen,
	         "cuBLASLt's workspace")) != 0)
		return rc;
	if (c->tp > 1 && c->use_nccl &&
	    (rc = cuda_nccl_load(c, why, whylen)) != 0)
		return rc;
	rc = m != NULL ? cuda_load_gguf(c, m, why, whylen)
	               : cuda_load_random(c, p->seed, why, whylen);
	ropes(c, m); /* after the load: c->w.freqs */
	if (rc != 0 || (rc = cuda_grow(c, CUDA_TOKENS, 1, why, whylen)) != 0 ||
	    (rc = kv_blocks(c, p, free0, &nb, why, whylen)) != 0 ||
	    (rc = cuda_kv_init(c, nb, why, whylen)) != 0)
		return rc;
	return cuda_ok(cudaStreamSynchronize(c->st), "opening", why, whylen);
}

int
medha_cuda_open(struct medha_cuda **cu, const struct medha_model *m,
    const struct medha_model_config *shape, const struct medha_cuda_opts *o,
    char *why, size_t whylen)
{
	struct medha_cuda *c;
	int rc;

	*cu = NULL;
	if (m != NULL)
		shape = &m->c;
	if ((rc = medha_cuda_runnable(shape, why, whylen)) != 0)
		return rc;
	if ((c = calloc(1, sizeof(*c))) == NULL)
		return medha_why(why, whylen, MEDHA_ENOMEM, "out of memory");
	c->c = *shape;
	if ((rc = make(c, m, o, why, whylen)) != 0) {
		medha_cuda_close(c);
		return rc;
	}
	*cu = c;
	return 0;
}

void
medha_cuda_info(const struct medha_cuda *c, struct medha_cuda_info *in)
{
	*in = (struct medha_cuda_info){.c = c->c,
	    .layer_lo = c->lo,
	    .layer_hi = c->hi,
	    .n_blocks = c->kv.bt.n_blocks,
	    .max_seqs = c->kv.max_seqs,
	    .kv_type = c->kv.kv_type,
	    .tp = c->tp,
	    .tp_rank = c->tpr};
}

void
medha_cuda_close(struct medha_cuda *c)
{
	if (c == NULL)
		return;
	/* first: an all-reduce left queued by a failed call, its peer gone,
	   would keep the stream from ever finishing */
	if (c->lib.nccl != NULL)
		cuda_nccl_abort(c);
	if (c->st != NULL)
		cudaStreamSynchronize(c->st);
	cuda_graph_free(c);
	cuda_events_free(c);
	cuda_free_weights(c);
	cuda_kv_free(c);
	cudaFree(c->s.x), cudaFree(c->s.qkv), cudaFree(c->s.y),
	    cudaFree(c->s.gu);
	cudaFree(c->s.attf), cudaFree(c->s.lse), cudaFree(c->s.xn);
	cudaFree(c->s.att), cudaFree(c->s.act), cudaFree(c->s.hrows);
	cudaFree(c->s.hn), cudaFree(c->s.logits), cudaFree(c->s.ids);
	cudaFree(c->s.awork), cudaFree(c->s.ltwork), cudaFree(c->s.mrgd);
	cudaFree(c->s.desc.d);
	cuda_moe_free(c);
	cudaFreeHost(c->s.desc.h);
	cudaFreeHost(c->s.hids);
	cudaFreeHost(c->s.hb);
	free(c->s.mrg);
	cuda_lt_close(c);
	cuda_nccl_close(c);
	if (c->st != NULL)
		cudaStreamDestroy(c->st);
	free(c);
}
