/*
 * tok-dump.c: a small driver of libcore's tokenizer for the reference
 * comparison in tests/sh/tokenizer-ref.sh and for timing it.
 *
 *	tok-dump [-d | -b] MODEL.gguf < CORPUS.jsonl
 *	tok-dump -p MODEL.gguf
 *	tok-dump -c MODEL.gguf < CORPUS.jsonl
 *
 * Each input line is one JSON string; a lone surrogate \udc80..\udcff
 * stands for the raw byte 0x80..0xff (Python's surrogateescape), so
 * invalid UTF-8 can be written down. By default each string's ids are
 * printed on one line, tokenized as llama.cpp's command line does (BOS
 * per the vocabulary, special-token text parsed). With -d (--decode) each
 * line gets "ok" when decode(encode(s)) == s (no BOS added, special text
 * parsed and given back, a prefixed space stripped), "invalid" for a
 * string that is not valid UTF-8 (not expected to round-trip), else
 * "FAIL" and the exit status is 1. With -b (--bench) the input is read
 * as plain bytes and tokenized as one text until a second has passed;
 * MB/s is printed.
 * With -p (--pieces) every token's bytes are printed in hex, one line per
 * id ("-" for none), to compare decoding token by token. With -c (--chat)
 * each string (up to a NUL, as a C string) is formatted as one user
 * message by the model's chat template and printed in hex, one line each.
 *
 * Build (after make): cc -std=c11 -D_GNU_SOURCE -O2 -iquote libcore
 *	-o tok-dump contrib/tok-dump.c build/libmedha.a -ljansson -lzstd
 *	-lpcre2-32 -lm -lpthread
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/gguf.h"
#include "tok/tokenizer.h"

static void
usage(void)
{
	fprintf(stderr,
	    "usage: tok-dump [-d | -b] model.gguf < corpus\n"
	    "       tok-dump -p model.gguf\n"
	    "       tok-dump -c model.gguf < corpus\n");
	exit(2);
}

static int
hex4(const char *s, unsigned *v)
{
	int i;

	*v = 0;
	for (i = 0; i < 4; i++) {
		char c = s[i];

		*v <<= 4;
		if (c >= '0' && c <= '9')
			*v |= (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			*v |= (unsigned)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			*v |= (unsigned)(c - 'A' + 10);
		else
			return -1;
	}
	return 0;
}

static size_t
put8(unsigned c, char *o)
{
	if (c < 0x80) {
		o[0] = (char)c;
		return 1;
	}
	if (c < 0x800) {
		o[0] = (char)(0xc0 | (c >> 6));
		o[1] = (char)(0x80 | (c & 0x3f));
		return 2;
	}
	if (c < 0x10000) {
		o[0] = (char)(0xe0 | (c >> 12));
		o[1] = (char)(0x80 | ((c >> 6) & 0x3f));
		o[2] = (char)(0x80 | (c & 0x3f));
		return 3;
	}
	o[0] = (char)(0xf0 | (c >> 18));
	o[1] = (char)(0x80 | ((c >> 12) & 0x3f));
	o[2] = (char)(0x80 | ((c >> 6) & 0x3f));
	o[3] = (char)(0x80 | (c & 0x3f));
	return 4;
}

/* Decode the JSON string on line into out (its bytes); -1 if malformed. */
static long
json_string(const char *line, char *out)
{
	const char *p = line;
	size_t k = 0;
	unsigned c, lo;

	while (*p == ' ' || *p == '\t')
		p++;
	if (*p++ != '"')
		return -1;
	for (; *p != '"'; p++) {
		if (*p == '\0')
			return -1;
		if (*p != '\\') {
			out[k++] = *p;
			continue;
		}
		switch (*++p) {
		case '"': out[k++] = '"'; break;
		case '\\': out[k++] = '\\'; break;
		case '/': out[k++] = '/'; break;
		case 'b': out[k++] = '\b'; break;
		case 'f': out[k++] = '\f'; break;
		case 'n': out[k++] = '\n'; break;
		case 'r': out[k++] = '\r'; break;
		case 't': out[k++] = '\t'; break;
		case 'u':
			if (hex4(p + 1, &c) != 0)
				return -1;
			p += 4;
			if (c >= 0xd800 && c < 0xdc00 && p[1] == '\\' &&
			    p[2] == 'u' && hex4(p + 3, &lo) == 0 &&
			    lo >= 0xdc00 && lo < 0xe000) {
				c = 0x10000 + ((c - 0xd800) << 10) +
				    (lo - 0xdc00);
				p += 6;
			} else if (c >= 0xdc80 && c <= 0xdcff) {
				out[k++] = (char)(c - 0xdc00); /* a raw byte */
				break;
			} else if (c >= 0xd800 && c < 0xe000)
				return -1;
			k += put8(c, out + k);
			break;
		default: return -1;
		}
	}
	return (long)k;
}

