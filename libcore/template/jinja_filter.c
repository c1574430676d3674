/*
 * jinja_filter.c: Jinja2's filters and tests, as far as chat templates
 * use them. Filters are a table, name to function with the arguments
 * each takes (by position, or by keyword under Jinja2's names); the
 * table also names the filters Jinja2 has that this renderer lacks,
 * so that a template using one parses as in Jinja2 and fails only if
 * it reaches one when rendered. Tests are a function of their name.
 * Also the argument helpers and the string operations (case mapping,
 * strip, replace) that filters share with str's methods (jinja_call.c).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "medha.h"
#include "template/jinja_impl.h"

/* ---------------------------------------------------------------- arguments */

/* Argument name, given as a keyword; NULL if not. */
const struct val *
jinja_kwarg(const struct args *a, const char *name)
{
	return jinja_arg(a, SIZE_MAX, name);
}

/* Argument k (positional) or name (keyword); NULL if not given. */
const struct val *
jinja_arg(const struct args *a, size_t k, const char *name)
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

int
jinja_want_str(struct rctx *r, const struct val *v, const char *what,
    size_t pos)
{
	if (v == NULL || v->t != V_STR)
		return jinja_rfail(r, pos, MEDHA_EFORMAT,
		    "%s: expected a string", what);
	return 0;
}

/* ---------------------------------------------------------------- strings */

/* Case mapping of ASCII letters; other bytes stay (see jinja.h). */
int
jinja_recase(struct rctx *r, const struct val *in, int mode, struct val *out,
    size_t pos)
{
	char *p;
	size_t i;
	int start = 1;

	if ((p = jinja_arena_alloc(&r->ar, in->u.s.n + 1)) == NULL)
		return jinja_nomem(r, pos);
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

int
jinja_strip(struct rctx *r, const struct val *s, const struct val *chars,
    int lr, struct val *out, size_t pos)
{
	const char *set = NULL;
	size_t setn = 0, a = 0, b = s->u.s.n;

	if (chars != NULL && chars->t != V_NONE) {
		TRY(jinja_want_str(r, chars, "strip", pos));
		set = chars->u.s.p;
		setn = chars->u.s.n;
	}
	if (lr & 1)
		a = jinja_lstrip_len(s->u.s.p, b, set, setn);
	if (lr & 2)
		b = a + jinja_rstrip_len(s->u.s.p + a, b - a, set, setn);
	*out = mkstr(s->u.s.p + a, b - a);
	return 0;
}

int
jinja_replace(struct rctx *r, const struct val *s, const struct val *old,
    const struct val *new, const struct val *count, struct val *out, size_t pos)
{
	struct buf b = {NULL, 0, 0};
	int64_t max = count != NULL && count->t == V_INT ? count->u.i : -1;
	size_t i = 0;
	int rc = 0;

	TRY(jinja_want_str(r, old, "replace", pos));
	TRY(jinja_want_str(r, new, "replace", pos));
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
			rc = jinja_put(r, &b, s->u.s.p + i, s->u.s.n - i, pos);
			break;
		}
		at = (size_t)(hit - s->u.s.p);
		if ((rc = jinja_put(r, &b, s->u.s.p + i, at - i, pos)) == 0)
			rc = jinja_put(r, &b, new->u.s.p, new->u.s.n, pos);
		if (max > 0)
			max--;
		if (old->u.s.n == 0) {
			uint32_t cp;

			if (at == s->u.s.n)
				break;
			i = at +
			    jinja_utf8_dec(s->u.s.p + at, s->u.s.n - at, &cp);
			rc = rc ? rc
			        : jinja_put(r, &b, s->u.s.p + at, i - at, pos);
		} else
			i = at + old->u.s.n;
	}
	return jinja_buf_take(r, &b, rc, out, pos);
}

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
			return jinja_rfail(r, pos, MEDHA_EFORMAT,
			    "attribute of an undefined value");
		TRY(jinja_getitem(r, &cur, &k, &next, pos));
		cur = next;
		if (dot == NULL)
			break;
		n -= (size_t)(dot - s) + 1;
		s = dot + 1;
	}
	*out = cur;
	return 0;
}

/* ---------------------------------------------------------------- filters */

struct filter;

