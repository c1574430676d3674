/*
 * jinja_str.c: values as text, as Python writes them. str() for {{ }}
 * and the string filters (None, True, ints, floats by repr()'s shortest
 * round-tripping digits, strings as they are); repr() inside lists,
 * tuples and dicts (strings quoted and escaped as Python does); and
 * json.dumps() for the tojson filter (ensure_ascii=False, with
 * transformers' indent, separators and sort_keys). Values nested too
 * deep to print are an error, never a deep recursion.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "medha.h"
#include "template/jinja_impl.h"

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
	TRY(jinja_put(r, b, &q, 1, pos));
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
			TRY(jinja_put(r, b, s + i, 1, pos));
			continue;
		}
		TRY(jinja_put(r, b, esc, strlen(esc), pos));
	}
	return jinja_put(r, b, &q, 1, pos);
}

/* repr() of a list, tuple or dict. */
static int
tostr_seq(struct rctx *r, const struct val *v, struct buf *b, size_t pos)
{
	size_t i;

	switch (v->t) {
	case V_LIST:
		TRY(jinja_put(r, b, v->u.l->tuple ? "(" : "[", 1, pos));
		for (i = 0; i < v->u.l->n; i++) {
			if (i > 0)
				TRY(jinja_put(r, b, ", ", 2, pos));
			TRY(jinja_tostr_buf(r, &v->u.l->v[i], b, 1, pos));
		}
		if (v->u.l->tuple && v->u.l->n == 1)
			TRY(jinja_put(r, b, ",", 1, pos));
		return jinja_put(r, b, v->u.l->tuple ? ")" : "]", 1, pos);
	case V_DICT:
		TRY(jinja_put(r, b, "{", 1, pos));
		for (i = 0; i < v->u.d->n; i++) {
			if (i > 0)
				TRY(jinja_put(r, b, ", ", 2, pos));
			TRY(jinja_tostr_buf(r, &v->u.d->k[i], b, 1, pos));
			TRY(jinja_put(r, b, ": ", 2, pos));
			TRY(jinja_tostr_buf(r, &v->u.d->v[i], b, 1, pos));
		}
		return jinja_put(r, b, "}", 1, pos);
	default: return 0;
	}
}

/* str(v) (repr: repr(v)) appended to b. */
int
jinja_tostr_buf(struct rctx *r, const struct val *v, struct buf *b, int repr,
    size_t pos)
{
	char num[64];
	int rc;

	if (v->t == V_LIST || v->t == V_DICT) {
		if (++r->edepth > 4 * MEDHA_JINJA_MAX_DEPTH)
			rc = jinja_rfail(r, pos, MEDHA_ENOSPACE,
			    "value nested too deep to print");
		else
			rc = tostr_seq(r, v, b, pos);
		r->edepth--;
		return rc;
	}
	switch (v->t) {
	case V_UNDEF: return 0;
	case V_NONE: return jinja_put(r, b, "None", 4, pos);
	case V_BOOL:
		return v->u.i ? jinja_put(r, b, "True", 4, pos)
		              : jinja_put(r, b, "False", 5, pos);
	case V_INT:
		snprintf(num, sizeof(num), "%lld", (long long)v->u.i);
		return jinja_put(r, b, num, strlen(num), pos);
	case V_FLOAT:
		float_repr(v->u.f, num, sizeof(num));
		return jinja_put(r, b, num, strlen(num), pos);
	case V_STR:
		if (repr)
			return repr_str(r, v, b, pos);
		return jinja_put(r, b, v->u.s.p, v->u.s.n, pos);
	default:
		return jinja_rfail(r, pos, MEDHA_EUNSUP, "cannot print a %s",
		    jinja_tname(v));
	}
}

/* str(v) as a string value (in the arena unless it is one already). */
int
jinja_tostr(struct rctx *r, const struct val *v, struct val *out, size_t pos)
{
	struct buf b = {NULL, 0, 0};
	int rc;

	if (v->t == V_STR) {
		*out = *v;
		return 0;
	}
	if (v->t == V_UNDEF) {
		*out = mkstr("", 0);
		return 0;
	}
	rc = jinja_tostr_buf(r, v, &b, 0, pos);
	return jinja_buf_take(r, &b, rc, out, pos);
}

/* ---------------------------------------------------------------- tojson */

/* A JSON string as json.dumps writes it with ensure_ascii=False. */
static int
json_str(struct rctx *r, const struct val *v, struct buf *b, size_t pos)
{
	char num[64];
	size_t i;

	TRY(jinja_put(r, b, "\"", 1, pos));
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
			TRY(jinja_put(r, b, e, strlen(e), pos));
		else
			TRY(jinja_put(r, b, v->u.s.p + i, 1, pos));
	}
	return jinja_put(r, b, "\"", 1, pos);
}

