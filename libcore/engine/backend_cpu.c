/*
 * backend_cpu.c: the cpu backend behind the backend interface
 * (backend_cpu.h): the function table over a model, the paged KV cache
 * sized from the options, and the CPU forward pass (cpu/cpu.c) over a
 * range of layers; when the caller wants sampled tokens but no logits,
 * the logits go into a buffer of its own, kept at the largest size seen.
 * With TP its all-gathers, and with KVP the merge of partial attention
 * (the exchange of each merged sequence's outputs and log-sum-exps with
 * the groups that hold its other pieces, then medha_attn_merge), go
 * through the caller's collectives (backend.h struct medha_comm) in host
 * memory.
 */
#include "engine/backend_cpu.h"

#include "cpu/cpu.h"
#include "model/gguf.h"

#include <stdlib.h>
#include <string.h>

#define MAX_SEQS_DEFAULT 64
#define CTX_DEFAULT 4096 /* tokens of a context where the model says none */

struct cpu_be {
	struct medha_gguf *g;        /* owned (cpu_open), or NULL */
	struct medha_model *own;     /* owned (cpu_open), or NULL */
	const struct medha_model *m; /* the model it runs */
	struct medha_kvcache *kv;    /* owned */
	struct medha_cpu *cpu;       /* owned */
	float *lg;                   /* (lg_cap) logits for sampling only */
	size_t lg_cap;               /* floats */
	float *mrg;                  /* (mrg_cap) KVP merge buffers */
	size_t mrg_cap;              /* floats */
	/* the forward call running: its batch and collectives */
	const struct medha_fwd *f;
};

/* ---- the collectives (backend.h), in host memory ---- */

/* medha_gather_fn over the caller's all_gather */
static int
gather(void *arg, int layer, int kind, const void *mine, size_t len,
    void *all, char *why, size_t whylen)
{
	const struct medha_comm *cm = ((struct cpu_be *)arg)->f->comm;

	return cm->all_gather(cm->arg, layer, kind, mine, len, all,
	    MEDHA_MEM_HOST, why, whylen);
}

/*
 * The KVP merge of one layer (medha_merge_fn). With each group it
 * merges some sequence with, this group exchanges the partial attention
 * of those sequences (out rows, then lse rows, in batch order): both run
 * the same sequences in the same order, so each knows what the other
 * sends. Then each sequence's parts are merged in group order, so every
 * group holds the same bits.
 */
static int
kvp_merge(void *arg, int layer, float *out, float *lse, int n_tokens,
    int nh, int hd, char *why, size_t whylen)
{
	struct cpu_be *c = arg;
	const struct medha_batch *b = c->f->b;
	const struct medha_batch_kv *kv = c->f->kv;
	const struct medha_comm *cm = c->f->comm;
	const int kvp = cm->kvp;
	const size_t ro = (size_t)nh * hd, rl = (size_t)nh, row = ro + rl;
	size_t at[MEDHA_KVP_MAX + 1], cur[MEDHA_KVP_MAX];
	size_t t0, nt;
	int g, rc;

	(void)n_tokens;
	if ((rc = medha_kvp_exchange(b, kv, cm, layer, out, lse, ro, rl,
	         &c->mrg, &c->mrg_cap, at, why, whylen)) != 0)
		return rc;
	for (g = 0; g < kvp; g++)
		cur[g] = at[g];
	/* each merged sequence: the parts of its groups, in group order */
	for (int32_t e = 0, t = 0; e < b->n_seqs; e++, t += (int32_t)nt) {
		const float *po[MEDHA_KVP_MAX], *pl[MEDHA_KVP_MAX];
		int np = 0;

		nt = (size_t)b->seq[e].n_tokens;
		if (!kv[e].merge)
			continue;
		for (g = 0; g < kvp; g++) {
			if (!(kv[e].groups >> g & 1))
				continue;
			po[np] = c->mrg + cur[g];
			pl[np++] = c->mrg + cur[g] + nt * ro;
			cur[g] += nt * row;
		}
		t0 = (size_t)t;
		medha_attn_merge(np, po, pl, (int)(nt * nh), hd, out + t0 * ro,
		    lse + t0 * rl);
	}
	return 0;
}

