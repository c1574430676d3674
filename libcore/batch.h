/*
 * batch.h: what one forward pass of a backend is given (doc/DESIGN.md
 * section 4): a flat list of tokens and, for each sequence with tokens in
 * it, where its tokens sit in that list, the KV cache sequence they
 * extend, the position of its first token and which logits it wants
 * back. Any mix of prefill chunks (many tokens) and decodes (one token)
 * of different sequences goes in one batch; a sequence appears at most
 * once.
 *
 * The tokens of sequence i are tokens[first_i .. first_i + n_tokens_i),
 * where first_i is the sum of n_tokens over the sequences before it. The
 * logits come back as rows of vocabulary size, sequence by sequence in
 * batch order: one row (its last token's) for MEDHA_LOGITS_LAST, one per
 * token for MEDHA_LOGITS_ALL, none for MEDHA_LOGITS_NONE (a prefill chunk
 * that is not its prompt's last).
 *
 *	int32_t tok[] = { 1, 2, 3, 4, 9 };
 *	struct medha_batch_seq s[] = {
 *		{ .seq = a, .pos = 0, .n_tokens = 4, .logits = MEDHA_LOGITS_LAST
 *}, { .seq = b, .pos = 57, .n_tokens = 1, .logits = MEDHA_LOGITS_LAST },
 *	};
 *	struct medha_batch b = { tok, 5, s, 2 };
 *	float *logits = calloc(medha_batch_logit_rows(&b) * vocab, 4);
 */
#ifndef MEDHA_BATCH_H
#define MEDHA_BATCH_H

#include <stddef.h>
#include <stdint.h>

/* ---- the paged KV cache every backend keeps ---- */

/*
 * Token positions per KV block: the block size a backend's cache uses
 * unless it says otherwise (info.block_size), and the scheduler's
 * default. A live scheduler takes the block size its workers announce.
 */
#define MEDHA_KV_BLOCK 16

/* The element type of a backend's KV cache (info.kv_type). */
enum medha_kv_type {
	MEDHA_KV_F32 = 0,
	MEDHA_KV_F16 = 1,
	MEDHA_KV_BF16 = 2, /* cuda only */
};

/* KVP groups of a replica, at most (batch_kv.groups has a bit each). */
#define MEDHA_KVP_MAX 64

/* ---- one forward pass's batch ---- */

enum medha_logits_mode {
	MEDHA_LOGITS_LAST = 0, /* the last token's row */
	MEDHA_LOGITS_ALL = 1,  /* a row for every token */
	MEDHA_LOGITS_NONE = 2, /* no row */
};

struct medha_batch_seq {
	int seq;          /* KV cache sequence handle (medha_kv_seq_alloc) */
	int64_t pos;      /* position of the first token; at most the
	                     sequence's cached length, which becomes pos +
	                     n_tokens (a smaller pos forgets the tail) */
	int32_t n_tokens; /* tokens of this sequence in the batch, >= 1 */
	int logits;       /* MEDHA_LOGITS_* */
};

struct medha_batch {
	const int32_t *tokens;             /* (n_tokens) token ids */
	int32_t n_tokens;                  /* sum of the sequences' n_tokens */
	const struct medha_batch_seq *seq; /* (n_seqs) */
	int32_t n_seqs;
};

/*
 * KVP (optional, one per sequence of a batch, given beside it): on one
 * KVP group, a sequence whose KV is cut into pieces held by several
 * groups. Its cache sequence holds this group's piece, the positions
 * [base, base + its length); the new tokens' K/V go into it (append) or
 * into another group's piece (attend only: the cached keys all come
 * before pos); and when other groups hold pieces (merge) its attention
 * output is merged with theirs before it goes on (the backend's
 * collectives). Positions (pos, RoPE, causality) stay the request's.
 */
struct medha_batch_kv {
	int64_t base;    /* the first position the cache sequence holds */
	int append;      /* 1: the new tokens are appended to it */
	int merge;       /* 1: other groups hold pieces to merge with */
	uint64_t groups; /* with merge: the KVP groups whose pieces are
	                    merged, this one's among them (bit g: group g;
	                    at most 64), for the collectives; else 0 */
};

/*
 * A batch's sequences against a backend's paged cache: each allocated
 * (len_of(arg, seq) >= 0, its cached length), once, with tokens, its
 * position within what it holds (counted from kv's base with KVP: a
 * sequence that only attends holds only keys before pos), its positions
 * claimed unless this call claims them (claim: it starts at the
 * backend's first layer, lo, which the reason names), a known logits
 * mode, and the sequences' tokens summing to the batch's. seen (a byte
 * per handle, all 0) is left all 0. 0 or MEDHA_EINVAL with why.
 */
int medha_batch_check_cache(const struct medha_batch *b,
    const struct medha_batch_kv *kv, int64_t (*len_of)(const void *, int),
    const void *arg, unsigned char *seen, int claim, int lo, char *why,
    size_t whylen);

/* Rows of logits a batch returns (see above). */
static inline int64_t
medha_batch_logit_rows(const struct medha_batch *b)
{
	int64_t n = 0;
	int32_t i;

	for (i = 0; i < b->n_seqs; i++)
		n += b->seq[i].logits == MEDHA_LOGITS_ALL   ? b->seq[i].n_tokens
		    : b->seq[i].logits == MEDHA_LOGITS_LAST ? 1
		                                            : 0;
	return n;
}

#endif