/* Strict UTF-8: no overlong forms, surrogates or code points past U+10FFFF. */
static int
valid_utf8(const unsigned char *s, size_t n)
{
	size_t i = 0, k, m;
	unsigned c;

	while (i < n) {
		c = s[i];
		if (c < 0x80) {
			i++;
			continue;
		}
		m = (c & 0xe0) == 0xc0   ? 1
		    : (c & 0xf0) == 0xe0 ? 2
		    : (c & 0xf8) == 0xf0 ? 3
		                         : 0;
		if (m == 0 || i + m >= n)
			return 0;
		c &= 0x3fu >> m;
		for (k = 1; k <= m; k++) {
			if ((s[i + k] & 0xc0) != 0x80)
				return 0;
			c = c << 6 | (s[i + k] & 0x3f);
		}
		if ((m == 1 && c < 0x80) || (m == 2 && c < 0x800) ||
		    (m == 3 && c < 0x10000) || c > 0x10ffff ||
		    (c >= 0xd800 && c < 0xe000))
			return 0;
		i += m + 1;
	}
	return 1;
}

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int
bench(const struct medha_tok *t)
{
	char *buf = NULL;
	size_t len = 0, cap = 0, n, ntok = 0;
	int32_t *ids;
	double t0, t1;
	long reps = 0;

	for (;;) {
		if (cap - len < 65536) {
			cap = cap ? 2 * cap : 1 << 20;
			if ((buf = realloc(buf, cap)) == NULL)
				return 1;
		}
		if ((n = fread(buf + len, 1, cap - len, stdin)) == 0)
			break;
		len += n;
	}
	t0 = now();
	do {
		if (medha_tok_encode(t, buf, len, MEDHA_TOK_DEFAULT, &ids,
		        &ntok) != 0)
			return 1;
		free(ids);
		reps++;
	} while ((t1 = now()) - t0 < 1.0);
	printf("%zu bytes -> %zu tokens, %.2f MB/s (%ld runs)\n", len, ntok,
	    (double)len * (double)reps / (t1 - t0) / 1e6, reps);
	free(buf);
	return 0;
}

int
main(int argc, char **argv)
{
	struct medha_gguf *g;
	struct medha_tok *t;
	char why[256], *line = NULL, *s = NULL, *dec = NULL;
	size_t cap = 0, n, i, outlen, lineno = 0;
	ssize_t got;
	long len;
	int32_t *ids;
	int mode = 0, fails = 0;

	if (argc == 3 &&
	    (!strcmp(argv[1], "-d") || !strcmp(argv[1], "--decode")))
		mode = 'd';
	else if (argc == 3 &&
	    (!strcmp(argv[1], "-b") || !strcmp(argv[1], "--bench")))
		mode = 'b';
	else if (argc == 3 &&
	    (!strcmp(argv[1], "-p") || !strcmp(argv[1], "--pieces")))
		mode = 'p';
	else if (argc == 3 &&
	    (!strcmp(argv[1], "-c") || !strcmp(argv[1], "--chat")))
		mode = 'c';
	else if (argc != 2 || argv[1][0] == '-')
		usage();
	if (medha_gguf_open(&g, argv[argc - 1], why, sizeof(why)) != 0) {
		fprintf(stderr, "tok-dump: %s: %s\n", argv[argc - 1], why);
		return 1;
	}
	if (medha_tok_open(&t, g, why, sizeof(why)) != 0) {
		fprintf(stderr, "tok-dump: %s: %s\n", argv[argc - 1], why);
		return 1;
	}
	medha_gguf_close(g);
	if (mode == 'b') {
		fails = bench(t);
		medha_tok_close(t);
		return fails;
	}
	if (mode == 'p') {
		const char *p;

		for (i = 0; i < medha_tok_n_vocab(t); i++) {
			(void)medha_tok_piece(t, (int32_t)i, &p, &n);
			for (outlen = 0; outlen < n; outlen++)
				printf("%02x", (unsigned char)p[outlen]);
			puts(n ? "" : "-");
		}
		medha_tok_close(t);
		return fflush(stdout) != 0;
	}
	while ((got = getline(&line, &cap, stdin)) > 0) {
		lineno++;
		if ((s = realloc(s, (size_t)got + 1)) == NULL ||
		    (len = json_string(line, s)) < 0) {
			fprintf(stderr,
			    "tok-dump: line %zu: not a JSON string\n", lineno);
			return 1;
		}
		s[len] = '\0';
		if (mode == 'c') {
			char *c;

			/* up to a NUL, as llama.cpp's C API (C strings),
			 * which this output is compared with */
			struct medha_tok_msg um = {"user", s, 0};

			if (medha_tok_chat_builtin(t, &um, 1, 1, &c, NULL) != 0) {
				fprintf(stderr, "tok-dump: no chat template\n");
				return 1;
			}
			for (i = 0; c[i] != '\0'; i++)
				printf("%02x", (unsigned char)c[i]);
			putchar('\n');
			free(c);
			continue;
		}
		if (medha_tok_encode(t, s, (size_t)len,
		        mode ? MEDHA_TOK_PARSE_SPECIAL : MEDHA_TOK_DEFAULT,
		        &ids, &n) != 0) {
			fprintf(stderr, "tok-dump: line %zu: encode failed\n",
			    lineno);
			return 1;
		}
		if (mode == 0) {
			for (i = 0; i < n; i++)
				printf(i ? " %d" : "%d", ids[i]);
			putchar('\n');
		} else {
			int df = MEDHA_TOK_SPECIAL_TEXT | MEDHA_TOK_STRIP_SPACE;

			(void)medha_tok_decode(t, ids, n, df, NULL, 0, &outlen);
			if ((dec = realloc(dec, outlen + 1)) == NULL ||
			    medha_tok_decode(t, ids, n, df, dec, outlen,
			        &outlen) != 0)
				return 1;
			if (!valid_utf8((unsigned char *)s, (size_t)len))
				puts("invalid");
			else if (outlen == (size_t)len &&
			    !memcmp(dec, s, outlen))
				puts("ok");
			else {
				printf("FAIL line %zu\n", lineno);
				fails++;
			}
		}
		free(ids);
	}
	free(line);
	free(s);
	free(dec);
	medha_tok_close(t);
	if (fflush(stdout) != 0 || ferror(stdout))
		return 1;
	return fails ? 1 : 0;
}