/* A filter applied to in (a copy: out may be the caller's in). */
typedef int filter_fn(struct rctx *r, const struct filter *f,
    const struct val *in, struct args *a, struct val *out, size_t pos);

struct filter {
	const char *name;
	filter_fn *fn; /* NULL: Jinja2 has it, this renderer does not */
	int how;       /* the variant, where filters share a function */
	/*
	 * The arguments after the value, by position: the k-th positional
	 * argument, or else the keyword params[k] (NULL: positional only).
	 */
	const char *params[5];
};

static const struct val *
param(const struct args *a, const struct filter *f, size_t k)
{
	return jinja_arg(a, k, f->params[k]);
}

/* default(default_value='', boolean=false), also named d. */
static int
f_default(struct rctx *r, const struct filter *f, const struct val *in,
    struct args *a, struct val *out, size_t pos)
{
	const struct val *d = param(a, f, 0), *b = param(a, f, 1);
	struct val empty = mkstr("", 0);

	(void)r;
	(void)pos;
	if (in->t == V_UNDEF ||
	    (b != NULL && jinja_truthy(b) && !jinja_truthy(in)))
		*out = d != NULL ? *d : empty;
	else
		*out = *in;
	return 0;
}

static int
f_safe(struct rctx *r, const struct filter *f, const struct val *in,
    struct args *a, struct val *out, size_t pos)
{
	(void)r;
	(void)f;
	(void)a;
	(void)pos;
	*out = *in;
	return 0;
}

/* length, also named count: code points of a string, items of the rest. */
static int
f_length(struct rctx *r, const struct filter *f, const struct val *in,
    struct args *a, struct val *out, size_t pos)
{
	struct val *items;
	size_t n;

	(void)f;
	(void)a;
	if (in->t == V_STR)
		*out =
		    mkint(V_INT, (int64_t)jinja_cp_count(in->u.s.p, in->u.s.n));
	else if (in->t == V_LIST || in->t == V_DICT || in->t == V_UNDEF) {
		TRY(jinja_iterate(r, in, &items, &n, pos));
		*out = mkint(V_INT, (int64_t)n);
	} else
		return jinja_rfail(r, pos, MEDHA_EFORMAT, "a %s has no length",
		    jinja_tname(in));
	return 0;
}

/*
 * transformers' tojson (json.dumps with ensure_ascii=False). The
 * positions read are those of the first version: indent 1, separators
 * 3, sort_keys 4, where transformers' signature has separators at 2
 * and sort_keys at 3; the keyword forms, which templates use, agree.
 */
static int
f_tojson(struct rctx *r, const struct filter *f, const struct val *in,
    struct args *a, struct val *out, size_t pos)
{
	struct jsonfmt jf = {NULL, ", ", ": ", 0, 0};
	const struct val *ind = param(a, f, 1), *sep = param(a, f, 3),
	                 *sk = param(a, f, 4);
	static const char spaces[] = "                ";
	struct buf b = {NULL, 0, 0};
	int rc;

	if (ind != NULL && ind->t == V_INT) {
		if (ind->u.i < 0 || ind->u.i > 16)
			return jinja_rfail(r, pos, MEDHA_EUNSUP,
			    "tojson: indent out of range");
		jf.indent = spaces;
		jf.indn = (size_t)ind->u.i;
		jf.isep = ",";
	} else if (ind != NULL && ind->t == V_STR) {
		jf.indent = ind->u.s.p;
		jf.indn = ind->u.s.n;
		jf.isep = ",";
	}
	if (sep != NULL && sep->t == V_LIST && sep->u.l->n == 2 &&
	    sep->u.l->v[0].t == V_STR && sep->u.l->v[1].t == V_STR) {
		/* both end at a NUL-free copy below */
		struct val x, y;

		TRY(jinja_concat(r, &sep->u.l->v[0],
		    &(struct val){.t = V_STR, .u.s = {"\0", 1}}, &x, pos));
		TRY(jinja_concat(r, &sep->u.l->v[1],
		    &(struct val){.t = V_STR, .u.s = {"\0", 1}}, &y, pos));
		jf.isep = x.u.s.p;
		jf.ksep = y.u.s.p;
	}
	jf.sort = sk != NULL && jinja_truthy(sk);
	rc = jinja_tojson(r, in, &b, &jf, 0, pos);
	return jinja_buf_take(r, &b, rc, out, pos);
}