/* ---- the function table ---- */

static int
cpu_seq_alloc(void *impl, int *seq)
{
	struct cpu_be *c = impl;

	return medha_kv_seq_alloc(c->kv, seq);
}

static void
cpu_seq_free(void *impl, int seq)
{
	struct cpu_be *c = impl;

	medha_kv_seq_free(c->kv, seq);
}

static int64_t
cpu_seq_len(void *impl, int seq)
{
	struct cpu_be *c = impl;

	return medha_kv_seq_len(c->kv, seq);
}

static int64_t
cpu_free_blocks(void *impl)
{
	struct cpu_be *c = impl;

	return medha_kv_free_blocks(c->kv);
}

static int
cpu_seq_fork(void *impl, int dst, int src, int64_t from, int64_t to)
{
	struct cpu_be *c = impl;

	return medha_kv_seq_fork(c->kv, dst, src, from, to);
}

static int
cpu_seq_trim(void *impl, int seq, int64_t n)
{
	struct cpu_be *c = impl;
	int64_t len = medha_kv_seq_len(c->kv, seq);

	if (len < 0 || n > len)
		return MEDHA_EINVAL;
	return medha_kv_set_len(c->kv, seq, n);
}

static int
cpu_seq_fill(void *impl, int seq, int64_t n)
{
	struct cpu_be *c = impl;

	return medha_kv_fill(c->kv, seq, n);
}

static int
cpu_forward(void *impl, const struct medha_fwd *f, char *why, size_t whylen)
{
	struct cpu_be *c = impl;
	float *lg = f->logits;
	size_t need;
	int rc;

	if (f->samplers != NULL && lg == NULL) {
		need = (size_t)medha_batch_logit_rows(f->b) * c->m->c.vocab;
		if (need > c->lg_cap) {
			free(c->lg);
			c->lg_cap = 0;
			if ((c->lg = medha_calloc(need, sizeof(float))) == NULL)
				return medha_why(why, whylen, MEDHA_ENOMEM,
				    "logits for sampling: out of memory");
			c->lg_cap = need;
		}
		lg = c->lg;
	}
	c->f = f;
	if (f->comm != NULL)
		medha_cpu_set_gather(c->cpu, gather, c);
	medha_cpu_set_kvp(c->cpu, f->kv, f->comm != NULL ? kvp_merge : NULL, c);
	medha_cpu_set_timing(c->cpu,
	    f->times == NULL      ? MEDHA_CPU_TIME_OFF
	        : f->thread_clock ? MEDHA_CPU_TIME_THREAD
	                          : MEDHA_CPU_TIME_WALL);
	if ((rc = medha_cpu_forward_layers(c->cpu, f->b, f->layer_lo,
	         f->layer_hi, f->h_in, f->h_out, lg, why, whylen)) != 0)
		return rc;
	if (f->times != NULL) {
		struct medha_cpu_times t = medha_cpu_times(c->cpu);
		f->times->attn = t.attn;
		f->times->merge = t.merge;
		f->times->head = t.head;
		f->times->moe = t.moe;
		f->times->experts = t.experts;
		f->times->split = 1;
	}
	if (f->samplers != NULL)
		medha_backend_sample(f->b, lg, c->m->c.vocab, f->samplers,
		    f->tokens);
	return 0;
}

static int
cpu_expert_tokens(void *impl, uint64_t *out, int n)
{
	struct cpu_be *c = impl;

	return medha_cpu_expert_tokens(c->cpu, out, n);
}

static void
cpu_close(void *impl)
{
	struct cpu_be *c = impl;

	if (c == NULL)
		return;
	medha_cpu_free(c->cpu);
	medha_kvcache_free(c->kv);
	free(c->lg);
	free(c->mrg);
	medha_model_free(c->own);
	medha_gguf_close(c->g);
	free(c);
}

static void
cpu_idle(void *impl)
{
	struct cpu_be *c = impl;

	medha_threadpool_nap(medha_cpu_pool(c->cpu));
}

