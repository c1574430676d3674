/*
 * jinja_eval.c: a parsed template rendered for one request. Evaluation
 * follows Python: `and`/`or` return an operand, == compares deeply, an
 * undefined name is empty and false but an attribute or operator on it
 * is an error, as with Jinja2's default Undefined. Each {% for %} turn
 * gets a fresh scope, so a {% set %} inside a loop does not leak out
 * (hence namespace()). The variables are messages, add_generation_prompt,
 * bos_token, eos_token, tools and documents (none).
 *
 * Everything a render makes lives in one arena freed at the end; the
 * arena, the output, the evaluation steps and the nesting depth are all
 * bounded, since the template comes with an untrusted model file.
 * Also the render's errors and output buffer, and the API's
 * medha_jinja_render().
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "medha.h"
#include "template/jinja_impl.h"

/* ----------------------------------------------------------- errors, output */

int
jinja_rfail(struct rctx *r, size_t pos, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	err = jinja_vfail(r->j->src, pos, r->why, r->whylen, err, fmt, ap);
	va_end(ap);
	return err;
}

int
jinja_nomem(struct rctx *r, size_t pos)
{
	if (r->ar.over)
		return jinja_rfail(r, pos, MEDHA_ENOSPACE,
		    "render needs more than %d bytes", MEDHA_JINJA_MAX_MEM);
	return jinja_rfail(r, pos, MEDHA_ENOMEM, "out of memory");
}

