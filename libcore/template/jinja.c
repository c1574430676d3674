/*
 * jinja.c: the Jinja2 subset that chat templates use, parsed into a tree
 * once and rendered per request (see jinja.h for what it promises).
 *
 * The lexer follows jinja2/lexer.py: the source's line breaks are made
 * "\n" and one trailing newline is dropped; a tag's "-" strips all
 * whitespace beside it, trim_blocks drops the newline after a block or
 * comment tag, lstrip_blocks drops the indentation before one. The
 * parser follows jinja2/parser.py's precedence (filters bind tighter
 * than unary minus and tighter than binary operators). Evaluation
 * follows Python: `and`/`or` return an operand, == compares deeply,
 * len() and slices count code points, an undefined name is empty and
 * false but an attribute or operator on it is an error, as with
 * Jinja2's default Undefined. Each {% for %} turn gets a fresh scope, so
 * a {% set %} inside a loop does not leak out (hence namespace()).
 *
 * Everything a render makes lives in one arena freed at the end; the
 * arena, the output, the evaluation steps and the nesting depth are all
 * bounded, since the template comes with an untrusted model file.
 */
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "medha.h"
#include "template/jinja.h"

/* ---------------------------------------------------------------- arena */

struct chunk {
	struct chunk *next;
	size_t cap, used;
	max_align_t data[];
};

struct arena {
	struct chunk *head;
	size_t total, limit;
	int over; /* the limit, not malloc, refused */
};

static void *
arena_alloc(struct arena *a, size_t n)
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

static void *
arena_array(struct arena *a, size_t n, size_t size)
{
	if (size != 0 && n > SIZE_MAX / size) {
		a->over = 1;
		return NULL;
	}
	return arena_alloc(a, n * size);
}

static void
arena_free(struct arena *a)
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
static size_t
utf8_dec(const char *s, size_t n, uint32_t *cp)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t k = medha_utf8_len(s, n);

	switch (k) {
	case 2:
		*cp = (uint32_t)(u[0] & 0x1f) << 6 | (u[1] & 0x3f);
		return 2;
	case 3:
		*cp = (uint32_t)(u[0] & 0x0f) << 12 | (uint32_t)(u[1] & 0x3f)
		    << 6 | (u[2] & 0x3f);
		return 3;
	case 4:
		*cp = (uint32_t)(u[0] & 0x07) << 18 | (uint32_t)(u[1] & 0x3f)
		    << 12 | (uint32_t)(u[2] & 0x3f) << 6 | (u[3] & 0x3f);
		return 4;
	default:
		*cp = u[0];
		return 1;
	}
}

static size_t
utf8_enc(uint32_t cp, char *o)
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

/* Python's str.isspace(), which is also what \s and strip() use. */
static int
py_space(uint32_t c)
{
	return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) ||
	    c == 0x85 || c == 0xa0 || c == 0x1680 ||
	    (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
	    c == 0x202f || c == 0x205f || c == 0x3000;
}

