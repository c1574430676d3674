/*
 * tokenizer.c: byte-level BPE and SentencePiece-style tokenizers built
 * from a GGUF file's metadata, following llama.cpp (src/llama-vocab.cpp)
 * step for step so that the ids agree: the same defaults when a key is
 * missing, the same special-token cut (each special token, longest text
 * first, is cut out of every remaining stretch of text), the same merge
 * order (lowest rank, then leftmost; highest score for SPM), the same
 * byte fallbacks and the same detokenized pieces.
 *
 * Lookups are open-addressing hash tables over one arena of token text:
 * token text -> id, and (left id, right id) -> (rank, merged id) for the
 * merges whose halves are both tokens (all of them in a sane vocabulary;
 * the others are kept by text). Encoding is in tok_encode.c, the
 * pre-tokenizer's regexes in pretok.c, the shared structures in
 * tok_impl.h.
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "medha.h"
#include "template/jinja.h"
#include "tok/tok_impl.h"

/* ---------------------------------------------------------------- tables */

static int
smap_init(struct smap *m, size_t n)
{
	size_t cap = 16;

	while (cap < 2 * n)
		cap *= 2;
	m->mask = cap - 1;
	m->slot = medha_calloc(cap, sizeof(*m->slot));
	m->off = medha_reallocarray(NULL, n + 1, sizeof(*m->off));
	m->len = medha_reallocarray(NULL, n + 1, sizeof(*m->len));
	m->val = medha_reallocarray(NULL, n + 1, sizeof(*m->val));
	m->n = 0;
	return m->slot && m->off && m->len && m->val ? 0 : MEDHA_ENOMEM;
}

static void
smap_free(struct smap *m)
{
	free(m->slot);
	free(m->off);
	free(m->len);
	free(m->val);
}

/* Add the key at arena[off], len n, unless present (*dup = 1 then). */
static void
smap_put(struct smap *m, const char *arena, size_t off, size_t n, int32_t val,
    int *dup)
{
	size_t i = smap_find(m, arena, arena + off, n);

	*dup = m->slot[i] != 0;
	if (*dup)
		return;
	m->off[m->n] = off;
	m->len[m->n] = (uint32_t)n;
	m->val[m->n] = val;
	m->slot[i] = (uint32_t)++m->n;
}

/* Append n bytes to the arena; their offset in *off. */
static int
arena_add(struct medha_tok *t, const void *s, size_t n, size_t *off)
{
	if (t->arena_cap - t->arena_n < n) {
		size_t cap = t->arena_cap ? t->arena_cap : 1 << 16;
		char *a;

		while (cap - t->arena_n < n)
			cap *= 2;
		if ((a = realloc(t->arena, cap)) == NULL)
			return MEDHA_ENOMEM;
		t->arena = a;
		t->arena_cap = cap;
	}
	memcpy(t->arena + t->arena_n, s, n);
	*off = t->arena_n;
	t->arena_n += n;
	return 0;
}

/* ---------------------------------------------------------------- loading */

struct load {
	struct medha_tok *t;
	char *why;
	size_t whylen;
	int rc;
	char *buf; /* scratch for merged text */
	size_t cap;
};

static int
load_token(void *arg, uint64_t i, const char *s, size_t len)
{
	struct load *l = arg;
	struct medha_tok *t = l->t;
	char buf[32];
	size_t off;
	int dup;

	len = strnlen(s, len); /* llama.cpp reads C strings: NUL ends it */
	if (len == 0) {        /* and renames empty tokens */
		len = (size_t)snprintf(buf, sizeof(buf), "[EMPTY_%llu]",
		    (unsigned long long)i);
		s = buf;
	}
	if (len > UINT32_MAX || arena_add(t, s, len, &off) != 0)
		return l->rc = MEDHA_ENOMEM;
	smap_put(&t->vocab, t->arena, off, len, (int32_t)i, &dup);
	if (dup)
		return l->rc = medha_why(l->why, l->whylen, MEDHA_EFORMAT,
		           "token %llu duplicates token %d",
		           (unsigned long long)i,
		           smap_get(&t->vocab, t->arena, t->arena + off, len));
	return 0;
}

