/*
 * pretok.c: the pre-tokenizer of byte-level BPE, as llama.cpp runs it.
 *
 * llama.cpp turns the text into code points (each byte that is not part
 * of a well-formed sequence becomes U+FFFD; overlong forms and surrogates
 * are taken as they decode), then applies a list of regexes one after the
 * other: each regex splits every piece the previous one left into its
 * matches and the gaps between them, and never looks across a piece's
 * ends. The pieces are re-encoded as UTF-8 and every byte is mapped to a
 * printable code point (GPT-2's bytes_to_unicode), which is the alphabet
 * the merges are written in.
 *
 * The regexes run under PCRE2 in its 32-bit code unit library, so match
 * offsets are code point indices, as in llama.cpp. \s is spelled out as
 * llama.cpp's whitespace set (Unicode White_Space, U+0085 included),
 * which PCRE2's \s does not give; \p{L}, \p{N}, \p{P} are PCRE2's, with
 * what Unicode 15.0 and 15.1 added (llama.cpp's tables are 15.1, PCRE2
 * 10.42's are 14.0); checked against llama.cpp code point by code point.
 * Code points PCRE2 cannot take (surrogates, > U+10FFFF) are matched as
 * U+FFFD, which has the same class for every regex here (not L, N, P or
 * space).
 */
#define PCRE2_CODE_UNIT_WIDTH 32
#include <pcre2.h>

#include <stdlib.h>
#include <string.h>

#include "medha.h"
#include "tok/tok_impl.h"

/* llama.cpp's whitespace (unicode_set_whitespace: Unicode White_Space) */
#define WS                                                                     \
	"\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}" \
	"\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
/*
 * Letters, numbers and punctuation of Unicode 15.0 and 15.1, which
 * llama.cpp's tables have and PCRE2 10.42's (Unicode 14) do not.
 */
#define LX                                                                    \
	"\\x{1123F}-\\x{11240}\\x{11F02}\\x{11F04}-\\x{11F10}\\x{11F12}-\\x{" \
	"11F33}"                                                              \
	"\\x{1342F}\\x{13441}-\\x{13446}\\x{1B132}\\x{1B155}\\x{1DF25}-\\x{"  \
	"1DF2A}"                                                              \
	"\\x{1E030}-\\x{1E06D}\\x{1E4D0}-\\x{1E4EB}\\x{2B739}\\x{2EBF0}-\\x{" \
	"2EE5D}"                                                              \
	"\\x{31350}-\\x{323AF}"
#define NX "\\x{11F50}-\\x{11F59}\\x{1D2C0}-\\x{1D2D3}\\x{1E4F0}-\\x{1E4F9}"
#define PX "\\x{11B00}-\\x{11B09}\\x{11F43}-\\x{11F4F}"
#define UL "\\p{L}" LX /* inside [...]: llama.cpp's \p{L} */
#define UN "\\p{N}" NX

/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static const char re_gpt2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?[" UL "]+| ?[" UN "]+"
    "| ?[^" WS UL UN "]+|[" WS "]+(?![^" WS "])|[" WS "]+";

/*
 * (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 */
static const char re_llama3[] =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
    "|[^\\r\\n" UL UN "]?[" UL "]+|[" UN "]{1,3}"
    "| ?[^" WS UL UN "]+[\\r\\n]*|[" WS "]*[\\r\\n]+"
    "|[" WS "]+(?![^" WS "])|[" WS "]+";

/* as llama3, but one digit at a time */
static const char re_qwen2[] =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
    "|[^\\r\\n" UL UN "]?[" UL "]+|[" UN "]"
    "| ?[^" WS UL UN "]+[\\r\\n]*|[" WS "]*[\\r\\n]+"
    "|[" WS "]+(?![^" WS "])|[" WS "]+";

static const char re_digit[] = "[" UN "]";
static const char re_punct[] = "[\\p{P}" PX "\\$\\+<=>\\^~\\|]+";
static const char re_digits[] = "[" UN "]+";
static const char re_three[] = "[0-9][0-9][0-9]";

#define MAXRE 4