/* Length of the whitespace at the start of s. */
static size_t
span_space(const char *s, size_t n)
{
	size_t i = 0, k;
	uint32_t cp;

	while (i < n && (k = utf8_dec(s + i, n - i, &cp)) && py_space(cp))
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
static size_t
rstrip_len(const char *s, size_t n, const char *set, size_t setn)
{
	while (n > 0) {
		size_t i = utf8_back(s, n);
		uint32_t cp;

		utf8_dec(s + i, n - i, &cp);
		if (set != NULL ? memmem(set, setn, s + i, n - i) == NULL
				: !py_space(cp))
			break;
		n = i;
	}
	return n;
}

static size_t
lstrip_len(const char *s, size_t n, const char *set, size_t setn)
{
	size_t i = 0, k;
	uint32_t cp;

	if (set == NULL)
		return span_space(s, n);
	while (i < n) {
		k = utf8_dec(s + i, n - i, &cp);
		if (memmem(set, setn, s + i, k) == NULL)
			break;
		i += k;
	}
	return i;
}

static size_t
cp_count(const char *s, size_t n)
{
	size_t i, c = 0;

	for (i = 0; i < n; i++)
		c += ((unsigned char)s[i] & 0xc0) != 0x80;
	return c;
}

/* ---------------------------------------------------------------- values */

enum vtype {
	V_UNDEF,
	V_NONE,
	V_BOOL,
	V_INT,
	V_FLOAT,
	V_STR,
	V_LIST, /* also tuples (list->tuple) */
	V_DICT,
	V_NS,   /* namespace(): a dict that {% set ns.x %} changes */
	V_LOOP, /* the loop variable */
	V_FUNC, /* a global function */
};

enum fn { F_RANGE, F_NAMESPACE, F_RAISE, F_STRFTIME, F_DICT };

struct list;
struct dict;
struct loopst;

struct val {
	int t;
	union {
		int64_t i; /* V_BOOL, V_INT, V_FUNC */
		double f;
		struct {
			const char *p;
			size_t n;
		} s;
		struct list *l;
		struct dict *d;
		struct loopst *lp;
	} u;
};

struct list {
	size_t n;
	int tuple;
	struct val *v;
};

struct dict {
	size_t n, cap;
	struct val *k, *v;
};

struct loopst {
	struct val *items;
	size_t n, k;
};

/* ---------------------------------------------------------------- tree */

enum nkind {
	/* statements */
	N_TEXT,
	N_OUT,
	N_IF,
	N_FOR,
	N_SET,
	N_SETBLOCK,
	N_BREAK,
	N_CONTINUE,
	N_BLOCK, /* {% generation %}: its body, as is */
	/* expressions */
	E_LIT,
	E_NAME,
	E_ATTR,
	E_INDEX,
	E_SLICE,
	E_CALL,
	E_FILTER,
	E_TEST,
	E_NOT,
	E_NEG,
	E_POS,
	E_AND,
	E_OR,
	E_COND,
	E_BIN,
	E_CONCAT,
	E_LIST,
	E_TUPLE,
	E_DICT,
	E_KWARG,
};

struct node {
	int kind;
	int op;   /* E_BIN operator; E_TEST negated */
	size_t pos; /* byte offset in the source, for messages */
	struct val lit;
	const char *name, *name2; /* E_NAME, E_ATTR, filter, set target */
	size_t nlen, n2len;
	struct node *a, *b, *c, *d;
	struct node **v; /* arguments, items, dict keys and values */
	size_t nv;
	struct node *next; /* the next statement */
};

struct medha_jinja {
	char *src; /* the normalised source */
	size_t len;
	struct arena ar;
	struct node *body;
};

#define OP2(a, b) ((a) | (b) << 8)

/* ---------------------------------------------------------------- position */

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

static int
vfail(const char *src, size_t pos, char *why, size_t whylen, int err,
    const char *fmt, va_list ap)
{
	char msg[200];
	int line, col;

	vsnprintf(msg, sizeof(msg), fmt, ap);
	where(src, pos, &line, &col);
	return medha_why(why, whylen, err, "line %d col %d: %s", line, col,
	    msg);
}

/* ---------------------------------------------------------------- lexer */

enum tkind {
	T_TEXT,
	T_VBEGIN,
	T_BBEGIN,
	T_VEND,
	T_BEND,
	T_NAME,
	T_STR,
	T_INT,
	T_FLOAT,
	T_OP,
	T_EOF,
};

struct tok {
	int t;
	int op;
	size_t pos;
	const char *s;
	size_t n;
	int64_t i;
	double f;
};

struct parser {
	struct medha_jinja *j;
	struct tok *tok;
	size_t ntok, cap, i;
	int depth;
	int loops; /* for loops around the statement being parsed */
	char *why;
	size_t whylen;
};

static int
pfail(struct parser *p, size_t pos, int err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int
pfail(struct parser *p, size_t pos, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	err = vfail(p->j->src, pos, p->why, p->whylen, err, fmt, ap);
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

	if ((out = arena_alloc(&p->j->ar, n - *pos + 1)) == NULL)
		return pfail(p, *pos, MEDHA_ENOMEM, "out of memory");
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
		case '\n':
			continue; /* a line continuation */
		case 'n':
			out[o++] = '\n';
			continue;
		case 't':
			out[o++] = '\t';
			continue;
		case 'r':
			out[o++] = '\r';
			continue;
		case 'a':
			out[o++] = '\a';
			continue;
		case 'b':
			out[o++] = '\b';
			continue;
		case 'f':
			out[o++] = '\f';
			continue;
		case 'v':
			out[o++] = '\v';
			continue;
		case '\\':
		case '\'':
		case '"':
			out[o++] = src[i];
			continue;
		case 'x':
			w = 2;
			break;
		case 'u':
			w = 4;
			break;
		case 'U':
			w = 8;
			break;
		case 'N':
			return pfail(p, i - 1, MEDHA_EUNSUP,
			    "\\N{...} escapes are not supported");
		default:
			if (src[i] >= '0' && src[i] <= '7') {
				for (m = 0; m < 3 && i < n && src[i] >= '0' &&
				     src[i] <= '7'; m++, i++)
					cp = cp * 8 + (uint32_t)(src[i] - '0');
				i--;
				o += utf8_enc(cp, out + o);
				continue;
			}
			out[o++] = '\\'; /* unknown escapes stay */
			out[o++] = src[i];
			continue;
		}
		for (m = 0; m < w; m++) {
			if (i + 1 + (size_t)m >= n ||
			    (d = hexval(src[i + 1 + m])) < 0)
				return pfail(p, i - 1, MEDHA_EFORMAT,
				    "truncated \\%c escape", src[i]);
			cp = cp * 16 + (uint32_t)d;
		}
		i += (size_t)w;
		if (cp > 0x10ffff)
			return pfail(p, i, MEDHA_EFORMAT, "escape out of range");
		o += utf8_enc(cp, out + o);
	}
	if (i >= n)
		return pfail(p, *pos, MEDHA_EFORMAT, "unterminated string");
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

	while (i < n && (is_digit(src[i]) || src[i] == '_' ||
	    (src[i] == '.' && i + 1 < n && is_digit(src[i + 1]) && !isf) ||
	    ((src[i] == 'e' || src[i] == 'E') && i + 1 < n &&
	        (is_digit(src[i + 1]) || ((src[i + 1] == '-' ||
	        src[i + 1] == '+') && i + 2 < n && is_digit(src[i + 2])))))) {
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
		return pfail(p, *pos, MEDHA_ERANGE, "number too long");
	if (isf) {
		k->t = T_FLOAT;
		k->f = strtod(buf, NULL);
	} else {
		k->t = T_INT;
		if (medha_parse_i64(buf, INT64_MIN, INT64_MAX, &k->i) != 0)
			return pfail(p, *pos, MEDHA_ERANGE,
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
		i += span_space(src + i, n - i);
		if (i >= n)
			return pfail(p, start, MEDHA_EFORMAT,
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
				if ((k = tok_add(p, kind == '%' ? T_BEND :
				    T_VEND, i)) == NULL)
					return MEDHA_ENOMEM;
				if (src[i] == '-')
					i += e + span_space(src + i + e,
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
				if (i + 1 < n && memcmp(src + i, two[m], 2) == 0)
					break;
			if (m < 6) {
				k->op = OP2(src[i], src[i + 1]);
				i += 2;
				continue;
			}
			if (strchr("+-*/%~[](){}<>=.:|,;", c) == NULL ||
			    c == '\0')
				return pfail(p, i, MEDHA_EFORMAT,
				    "unexpected character '%c'", c);
			k->op = c;
			i++;
			if (c == '(' || c == '[' || c == '{') {
				if (nbal == MEDHA_JINJA_MAX_DEPTH)
					return pfail(p, i - 1, MEDHA_ENOSPACE,
					    "brackets nested too deep");
				bal[nbal++] = c == '(' ? ')' : c == '[' ?
				    ']' : '}';
			} else if (c == ')' || c == ']' || c == '}') {
				if (nbal == 0 || bal[nbal - 1] != c)
					return pfail(p, i - 1, MEDHA_EFORMAT,
					    "unexpected '%c'", c);
				nbal--;
			}
		}
	}
}

/* The whole source into tokens, whitespace control applied to text. */
static int
lex(struct parser *p)
{
	const char *src = p->j->src;
	size_t pos = 0, n = p->j->len;
	int line_starting = 1, rc;

	while (pos < n) {
		size_t i = pos, tn;
		int kind = 0, sign = 0;
		struct tok *k;

		for (; i + 1 < n; i++)
			if (src[i] == '{' && (src[i + 1] == '{' ||
			    src[i + 1] == '%' || src[i + 1] == '#')) {
				kind = src[i + 1];
				break;
			}
		if (kind == 0)
			i = n;
		else if (i + 2 < n && (src[i + 2] == '-' || src[i + 2] == '+'))
			sign = src[i + 2];
		tn = i - pos;
		if (sign == '-')
			tn = rstrip_len(src + pos, tn, NULL, 0);
		else if (kind != 0 && kind != '{' && sign != '+') {
			/* lstrip_blocks: only whitespace since the line began */
			size_t l = tn;

			while (l > 0 && src[pos + l - 1] != '\n')
				l--;
			if ((l > 0 || line_starting) &&
			    span_space(src + pos + l, tn - l) == tn - l)
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
					return pfail(p, i, MEDHA_EFORMAT,
					    "unterminated comment");
				if ((src[pos] == '-' || src[pos] == '+') &&
				    pos + 2 < n && src[pos + 1] == '#' &&
				    src[pos + 2] == '}') {
					pos += 3;
					if (src[pos - 3] == '-')
						pos += span_space(src + pos,
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

/* ---------------------------------------------------------------- parser */

/* Filters and tests Jinja2 knows: others fail at parse time, as there. */
static const char *filters[] = {"abs", "attr", "batch", "capitalize",
    "center", "count", "d", "default", "dictsort", "e", "escape",
    "filesizeformat", "first", "float", "forceescape", "format", "groupby",
    "indent", "int", "items", "join", "last", "length", "list", "lower",
    "map", "max", "min", "pprint", "random", "reject", "rejectattr",
    "replace", "reverse", "round", "safe", "select", "selectattr", "slice",
    "sort", "string", "striptags", "sum", "title", "tojson", "trim",
    "truncate", "unique", "upper", "urlencode", "urlize", "wordcount",
    "wordwrap", "xmlattr", NULL};
static const char *tests[] = {"boolean", "callable", "defined",
    "divisibleby", "eq", "equalto", "escaped", "even", "false", "filter",
    "float", "ge", "gt", "greaterthan", "in", "integer", "iterable", "le",
    "lessthan", "lower", "lt", "mapping", "ne", "none", "number", "odd",
    "sameas", "sequence", "string", "test", "true", "undefined", "upper",
    "==", "!=", ">", ">=", "<", "<=", NULL};

static int
known(const char **list, const char *s, size_t n)
{
	for (; *list != NULL; list++)
		if (strlen(*list) == n && memcmp(*list, s, n) == 0)
			return 1;
	return 0;
}

static int
name_is(const struct tok *k, const char *s)
{
	return k->t == T_NAME && k->n == strlen(s) && memcmp(k->s, s, k->n) == 0;
}

static struct tok *
cur(struct parser *p)
{
	return &p->tok[p->i];
}

static int
is_op(struct parser *p, int op)
{
	return cur(p)->t == T_OP && cur(p)->op == op;
}

static const char *
tdesc(const struct tok *k, char *buf, size_t len)
{
	static const char *kinds[] = {"text", "'{{'", "'{%'", "'}}'", "'%}'",
	    "name", "string", "integer", "number", "operator",
	    "end of template"};

	if (k->t == T_NAME)
		snprintf(buf, len, "'%.*s'", (int)(k->n > 40 ? 40 : k->n),
		    k->s);
	else if (k->t == T_OP)
		snprintf(buf, len, "'%c%c'", k->op & 0xff,
		    k->op >> 8 ? k->op >> 8 : ' ');
	else
		snprintf(buf, len, "%s", kinds[k->t]);
	return buf;
}

static int
expect_op(struct parser *p, int op, const char *what)
{
	char b[64];

	if (!is_op(p, op))
		return pfail(p, cur(p)->pos, MEDHA_EFORMAT, "expected %s, got %s",
		    what, tdesc(cur(p), b, sizeof(b)));
	p->i++;
	return 0;
}

static struct node *
mk(struct parser *p, int kind, size_t pos)
{
	struct node *e = arena_alloc(&p->j->ar, sizeof(*e));

	if (e != NULL) {
		memset(e, 0, sizeof(*e));
		e->kind = kind;
		e->pos = pos;
	}
	return e;
}

#define NEW(e, kind, pos)                                           \
	do {                                                        \
		if (((e) = mk(p, (kind), (pos))) == NULL)           \
			return pfail(p, (pos), MEDHA_ENOMEM, "out of memory"); \
	} while (0)
#define TRY(x)                        \
	do {                          \
		int rc_ = (x);        \
		if (rc_ != 0)         \
			return rc_;   \
	} while (0)

static int parse_expr(struct parser *, struct node **);
static int parse_or(struct parser *, struct node **);
static int parse_unary(struct parser *, struct node **, int);

static int
enter(struct parser *p)
{
	if (++p->depth > MEDHA_JINJA_MAX_DEPTH)
		return pfail(p, cur(p)->pos, MEDHA_ENOSPACE,
		    "template nested too deep");
	return 0;
}

/* A growing node array in the arena. */
static int
push(struct parser *p, struct node ***v, size_t *n, struct node *e)
{
	if ((*n & (*n - 1)) == 0) { /* 0, 1, 2, 4, ...: double */
		struct node **w = arena_array(&p->j->ar, *n ? 2 * *n : 1,
		    sizeof(*w));

		if (w == NULL)
			return pfail(p, e->pos, MEDHA_ENOMEM, "out of memory");
		if (*n)
			memcpy(w, *v, *n * sizeof(*w));
		*v = w;
	}
	(*v)[(*n)++] = e;
	return 0;
}

/* ( args ) after the '(': positional and name=value arguments. */
static int
parse_args(struct parser *p, struct node *call)
{
	struct node *e = NULL, *kw;

	while (!is_op(p, ')')) {
		if (call->nv > 0)
			TRY(expect_op(p, ',', "',' or ')'"));
		if (is_op(p, ')'))
			break;
		if (is_op(p, '*') || is_op(p, OP2('*', '*')))
			return pfail(p, cur(p)->pos, MEDHA_EUNSUP,
			    "*args and **kwargs are not supported");
		if (cur(p)->t == T_NAME && p->tok[p->i + 1].t == T_OP &&
		    p->tok[p->i + 1].op == '=') {
			NEW(kw, E_KWARG, cur(p)->pos);
			kw->name = cur(p)->s;
			kw->nlen = cur(p)->n;
			p->i += 2;
			TRY(parse_expr(p, &kw->a));
			e = kw;
		} else
			TRY(parse_expr(p, &e));
		TRY(push(p, &call->v, &call->nv, e));
	}
	p->i++;
	return 0;
}

/* After '[': an index or a slice. */
static int
parse_subscript(struct parser *p, struct node *obj, struct node **out)
{
	struct node *e, *part[3] = {NULL, NULL, NULL};
	size_t pos = cur(p)->pos;
	int k = 0, slice = 0;

	for (;;) {
		if (is_op(p, ':')) {
			if (++k > 2)
				return pfail(p, cur(p)->pos, MEDHA_EFORMAT,
				    "bad slice");
			slice = 1;
			p->i++;
			continue;
		}
		if (is_op(p, ']'))
			break;
		if (part[k] != NULL)
			return pfail(p, cur(p)->pos, MEDHA_EUNSUP,
			    "expected ']' (tuple subscripts are not supported)");
		TRY(parse_expr(p, &part[k]));
	}
	p->i++;
	if (!slice && part[0] == NULL)
		return pfail(p, pos, MEDHA_EFORMAT, "empty subscript");
	NEW(e, slice ? E_SLICE : E_INDEX, pos);
	e->a = obj;
	e->b = part[0];
	e->c = part[1];
	e->d = part[2];
	*out = e;
	return 0;
}

static int
parse_postfix(struct parser *p, struct node **e)
{
	struct node *x;
	char b[64];

	for (;;) {
		size_t pos = cur(p)->pos;

		if (is_op(p, '.')) {
			p->i++;
			if (cur(p)->t == T_NAME) {
				NEW(x, E_ATTR, pos);
				x->name = cur(p)->s;
				x->nlen = cur(p)->n;
			} else if (cur(p)->t == T_INT) {
				NEW(x, E_INDEX, pos);
				NEW(x->b, E_LIT, pos);
				x->b->lit.t = V_INT;
				x->b->lit.u.i = cur(p)->i;
			} else
				return pfail(p, pos, MEDHA_EFORMAT,
				    "expected a name after '.', got %s",
				    tdesc(cur(p), b, sizeof(b)));
			p->i++;
			x->a = *e;
			*e = x;
		} else if (is_op(p, '[')) {
			p->i++;
			TRY(parse_subscript(p, *e, e));
		} else if (is_op(p, '(')) {
			p->i++;
			NEW(x, E_CALL, pos);
			x->a = *e;
			TRY(parse_args(p, x));
			*e = x;
		} else
			return 0;
	}
}

/* |filter(args), is [not] test(args), and calls after them. */
static int
parse_filters(struct parser *p, struct node **e)
{
	struct node *x;
	char b[64];

	for (;;) {
		size_t pos = cur(p)->pos;

		if (is_op(p, '|')) {
			p->i++;
			if (cur(p)->t != T_NAME)
				return pfail(p, cur(p)->pos, MEDHA_EFORMAT,
				    "expected a filter name, got %s",
				    tdesc(cur(p), b, sizeof(b)));
			if (!known(filters, cur(p)->s, cur(p)->n))
				return pfail(p, cur(p)->pos, MEDHA_EFORMAT,
				    "no filter named '%.*s'", (int)cur(p)->n,
				    cur(p)->s);
			NEW(x, E_FILTER, pos);
			x->name = cur(p)->s;
			x->nlen = cur(p)->n;
			x->a = *e;
			p->i++;
			if (is_op(p, '(')) {
				p->i++;
				TRY(parse_args(p, x));
			}
			*e = x;
		} else if (name_is(cur(p), "is")) {
			int neg = 0;

			p->i++;
			if (name_is(cur(p), "not")) {
				neg = 1;
				p->i++;
			}
			if (cur(p)->t != T_NAME ||
			    !known(tests, cur(p)->s, cur(p)->n))
				return pfail(p, cur(p)->pos, MEDHA_EFORMAT,
				    "no test named %s",
				    tdesc(cur(p), b, sizeof(b)));
			NEW(x, E_TEST, pos);
			x->name = cur(p)->s;
			x->nlen = cur(p)->n;
			x->op = neg;
			x->a = *e;
			p->i++;
			if (is_op(p, '(')) {
				p->i++;
				TRY(parse_args(p, x));
			} else if ((cur(p)->t == T_NAME &&
			    !name_is(cur(p), "else") && !name_is(cur(p), "or") &&
			    !name_is(cur(p), "and")) || cur(p)->t == T_STR ||
			    cur(p)->t == T_INT || cur(p)->t == T_FLOAT ||
			    is_op(p, '[') || is_op(p, '{')) {
				struct node *arg;

				/* `is divisibleby 3`: one primary argument */
				TRY(parse_unary(p, &arg, 0));
				TRY(push(p, &x->v, &x->nv, arg));
			}
			*e = x;
		} else if (is_op(p, '(')) {
			p->i++;
			NEW(x, E_CALL, pos);
			x->a = *e;
			TRY(parse_args(p, x));
			*e = x;
		} else
			return 0;
	}
}

static int
parse_primary(struct parser *p, struct node **out)
{
	struct tok *k = cur(p);
	struct node *e = NULL, *x;
	char b[64];

	switch (k->t) {
	case T_NAME:
		NEW(e, E_LIT, k->pos);
		if (name_is(k, "true") || name_is(k, "True") ||
		    name_is(k, "false") || name_is(k, "False")) {
			e->lit.t = V_BOOL;
			e->lit.u.i = k->s[0] == 't' || k->s[0] == 'T';
		} else if (name_is(k, "none") || name_is(k, "None"))
			e->lit.t = V_NONE;
		else {
			e->kind = E_NAME;
			e->name = k->s;
			e->nlen = k->n;
		}
		p->i++;
		break;
	case T_STR: {
		size_t n = 0, i;
		char *s;

		for (i = p->i; p->tok[i].t == T_STR; i++)
			n += p->tok[i].n;
		if ((s = arena_alloc(&p->j->ar, n + 1)) == NULL)
			return pfail(p, k->pos, MEDHA_ENOMEM, "out of memory");
		NEW(e, E_LIT, k->pos);
		e->lit.t = V_STR;
		e->lit.u.s.p = s;
		e->lit.u.s.n = n;
		for (; cur(p)->t == T_STR; p->i++) { /* 'a' 'b' is 'ab' */
			memcpy(s, cur(p)->s, cur(p)->n);
			s += cur(p)->n;
		}
		break;
	}
	case T_INT:
	case T_FLOAT:
		NEW(e, E_LIT, k->pos);
		e->lit.t = k->t == T_INT ? V_INT : V_FLOAT;
		if (k->t == T_INT)
			e->lit.u.i = k->i;
		else
			e->lit.u.f = k->f;
		p->i++;
		break;
	case T_OP:
		if (k->op == '(') {
			p->i++;
			if (is_op(p, ')')) {
				NEW(e, E_TUPLE, k->pos);
				p->i++;
				break;
			}
			TRY(parse_expr(p, &x));
			if (is_op(p, ')')) {
				p->i++;
				e = x;
				break;
			}
			NEW(e, E_TUPLE, k->pos);
			TRY(push(p, &e->v, &e->nv, x));
			while (is_op(p, ',')) {
				p->i++;
				if (is_op(p, ')'))
					break;
				TRY(parse_expr(p, &x));
				TRY(push(p, &e->v, &e->nv, x));
			}
			TRY(expect_op(p, ')', "')'"));
			break;
		}
		if (k->op == '[' || k->op == '{') {
			int close = k->op == '[' ? ']' : '}';

			NEW(e, k->op == '[' ? E_LIST : E_DICT, k->pos);
			p->i++;
			while (!is_op(p, close)) {
				if (e->nv > 0) {
					TRY(expect_op(p, ',', "','"));
					if (is_op(p, close))
						break;
				}
				TRY(parse_expr(p, &x));
				TRY(push(p, &e->v, &e->nv, x));
				if (close == '}') {
					TRY(expect_op(p, ':', "':'"));
					TRY(parse_expr(p, &x));
					TRY(push(p, &e->v, &e->nv, x));
				}
			}
			p->i++;
			break;
		}
		/* FALLTHROUGH */
	default:
		return pfail(p, k->pos, MEDHA_EFORMAT, "unexpected %s",
		    tdesc(k, b, sizeof(b)));
	}
	*out = e;
	return 0;
}

static int
parse_unary(struct parser *p, struct node **out, int with_filter)
{
	struct node *e = NULL;
	size_t pos = cur(p)->pos;

	TRY(enter(p));
	if (is_op(p, '-') || is_op(p, '+')) {
		NEW(e, is_op(p, '-') ? E_NEG : E_POS, pos);
		p->i++;
		TRY(parse_unary(p, &e->a, 0));
	} else
		TRY(parse_primary(p, &e));
	TRY(parse_postfix(p, &e));
	if (with_filter)
		TRY(parse_filters(p, &e));
	p->depth--;
	*out = e;
	return 0;
}

/* Binary levels, loosest last: ** ; * / // % ; ~ ; + - */
static int
parse_bin(struct parser *p, struct node **out, int level)
{
	static const int ops[4][5] = {{OP2('*', '*')},
	    {'*', '/', OP2('/', '/'), '%'}, {'~'}, {'+', '-'}};
	struct node *e, *x;
	int m;

	if (level < 0)
		return parse_unary(p, out, 1);
	TRY(parse_bin(p, &e, level - 1));
	for (;;) {
		for (m = 0; m < 5 && ops[level][m] != 0; m++)
			if (is_op(p, ops[level][m]))
				break;
		if (m == 5 || ops[level][m] == 0)
			break;
		NEW(x, ops[level][m] == '~' ? E_CONCAT : E_BIN, cur(p)->pos);
		x->op = ops[level][m];
		p->i++;
		x->a = e;
		TRY(parse_bin(p, &x->b, level - 1));
		e = x;
	}
	*out = e;
	return 0;
}

static int
parse_compare(struct parser *p, struct node **out)
{
	struct node *e, *prev, *x, *and, *res = NULL;

	TRY(parse_bin(p, &e, 3));
	prev = e;
	for (;;) {
		size_t pos = cur(p)->pos;
		int op;

		if (is_op(p, OP2('=', '=')) || is_op(p, OP2('!', '=')) ||
		    is_op(p, '<') || is_op(p, '>') || is_op(p, OP2('<', '=')) ||
		    is_op(p, OP2('>', '=')))
			op = cur(p)->op, p->i++;
		else if (name_is(cur(p), "in"))
			op = 'i', p->i++;
		else if (name_is(cur(p), "not") && name_is(&p->tok[p->i + 1],
		    "in"))
			op = 'n', p->i += 2;
		else
			break;
		NEW(x, E_BIN, pos);
		x->op = op;
		x->a = prev;
		TRY(parse_bin(p, &x->b, 3));
		prev = x->b;
		if (res == NULL)
			res = x;
		else { /* a < b < c: (a < b) and (b < c) */
			NEW(and, E_AND, pos);
			and->a = res;
			and->b = x;
			res = and;
		}
	}
	*out = res != NULL ? res : e;
	return 0;
}

static int
parse_not(struct parser *p, struct node **out)
{
	struct node *e;

	if (name_is(cur(p), "not")) {
		TRY(enter(p));
		NEW(e, E_NOT, cur(p)->pos);
		p->i++;
		TRY(parse_not(p, &e->a));
		p->depth--;
		*out = e;
		return 0;
	}
	return parse_compare(p, out);
}

static int
parse_and_or(struct parser *p, struct node **out, int kind)
{
	struct node *e, *x;
	const char *word = kind == E_AND ? "and" : "or";

	TRY(kind == E_AND ? parse_not(p, &e) : parse_and_or(p, &e, E_AND));
	while (name_is(cur(p), word)) {
		NEW(x, kind, cur(p)->pos);
		p->i++;
		x->a = e;
		TRY(kind == E_AND ? parse_not(p, &x->b) :
		    parse_and_or(p, &x->b, E_AND));
		e = x;
	}
	*out = e;
	return 0;
}

static int
parse_or(struct parser *p, struct node **out)
{
	return parse_and_or(p, out, E_OR);
}

/* An expression: a or-expression with `x if c else y` around it. */
static int
parse_expr(struct parser *p, struct node **out)
{
	struct node *e, *x;

	TRY(enter(p));
	TRY(parse_or(p, &e));
	while (name_is(cur(p), "if")) {
		NEW(x, E_COND, cur(p)->pos);
		p->i++;
		x->b = e;
		TRY(parse_or(p, &x->a));
		if (name_is(cur(p), "else")) {
			p->i++;
			TRY(parse_expr(p, &x->c));
		}
		e = x;
	}
	p->depth--;
	*out = e;
	return 0;
}

static int
expect_bend(struct parser *p)
{
	char b[64];

	if (cur(p)->t != T_BEND)
		return pfail(p, cur(p)->pos, MEDHA_EFORMAT,
		    "expected '%%}', got %s", tdesc(cur(p), b, sizeof(b)));
	p->i++;
	return 0;
}

/*
 * Statements up to a {% tag %} named in ends (NULL-terminated), or to
 * the end of the template when ends is NULL; *end is then the index of
 * the tag's name.
 */
static int parse_body(struct parser *, struct node **, const char **,
    size_t *);

static int
parse_for(struct parser *p, struct node *s)
{
	static const char *ends[] = {"else", "endfor", NULL};
	char b[64];
	size_t at;

	if (cur(p)->t != T_NAME)
		return pfail(p, cur(p)->pos, MEDHA_EFORMAT,
		    "expected a loop variable, got %s",
		    tdesc(cur(p), b, sizeof(b)));
	s->name = cur(p)->s;
	s->nlen = cur(p)->n;
	p->i++;
	if (is_op(p, ',')) {
		p->i++;
		if (cur(p)->t != T_NAME)
			return pfail(p, cur(p)->pos, MEDHA_EUNSUP,
			    "only one or two loop variables are supported");
		s->name2 = cur(p)->s;
		s->n2len = cur(p)->n;
		p->i++;
	}
	if (!name_is(cur(p), "in"))
		return pfail(p, cur(p)->pos, MEDHA_EFORMAT,
		    "expected 'in', got %s", tdesc(cur(p), b, sizeof(b)));
	p->i++;
	TRY(parse_or(p, &s->a));
	if (name_is(cur(p), "if")) {
		p->i++;
		TRY(parse_or(p, &s->d));
	}
	if (name_is(cur(p), "recursive"))
		return pfail(p, cur(p)->pos, MEDHA_EUNSUP,
		    "recursive loops are not supported");
	TRY(expect_bend(p));
	p->loops++;
	TRY(parse_body(p, &s->b, ends, &at));
	p->loops--;
	if (name_is(&p->tok[at], "else")) {
		TRY(expect_bend(p));
		TRY(parse_body(p, &s->c, ends + 1, &at));
	}
	return expect_bend(p);
}

static int
parse_if(struct parser *p, struct node *s)
{
	static const char *ends[] = {"elif", "else", "endif", NULL};
	size_t at;

	TRY(parse_expr(p, &s->a));
	TRY(expect_bend(p));
	TRY(parse_body(p, &s->b, ends, &at));
	if (name_is(&p->tok[at], "elif")) {
		NEW(s->c, N_IF, p->tok[at].pos);
		TRY(enter(p));
		TRY(parse_if(p, s->c));
		p->depth--;
		return 0; /* the inner if took the endif */
	}
	if (name_is(&p->tok[at], "else")) {
		TRY(expect_bend(p));
		TRY(parse_body(p, &s->c, ends + 2, &at));
	}
	return expect_bend(p);
}

static int
parse_set(struct parser *p, struct node *s)
{
	static const char *ends[] = {"endset", NULL};
	char b[64];
	size_t at;

	if (cur(p)->t != T_NAME)
		return pfail(p, cur(p)->pos, MEDHA_EFORMAT,
		    "expected a name to set, got %s",
		    tdesc(cur(p), b, sizeof(b)));
	s->name = cur(p)->s;
	s->nlen = cur(p)->n;
	p->i++;
	if (is_op(p, '.')) {
		p->i++;
		if (cur(p)->t != T_NAME)
			return pfail(p, cur(p)->pos, MEDHA_EFORMAT,
			    "expected an attribute name");
		s->name2 = cur(p)->s;
		s->n2len = cur(p)->n;
		p->i++;
	}
	if (is_op(p, ','))
		return pfail(p, cur(p)->pos, MEDHA_EUNSUP,
		    "setting several names at once is not supported");
	if (cur(p)->t == T_BEND && s->name2 == NULL) {
		s->kind = N_SETBLOCK;
		p->i++;
		TRY(parse_body(p, &s->b, ends, &at));
		return expect_bend(p);
	}
	TRY(expect_op(p, '=', "'='"));
	TRY(parse_expr(p, &s->a));
	return expect_bend(p);
}

static const char *
last(const char **ends)
{
	while (ends[1] != NULL)
		ends++;
	return ends[0];
}

static int
parse_body(struct parser *p, struct node **out, const char **ends,
    size_t *end)
{
	struct node *head = NULL, **tail = &head, *s;
	size_t open = p->i ? p->tok[p->i - 1].pos : 0;
	char b[64];

	TRY(enter(p));
	for (;;) {
		struct tok *k = cur(p);
		const char **e;

		if (k->t == T_EOF) {
			if (ends == NULL)
				break;
			return pfail(p, open, MEDHA_EFORMAT,
			    "unclosed block: missing {%% %s %%}", last(ends));
		}
		if (k->t == T_TEXT) {
			NEW(s, N_TEXT, k->pos);
			s->lit.t = V_STR;
			s->lit.u.s.p = k->s;
			s->lit.u.s.n = k->n;
			p->i++;
		} else if (k->t == T_VBEGIN) {
			NEW(s, N_OUT, k->pos);
			p->i++;
			TRY(parse_expr(p, &s->a));
			if (cur(p)->t != T_VEND)
				return pfail(p, cur(p)->pos, MEDHA_EFORMAT,
				    "expected '}}', got %s",
				    tdesc(cur(p), b, sizeof(b)));
			p->i++;
		} else {
			p->i++; /* T_BBEGIN */
			k = cur(p);
			if (k->t != T_NAME)
				return pfail(p, k->pos, MEDHA_EFORMAT,
				    "expected a tag name, got %s",
				    tdesc(k, b, sizeof(b)));
			for (e = ends; e != NULL && *e != NULL; e++)
				if (name_is(k, *e)) {
					*end = p->i++;
					*out = head;
					p->depth--;
					return 0;
				}
			p->i++;
			NEW(s, N_OUT, k->pos);
			if (name_is(k, "if")) {
				s->kind = N_IF;
				TRY(parse_if(p, s));
			} else if (name_is(k, "for")) {
				s->kind = N_FOR;
				TRY(parse_for(p, s));
			} else if (name_is(k, "set")) {
				s->kind = N_SET;
				TRY(parse_set(p, s));
			} else if ((name_is(k, "break") ||
			    name_is(k, "continue")) && p->loops > 0) {
				s->kind = k->s[0] == 'b' ? N_BREAK : N_CONTINUE;
				TRY(expect_bend(p));
			} else if (name_is(k, "generation")) {
				static const char *gend[] = {"endgeneration",
				    NULL};
				size_t at;

				s->kind = N_BLOCK;
				TRY(expect_bend(p));
				TRY(parse_body(p, &s->b, gend, &at));
				TRY(expect_bend(p));
			} else if (name_is(k, "macro") || name_is(k, "call") ||
			    name_is(k, "filter") || name_is(k, "raw") ||
			    name_is(k, "block") || name_is(k, "extends") ||
			    name_is(k, "include") || name_is(k, "import") ||
			    name_is(k, "from") || name_is(k, "with") ||
			    name_is(k, "autoescape") || name_is(k, "do"))
				return pfail(p, k->pos, MEDHA_EUNSUP,
				    "{%% %.*s %%} is not supported",
				    (int)k->n, k->s);
			else
				return pfail(p, k->pos, MEDHA_EFORMAT,
				    "unexpected tag %s", tdesc(k, b,
				    sizeof(b)));
		}
		*tail = s;
		tail = &s->next;
	}
	*out = head;
	p->depth--;
	return 0;
}

int
medha_jinja_parse(struct medha_jinja **jp, const char *src, size_t len,
    char *why, size_t whylen)
{
	struct medha_jinja *j;
	struct parser p;
	size_t i, o = 0;
	int rc;

	*jp = NULL;
	if (len > MEDHA_JINJA_MAX_SRC)
		return medha_why(why, whylen, MEDHA_ENOSPACE,
		    "template of %zu bytes (limit %d)", len,
		    MEDHA_JINJA_MAX_SRC);
	if ((j = medha_calloc(1, sizeof(*j))) == NULL ||
	    (j->src = malloc(len + 1)) == NULL) {
		free(j);
		return medha_why(why, whylen, MEDHA_ENOMEM, "out of memory");
	}
	/* as Jinja2: \r\n and \r are \n, and one final newline goes */
	for (i = 0; i < len; i++) {
		if (src[i] == '\r') {
			if (i + 1 < len && src[i + 1] == '\n')
				i++;
			j->src[o++] = '\n';
		} else
			j->src[o++] = src[i];
	}
	if (o > 0 && j->src[o - 1] == '\n')
		o--;
	j->src[o] = '\0';
	j->len = o;
	j->ar.limit = 8 * (size_t)MEDHA_JINJA_MAX_SRC + (1 << 20);
	memset(&p, 0, sizeof(p));
	p.j = j;
	p.why = why;
	p.whylen = whylen;
	if ((rc = lex(&p)) == 0)
		rc = parse_body(&p, &j->body, NULL, NULL);
	if (rc == MEDHA_ENOMEM && j->ar.over)
		rc = medha_why(why, whylen, MEDHA_ENOSPACE,
		    "template too large to parse");
	free(p.tok);
	if (rc != 0) {
		medha_jinja_free(j);
		return rc;
	}
	*jp = j;
	return 0;
}

void
medha_jinja_free(struct medha_jinja *j)
{
	if (j == NULL)
		return;
	arena_free(&j->ar);
	free(j->src);
	free(j);
}

/* ---------------------------------------------------------------- render */

struct buf {
	char *p;
	size_t n, cap;
};

struct var {
	const char *name;
	size_t n;
	struct val v;
};

struct frame {
	struct frame *up;
	struct var *v;
	size_t n, cap;
	struct var inl[4]; /* the first few, so that a loop costs no memory */
};

struct rctx {
	const struct medha_jinja *j;
	struct arena ar;
	struct frame *top;
	long steps;
	int depth;  /* blocks */
	int edepth; /* expressions, and values being printed */
	int ctl;    /* 1: break, 2: continue, pending */
	char *why;
	size_t whylen;
};

static int
rfail(struct rctx *r, size_t pos, int err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int
rfail(struct rctx *r, size_t pos, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	err = vfail(r->j->src, pos, r->why, r->whylen, err, fmt, ap);
	va_end(ap);
	return err;
}

static int
nomem(struct rctx *r, size_t pos)
{
	if (r->ar.over)
		return rfail(r, pos, MEDHA_ENOSPACE,
		    "render needs more than %d bytes", MEDHA_JINJA_MAX_MEM);
	return rfail(r, pos, MEDHA_ENOMEM, "out of memory");
}

static int
put(struct rctx *r, struct buf *b, const char *s, size_t n, size_t pos)
{
	if (n > MEDHA_JINJA_MAX_OUT - b->n)
		return rfail(r, pos, MEDHA_ENOSPACE,
		    "output longer than %d bytes", MEDHA_JINJA_MAX_OUT);
	if (b->cap - b->n <= n) {
		size_t cap = b->cap ? b->cap : 4096;
		char *q;

		while (cap - b->n <= n)
			cap *= 2;
		if ((q = realloc(b->p, cap)) == NULL)
			return nomem(r, pos);
		b->p = q;
		b->cap = cap;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
	return 0;
}

static const char *
tname(const struct val *v)
{
	static const char *names[] = {"undefined", "none", "bool", "int",
	    "float", "str", "list", "dict", "namespace", "loop", "function"};

	if (v->t == V_LIST && v->u.l->tuple)
		return "tuple";
	return names[v->t];
}

static struct val
mkstr(const char *p, size_t n)
{
	struct val v;

	v.t = V_STR;
	v.u.s.p = p;
	v.u.s.n = n;
	return v;
}

static struct val
mkint(int t, int64_t i)
{
	struct val v;

	v.t = t;
	v.u.i = i;
	return v;
}

static int
truthy(const struct val *v)
{
	switch (v->t) {
	case V_UNDEF:
	case V_NONE:
		return 0;
	case V_BOOL:
	case V_INT:
		return v->u.i != 0;
	case V_FLOAT:
		return v->u.f != 0;
	case V_STR:
		return v->u.s.n != 0;
	case V_LIST:
		return v->u.l->n != 0;
	case V_DICT:
		return v->u.d->n != 0;
	default:
		return 1;
	}
}

static int
isnum(const struct val *v)
{
	return v->t == V_BOOL || v->t == V_INT || v->t == V_FLOAT;
}

static double
numf(const struct val *v)
{
	return v->t == V_FLOAT ? v->u.f : (double)v->u.i;
}

/* ==, to a bounded depth (deeper values compare unequal). */
static int
equal_d(const struct val *a, const struct val *b, int depth)
{
	size_t i, k;

	if (depth > 4 * MEDHA_JINJA_MAX_DEPTH)
		return 0;
	if (isnum(a) && isnum(b)) {
		if (a->t == V_FLOAT || b->t == V_FLOAT)
			return numf(a) == numf(b);
		return a->u.i == b->u.i;
	}
	if (a->t != b->t)
		return 0;
	switch (a->t) {
	case V_UNDEF:
	case V_NONE:
		return 1;
	case V_STR:
		return a->u.s.n == b->u.s.n &&
		    memcmp(a->u.s.p, b->u.s.p, a->u.s.n) == 0;
	case V_LIST:
		if (a->u.l->n != b->u.l->n || a->u.l->tuple != b->u.l->tuple)
			return 0;
		for (i = 0; i < a->u.l->n; i++)
			if (!equal_d(&a->u.l->v[i], &b->u.l->v[i], depth + 1))
				return 0;
		return 1;
	case V_DICT:
		if (a->u.d->n != b->u.d->n)
			return 0;
		for (i = 0; i < a->u.d->n; i++) {
			for (k = 0; k < b->u.d->n; k++)
				if (equal_d(&a->u.d->k[i], &b->u.d->k[k], depth + 1))
					break;
			if (k == b->u.d->n ||
			    !equal_d(&a->u.d->v[i], &b->u.d->v[k], depth + 1))
				return 0;
		}
		return 1;
	case V_NS:
		return a->u.d == b->u.d;
	case V_LOOP:
		return a->u.lp == b->u.lp;
	default:
		return a->u.i == b->u.i;
	}
}

static int
equal(const struct val *a, const struct val *b)
{
	return equal_d(a, b, 0);
}

static struct val *
dict_get(struct dict *d, const struct val *k)
{
	size_t i;

	for (i = 0; i < d->n; i++)
		if (equal(&d->k[i], k))
			return &d->v[i];
	return NULL;
}

static int
dict_put(struct rctx *r, struct dict *d, struct val k, struct val v)
{
	struct val *old = dict_get(d, &k);

	if (old != NULL) {
		*old = v;
		return 0;
	}
	if (d->n == d->cap) {
		size_t cap = d->cap ? 2 * d->cap : 4;
		struct val *nk = arena_array(&r->ar, cap, sizeof(*nk));
		struct val *nv = arena_array(&r->ar, cap, sizeof(*nv));

		if (nk == NULL || nv == NULL)
			return -1;
		if (d->n) {
			memcpy(nk, d->k, d->n * sizeof(*nk));
			memcpy(nv, d->v, d->n * sizeof(*nv));
		}
		d->k = nk;
		d->v = nv;
		d->cap = cap;
	}
	d->k[d->n] = k;
	d->v[d->n++] = v;
	return 0;
}

static struct dict *
dict_new(struct rctx *r)
{
	struct dict *d = arena_alloc(&r->ar, sizeof(*d));

	if (d != NULL)
		memset(d, 0, sizeof(*d));
	return d;
}

static struct list *
list_new(struct rctx *r, size_t n)
{
	struct list *l = arena_alloc(&r->ar, sizeof(*l));

	if (l == NULL || (l->v = arena_array(&r->ar, n ? n : 1,
	    sizeof(*l->v))) == NULL)
		return NULL;
	l->n = n;
	l->tuple = 0;
	return l;
}

static int
frame_set(struct rctx *r, struct frame *f, const char *name, size_t n,
    struct val v)
{
	size_t i;

	for (i = 0; i < f->n; i++)
		if (f->v[i].n == n && memcmp(f->v[i].name, name, n) == 0) {
			f->v[i].v = v;
			return 0;
		}
	if (f->cap == 0) {
		f->v = f->inl;
		f->cap = sizeof(f->inl) / sizeof(f->inl[0]);
	}
	if (f->n == f->cap) {
		size_t cap = 2 * f->cap;
		struct var *w = arena_array(&r->ar, cap, sizeof(*w));

		if (w == NULL)
			return -1;
		if (f->n)
			memcpy(w, f->v, f->n * sizeof(*w));
		f->v = w;
		f->cap = cap;
	}
	f->v[f->n].name = name;
	f->v[f->n].n = n;
	f->v[f->n++].v = v;
	return 0;
}

static struct val
lookup(struct rctx *r, const char *name, size_t n)
{
	static const struct {
		const char *name;
		int fn;
	} fns[] = {{"range", F_RANGE}, {"namespace", F_NAMESPACE},
	    {"raise_exception", F_RAISE}, {"strftime_now", F_STRFTIME},
	    {"dict", F_DICT}};
	struct frame *f;
	struct val v;
	size_t i;

	for (f = r->top; f != NULL; f = f->up)
		for (i = f->n; i-- > 0;)
			if (f->v[i].n == n && memcmp(f->v[i].name, name, n) == 0)
				return f->v[i].v;
	for (i = 0; i < sizeof(fns) / sizeof(fns[0]); i++)
		if (strlen(fns[i].name) == n && memcmp(fns[i].name, name, n) ==
		    0)
			return mkint(V_FUNC, fns[i].fn);
	v.t = V_UNDEF;
	return v;
}

/* ---------------------------------------------------------------- str() */

/* Python's repr() of a float: the shortest digits that read back. */
static void
float_repr(double x, char *out, size_t len)
{
	char buf[40], digits[24];
	int prec, exp, nd = 0, k;
	char *e, *q;

	if (isnan(x)) {
		snprintf(out, len, "nan");
		return;
	}
	if (isinf(x)) {
		snprintf(out, len, x < 0 ? "-inf" : "inf");
		return;
	}
	for (prec = 1; prec <= 17; prec++) {
		snprintf(buf, sizeof(buf), "%.*e", prec - 1, x);
		if (strtod(buf, NULL) == x)
			break;
	}
	e = strchr(buf, 'e');
	exp = atoi(e + 1);
	for (q = buf; q < e; q++)
		if (*q >= '0' && *q <= '9')
			digits[nd++] = *q;
	while (nd > 1 && digits[nd - 1] == '0')
		nd--;
	digits[nd] = '\0';
	q = out;
	if (x < 0 || (x == 0 && signbit(x)))
		*q++ = '-';
	if (exp >= -4 && exp < 16) {
		if (exp < 0) {
			q += sprintf(q, "0.");
			for (k = -1; k > exp; k--)
				*q++ = '0';
			q += sprintf(q, "%s", digits);
		} else {
			for (k = 0; k <= exp; k++)
				*q++ = k < nd ? digits[k] : '0';
			*q++ = '.';
			if (nd > exp + 1)
				q += sprintf(q, "%s", digits + exp + 1);
			else
				*q++ = '0';
		}
		*q = '\0';
	} else {
		*q++ = digits[0];
		if (nd > 1)
			q += sprintf(q, ".%s", digits + 1);
		sprintf(q, "e%c%02d", exp < 0 ? '-' : '+', abs(exp));
	}
	(void)len;
}

static int tostr_buf(struct rctx *, const struct val *, struct buf *, int,
    size_t);
static int tostr_seq(struct rctx *, const struct val *, struct buf *, size_t);

/* Python's repr() of a string (non-ASCII kept as is). */
static int
repr_str(struct rctx *r, const struct val *v, struct buf *b, size_t pos)
{
	const char *s = v->u.s.p;
	size_t i, n = v->u.s.n;
	char q = '\'', esc[8];

	if (memchr(s, '\'', n) != NULL && memchr(s, '"', n) == NULL)
		q = '"';
	TRY(put(r, b, &q, 1, pos));
	for (i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c == '\\' || c == (unsigned char)q)
			snprintf(esc, sizeof(esc), "\\%c", c);
		else if (c == '\n')
			snprintf(esc, sizeof(esc), "\\n");
		else if (c == '\r')
			snprintf(esc, sizeof(esc), "\\r");
		else if (c == '\t')
			snprintf(esc, sizeof(esc), "\\t");
		else if (c < 0x20 || c == 0x7f)
			snprintf(esc, sizeof(esc), "\\x%02x", c);
		else {
			TRY(put(r, b, s + i, 1, pos));
			continue;
		}
		TRY(put(r, b, esc, strlen(esc), pos));
	}
	return put(r, b, &q, 1, pos);
}

/* repr() of a list, tuple or dict. */
static int
tostr_seq(struct rctx *r, const struct val *v, struct buf *b, size_t pos)
{
	size_t i;

	switch (v->t) {
	case V_LIST:
		TRY(put(r, b, v->u.l->tuple ? "(" : "[", 1, pos));
		for (i = 0; i < v->u.l->n; i++) {
			if (i > 0)
				TRY(put(r, b, ", ", 2, pos));
			TRY(tostr_buf(r, &v->u.l->v[i], b, 1, pos));
		}
		if (v->u.l->tuple && v->u.l->n == 1)
			TRY(put(r, b, ",", 1, pos));
		return put(r, b, v->u.l->tuple ? ")" : "]", 1, pos);
	case V_DICT:
		TRY(put(r, b, "{", 1, pos));
		for (i = 0; i < v->u.d->n; i++) {
			if (i > 0)
				TRY(put(r, b, ", ", 2, pos));
			TRY(tostr_buf(r, &v->u.d->k[i], b, 1, pos));
			TRY(put(r, b, ": ", 2, pos));
			TRY(tostr_buf(r, &v->u.d->v[i], b, 1, pos));
		}
		return put(r, b, "}", 1, pos);
	default:
		return 0;
	}
}

/* str(v) (repr: repr(v)) appended to b. */
static int
tostr_buf(struct rctx *r, const struct val *v, struct buf *b, int repr,
    size_t pos)
{
	char num[64];
	int rc;

	if (v->t == V_LIST || v->t == V_DICT) {
		if (++r->edepth > 4 * MEDHA_JINJA_MAX_DEPTH)
			rc = rfail(r, pos, MEDHA_ENOSPACE,
			    "value nested too deep to print");
		else
			rc = tostr_seq(r, v, b, pos);
		r->edepth--;
		return rc;
	}
	switch (v->t) {
	case V_UNDEF:
		return 0;
	case V_NONE:
		return put(r, b, "None", 4, pos);
	case V_BOOL:
		return v->u.i ? put(r, b, "True", 4, pos) :
		    put(r, b, "False", 5, pos);
	case V_INT:
		snprintf(num, sizeof(num), "%lld", (long long)v->u.i);
		return put(r, b, num, strlen(num), pos);
	case V_FLOAT:
		float_repr(v->u.f, num, sizeof(num));
		return put(r, b, num, strlen(num), pos);
	case V_STR:
		if (repr)
			return repr_str(r, v, b, pos);
		return put(r, b, v->u.s.p, v->u.s.n, pos);
	default:
		return rfail(r, pos, MEDHA_EUNSUP, "cannot print a %s",
		    tname(v));
	}
}

/* str(v) as a string value (in the arena unless it is one already). */
static int
tostr(struct rctx *r, const struct val *v, struct val *out, size_t pos)
{
	struct buf b = {NULL, 0, 0};
	char *p;
	int rc;

	if (v->t == V_STR) {
		*out = *v;
		return 0;
	}
	if (v->t == V_UNDEF) {
		*out = mkstr("", 0);
		return 0;
	}
	if ((rc = tostr_buf(r, v, &b, 0, pos)) != 0) {
		free(b.p);
		return rc;
	}
	if ((p = arena_alloc(&r->ar, b.n + 1)) == NULL) {
		free(b.p);
		return nomem(r, pos);
	}
	if (b.n)
		memcpy(p, b.p, b.n);
	free(b.p);
	*out = mkstr(p, b.n);
	return 0;
}

/* Python's json.dumps(v, ensure_ascii=False, indent, separators). */
struct jsonfmt {
	const char *indent, *isep, *ksep;
	size_t indn;
	int sort;
};

static int
tojson(struct rctx *r, const struct val *v, struct buf *b,
    const struct jsonfmt *f, int level, size_t pos)
{
	char num[64];
	size_t i, n;
	int lv;

	if (level > MEDHA_JINJA_MAX_DEPTH)
		return rfail(r, pos, MEDHA_ENOSPACE, "tojson: nested too deep");
	switch (v->t) {
	case V_NONE:
		return put(r, b, "null", 4, pos);
	case V_BOOL:
		return v->u.i ? put(r, b, "true", 4, pos) :
		    put(r, b, "false", 5, pos);
	case V_INT:
		snprintf(num, sizeof(num), "%lld", (long long)v->u.i);
		return put(r, b, num, strlen(num), pos);
	case V_FLOAT:
		if (isnan(v->u.f))
			return put(r, b, "NaN", 3, pos);
		if (isinf(v->u.f))
			return v->u.f > 0 ? put(r, b, "Infinity", 8, pos) :
			    put(r, b, "-Infinity", 9, pos);
		float_repr(v->u.f, num, sizeof(num));
		return put(r, b, num, strlen(num), pos);
	case V_STR:
		TRY(put(r, b, "\"", 1, pos));
		for (i = 0; i < v->u.s.n; i++) {
			unsigned char c = (unsigned char)v->u.s.p[i];
			const char *e = NULL;

			switch (c) {
			case '"': e = "\\\""; break;
			case '\\': e = "\\\\"; break;
			case '\n': e = "\\n"; break;
			case '\r': e = "\\r"; break;
			case '\t': e = "\\t"; break;
			case '\b': e = "\\b"; break;
			case '\f': e = "\\f"; break;
			}
			if (e == NULL && c < 0x20) {
				snprintf(num, sizeof(num), "\\u%04x", c);
				e = num;
			}
			if (e != NULL)
				TRY(put(r, b, e, strlen(e), pos));
			else
				TRY(put(r, b, v->u.s.p + i, 1, pos));
		}
		return put(r, b, "\"", 1, pos);
	case V_LIST:
	case V_DICT:
		n = v->t == V_LIST ? v->u.l->n : v->u.d->n;
		TRY(put(r, b, v->t == V_LIST ? "[" : "{", 1, pos));
		if (n == 0)
			return put(r, b, v->t == V_LIST ? "]" : "}", 1, pos);
		for (i = 0; i < n; i++) {
			size_t k = i;

			if (i > 0)
				TRY(put(r, b, f->isep, strlen(f->isep), pos));
			if (f->indent != NULL) {
				TRY(put(r, b, "\n", 1, pos));
				for (lv = 0; lv <= level; lv++)
					TRY(put(r, b, f->indent, f->indn, pos));
			}
			if (v->t == V_LIST) {
				TRY(tojson(r, &v->u.l->v[i], b, f, level + 1,
				    pos));
				continue;
			}
			if (f->sort) { /* the i-th smallest key */
				size_t a, m, rank;

				for (k = 0; k < n; k++) {
					for (a = 0, rank = 0; a < n; a++) {
						const struct val *x =
						    &v->u.d->k[a], *y =
						    &v->u.d->k[k];

						m = x->u.s.n < y->u.s.n ?
						    x->u.s.n : y->u.s.n;
						if (x->t == V_STR &&
						    y->t == V_STR &&
						    (memcmp(x->u.s.p, y->u.s.p,
						    m) < 0 || (memcmp(x->u.s.p,
						    y->u.s.p, m) == 0 &&
						    x->u.s.n < y->u.s.n)))
							rank++;
					}
					if (rank == i)
						break;
				}
			}
			if (v->u.d->k[k].t != V_STR)
				return rfail(r, pos, MEDHA_EUNSUP,
				    "tojson: keys must be strings");
			TRY(tojson(r, &v->u.d->k[k], b, f, level + 1, pos));
			TRY(put(r, b, f->ksep, strlen(f->ksep), pos));
			TRY(tojson(r, &v->u.d->v[k], b, f, level + 1, pos));
		}
		if (f->indent != NULL) {
			TRY(put(r, b, "\n", 1, pos));
			for (lv = 0; lv < level; lv++)
				TRY(put(r, b, f->indent, f->indn, pos));
		}
		return put(r, b, v->t == V_LIST ? "]" : "}", 1, pos);
	default:
		return rfail(r, pos, MEDHA_EFORMAT,
		    "tojson: a %s is not JSON serializable", tname(v));
	}
}

/* ---------------------------------------------------------------- access */

/* The items a for loop or a filter walks: list items, chars, keys. */
static int
iterate(struct rctx *r, const struct val *v, struct val **items, size_t *n,
    size_t pos)
{
	size_t i, k, c;

	switch (v->t) {
	case V_UNDEF:
		*items = NULL;
		*n = 0;
		return 0;
	case V_LIST:
		*items = v->u.l->v;
		*n = v->u.l->n;
		return 0;
	case V_DICT:
		*items = v->u.d->k;
		*n = v->u.d->n;
		return 0;
	case V_STR:
		c = cp_count(v->u.s.p, v->u.s.n);
		if ((*items = arena_array(&r->ar, c ? c : 1, sizeof(**items))) ==
		    NULL)
			return nomem(r, pos);
		for (i = 0, k = 0; i < v->u.s.n; k++) {
			uint32_t cp;
			size_t m = utf8_dec(v->u.s.p + i, v->u.s.n - i, &cp);

			(*items)[k] = mkstr(v->u.s.p + i, m);
			i += m;
		}
		*n = k;
		return 0;
	default:
		return rfail(r, pos, MEDHA_EFORMAT, "a %s is not iterable",
		    tname(v));
	}
}

static int
undef_use(struct rctx *r, const struct node *e)
{
	const struct node *x = e;

	while (x->kind == E_ATTR || x->kind == E_INDEX || x->kind == E_CALL ||
	    x->kind == E_SLICE)
		x = x->a;
	if (x->kind == E_NAME)
		return rfail(r, e->pos, MEDHA_EFORMAT, "'%.*s' is undefined",
		    (int)x->nlen, x->name);
	return rfail(r, e->pos, MEDHA_EFORMAT, "use of an undefined value");
}

static struct val
loop_attr(const struct loopst *lp, const char *s, size_t n)
{
	struct val v;

	v.t = V_UNDEF;
#define IS(w) (n == strlen(w) && memcmp(s, w, n) == 0)
	if (IS("index"))
		return mkint(V_INT, (int64_t)lp->k + 1);
	if (IS("index0"))
		return mkint(V_INT, (int64_t)lp->k);
	if (IS("revindex"))
		return mkint(V_INT, (int64_t)(lp->n - lp->k));
	if (IS("revindex0"))
		return mkint(V_INT, (int64_t)(lp->n - lp->k - 1));
	if (IS("first"))
		return mkint(V_BOOL, lp->k == 0);
	if (IS("last"))
		return mkint(V_BOOL, lp->k + 1 == lp->n);
	if (IS("length"))
		return mkint(V_INT, (int64_t)lp->n);
	if (IS("depth"))
		return mkint(V_INT, 1);
	if (IS("depth0"))
		return mkint(V_INT, 0);
	if (IS("previtem") && lp->k > 0)
		return lp->items[lp->k - 1];
	if (IS("nextitem") && lp->k + 1 < lp->n)
		return lp->items[lp->k + 1];
#undef IS
	return v;
}

/* obj[key] as Jinja2's getitem: missing is undefined, not an error. */
static int
getitem(struct rctx *r, const struct val *o, const struct val *key,
    struct val *out, size_t pos)
{
	struct val *x;
	int64_t i, n;

	out->t = V_UNDEF;
	switch (o->t) {
	case V_LIST:
		if (key->t != V_INT && key->t != V_BOOL)
			return 0;
		n = (int64_t)o->u.l->n;
		i = key->u.i < 0 ? key->u.i + n : key->u.i;
		if (i >= 0 && i < n)
			*out = o->u.l->v[i];
		return 0;
	case V_STR: {
		struct val *items;
		size_t cn;

		if (key->t != V_INT && key->t != V_BOOL)
			return 0;
		TRY(iterate(r, o, &items, &cn, pos));
		i = key->u.i < 0 ? key->u.i + (int64_t)cn : key->u.i;
		if (i >= 0 && i < (int64_t)cn)
			*out = items[i];
		return 0;
	}
	case V_DICT:
	case V_NS:
		if ((x = dict_get(o->u.d, key)) != NULL)
			*out = *x;
		return 0;
	case V_LOOP:
		if (key->t == V_STR)
			*out = loop_attr(o->u.lp, key->u.s.p, key->u.s.n);
		return 0;
	default:
		return 0;
	}
}

static int64_t
clampi(int64_t i, int64_t n, int64_t lo, int64_t hi)
{
	if (i < 0)
		i += n;
	return i < lo ? lo : i > hi ? hi : i;
}

/* obj[a:b:c] of a list or a string, with Python's rules. */
static int
slice(struct rctx *r, const struct val *o, const struct val *sv, size_t pos,
    struct val *out)
{
	struct val *items;
	size_t n, k = 0, bytes = 0;
	int64_t a, b, c = 1, i, len;
	struct list *l;
	char *p;

	for (i = 0; i < 3; i++)
		if (sv[i].t != V_NONE && sv[i].t != V_UNDEF &&
		    sv[i].t != V_INT && sv[i].t != V_BOOL)
			return rfail(r, pos, MEDHA_EFORMAT,
			    "slice indices must be integers");
	if (o->t != V_LIST && o->t != V_STR)
		return rfail(r, pos, MEDHA_EFORMAT, "cannot slice a %s",
		    tname(o));
	TRY(iterate(r, o, &items, &n, pos));
	len = (int64_t)n;
	if (sv[2].t == V_INT || sv[2].t == V_BOOL)
		c = sv[2].u.i;
	if (c == 0)
		return rfail(r, pos, MEDHA_EFORMAT, "slice step cannot be zero");
	if (c > 0) {
		a = sv[0].t == V_INT || sv[0].t == V_BOOL ?
		    clampi(sv[0].u.i, len, 0, len) : 0;
		b = sv[1].t == V_INT || sv[1].t == V_BOOL ?
		    clampi(sv[1].u.i, len, 0, len) : len;
	} else {
		a = sv[0].t == V_INT || sv[0].t == V_BOOL ?
		    clampi(sv[0].u.i, len, -1, len - 1) : len - 1;
		b = sv[1].t == V_INT || sv[1].t == V_BOOL ?
		    clampi(sv[1].u.i, len, -1, len - 1) : -1;
	}
	if ((l = list_new(r, n)) == NULL)
		return nomem(r, pos);
	for (i = a; c > 0 ? i < b : i > b; i += c) {
		l->v[k++] = items[i];
		if (o->t == V_STR)
			bytes += items[i].u.s.n;
	}
	l->n = k;
	if (o->t == V_LIST) {
		out->t = V_LIST;
		out->u.l = l;
		return 0;
	}
	if ((p = arena_alloc(&r->ar, bytes + 1)) == NULL)
		return nomem(r, pos);
	*out = mkstr(p, bytes);
	for (i = 0; i < (int64_t)k; i++) {
		memcpy(p, l->v[i].u.s.p, l->v[i].u.s.n);
		p += l->v[i].u.s.n;
	}
	return 0;
}

/* ---------------------------------------------------------------- operators */

static int
cmp_order(struct rctx *r, const struct val *a, const struct val *b, int *c,
    size_t pos)
{
	size_t m, i;

	if (isnum(a) && isnum(b)) {
		double x = numf(a), y = numf(b);

		if (a->t != V_FLOAT && b->t != V_FLOAT)
			*c = a->u.i < b->u.i ? -1 : a->u.i > b->u.i;
		else
			*c = x < y ? -1 : x > y;
		return 0;
	}
	if (a->t == V_STR && b->t == V_STR) {
		m = a->u.s.n < b->u.s.n ? a->u.s.n : b->u.s.n;
		*c = memcmp(a->u.s.p, b->u.s.p, m);
		if (*c == 0)
			*c = a->u.s.n < b->u.s.n ? -1 : a->u.s.n > b->u.s.n;
		return 0;
	}
	if (a->t == V_LIST && b->t == V_LIST &&
	    a->u.l->tuple == b->u.l->tuple) {
		for (i = 0; i < a->u.l->n && i < b->u.l->n; i++) {
			if (equal(&a->u.l->v[i], &b->u.l->v[i]))
				continue;
			if (++r->edepth > 4 * MEDHA_JINJA_MAX_DEPTH)
				i = (size_t)rfail(r, pos, MEDHA_ENOSPACE,
				    "values nested too deep to compare");
			else
				i = (size_t)cmp_order(r, &a->u.l->v[i],
				    &b->u.l->v[i], c, pos);
			r->edepth--;
			return (int)i;
		}
		*c = a->u.l->n < b->u.l->n ? -1 : a->u.l->n > b->u.l->n;
		return 0;
	}
	return rfail(r, pos, MEDHA_EFORMAT,
	    "cannot order a %s and a %s", tname(a), tname(b));
}

static int
contains(struct rctx *r, const struct val *hay, const struct val *x,
    int *found, size_t pos)
{
	size_t i;

	*found = 0;
	switch (hay->t) {
	case V_STR:
		if (x->t != V_STR)
			return rfail(r, pos, MEDHA_EFORMAT,
			    "'in <string>' requires a string, not a %s",
			    tname(x));
		*found = x->u.s.n == 0 || memmem(hay->u.s.p, hay->u.s.n,
		    x->u.s.p, x->u.s.n) != NULL;
		return 0;
	case V_LIST:
		for (i = 0; i < hay->u.l->n && !*found; i++)
			*found = equal(&hay->u.l->v[i], x);
		return 0;
	case V_DICT:
		*found = dict_get(hay->u.d, x) != NULL;
		return 0;
	case V_UNDEF:
		return 0;
	default:
		return rfail(r, pos, MEDHA_EFORMAT,
		    "a %s does not support 'in'", tname(hay));
	}
}

static int
concat(struct rctx *r, const struct val *a, const struct val *b,
    struct val *out, size_t pos)
{
	char *p;

	if (a->u.s.n > MEDHA_JINJA_MAX_MEM || b->u.s.n > MEDHA_JINJA_MAX_MEM)
		return nomem(r, pos);
	if ((p = arena_alloc(&r->ar, a->u.s.n + b->u.s.n + 1)) == NULL)
		return nomem(r, pos);
	if (a->u.s.n)
		memcpy(p, a->u.s.p, a->u.s.n);
	if (b->u.s.n)
		memcpy(p + a->u.s.n, b->u.s.p, b->u.s.n);
	*out = mkstr(p, a->u.s.n + b->u.s.n);
	return 0;
}

static int
binop(struct rctx *r, int op, const struct val *a, const struct val *b,
    struct val *out, size_t pos)
{
	int64_t x, y, z = 0;
	int c, ovf = 0;

	switch (op) {
	case OP2('=', '='):
		*out = mkint(V_BOOL, equal(a, b));
		return 0;
	case OP2('!', '='):
		*out = mkint(V_BOOL, !equal(a, b));
		return 0;
	case '<':
	case '>':
	case OP2('<', '='):
	case OP2('>', '='):
		TRY(cmp_order(r, a, b, &c, pos));
		*out = mkint(V_BOOL, op == '<' ? c < 0 : op == '>' ? c > 0 :
		    op == OP2('<', '=') ? c <= 0 : c >= 0);
		return 0;
	case 'i':
	case 'n':
		TRY(contains(r, b, a, &c, pos));
		*out = mkint(V_BOOL, op == 'i' ? c : !c);
		return 0;
	}
	if (a->t == V_UNDEF || b->t == V_UNDEF)
		return rfail(r, pos, MEDHA_EFORMAT,
		    "arithmetic on an undefined value");
	if (op == '+' && a->t == V_STR && b->t == V_STR)
		return concat(r, a, b, out, pos);
	if (op == '+' && a->t == V_LIST && b->t == V_LIST &&
	    a->u.l->tuple == b->u.l->tuple) {
		struct list *l = list_new(r, a->u.l->n + b->u.l->n);

		if (l == NULL)
			return nomem(r, pos);
		memcpy(l->v, a->u.l->v, a->u.l->n * sizeof(*l->v));
		memcpy(l->v + a->u.l->n, b->u.l->v, b->u.l->n * sizeof(*l->v));
		l->tuple = a->u.l->tuple;
		out->t = V_LIST;
		out->u.l = l;
		return 0;
	}
	if (!isnum(a) || !isnum(b))
		return rfail(r, pos, MEDHA_EFORMAT,
		    "unsupported operand types for '%c%c': %s and %s",
		    op & 0xff, op >> 8 ? op >> 8 : ' ', tname(a), tname(b));
	if (a->t == V_FLOAT || b->t == V_FLOAT || op == '/') {
		double f = numf(a), g = numf(b), h;

		if ((op == '/' || op == '%' || op == OP2('/', '/')) && g == 0)
			return rfail(r, pos, MEDHA_EFORMAT, "division by zero");
		switch (op) {
		case '+': h = f + g; break;
		case '-': h = f - g; break;
		case '*': h = f * g; break;
		case '/': h = f / g; break;
		case OP2('/', '/'): h = floor(f / g); break;
		case '%': h = fmod(f, g); if (h != 0 && (h < 0) != (g < 0)) h += g; break;
		default: h = pow(f, g); break;
		}
		out->t = V_FLOAT;
		out->u.f = h;
		return 0;
	}
	x = a->u.i;
	y = b->u.i;
	switch (op) {
	case '+':
		ovf = __builtin_add_overflow(x, y, &z);
		break;
	case '-':
		ovf = __builtin_sub_overflow(x, y, &z);
		break;
	case '*':
		ovf = __builtin_mul_overflow(x, y, &z);
		break;
	case OP2('/', '/'):
	case '%':
		if (y == 0)
			return rfail(r, pos, MEDHA_EFORMAT, "division by zero");
		if (x == INT64_MIN && y == -1) {
			ovf = 1;
			break;
		}
		z = op == '%' ? x % y : x / y;
		if (op == '%' && z != 0 && (z < 0) != (y < 0))
			z += y;
		else if (op != '%' && (x % y != 0) && ((x < 0) != (y < 0)))
			z--;
		break;
	default: /* ** */
		if (y < 0)
			return rfail(r, pos, MEDHA_EUNSUP,
			    "negative powers are not supported");
		if (x >= -1 && x <= 1) /* no loop of y turns for these */
			z = x == 1 || (x == -1 && y % 2 == 0) || y == 0 ? 1 :
			    x;
		else
			for (z = 1; y > 0 && !ovf; y--)
				ovf = __builtin_mul_overflow(z, x, &z);
		break;
	}
	if (ovf)
		return rfail(r, pos, MEDHA_ERANGE, "integer overflow");
	*out = mkint(V_INT, z);
	return 0;
}

/* ---------------------------------------------------------------- calls */

static int eval(struct rctx *, const struct node *, struct val *);

/* A call's arguments: positional into pv, keywords matched by name. */
struct args {
	struct val pv[4];
	size_t np;
	const struct node *kw[8];
	struct val kv[8];
	size_t nk;
};

static int
eval_args(struct rctx *r, const struct node *e, struct args *a)
{
	size_t i;

	a->np = a->nk = 0;
	for (i = 0; i < e->nv; i++) {
		const struct node *x = e->v[i];

		if (x->kind == E_KWARG) {
			if (a->nk == 8)
				return rfail(r, x->pos, MEDHA_EUNSUP,
				    "too many keyword arguments");
			a->kw[a->nk] = x;
			TRY(eval(r, x->a, &a->kv[a->nk++]));
		} else {
			if (a->np == 4)
				return rfail(r, x->pos, MEDHA_EUNSUP,
				    "too many arguments");
			TRY(eval(r, x, &a->pv[a->np++]));
		}
	}
	return 0;
}

/* Argument name, given as a keyword; NULL if not. */
static const struct val *
kwarg(const struct args *a, const char *name)
{
	size_t i;

	for (i = 0; i < a->nk; i++)
		if (a->kw[i]->nlen == strlen(name) &&
		    memcmp(a->kw[i]->name, name, a->kw[i]->nlen) == 0)
			return &a->kv[i];
	return NULL;
}

/* Argument k (positional) or name (keyword); NULL if not given. */
static const struct val *
arg(const struct args *a, size_t k, const char *name)
{
	size_t i;

	if (k < a->np)
		return &a->pv[k];
	for (i = 0; name != NULL && i < a->nk; i++)
		if (a->kw[i]->nlen == strlen(name) &&
		    memcmp(a->kw[i]->name, name, a->kw[i]->nlen) == 0)
			return &a->kv[i];
	return NULL;
}

static int
want_str(struct rctx *r, const struct val *v, const char *what, size_t pos)
{
	if (v == NULL || v->t != V_STR)
		return rfail(r, pos, MEDHA_EFORMAT, "%s: expected a string",
		    what);
	return 0;
}

/* Case mapping of ASCII letters; other bytes stay (see jinja.h). */
static int
recase(struct rctx *r, const struct val *in, int mode, struct val *out,
    size_t pos)
{
	char *p;
	size_t i;
	int start = 1;

	if ((p = arena_alloc(&r->ar, in->u.s.n + 1)) == NULL)
		return nomem(r, pos);
	for (i = 0; i < in->u.s.n; i++) {
		char c = in->u.s.p[i];
		int alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
		int up = mode == 'U' || ((mode == 'T' || mode == 'C') && start);

		if (mode == 'C')
			start = 0;
		else if (mode == 'T')
			start = !alpha && ((unsigned char)c < 0x80);
		if (up && c >= 'a' && c <= 'z')
			c = (char)(c - 32);
		else if (!up && mode != 'U' && c >= 'A' && c <= 'Z')
			c = (char)(c + 32);
		p[i] = c;
	}
	*out = mkstr(p, in->u.s.n);
	return 0;
}

static int
strip(struct rctx *r, const struct val *s, const struct val *chars, int lr,
    struct val *out, size_t pos)
{
	const char *set = NULL;
	size_t setn = 0, a = 0, b = s->u.s.n;

	if (chars != NULL && chars->t != V_NONE) {
		TRY(want_str(r, chars, "strip", pos));
		set = chars->u.s.p;
		setn = chars->u.s.n;
	}
	if (lr & 1)
		a = lstrip_len(s->u.s.p, b, set, setn);
	if (lr & 2)
		b = a + rstrip_len(s->u.s.p + a, b - a, set, setn);
	*out = mkstr(s->u.s.p + a, b - a);
	return 0;
}

static int
replace(struct rctx *r, const struct val *s, const struct val *old,
    const struct val *new, const struct val *count, struct val *out,
    size_t pos)
{
	struct buf b = {NULL, 0, 0};
	int64_t max = count != NULL && count->t == V_INT ? count->u.i : -1;
	size_t i = 0;
	char *p;
	int rc = 0;

	TRY(want_str(r, old, "replace", pos));
	TRY(want_str(r, new, "replace", pos));
	while (i <= s->u.s.n && rc == 0) {
		const char *hit;
		size_t at;

		if (max == 0)
			hit = NULL;
		else if (old->u.s.n == 0) /* between every character */
			hit = s->u.s.p + i;
		else
			hit = memmem(s->u.s.p + i, s->u.s.n - i, old->u.s.p,
			    old->u.s.n);
		if (hit == NULL) {
			rc = put(r, &b, s->u.s.p + i, s->u.s.n - i, pos);
			break;
		}
		at = (size_t)(hit - s->u.s.p);
		if ((rc = put(r, &b, s->u.s.p + i, at - i, pos)) == 0)
			rc = put(r, &b, new->u.s.p, new->u.s.n, pos);
		if (max > 0)
			max--;
		if (old->u.s.n == 0) {
			uint32_t cp;

			if (at == s->u.s.n)
				break;
			i = at + utf8_dec(s->u.s.p + at, s->u.s.n - at, &cp);
			rc = rc ? rc : put(r, &b, s->u.s.p + at, i - at, pos);
		} else
			i = at + old->u.s.n;
	}
	if (rc == 0 && (p = arena_alloc(&r->ar, b.n + 1)) == NULL)
		rc = nomem(r, pos);
	if (rc == 0) {
		if (b.n)
			memcpy(p, b.p, b.n);
		*out = mkstr(p, b.n);
	}
	free(b.p);
	return rc;
}

static int
mklist(struct rctx *r, const struct val *items, size_t n, struct val *out,
    size_t pos)
{
	struct list *l = list_new(r, n);

	if (l == NULL)
		return nomem(r, pos);
	if (n)
		memcpy(l->v, items, n * sizeof(*items));
	out->t = V_LIST;
	out->u.l = l;
	return 0;
}

static int test_named(struct rctx *, const char *, size_t, const struct val *,
    const struct val *, size_t, int *, size_t);

/* The "attribute" of a map/selectattr argument: a.b.c paths. */
static int
attr_path(struct rctx *r, const struct val *v, const struct val *path,
    struct val *out, size_t pos)
{
	const char *s = path->u.s.p, *dot;
	size_t n = path->u.s.n;
	struct val cur = *v, k, next;

	for (;;) {
		dot = memchr(s, '.', n);
		k = mkstr(s, dot ? (size_t)(dot - s) : n);
		if (cur.t == V_UNDEF)
			return rfail(r, pos, MEDHA_EFORMAT,
			    "attribute of an undefined value");
		TRY(getitem(r, &cur, &k, &next, pos));
		cur = next;
		if (dot == NULL)
			break;
		n -= (size_t)(dot - s) + 1;
		s = dot + 1;
	}
	*out = cur;
	return 0;
}

static int filter_named(struct rctx *, const char *, size_t,
    const struct val *, struct args *, struct val *, size_t);

/* select, reject, selectattr, rejectattr, map. */
static int
filter_seq(struct rctx *r, const char *name, const struct val *in,
    struct args *a, struct val *out, size_t pos)
{
	int sel = name[0] == 's', attr = strstr(name, "attr") != NULL;
	int map = strcmp(name, "map") == 0;
	struct val *items, *res, x;
	size_t n, i, k = 0, first = attr ? 1 : 0;
	int ok;

	TRY(iterate(r, in, &items, &n, pos));
	if ((res = arena_array(&r->ar, n ? n : 1, sizeof(*res))) == NULL)
		return nomem(r, pos);
	for (i = 0; i < n; i++) {
		x = items[i];
		if (map) {
			const struct val *at = kwarg(a, "attribute");

			if (at != NULL) {
				TRY(want_str(r, at, "map", pos));
				TRY(attr_path(r, &x, at, &x, pos));
				if (x.t == V_UNDEF && kwarg(a, "default"))
					x = *kwarg(a, "default");
			} else {
				struct args sub = *a;

				TRY(want_str(r, arg(a, 0, NULL), "map", pos));
				memmove(sub.pv, sub.pv + 1,
				    (sub.np - 1) * sizeof(*sub.pv));
				sub.np--;
				TRY(filter_named(r, a->pv[0].u.s.p,
				    a->pv[0].u.s.n, &x, &sub, &x, pos));
			}
			res[k++] = x;
			continue;
		}
		if (attr) {
			TRY(want_str(r, arg(a, 0, NULL), name, pos));
			TRY(attr_path(r, &x, &a->pv[0], &x, pos));
		}
		if (a->np > first) {
			TRY(want_str(r, &a->pv[first], name, pos));
			TRY(test_named(r, a->pv[first].u.s.p,
			    a->pv[first].u.s.n, &x, a->np > first + 1 ?
			    &a->pv[first + 1] : NULL, a->np > first + 1, &ok,
			    pos));
		} else
			ok = truthy(&x);
		if (ok == sel)
			res[k++] = items[i];
	}
	return mklist(r, res, k, out, pos);
}

static int
filter_named(struct rctx *r, const char *fs, size_t fn, const struct val *in,
    struct args *a, struct val *out, size_t pos)
{
	char name[32];
	struct val s, *items, inv = *in;
	size_t n;

	in = &inv; /* out may be in */
	snprintf(name, sizeof(name), "%.*s", (int)(fn < 31 ? fn : 31), fs);
#define F(w) (strcmp(name, w) == 0)
	if (F("default") || F("d")) {
		const struct val *d = arg(a, 0, "default_value"),
				 *b = arg(a, 1, "boolean");
		struct val empty = mkstr("", 0);

		if (in->t == V_UNDEF || (b != NULL && truthy(b) && !truthy(in)))
			*out = d != NULL ? *d : empty;
		else
			*out = *in;
		return 0;
	}
	if (F("safe")) {
		*out = *in;
		return 0;
	}
	if (F("length") || F("count")) {
		if (in->t == V_STR)
			*out = mkint(V_INT, (int64_t)cp_count(in->u.s.p,
			    in->u.s.n));
		else if (in->t == V_LIST || in->t == V_DICT ||
		    in->t == V_UNDEF) {
			TRY(iterate(r, in, &items, &n, pos));
			*out = mkint(V_INT, (int64_t)n);
		} else
			return rfail(r, pos, MEDHA_EFORMAT,
			    "a %s has no length", tname(in));
		return 0;
	}
	if (F("tojson")) {
		struct jsonfmt f = {NULL, ", ", ": ", 0, 0};
		const struct val *ind = arg(a, 1, "indent"),
				 *sep = arg(a, 3, "separators"),
				 *sk = arg(a, 4, "sort_keys");
		static const char spaces[] = "                ";
		struct buf b = {NULL, 0, 0};
		char *p;
		int rc;

		if (ind != NULL && ind->t == V_INT) {
			if (ind->u.i < 0 || ind->u.i > 16)
				return rfail(r, pos, MEDHA_EUNSUP,
				    "tojson: indent out of range");
			f.indent = spaces;
			f.indn = (size_t)ind->u.i;
			f.isep = ",";
		} else if (ind != NULL && ind->t == V_STR) {
			f.indent = ind->u.s.p;
			f.indn = ind->u.s.n;
			f.isep = ",";
		}
		if (sep != NULL && sep->t == V_LIST && sep->u.l->n == 2 &&
		    sep->u.l->v[0].t == V_STR && sep->u.l->v[1].t == V_STR) {
			/* both end at a NUL-free copy below */
			struct val x, y;

			TRY(concat(r, &sep->u.l->v[0], &(struct val){.t = V_STR,
			    .u.s = {"\0", 1}}, &x, pos));
			TRY(concat(r, &sep->u.l->v[1], &(struct val){.t = V_STR,
			    .u.s = {"\0", 1}}, &y, pos));
			f.isep = x.u.s.p;
			f.ksep = y.u.s.p;
		}
		f.sort = sk != NULL && truthy(sk);
		if ((rc = tojson(r, in, &b, &f, 0, pos)) == 0 &&
		    (p = arena_alloc(&r->ar, b.n + 1)) == NULL)
			rc = nomem(r, pos);
		if (rc == 0) {
			if (b.n)
				memcpy(p, b.p, b.n);
			*out = mkstr(p, b.n);
		}
		free(b.p);
		return rc;
	}
	if (F("first") || F("last")) {
		TRY(iterate(r, in, &items, &n, pos));
		out->t = V_UNDEF;
		if (n > 0)
			*out = items[F("first") ? 0 : n - 1];
		return 0;
	}
	if (F("list") || F("reverse")) {
		struct val *w;
		size_t i;

		if (F("reverse") && in->t != V_STR && in->t != V_LIST)
			return rfail(r, pos, MEDHA_EFORMAT,
			    "cannot reverse a %s", tname(in));
		TRY(iterate(r, in, &items, &n, pos));
		if ((w = arena_array(&r->ar, n ? n : 1, sizeof(*w))) == NULL)
			return nomem(r, pos);
		for (i = 0; i < n; i++)
			w[i] = items[F("list") ? i : n - 1 - i];
		if (F("reverse") && in->t == V_STR) {
			struct val l;

			struct args none;

			memset(&none, 0, sizeof(none));
			TRY(mklist(r, w, n, &l, pos));
			return filter_named(r, "join", 4, &l, &none, out, pos);
		}
		return mklist(r, w, n, out, pos);
	}
	if (F("items")) {
		struct val *w;
		size_t i;

		if (in->t == V_UNDEF)
			return mklist(r, NULL, 0, out, pos);
		if (in->t != V_DICT)
			return rfail(r, pos, MEDHA_EFORMAT,
			    "items: expected a mapping, got a %s", tname(in));
		n = in->u.d->n;
		if ((w = arena_array(&r->ar, n ? n : 1, sizeof(*w))) == NULL)
			return nomem(r, pos);
		for (i = 0; i < n; i++) {
			TRY(mklist(r, (struct val[2]){in->u.d->k[i],
			    in->u.d->v[i]}, 2, &w[i], pos));
			w[i].u.l->tuple = 1;
		}
		return mklist(r, w, n, out, pos);
	}
	if (F("join")) {
		const struct val *sep = arg(a, 0, "d"), *at = arg(a, 1,
		    "attribute");
		struct buf b = {NULL, 0, 0};
		size_t i;
		char *p;
		int rc = 0;

		TRY(iterate(r, in, &items, &n, pos));
		if (sep != NULL)
			TRY(want_str(r, sep, "join", pos));
		for (i = 0; i < n && rc == 0; i++) {
			struct val x = items[i];

			if (at != NULL && (rc = want_str(r, at, "join",
			    pos)) == 0)
				rc = attr_path(r, &x, at, &x, pos);
			if (rc == 0 && i > 0 && sep != NULL)
				rc = put(r, &b, sep->u.s.p, sep->u.s.n, pos);
			if (rc == 0)
				rc = tostr_buf(r, &x, &b, 0, pos);
		}
		if (rc == 0 && (p = arena_alloc(&r->ar, b.n + 1)) == NULL)
			rc = nomem(r, pos);
		if (rc == 0) {
			if (b.n)
				memcpy(p, b.p, b.n);
			*out = mkstr(p, b.n);
		}
		free(b.p);
		return rc;
	}
	if (F("select") || F("reject") || F("selectattr") ||
	    F("rejectattr") || F("map"))
		return filter_seq(r, name, in, a, out, pos);
	if (F("int")) {
		const struct val *d = arg(a, 0, "default");

		*out = d != NULL ? *d : mkint(V_INT, 0);
		if (in->t == V_INT || in->t == V_BOOL)
			*out = mkint(V_INT, in->u.i);
		else if (in->t == V_FLOAT && fabs(in->u.f) < 9e18)
			*out = mkint(V_INT, (int64_t)in->u.f);
		else if (in->t == V_STR && in->u.s.n < 40) {
			char b[48];
			int64_t i;

			snprintf(b, sizeof(b), "%.*s", (int)in->u.s.n,
			    in->u.s.p);
			if (medha_parse_i64(b, INT64_MIN, INT64_MAX, &i) == 0)
				*out = mkint(V_INT, i);
		}
		return 0;
	}
	if (F("abs")) {
		if (in->t == V_FLOAT) {
			out->t = V_FLOAT;
			out->u.f = fabs(in->u.f);
		} else if (in->t == V_INT || in->t == V_BOOL) {
			if (in->u.i == INT64_MIN)
				return rfail(r, pos, MEDHA_ERANGE,
				    "integer overflow");
			*out = mkint(V_INT, in->u.i < 0 ? -in->u.i : in->u.i);
		} else
			return rfail(r, pos, MEDHA_EFORMAT,
			    "abs of a %s", tname(in));
		return 0;
	}
	/* the rest work on str(value), as Jinja2's soft_str does */
	if (F("string") || F("trim") || F("upper") || F("lower") ||
	    F("capitalize") || F("title") || F("replace")) {
		TRY(tostr(r, in, &s, pos));
		if (F("string")) {
			*out = s;
			return 0;
		}
		if (F("trim"))
			return strip(r, &s, arg(a, 0, "chars"), 3, out, pos);
		if (F("replace"))
			return replace(r, &s, arg(a, 0, "old"), arg(a, 1, "new"),
			    arg(a, 2, "count"), out, pos);
		return recase(r, &s, F("upper") ? 'U' : F("lower") ? 'L' :
		    F("title") ? 'T' : 'C', out, pos);
	}
#undef F
	return rfail(r, pos, MEDHA_EUNSUP, "filter '%s' is not supported",
	    name);
}

static int
test_named(struct rctx *r, const char *ts, size_t tn, const struct val *v,
    const struct val *x, size_t nx, int *res, size_t pos)
{
	char name[32];
	int c;

	snprintf(name, sizeof(name), "%.*s", (int)(tn < 31 ? tn : 31), ts);
#define T(w) (strcmp(name, w) == 0)
	if (T("defined") || T("undefined"))
		*res = (v->t != V_UNDEF) == T("defined");
	else if (T("none"))
		*res = v->t == V_NONE;
	else if (T("string"))
		*res = v->t == V_STR;
	else if (T("number"))
		*res = isnum(v);
	else if (T("integer"))
		*res = v->t == V_INT;
	else if (T("float"))
		*res = v->t == V_FLOAT;
	else if (T("boolean"))
		*res = v->t == V_BOOL;
	else if (T("true") || T("false"))
		*res = v->t == V_BOOL && v->u.i == T("true");
	else if (T("mapping"))
		*res = v->t == V_DICT;
	else if (T("iterable"))
		*res = v->t == V_STR || v->t == V_LIST || v->t == V_DICT ||
		    v->t == V_UNDEF;
	else if (T("sequence"))
		*res = v->t == V_STR || v->t == V_LIST || v->t == V_DICT ||
		    v->t == V_UNDEF;
	else if (T("callable"))
		*res = v->t == V_FUNC;
	else if (T("escaped"))
		*res = 0;
	else if (T("lower") || T("upper")) {
		struct val s, t;

		TRY(tostr(r, v, &s, pos));
		TRY(recase(r, &s, T("lower") ? 'L' : 'U', &t, pos));
		*res = equal(&s, &t);
		for (c = 0; *res && (size_t)c < s.u.s.n; c++)
			if ((s.u.s.p[c] | 32) >= 'a' && (s.u.s.p[c] | 32) <= 'z')
				break;
		*res = *res && (size_t)c < s.u.s.n; /* has a cased letter */
	} else if (T("even") || T("odd") || T("divisibleby")) {
		int64_t d = 2;

		if (v->t != V_INT && v->t != V_BOOL)
			return rfail(r, pos, MEDHA_EFORMAT,
			    "test '%s' of a %s", name, tname(v));
		if (T("divisibleby")) {
			if (nx < 1 || (x->t != V_INT && x->t != V_BOOL) ||
			    x->u.i == 0)
				return rfail(r, pos, MEDHA_EFORMAT,
				    "divisibleby: bad divisor");
			d = x->u.i;
		}
		*res = d == -1 || v->u.i % d == 0;
		if (T("odd"))
			*res = !*res;
	} else if (T("eq") || T("equalto") || T("==") || T("ne") ||
	    T("!=") || T("sameas")) {
		if (nx < 1)
			return rfail(r, pos, MEDHA_EFORMAT, "test '%s' needs an "
			    "argument", name);
		*res = equal(v, x) == !(T("ne") || T("!="));
		if (T("sameas") && v->t != x->t)
			*res = 0;
	} else if (T("lt") || T("lessthan") || T("<") || T("le") ||
	    T("<=") || T("gt") || T("greaterthan") || T(">") || T("ge") ||
	    T(">=")) {
		if (nx < 1)
			return rfail(r, pos, MEDHA_EFORMAT, "test '%s' needs an "
			    "argument", name);
		TRY(cmp_order(r, v, x, &c, pos));
		*res = name[0] == 'l' || name[0] == '<' ?
		    (name[1] == 'e' || name[1] == '=' ? c <= 0 : c < 0) :
		    (name[1] == 'e' || name[1] == '=' ? c >= 0 : c > 0);
	} else if (T("in")) {
		if (nx < 1)
			return rfail(r, pos, MEDHA_EFORMAT, "test 'in' needs an "
			    "argument");
		TRY(contains(r, x, v, res, pos));
	} else
		return rfail(r, pos, MEDHA_EUNSUP, "test '%s' is not supported",
		    name);
#undef T
	return 0;
}

/* Python str and dict methods that the sandbox allows. */
static int
method(struct rctx *r, const struct node *e, const struct val *o,
    struct args *a, struct val *out)
{
	const struct node *at = e->a;
	char name[32];
	size_t pos = e->pos;

	snprintf(name, sizeof(name), "%.*s", (int)(at->nlen < 31 ?
	    at->nlen : 31), at->name);
#define M(w) (strcmp(name, w) == 0)
	if (o->t == V_STR) {
		if (M("strip") || M("lstrip") || M("rstrip"))
			return strip(r, o, arg(a, 0, NULL), M("strip") ? 3 :
			    M("lstrip") ? 1 : 2, out, pos);
		if (M("upper") || M("lower") || M("title") || M("capitalize"))
			return recase(r, o, M("upper") ? 'U' : M("lower") ?
			    'L' : M("title") ? 'T' : 'C', out, pos);
		if (M("replace"))
			return replace(r, o, arg(a, 0, NULL), arg(a, 1, NULL),
			    arg(a, 2, NULL), out, pos);
		if (M("startswith") || M("endswith")) {
			const struct val *x = arg(a, 0, NULL);
			struct val *alts = (struct val *)x;
			size_t n = 1, i;
			int hit = 0;

			if (x != NULL && x->t == V_LIST && x->u.l->tuple) {
				alts = x->u.l->v;
				n = x->u.l->n;
			}
			for (i = 0; i < n && !hit; i++) {
				TRY(want_str(r, &alts[i], name, pos));
				hit = alts[i].u.s.n <= o->u.s.n &&
				    memcmp(o->u.s.p + (M("endswith") ?
				    o->u.s.n - alts[i].u.s.n : 0),
				    alts[i].u.s.p, alts[i].u.s.n) == 0;
			}
			*out = mkint(V_BOOL, hit);
			return 0;
		}
		if (M("split")) {
			const struct val *sep = arg(a, 0, "sep");
			const struct val *mx = arg(a, 1, "maxsplit");
			int64_t max = mx != NULL && mx->t == V_INT ? mx->u.i :
			    -1;
			struct val *w;
			size_t i = 0, k = 0, n = o->u.s.n;
			const char *s = o->u.s.p;

			if ((w = arena_array(&r->ar, n + 1, sizeof(*w))) ==
			    NULL)
				return nomem(r, pos);
			if (sep == NULL || sep->t == V_NONE) {
				for (;;) {
					size_t b;

					i += span_space(s + i, n - i);
					if (i == n)
						break;
					if (max >= 0 && (int64_t)k == max) {
						w[k++] = mkstr(s + i,
						    rstrip_len(s + i, n - i,
						    NULL, 0));
						break;
					}
					for (b = i; i < n && span_space(s + i,
					    n - i) == 0; i++)
						;
					w[k++] = mkstr(s + b, i - b);
				}
			} else {
				TRY(want_str(r, sep, "split", pos));
				if (sep->u.s.n == 0)
					return rfail(r, pos, MEDHA_EFORMAT,
					    "split: empty separator");
				for (;;) {
					const char *hit = max >= 0 &&
					    (int64_t)k == max ? NULL :
					    memmem(s + i, n - i, sep->u.s.p,
					    sep->u.s.n);

					if (hit == NULL) {
						w[k++] = mkstr(s + i, n - i);
						break;
					}
					w[k++] = mkstr(s + i,
					    (size_t)(hit - s) - i);
					i = (size_t)(hit - s) + sep->u.s.n;
				}
			}
			return mklist(r, w, k, out, pos);
		}
	} else if (o->t == V_DICT) {
		if (M("items"))
			return filter_named(r, "items", 5, o, a, out, pos);
		if (M("keys") || M("values"))
			return mklist(r, M("keys") ? o->u.d->k : o->u.d->v,
			    o->u.d->n, out, pos);
		if (M("get")) {
			const struct val *k = arg(a, 0, NULL), *d = arg(a, 1,
			    NULL);
			struct val *x;

			if (k == NULL)
				return rfail(r, pos, MEDHA_EFORMAT,
				    "get: missing key");
			x = dict_get(o->u.d, k);
			*out = x != NULL ? *x : d != NULL ? *d :
			    (struct val){.t = V_NONE};
			return 0;
		}
	} else if (o->t == V_UNDEF)
		return undef_use(r, at);
#undef M
	return rfail(r, pos, MEDHA_EUNSUP, "%s method '%s' is not supported",
	    tname(o), name);
}

static int
strftime_now(struct rctx *r, const struct val *fmt, struct val *out,
    size_t pos)
{
	const char *env = getenv("MEDHA_JINJA_NOW");
	char f[256], buf[512], *p;
	struct tm tm;
	time_t now;
	size_t n;
	int y, m, d;

	TRY(want_str(r, fmt, "strftime_now", pos));
	if (fmt->u.s.n >= sizeof(f) || memchr(fmt->u.s.p, 0, fmt->u.s.n))
		return rfail(r, pos, MEDHA_EUNSUP, "strftime_now: bad format");
	memcpy(f, fmt->u.s.p, fmt->u.s.n);
	f[fmt->u.s.n] = '\0';
	memset(&tm, 0, sizeof(tm));
	if (env != NULL && sscanf(env, "%d-%d-%d", &y, &m, &d) == 3) {
		tm.tm_year = y - 1900;
		tm.tm_mon = m - 1;
		tm.tm_mday = d;
		tm.tm_hour = 12;
		tm.tm_isdst = -1;
		now = mktime(&tm); /* fills in the weekday */
		localtime_r(&now, &tm);
		tm.tm_hour = tm.tm_min = tm.tm_sec = 0;
	} else {
		now = time(NULL);
		localtime_r(&now, &tm);
	}
	n = strftime(buf, sizeof(buf), f, &tm);
	if (n == 0 && f[0] != '\0')
		return rfail(r, pos, MEDHA_EUNSUP,
		    "strftime_now: format gives nothing or too much");
	if ((p = arena_alloc(&r->ar, n + 1)) == NULL)
		return nomem(r, pos);
	memcpy(p, buf, n);
	*out = mkstr(p, n);
	return 0;
}

static int
call(struct rctx *r, const struct node *e, struct val *out)
{
	struct args a;
	struct val fn, o;
	size_t i;

	if (e->a->kind == E_ATTR) { /* x.method(...) */
		TRY(eval(r, e->a->a, &o));
		if (o.t == V_STR || o.t == V_DICT || o.t == V_UNDEF ||
		    o.t == V_LIST) {
			TRY(eval_args(r, e, &a));
			return method(r, e, &o, &a, out);
		}
	}
	TRY(eval(r, e->a, &fn));
	if (fn.t == V_UNDEF)
		return undef_use(r, e->a);
	if (fn.t != V_FUNC)
		return rfail(r, e->pos, MEDHA_EFORMAT, "a %s is not callable",
		    tname(&fn));
	TRY(eval_args(r, e, &a));
	switch (fn.u.i) {
	case F_RAISE: {
		struct val m;

		TRY(tostr(r, a.np ? &a.pv[0] : &(struct val){.t = V_NONE},
		    &m, e->pos));
		return medha_why(r->why, r->whylen, MEDHA_EINVAL, "%.*s",
		    (int)(m.u.s.n > INT_MAX ? INT_MAX : m.u.s.n), m.u.s.p);
	}
	case F_STRFTIME:
		return strftime_now(r, arg(&a, 0, NULL), out, e->pos);
	case F_RANGE: {
		int64_t lo = 0, hi, st = 1, k, cnt;
		struct val *w;

		for (i = 0; i < a.np; i++)
			if (a.pv[i].t != V_INT && a.pv[i].t != V_BOOL)
				return rfail(r, e->pos, MEDHA_EFORMAT,
				    "range: arguments must be integers");
		if (a.np == 0 || a.np > 3)
			return rfail(r, e->pos, MEDHA_EFORMAT,
			    "range: 1 to 3 arguments");
		hi = a.pv[0].u.i;
		if (a.np >= 2) {
			lo = a.pv[0].u.i;
			hi = a.pv[1].u.i;
		}
		if (a.np == 3)
			st = a.pv[2].u.i;
		if (st == 0)
			return rfail(r, e->pos, MEDHA_EFORMAT,
			    "range: step must not be zero");
		if ((st > 0 && hi <= lo) || (st < 0 && hi >= lo))
			cnt = 0;
		else if (st > 0)
			cnt = (int64_t)(((uint64_t)hi - (uint64_t)lo - 1) /
			    (uint64_t)st + 1);
		else
			cnt = (int64_t)(((uint64_t)lo - (uint64_t)hi - 1) /
			    (uint64_t)(-(st + 1) + 1) + 1);
		if (cnt < 0 || cnt > 1000000)
			return rfail(r, e->pos, MEDHA_ENOSPACE,
			    "range of more than 1000000 items");
		if ((w = arena_array(&r->ar, cnt ? (size_t)cnt : 1,
		    sizeof(*w))) == NULL)
			return nomem(r, e->pos);
		for (k = 0; k < cnt; k++)
			w[k] = mkint(V_INT, lo + k * st);
		return mklist(r, w, (size_t)cnt, out, e->pos);
	}
	default: { /* namespace(), dict() */
		struct dict *d = dict_new(r);

		if (d == NULL)
			return nomem(r, e->pos);
		if (a.np > 0 && (a.pv[0].t != V_DICT || a.np > 1))
			return rfail(r, e->pos, MEDHA_EUNSUP,
			    "positional arguments to namespace()/dict()");
		for (i = 0; a.np > 0 && i < a.pv[0].u.d->n; i++)
			if (dict_put(r, d, a.pv[0].u.d->k[i],
			    a.pv[0].u.d->v[i]) != 0)
				return nomem(r, e->pos);
		for (i = 0; i < a.nk; i++)
			if (dict_put(r, d, mkstr(a.kw[i]->name,
			    a.kw[i]->nlen), a.kv[i]) != 0)
				return nomem(r, e->pos);
		out->t = fn.u.i == F_NAMESPACE ? V_NS : V_DICT;
		out->u.d = d;
		return 0;
	}
	}
}

/* ---------------------------------------------------------------- eval */

static int eval1(struct rctx *, const struct node *, struct val *);

/* Operator and filter chains are deep trees too: bound them here. */
static int
eval(struct rctx *r, const struct node *e, struct val *out)
{
	int rc;

	if (++r->edepth > 4 * MEDHA_JINJA_MAX_DEPTH)
		rc = rfail(r, e->pos, MEDHA_ENOSPACE,
		    "expression nested too deep");
	else
		rc = eval1(r, e, out);
	r->edepth--;
	return rc;
}

static int
eval1(struct rctx *r, const struct node *e, struct val *out)
{
	struct val a, b, sv[3];
	size_t i;
	int rc = 0;

	if (++r->steps > MEDHA_JINJA_MAX_STEPS)
		return rfail(r, e->pos, MEDHA_ENOSPACE,
		    "render takes more than %ld steps", MEDHA_JINJA_MAX_STEPS);
	switch (e->kind) {
	case E_LIT:
		*out = e->lit;
		return 0;
	case E_NAME:
		*out = lookup(r, e->name, e->nlen);
		return 0;
	case E_ATTR:
		TRY(eval(r, e->a, &a));
		if (a.t == V_UNDEF)
			return undef_use(r, e);
		b = mkstr(e->name, e->nlen);
		return getitem(r, &a, &b, out, e->pos);
	case E_INDEX:
		TRY(eval(r, e->a, &a));
		if (a.t == V_UNDEF)
			return undef_use(r, e);
		TRY(eval(r, e->b, &b));
		return getitem(r, &a, &b, out, e->pos);
	case E_SLICE:
		TRY(eval(r, e->a, &a));
		if (a.t == V_UNDEF)
			return undef_use(r, e);
		sv[0].t = sv[1].t = sv[2].t = V_NONE;
		if (e->b != NULL)
			TRY(eval(r, e->b, &sv[0]));
		if (e->c != NULL)
			TRY(eval(r, e->c, &sv[1]));
		if (e->d != NULL)
			TRY(eval(r, e->d, &sv[2]));
		return slice(r, &a, sv, e->pos, out);
	case E_CALL:
		return call(r, e, out);
	case E_FILTER: {
		struct args args;

		TRY(eval(r, e->a, &a));
		TRY(eval_args(r, e, &args));
		return filter_named(r, e->name, e->nlen, &a, &args, out,
		    e->pos);
	}
	case E_TEST: {
		struct args args;
		int res;

		TRY(eval(r, e->a, &a));
		TRY(eval_args(r, e, &args));
		TRY(test_named(r, e->name, e->nlen, &a, args.np ? &args.pv[0] :
		    NULL, args.np, &res, e->pos));
		*out = mkint(V_BOOL, res != e->op);
		return 0;
	}
	case E_NOT:
		TRY(eval(r, e->a, &a));
		*out = mkint(V_BOOL, !truthy(&a));
		return 0;
	case E_NEG:
	case E_POS:
		TRY(eval(r, e->a, &a));
		if (!isnum(&a))
			return rfail(r, e->pos, MEDHA_EFORMAT,
			    "bad operand type for unary %c: %s",
			    e->kind == E_NEG ? '-' : '+', tname(&a));
		if (e->kind == E_POS && a.t == V_BOOL)
			*out = mkint(V_INT, a.u.i);
		else if (e->kind == E_POS)
			*out = a;
		else
			return binop(r, '-', &(struct val){.t = V_INT}, &a,
			    out, e->pos);
		return 0;
	case E_AND:
	case E_OR:
		TRY(eval(r, e->a, &a));
		if (truthy(&a) == (e->kind == E_OR)) {
			*out = a;
			return 0;
		}
		return eval(r, e->b, out);
	case E_COND:
		TRY(eval(r, e->a, &a));
		if (truthy(&a))
			return eval(r, e->b, out);
		if (e->c == NULL) {
			out->t = V_UNDEF;
			return 0;
		}
		return eval(r, e->c, out);
	case E_BIN:
		TRY(eval(r, e->a, &a));
		TRY(eval(r, e->b, &b));
		return binop(r, e->op, &a, &b, out, e->pos);
	case E_CONCAT:
		TRY(eval(r, e->a, &a));
		TRY(eval(r, e->b, &b));
		TRY(tostr(r, &a, &a, e->pos));
		TRY(tostr(r, &b, &b, e->pos));
		return concat(r, &a, &b, out, e->pos);
	case E_LIST:
	case E_TUPLE: {
		struct list *l = list_new(r, e->nv);

		if (l == NULL)
			return nomem(r, e->pos);
		for (i = 0; i < e->nv && rc == 0; i++)
			rc = eval(r, e->v[i], &l->v[i]);
		l->tuple = e->kind == E_TUPLE;
		out->t = V_LIST;
		out->u.l = l;
		return rc;
	}
	case E_DICT: {
		struct dict *d = dict_new(r);

		if (d == NULL)
			return nomem(r, e->pos);
		for (i = 0; i + 1 < e->nv; i += 2) {
			TRY(eval(r, e->v[i], &a));
			TRY(eval(r, e->v[i + 1], &b));
			if (a.t == V_LIST || a.t == V_DICT || a.t == V_UNDEF)
				return rfail(r, e->v[i]->pos, MEDHA_EFORMAT,
				    "unhashable dict key");
			if (dict_put(r, d, a, b) != 0)
				return nomem(r, e->pos);
		}
		out->t = V_DICT;
		out->u.d = d;
		return 0;
	}
	default:
		return rfail(r, e->pos, MEDHA_EFORMAT, "bad expression");
	}
}

/* ---------------------------------------------------------------- statements */

static int exec_body(struct rctx *, const struct node *, struct buf *);

static int
exec_for(struct rctx *r, const struct node *s, struct buf *out)
{
	struct val it, *items, *keep;
	struct frame f;
	struct loopst lp;
	size_t n, i, k = 0;
	int rc = 0;

	TRY(eval(r, s->a, &it));
	TRY(iterate(r, &it, &items, &n, s->a->pos));
	memset(&f, 0, sizeof(f));
	f.up = r->top;
	keep = items;
	if (s->d != NULL && n > 0) { /* for x in xs if cond */
		if ((keep = arena_array(&r->ar, n, sizeof(*keep))) == NULL)
			return nomem(r, s->pos);
		r->top = &f;
		for (i = 0; i < n && rc == 0; i++) {
			struct val c;

			f.n = 0;
			if (s->name2 == NULL)
				rc = frame_set(r, &f, s->name, s->nlen,
				    items[i]) ? nomem(r, s->pos) : 0;
			else if (items[i].t != V_LIST ||
			    items[i].u.l->n != 2)
				rc = rfail(r, s->pos, MEDHA_EFORMAT,
				    "cannot unpack a %s into two names",
				    tname(&items[i]));
			else if (frame_set(r, &f, s->name, s->nlen,
			    items[i].u.l->v[0]) || frame_set(r, &f,
			    s->name2, s->n2len, items[i].u.l->v[1]))
				rc = nomem(r, s->pos);
			if (rc == 0 && (rc = eval(r, s->d, &c)) == 0 &&
			    truthy(&c))
				keep[k++] = items[i];
		}
		r->top = f.up;
		if (rc != 0)
			return rc;
		n = k;
	}
	lp.items = keep;
	lp.n = n;
	r->top = &f;
	for (i = 0; i < n && rc == 0; i++) {
		if (++r->steps > MEDHA_JINJA_MAX_STEPS) {
			rc = rfail(r, s->pos, MEDHA_ENOSPACE,
			    "render takes more than %ld steps",
			    MEDHA_JINJA_MAX_STEPS);
			break;
		}
		f.n = 0; /* a fresh scope each turn, as in Jinja2 */
		lp.k = i;
		if (s->name2 == NULL) {
			if (frame_set(r, &f, s->name, s->nlen, keep[i]))
				rc = nomem(r, s->pos);
		} else if (keep[i].t != V_LIST || keep[i].u.l->n != 2)
			rc = rfail(r, s->pos, MEDHA_EFORMAT,
			    "cannot unpack a %s into two names",
			    tname(&keep[i]));
		else if (frame_set(r, &f, s->name, s->nlen,
		    keep[i].u.l->v[0]) || frame_set(r, &f, s->name2, s->n2len,
		    keep[i].u.l->v[1]))
			rc = nomem(r, s->pos);
		if (rc == 0 && frame_set(r, &f, "loop", 4, (struct val){
		    .t = V_LOOP, .u.lp = &lp}))
			rc = nomem(r, s->pos);
		if (rc == 0)
			rc = exec_body(r, s->b, out);
		if (r->ctl == 1) {
			r->ctl = 0;
			break;
		}
		r->ctl = 0;
	}
	r->top = f.up;
	if (rc == 0 && n == 0 && s->c != NULL)
		rc = exec_body(r, s->c, out);
	return rc;
}

static int
exec_body(struct rctx *r, const struct node *s, struct buf *out)
{
	struct val v;
	int rc = 0;

	if (++r->depth > MEDHA_JINJA_MAX_DEPTH)
		return rfail(r, s ? s->pos : 0, MEDHA_ENOSPACE,
		    "blocks nested too deep");
	for (; s != NULL && rc == 0 && r->ctl == 0; s = s->next) {
		switch (s->kind) {
		case N_TEXT:
			rc = put(r, out, s->lit.u.s.p, s->lit.u.s.n, s->pos);
			break;
		case N_OUT:
			if ((rc = eval(r, s->a, &v)) == 0)
				rc = tostr_buf(r, &v, out, 0, s->pos);
			break;
		case N_IF:
			if ((rc = eval(r, s->a, &v)) != 0)
				break;
			rc = exec_body(r, truthy(&v) ? s->b : s->c, out);
			break;
		case N_FOR:
			rc = exec_for(r, s, out);
			break;
		case N_SET:
			if ((rc = eval(r, s->a, &v)) != 0)
				break;
			if (s->name2 != NULL) {
				struct val ns = lookup(r, s->name, s->nlen);

				if (ns.t != V_NS) {
					rc = rfail(r, s->pos, MEDHA_EFORMAT,
					    "can only set attributes of a "
					    "namespace, not of a %s",
					    tname(&ns));
					break;
				}
				if (dict_put(r, ns.u.d, mkstr(s->name2,
				    s->n2len), v) != 0)
					rc = nomem(r, s->pos);
			} else if (frame_set(r, r->top, s->name, s->nlen, v))
				rc = nomem(r, s->pos);
			break;
		case N_SETBLOCK: {
			struct buf b = {NULL, 0, 0};
			char *p = NULL;

			rc = exec_body(r, s->b, &b);
			if (rc == 0 && (p = arena_alloc(&r->ar, b.n + 1)) ==
			    NULL)
				rc = nomem(r, s->pos);
			if (rc == 0) {
				if (b.n)
					memcpy(p, b.p, b.n);
				if (frame_set(r, r->top, s->name, s->nlen,
				    mkstr(p, b.n)))
					rc = nomem(r, s->pos);
			}
			free(b.p);
			break;
		}
		case N_BREAK:
		case N_CONTINUE:
			r->ctl = s->kind == N_BREAK ? 1 : 2;
			break;
		case N_BLOCK:
			rc = exec_body(r, s->b, out);
			break;
		}
	}
	r->depth--;
	return rc;
}

int
medha_jinja_render(const struct medha_jinja *j,
    const struct medha_jinja_msg *msgs, size_t n, int add_generation_prompt,
    const char *bos_token, const char *eos_token, char **out, size_t *outlen,
    char *why, size_t whylen)
{
	struct rctx r;
	struct frame root;
	struct buf b = {NULL, 0, 0};
	struct list *l;
	struct val none = {.t = V_NONE};
	size_t i;
	int rc = 0;

	*out = NULL;
	*outlen = 0;
	memset(&r, 0, sizeof(r));
	memset(&root, 0, sizeof(root));
	r.j = j;
	r.ar.limit = MEDHA_JINJA_MAX_MEM;
	r.why = why;
	r.whylen = whylen;
	r.top = &root;
	if ((l = list_new(&r, n)) == NULL)
		rc = nomem(&r, 0);
	for (i = 0; i < n && rc == 0; i++) {
		struct dict *d = dict_new(&r);

		if (d == NULL || dict_put(&r, d, mkstr("role", 4),
		    mkstr(msgs[i].role, strlen(msgs[i].role))) ||
		    dict_put(&r, d, mkstr("content", 7),
		    mkstr(msgs[i].content, msgs[i].len)))
			rc = nomem(&r, 0);
		else {
			l->v[i].t = V_DICT;
			l->v[i].u.d = d;
		}
	}
	if (rc == 0 && (frame_set(&r, &root, "messages", 8,
	    (struct val){.t = V_LIST, .u.l = l}) ||
	    frame_set(&r, &root, "add_generation_prompt", 21,
	    mkint(V_BOOL, add_generation_prompt != 0)) ||
	    frame_set(&r, &root, "tools", 5, none) ||
	    frame_set(&r, &root, "documents", 9, none) ||
	    (bos_token != NULL && frame_set(&r, &root, "bos_token", 9,
	    mkstr(bos_token, strlen(bos_token)))) ||
	    (eos_token != NULL && frame_set(&r, &root, "eos_token", 9,
	    mkstr(eos_token, strlen(eos_token))))))
		rc = nomem(&r, 0);
	if (rc == 0)
		rc = exec_body(&r, j->body, &b);
	if (rc == 0)
		rc = put(&r, &b, "", 1, 0); /* the NUL */
	arena_free(&r.ar);
	if (rc != 0) {
		free(b.p);
		return rc;
	}
	*out = b.p;
	*outlen = b.n - 1;
	return 0;
}