static int
load_merge(void *arg, uint64_t i, const char *s, size_t len)
{
	struct load *l = arg;
	struct medha_tok *t = l->t;
	const char *sp;
	size_t off, k, la;
	int32_t a = -1, b = -1;
	int dup;

	len = strnlen(s, len); /* a C string in llama.cpp too */
	sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
	if (i > INT32_MAX)
		return l->rc = MEDHA_EFORMAT;
	if (sp != NULL) {
		la = (size_t)(sp - s);
		a = lookup(t, s, la);
		b = lookup(t, sp + 1, len - la - 1);
	}
	if (a >= 0 && b >= 0) {
		k = pmap_find(&t->merges, pkey(a, b));
		if (t->merges.key[k] != 0)
			return 0; /* the first rank wins, as in llama.cpp */
		t->merges.key[k] = pkey(a, b);
		t->merges.rank[k] = (int32_t)i;
		if (len > l->cap) {
			char *m = realloc(l->buf, len);

			if (m == NULL)
				return l->rc = MEDHA_ENOMEM;
			l->buf = m;
			l->cap = len;
		}
		memcpy(l->buf, s, la);
		memcpy(l->buf + la, sp + 1, len - la - 1);
		t->merges.res[k] = lookup(t, l->buf, len - 1);
		return 0;
	}
	if (sp == NULL)
		len = 1, s = " "; /* llama.cpp keys it ("", "") */
	if (arena_add(t, s, len, &off) != 0)
		return l->rc = MEDHA_ENOMEM;
	smap_put(&t->mstr, t->arena, off, len, (int32_t)i, &dup);
	return 0;
}

/* The name lists llama.cpp uses to find end-of-generation tokens. */
static const char *const eog_names[] = {"<|eot_id|>", "<|im_end|>", "<|end|>",
    "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
    "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>",
    "<|tool_response>",
    "<\xef\xbd\x9c"
    "end\xe2\x96\x81of\xe2\x96\x81sentence"
    "\xef\xbd\x9c>",
    "[e~[", NULL};