struct medha_pretok {
	int kind;
	int nre;
	pcre2_code *re[MAXRE];
	unsigned char bmap[256][2]; /* byte -> UTF-8 of its code point */
	unsigned char bmap_len[256];
};

/* Scratch of one split call: code points and the pieces over them. */
struct work {
	uint32_t *cp; /* (n) code points as llama.cpp decodes them */
	uint32_t *sh; /* (n) the same, made valid for PCRE2 */
	size_t n;
	size_t *len; /* (npiece) piece lengths in code points */
	size_t npiece, cap;
	size_t *len2; /* next pass's pieces */
	size_t np2, cap2;
	unsigned char *u8; /* one piece re-encoded */
	char *enc;         /* one piece byte-mapped */
};

/* GPT-2's bytes_to_unicode: byte -> code point, as UTF-8 (1 or 2 bytes). */
static void
bmap_init(unsigned char bmap[256][2], unsigned char bmap_len[256])
{
	int b, n = 0;
	unsigned cp;

	for (b = 0; b < 256; b++) {
		if ((b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) ||
		    b >= 0xae)
			cp = (unsigned)b;
		else
			cp = 256u + (unsigned)n++;
		if (cp < 0x80) {
			bmap[b][0] = (unsigned char)cp;
			bmap_len[b] = 1;
		} else {
			bmap[b][0] = (unsigned char)(0xc0 | (cp >> 6));
			bmap[b][1] = (unsigned char)(0x80 | (cp & 0x3f));
			bmap_len[b] = 2;
		}
	}
}

int
medha_pretok_new(struct medha_pretok **pp, int kind, char *why, size_t whylen)
{
	const char *src[MAXRE];
	struct medha_pretok *p;
	PCRE2_SIZE eoff;
	int i, n = 0, err;
	PCRE2_UCHAR msg[128];

	*pp = NULL;
	switch (kind) {
	case MEDHA_PRETOK_GPT2: src[n++] = re_gpt2; break;
	case MEDHA_PRETOK_LLAMA3: src[n++] = re_llama3; break;
	case MEDHA_PRETOK_QWEN2: src[n++] = re_qwen2; break;
	case MEDHA_PRETOK_SMOLLM:
		src[n++] = re_digit;
		src[n++] = re_gpt2;
		break;
	case MEDHA_PRETOK_DEFAULT:
		src[n++] = re_punct;
		src[n++] = re_gpt2;
		src[n++] = re_digits;
		src[n++] = re_three;
		break;
	default:
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "pre-tokenizer kind %d unknown", kind);
	}
	if ((p = medha_calloc(1, sizeof(*p))) == NULL)
		return medha_why(why, whylen, MEDHA_ENOMEM, "out of memory");
	p->kind = kind;
	bmap_init(p->bmap, p->bmap_len);
	for (i = 0; i < n; i++) {
		/* the pattern is ASCII: widen it to 32-bit code units */
		size_t j, m = strlen(src[i]);
		PCRE2_UCHAR *w = medha_reallocarray(NULL, m + 1, sizeof(*w));

		if (w == NULL) {
			medha_pretok_free(p);
			return medha_why(why, whylen, MEDHA_ENOMEM,
			    "out of memory");
		}
		for (j = 0; j <= m; j++)
			w[j] = (unsigned char)src[i][j];
		p->re[i] = pcre2_compile(w, m, PCRE2_UTF | PCRE2_NO_UTF_CHECK,
		    &err, &eoff, NULL);
		free(w);
		if (p->re[i] == NULL) {
			char m8[128];
			size_t k;

			pcre2_get_error_message(err, msg, 128);
			for (k = 0; k + 1 < sizeof(m8) && msg[k] != 0; k++)
				m8[k] = msg[k] < 0x80 ? (char)msg[k] : '?';
			m8[k] = '\0';
			medha_pretok_free(p);
			return medha_why(why, whylen, MEDHA_EINVAL,
			    "regex %d at %zu: %s", i, (size_t)eoff, m8);
		}
		(void)pcre2_jit_compile(p->re[i], PCRE2_JIT_COMPLETE);
		p->nre = i + 1;
	}
	*pp = p;
	return 0;
}

