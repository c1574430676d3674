/*
 * backend.c: what every backend shares (backend.h): the checks a forward
 * call passes before it reaches the backend (the batch's shape, the
 * layer range, which buffers are given), the dispatch through the
 * function table, and the helpers implementations use (making the
 * backend struct, sampling each sequence from its logits row).
 */
#include "engine/backend.h"

#include <stdlib.h>
#include <string.h>

/* ---- checks ---- */

/* The batch's own consistency, and its tokens when they are read. */
static int
check_batch(const struct medha_backend_info *in, const struct medha_batch *b,
    int embed, char *why, size_t whylen)
{
	int64_t sum = 0;
	int32_t i;

	if (b->n_seqs < 1 || b->n_tokens < 1 || b->seq == NULL ||
	    (embed && b->tokens == NULL))
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "empty batch (%d sequences, %d tokens)", b->n_seqs,
		    b->n_tokens);
	for (i = 0; i < b->n_seqs; i++) {
		const struct medha_batch_seq *s = &b->seq[i];
		if (s->n_tokens < 1 || s->pos < 0)
			return medha_why(why, whylen, MEDHA_EINVAL,
			    "batch entry %d: %d tokens at position %lld", i,
			    s->n_tokens, (long long)s->pos);
		if (s->logits < MEDHA_LOGITS_LAST ||
		    s->logits > MEDHA_LOGITS_NONE)
			return medha_why(why, whylen, MEDHA_EINVAL,
			    "batch entry %d: logits mode %d", i, s->logits);
		sum += s->n_tokens;
	}
	if (sum != b->n_tokens)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "sequences hold %lld tokens, batch has %d", (long long)sum,
		    b->n_tokens);
	for (i = 0; embed && i < b->n_tokens; i++)
		if (b->tokens[i] < 0 || b->tokens[i] >= in->shape.vocab)
			return medha_why(why, whylen, MEDHA_EINVAL,
			    "token %d at %d is outside the vocabulary (%d)",
			    b->tokens[i], i, in->shape.vocab);
	return 0;
}

/* f against the backend's info: range, buffers, samplers. */
static int
check_fwd(const struct medha_backend_info *in, const struct medha_fwd *f,
    char *why, size_t whylen)
{
	const int lo = f->layer_lo, hi = f->layer_hi, nl = in->shape.n_layers;
	int32_t i;
	int rc;

	if (f->b == NULL)
		return medha_why(why, whylen, MEDHA_EINVAL, "no batch");
	if (lo >= hi || lo < in->layer_lo || hi > in->layer_hi)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "layers [%d, %d): not a range within [%d, %d), the "
		    "layers the %s backend runs",
		    lo, hi, in->layer_lo, in->layer_hi, in->name);
	if (lo > 0 && f->h_in == NULL)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "no hidden states (h_in) to enter layer %d with", lo);
	if (lo == 0 && f->h_in != NULL)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "hidden states (h_in) handed to layer 0, which embeds "
		    "the tokens");
	if (hi < nl && f->h_out == NULL)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "no room (h_out) for the hidden states leaving layer %d "
		    "of %d",
		    hi - 1, nl);
	if (hi == nl && f->h_out != NULL)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "room (h_out) for hidden states after the last layer, "
		    "which gives logits");
	if (hi < nl && (f->logits != NULL || f->samplers != NULL))
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "%s asked for after layer %d of %d",
		    f->logits != NULL ? "logits" : "samples", hi - 1, nl);
	if ((rc = check_batch(in, f->b, lo == 0, why, whylen)) != 0)
		return rc;
	if (f->samplers == NULL)
		return 0;
	if (f->tokens == NULL)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "samplers but no room for the tokens");
	for (i = 0; i < f->b->n_seqs; i++)
		if (f->samplers[i] != NULL &&
		    f->b->seq[i].logits != MEDHA_LOGITS_LAST)
			return medha_why(why, whylen, MEDHA_EINVAL,
			    "batch entry %d: a sampler, but logits mode %d "
			    "(not the last token's)",
			    i, f->b->seq[i].logits);
	return 0;
}

/* Batch entry i marks a KVP merge: the collectives are given, and its
 * groups are two or more of comm's, this backend's among them. */