/* first (how 0), last (how 1): undefined when there is none. */
static int
f_first(struct rctx *r, const struct filter *f, const struct val *in,
    struct args *a, struct val *out, size_t pos)
{
	struct val *items;
	size_t n;

	(void)a;
	TRY(jinja_iterate(r, in, &items, &n, pos));
	out->t = V_UNDEF;
	if (n > 0)
		*out = items[f->how == 0 ? 0 : n - 1];
	return 0;
}

/* list (how 0), reverse (how 1; a string stays a string). */
static int
f_list(struct rctx *r, const struct filter *f, const struct val *in,
    struct args *a, struct val *out, size_t pos)
{
	struct val *items, *w;
	size_t n, i;
	int rev = f->how == 1;

	(void)a;
	if (rev && in->t != V_STR && in->t != V_LIST)
		return jinja_rfail(r, pos, MEDHA_EFORMAT, "cannot reverse a %s",
		    jinja_tname(in));
	TRY(jinja_iterate(r, in, &items, &n, pos));
	if ((w = jinja_arena_array(&r->ar, n ? n : 1, sizeof(*w))) == NULL)
		return jinja_nomem(r, pos);
	for (i = 0; i < n; i++)
		w[i] = items[!rev ? i : n - 1 - i];
	if (rev && in->t == V_STR) {
		struct val l;
		struct args none;

		memset(&none, 0, sizeof(none));
		TRY(jinja_mklist(r, w, n, &l, pos));
		return jinja_filter(r, "join", 4, &l, &none, out, pos);
	}
	return jinja_mklist(r, w, n, out, pos);
}

/* A dict's (key, value) tuples; also dict.items(). */
static int
f_items(struct rctx *r, const struct filter *f, const struct val *in,
    struct args *a, struct val *out, size_t pos)
{
	struct val *w;
	size_t n, i;

	(void)f;
	(void)a;
	if (in->t == V_UNDEF)
		return jinja_mklist(r, NULL, 0, out, pos);
	if (in->t != V_DICT)
		return jinja_rfail(r, pos, MEDHA_EFORMAT,
		    "items: expected a mapping, got a %s", jinja_tname(in));
	n = in->u.d->n;
	if ((w = jinja_arena_array(&r->ar, n ? n : 1, sizeof(*w))) == NULL)
		return jinja_nomem(r, pos);
	for (i = 0; i < n; i++) {
		TRY(jinja_mklist(r,
		    (struct val[2]){in->u.d->k[i], in->u.d->v[i]}, 2, &w[i],
		    pos));
		w[i].u.l->tuple = 1;
	}
	return jinja_mklist(r, w, n, out, pos);
}

/* join(d='', attribute=none): str() of each item, d between. */
static int
f_join(struct rctx *r, const struct filter *f, const struct val *in,
    struct args *a, struct val *out, size_t pos)
{
	const struct val *sep = param(a, f, 0), *at = param(a, f, 1);
	struct buf b = {NULL, 0, 0};
	struct val *items;
	size_t n, i;
	int rc = 0;

	TRY(jinja_iterate(r, in, &items, &n, pos));
	if (sep != NULL)
		TRY(jinja_want_str(r, sep, "join", pos));
	for (i = 0; i < n && rc == 0; i++) {
		struct val x = items[i];

		if (at != NULL &&
		    (rc = jinja_want_str(r, at, "join", pos)) == 0)
			rc = attr_path(r, &x, at, &x, pos);
		if (rc == 0 && i > 0 && sep != NULL)
			rc = jinja_put(r, &b, sep->u.s.p, sep->u.s.n, pos);
		if (rc == 0)
			rc = jinja_tostr_buf(r, &x, &b, 0, pos);
	}
	return jinja_buf_take(r, &b, rc, out, pos);
}

/*
 * map(filter, args...) or map(attribute=a.b, default=d) of one item,
 * for f_seq.
 */
