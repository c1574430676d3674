/*
 * jinja_value.c: the values a render works with and what Python does
 * with them. Undefined, none, bools, ints, floats, strings (bytes that
 * count as code points), lists and tuples, dicts (insertion-ordered),
 * namespaces, the loop variable and the global functions; truthiness
 * and == (deep, bounded) as in Python. Scopes: a frame per {% for %}
 * turn, names looked up from the innermost out. Access: iteration,
 * obj[key] and obj.attr as Jinja2's getitem (missing is undefined, not
 * an error; an attribute of undefined is), slices with Python's rules.
 * Operators: ordering, `in`, arithmetic with Python's floor division
 * and modulo, integer overflow an error. Everything new lives in the
 * render's arena.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "medha.h"
#include "template/jinja_impl.h"

/* ---------------------------------------------------------------- values */

const char *
jinja_tname(const struct val *v)
{
	static const char *names[] = {"undefined", "none", "bool", "int",
	    "float", "str", "list", "dict", "namespace", "loop", "function"};

	if (v->t == V_LIST && v->u.l->tuple)
		return "tuple";
	return names[v->t];
}

int
jinja_truthy(const struct val *v)
{
	switch (v->t) {
	case V_UNDEF:
	case V_NONE: return 0;
	case V_BOOL:
	case V_INT: return v->u.i != 0;
	case V_FLOAT: return v->u.f != 0;
	case V_STR: return v->u.s.n != 0;
	case V_LIST: return v->u.l->n != 0;
	case V_DICT: return v->u.d->n != 0;
	default: return 1;
	}
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
	case V_NONE: return 1;
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
				if (equal_d(&a->u.d->k[i], &b->u.d->k[k],
				        depth + 1))
					break;
			if (k == b->u.d->n ||
			    !equal_d(&a->u.d->v[i], &b->u.d->v[k], depth + 1))
				return 0;
		}
		return 1;
	case V_NS: return a->u.d == b->u.d;
	case V_LOOP: return a->u.lp == b->u.lp;
	default: return a->u.i == b->u.i;
	}
}

int
jinja_equal(const struct val *a, const struct val *b)
{
	return equal_d(a, b, 0);
}

struct val *
jinja_dict_get(struct dict *d, const struct val *k)
{
	size_t i;

	for (i = 0; i < d->n; i++)
		if (jinja_equal(&d->k[i], k))
			return &d->v[i];
	return NULL;
}

