/*
 * tok_impl.h: the inside of struct medha_tok, shared by tokenizer.c
 * (building it, decoding, chat templates) and tok_encode.c (encoding),
 * with the hash-table lookups both need, and the interface of the
 * pre-tokenizer (pretok.c). Not for callers: the API is tokenizer.h.
 */
#ifndef MEDHA_TOK_IMPL_H
#define MEDHA_TOK_IMPL_H

#include <stdint.h>
#include <string.h>

#include "tok/tokenizer.h"

/*
 * Bytes an "[UNK_BYTE_0x..]" piece may hold, and all such pieces
 * together beyond their text (make_pieces): llama.cpp's pieces of a
 * malformed token grow with the square of its length.
 */
#define MEDHA_TOK_PIECE_MAX (64 << 10)
#define MEDHA_TOK_EXTRA_MAX (16 << 20)

/* llama_token_attr bits, as llama.cpp numbers them; EOG is ours. */
enum {
	A_UNKNOWN = 1 << 0,
	A_UNUSED = 1 << 1,
	A_NORMAL = 1 << 2,
	A_CONTROL = 1 << 3,
	A_USER = 1 << 4,
	A_BYTE = 1 << 5,
	A_EOG = 1 << 15,
};

enum { K_BPE, K_SPM };
enum { CHAT_NONE, CHAT_CHATML, CHAT_LLAMA3 };

struct medha_jinja; /* template/jinja.h */

struct smap {           /* string -> int32, keys in the owner's arena */
	uint32_t *slot; /* (mask + 1) entry index + 1; 0 = empty */
	size_t mask;
	size_t *off; /* (n) key offsets in the arena */
	uint32_t *len;
	int32_t *val;
	size_t n;
};

struct pmap {          /* (left id, right id) -> (rank, merged id or -1) */
	uint64_t *key; /* (mask + 1) pair + 1; 0 = empty */
	int32_t *rank, *res;
	size_t mask;
};

struct medha_tok {
	int kind;     /* K_BPE or K_SPM */
	char pre[64]; /* tokenizer.ggml.pre as given ("" if none) */
	int ignore_merges;
	size_t n_vocab;
	char *arena; /* token text, then merge keys, then pieces */
	size_t arena_n, arena_cap;
	struct smap vocab; /* entry i is token i */
	struct smap mstr;  /* "left right" -> rank, the rest of the merges */
	struct pmap merges;
	float *score;   /* (n_vocab) SPM scores */
	uint16_t *attr; /* (n_vocab) A_* */
	size_t *poff;   /* (n_vocab) piece offsets in the arena */
	uint32_t *plen;
	int32_t *special; /* ids to cut out of text, longest text first */
	size_t nspecial;
	int32_t bos, eos, unk;
	int add_bos, add_eos, add_space_prefix;
	int chat;
	struct medha_jinja *tmpl; /* the file's chat template, parsed, or
	                             NULL (none, or not one it can read) */
	struct medha_pretok *pt;
};

static inline uint64_t
tok_hash(const char *s, size_t n)
{
	uint64_t h = 0x9e3779b97f4a7c15ull ^ (n * 0xff51afd7ed558ccdull), x;

	for (; n >= 8; s += 8, n -= 8) {
		memcpy(&x, s, 8);
		h = (h ^ x) * 0xbf58476d1ce4e5b9ull;
		h ^= h >> 31;
	}
	x = 0;
	memcpy(&x, s, n);
	h = (h ^ x) * 0x94d049bb133111ebull;
	return h ^ (h >> 29);
}

/* Slot of s (found, or the empty one where it would go). */
static inline size_t
smap_find(const struct smap *m, const char *arena, const char *s, size_t n)
{
	size_t i = (size_t)tok_hash(s, n) & m->mask;
	uint32_t e;

	while ((e = m->slot[i]) != 0) {
		if (m->len[e - 1] == n &&
		    memcmp(arena + m->off[e - 1], s, n) == 0)
			break;
		i = (i + 1) & m->mask;
	}
	return i;
}

static inline int32_t
smap_get(const struct smap *m, const char *arena, const char *s, size_t n)
{
	uint32_t e = m->slot[smap_find(m, arena, s, n)];

	return e ? m->val[e - 1] : -1;
}

static inline size_t
pmap_find(const struct pmap *m, uint64_t key)
{
	size_t i = (size_t)((key * 0x9e3779b97f4a7c15ull) >> 20) & m->mask;

	while (m->key[i] != 0 && m->key[i] != key)
		i = (i + 1) & m->mask;
	return i;
}

static inline uint64_t
pkey(int32_t a, int32_t b)
{
	return ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
}

static inline int32_t
lookup(const struct medha_tok *t, const char *s, size_t n)
{
	return smap_get(&t->vocab, t->arena, s, n);
}

/*
 * The pre-tokenizer (pretok.c).
 * medha_pretok_new compiles the regexes of one kind; medha_pretok_split
 * decodes len bytes as llama.cpp does (bad bytes -> U+FFFD), splits them
 * and calls fn once per piece with the piece's bytes already mapped to
 * byte-level BPE code points (UTF-8), stopping at fn's first non-zero
 * return, which it returns.
 */
enum medha_pretok_kind {
	MEDHA_PRETOK_DEFAULT,
	MEDHA_PRETOK_GPT2,
	MEDHA_PRETOK_LLAMA3,
	MEDHA_PRETOK_SMOLLM, /* \p{N} first, then gpt2 (starcoder family) */
	MEDHA_PRETOK_QWEN2,
};
struct medha_pretok;
int
medha_pretok_new(struct medha_pretok **p, int kind, char *why, size_t whylen);
void medha_pretok_free(struct medha_pretok *p);
int medha_pretok_split(const struct medha_pretok *p, const char *text,
    size_t len, int (*fn)(void *arg, const char *word, size_t wlen), void *arg);

#endif