static int
map_one(struct rctx *r, struct args *a, struct val *x, size_t pos)
{
	const struct val *at = jinja_kwarg(a, "attribute");
	struct args sub;

	if (at != NULL) {
		TRY(jinja_want_str(r, at, "map", pos));
		TRY(attr_path(r, x, at, x, pos));
		if (x->t == V_UNDEF && jinja_kwarg(a, "default"))
			*x = *jinja_kwarg(a, "default");
		return 0;
	}
	sub = *a;
	TRY(jinja_want_str(r, jinja_arg(a, 0, NULL), "map", pos));
	memmove(sub.pv, sub.pv + 1, (sub.np - 1) * sizeof(*sub.pv));
	sub.np--;
	return jinja_filter(r, a->pv[0].u.s.p, a->pv[0].u.s.n, x, &sub, x, pos);
}

/*
 * select, reject, selectattr, rejectattr (a test's name and arguments,
 * after the attribute for the *attr ones) and map: the variant is in
 * the name, which messages give.
 */
static int
f_seq(struct rctx *r, const struct filter *f, const struct val *in,
    struct args *a, struct val *out, size_t pos)
{
	const char *name = f->name;
	int sel = name[0] == 's', attr = strstr(name, "attr") != NULL;
	int map = strcmp(name, "map") == 0;
	struct val *items, *res, x;
	size_t n, i, k = 0, first = attr ? 1 : 0;
	int ok;

	TRY(jinja_iterate(r, in, &items, &n, pos));
	if ((res = jinja_arena_array(&r->ar, n ? n : 1, sizeof(*res))) == NULL)
		return jinja_nomem(r, pos);
	for (i = 0; i < n; i++) {
		x = items[i];
		if (map) {
			TRY(map_one(r, a, &x, pos));
			res[k++] = x;
			continue;
		}
		if (attr) {
			TRY(jinja_want_str(r, jinja_arg(a, 0, NULL), name,
			    pos));
			TRY(attr_path(r, &x, &a->pv[0], &x, pos));
		}
		if (a->np > first) {
			TRY(jinja_want_str(r, &a->pv[first], name, pos));
			TRY(jinja_test(r, a->pv[first].u.s.p,
			    a->pv[first].u.s.n, &x,
			    a->np > first + 1 ? &a->pv[first + 1] : NULL,
			    a->np > first + 1, &ok, pos));
		} else
			ok = jinja_truthy(&x);
		if (ok == sel)
			res[k++] = items[i];
	}
	return jinja_mklist(r, res, k, out, pos);
}

/* int(default=0): ints, floats truncated, decimal strings. */
static int
f_int(struct rctx *r, const struct filter *f, const struct val *in,
    struct args *a, struct val *out, size_t pos)
{
	const struct val *d = param(a, f, 0);

	(void)r;
	(void)pos;
	*out = d != NULL ? *d : mkint(V_INT, 0);
	if (in->t == V_INT || in->t == V_BOOL)
		*out = mkint(V_INT, in->u.i);
	else if (in->t == V_FLOAT && fabs(in->u.f) < 9e18)
		*out = mkint(V_INT, (int64_t)in->u.f);
	else if (in->t == V_STR && in->u.s.n < 40) {
		char b[48];
		int64_t i;

		snprintf(b, sizeof(b), "%.*s", (int)in->u.s.n, in->u.s.p);
		if (medha_parse_i64(b, INT64_MIN, INT64_MAX, &i) == 0)
			*out = mkint(V_INT, i);
	}
	return 0;
}

static int
f_abs(struct rctx *r, const struct filter *f, const struct val *in,
    struct args *a, struct val *out, size_t pos)
{
	(void)f;
	(void)a;
	if (in->t == V_FLOAT) {
		out->t = V_FLOAT;
		out->u.f = fabs(in->u.f);
	} else if (in->t == V_INT || in->t == V_BOOL) {
		if (in->u.i == INT64_MIN)
			return jinja_rfail(r, pos, MEDHA_ERANGE,
			    "integer overflow");
		*out = mkint(V_INT, in->u.i < 0 ? -in->u.i : in->u.i);
	} else
		return jinja_rfail(r, pos, MEDHA_EFORMAT, "abs of a %s",
		    jinja_tname(in));
	return 0;
}