int
jinja_dict_put(struct rctx *r, struct dict *d, struct val k, struct val v)
{
	struct val *old = jinja_dict_get(d, &k);

	if (old != NULL) {
		*old = v;
		return 0;
	}
	if (d->n == d->cap) {
		size_t cap = d->cap ? 2 * d->cap : 4;
		struct val *nk = jinja_arena_array(&r->ar, cap, sizeof(*nk));
		struct val *nv = jinja_arena_array(&r->ar, cap, sizeof(*nv));

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

struct dict *
jinja_dict_new(struct rctx *r)
{
	struct dict *d = jinja_arena_alloc(&r->ar, sizeof(*d));

	if (d != NULL)
		memset(d, 0, sizeof(*d));
	return d;
}

struct list *
jinja_list_new(struct rctx *r, size_t n)
{
	struct list *l = jinja_arena_alloc(&r->ar, sizeof(*l));

	if (l == NULL ||
	    (l->v = jinja_arena_array(&r->ar, n ? n : 1, sizeof(*l->v))) ==
	        NULL)
		return NULL;
	l->n = n;
	l->tuple = 0;
	return l;
}

int
jinja_mklist(struct rctx *r, const struct val *items, size_t n, struct val *out,
    size_t pos)
{
	struct list *l = jinja_list_new(r, n);

	if (l == NULL)
		return jinja_nomem(r, pos);
	if (n)
		memcpy(l->v, items, n * sizeof(*items));
	out->t = V_LIST;
	out->u.l = l;
	return 0;
}

/* ---------------------------------------------------------------- scopes */

int
jinja_frame_set(struct rctx *r, struct frame *f, const char *name, size_t n,
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
		struct var *w = jinja_arena_array(&r->ar, cap, sizeof(*w));

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

struct val
jinja_lookup(struct rctx *r, const char *name, size_t n)
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
			if (f->v[i].n == n &&
			    memcmp(f->v[i].name, name, n) == 0)
				return f->v[i].v;
	for (i = 0; i < sizeof(fns) / sizeof(fns[0]); i++)
		if (strlen(fns[i].name) == n &&
		    memcmp(fns[i].name, name, n) == 0)
			return mkint(V_FUNC, fns[i].fn);
	v.t = V_UNDEF;
	return v;
}

/* ---------------------------------------------------------------- access */

/* The items a for loop or a filter walks: list items, chars, keys. */
int
jinja_iterate(struct rctx *r, const struct val *v, struct val **items,
    size_t *n, size_t pos)
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
		c = jinja_cp_count(v->u.s.p, v->u.s.n);
		if ((*items = jinja_arena_array(&r->ar, c ? c : 1,
		         sizeof(**items))) == NULL)
			return jinja_nomem(r, pos);
		for (i = 0, k = 0; i < v->u.s.n; k++) {
			uint32_t cp;
			size_t m =
			    jinja_utf8_dec(v->u.s.p + i, v->u.s.n - i, &cp);

			(*items)[k] = mkstr(v->u.s.p + i, m);
			i += m;
		}
		*n = k;
		return 0;
	default:
		return jinja_rfail(r, pos, MEDHA_EFORMAT,
		    "a %s is not iterable", jinja_tname(v));
	}
}

int
jinja_undef_use(struct rctx *r, const struct node *e)
{
	const struct node *x = e;

	while (x->kind == E_ATTR || x->kind == E_INDEX || x->kind == E_CALL ||
	    x->kind == E_SLICE)
		x = x->a;
	if (x->kind == E_NAME)
		return jinja_rfail(r, e->pos, MEDHA_EFORMAT,
		    "'%.*s' is undefined", (int)x->nlen, x->name);
	return jinja_rfail(r, e->pos, MEDHA_EFORMAT,
	    "use of an undefined value");
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
int
jinja_getitem(struct rctx *r, const struct val *o, const struct val *key,
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
		TRY(jinja_iterate(r, o, &items, &cn, pos));
		i = key->u.i < 0 ? key->u.i + (int64_t)cn : key->u.i;
		if (i >= 0 && i < (int64_t)cn)
			*out = items[i];
		return 0;
	}
	case V_DICT:
	case V_NS:
		if ((x = jinja_dict_get(o->u.d, key)) != NULL)
			*out = *x;
		return 0;
	case V_LOOP:
		if (key->t == V_STR)
			*out = loop_attr(o->u.lp, key->u.s.p, key->u.s.n);
		return 0;
	default: return 0;
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
int
jinja_slice(struct rctx *r, const struct val *o, const struct val *sv,
    size_t pos, struct val *out)
{
	struct val *items;
	size_t n, k = 0, bytes = 0;
	int64_t a, b, c = 1, i, len;
	struct list *l;
	char *p;

	for (i = 0; i < 3; i++)
		if (sv[i].t != V_NONE && sv[i].t != V_UNDEF &&
		    sv[i].t != V_INT && sv[i].t != V_BOOL)
			return jinja_rfail(r, pos, MEDHA_EFORMAT,
			    "slice indices must be integers");
	if (o->t != V_LIST && o->t != V_STR)
		return jinja_rfail(r, pos, MEDHA_EFORMAT, "cannot slice a %s",
		    jinja_tname(o));
	TRY(jinja_iterate(r, o, &items, &n, pos));
	len = (int64_t)n;
	if (sv[2].t == V_INT || sv[2].t == V_BOOL)
		c = sv[2].u.i;
	if (c == 0)
		return jinja_rfail(r, pos, MEDHA_EFORMAT,
		    "slice step cannot be zero");
	if (c > 0) {
		a = sv[0].t == V_INT || sv[0].t == V_BOOL
		    ? clampi(sv[0].u.i, len, 0, len)
		    : 0;
		b = sv[1].t == V_INT || sv[1].t == V_BOOL
		    ? clampi(sv[1].u.i, len, 0, len)
		    : len;
	} else {
		a = sv[0].t == V_INT || sv[0].t == V_BOOL
		    ? clampi(sv[0].u.i, len, -1, len - 1)
		    : len - 1;
		b = sv[1].t == V_INT || sv[1].t == V_BOOL
		    ? clampi(sv[1].u.i, len, -1, len - 1)
		    : -1;
	}
	if ((l = jinja_list_new(r, n)) == NULL)
		return jinja_nomem(r, pos);
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
	if ((p = jinja_arena_alloc(&r->ar, bytes + 1)) == NULL)
		return jinja_nomem(r, pos);
	*out = mkstr(p, bytes);
	for (i = 0; i < (int64_t)k; i++) {
		memcpy(p, l->v[i].u.s.p, l->v[i].u.s.n);
		p += l->v[i].u.s.n;
	}
	return 0;
}

/* ---------------------------------------------------------------- operators */

int
jinja_cmp_order(struct rctx *r, const struct val *a, const struct val *b,
    int *c, size_t pos)
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
			if (jinja_equal(&a->u.l->v[i], &b->u.l->v[i]))
				continue;
			if (++r->edepth > 4 * MEDHA_JINJA_MAX_DEPTH)
				i = (size_t)jinja_rfail(r, pos, MEDHA_ENOSPACE,
				    "values nested too deep to compare");
			else
				i = (size_t)jinja_cmp_order(r, &a->u.l->v[i],
				    &b->u.l->v[i], c, pos);
			r->edepth--;
			return (int)i;
		}
		*c = a->u.l->n < b->u.l->n ? -1 : a->u.l->n > b->u.l->n;
		return 0;
	}
	return jinja_rfail(r, pos, MEDHA_EFORMAT, "cannot order a %s and a %s",
	    jinja_tname(a), jinja_tname(b));
}