static int
check_merge(const struct medha_fwd *f, int32_t i, char *why, size_t whylen)
{
	const struct medha_comm *cm = f->comm;
	uint64_t g = f->kv[i].groups;

	if (cm == NULL || cm->exchange == NULL)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "batch entry %d: a KVP merge without collectives", i);
	if (cm->kvp < 2 || cm->kvp > MEDHA_KVP_MAX || cm->kvp_rank < 0 ||
	    cm->kvp_rank >= cm->kvp || !(g >> cm->kvp_rank & 1) ||
	    (cm->kvp < 64 && g >> cm->kvp != 0) || (g & (g - 1)) == 0)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "batch entry %d: a KVP merge of groups %#llx, not two or "
		    "more of %d with this one's (%d) among them",
		    i, (unsigned long long)g, cm->kvp, cm->kvp_rank);
	return 0;
}

/* ---- the interface ---- */

int
medha_backend_forward(struct medha_backend *be, const struct medha_fwd *f,
    char *why, size_t whylen)
{
	double t0;
	int32_t i;
	int rc;

	if (be == NULL || f == NULL)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "no backend or no call");
	if ((rc = check_fwd(&be->info, f, why, whylen)) != 0)
		return rc;
	if (be->info.tp > 1 && (f->comm == NULL || f->comm->all_gather == NULL))
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "TP rank %d of %d called without collectives",
		    be->info.tp_rank, be->info.tp);
	for (i = 0; f->kv != NULL && i < f->b->n_seqs; i++)
		if (f->kv[i].merge && (rc = check_merge(f, i, why, whylen)) != 0)
			return rc;
	if (f->samplers != NULL)
		for (i = 0; i < f->b->n_seqs; i++)
			f->tokens[i] = -1;
	if (f->times == NULL)
		return be->ops->forward(be->impl, f, why, whylen);
	memset(f->times, 0, sizeof(*f->times));
	t0 = f->thread_clock ? medha_thread_cpu() : medha_now();
	rc = be->ops->forward(be->impl, f, why, whylen);
	f->times->total =
	    (f->thread_clock ? medha_thread_cpu() : medha_now()) - t0;
	return rc;
}

int
medha_backend_seq_alloc(struct medha_backend *be, int *seq)
{
	return be->ops->seq_alloc(be->impl, seq);
}

void
medha_backend_seq_free(struct medha_backend *be, int seq)
{
	be->ops->seq_free(be->impl, seq);
}

int
medha_backend_seq_fork(struct medha_backend *be, int dst, int src,
    int64_t from, int64_t to)
{
	if (be->ops->seq_fork == NULL)
		return MEDHA_EUNSUP;
	return be->ops->seq_fork(be->impl, dst, src, from, to);
}

int
medha_backend_seq_trim(struct medha_backend *be, int seq, int64_t n)
{
	if (be->ops->seq_trim == NULL)
		return MEDHA_EUNSUP;
	if (n < 0)
		return MEDHA_EINVAL;
	return be->ops->seq_trim(be->impl, seq, n);
}

int64_t
medha_backend_seq_len(struct medha_backend *be, int seq)
{
	if (be->ops->seq_len == NULL)
		return MEDHA_EUNSUP;
	return be->ops->seq_len(be->impl, seq);
}

int
medha_backend_seq_fill(struct medha_backend *be, int seq, int64_t n)
{
	if (be->ops->seq_fill == NULL)
		return MEDHA_EUNSUP;
	if (n < 0)
		return MEDHA_EINVAL;
	return be->ops->seq_fill(be->impl, seq, n);
}

int
medha_backend_comm_init(struct medha_backend *be, const struct medha_comm *c,
    char *why, size_t whylen)
{
	if (be->ops->comm_init == NULL)
		return medha_why(why, whylen, MEDHA_EUNSUP,
		    "%s backend: no collectives of its own", be->info.name);
	return be->ops->comm_init(be->impl, c, why, whylen);
}

int
medha_backend_expert_tokens(struct medha_backend *be, uint64_t *out, int n)
{
	if (be->ops->expert_tokens == NULL)
		return 0;
	return be->ops->expert_tokens(be->impl, out, n);
}

int64_t
medha_backend_free_blocks(struct medha_backend *be)
{
	if (be->ops->free_blocks == NULL)
		return MEDHA_EUNSUP;
	return be->ops->free_blocks(be->impl);
}

void
medha_backend_idle(struct medha_backend *be)
{
	if (be->ops->idle != NULL)
		be->ops->idle(be->impl);
}

void
medha_backend_close(struct medha_backend *be)
{
	if (be == NULL)
		return;
	be->ops->close(be->impl);
	free(be);
}

/* ---- for implementations ---- */