/* FIM tokens: the key that names each, and the texts found otherwise. */
static const struct {
	const char *key, *key2;
	int eog;
	const char *names[9];
} fim[] = {
    {"tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.prefix_token_id", 0,
        {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
            "<\xef\xbd\x9c"
            "fim\xe2\x96\x81"
            "begin\xef\xbd\x9c>",
            "<PRE>", "\xe2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>",
            NULL}},
    {"tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.suffix_token_id", 0,
        {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
            "<\xef\xbd\x9c"
            "fim\xe2\x96\x81hole\xef\xbd\x9c>",
            "<SUF>", "\xe2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>",
            NULL}},
    {"tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.middle_token_id", 0,
        {"<|fim_middle|>", "<fim-middle>", "<fim_middle>",
            "<\xef\xbd\x9c"
            "fim\xe2\x96\x81"
            "end\xef\xbd\x9c>",
            "<MID>", "\xe2\x96\x81<MID>", "<|code_middle|>", "<|middle|>",
            NULL}},
    {"tokenizer.ggml.fim_pad_token_id", NULL, 1,
        {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", NULL}},
    {"tokenizer.ggml.fim_rep_token_id", NULL, 1,
        {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>",
            NULL}},
    {"tokenizer.ggml.fim_sep_token_id", NULL, 1, {"<|file_sep|>", NULL}},
};

/* A special token id from key: def if absent or out of range. */
static int32_t
special_id(const struct medha_tok *t, const struct medha_gguf *g,
    const char *key, int32_t def)
{
	uint64_t v;

	if (def >= 0 && (size_t)def >= t->n_vocab)
		def = -1;
	if (key == NULL || medha_gguf_get_u64(g, key, &v) != 0 ||
	    v >= t->n_vocab)
		return def;
	return (int32_t)v;
}

static int32_t
lookup_str(const struct medha_tok *t, const char *s)
{
	return lookup(t, s, strlen(s));
}

/* Token attributes: token_type, then llama.cpp's by-name adjustments. */
static int
load_attrs(struct medha_tok *t, const struct medha_gguf *g, char *why,
    size_t whylen)
{
	static const uint16_t bytype[] = {0, A_NORMAL, A_UNKNOWN, A_CONTROL,
	    A_USER, A_UNUSED, A_BYTE};
	static const char *const oss[] = {"<|channel|>", "<|message|>",
	    "<|start|>", "<|constrain|>", NULL};
	int32_t *tt = NULL, id, fid;
	uint64_t n;
	size_t i, j;
	int rc;

	if ((t->attr = medha_calloc(t->n_vocab, sizeof(*t->attr))) == NULL)
		return MEDHA_ENOMEM;
	rc = medha_gguf_arr_len(g, "tokenizer.ggml.token_type", &n, NULL);
	if (rc == 0) {
		if (n < t->n_vocab)
			return medha_why(why, whylen, MEDHA_EFORMAT,
			    "token_type has %llu entries for %zu tokens",
			    (unsigned long long)n, t->n_vocab);
		if ((tt = medha_reallocarray(NULL, n, sizeof(*tt))) == NULL)
			return MEDHA_ENOMEM;
		if ((rc = medha_gguf_arr_i32(g, "tokenizer.ggml.token_type", tt,
		         n)) != 0) {
			free(tt);
			return medha_why(why, whylen, rc,
			    "tokenizer.ggml.token_type: %s",
			    medha_strerror(rc));
		}
	}
	for (i = 0; i < t->n_vocab; i++)
		t->attr[i] = tt == NULL        ? A_NORMAL
		    : tt[i] >= 0 && tt[i] <= 6 ? bytype[tt[i]]
		                               : 0;
	free(tt);
	for (i = 0; eog_names[i] != NULL; i++)
		if ((id = lookup_str(t, eog_names[i])) >= 0)
			t->attr[id] |= A_CONTROL | A_EOG;
	for (i = 0; i < sizeof(fim) / sizeof(fim[0]); i++) {
		fid = special_id(t, g, fim[i].key, -1);
		if (fid < 0)
			fid = special_id(t, g, fim[i].key2, -1);
		for (j = 0; fid < 0 && fim[i].names[j] != NULL; j++)
			if ((id = lookup_str(t, fim[i].names[j])) >= 0) {
				t->attr[id] |= A_CONTROL;
				fid = id;
			}
		if (fid >= 0 && fim[i].eog)
			t->attr[fid] |= A_EOG;
	}
	for (i = 0; oss[i] != NULL; i++)
		if ((id = lookup_str(t, oss[i])) >= 0)
			t->attr[id] = A_USER;
	return 0;
}

static int
cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* ---------------------------------------------------------------- pieces */

/* Code point bytes_to_unicode gives byte b. */
static uint32_t
byte_cp(int b)
{
	int j, n = 0;

	if ((b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae)
		return (uint32_t)b;
	for (j = 0; j < b; j++)
		if (!((j >= 0x21 && j <= 0x7e) || (j >= 0xa1 && j <= 0xac) ||
		        j >= 0xae))
			n++;
	return 256u + (uint32_t)n;
}

/*
 * llama_decode_text: token text (byte-level code points) back to bytes;
 * a code point bytes_to_unicode never makes gives "[UNK_BYTE_0x..]"
 * followed by the whole token text, as llama.cpp writes it: a piece can
 * be quadratic in its text's length. With out NULL only the length is
 * counted, so that the caller can size (and bound) the piece first.
 */
static size_t
bpe_piece(const int16_t *inv, const unsigned char *s, size_t len, char *out)
{
	size_t i, j, adv, k = 0;
	uint32_t c;

	for (i = 0; i < len; i += adv) {
		adv = (s[i] & 0xe0) == 0xc0 ? 2
		    : (s[i] & 0xf0) == 0xe0 ? 3
		    : (s[i] & 0xf8) == 0xf0 ? 4
		                            : 1;
		for (j = 1; j < adv; j++)
			if (i + j >= len || (s[i + j] & 0xc0) != 0x80)
				adv = 1;
		c = adv == 1 ? (s[i] < 0x80 ? s[i] : 0xfffd)
		    : adv == 2
		    ? (uint32_t)(s[i] & 0x1f) << 6 | (s[i + 1] & 0x3f)
		    : 0xfffd;
		if (c < 324 && inv[c] >= 0) {
			if (out != NULL)
				out[k] = (char)inv[c];
			k++;
			continue;
		}
		if (out == NULL) {
			k += 12 + 2 * adv + len + 1;
			continue;
		}
		k += (size_t)sprintf(out + k, "[UNK_BYTE_0x");
		for (j = 0; j < adv; j++)
			k += (size_t)sprintf(out + k, "%02x", s[i + j]);
		memcpy(out + k, s, len);
		k += len;
		out[k++] = ']';
	}
	return k;
}

static int
hexbyte(const char *s, size_t len)
{
	char h[3] = {0, 0, 0};

	if (len < 5)
		return 0;
	h[0] = s[3];
	h[1] = s[4];
	return (int)(strtol(h, NULL, 16) & 0xff);
}

/*
 * Every token's bytes, as llama.cpp's token_to_piece(special=true). A
 * piece is at most its text's length but for "[UNK_BYTE_0x..]" pieces
 * (see bpe_piece): those may not pass MEDHA_TOK_PIECE_MAX, so that a
 * long token of unknown code points is a format error, not a
 * quadratic allocation.
 */
static int
make_pieces(struct medha_tok *t, char *why, size_t whylen)
{
	size_t i, n, k, len, need, cap = 0, extra = 0;
	char *buf = NULL, *p;
	const char *s;
	int16_t inv[324];
	int rc = 0, b;

	for (b = 0; b < 324; b++)
		inv[b] = -1;
	for (b = 0; b < 256; b++)
		inv[byte_cp(b)] = (int16_t)b;

	t->poff = medha_reallocarray(NULL, t->n_vocab, sizeof(*t->poff));
	t->plen = medha_reallocarray(NULL, t->n_vocab, sizeof(*t->plen));
	if (t->poff == NULL || t->plen == NULL)
		return medha_why(why, whylen, MEDHA_ENOMEM, "out of memory");
	for (i = 0; i < t->n_vocab && rc == 0; i++) {
		len = need = t->vocab.len[i];
		s = t->arena + t->vocab.off[i];
		if ((t->attr[i] & A_NORMAL) && t->kind == K_BPE &&
		    (need = bpe_piece(inv, (const unsigned char *)s, len,
		         NULL)) > len &&
		    (need > MEDHA_TOK_PIECE_MAX ||
		        (extra += need - len) > MEDHA_TOK_EXTRA_MAX)) {
			rc = medha_why(why, whylen, MEDHA_EFORMAT,
			    "token %zu: %zu bytes of text with code points "
			    "no byte maps to would decode to %zu bytes "
			    "(at most %d, and %d for all such tokens)",
			    i, len, need, MEDHA_TOK_PIECE_MAX,
			    MEDHA_TOK_EXTRA_MAX);
			break;
		}
		if (cap < need + 64) {
			cap = need + 64;
			if ((p = realloc(buf, cap)) == NULL) {
				rc = medha_why(why, whylen, MEDHA_ENOMEM,
				    "out of memory");
				break;
			}
			buf = p;
		}
		n = 0;
		if (t->attr[i] & (A_UNKNOWN | A_CONTROL | A_USER)) {
			memcpy(buf, s, len);
			n = len;
		} else if ((t->attr[i] & A_NORMAL) && t->kind == K_BPE) {
			n = bpe_piece(inv, (const unsigned char *)s, len, buf);
		} else if (t->attr[i] & A_NORMAL) {
			for (k = 0; k < len; k++)
				if (k + 2 < len &&
				    memcmp(s + k, "\xe2\x96\x81", 3) == 0) {
					buf[n++] = ' ';
					k += 2;
				} else
					buf[n++] = s[k];
		} else if (t->attr[i] & A_BYTE) {
			buf[0] = (char)hexbyte(s, len);
			n = 1;
		}
		t->plen[i] = (uint32_t)n;
		if ((rc = arena_add(t, buf, n, &t->poff[i])) != 0)
			medha_why(why, whylen, rc, "out of memory");
	}
	free(buf);
	return rc;
}

/* ---------------------------------------------------------------- open */

/* tokenizer.ggml.pre -> regexes and the defaults llama.cpp sets with it. */
static const struct {
	const char *name;
	int kind, ignore_merges, add_bos, no_bos;
} pres[] = {
    {"default", MEDHA_PRETOK_DEFAULT, 0, 0, 0},
    {"llama3", MEDHA_PRETOK_LLAMA3, 1, 1, 0},
    {"llama-v3", MEDHA_PRETOK_LLAMA3, 1, 1, 0},
    {"llama-bpe", MEDHA_PRETOK_LLAMA3, 1, 1, 0},
    {"falcon3", MEDHA_PRETOK_LLAMA3, 1, 1, 0},
    {"falcon-h1", MEDHA_PRETOK_LLAMA3, 1, 1, 0},
    {"pixtral", MEDHA_PRETOK_LLAMA3, 1, 1, 0},
    {"midm-2.0", MEDHA_PRETOK_LLAMA3, 1, 1, 0},
    {"lfm2", MEDHA_PRETOK_LLAMA3, 1, 1, 0},
    {"dbrx", MEDHA_PRETOK_LLAMA3, 0, 0, 0},
    {"smaug-bpe", MEDHA_PRETOK_LLAMA3, 0, 0, 0},
    {"glm4", MEDHA_PRETOK_LLAMA3, 0, 0, 1},
    {"chatglm-bpe", MEDHA_PRETOK_LLAMA3, 0, 0, 1},
    {"gpt-2", MEDHA_PRETOK_GPT2, 0, 0, 0},
    {"phi-2", MEDHA_PRETOK_GPT2, 0, 0, 0},
    {"mpt", MEDHA_PRETOK_GPT2, 0, 0, 0},
    {"olmo", MEDHA_PRETOK_GPT2, 0, 0, 0},
    {"jais", MEDHA_PRETOK_GPT2, 0, 0, 0},
    {"exaone4", MEDHA_PRETOK_GPT2, 0, 0, 0},
    {"smollm", MEDHA_PRETOK_SMOLLM, 0, 0, 0},
    {"starcoder", MEDHA_PRETOK_SMOLLM, 0, 0, 0},
    {"refact", MEDHA_PRETOK_SMOLLM, 0, 0, 0},
    {"command-r", MEDHA_PRETOK_SMOLLM, 0, 0, 0},
    {"codeshell", MEDHA_PRETOK_SMOLLM, 0, 0, 0},
    {"exaone", MEDHA_PRETOK_SMOLLM, 0, 0, 0},
    {"minerva-7b", MEDHA_PRETOK_SMOLLM, 0, 0, 0},
    {"qwen2", MEDHA_PRETOK_QWEN2, 0, 0, 0},
    {"deepseek-r1-qwen", MEDHA_PRETOK_QWEN2, 0, 0, 0},
    {"stablelm2", MEDHA_PRETOK_QWEN2, 0, 0, 0},
    {"megrez", MEDHA_PRETOK_QWEN2, 0, 0, 0},
};

static int
chat_detect(const struct medha_gguf *g)
{
	static const char *const other[] = {"<|assistant|>", "[gMASK]",
	    "<|user|>", "<start_of_turn>", "GPT4 Correct ",
	    "USER: ", "### Instruction:", "<|START_OF_TURN_TOKEN|>", "[INST]",
	    NULL};
	const char *s;
	char *c;
	size_t len, i;
	int kind = CHAT_NONE;

	if (medha_gguf_get_str(g, "tokenizer.chat_template", &s, &len) != 0)
		return CHAT_CHATML; /* llama.cpp's tools fall back to it */
	if ((c = malloc(len + 1)) == NULL)
		return CHAT_NONE;
	memcpy(c, s, len);
	c[len] = '\0';
	if (strcmp(c, "chatml") == 0 ||
	    (strstr(c, "<|im_start|>") && !strstr(c, "<|im_sep|>") &&
	        !strstr(c, "<end_of_utterance>")))
		kind = CHAT_CHATML;
	else if (strcmp(c, "llama3") == 0 ||
	    (strstr(c, "<|start_header_id|>") &&
	        strstr(c, "<|end_header_id|>") && strncmp(c, "mistral", 7))) {
		kind = CHAT_LLAMA3;
		for (i = 0; other[i] != NULL; i++)
			if (strstr(c, other[i]))
				kind = CHAT_NONE;
	}
	free(c);
	return kind;
}

/*
 * The file's chat template as Jinja, or NULL when it has none, names a
 * built-in layout ("chatml"), or is one this renderer cannot read (the
 * recognised layouts then stand in, as before).
 */
static struct medha_jinja *
chat_parse(const struct medha_gguf *g)
{
	struct medha_jinja *j = NULL;
	const char *s;
	char why[256];
	size_t len;

	if (medha_gguf_get_str(g, "tokenizer.chat_template", &s, &len) != 0 ||
	    memchr(s, '{', len) == NULL)
		return NULL;
	if (medha_jinja_parse(&j, s, len, why, sizeof(why)) != 0) {
		medha_log(MEDHA_LOG_INFO, "chat template: %s", why);
		return NULL;
	}
	return j;
}

static int
open_vocab(struct medha_tok *t, const struct medha_gguf *g, char *why,
    size_t whylen)
{
	struct load l = {t, why, whylen, 0, NULL, 0};
	uint64_t n, v;
	int rc;

	rc = medha_gguf_arr_len(g, "tokenizer.ggml.tokens", &n, NULL);
	if (rc != 0)
		return medha_why(why, whylen, rc, "tokenizer.ggml.tokens: %s",
		    medha_strerror(rc));
	if (n == 0 || n > INT32_MAX)
		return medha_why(why, whylen, MEDHA_EFORMAT,
		    "tokenizer.ggml.tokens has %llu entries",
		    (unsigned long long)n);
	t->n_vocab = (size_t)n;
	if ((rc = smap_init(&t->vocab, t->n_vocab)) != 0)
		return rc;
	rc = medha_gguf_arr_strings(g, "tokenizer.ggml.tokens", load_token, &l);
	if (rc != 0)
		return l.rc
		    ? l.rc
		    : medha_why(why, whylen, rc, "tokenizer.ggml.tokens: %s",
		          medha_strerror(rc));
	if (medha_gguf_arr_len(g, "tokenizer.ggml.scores", &n, NULL) == 0) {
		if (n < t->n_vocab)
			return medha_why(why, whylen, MEDHA_EFORMAT,
			    "scores has %llu entries for %zu tokens",
			    (unsigned long long)n, t->n_vocab);
		if ((t->score = medha_reallocarray(NULL, n, sizeof(float))) ==
		    NULL)
			return MEDHA_ENOMEM;
		if ((rc = medha_gguf_arr_f32(g, "tokenizer.ggml.scores",
		         t->score, n)) != 0)
			return medha_why(why, whylen, rc,
			    "tokenizer.ggml.scores: %s", medha_strerror(rc));
	}
	if (t->kind == K_BPE) {
		rc = medha_gguf_arr_len(g, "tokenizer.ggml.merges", &n, NULL);
		if (rc != 0)
			return medha_why(why, whylen, rc,
			    "tokenizer.ggml.merges: %s", medha_strerror(rc));
		t->merges.mask = 15;
		while (t->merges.mask + 1 < 2 * n)
			t->merges.mask = 2 * t->merges.mask + 1;
		t->merges.key = medha_calloc(t->merges.mask + 1, 8);
		t->merges.rank = medha_calloc(t->merges.mask + 1, 4);
		t->merges.res = medha_calloc(t->merges.mask + 1, 4);
		if (!t->merges.key || !t->merges.rank || !t->merges.res ||
		    smap_init(&t->mstr, (size_t)n) != 0)
			return MEDHA_ENOMEM;
		rc = medha_gguf_arr_strings(g, "tokenizer.ggml.merges",
		    load_merge, &l);
		free(l.buf);
		if (rc != 0)
			return l.rc ? l.rc
			            : medha_why(why, whylen, rc,
			                  "tokenizer.ggml.merges: %s",
			                  medha_strerror(rc));
	}
	if ((rc = load_attrs(t, g, why, whylen)) != 0)
		return rc;
	if (medha_gguf_get_u64(g, "tokenizer.ggml.add_bos_token", &v) == 0)
		t->add_bos = v != 0;
	if (medha_gguf_get_u64(g, "tokenizer.ggml.add_eos_token", &v) == 0)
		t->add_eos = v != 0;
	if (medha_gguf_get_u64(g, "tokenizer.ggml.add_space_prefix", &v) == 0)
		t->add_space_prefix = v != 0;
	return 0;
}

int
medha_tok_open(struct medha_tok **tp, const struct medha_gguf *g, char *why,
    size_t whylen)
{
	struct medha_tok *t;
	uint64_t *order;
	char model[32];
	size_t i, k;
	int32_t id;
	int rc, pk = MEDHA_PRETOK_DEFAULT, no_bos = 0;

	*tp = NULL;
	rc = medha_gguf_get_strbuf(g, "tokenizer.ggml.model", model,
	    sizeof(model));
	if (rc != 0)
		return medha_why(why, whylen, rc, "tokenizer.ggml.model: %s",
		    medha_strerror(rc));
	if ((t = medha_calloc(1, sizeof(*t))) == NULL)
		return medha_why(why, whylen, MEDHA_ENOMEM, "out of memory");
	t->unk = -1;
	if (strcmp(model, "gpt2") == 0) {
		t->kind = K_BPE;
		(void)medha_gguf_get_strbuf(g, "tokenizer.ggml.pre", t->pre,
		    sizeof(t->pre));
		for (i = 0; i < sizeof(pres) / sizeof(pres[0]); i++)
			if (strcmp(t->pre[0] ? t->pre : "default",
			        pres[i].name) == 0)
				break;
		if (i == sizeof(pres) / sizeof(pres[0])) {
			rc = medha_why(why, whylen, MEDHA_EUNSUP,
			    "pre-tokenizer \"%s\" not supported", t->pre);
			goto fail;
		}
		pk = pres[i].kind;
		t->ignore_merges = pres[i].ignore_merges;
		t->add_bos = pres[i].add_bos;
		no_bos = pres[i].no_bos;
	} else if (strcmp(model, "llama") == 0) {
		t->kind = K_SPM;
		t->add_bos = t->add_space_prefix = 1;
	} else {
		rc = medha_why(why, whylen, MEDHA_EUNSUP,
		    "tokenizer model \"%s\" not supported", model);
		goto fail;
	}
	if ((rc = open_vocab(t, g, why, whylen)) != 0)
		goto fail;
	if (t->kind == K_SPM) {
		t->bos = special_id(t, g, "tokenizer.ggml.bos_token_id", 1);
		t->eos = special_id(t, g, "tokenizer.ggml.eos_token_id", 2);
		t->unk = special_id(t, g, "tokenizer.ggml.unknown_token_id", 0);
		if (t->score == NULL)
			t->score = medha_calloc(t->n_vocab, sizeof(float));
	} else {
		t->bos = special_id(t, g, "tokenizer.ggml.bos_token_id",
		    no_bos ? -1 : 11);
		t->eos = special_id(t, g, "tokenizer.ggml.eos_token_id", 11);
		t->unk =
		    special_id(t, g, "tokenizer.ggml.unknown_token_id", -1);
		if ((rc = medha_pretok_new(&t->pt, pk, why, whylen)) != 0)
			goto fail;
	}
	if ((t->add_bos && t->bos < 0) || (t->add_eos && t->eos < 0)) {
		rc = medha_why(why, whylen, MEDHA_EFORMAT,
		    "add_bos/add_eos is set but the token id is not");
		goto fail;
	}
	if (t->eos >= 0)
		t->attr[t->eos] |= A_EOG;
	id = special_id(t, g, "tokenizer.ggml.eot_token_id", -1);
	if (id >= 0)
		t->attr[id] |= A_EOG;
	id = special_id(t, g, "tokenizer.ggml.eom_token_id", -1);
	if (id >= 0)
		t->attr[id] |= A_EOG;
	t->special = medha_reallocarray(NULL, t->n_vocab, sizeof(int32_t));
	if (t->special == NULL || (t->kind == K_SPM && t->score == NULL)) {
		rc = medha_why(why, whylen, MEDHA_ENOMEM, "out of memory");
		goto fail;
	}
	for (i = k = 0; i < t->n_vocab; i++)
		if (t->attr[i] & (A_CONTROL | A_USER | A_UNKNOWN))
			t->special[k++] = (int32_t)i;
	t->nspecial = k;
	/* longest text first, then lowest id */
	if ((order = medha_reallocarray(NULL, k + 1, 8)) == NULL) {
		rc = medha_why(why, whylen, MEDHA_ENOMEM, "out of memory");
		goto fail;
	}
	for (i = 0; i < k; i++)
		order[i] = (uint64_t)(UINT32_MAX - t->vocab.len[t->special[i]])
		        << 32 |
		    (uint32_t)t->special[i];
	qsort(order, k, sizeof(*order), cmp_u64);
	for (i = 0; i < k; i++)
		t->special[i] = (int32_t)(order[i] & 0xffffffffu);
	free(order);
	if ((rc = make_pieces(t, why, whylen)) != 0)
		goto fail;
	t->chat = chat_detect(g);
	t->tmpl = chat_parse(g);
	*tp = t;
	return 0;
fail:
	medha_tok_close(t);
	return rc;
}

void
medha_tok_close(struct medha_tok *t)
{
	if (t == NULL)
		return;
	medha_pretok_free(t->pt);
	medha_jinja_free(t->tmpl);
	smap_free(&t->vocab);
	smap_free(&t->mstr);
	free(t->merges.key);
	free(t->merges.rank);
	free(t->merges.res);
	free(t->arena);
	free(t->score);
	free(t->attr);
	free(t->poff);
	free(t->plen);
	free(t->special);
	free(t);
}

/* ---------------------------------------------------------------- decode */

int
medha_tok_piece(const struct medha_tok *t, int32_t id, const char **s,
    size_t *len)
{
	if (id < 0 || (size_t)id >= t->n_vocab)
		return MEDHA_EINVAL;
	*s = t->arena + t->poff[id];
	*len = t->plen[id];
	return 0;
}

int
medha_tok_decode(const struct medha_tok *t, const int32_t *ids, size_t n,
    int flags, char *buf, size_t bufsz, size_t *outlen)
{
	size_t i, k = 0, m;
	const char *s;

	for (i = 0; i < n; i++) {
		if (medha_tok_piece(t, ids[i], &s, &m) != 0)
			return MEDHA_EINVAL;
		if (!(flags & MEDHA_TOK_SPECIAL_TEXT) &&
		    (t->attr[ids[i]] & (A_CONTROL | A_UNKNOWN)))
			continue;
		if (i == 0 && (flags & MEDHA_TOK_STRIP_SPACE) &&
		    t->add_space_prefix && m > 0 && s[0] == ' ') {
			s++;
			m--;
		}
		if (k < bufsz)
			memcpy(buf + k, s, m < bufsz - k ? m : bufsz - k);
		k += m;
	}
	*outlen = k;
	return k <= bufsz ? 0 : MEDHA_ENOSPACE;
}

size_t
medha_tok_n_vocab(const struct medha_tok *t)
{
	return t->n_vocab;
}

int32_t
medha_tok_bos(const struct medha_tok *t)
{
	return t->bos;
}

int32_t
medha_tok_eos(const struct medha_tok *t)
{
	return t->eos;
}

int
medha_tok_add_bos(const struct medha_tok *t)
{
	return t->add_bos;
}

int
medha_tok_is_eog(const struct medha_tok *t, int32_t id)
{
	return id >= 0 && (size_t)id < t->n_vocab && (t->attr[id] & A_EOG);
}

const char *
medha_tok_kind(const struct medha_tok *t)
{
	return t->kind == K_BPE ? "bpe" : "spm";
}

const char *
medha_tok_pre(const struct medha_tok *t)
{
	return t->pre;
}

/* ---------------------------------------------------------------- chat */

const char *
medha_tok_chat_name(const struct medha_tok *t)
{
	return t->chat == CHAT_CHATML ? "chatml"
	    : t->chat == CHAT_LLAMA3  ? "llama3"
	                              : NULL;
}

int
medha_tok_chat_jinja(const struct medha_tok *t)
{
	return t->tmpl != NULL;
}

/* Append len bytes of p to s at *k (room made by the caller). */
static void
put(char *s, size_t *k, const char *p, size_t len)
{
	memcpy(s + *k, p, len);
	*k += len;
}

#define PUTS(s, k, lit) put(s, k, lit, strlen(lit))

int
medha_tok_chat_builtin(const struct medha_tok *t,
    const struct medha_tok_msg *msgs, size_t n, int add_assistant, char **out,
    size_t *outlen)
{
	size_t i, cap = 64, k = 0, a, b;
	char *s;

	*out = NULL;
	if (t->chat == CHAT_NONE)
		return MEDHA_EUNSUP;
	for (i = 0; i < n; i++) {
		size_t len = msgs[i].len ? msgs[i].len : strlen(msgs[i].content);
		if (len > SIZE_MAX / 2 - cap)
			return MEDHA_ENOMEM;
		cap += strlen(msgs[i].role) + len + 64;
	}
	if ((s = malloc(cap)) == NULL)
		return MEDHA_ENOMEM;
	for (i = 0; i < n; i++) {
		const char *c = msgs[i].content, *role = msgs[i].role;
		size_t len = msgs[i].len ? msgs[i].len : strlen(c);

		if (t->chat == CHAT_CHATML) {
			PUTS(s, &k, "<|im_start|>");
			put(s, &k, role, strlen(role));
			PUTS(s, &k, "\n");
			put(s, &k, c, len);
			PUTS(s, &k, "<|im_end|>\n");
			continue;
		}
		/* llama.cpp trims the content (isspace, C locale) */
		for (a = 0, b = len; a < b && isspace((unsigned char)c[a]);)
			a++;
		while (b > a && isspace((unsigned char)c[b - 1]))
			b--;
		PUTS(s, &k, "<|start_header_id|>");
		put(s, &k, role, strlen(role));
		PUTS(s, &k, "<|end_header_id|>\n\n");
		put(s, &k, c + a, b - a);
		PUTS(s, &k, "<|eot_id|>");
	}
	if (add_assistant)
		PUTS(s, &k,
		    t->chat == CHAT_CHATML
		        ? "<|im_start|>assistant\n"
		        : "<|start_header_id|>assistant<|end_header_id|>\n\n");
	s[k] = '\0';
	*out = s;
	if (outlen != NULL)
		*outlen = k;
	return 0;
}

/* A token's text as a NUL-terminated copy in buf, or NULL. */
static const char *
piece_str(const struct medha_tok *t, int32_t id, char *buf, size_t n)
{
	const char *p;
	size_t len;

	if (id < 0 || medha_tok_piece(t, id, &p, &len) != 0 || len >= n)
		return NULL;
	memcpy(buf, p, len);
	buf[len] = '\0';
	return buf;
}

int
medha_tok_chat_msgs(const struct medha_tok *t, const struct medha_tok_msg *msgs,
    size_t n, int add_assistant, char **out, size_t *outlen)
{
	struct medha_jinja_msg *jm;
	char bos[256], eos[256], why[256];
	const char *b;
	size_t len, blen;
	int rc;

	*out = NULL;
	if (t->tmpl == NULL)
		return medha_tok_chat_builtin(t, msgs, n, add_assistant, out,
		    outlen);
	if ((jm = medha_calloc(n ? n : 1, sizeof(*jm))) == NULL)
		return MEDHA_ENOMEM;
	for (size_t i = 0; i < n; i++) {
		jm[i].role = msgs[i].role;
		jm[i].content = msgs[i].content;
		jm[i].len = msgs[i].len ? msgs[i].len : strlen(msgs[i].content);
	}
	b = piece_str(t, t->bos, bos, sizeof(bos));
	rc = medha_jinja_render(t->tmpl, jm, n, add_assistant, b,
	    piece_str(t, t->eos, eos, sizeof(eos)), out, &len, why,
	    sizeof(why));
	free(jm);
	if (rc != 0) {
		medha_log(MEDHA_LOG_WARN, "chat template: %s", why);
		*out = NULL;
		return rc == MEDHA_ENOMEM ? rc : MEDHA_EINVAL;
	}
	/* BOS is the tokenizer's to add: a template that writes it too
	 * would give two */
	if (b != NULL && t->add_bos && (blen = strlen(b)) > 0 && len >= blen &&
	    memcmp(*out, b, blen) == 0) {
		memmove(*out, *out + blen, len - blen + 1);
		len -= blen;
	}
	if (outlen != NULL)
		*outlen = len;
	return 0;
}

int
medha_tok_chat(const struct medha_tok *t, const char *user_msg, size_t len,
    char **out, size_t *outlen)
{
	struct medha_tok_msg m = {"user", NULL, 0};

	m.content = user_msg;
	m.len = len;
	return medha_tok_chat_msgs(t, &m, 1, 1, out, outlen);
}
