/*
 * tokenizer_test.c: the tokenizer (libcore/tok/tokenizer.c, tok_encode.c,
 * pretok.c) on small vocabularies written here with the GGUF writer.
 *
 * A byte-level BPE vocabulary (all 256 byte tokens, a few merges, control
 * and user-defined tokens) shows merges applied by rank and leftmost
 * first, the pre-tokenizers' digit rules, special tokens cut out longest
 * first (control ones only when asked, user-defined always), BOS per the
 * metadata, decoding and its buffer rules, invalid UTF-8 as U+FFFD, and
 * a round trip of valid text, random text included. A SentencePiece-style
 * vocabulary shows merges by score, the space prefix and the <0xXX> byte
 * fallback. Chat templates and the refusals of bad metadata close it.
 * The comparison with llama.cpp itself is tests/sh/tokenizer-ref.sh.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/gguf.h"
#include "tok/tokenizer.h"
#include "tok/tokq.h"

#define MAXTOK 400

/* A vocabulary being written: tokens, types, scores, merges. */
struct vocab {
	char *tok[MAXTOK];
	int32_t type[MAXTOK];
	float score[MAXTOK];
	int n;
	char *merge[64];
	int nmerge;
	int bos; /* tokenizer.ggml.bos_token_id */
};

/* GPT-2's bytes_to_unicode of every byte of s, as UTF-8. */
static char *
enc(const char *s)
{
	char *o = malloc(2 * strlen(s) + 1);
	size_t k = 0;
	int j, n;

	assert_non_null(o);
	for (; *s != '\0'; s++) {
		unsigned b = (unsigned char)*s, cp = b;

		if (!((b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) ||
		        b >= 0xae)) {
			for (j = 0, n = 0; j < (int)b; j++)
				if (!((j >= 0x21 && j <= 0x7e) ||
				        (j >= 0xa1 && j <= 0xac) || j >= 0xae))
					n++;
			cp = 256u + (unsigned)n;
		}
		if (cp < 0x80)
			o[k++] = (char)cp;
		else {
			o[k++] = (char)(0xc0 | (cp >> 6));
			o[k++] = (char)(0x80 | (cp & 0x3f));
		}
	}
	o[k] = '\0';
	return o;
}

static int
add(struct vocab *v, const char *s, int type, float score)
{
	assert_true(v->n < MAXTOK);
	v->tok[v->n] = strdup(s);
	v->type[v->n] = type;
	v->score[v->n] = score;
	return v->n++;
}

/* Merge "a b" (plain text, encoded here) and its result token. */
static void
merge(struct vocab *v, const char *a, const char *b)
{
	char *ea = enc(a), *eb = enc(b),
	     *m = malloc(strlen(ea) + strlen(eb) + 2);

	assert_true(v->nmerge < 64);
	sprintf(m, "%s %s", ea, eb);
	v->merge[v->nmerge++] = m;
	m = malloc(strlen(ea) + strlen(eb) + 1);
	sprintf(m, "%s%s", ea, eb);
	add(v, m, 1, 0);
	free(m);
	free(ea);
	free(eb);
}

static void
vocab_free(struct vocab *v)
{
	int i;

	for (i = 0; i < v->n; i++)
		free(v->tok[i]);
	for (i = 0; i < v->nmerge; i++)
		free(v->merge[i]);
	memset(v, 0, sizeof(*v));
}

/* Ids of the byte-level BPE vocabulary below. */
enum { EOT, IM_START, IM_END, TOOL, SA, SAB, BYTE0 };
#define B(c) (BYTE0 + (int)(unsigned char)(c)) /* a single-byte token */
static int hello, gworld, yz, qq, t12, t123;