int
medha_backend_new(struct medha_backend **bep,
    const struct medha_backend_ops *ops, void *impl,
    const struct medha_backend_info *info)
{
	const struct medha_backend_kind *k;
	struct medha_backend *be;

	MEDHA_ASSERT(ops->seq_alloc != NULL && ops->seq_free != NULL &&
	    ops->forward != NULL && ops->close != NULL);
	*bep = NULL;
	if ((be = calloc(1, sizeof(*be))) == NULL)
		return MEDHA_ENOMEM;
	be->ops = ops;
	be->impl = impl;
	be->info = *info;
	if (be->info.caps == 0 && (k = medha_backend_find(info->name)) != NULL)
		be->info.caps = k->caps;
	*bep = be;
	return 0;
}

void
medha_backend_sample(const struct medha_batch *b, const float *logits,
    int vocab, struct medha_sampler *const *samplers, int32_t *tokens)
{
	int64_t row = 0;
	int32_t i;

	for (i = 0; i < b->n_seqs; i++) {
		const struct medha_batch_seq *s = &b->seq[i];
		int64_t last = s->logits == MEDHA_LOGITS_ALL ? s->n_tokens - 1
		    : s->logits == MEDHA_LOGITS_LAST         ? 0
		                                             : -1;
		tokens[i] = samplers[i] != NULL && last >= 0
		    ? medha_sample(samplers[i],
		          logits + (size_t)(row + last) * (size_t)vocab)
		    : -1;
		row += last + 1;
	}
}

size_t
medha_kvp_pair_floats(const struct medha_batch *b,
    const struct medha_batch_kv *kv, uint64_t mask, size_t row)
{
	size_t n = 0;

	for (int32_t e = 0; e < b->n_seqs; e++)
		if (kv[e].merge && (kv[e].groups & mask) == mask)
			n += (size_t)b->seq[e].n_tokens * row;
	return n;
}

void
medha_kvp_pack(const struct medha_batch *b, const struct medha_batch_kv *kv,
    uint64_t g, const float *out, const float *lse, size_t ro, size_t rl,
    float *p)
{
	size_t t0 = 0, nt;

	for (int32_t e = 0; e < b->n_seqs; e++, t0 += nt) {
		nt = (size_t)b->seq[e].n_tokens;
		if (!kv[e].merge || !(kv[e].groups & g))
			continue;
		memcpy(p, out + t0 * ro, nt * ro * sizeof(float));
		memcpy(p + nt * ro, lse + t0 * rl, nt * rl * sizeof(float));
		p += nt * (ro + rl);
	}
}

int
medha_kvp_exchange(const struct medha_batch *b,
    const struct medha_batch_kv *kv, const struct medha_comm *cm, int layer,
    const float *out, const float *lse, size_t ro, size_t rl, float **buf,
    size_t *cap, size_t *at, char *why, size_t whylen)
{
	const int kvp = cm->kvp, me = cm->kvp_rank;
	const uint64_t mine = (uint64_t)1 << me;
	size_t n[MEDHA_KVP_MAX];
	int g, rc;

	if (kvp < 1 || kvp > MEDHA_KVP_MAX || me < 0 || me >= kvp)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "KVP group %d of %d", me, kvp);
	/* at[g]: the parts exchanged with group g (ours: every sequence
	   merged); at[kvp]: a send buffer for the largest pair */
	at[0] = 0;
	for (g = 0; g < kvp; g++) {
		n[g] = medha_kvp_pair_floats(b, kv, mine | (uint64_t)1 << g,
		    ro + rl);
		at[g + 1] = at[g] + n[g];
	}
	if (at[kvp] * 2 > *cap) {
		void *p = medha_reallocarray(*buf, at[kvp] * 2, sizeof(float));
		if (p == NULL)
			return medha_why(why, whylen, MEDHA_ENOMEM,
			    "KVP merge: out of memory");
		*buf = p;
		*cap = at[kvp] * 2;
	}
	medha_kvp_pack(b, kv, mine, out, lse, ro, rl, *buf + at[me]);
	for (g = 0; g < kvp; g++) {
		float *sb = *buf + at[kvp];
		if (g == me || n[g] == 0)
			continue;
		medha_kvp_pack(b, kv, (uint64_t)1 << g, out, lse, ro, rl, sb);
		if ((rc = cm->exchange(cm->arg, layer, g, sb,
		         n[g] * sizeof(float), *buf + at[g],
		         n[g] * sizeof(float), MEDHA_MEM_HOST, why, whylen)) != 0)
			return rc;
	}
	return 0;
}
