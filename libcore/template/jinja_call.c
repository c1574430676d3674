/*
 * jinja_call.c: what a call does. x.name(...) on a string or a dict is
 * one of the Python methods that Jinja2's sandbox allows and templates
 * use (str: strip, lstrip, rstrip, upper, lower, title, capitalize,
 * replace, startswith, endswith, split; dict: items, keys, values,
 * get); a bare name(...) is one of the global functions: range(),
 * namespace(), dict(), and transformers' raise_exception(msg) and
 * strftime_now(fmt). Others are an error that names them.
 */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "medha.h"
#include "template/jinja_impl.h"

/* ---------------------------------------------------------------- methods */

static int
no_method(struct rctx *r, const struct val *o, const char *name, size_t pos)
{
	return jinja_rfail(r, pos, MEDHA_EUNSUP,
	    "%s method '%s' is not supported", jinja_tname(o), name);
}

/* str.startswith, str.endswith (end): one string or a tuple of them. */
static int
str_affix(struct rctx *r, const struct val *o, const struct val *x, int end,
    const char *name, struct val *out, size_t pos)
{
	struct val *alts = (struct val *)x;
	size_t n = 1, i;
	int hit = 0;

	if (x != NULL && x->t == V_LIST && x->u.l->tuple) {
		alts = x->u.l->v;
		n = x->u.l->n;
	}
	for (i = 0; i < n && !hit; i++) {
		TRY(jinja_want_str(r, &alts[i], name, pos));
		hit = alts[i].u.s.n <= o->u.s.n &&
		    memcmp(o->u.s.p + (end ? o->u.s.n - alts[i].u.s.n : 0),
		        alts[i].u.s.p, alts[i].u.s.n) == 0;
	}
	*out = mkint(V_BOOL, hit);
	return 0;
}

/*
 * str.split(sep=None, maxsplit=-1) into w (room for every piece):
 * by runs of whitespace, or by sep.
 */
static int
str_split(struct rctx *r, const struct val *o, const struct val *sep,
    int64_t max, struct val *w, size_t *nw, size_t pos)
{
	size_t i = 0, k = 0, n = o->u.s.n;
	const char *s = o->u.s.p;

	if (sep == NULL || sep->t == V_NONE) {
		for (;;) {
			size_t b;

			i += jinja_span_space(s + i, n - i);
			if (i == n)
				break;
			if (max >= 0 && (int64_t)k == max) {
				w[k++] = mkstr(s + i,
				    jinja_rstrip_len(s + i, n - i, NULL, 0));
				break;
			}
			for (b = i;
			     i < n && jinja_span_space(s + i, n - i) == 0; i++)
				;
			w[k++] = mkstr(s + b, i - b);
		}
	} else {
		TRY(jinja_want_str(r, sep, "split", pos));
		if (sep->u.s.n == 0)
			return jinja_rfail(r, pos, MEDHA_EFORMAT,
			    "split: empty separator");
		for (;;) {
			const char *hit = max >= 0 && (int64_t)k == max
			    ? NULL
			    : memmem(s + i, n - i, sep->u.s.p, sep->u.s.n);

			if (hit == NULL) {
				w[k++] = mkstr(s + i, n - i);
				break;
			}
			w[k++] = mkstr(s + i, (size_t)(hit - s) - i);
			i = (size_t)(hit - s) + sep->u.s.n;
		}
	}
	*nw = k;
	return 0;
}

#define M(w) (strcmp(name, w) == 0)