/*
 * The filters that work on str(value), as Jinja2's soft_str does:
 * string (how 0), trim (chars=none; how 1), replace (old, new,
 * count=none; how 2), or a case mapping (how: jinja_recase's mode).
 */
static int
f_str(struct rctx *r, const struct filter *f, const struct val *in,
    struct args *a, struct val *out, size_t pos)
{
	struct val s;

	TRY(jinja_tostr(r, in, &s, pos));
	switch (f->how) {
	case 0: *out = s; return 0;
	case 1: return jinja_strip(r, &s, param(a, f, 0), 3, out, pos);
	case 2:
		return jinja_replace(r, &s, param(a, f, 0), param(a, f, 1),
		    param(a, f, 2), out, pos);
	default: return jinja_recase(r, &s, f->how, out, pos);
	}
}

/*
 * Every filter Jinja2 has, so that a template naming one parses as it
 * does there; those with no fn fail when they are rendered.
 */
static const struct filter filters[] = {
    {"abs", f_abs, 0, {NULL}},
    {"attr", NULL, 0, {NULL}},
    {"batch", NULL, 0, {NULL}},
    {"capitalize", f_str, 'C', {NULL}},
    {"center", NULL, 0, {NULL}},
    {"count", f_length, 0, {NULL}},
    {"d", f_default, 0, {"default_value", "boolean"}},
    {"default", f_default, 0, {"default_value", "boolean"}},
    {"dictsort", NULL, 0, {NULL}},
    {"e", NULL, 0, {NULL}},
    {"escape", NULL, 0, {NULL}},
    {"filesizeformat", NULL, 0, {NULL}},
    {"first", f_first, 0, {NULL}},
    {"float", NULL, 0, {NULL}},
    {"forceescape", NULL, 0, {NULL}},
    {"format", NULL, 0, {NULL}},
    {"groupby", NULL, 0, {NULL}},
    {"indent", NULL, 0, {NULL}},
    {"int", f_int, 0, {"default"}},
    {"items", f_items, 0, {NULL}},
    {"join", f_join, 0, {"d", "attribute"}},
    {"last", f_first, 1, {NULL}},
    {"length", f_length, 0, {NULL}},
    {"list", f_list, 0, {NULL}},
    {"lower", f_str, 'L', {NULL}},
    {"map", f_seq, 0, {NULL}},
    {"max", NULL, 0, {NULL}},
    {"min", NULL, 0, {NULL}},
    {"pprint", NULL, 0, {NULL}},
    {"random", NULL, 0, {NULL}},
    {"reject", f_seq, 0, {NULL}},
    {"rejectattr", f_seq, 0, {NULL}},
    {"replace", f_str, 2, {"old", "new", "count"}},
    {"reverse", f_list, 1, {NULL}},
    {"round", NULL, 0, {NULL}},
    {"safe", f_safe, 0, {NULL}},
    {"select", f_seq, 0, {NULL}},
    {"selectattr", f_seq, 0, {NULL}},
    {"slice", NULL, 0, {NULL}},
    {"sort", NULL, 0, {NULL}},
    {"string", f_str, 0, {NULL}},
    {"striptags", NULL, 0, {NULL}},
    {"sum", NULL, 0, {NULL}},
    {"title", f_str, 'T', {NULL}},
    {"tojson", f_tojson, 0, {NULL, "indent", NULL, "separators", "sort_keys"}},
    {"trim", f_str, 1, {"chars"}},
    {"truncate", NULL, 0, {NULL}},
    {"unique", NULL, 0, {NULL}},
    {"upper", f_str, 'U', {NULL}},
    {"urlencode", NULL, 0, {NULL}},
    {"urlize", NULL, 0, {NULL}},
    {"wordcount", NULL, 0, {NULL}},
    {"wordwrap", NULL, 0, {NULL}},
    {"xmlattr", NULL, 0, {NULL}},
};

static const struct filter *
filter_find(const char *s, size_t n)
{
	size_t i;

	for (i = 0; i < sizeof(filters) / sizeof(filters[0]); i++)
		if (strlen(filters[i].name) == n &&
		    memcmp(filters[i].name, s, n) == 0)
			return &filters[i];
	return NULL;
}

int
jinja_filter_known(const char *s, size_t n)
{
	return filter_find(s, n) != NULL;
}