static void
bpe_vocab(struct vocab *v)
{
	int b;
	char s[2] = {0, 0}, *e;

	memset(v, 0, sizeof(*v));
	add(v, "<|endoftext|>", 3, 0);
	add(v, "<|im_start|>", 3, 0);
	add(v, "<|im_end|>", 3, 0);
	add(v, "<tool>", 4, 0);
	add(v, "[A]", 3, 0);
	add(v, "[A][B]", 3, 0);
	for (b = 0; b < 256; b++) {
		if (b == 0) { /* enc() takes C strings: U+0100 is byte 0 */
			add(v, "\xc4\x80", 1, 0);
			continue;
		}
		s[0] = (char)b;
		e = enc(s);
		add(v, e, 1, 0);
		free(e);
	}
	merge(v, "h", "e");
	merge(v, "l", "l");
	merge(v, "he", "ll");
	merge(v, "hell", "o");
	hello = v->n - 1;
	merge(v, " ", "w");
	merge(v, "o", "r");
	merge(v, " w", "or");
	merge(v, "l", "d");
	merge(v, " wor", "ld");
	gworld = v->n - 1;
	merge(v, "y", "z");
	yz = v->n - 1;
	merge(v, "x", "y");
	merge(v, "q", "q");
	qq = v->n - 1;
	merge(v, "1", "2");
	t12 = v->n - 1;
	merge(v, "12", "3");
	t123 = v->n - 1;
}

/* Write v with the given model/pre (NULL: left out) and open it. */
static struct medha_tok *
open_vocab(struct vocab *v, const char *model, const char *pre, int add_bos,
    const char *chat, int *err)
{
	struct medha_gguf_writer *w;
	struct medha_gguf *g;
	struct medha_tok *t = NULL;
	char path[64], why[256];
	int fd;

	snprintf(path, sizeof(path), "/tmp/tokenizer_test.XXXXXX");
	assert_true((fd = mkstemp(path)) >= 0);
	close(fd);
	assert_int_equal(medha_gguf_writer_open(&w, path), 0);
	medha_gguf_writer_add_str(w, "general.architecture", "llama");
	if (model != NULL)
		medha_gguf_writer_add_str(w, "tokenizer.ggml.model", model);
	if (pre != NULL)
		medha_gguf_writer_add_str(w, "tokenizer.ggml.pre", pre);
	medha_gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens",
	    (const char *const *)v->tok, (uint64_t)v->n);
	medha_gguf_writer_add_arr_i32(w, "tokenizer.ggml.token_type", v->type,
	    (uint64_t)v->n);
	if (model != NULL && strcmp(model, "llama") == 0)
		medha_gguf_writer_add_arr_f32(w, "tokenizer.ggml.scores",
		    v->score, (uint64_t)v->n);
	if (v->nmerge > 0)
		medha_gguf_writer_add_arr_str(w, "tokenizer.ggml.merges",
		    (const char *const *)v->merge, (uint64_t)v->nmerge);
	medha_gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id",
	    (uint32_t)v->bos);
	medha_gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 0);
	if (add_bos >= 0)
		medha_gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token",
		    add_bos);
	if (chat != NULL)
		medha_gguf_writer_add_str(w, "tokenizer.chat_template", chat);
	assert_int_equal(medha_gguf_writer_close(w), 0);
	assert_int_equal(medha_gguf_open(&g, path, why, sizeof(why)), 0);
	unlink(path);
	*err = medha_tok_open(&t, g, why, sizeof(why));
	if (*err != 0)
		assert_true(why[0] != '\0');
	medha_gguf_close(g); /* the tokenizer keeps its own copies */
	return t;
}

static struct medha_tok *
bpe(const char *pre, int add_bos)
{
	struct vocab v;
	struct medha_tok *t;
	int err;

	bpe_vocab(&v);
	t = open_vocab(&v, "gpt2", pre, add_bos, NULL, &err);
	assert_int_equal(err, 0);
	vocab_free(&v);
	return t;
}