static int
str_method(struct rctx *r, const char *name, const struct val *o,
    struct args *a, struct val *out, size_t pos)
{
	if (M("strip") || M("lstrip") || M("rstrip"))
		return jinja_strip(r, o, jinja_arg(a, 0, NULL),
		    M("strip")        ? 3
		        : M("lstrip") ? 1
		                      : 2,
		    out, pos);
	if (M("upper") || M("lower") || M("title") || M("capitalize"))
		return jinja_recase(r, o,
		    M("upper")       ? 'U'
		        : M("lower") ? 'L'
		        : M("title") ? 'T'
		                     : 'C',
		    out, pos);
	if (M("replace"))
		return jinja_replace(r, o, jinja_arg(a, 0, NULL),
		    jinja_arg(a, 1, NULL), jinja_arg(a, 2, NULL), out, pos);
	if (M("startswith") || M("endswith"))
		return str_affix(r, o, jinja_arg(a, 0, NULL), M("endswith"),
		    name, out, pos);
	if (M("split")) {
		const struct val *sep = jinja_arg(a, 0, "sep");
		const struct val *mx = jinja_arg(a, 1, "maxsplit");
		int64_t max = mx != NULL && mx->t == V_INT ? mx->u.i : -1;
		struct val *w;
		size_t k = 0;

		if ((w = jinja_arena_array(&r->ar, o->u.s.n + 1, sizeof(*w))) ==
		    NULL)
			return jinja_nomem(r, pos);
		TRY(str_split(r, o, sep, max, w, &k, pos));
		return jinja_mklist(r, w, k, out, pos);
	}
	return no_method(r, o, name, pos);
}

static int
dict_method(struct rctx *r, const char *name, const struct val *o,
    struct args *a, struct val *out, size_t pos)
{
	if (M("items"))
		return jinja_filter(r, "items", 5, o, a, out, pos);
	if (M("keys") || M("values"))
		return jinja_mklist(r, M("keys") ? o->u.d->k : o->u.d->v,
		    o->u.d->n, out, pos);
	if (M("get")) {
		const struct val *k = jinja_arg(a, 0, NULL),
		                 *d = jinja_arg(a, 1, NULL);
		struct val *x;

		if (k == NULL)
			return jinja_rfail(r, pos, MEDHA_EFORMAT,
			    "get: missing key");
		x = jinja_dict_get(o->u.d, k);
		*out = x != NULL ? *x
		    : d != NULL  ? *d
		                 : (struct val){.t = V_NONE};
		return 0;
	}
	return no_method(r, o, name, pos);
}

#undef M

/* Python str and dict methods that the sandbox allows: e is o.name(a). */
static int
method(struct rctx *r, const struct node *e, const struct val *o,
    struct args *a, struct val *out)
{
	const struct node *at = e->a;
	char name[32];

	snprintf(name, sizeof(name), "%.*s",
	    (int)(at->nlen < 31 ? at->nlen : 31), at->name);
	if (o->t == V_STR)
		return str_method(r, name, o, a, out, e->pos);
	if (o->t == V_DICT)
		return dict_method(r, name, o, a, out, e->pos);
	if (o->t == V_UNDEF)
		return jinja_undef_use(r, at);
	return no_method(r, o, name, e->pos);
}

/* ---------------------------------------------------------------- functions */

static int
strftime_now(struct rctx *r, const struct val *fmt, struct val *out, size_t pos)
{
	const char *env = getenv("MEDHA_JINJA_NOW");
	char f[256], buf[512], *p;
	struct tm tm;
	time_t now;
	size_t n;
	int y, m, d;

	TRY(jinja_want_str(r, fmt, "strftime_now", pos));
	if (fmt->u.s.n >= sizeof(f) || memchr(fmt->u.s.p, 0, fmt->u.s.n))
		return jinja_rfail(r, pos, MEDHA_EUNSUP,
		    "strftime_now: bad format");
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
		return jinja_rfail(r, pos, MEDHA_EUNSUP,
		    "strftime_now: format gives nothing or too much");
	if ((p = jinja_arena_alloc(&r->ar, n + 1)) == NULL)
		return jinja_nomem(r, pos);
	memcpy(p, buf, n);
	*out = mkstr(p, n);
	return 0;
}

