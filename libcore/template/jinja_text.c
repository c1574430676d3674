/*
 * jinja_text.c: the ground the template engine stands on. The arena
 * that a parsed template and each render allocate from (freed all at
 * once, bounded, since the template comes with an untrusted model
 * file); the UTF-8 and whitespace helpers that the lexer, the filters
 * and the methods share (whitespace as Python's str.isspace() has it);
 * and the "line L col C" of every message.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "medha.h"
#include "template/jinja_impl.h"

/* ---------------------------------------------------------------- arena */

struct chunk {
	struct chunk *next;
	size_t cap, used;
	max_align_t data[];
};

void *
jinja_arena_alloc(struct arena *a, size_t n)
{
	struct chunk *c = a->head;
	void *p;

	if (n > a->limit) {
		a->over = 1;
		return NULL;
	}
	n = (n + 15) & ~(size_t)15;
	if (c == NULL || c->cap - c->used < n) {
		size_t cap = n > 65536 ? n : 65536;

		if (a->total + cap > a->limit) {
			a->over = 1;
			return NULL;
		}
		if ((c = malloc(sizeof(*c) + cap)) == NULL)
			return NULL;
		c->cap = cap;
		c->used = 0;
		c->next = a->head;
		a->head = c;
		a->total += cap;
	}
	p = (char *)c->data + c->used;
	c->used += n;
	return p;
}

void *
jinja_arena_array(struct arena *a, size_t n, size_t size)
{
	if (size != 0 && n > SIZE_MAX / size) {
		a->over = 1;
		return NULL;
	}
	return jinja_arena_alloc(a, n * size);
}

void
jinja_arena_free(struct arena *a)
{
	struct chunk *c, *next;

	for (c = a->head; c != NULL; c = next) {
		next = c->next;
		free(c);
	}
	a->head = NULL;
}

/* ---------------------------------------------------------------- text */

/* Code point at s (n bytes left) into *cp; its length (1 for bad bytes). */
size_t
jinja_utf8_dec(const char *s, size_t n, uint32_t *cp)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t k = medha_utf8_len(s, n);

	switch (k) {
	case 2: *cp = (uint32_t)(u[0] & 0x1f) << 6 | (u[1] & 0x3f); return 2;
	case 3:
		*cp = (uint32_t)(u[0] & 0x0f) << 12 |
		    (uint32_t)(u[1] & 0x3f) << 6 | (u[2] & 0x3f);
		return 3;
	case 4:
		*cp = (uint32_t)(u[0] & 0x07) << 18 |
		    (uint32_t)(u[1] & 0x3f) << 12 |
		    (uint32_t)(u[2] & 0x3f) << 6 | (u[3] & 0x3f);
		return 4;
	default: *cp = u[0]; return 1;
	}
}

size_t
jinja_utf8_enc(uint32_t cp, char *o)
{
	if (cp < 0x80) {
		o[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (char)(0xc0 | cp >> 6);
		o[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = (char)(0xe0 | cp >> 12);
		o[1] = (char)(0x80 | (cp >> 6 & 0x3f));
		o[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	o[0] = (char)(0xf0 | cp >> 18);
	o[1] = (char)(0x80 | (cp >> 12 & 0x3f));
	o[2] = (char)(0x80 | (cp >> 6 & 0x3f));
	o[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

/* Python's str.isspace(), which is also what \s and jinja_strip() use. */
static int
py_space(uint32_t c)
{
	return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) ||
	    c == 0x85 || c == 0xa0 || c == 0x1680 ||
	    (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
	    c == 0x202f || c == 0x205f || c == 0x3000;
}

/* Length of the whitespace at the start of s. */
size_t
jinja_span_space(const char *s, size_t n)
{
	size_t i = 0, k;
	uint32_t cp;

	while (i < n && (k = jinja_utf8_dec(s + i, n - i, &cp)) && py_space(cp))
		i += k;
	return i;
}

/* Start of the code point that ends at s + n. */
static size_t
utf8_back(const char *s, size_t n)
{
	size_t i = n - 1;

	while (i > 0 && n - i < 4 && ((unsigned char)s[i] & 0xc0) == 0x80)
		i--;
	if (medha_utf8_len(s + i, n - i) != n - i)
		return n - 1;
	return i;
}

/* Length of s without its trailing whitespace (or chars in set). */
size_t
jinja_rstrip_len(const char *s, size_t n, const char *set, size_t setn)
{
	while (n > 0) {
		size_t i = utf8_back(s, n);
		uint32_t cp;

		jinja_utf8_dec(s + i, n - i, &cp);
		if (set != NULL ? memmem(set, setn, s + i, n - i) == NULL
		                : !py_space(cp))
			break;
		n = i;
	}
	return n;
}

size_t
jinja_lstrip_len(const char *s, size_t n, const char *set, size_t setn)
{
	size_t i = 0, k;
	uint32_t cp;

	if (set == NULL)
		return jinja_span_space(s, n);
	while (i < n) {
		k = jinja_utf8_dec(s + i, n - i, &cp);
		if (memmem(set, setn, s + i, k) == NULL)
			break;
		i += k;
	}
	return i;
}

size_t
jinja_cp_count(const char *s, size_t n)
{
	size_t i, c = 0;

	for (i = 0; i < n; i++)
		c += ((unsigned char)s[i] & 0xc0) != 0x80;
	return c;
}

/* ---------------------------------------------------------------- messages */

/* Line and column (in code points, from 1) of byte pos of src. */
static void
where(const char *src, size_t pos, int *line, int *col)
{
	size_t i;

	*line = 1;
	*col = 1;
	for (i = 0; i < pos; i++) {
		if (src[i] == '\n') {
			++*line;
			*col = 1;
		} else if (((unsigned char)src[i] & 0xc0) != 0x80)
			++*col;
	}
}

int
jinja_vfail(const char *src, size_t pos, char *why, size_t whylen, int err,
    const char *fmt, va_list ap)
{
	char msg[200];
	int line, col;

	vsnprintf(msg, sizeof(msg), fmt, ap);
	where(src, pos, &line, &col);
	return medha_why(why, whylen, err, "line %d col %d: %s", line, col,
	    msg);
}