/* Encode s and compare with the n ids that follow. */
static void
check(const struct medha_tok *t, const char *s, int flags, int n, ...)
{
	int32_t *ids;
	size_t got, i;
	va_list ap;

	assert_int_equal(medha_tok_encode(t, s, strlen(s), flags, &ids, &got),
	    0);
	assert_non_null(ids);
	if ((int)got != n) {
		fprintf(stderr, "\"%s\": %zu ids:", s, got);
		for (i = 0; i < got; i++)
			fprintf(stderr, " %d", ids[i]);
		fprintf(stderr, "\n");
	}
	assert_int_equal(got, n);
	va_start(ap, n);
	for (i = 0; i < got; i++)
		assert_int_equal(ids[i], va_arg(ap, int));
	va_end(ap);
	free(ids);
}

/* decode(encode(s)) with special text given back. */
static char *
roundtrip(const struct medha_tok *t, const char *s, size_t len, size_t *outlen)
{
	const int f = MEDHA_TOK_SPECIAL_TEXT | MEDHA_TOK_STRIP_SPACE;
	int32_t *ids;
	size_t n;
	char *out;
	int rc;

	assert_int_equal(medha_tok_encode(t, s, len, MEDHA_TOK_PARSE_SPECIAL,
	                     &ids, &n),
	    0);
	rc = medha_tok_decode(t, ids, n, f, NULL, 0, outlen);
	assert_int_equal(rc, *outlen > 0 ? MEDHA_ENOSPACE : 0);
	out = malloc(*outlen + 1);
	assert_non_null(out);
	assert_int_equal(medha_tok_decode(t, ids, n, f, out, *outlen, outlen),
	    0);
	free(ids);
	return out;
}

static void
test_merges(void **state)
{
	struct medha_tok *t = bpe("gpt-2", 0);

	(void)state;
	assert_int_equal(medha_tok_n_vocab(t), (size_t)t123 + 1);
	assert_string_equal(medha_tok_kind(t), "bpe");
	assert_string_equal(medha_tok_pre(t), "gpt-2");
	check(t, "hello world", 0, 2, hello, gworld);
	check(t, "xyz", 0, 2, B('x'), yz); /* "y z" ranks before "x y" */
	check(t, "qqq", 0, 2, qq, B('q')); /* equal ranks: leftmost first */
	check(t, "hellohello", 0, 2, hello, hello);
	check(t, "", MEDHA_TOK_DEFAULT, 0);
	check(t, "a  b", 0, 4, B('a'), B(' '), B(' '), B('b'));
	check(t, "123", 0, 1, t123); /* gpt-2: digits stay together */
	medha_tok_close(t);
	t = bpe("smollm", 0);
	check(t, "123", 0, 3, B('1'), B('2'), B('3')); /* one digit each */
	check(t, "x12y", 0, 4, B('x'), B('1'), B('2'), B('y'));
	medha_tok_close(t);
	t = bpe("llama-bpe", 0);
	check(t, "12312", 0, 2, t123, t12); /* 1 to 3 digits a piece */
	check(t, "IT'S", 0, 4, B('I'), B('T'), B('\''), B('S'));
	medha_tok_close(t);
}