static const struct medha_backend_ops cpu_ops = {
    .seq_alloc = cpu_seq_alloc,
    .seq_free = cpu_seq_free,
    .forward = cpu_forward,
    .close = cpu_close,
    .seq_len = cpu_seq_len,
    .free_blocks = cpu_free_blocks,
    .expert_tokens = cpu_expert_tokens,
    .idle = cpu_idle,
    .seq_fill = cpu_seq_fill,
    .seq_fork = cpu_seq_fork,
    .seq_trim = cpu_seq_trim,
};

/* ---- making one ---- */

/* The blocks the options ask for, into kc->n_blocks (see the header). */
static int
kv_size(const struct medha_model_config *mc,
    const struct medha_backend_cpu_opts *o, struct medha_kv_config *kc,
    char *why, size_t whylen)
{
	size_t per;
	int64_t n, ctx;

	kc->n_blocks = 1;
	if ((per = medha_kvcache_bytes(kc)) == 0)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "a KV block of this model is too large");
	if (o->kv_blocks > 0)
		n = o->kv_blocks;
	else if (o->kv_bytes > 0)
		n = (int64_t)(o->kv_bytes / per);
	else {
		ctx = mc->ctx_len > 0 ? mc->ctx_len : CTX_DEFAULT;
		n = (ctx + MEDHA_KV_BLOCK - 1) / MEDHA_KV_BLOCK;
		if (n >
		    (int64_t)(MEDHA_BACKEND_CPU_KV_BYTES / per) / kc->max_seqs)
			n = (int64_t)(MEDHA_BACKEND_CPU_KV_BYTES / per);
		else
			n *= kc->max_seqs;
	}
	if (n < 1 || n > INT32_MAX)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "a KV cache of %lld blocks of %zu bytes (kv_blocks %lld, "
		    "kv_bytes %zu)",
		    (long long)n, per, (long long)o->kv_blocks, o->kv_bytes);
	kc->n_blocks = n;
	return 0;
}