/* range(stop), range(start, stop[, step]): at most 1000000 items. */
static int
range(struct rctx *r, const struct args *a, struct val *out, size_t pos)
{
	int64_t lo = 0, hi, st = 1, k, cnt;
	struct val *w;
	size_t i;

	for (i = 0; i < a->np; i++)
		if (a->pv[i].t != V_INT && a->pv[i].t != V_BOOL)
			return jinja_rfail(r, pos, MEDHA_EFORMAT,
			    "range: arguments must be integers");
	if (a->np == 0 || a->np > 3)
		return jinja_rfail(r, pos, MEDHA_EFORMAT,
		    "range: 1 to 3 arguments");
	hi = a->pv[0].u.i;
	if (a->np >= 2) {
		lo = a->pv[0].u.i;
		hi = a->pv[1].u.i;
	}
	if (a->np == 3)
		st = a->pv[2].u.i;
	if (st == 0)
		return jinja_rfail(r, pos, MEDHA_EFORMAT,
		    "range: step must not be zero");
	if ((st > 0 && hi <= lo) || (st < 0 && hi >= lo))
		cnt = 0;
	else if (st > 0)
		cnt =
		    (int64_t)(((uint64_t)hi - (uint64_t)lo - 1) / (uint64_t)st +
		        1);
	else
		cnt = (int64_t)(((uint64_t)lo - (uint64_t)hi - 1) /
		        (uint64_t)(-(st + 1) + 1) +
		    1);
	if (cnt < 0 || cnt > 1000000)
		return jinja_rfail(r, pos, MEDHA_ENOSPACE,
		    "range of more than 1000000 items");
	if ((w = jinja_arena_array(&r->ar, cnt ? (size_t)cnt : 1,
	         sizeof(*w))) == NULL)
		return jinja_nomem(r, pos);
	for (k = 0; k < cnt; k++)
		w[k] = mkint(V_INT, lo + k * st);
	return jinja_mklist(r, w, (size_t)cnt, out, pos);
}

/* namespace() (fn F_NAMESPACE) or dict(): from a dict and keywords. */
static int
make_dict(struct rctx *r, int fn, const struct args *a, struct val *out,
    size_t pos)
{
	struct dict *d = jinja_dict_new(r);
	size_t i;

	if (d == NULL)
		return jinja_nomem(r, pos);
	if (a->np > 0 && (a->pv[0].t != V_DICT || a->np > 1))
		return jinja_rfail(r, pos, MEDHA_EUNSUP,
		    "positional arguments to namespace()/dict()");
	for (i = 0; a->np > 0 && i < a->pv[0].u.d->n; i++)
		if (jinja_dict_put(r, d, a->pv[0].u.d->k[i],
		        a->pv[0].u.d->v[i]) != 0)
			return jinja_nomem(r, pos);
	for (i = 0; i < a->nk; i++)
		if (jinja_dict_put(r, d, mkstr(a->kw[i]->name, a->kw[i]->nlen),
		        a->kv[i]) != 0)
			return jinja_nomem(r, pos);
	out->t = fn == F_NAMESPACE ? V_NS : V_DICT;
	out->u.d = d;
	return 0;
}

int
jinja_call(struct rctx *r, const struct node *e, struct val *out)
{
	struct args a;
	struct val fn, o, m;

	if (e->a->kind == E_ATTR) { /* x.method(...) */
		TRY(jinja_eval(r, e->a->a, &o));
		if (o.t == V_STR || o.t == V_DICT || o.t == V_UNDEF ||
		    o.t == V_LIST) {
			TRY(jinja_eval_args(r, e, &a));
			return method(r, e, &o, &a, out);
		}
	}
	TRY(jinja_eval(r, e->a, &fn));
	if (fn.t == V_UNDEF)
		return jinja_undef_use(r, e->a);
	if (fn.t != V_FUNC)
		return jinja_rfail(r, e->pos, MEDHA_EFORMAT,
		    "a %s is not callable", jinja_tname(&fn));
	TRY(jinja_eval_args(r, e, &a));
	switch (fn.u.i) {
	case F_RAISE:
		TRY(jinja_tostr(r, a.np ? &a.pv[0] : &(struct val){.t = V_NONE},
		    &m, e->pos));
		return medha_why(r->why, r->whylen, MEDHA_EINVAL, "%.*s",
		    (int)(m.u.s.n > INT_MAX ? INT_MAX : m.u.s.n), m.u.s.p);
	case F_STRFTIME:
		return strftime_now(r, jinja_arg(&a, 0, NULL), out, e->pos);
	case F_RANGE: return range(r, &a, out, e->pos);
	default: /* namespace(), dict() */
		return make_dict(r, (int)fn.u.i, &a, out, e->pos);
	}
}