int
jinja_contains(struct rctx *r, const struct val *hay, const struct val *x,
    int *found, size_t pos)
{
	size_t i;

	*found = 0;
	switch (hay->t) {
	case V_STR:
		if (x->t != V_STR)
			return jinja_rfail(r, pos, MEDHA_EFORMAT,
			    "'in <string>' requires a string, not a %s",
			    jinja_tname(x));
		*found = x->u.s.n == 0 ||
		    memmem(hay->u.s.p, hay->u.s.n, x->u.s.p, x->u.s.n) != NULL;
		return 0;
	case V_LIST:
		for (i = 0; i < hay->u.l->n && !*found; i++)
			*found = jinja_equal(&hay->u.l->v[i], x);
		return 0;
	case V_DICT: *found = jinja_dict_get(hay->u.d, x) != NULL; return 0;
	case V_UNDEF: return 0;
	default:
		return jinja_rfail(r, pos, MEDHA_EFORMAT,
		    "a %s does not support 'in'", jinja_tname(hay));
	}
}

int
jinja_concat(struct rctx *r, const struct val *a, const struct val *b,
    struct val *out, size_t pos)
{
	char *p;

	if (a->u.s.n > MEDHA_JINJA_MAX_MEM || b->u.s.n > MEDHA_JINJA_MAX_MEM)
		return jinja_nomem(r, pos);
	if ((p = jinja_arena_alloc(&r->ar, a->u.s.n + b->u.s.n + 1)) == NULL)
		return jinja_nomem(r, pos);
	if (a->u.s.n)
		memcpy(p, a->u.s.p, a->u.s.n);
	if (b->u.s.n)
		memcpy(p + a->u.s.n, b->u.s.p, b->u.s.n);
	*out = mkstr(p, a->u.s.n + b->u.s.n);
	return 0;
}