static void
test_special_cut(void **state)
{
	struct medha_tok *t = bpe("gpt-2", -1);
	int32_t *ids;
	size_t n;

	(void)state;
	check(t, "<|im_start|>hello<|im_end|>", MEDHA_TOK_DEFAULT, 3, IM_START,
	    hello, IM_END);
	/* not parsed: the text's own bytes (< | im _ start | >) */
	assert_int_equal(medha_tok_encode(t, "<|im_start|>", 12, 0, &ids, &n),
	    0);
	assert_true(n > 3 && ids[0] == B('<'));
	free(ids);
	check(t, "<tool>", 0, 1, TOOL); /* user-defined: always cut */
	check(t, "<|im_sta", MEDHA_TOK_PARSE_SPECIAL, 8, B('<'), B('|'), B('i'),
	    B('m'), B('_'), B('s'), B('t'), B('a'));
	check(t, "[A][B]", MEDHA_TOK_PARSE_SPECIAL, 1, SAB); /* longest */
	check(t, "x[A]y", MEDHA_TOK_PARSE_SPECIAL, 3, B('x'), SA, B('y'));
	check(t, "[A][A][B]", MEDHA_TOK_PARSE_SPECIAL, 2, SA, SAB);
	check(t, "<|endoftext|><|endoftext|>", MEDHA_TOK_PARSE_SPECIAL, 2, EOT,
	    EOT);
	/* no add_bos key: gpt-2's default is none; llama-bpe's is BOS */
	check(t, "hello", MEDHA_TOK_DEFAULT, 1, hello);
	assert_int_equal(medha_tok_add_bos(t), 0);
	medha_tok_close(t);
	t = bpe("llama-bpe", -1);
	check(t, "hello", MEDHA_TOK_DEFAULT, 2, EOT, hello);
	check(t, "hello", MEDHA_TOK_PARSE_SPECIAL, 1, hello);
	medha_tok_close(t);
	t = bpe("gpt-2", 1); /* the key wins over the default */
	check(t, "", MEDHA_TOK_DEFAULT, 1, EOT);
	assert_int_equal(medha_tok_bos(t), EOT);
	assert_int_equal(medha_tok_eos(t), EOT);
	assert_true(medha_tok_is_eog(t, EOT));
	assert_true(medha_tok_is_eog(t, IM_END)); /* by its name */
	assert_false(medha_tok_is_eog(t, hello));
	assert_false(medha_tok_is_eog(t, -1));
	medha_tok_close(t);
}

