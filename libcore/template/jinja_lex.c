/*
 * jinja_lex.c: template source into tokens, as jinja2/lexer.py does it.
 * Text between tags is one token, with whitespace control applied: a
 * tag's "-" strips all whitespace beside it, trim_blocks drops the
 * newline after a block or comment tag, lstrip_blocks drops the
 * indentation before one ("+" keeps either). Inside {{ }} and {% %}:
 * names, numbers, string literals decoded as Python's unicode-escape
 * does, and operators, with brackets balanced to a bounded depth.
 * Comments are dropped here. The source is already normalised
 * (medha_jinja_parse: "\n" line breaks, one trailing newline gone).
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "medha.h"
#include "template/jinja_impl.h"

int
jinja_pfail(struct parser *p, size_t pos, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	err = jinja_vfail(p->j->src, pos, p->why, p->whylen, err, fmt, ap);
	va_end(ap);
	return err;
}

static struct tok *
tok_add(struct parser *p, int t, size_t pos)
{
	struct tok *k;

	if (p->ntok == p->cap) {
		size_t cap = p->cap ? 2 * p->cap : 256;

		k = medha_reallocarray(p->tok, cap, sizeof(*k));
		if (k == NULL)
			return NULL;
		p->tok = k;
		p->cap = cap;
	}
	k = &p->tok[p->ntok++];
	memset(k, 0, sizeof(*k));
	k->t = t;
	k->pos = pos;
	return k;
}

static int
hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/*
 * The string literal at src[*pos] (a quote): decoded as Python's
 * unicode-escape does, into the template's arena (never longer than
 * the literal).
 */
static int
lex_string(struct parser *p, size_t *pos, struct tok *k)
{
	const char *src = p->j->src;
	size_t i = *pos + 1, n = p->j->len, o = 0;
	char q = src[*pos], *out;

	if ((out = jinja_arena_alloc(&p->j->ar, n - *pos + 1)) == NULL)
		return jinja_pfail(p, *pos, MEDHA_ENOMEM, "out of memory");
	for (; i < n && src[i] != q; i++) {
		uint32_t cp = 0;
		int d, m, w;

		if (src[i] != '\\') {
			out[o++] = src[i];
			continue;
		}
		if (++i == n)
			break;
		switch (src[i]) {
		case '\n': continue; /* a line continuation */
		case 'n': out[o++] = '\n'; continue;
		case 't': out[o++] = '\t'; continue;
		case 'r': out[o++] = '\r'; continue;
		case 'a': out[o++] = '\a'; continue;
		case 'b': out[o++] = '\b'; continue;
		case 'f': out[o++] = '\f'; continue;
		case 'v': out[o++] = '\v'; continue;
		case '\\':
		case '\'':
		case '"': out[o++] = src[i]; continue;
		case 'x': w = 2; break;
		case 'u': w = 4; break;
		case 'U': w = 8; break;
		case 'N':
			return jinja_pfail(p, i - 1, MEDHA_EUNSUP,
			    "\\N{...} escapes are not supported");
		default:
			if (src[i] >= '0' && src[i] <= '7') {
				for (m = 0; m < 3 && i < n && src[i] >= '0' &&
				     src[i] <= '7';
				     m++, i++)
					cp = cp * 8 + (uint32_t)(src[i] - '0');
				i--;
				o += jinja_utf8_enc(cp, out + o);
				continue;
			}
			out[o++] = '\\'; /* unknown escapes stay */
			out[o++] = src[i];
			continue;
		}
		for (m = 0; m < w; m++) {
			if (i + 1 + (size_t)m >= n ||
			    (d = hexval(src[i + 1 + m])) < 0)
				return jinja_pfail(p, i - 1, MEDHA_EFORMAT,
				    "truncated \\%c escape", src[i]);
			cp = cp * 16 + (uint32_t)d;
		}
		i += (size_t)w;
		if (cp > 0x10ffff)
			return jinja_pfail(p, i, MEDHA_EFORMAT,
			    "escape out of range");
		o += jinja_utf8_enc(cp, out + o);
	}
	if (i >= n)
		return jinja_pfail(p, *pos, MEDHA_EFORMAT,
		    "unterminated string");
	k->t = T_STR;
	k->s = out;
	k->n = o;
	*pos = i + 1;
	return 0;
}