void
medha_pretok_free(struct medha_pretok *p)
{
	int i;

	if (p == NULL)
		return;
	for (i = 0; i < p->nre; i++)
		pcre2_code_free(p->re[i]);
	free(p);
}

/* llama.cpp's unicode_cpt_from_utf8: -1 where the byte at s[0] is bad. */
static long
cpt_next(const unsigned char *s, size_t left, size_t *adv)
{
	unsigned c = s[0];

	if (!(c & 0x80)) {
		*adv = 1;
		return c;
	}
	if (!(c & 0x40))
		return -1;
	if (!(c & 0x20)) {
		if (left < 2 || (s[1] & 0xc0) != 0x80)
			return -1;
		*adv = 2;
		return ((long)(c & 0x1f) << 6) | (s[1] & 0x3f);
	}
	if (!(c & 0x10)) {
		if (left < 3 || (s[1] & 0xc0) != 0x80 || (s[2] & 0xc0) != 0x80)
			return -1;
		*adv = 3;
		return ((long)(c & 0x0f) << 12) | ((long)(s[1] & 0x3f) << 6) |
		    (s[2] & 0x3f);
	}
	if (!(c & 0x08)) {
		if (left < 4 || (s[1] & 0xc0) != 0x80 ||
		    (s[2] & 0xc0) != 0x80 || (s[3] & 0xc0) != 0x80)
			return -1;
		*adv = 4;
		return ((long)(c & 0x07) << 18) | ((long)(s[1] & 0x3f) << 12) |
		    ((long)(s[2] & 0x3f) << 6) | (s[3] & 0x3f);
	}
	return -1;
}

/*
 * UTF-8 of one code point into o (4 bytes of room); llama.cpp writes
 * surrogates as they are and cannot write > U+10FFFF (it aborts): those
 * become U+FFFD here.
 */
static size_t
cpt_put(uint32_t c, unsigned char *o)
{
	if (c > 0x10ffff)
		c = 0xfffd;
	if (c < 0x80) {
		o[0] = (unsigned char)c;
		return 1;
	}
	if (c < 0x800) {
		o[0] = (unsigned char)(0xc0 | (c >> 6));
		o[1] = (unsigned char)(0x80 | (c & 0x3f));
		return 2;
	}
	if (c < 0x10000) {
		o[0] = (unsigned char)(0xe0 | (c >> 12));
		o[1] = (unsigned char)(0x80 | ((c >> 6) & 0x3f));
		o[2] = (unsigned char)(0x80 | (c & 0x3f));
		return 3;
	}
	o[0] = (unsigned char)(0xf0 | (c >> 18));
	o[1] = (unsigned char)(0x80 | ((c >> 12) & 0x3f));
	o[2] = (unsigned char)(0x80 | ((c >> 6) & 0x3f));
	o[3] = (unsigned char)(0x80 | (c & 0x3f));
	return 4;
}

static int
push(struct work *w, size_t len)
{
	if (w->np2 == w->cap2) {
		size_t cap = w->cap2 ? 2 * w->cap2 : 64;
		size_t *l = medha_reallocarray(w->len2, cap, sizeof(*l));

		if (l == NULL)
			return MEDHA_ENOMEM;
		w->len2 = l;
		w->cap2 = cap;
	}
	w->len2[w->np2++] = len;
	return 0;
}

/* One match from off in s[0..n), retrying without JIT on a JIT error. */
static int
match(const pcre2_code *re, const uint32_t *s, size_t n, size_t off,
    pcre2_match_data *md, size_t *ms, size_t *me)
{
	PCRE2_SIZE *ov;
	int rc;

	rc = pcre2_match(re, s, n, off, PCRE2_NO_UTF_CHECK, md, NULL);
	if (rc < 0 && rc != PCRE2_ERROR_NOMATCH)
		rc = pcre2_match(re, s, n, off,
		    PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, NULL);
	if (rc == PCRE2_ERROR_NOMATCH)
		return 1;
	if (rc < 0)
		return MEDHA_ERANGE;
	ov = pcre2_get_ovector_pointer(md);
	*ms = ov[0];
	*me = ov[1];
	return 0;
}