int
jinja_binop(struct rctx *r, int op, const struct val *a, const struct val *b,
    struct val *out, size_t pos)
{
	int64_t x, y, z = 0;
	int c, ovf = 0;

	switch (op) {
	case OP2('=', '='): *out = mkint(V_BOOL, jinja_equal(a, b)); return 0;
	case OP2('!', '='): *out = mkint(V_BOOL, !jinja_equal(a, b)); return 0;
	case '<':
	case '>':
	case OP2('<', '='):
	case OP2('>', '='):
		TRY(jinja_cmp_order(r, a, b, &c, pos));
		*out = mkint(V_BOOL,
		    op == '<'                 ? c < 0
		        : op == '>'           ? c > 0
		        : op == OP2('<', '=') ? c <= 0
		                              : c >= 0);
		return 0;
	case 'i':
	case 'n':
		TRY(jinja_contains(r, b, a, &c, pos));
		*out = mkint(V_BOOL, op == 'i' ? c : !c);
		return 0;
	}
	if (a->t == V_UNDEF || b->t == V_UNDEF)
		return jinja_rfail(r, pos, MEDHA_EFORMAT,
		    "arithmetic on an undefined value");
	if (op == '+' && a->t == V_STR && b->t == V_STR)
		return jinja_concat(r, a, b, out, pos);
	if (op == '+' && a->t == V_LIST && b->t == V_LIST &&
	    a->u.l->tuple == b->u.l->tuple) {
		struct list *l = jinja_list_new(r, a->u.l->n + b->u.l->n);

		if (l == NULL)
			return jinja_nomem(r, pos);
		memcpy(l->v, a->u.l->v, a->u.l->n * sizeof(*l->v));
		memcpy(l->v + a->u.l->n, b->u.l->v, b->u.l->n * sizeof(*l->v));
		l->tuple = a->u.l->tuple;
		out->t = V_LIST;
		out->u.l = l;
		return 0;
	}
	if (!isnum(a) || !isnum(b))
		return jinja_rfail(r, pos, MEDHA_EFORMAT,
		    "unsupported operand types for '%c%c': %s and %s",
		    op & 0xff, op >> 8 ? op >> 8 : ' ', jinja_tname(a),
		    jinja_tname(b));
	if (a->t == V_FLOAT || b->t == V_FLOAT || op == '/') {
		double f = numf(a), g = numf(b), h;

		if ((op == '/' || op == '%' || op == OP2('/', '/')) && g == 0)
			return jinja_rfail(r, pos, MEDHA_EFORMAT,
			    "division by zero");
		switch (op) {
		case '+': h = f + g; break;
		case '-': h = f - g; break;
		case '*': h = f * g; break;
		case '/': h = f / g; break;
		case OP2('/', '/'): h = floor(f / g); break;
		case '%':
			h = fmod(f, g);
			if (h != 0 && (h < 0) != (g < 0))
				h += g;
			break;
		default: h = pow(f, g); break;
		}
		out->t = V_FLOAT;
		out->u.f = h;
		return 0;
	}
	x = a->u.i;
	y = b->u.i;
	switch (op) {
	case '+': ovf = __builtin_add_overflow(x, y, &z); break;
	case '-': ovf = __builtin_sub_overflow(x, y, &z); break;
	case '*': ovf = __builtin_mul_overflow(x, y, &z); break;
	case OP2('/', '/'):
	case '%':
		if (y == 0)
			return jinja_rfail(r, pos, MEDHA_EFORMAT,
			    "division by zero");
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
			return jinja_rfail(r, pos, MEDHA_EUNSUP,
			    "negative powers are not supported");
		if (x >= -1 && x <= 1) /* no loop of y turns for these */
			z = x == 1 || (x == -1 && y % 2 == 0) || y == 0 ? 1 : x;
		else
			for (z = 1; y > 0 && !ovf; y--)
				ovf = __builtin_mul_overflow(z, x, &z);
		break;
	}
	if (ovf)
		return jinja_rfail(r, pos, MEDHA_ERANGE, "integer overflow");
	*out = mkint(V_INT, z);
	return 0;
}