static int
is_name0(int c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static int
is_digit(int c)
{
	return c >= '0' && c <= '9';
}

/* A number: integers with _ separators, decimals, exponents. */
static int
lex_number(struct parser *p, size_t *pos, struct tok *k)
{
	const char *src = p->j->src;
	size_t i = *pos, n = p->j->len, o = 0;
	char buf[64];
	int isf = 0;

	while (i < n &&
	    (is_digit(src[i]) || src[i] == '_' ||
	        (src[i] == '.' && i + 1 < n && is_digit(src[i + 1]) && !isf) ||
	        ((src[i] == 'e' || src[i] == 'E') && i + 1 < n &&
	            (is_digit(src[i + 1]) ||
	                ((src[i + 1] == '-' || src[i + 1] == '+') &&
	                    i + 2 < n && is_digit(src[i + 2])))))) {
		if (src[i] == '.' || src[i] == 'e' || src[i] == 'E') {
			isf = 1;
			if (src[i] != '.' && o < sizeof(buf) - 1)
				buf[o++] = src[i++]; /* the exponent's sign */
		}
		if (src[i] != '_' && o < sizeof(buf) - 1)
			buf[o++] = src[i];
		i++;
	}
	buf[o] = '\0';
	if (o >= sizeof(buf) - 1)
		return jinja_pfail(p, *pos, MEDHA_ERANGE, "number too long");
	if (isf) {
		k->t = T_FLOAT;
		k->f = strtod(buf, NULL);
	} else {
		k->t = T_INT;
		if (medha_parse_i64(buf, INT64_MIN, INT64_MAX, &k->i) != 0)
			return jinja_pfail(p, *pos, MEDHA_ERANGE,
			    "integer out of range");
	}
	*pos = i;
	return 0;
}

/* The tokens inside a tag, from *pos to its end (kind: '{' or '%'). */
static int
lex_tag(struct parser *p, size_t *pos, int kind, int *line_starting)
{
	const char *src = p->j->src;
	size_t i = *pos, n = p->j->len, start = *pos - 2;
	char bal[MEDHA_JINJA_MAX_DEPTH];
	int nbal = 0;
	struct tok *k;

	for (;;) {
		i += jinja_span_space(src + i, n - i);
		if (i >= n)
			return jinja_pfail(p, start, MEDHA_EFORMAT,
			    "unterminated %s tag", kind == '%' ? "{%" : "{{");
		if (nbal == 0) {
			const char *end = kind == '%' ? "%}" : "}}";
			size_t e = 0;

			if (src[i] == '-' && i + 2 < n + 0 &&
			    memcmp(src + i + 1, end, 2) == 0)
				e = 3;
			else if (src[i] == '+' && kind == '%' && i + 2 < n &&
			    memcmp(src + i + 1, end, 2) == 0)
				e = 3;
			else if (i + 1 < n && memcmp(src + i, end, 2) == 0)
				e = 2;
			if (e != 0) {
				if ((k = tok_add(p,
				         kind == '%' ? T_BEND : T_VEND, i)) ==
				    NULL)
					return MEDHA_ENOMEM;
				if (src[i] == '-')
					i += e +
					    jinja_span_space(src + i + e,
					        n - i - e);
				else if (src[i] == '+')
					i += e;
				else {
					i += e;
					if (kind == '%' && i < n &&
					    src[i] == '\n')
						i++; /* trim_blocks */
				}
				*line_starting = src[i - 1] == '\n';
				*pos = i;
				return 0;
			}
		}
		if ((k = tok_add(p, T_OP, i)) == NULL)
			return MEDHA_ENOMEM;
		if (src[i] == '\'' || src[i] == '"') {
			int rc = lex_string(p, &i, k);

			if (rc != 0)
				return rc;
		} else if (is_digit(src[i])) {
			int rc = lex_number(p, &i, k);

			if (rc != 0)
				return rc;
		} else if (is_name0(src[i])) {
			size_t b = i;

			while (i < n && (is_name0(src[i]) || is_digit(src[i])))
				i++;
			k->t = T_NAME;
			k->s = src + b;
			k->n = i - b;
		} else {
			static const char *two[] = {"==", "!=", "<=", ">=",
			    "//", "**"};
			size_t m;
			int c = src[i];

			for (m = 0; m < 6; m++)
				if (i + 1 < n &&
				    memcmp(src + i, two[m], 2) == 0)
					break;
			if (m < 6) {
				k->op = OP2(src[i], src[i + 1]);
				i += 2;
				continue;
			}
			if (strchr("+-*/%~[](){}<>=.:|,;", c) == NULL ||
			    c == '\0')
				return jinja_pfail(p, i, MEDHA_EFORMAT,
				    "unexpected character '%c'", c);
			k->op = c;
			i++;
			if (c == '(' || c == '[' || c == '{') {
				if (nbal == MEDHA_JINJA_MAX_DEPTH)
					return jinja_pfail(p, i - 1,
					    MEDHA_ENOSPACE,
					    "brackets nested too deep");
				bal[nbal++] = c == '(' ? ')'
				    : c == '['         ? ']'
				                       : '}';
			} else if (c == ')' || c == ']' || c == '}') {
				if (nbal == 0 || bal[nbal - 1] != c)
					return jinja_pfail(p, i - 1,
					    MEDHA_EFORMAT, "unexpected '%c'",
					    c);
				nbal--;
			}
		}
	}
}

/* The whole source into tokens, whitespace control applied to text. */
int
jinja_lex(struct parser *p)
{
	const char *src = p->j->src;
	size_t pos = 0, n = p->j->len;
	int line_starting = 1, rc;

	while (pos < n) {
		size_t i = pos, tn;
		int kind = 0, sign = 0;
		struct tok *k;

		for (; i + 1 < n; i++)
			if (src[i] == '{' &&
			    (src[i + 1] == '{' || src[i + 1] == '%' ||
			        src[i + 1] == '#')) {
				kind = src[i + 1];
				break;
			}
		if (kind == 0)
			i = n;
		else if (i + 2 < n && (src[i + 2] == '-' || src[i + 2] == '+'))
			sign = src[i + 2];
		tn = i - pos;
		if (sign == '-')
			tn = jinja_rstrip_len(src + pos, tn, NULL, 0);
		else if (kind != 0 && kind != '{' && sign != '+') {
			/* lstrip_blocks: only whitespace since the line began
			 */
			size_t l = tn;

			while (l > 0 && src[pos + l - 1] != '\n')
				l--;
			if ((l > 0 || line_starting) &&
			    jinja_span_space(src + pos + l, tn - l) == tn - l)
				tn = l;
		}
		if (tn > 0) {
			if ((k = tok_add(p, T_TEXT, pos)) == NULL)
				return MEDHA_ENOMEM;
			k->s = src + pos;
			k->n = tn;
		}
		if (kind == 0)
			break;
		pos = i + 2 + (sign != 0);
		if (kind == '#') {
			for (;; pos++) {
				if (pos + 1 >= n)
					return jinja_pfail(p, i, MEDHA_EFORMAT,
					    "unterminated comment");
				if ((src[pos] == '-' || src[pos] == '+') &&
				    pos + 2 < n && src[pos + 1] == '#' &&
				    src[pos + 2] == '}') {
					pos += 3;
					if (src[pos - 3] == '-')
						pos +=
						    jinja_span_space(src + pos,
						        n - pos);
					break;
				}
				if (src[pos] == '#' && src[pos + 1] == '}') {
					pos += 2;
					if (pos < n && src[pos] == '\n')
						pos++;
					break;
				}
			}
			line_starting = src[pos - 1] == '\n';
			continue;
		}
		if (tok_add(p, kind == '%' ? T_BBEGIN : T_VBEGIN, i) == NULL)
			return MEDHA_ENOMEM;
		if ((rc = lex_tag(p, &pos, kind == '%' ? '%' : '{',
		         &line_starting)) != 0)
			return rc;
	}
	return tok_add(p, T_EOF, n) == NULL ? MEDHA_ENOMEM : 0;
}