/* The backend on c->m, filling c's cache and forward pass. */
static int
cpu_make(struct medha_backend **be, struct cpu_be *c,
    const struct medha_backend_cpu_opts *o, char *why, size_t whylen)
{
	const struct medha_model_config *mc = &c->m->c;
	struct medha_backend_cpu_opts d = {0};
	struct medha_kv_config kc;
	struct medha_cpu_opts co = {0};
	struct medha_backend_info in;
	struct medha_tp_share share;
	int rc, tp, adv, *win = NULL;

	if (o == NULL)
		o = &d;
	if (o->spp > 1) {
		if (o->spp > mc->n_layers || o->stage < 0 || o->stage >= o->spp)
			return medha_why(why, whylen, MEDHA_EINVAL,
			    "stage %d of %d: the model has %d layers", o->stage,
			    o->spp, mc->n_layers);
		d = *o;
		medha_stage_layers(mc->n_layers, o->spp, o->stage, &d.layer_lo,
		    &d.layer_hi);
		o = &d;
	}
	if (o->n_threads < 0 || o->max_seqs < 0 || o->kv_blocks < 0)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "negative threads (%d), sequences (%d) or KV blocks "
		    "(%lld)",
		    o->n_threads, o->max_seqs, (long long)o->kv_blocks);
	tp = o->tp > 1 ? o->tp : 1;
	if (medha_tp_share(mc, tp, o->tp_rank, &share) != 0)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "TP rank %d of %d: the model has %d kv heads (tp may be "
		    "at most that, or %d)",
		    o->tp_rank, tp, mc->n_kv_heads, MEDHA_TP_MAX);
	kc = (struct medha_kv_config){.n_layers = mc->n_layers,
	    .n_kv_heads = share.kv_hi - share.kv_lo,
	    .head_dim = mc->head_dim,
	    .type = o->kv_type,
	    .max_seqs = o->max_seqs > 0 ? o->max_seqs : MAX_SEQS_DEFAULT};
	if (kc.type != MEDHA_KV_F32 && kc.type != MEDHA_KV_F16)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "KV type %d: not f32 (%d) or f16 (%d)", o->kv_type,
		    MEDHA_KV_F32, MEDHA_KV_F16);
	/* every TP rank holds as many positions: sized by rank 0's share,
	   the largest */
	{
		struct medha_tp_share s0;
		struct medha_kv_config k0 = kc;
		medha_tp_share(mc, tp, 0, &s0);
		k0.n_kv_heads = s0.kv_hi - s0.kv_lo;
		if ((rc = kv_size(mc, o, &k0, why, whylen)) != 0)
			return rc;
		kc.n_blocks = k0.n_blocks;
	}
	if (o->window_kv) { /* each layer's window, for a table per layer */
		if ((win = calloc((size_t)mc->n_layers, sizeof(int))) == NULL)
			return medha_why(why, whylen, MEDHA_ENOMEM,
			    "out of memory");
		for (int l = 0; l < mc->n_layers; l++)
			win[l] = medha_layer_span(mc, l);
		kc.windows = win;
		kc.layer_lo = o->layer_lo;
		kc.layer_hi = o->layer_hi;
	}
	adv = kc.max_seqs;
	/* prefix caching keeps sequences past their requests, each with a
	   block at least: room for them beyond the max_seqs it announces */
	kc.max_seqs += kc.n_blocks < INT32_MAX - adv ? (int)kc.n_blocks
	                                              : INT32_MAX - adv;
	rc = medha_kvcache_init(&c->kv, &kc);
	free(win);
	if (rc != 0)
		return medha_why(why, whylen, rc,
		    "KV cache of %lld blocks for %d sequences: %s",
		    (long long)kc.n_blocks, kc.max_seqs, medha_strerror(rc));
	co.n_threads = o->n_threads > 0 ? o->n_threads : 1;
	co.ref = o->ref;
	co.kv_shards = 1;
	co.llama_compat = o->llama_compat;
	co.layer_lo = o->layer_lo;
	co.layer_hi = o->layer_hi;
	co.tp = tp;
	co.tp_rank = o->tp_rank;
	co.ep = o->ep;
	co.window_drop = c->kv->nl > 0;
	if ((rc = medha_cpu_init(&c->cpu, c->m, c->kv, &co, why, whylen)) != 0)
		return rc;
	in = (struct medha_backend_info){.name = "cpu",
	    .shape = *mc,
	    .layer_lo = o->layer_lo,
	    .layer_hi = o->layer_hi > 0 ? o->layer_hi : mc->n_layers,
	    .block_size = MEDHA_KV_BLOCK,
	    .n_blocks = kc.n_blocks,
	    .max_seqs = adv,
	    .kv_type = kc.type,
	    .tp = tp,
	    .tp_rank = o->tp_rank,
	    .ep = o->ep};
	if (c->kv->nl > 0)
		in.caps = medha_backend_find("cpu")->caps |
		    MEDHA_BACKEND_WINDOW_KV;
	if ((rc = medha_backend_new(be, &cpu_ops, c, &in)) != 0)
		return medha_why(why, whylen, rc, "out of memory");
	return 0;
}

int
medha_backend_cpu_init(struct medha_backend **be, const struct medha_model *m,
    const struct medha_backend_cpu_opts *o, char *why, size_t whylen)
{
	struct cpu_be *c;
	int rc;

	*be = NULL;
	if ((c = calloc(1, sizeof(*c))) == NULL)
		return medha_why(why, whylen, MEDHA_ENOMEM, "out of memory");
	c->m = m;
	if ((rc = cpu_make(be, c, o, why, whylen)) != 0)
		cpu_close(c);
	return rc;
}

int
medha_backend_cpu_open(struct medha_backend **be, const char *path,
    const struct medha_backend_cpu_opts *o, char *why, size_t whylen)
{
	struct cpu_be *c;
	int rc;

	*be = NULL;
	if ((c = calloc(1, sizeof(*c))) == NULL)
		return medha_why(why, whylen, MEDHA_ENOMEM, "out of memory");
	if ((rc = medha_gguf_open(&c->g, path, why, whylen)) != 0 ||
	    (rc = medha_model_load(&c->own, c->g, why, whylen)) != 0) {
		cpu_close(c);
		return rc;
	}
	c->m = c->own;
	if ((rc = cpu_make(be, c, o, why, whylen)) != 0)
		cpu_close(c);
	return rc;
}