int
jinja_put(struct rctx *r, struct buf *b, const char *s, size_t n, size_t pos)
{
	if (n > MEDHA_JINJA_MAX_OUT - b->n)
		return jinja_rfail(r, pos, MEDHA_ENOSPACE,
		    "output longer than %d bytes", MEDHA_JINJA_MAX_OUT);
	if (b->cap - b->n <= n) {
		size_t cap = b->cap ? b->cap : 4096;
		char *q;

		while (cap - b->n <= n)
			cap *= 2;
		if ((q = realloc(b->p, cap)) == NULL)
			return jinja_nomem(r, pos);
		b->p = q;
		b->cap = cap;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
	return 0;
}

/*
 * b's bytes as the string value *out, copied into the arena, unless rc
 * is an error already. b's memory is freed either way; returns rc or
 * the arena's error.
 */
int
jinja_buf_take(struct rctx *r, struct buf *b, int rc, struct val *out,
    size_t pos)
{
	char *p = NULL;

	if (rc == 0 && (p = jinja_arena_alloc(&r->ar, b->n + 1)) == NULL)
		rc = jinja_nomem(r, pos);
	if (rc == 0) {
		if (b->n)
			memcpy(p, b->p, b->n);
		*out = mkstr(p, b->n);
	}
	free(b->p);
	return rc;
}

/* -------------------------------------------------------------- expressions */

int
jinja_eval_args(struct rctx *r, const struct node *e, struct args *a)
{
	size_t i;

	a->np = a->nk = 0;
	for (i = 0; i < e->nv; i++) {
		const struct node *x = e->v[i];

		if (x->kind == E_KWARG) {
			if (a->nk == 8)
				return jinja_rfail(r, x->pos, MEDHA_EUNSUP,
				    "too many keyword arguments");
			a->kw[a->nk] = x;
			TRY(jinja_eval(r, x->a, &a->kv[a->nk++]));
		} else {
			if (a->np == 4)
				return jinja_rfail(r, x->pos, MEDHA_EUNSUP,
				    "too many arguments");
			TRY(jinja_eval(r, x, &a->pv[a->np++]));
		}
	}
	return 0;
}

static int eval1(struct rctx *, const struct node *, struct val *);

/* Operator and filter chains are deep trees too: bound them here. */
int
jinja_eval(struct rctx *r, const struct node *e, struct val *out)
{
	int rc;

	if (++r->edepth > 4 * MEDHA_JINJA_MAX_DEPTH)
		rc = jinja_rfail(r, e->pos, MEDHA_ENOSPACE,
		    "expression nested too deep");
	else
		rc = eval1(r, e, out);
	r->edepth--;
	return rc;
}

/* obj.name, obj[key], obj[a:b:c]: of an undefined obj, an error. */
static int
eval_access(struct rctx *r, const struct node *e, struct val *out)
{
	struct val a, b, sv[3];

	TRY(jinja_eval(r, e->a, &a));
	if (a.t == V_UNDEF)
		return jinja_undef_use(r, e);
	switch (e->kind) {
	case E_ATTR:
		b = mkstr(e->name, e->nlen);
		return jinja_getitem(r, &a, &b, out, e->pos);
	case E_INDEX:
		TRY(jinja_eval(r, e->b, &b));
		return jinja_getitem(r, &a, &b, out, e->pos);
	default: /* E_SLICE */
		sv[0].t = sv[1].t = sv[2].t = V_NONE;
		if (e->b != NULL)
			TRY(jinja_eval(r, e->b, &sv[0]));
		if (e->c != NULL)
			TRY(jinja_eval(r, e->c, &sv[1]));
		if (e->d != NULL)
			TRY(jinja_eval(r, e->d, &sv[2]));
		return jinja_slice(r, &a, sv, e->pos, out);
	}
}

/* x|filter(args), x is [not] test(args). */
static int
eval_filter(struct rctx *r, const struct node *e, struct val *out)
{
	struct args args;
	struct val a;
	int res;

	TRY(jinja_eval(r, e->a, &a));
	TRY(jinja_eval_args(r, e, &args));
	if (e->kind == E_FILTER)
		return jinja_filter(r, e->name, e->nlen, &a, &args, out,
		    e->pos);
	TRY(jinja_test(r, e->name, e->nlen, &a, args.np ? &args.pv[0] : NULL,
	    args.np, &res, e->pos));
	*out = mkint(V_BOOL, res != e->op);
	return 0;
}

/* not x, -x, +x. */
static int
eval_unary(struct rctx *r, const struct node *e, struct val *out)
{
	struct val a;

	TRY(jinja_eval(r, e->a, &a));
	if (e->kind == E_NOT) {
		*out = mkint(V_BOOL, !jinja_truthy(&a));
		return 0;
	}
	if (!isnum(&a))
		return jinja_rfail(r, e->pos, MEDHA_EFORMAT,
		    "bad operand type for unary %c: %s",
		    e->kind == E_NEG ? '-' : '+', jinja_tname(&a));
	if (e->kind == E_POS && a.t == V_BOOL)
		*out = mkint(V_INT, a.u.i);
	else if (e->kind == E_POS)
		*out = a;
	else
		return jinja_binop(r, '-', &(struct val){.t = V_INT}, &a, out,
		    e->pos);
	return 0;
}

/* [items], (items). */
static int
eval_list(struct rctx *r, const struct node *e, struct val *out)
{
	struct list *l = jinja_list_new(r, e->nv);
	size_t i;
	int rc = 0;

	if (l == NULL)
		return jinja_nomem(r, e->pos);
	for (i = 0; i < e->nv && rc == 0; i++)
		rc = jinja_eval(r, e->v[i], &l->v[i]);
	l->tuple = e->kind == E_TUPLE;
	out->t = V_LIST;
	out->u.l = l;
	return rc;
}

/* {key: value, ...}: e->v holds keys and values in turn. */
static int
eval_dict(struct rctx *r, const struct node *e, struct val *out)
{
	struct dict *d = jinja_dict_new(r);
	struct val a, b;
	size_t i;

	if (d == NULL)
		return jinja_nomem(r, e->pos);
	for (i = 0; i + 1 < e->nv; i += 2) {
		TRY(jinja_eval(r, e->v[i], &a));
		TRY(jinja_eval(r, e->v[i + 1], &b));
		if (a.t == V_LIST || a.t == V_DICT || a.t == V_UNDEF)
			return jinja_rfail(r, e->v[i]->pos, MEDHA_EFORMAT,
			    "unhashable dict key");
		if (jinja_dict_put(r, d, a, b) != 0)
			return jinja_nomem(r, e->pos);
	}
	out->t = V_DICT;
	out->u.d = d;
	return 0;
}

/* One node, counted against MEDHA_JINJA_MAX_STEPS. */
static int
eval1(struct rctx *r, const struct node *e, struct val *out)
{
	struct val a, b;

	if (++r->steps > MEDHA_JINJA_MAX_STEPS)
		return jinja_rfail(r, e->pos, MEDHA_ENOSPACE,
		    "render takes more than %ld steps", MEDHA_JINJA_MAX_STEPS);
	switch (e->kind) {
	case E_LIT: *out = e->lit; return 0;
	case E_NAME: *out = jinja_lookup(r, e->name, e->nlen); return 0;
	case E_ATTR:
	case E_INDEX:
	case E_SLICE: return eval_access(r, e, out);
	case E_CALL: return jinja_call(r, e, out);
	case E_FILTER:
	case E_TEST: return eval_filter(r, e, out);
	case E_NOT:
	case E_NEG:
	case E_POS: return eval_unary(r, e, out);
	case E_AND:
	case E_OR:
		TRY(jinja_eval(r, e->a, &a));
		if (jinja_truthy(&a) == (e->kind == E_OR)) {
			*out = a;
			return 0;
		}
		return jinja_eval(r, e->b, out);
	case E_COND:
		TRY(jinja_eval(r, e->a, &a));
		if (jinja_truthy(&a))
			return jinja_eval(r, e->b, out);
		if (e->c == NULL) {
			out->t = V_UNDEF;
			return 0;
		}
		return jinja_eval(r, e->c, out);
	case E_BIN:
		TRY(jinja_eval(r, e->a, &a));
		TRY(jinja_eval(r, e->b, &b));
		return jinja_binop(r, e->op, &a, &b, out, e->pos);
	case E_CONCAT:
		TRY(jinja_eval(r, e->a, &a));
		TRY(jinja_eval(r, e->b, &b));
		TRY(jinja_tostr(r, &a, &a, e->pos));
		TRY(jinja_tostr(r, &b, &b, e->pos));
		return jinja_concat(r, &a, &b, out, e->pos);
	case E_LIST:
	case E_TUPLE: return eval_list(r, e, out);
	case E_DICT: return eval_dict(r, e, out);
	default: return jinja_rfail(r, e->pos, MEDHA_EFORMAT, "bad expression");
	}
}

/* --------------------------------------------------------------- statements */

static int exec_body(struct rctx *, const struct node *, struct buf *);

static int
exec_for(struct rctx *r, const struct node *s, struct buf *out)
{
	struct val it, *items, *keep;
	struct frame f;
	struct loopst lp;
	size_t n, i, k = 0;
	int rc = 0;

	TRY(jinja_eval(r, s->a, &it));
	TRY(jinja_iterate(r, &it, &items, &n, s->a->pos));
	memset(&f, 0, sizeof(f));
	f.up = r->top;
	keep = items;
	if (s->d != NULL && n > 0) { /* for x in xs if cond */
		if ((keep = jinja_arena_array(&r->ar, n, sizeof(*keep))) ==
		    NULL)
			return jinja_nomem(r, s->pos);
		r->top = &f;
		for (i = 0; i < n && rc == 0; i++) {
			struct val c;

			f.n = 0;
			if (s->name2 == NULL)
				rc = jinja_frame_set(r, &f, s->name, s->nlen,
				         items[i])
				    ? jinja_nomem(r, s->pos)
				    : 0;
			else if (items[i].t != V_LIST || items[i].u.l->n != 2)
				rc = jinja_rfail(r, s->pos, MEDHA_EFORMAT,
				    "cannot unpack a %s into two names",
				    jinja_tname(&items[i]));
			else if (jinja_frame_set(r, &f, s->name, s->nlen,
			             items[i].u.l->v[0]) ||
			    jinja_frame_set(r, &f, s->name2, s->n2len,
			        items[i].u.l->v[1]))
				rc = jinja_nomem(r, s->pos);
			if (rc == 0 && (rc = jinja_eval(r, s->d, &c)) == 0 &&
			    jinja_truthy(&c))
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
			rc = jinja_rfail(r, s->pos, MEDHA_ENOSPACE,
			    "render takes more than %ld steps",
			    MEDHA_JINJA_MAX_STEPS);
			break;
		}
		f.n = 0; /* a fresh scope each turn, as in Jinja2 */
		lp.k = i;
		if (s->name2 == NULL) {
			if (jinja_frame_set(r, &f, s->name, s->nlen, keep[i]))
				rc = jinja_nomem(r, s->pos);
		} else if (keep[i].t != V_LIST || keep[i].u.l->n != 2)
			rc = jinja_rfail(r, s->pos, MEDHA_EFORMAT,
			    "cannot unpack a %s into two names",
			    jinja_tname(&keep[i]));
		else if (jinja_frame_set(r, &f, s->name, s->nlen,
		             keep[i].u.l->v[0]) ||
		    jinja_frame_set(r, &f, s->name2, s->n2len,
		        keep[i].u.l->v[1]))
			rc = jinja_nomem(r, s->pos);
		if (rc == 0 &&
		    jinja_frame_set(r, &f, "loop", 4,
		        (struct val){.t = V_LOOP, .u.lp = &lp}))
			rc = jinja_nomem(r, s->pos);
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
		return jinja_rfail(r, s ? s->pos : 0, MEDHA_ENOSPACE,
		    "blocks nested too deep");
	for (; s != NULL && rc == 0 && r->ctl == 0; s = s->next) {
		switch (s->kind) {
		case N_TEXT:
			rc = jinja_put(r, out, s->lit.u.s.p, s->lit.u.s.n,
			    s->pos);
			break;
		case N_OUT:
			if ((rc = jinja_eval(r, s->a, &v)) == 0)
				rc = jinja_tostr_buf(r, &v, out, 0, s->pos);
			break;
		case N_IF:
			if ((rc = jinja_eval(r, s->a, &v)) != 0)
				break;
			rc = exec_body(r, jinja_truthy(&v) ? s->b : s->c, out);
			break;
		case N_FOR: rc = exec_for(r, s, out); break;
		case N_SET:
			if ((rc = jinja_eval(r, s->a, &v)) != 0)
				break;
			if (s->name2 != NULL) {
				struct val ns =
				    jinja_lookup(r, s->name, s->nlen);

				if (ns.t != V_NS) {
					rc = jinja_rfail(r, s->pos,
					    MEDHA_EFORMAT,
					    "can only set attributes of a "
					    "namespace, not of a %s",
					    jinja_tname(&ns));
					break;
				}
				if (jinja_dict_put(r, ns.u.d,
				        mkstr(s->name2, s->n2len), v) != 0)
					rc = jinja_nomem(r, s->pos);
			} else if (jinja_frame_set(r, r->top, s->name, s->nlen,
			               v))
				rc = jinja_nomem(r, s->pos);
			break;
		case N_SETBLOCK: {
			struct buf b = {NULL, 0, 0};

			rc = exec_body(r, s->b, &b);
			rc = jinja_buf_take(r, &b, rc, &v, s->pos);
			if (rc == 0 &&
			    jinja_frame_set(r, r->top, s->name, s->nlen, v))
				rc = jinja_nomem(r, s->pos);
			break;
		}
		case N_BREAK:
		case N_CONTINUE: r->ctl = s->kind == N_BREAK ? 1 : 2; break;
		case N_BLOCK: rc = exec_body(r, s->b, out); break;
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
	if ((l = jinja_list_new(&r, n)) == NULL)
		rc = jinja_nomem(&r, 0);
	for (i = 0; i < n && rc == 0; i++) {
		struct dict *d = jinja_dict_new(&r);

		if (d == NULL ||
		    jinja_dict_put(&r, d, mkstr("role", 4),
		        mkstr(msgs[i].role, strlen(msgs[i].role))) ||
		    jinja_dict_put(&r, d, mkstr("content", 7),
		        mkstr(msgs[i].content, msgs[i].len)))
			rc = jinja_nomem(&r, 0);
		else {
			l->v[i].t = V_DICT;
			l->v[i].u.d = d;
		}
	}
	if (rc == 0 &&
	    (jinja_frame_set(&r, &root, "messages", 8,
	         (struct val){.t = V_LIST, .u.l = l}) ||
	        jinja_frame_set(&r, &root, "add_generation_prompt", 21,
	            mkint(V_BOOL, add_generation_prompt != 0)) ||
	        jinja_frame_set(&r, &root, "tools", 5, none) ||
	        jinja_frame_set(&r, &root, "documents", 9, none) ||
	        (bos_token != NULL &&
	            jinja_frame_set(&r, &root, "bos_token", 9,
	                mkstr(bos_token, strlen(bos_token)))) ||
	        (eos_token != NULL &&
	            jinja_frame_set(&r, &root, "eos_token", 9,
	                mkstr(eos_token, strlen(eos_token))))))
		rc = jinja_nomem(&r, 0);
	if (rc == 0)
		rc = exec_body(&r, j->body, &b);
	if (rc == 0)
		rc = jinja_put(&r, &b, "", 1, 0); /* the NUL */
	jinja_arena_free(&r.ar);
	if (rc != 0) {
		free(b.p);
		return rc;
	}
	*out = b.p;
	*outlen = b.n - 1;
	return 0;
}