int
jinja_filter(struct rctx *r, const char *fs, size_t fn, const struct val *in,
    struct args *a, struct val *out, size_t pos)
{
	const struct filter *f;
	struct val inv = *in; /* out may be in */
	char name[32];

	snprintf(name, sizeof(name), "%.*s", (int)(fn < 31 ? fn : 31), fs);
	f = filter_find(name, strlen(name));
	if (f == NULL || f->fn == NULL)
		return jinja_rfail(r, pos, MEDHA_EUNSUP,
		    "filter '%s' is not supported", name);
	return f->fn(r, f, &inv, a, out, pos);
}

/* ---------------------------------------------------------------- tests */

/* Tests Jinja2 knows: others fail at parse time, as there. */
static const char *tests[] = {"boolean", "callable", "defined", "divisibleby",
    "eq", "equalto", "escaped", "even", "false", "filter", "float", "ge", "gt",
    "greaterthan", "in", "integer", "iterable", "le", "lessthan", "lower", "lt",
    "mapping", "ne", "none", "number", "odd", "sameas", "sequence", "string",
    "test", "true", "undefined", "upper", "==", "!=", ">", ">=", "<",
    "<=", NULL};

int
jinja_test_known(const char *s, size_t n)
{
	const char **t;

	for (t = tests; *t != NULL; t++)
		if (strlen(*t) == n && memcmp(*t, s, n) == 0)
			return 1;
	return 0;
}

int
jinja_test(struct rctx *r, const char *ts, size_t tn, const struct val *v,
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

		TRY(jinja_tostr(r, v, &s, pos));
		TRY(jinja_recase(r, &s, T("lower") ? 'L' : 'U', &t, pos));
		*res = jinja_equal(&s, &t);
		for (c = 0; *res && (size_t)c < s.u.s.n; c++)
			if ((s.u.s.p[c] | 32) >= 'a' &&
			    (s.u.s.p[c] | 32) <= 'z')
				break;
		*res = *res && (size_t)c < s.u.s.n; /* has a cased letter */
	} else if (T("even") || T("odd") || T("divisibleby")) {
		int64_t d = 2;

		if (v->t != V_INT && v->t != V_BOOL)
			return jinja_rfail(r, pos, MEDHA_EFORMAT,
			    "test '%s' of a %s", name, jinja_tname(v));
		if (T("divisibleby")) {
			if (nx < 1 || (x->t != V_INT && x->t != V_BOOL) ||
			    x->u.i == 0)
				return jinja_rfail(r, pos, MEDHA_EFORMAT,
				    "divisibleby: bad divisor");
			d = x->u.i;
		}
		*res = d == -1 || v->u.i % d == 0;
		if (T("odd"))
			*res = !*res;
	} else if (T("eq") || T("equalto") || T("==") || T("ne") || T("!=") ||
	    T("sameas")) {
		if (nx < 1)
			return jinja_rfail(r, pos, MEDHA_EFORMAT,
			    "test '%s' needs an "
			    "argument",
			    name);
		*res = jinja_equal(v, x) == !(T("ne") || T("!="));
		if (T("sameas") && v->t != x->t)
			*res = 0;
	} else if (T("lt") || T("lessthan") || T("<") || T("le") || T("<=") ||
	    T("gt") || T("greaterthan") || T(">") || T("ge") || T(">=")) {
		if (nx < 1)
			return jinja_rfail(r, pos, MEDHA_EFORMAT,
			    "test '%s' needs an "
			    "argument",
			    name);
		TRY(jinja_cmp_order(r, v, x, &c, pos));
		*res = name[0] == 'l' || name[0] == '<'
		    ? (name[1] == 'e' || name[1] == '=' ? c <= 0 : c < 0)
		    : (name[1] == 'e' || name[1] == '=' ? c >= 0 : c > 0);
	} else if (T("in")) {
		if (nx < 1)
			return jinja_rfail(r, pos, MEDHA_EFORMAT,
			    "test 'in' needs an "
			    "argument");
		TRY(jinja_contains(r, x, v, res, pos));
	} else
		return jinja_rfail(r, pos, MEDHA_EUNSUP,
		    "test '%s' is not supported", name);
#undef T
	return 0;
}