/*
 * The index of d's i-th smallest key for sort_keys (string keys by
 * their bytes; others rank nowhere, and then the index is d->n).
 */
static size_t
key_rank(const struct dict *d, size_t i)
{
	size_t a, k, m, rank, n = d->n;

	for (k = 0; k < n; k++) {
		for (a = 0, rank = 0; a < n; a++) {
			const struct val *x = &d->k[a], *y = &d->k[k];

			m = x->u.s.n < y->u.s.n ? x->u.s.n : y->u.s.n;
			if (x->t == V_STR && y->t == V_STR &&
			    (memcmp(x->u.s.p, y->u.s.p, m) < 0 ||
			        (memcmp(x->u.s.p, y->u.s.p, m) == 0 &&
			            x->u.s.n < y->u.s.n)))
				rank++;
		}
		if (rank == i)
			break;
	}
	return k;
}

/* A list or a dict, its items indented one level deeper than level. */
static int
json_seq(struct rctx *r, const struct val *v, struct buf *b,
    const struct jsonfmt *f, int level, size_t pos)
{
	size_t i, n = v->t == V_LIST ? v->u.l->n : v->u.d->n;
	int lv;

	TRY(jinja_put(r, b, v->t == V_LIST ? "[" : "{", 1, pos));
	if (n == 0)
		return jinja_put(r, b, v->t == V_LIST ? "]" : "}", 1, pos);
	for (i = 0; i < n; i++) {
		size_t k = i;

		if (i > 0)
			TRY(jinja_put(r, b, f->isep, strlen(f->isep), pos));
		if (f->indent != NULL) {
			TRY(jinja_put(r, b, "\n", 1, pos));
			for (lv = 0; lv <= level; lv++)
				TRY(jinja_put(r, b, f->indent, f->indn, pos));
		}
		if (v->t == V_LIST) {
			TRY(jinja_tojson(r, &v->u.l->v[i], b, f, level + 1,
			    pos));
			continue;
		}
		if (f->sort) /* the i-th smallest key */
			k = key_rank(v->u.d, i);
		if (v->u.d->k[k].t != V_STR)
			return jinja_rfail(r, pos, MEDHA_EUNSUP,
			    "tojson: keys must be strings");
		TRY(jinja_tojson(r, &v->u.d->k[k], b, f, level + 1, pos));
		TRY(jinja_put(r, b, f->ksep, strlen(f->ksep), pos));
		TRY(jinja_tojson(r, &v->u.d->v[k], b, f, level + 1, pos));
	}
	if (f->indent != NULL) {
		TRY(jinja_put(r, b, "\n", 1, pos));
		for (lv = 0; lv < level; lv++)
			TRY(jinja_put(r, b, f->indent, f->indn, pos));
	}
	return jinja_put(r, b, v->t == V_LIST ? "]" : "}", 1, pos);
}

int
jinja_tojson(struct rctx *r, const struct val *v, struct buf *b,
    const struct jsonfmt *f, int level, size_t pos)
{
	char num[64];

	if (level > MEDHA_JINJA_MAX_DEPTH)
		return jinja_rfail(r, pos, MEDHA_ENOSPACE,
		    "tojson: nested too deep");
	switch (v->t) {
	case V_NONE: return jinja_put(r, b, "null", 4, pos);
	case V_BOOL:
		return v->u.i ? jinja_put(r, b, "true", 4, pos)
		              : jinja_put(r, b, "false", 5, pos);
	case V_INT:
		snprintf(num, sizeof(num), "%lld", (long long)v->u.i);
		return jinja_put(r, b, num, strlen(num), pos);
	case V_FLOAT:
		if (isnan(v->u.f))
			return jinja_put(r, b, "NaN", 3, pos);
		if (isinf(v->u.f))
			return v->u.f > 0
			    ? jinja_put(r, b, "Infinity", 8, pos)
			    : jinja_put(r, b, "-Infinity", 9, pos);
		float_repr(v->u.f, num, sizeof(num));
		return jinja_put(r, b, num, strlen(num), pos);
	case V_STR: return json_str(r, v, b, pos);
	case V_LIST:
	case V_DICT: return json_seq(r, v, b, f, level, pos);
	default:
		return jinja_rfail(r, pos, MEDHA_EFORMAT,
		    "tojson: a %s is not JSON serializable", jinja_tname(v));
	}
}