/* Split every piece of w by re into matches and the gaps between them. */
static int
split_pass(const pcre2_code *re, pcre2_match_data *md, struct work *w)
{
	size_t i, start = 0, pos, last, ms, me;
	size_t *t;
	int rc;

	w->np2 = 0;
	for (i = 0; i < w->npiece; start += w->len[i], i++) {
		const uint32_t *s = w->sh + start;
		size_t n = w->len[i];

		for (pos = last = 0; pos < n;) {
			if ((rc = match(re, s, n, pos, md, &ms, &me)) < 0)
				return rc;
			if (rc == 1)
				break;
			if (ms > last && (rc = push(w, ms - last)) != 0)
				return rc;
			if (me > ms && (rc = push(w, me - ms)) != 0)
				return rc;
			last = me;
			pos = me > ms ? me : ms + 1;
		}
		if (last < n && (rc = push(w, n - last)) != 0)
			return rc;
	}
	t = w->len;
	w->len = w->len2;
	w->len2 = t;
	w->npiece = w->np2;
	i = w->cap;
	w->cap = w->cap2;
	w->cap2 = i;
	return 0;
}

static void
work_free(struct work *w)
{
	free(w->cp);
	free(w->sh);
	free(w->len);
	free(w->len2);
	free(w->u8);
	free(w->enc);
}

int
medha_pretok_split(const struct medha_pretok *p, const char *text, size_t len,
    int (*fn)(void *arg, const char *word, size_t wlen), void *arg)
{
	const unsigned char *s = (const unsigned char *)text;
	pcre2_match_data *md = NULL;
	struct work w;
	size_t i, j, k, adv, start, maxp, nb;
	long c;
	int rc = MEDHA_ENOMEM;

	memset(&w, 0, sizeof(w));
	if (len == 0)
		return 0;
	w.cp = medha_reallocarray(NULL, len, sizeof(*w.cp));
	w.sh = medha_reallocarray(NULL, len, sizeof(*w.sh));
	w.len = medha_reallocarray(NULL, 1, sizeof(*w.len));
	w.len2 = medha_reallocarray(NULL, 1, sizeof(*w.len2));
	md = pcre2_match_data_create(1, NULL);
	if (!w.cp || !w.sh || !w.len || !w.len2 || !md)
		goto out;
	w.cap = w.cap2 = 1;
	for (i = 0; i < len; i += adv) {
		adv = 1;
		if ((c = cpt_next(s + i, len - i, &adv)) < 0)
			c = 0xfffd;
		w.cp[w.n] = (uint32_t)c;
		w.sh[w.n++] = (c >= 0xd800 && c <= 0xdfff) || c > 0x10ffff
		    ? 0xfffd
		    : (uint32_t)c;
	}
	w.len[0] = w.n;
	w.npiece = 1;
	for (k = 0; k < (size_t)p->nre; k++)
		if ((rc = split_pass(p->re[k], md, &w)) != 0)
			goto out;
	for (i = 0, maxp = 0; i < w.npiece; i++)
		maxp = w.len[i] > maxp ? w.len[i] : maxp;
	rc = MEDHA_ENOMEM;
	w.u8 = medha_reallocarray(NULL, maxp, 4);
	w.enc = medha_reallocarray(NULL, maxp, 8);
	if (w.u8 == NULL || w.enc == NULL)
		goto out;
	for (i = 0, start = 0, rc = 0; i < w.npiece && rc == 0;
	     start += w.len[i], i++) {
		for (j = 0, nb = 0; j < w.len[i]; j++)
			nb += cpt_put(w.cp[start + j], w.u8 + nb);
		for (j = 0, k = 0; j < nb; j++) {
			unsigned char b = w.u8[j];

			memcpy(w.enc + k, p->bmap[b], p->bmap_len[b]);
			k += p->bmap_len[b];
		}
		rc = fn(arg, w.enc, k);
	}
out:
	pcre2_match_data_free(md);
	work_free(&w);
	return rc;
}
