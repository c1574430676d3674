/*
 * jinja_parse_expr.c: expressions, with jinja2/parser.py's precedence,
 * loosest first: x if c else y; or; and; not; comparisons (a < b < c
 * is (a < b) and (b < c); in, not in); + -; ~; * / // %; **; unary
 * minus and plus; then filters and tests (|f(args), is [not] t(args)),
 * which bind tighter than unary minus and than binary operators; then
 * postfix .name, [index], [a:b:c] and calls; then literals, names,
 * (tuples), [lists] and {dicts}. Nesting is bounded.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "medha.h"
#include "template/jinja_impl.h"

static int parse_unary(struct parser *, struct node **, int);

/* A growing node array in the arena. */
static int
push(struct parser *p, struct node ***v, size_t *n, struct node *e)
{
	if ((*n & (*n - 1)) == 0) { /* 0, 1, 2, 4, ...: double */
		struct node **w =
		    jinja_arena_array(&p->j->ar, *n ? 2 * *n : 1, sizeof(*w));

		if (w == NULL)
			return jinja_pfail(p, e->pos, MEDHA_ENOMEM,
			    "out of memory");
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
			TRY(jinja_expect_op(p, ',', "',' or ')'"));
		if (is_op(p, ')'))
			break;
		if (is_op(p, '*') || is_op(p, OP2('*', '*')))
			return jinja_pfail(p, cur(p)->pos, MEDHA_EUNSUP,
			    "*args and **kwargs are not supported");
		if (cur(p)->t == T_NAME && p->tok[p->i + 1].t == T_OP &&
		    p->tok[p->i + 1].op == '=') {
			NEW(kw, E_KWARG, cur(p)->pos);
			kw->name = cur(p)->s;
			kw->nlen = cur(p)->n;
			p->i += 2;
			TRY(jinja_parse_expr(p, &kw->a));
			e = kw;
		} else
			TRY(jinja_parse_expr(p, &e));
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
				return jinja_pfail(p, cur(p)->pos,
				    MEDHA_EFORMAT, "bad slice");
			slice = 1;
			p->i++;
			continue;
		}
		if (is_op(p, ']'))
			break;
		if (part[k] != NULL)
			return jinja_pfail(p, cur(p)->pos, MEDHA_EUNSUP,
			    "expected ']' (tuple subscripts are not "
			    "supported)");
		TRY(jinja_parse_expr(p, &part[k]));
	}
	p->i++;
	if (!slice && part[0] == NULL)
		return jinja_pfail(p, pos, MEDHA_EFORMAT, "empty subscript");
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
				return jinja_pfail(p, pos, MEDHA_EFORMAT,
				    "expected a name after '.', got %s",
				    jinja_tdesc(cur(p), b, sizeof(b)));
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
				return jinja_pfail(p, cur(p)->pos,
				    MEDHA_EFORMAT,
				    "expected a filter name, got %s",
				    jinja_tdesc(cur(p), b, sizeof(b)));
			if (!jinja_filter_known(cur(p)->s, cur(p)->n))
				return jinja_pfail(p, cur(p)->pos,
				    MEDHA_EFORMAT, "no filter named '%.*s'",
				    (int)cur(p)->n, cur(p)->s);
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
			    !jinja_test_known(cur(p)->s, cur(p)->n))
				return jinja_pfail(p, cur(p)->pos,
				    MEDHA_EFORMAT, "no test named %s",
				    jinja_tdesc(cur(p), b, sizeof(b)));
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
			               !name_is(cur(p), "else") &&
			               !name_is(cur(p), "or") &&
			               !name_is(cur(p), "and")) ||
			    cur(p)->t == T_STR || cur(p)->t == T_INT ||
			    cur(p)->t == T_FLOAT || is_op(p, '[') ||
			    is_op(p, '{')) {
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
		if ((s = jinja_arena_alloc(&p->j->ar, n + 1)) == NULL)
			return jinja_pfail(p, k->pos, MEDHA_ENOMEM,
			    "out of memory");
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
			TRY(jinja_parse_expr(p, &x));
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
				TRY(jinja_parse_expr(p, &x));
				TRY(push(p, &e->v, &e->nv, x));
			}
			TRY(jinja_expect_op(p, ')', "')'"));
			break;
		}
		if (k->op == '[' || k->op == '{') {
			int close = k->op == '[' ? ']' : '}';

			NEW(e, k->op == '[' ? E_LIST : E_DICT, k->pos);
			p->i++;
			while (!is_op(p, close)) {
				if (e->nv > 0) {
					TRY(jinja_expect_op(p, ',', "','"));
					if (is_op(p, close))
						break;
				}
				TRY(jinja_parse_expr(p, &x));
				TRY(push(p, &e->v, &e->nv, x));
				if (close == '}') {
					TRY(jinja_expect_op(p, ':', "':'"));
					TRY(jinja_parse_expr(p, &x));
					TRY(push(p, &e->v, &e->nv, x));
				}
			}
			p->i++;
			break;
		}
		/* FALLTHROUGH */
	default:
		return jinja_pfail(p, k->pos, MEDHA_EFORMAT, "unexpected %s",
		    jinja_tdesc(k, b, sizeof(b)));
	}
	*out = e;
	return 0;
}

static int
parse_unary(struct parser *p, struct node **out, int with_filter)
{
	struct node *e = NULL;
	size_t pos = cur(p)->pos;

	TRY(jinja_enter(p));
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
		else if (name_is(cur(p), "not") &&
		    name_is(&p->tok[p->i + 1], "in"))
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
		TRY(jinja_enter(p));
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
		TRY(kind == E_AND ? parse_not(p, &x->b)
		                  : parse_and_or(p, &x->b, E_AND));
		e = x;
	}
	*out = e;
	return 0;
}

int
jinja_parse_or(struct parser *p, struct node **out)
{
	return parse_and_or(p, out, E_OR);
}

/* An expression: a or-expression with `x if c else y` around it. */
int
jinja_parse_expr(struct parser *p, struct node **out)
{
	struct node *e, *x;

	TRY(jinja_enter(p));
	TRY(jinja_parse_or(p, &e));
	while (name_is(cur(p), "if")) {
		NEW(x, E_COND, cur(p)->pos);
		p->i++;
		x->b = e;
		TRY(jinja_parse_or(p, &x->a));
		if (name_is(cur(p), "else")) {
			p->i++;
			TRY(jinja_parse_expr(p, &x->c));
		}
		e = x;
	}
	p->depth--;
	*out = e;
	return 0;
}