static void
test_decode(void **state)
{
	struct medha_tok *t = bpe("gpt-2", 0);
	int32_t ids[] = {IM_START, hello, gworld, IM_END};
	char buf[64];
	const char *p;
	size_t n;

	(void)state;
	assert_int_equal(medha_tok_decode(t, ids, 4, MEDHA_TOK_SPECIAL_TEXT,
	                     buf, sizeof(buf), &n),
	    0);
	assert_int_equal(n, 33);
	assert_memory_equal(buf, "<|im_start|>hello world<|im_end|>", n);
	assert_int_equal(medha_tok_decode(t, ids, 4, 0, buf, sizeof(buf), &n),
	    0);
	assert_int_equal(n, 11);
	assert_memory_equal(buf, "hello world", n);
	memset(buf, 'z', sizeof(buf));
	assert_int_equal(medha_tok_decode(t, ids, 4, 0, buf, 4, &n),
	    MEDHA_ENOSPACE);
	assert_int_equal(n, 11);
	assert_memory_equal(buf, "hellz", 5); /* a prefix, nothing past it */
	ids[1] = (int32_t)medha_tok_n_vocab(t);
	assert_int_equal(medha_tok_decode(t, ids, 4, 0, buf, 4, &n),
	    MEDHA_EINVAL);
	assert_int_equal(medha_tok_piece(t, -1, &p, &n), MEDHA_EINVAL);
	assert_int_equal(medha_tok_piece(t, gworld, &p, &n), 0);
	assert_int_equal(n, 6);
	assert_memory_equal(p, " world", 6);
	assert_int_equal(medha_tok_piece(t, B(0), &p, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(p[0], 0);
	medha_tok_close(t);
}

static void
test_roundtrip(void **state)
{
	static const char *const s[] = {"hello world",
	    "h\xc3\xa9llo w\xc3\xb6rld", "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e",
	    "\xf0\x9f\x98\x80\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd", "a\n\nb\r\n",
	    "  leading", "trailing  ", "12345 678", "tab\tx", "it's IT'S",
	    "<|im_start|>user\nhi<|im_end|>\n", "<tool>x</tool>", "[A][B][A]",
	    "e\xcc\x81 \xc2\xa0 \xe3\x80\x80 \xc2\x85"};
	struct medha_tok *t;
	const char *pres[] = {"gpt-2", "smollm", "llama-bpe", "qwen2", NULL};
	char *out, buf[64];
	size_t i, j, k, n, len;
	unsigned seed = 12345;

	(void)state;
	for (k = 0; k < 5; k++) {
		t = bpe(pres[k], 0);
		for (i = 0; i < sizeof(s) / sizeof(s[0]); i++) {
			out = roundtrip(t, s[i], strlen(s[i]), &n);
			assert_int_equal(n, strlen(s[i]));
			assert_memory_equal(out, s[i], n);
			free(out);
		}
		/* random valid UTF-8 from a mixed alphabet */
		for (i = 0; i < 200; i++) {
			static const char *const al[] = {"a", "Z", " ", "  ",
			    "\n", "\r\n", "\t", "7", "'s", "!", "\xc3\xa9",
			    "\xe4\xb8\xad", "\xf0\x9f\x98\x80", "<|im_end|>",
			    "\xcc\x81", "\xc2\xa0", "."};

			len = 0;
			for (j = 0; j < 1 + i % 23; j++) {
				const char *a;

				seed = seed * 1103515245u + 12345u;
				a = al[(seed >> 16) % 17];
				memcpy(buf + len, a, strlen(a));
				len += strlen(a);
				if (len > sizeof(buf) - 16)
					break;
			}
			out = roundtrip(t, buf, len, &n);
			assert_int_equal(n, len);
			assert_memory_equal(out, buf, n);
			free(out);
		}
		medha_tok_close(t);
	}
}

static void
test_invalid_utf8(void **state)
{
	struct medha_tok *t = bpe("smollm", 0);
	unsigned char junk[300];
	int32_t *ids;
	size_t i, j, n, len;
	char *out;
	unsigned seed = 99;

	(void)state;
	/* each bad byte becomes U+FFFD, as in llama.cpp */
	out = roundtrip(t, "\xff", 1, &n);
	assert_int_equal(n, 3);
	assert_memory_equal(out, "\xef\xbf\xbd", 3);
	free(out);
	out = roundtrip(t, "a\xe2\x82", 3, &n);
	assert_int_equal(n, 7);
	assert_memory_equal(out, "a\xef\xbf\xbd\xef\xbf\xbd", 7);
	free(out);
	/* past U+10FFFF: llama.cpp aborts; here it is U+FFFD */
	out = roundtrip(t, "\xf4\x90\x80\x80", 4, &n);
	assert_int_equal(n, 3);
	free(out);
	/* any bytes at all: no crash, and at least one token a byte */
	for (i = 0; i < 300; i++) {
		len = 1 + i % 299;
		for (j = 0; j < len; j++) {
			seed = seed * 1103515245u + 12345u;
			junk[j] = (unsigned char)(seed >> 16);
		}
		assert_int_equal(medha_tok_encode(t, (char *)junk, len,
		                     MEDHA_TOK_DEFAULT, &ids, &n),
		    0);
		assert_true(n >= 1 && n <= 3 * len);
		free(ids);
	}
	medha_tok_close(t);
}

/* A SentencePiece-style vocabulary: scores decide the merges. */
static void
test_spm(void **state)
{
	static const struct {
		const char *s;
		float score;
	} p[] = {{"\xe2\x96\x81", -10}, {"h", -10}, {"e", -10}, {"l", -10},
	    {"o", -10}, {"w", -10}, {"r", -10}, {"d", -10},
	    {"\xe2\x96\x81h", -5}, {"he", -6}, {"ll", -3},
	    {"\xe2\x96\x81he", -4}, {"\xe2\x96\x81hell", -2},
	    {"\xe2\x96\x81hello", -1}, {"lo", -7}, {"\xe2\x96\x81w", -5},
	    {"or", -5}, {"ld", -5}, {"\xe2\x96\x81wor", -3},
	    {"\xe2\x96\x81world", -1}};
	struct vocab v;
	struct medha_tok *t;
	char hex[8], *out;
	size_t i, n;
	int err, base, first;

	(void)state;
	memset(&v, 0, sizeof(v));
	v.bos = 1;
	add(&v, "<unk>", 2, 0);
	add(&v, "<s>", 3, 0);
	add(&v, "</s>", 3, 0);
	base = v.n;
	for (i = 0; i < 256; i++) {
		snprintf(hex, sizeof(hex), "<0x%02X>", (unsigned)i);
		add(&v, hex, 6, 0);
	}
	first = v.n;
	for (i = 0; i < sizeof(p) / sizeof(p[0]); i++)
		add(&v, p[i].s, 1, p[i].score);
	t = open_vocab(&v, "llama", NULL, -1, NULL, &err);
	assert_int_equal(err, 0);
	assert_string_equal(medha_tok_kind(t), "spm");
	/* "hello world" -> "\u2581hello\u2581world" */
	check(t, "hello world", 0, 2, first + 13, first + 19);
	check(t, "hello world", MEDHA_TOK_DEFAULT, 3, 1, first + 13,
	    first + 19);
	/* not in the vocabulary: its UTF-8 bytes as <0xXX> tokens */
	check(t, "h\xc3\xa9", 0, 3, first + 8, base + 0xc3, base + 0xa9);
	out = roundtrip(t, "hello world", 11, &n);
	assert_int_equal(n, 11);
	assert_memory_equal(out, "hello world", 11);
	free(out);
	medha_tok_close(t);
	vocab_free(&v);
}

static void
test_chat(void **state)
{
	struct vocab v;
	struct medha_tok *t;
	struct medha_tok_msg m[2] = {{"system", "Be brief.", 0},
	    {"user", "  Hi there \n", 0}};
	char *out;
	size_t len;
	int err;

	(void)state;
	bpe_vocab(&v);
	t = open_vocab(&v, "gpt2", "gpt-2", 0,
	    "{% for m in messages %}<|im_start|>{{ m.role }}\n...", &err);
	assert_string_equal(medha_tok_chat_name(t), "chatml");
	assert_int_equal(medha_tok_chat(t, "Hi", 2, &out, &len), 0);
	assert_string_equal(out,
	    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
	assert_int_equal(len, strlen(out));
	free(out);
	/* a NUL in the message is kept, not an end */
	assert_int_equal(medha_tok_chat(t, "a\0b", 3, &out, &len), 0);
	assert_int_equal(len, strlen("<|im_start|>user\na") + 1 +
	    strlen("b<|im_end|>\n<|im_start|>assistant\n"));
	assert_memory_equal(out, "<|im_start|>user\na\0b<|im_end|>\n", 24);
	free(out);
	assert_int_equal(medha_tok_chat_msgs(t, m, 2, 0, &out, NULL), 0);
	assert_string_equal(out,
	    "<|im_start|>system\nBe brief.<|im_end|>\n"
	    "<|im_start|>user\n  Hi there \n<|im_end|>\n");
	free(out);
	medha_tok_close(t);
	t = open_vocab(&v, "gpt2", "gpt-2", 0,
	    "{{ '<|start_header_id|>' + role + '<|end_header_id|>' }}", &err);
	assert_string_equal(medha_tok_chat_name(t), "llama3");
	/* (this line is no template Jinja can render: the layout itself) */
	assert_int_equal(medha_tok_chat_builtin(t, m, 2, 1, &out, NULL), 0);
	assert_string_equal(out,
	    "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
	    "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
	    "<|start_header_id|>assistant<|end_header_id|>\n\n");
	free(out);
	medha_tok_close(t);
	/* a real template: the file's Jinja, its default system prompt
	 * included, not the ChatML layout alone */
	t = open_vocab(&v, "gpt2", "gpt-2", 0,
	    "{% for message in messages %}{% if loop.first and "
	    "messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nBe "
	    "kind.<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + "
	    "message['role'] + '\n' + message['content'] + '<|im_end|>' + "
	    "'\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
	    "'<|im_start|>assistant\n' }}{% endif %}",
	    &err);
	assert_true(medha_tok_chat_jinja(t));
	assert_int_equal(medha_tok_chat(t, "Hi", 2, &out, &len), 0);
	assert_string_equal(out,
	    "<|im_start|>system\nBe kind.<|im_end|>\n<|im_start|>user\nHi"
	    "<|im_end|>\n<|im_start|>assistant\n");
	free(out);
	assert_int_equal(medha_tok_chat_msgs(t, m, 2, 0, &out, NULL), 0);
	assert_string_equal(out,
	    "<|im_start|>system\nBe brief.<|im_end|>\n"
	    "<|im_start|>user\n  Hi there \n<|im_end|>\n");
	free(out);
	medha_tok_close(t);
	/* a template that refuses the conversation: an error, not a guess */
	t = open_vocab(&v, "gpt2", "gpt-2", 0,
	    "{{ raise_exception('roles must alternate') }}", &err);
	assert_int_equal(medha_tok_chat(t, "Hi", 2, &out, &len), MEDHA_EINVAL);
	assert_null(out);
	medha_tok_close(t);
	/* any template Jinja renders is the model's own */
	t = open_vocab(&v, "gpt2", "gpt-2", 0, "{{ '[INST]' }}", &err);
	assert_null(medha_tok_chat_name(t));
	assert_int_equal(medha_tok_chat(t, "Hi", 2, &out, NULL), 0);
	assert_string_equal(out, "[INST]");
	free(out);
	medha_tok_close(t);
	/* one it cannot read, of no family it knows: refused */
	t = open_vocab(&v, "gpt2", "gpt-2", 0,
	    "{% macro m() %}[INST]{% endmacro %}{{ m() }}", &err);
	assert_null(medha_tok_chat_name(t));
	assert_int_equal(medha_tok_chat(t, "Hi", 2, &out, NULL), MEDHA_EUNSUP);
	assert_null(out);
	medha_tok_close(t);
	t = open_vocab(&v, "gpt2", "gpt-2", 0, NULL, &err);
	assert_string_equal(medha_tok_chat_name(t), "chatml"); /* fallback */
	medha_tok_close(t);
	vocab_free(&v);
}

static void
test_refusals(void **state)
{
	struct vocab v;
	struct medha_tok *t;
	int err, nmerge;

	(void)state;
	bpe_vocab(&v);
	t = open_vocab(&v, NULL, "gpt-2", 0, NULL, &err);
	assert_null(t);
	assert_int_equal(err, MEDHA_ENOTFOUND);
	t = open_vocab(&v, "bert", NULL, 0, NULL, &err);
	assert_null(t);
	assert_int_equal(err, MEDHA_EUNSUP);
	t = open_vocab(&v, "gpt2", "no-such-pre", 0, NULL, &err);
	assert_null(t);
	assert_int_equal(err, MEDHA_EUNSUP);
	free(v.tok[TOOL]);
	v.tok[TOOL] = strdup("[A]"); /* a duplicate */
	t = open_vocab(&v, "gpt2", "gpt-2", 0, NULL, &err);
	assert_null(t);
	assert_int_equal(err, MEDHA_EFORMAT);
	free(v.tok[TOOL]);
	v.tok[TOOL] = strdup("<tool>");
	nmerge = v.nmerge;
	v.nmerge = 0; /* gpt2 without merges */
	t = open_vocab(&v, "gpt2", "gpt-2", 0, NULL, &err);
	assert_null(t);
	assert_int_equal(err, MEDHA_ENOTFOUND);
	v.nmerge = nmerge;
	vocab_free(&v);
}

/*
 * A vocabulary token of 256 KiB: its piece takes its own length, not
 * its length squared (68.7 GB were asked for); one of code points no
 * byte maps to, whose "[UNK_BYTE_0x..]" piece (llama.cpp's) would be
 * quadratic, is a format error that says so.
 */
static void
test_long_token(void **state)
{
	const size_t len = 256 << 10;
	struct vocab v;
	struct medha_tok *t;
	const char *piece;
	size_t plen, i;
	char *big;
	int err, id;

	(void)state;
	bpe_vocab(&v);
	assert_non_null(big = malloc(len + 1));
	memset(big, 'a', len);
	big[len] = '\0';
	id = add(&v, big, 1, 0);
	t = open_vocab(&v, "gpt2", "gpt-2", 0, NULL, &err);
	assert_int_equal(err, 0);
	assert_int_equal(medha_tok_piece(t, id, &piece, &plen), 0);
	assert_int_equal(plen, len);
	assert_memory_equal(piece, big, len);
	medha_tok_close(t);
	for (i = 0; i + 3 <= len; i += 3)
		memcpy(big + i, "\xe2\x82\xac", 3); /* U+20AC: no byte's */
	big[i] = '\0';
	free(v.tok[id]);
	v.tok[id] = strdup(big);
	t = open_vocab(&v, "gpt2", "gpt-2", 0, NULL, &err);
	assert_null(t);
	assert_int_equal(err, MEDHA_EFORMAT);
	free(big);
	vocab_free(&v);
}

/*
 * The tokenizer's thread (tok/tokq.h): jobs come back in the order
 * pushed with the ids medha_tok_encode gives; wake is called for each;
 * a job cancelled before the thread started on it never comes back, one
 * it had started does; closing hands back what was never taken.
 */
static int tokq_woken;
static void
tokq_wake(void *arg)
{
	(void)arg;
	__atomic_add_fetch(&tokq_woken, 1, __ATOMIC_SEQ_CST);
}

static void
tokq_drop(void *arg, struct medha_tokq_job *j)
{
	(void)j;
	(*(int *)arg)++;
}

static void
test_tokq(void **state)
{
	static const char *texts[] = {"hello world", "xyz", "qqq",
	    "hellohello", "a  b"};
	enum { N = 5 };
	struct medha_tok *t = bpe("gpt-2", 0);
	struct medha_tokq *q;
	struct medha_tokq_job jobs[N + 64], *j;
	int32_t *ids;
	size_t n;
	int got = 0, cancelled = 0, dropped = 0;

	(void)state;
	assert_int_equal(medha_tokq_open(&q, tokq_wake, NULL), 0);
	memset(jobs, 0, sizeof(jobs));
	for (int i = 0; i < N; i++) {
		assert_int_equal(medha_tokq_push(q, &jobs[i], t, texts[i],
		                     strlen(texts[i]), 0),
		    0);
	}
	/* the last may be cancelled while it waits */
	cancelled = medha_tokq_cancel(q, &jobs[N - 1]);
	assert_int_equal(medha_tokq_pending(q), (size_t)(N - cancelled));
	for (double until = medha_now() + 10;
	     got < N - cancelled && medha_now() < until;) {
		if ((j = medha_tokq_take(q)) == NULL) {
			usleep(1000);
			continue;
		}
		assert_ptr_equal(j, &jobs[got]); /* in order */
		assert_int_equal(j->rc, 0);
		assert_int_equal(medha_tok_encode(t, j->text, j->len, 0, &ids,
		                     &n),
		    0);
		assert_int_equal(j->n, n);
		assert_memory_equal(j->ids, ids, n * sizeof(*ids));
		free(ids);
		free(j->ids);
		got++;
	}
	assert_int_equal(got, N - cancelled);
	assert_null(medha_tokq_take(q));
	assert_int_equal(medha_tokq_pending(q), 0);
	assert_true(__atomic_load_n(&tokq_woken, __ATOMIC_SEQ_CST) >= got);
	/* closing with jobs in: each handed to drop once */
	for (int i = N; i < N + 64; i++) {
		assert_int_equal(medha_tokq_push(q, &jobs[i], t, texts[0],
		                     strlen(texts[0]), 0),
		    0);
	}
	while ((j = medha_tokq_take(q)) != NULL) { /* some may be done */
		free(j->ids);
		dropped++;
	}
	medha_tokq_close(q, tokq_drop, &dropped);
	assert_int_equal(dropped, 64);
	medha_tok_close(t);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_merges),
	    cmocka_unit_test(test_special_cut),
	    cmocka_unit_test(test_decode),
	    cmocka_unit_test(test_roundtrip),
	    cmocka_unit_test(test_invalid_utf8),
	    cmocka_unit_test(test_spm),
	    cmocka_unit_test(test_chat),
	    cmocka_unit_test(test_refusals),
	    cmocka_unit_test(test_long_token),
	    cmocka_unit_test(test_tokq),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
