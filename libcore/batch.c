/*
 * batch.c: the checks every backend makes of a batch against its own
 * paged cache (batch.h), so that cpu and cuda refuse the same calls with
 * the same reasons.
 */
#include "medha.h"
#include "batch.h"

#include <stdint.h>

/* KVP: where entry i's cache sequence starts, and whether it appends. */
static int64_t
base_of(const struct medha_batch_kv *kv, int i)
{
	return kv != NULL ? kv[i].base : 0;
}

static int
appends(const struct medha_batch_kv *kv, int i)
{
	return kv == NULL || kv[i].append;
}

int
medha_batch_check_cache(const struct medha_batch *b,
    const struct medha_batch_kv *kv, int64_t (*len_of)(const void *, int),
    const void *arg, unsigned char *seen, int claim, int lo, char *why,
    size_t whylen)
{
	const struct medha_batch_seq *s;
	int64_t sum = 0, len, lp;
	int i, rc = 0;

	for (i = 0; i < b->n_seqs && rc == 0; i++) {
		s = &b->seq[i];
		len = len_of(arg, s->seq);
		lp = s->pos - base_of(kv, i);
		if (len < 0)
			rc = medha_why(why, whylen, MEDHA_EINVAL,
			    "sequence %d (batch entry %d) is not allocated",
			    s->seq, i);
		else if (seen[s->seq])
			rc = medha_why(why, whylen, MEDHA_EINVAL,
			    "sequence %d appears twice in the batch", s->seq);
		else if (s->n_tokens < 1)
			rc = medha_why(why, whylen, MEDHA_EINVAL,
			    "sequence %d: %d tokens", s->seq, s->n_tokens);
		else if (s->pos < 0 || s->pos > INT32_MAX - s->n_tokens)
			rc = medha_why(why, whylen, MEDHA_EINVAL,
			    "sequence %d: position %lld out of range", s->seq,
			    (long long)s->pos);
		else if (lp < 0 || (appends(kv, i) ? lp > len : lp < len))
			rc = medha_why(why, whylen, MEDHA_EINVAL,
			    "sequence %d: position %lld but %lld cached from "
			    "%lld%s",
			    s->seq, (long long)s->pos, (long long)len,
			    (long long)base_of(kv, i),
			    appends(kv, i) ? "" : " (attending only)");
		else if (!claim && appends(kv, i) && lp + s->n_tokens > len)
			rc = medha_why(why, whylen, MEDHA_EINVAL,
			    "sequence %d: positions up to %lld not claimed "
			    "(%lld cached): run layer %d on this batch first",
			    s->seq, (long long)(lp + s->n_tokens),
			    (long long)len, lo);
		else if (s->logits < MEDHA_LOGITS_LAST ||
		    s->logits > MEDHA_LOGITS_NONE)
			rc = medha_why(why, whylen, MEDHA_EINVAL,
			    "sequence %d: logits mode %d", s->seq, s->logits);
		else
			seen[s->seq] = 1;
		sum += s->n_tokens > 0 ? s->n_tokens : 0;
	}
	for (i--; i >= 0; i--)
		if (len_of(arg, b->seq[i].seq) >= 0)
			seen[b->seq[i].seq] = 0;
	if (rc != 0)
		return rc;
	if (sum != b->n_tokens)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "sequences hold %lld tokens, batch has %d", (long long)sum,
		    b->n_tokens);
	return 0;
}
