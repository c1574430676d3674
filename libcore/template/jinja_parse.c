/*
 * jinja_parse.c: tokens into a tree of nodes, once per template, as
 * jinja2/parser.py builds it. This file holds the statements ({% if %}
 * with elif and else, {% for %} with its filter and else, {% set %}
 * and its block form, {% break %} and {% continue %} inside loops,
 * {% generation %}), the token helpers the expression parser
 * (jinja_parse_expr.c) shares, and the API's medha_jinja_parse() and
 * medha_jinja_free(). What Jinja2 would refuse at compile time fails
 * here with a line and column: unknown tags, filters and tests; so do
 * the features this renderer lacks (macros, includes, ...). Nesting
 * is bounded.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "medha.h"
#include "template/jinja_impl.h"

/* ---------------------------------------------------------------- tokens */

const char *
jinja_tdesc(const struct tok *k, char *buf, size_t len)
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

int
jinja_expect_op(struct parser *p, int op, const char *what)
{
	char b[64];

	if (!is_op(p, op))
		return jinja_pfail(p, cur(p)->pos, MEDHA_EFORMAT,
		    "expected %s, got %s", what,
		    jinja_tdesc(cur(p), b, sizeof(b)));
	p->i++;
	return 0;
}

struct node *
jinja_node(struct parser *p, int kind, size_t pos)
{
	struct node *e = jinja_arena_alloc(&p->j->ar, sizeof(*e));

	if (e != NULL) {
		memset(e, 0, sizeof(*e));
		e->kind = kind;
		e->pos = pos;
	}
	return e;
}

/* One level deeper, within MEDHA_JINJA_MAX_DEPTH. */
int
jinja_enter(struct parser *p)
{
	if (++p->depth > MEDHA_JINJA_MAX_DEPTH)
		return jinja_pfail(p, cur(p)->pos, MEDHA_ENOSPACE,
		    "template nested too deep");
	return 0;
}

/* --------------------------------------------------------------- statements */

static int
expect_bend(struct parser *p)
{
	char b[64];

	if (cur(p)->t != T_BEND)
		return jinja_pfail(p, cur(p)->pos, MEDHA_EFORMAT,
		    "expected '%%}', got %s",
		    jinja_tdesc(cur(p), b, sizeof(b)));
	p->i++;
	return 0;
}

/*
 * Statements up to a {% tag %} named in ends (NULL-terminated), or to
 * the end of the template when ends is NULL; *end is then the index of
 * the tag's name.
 */
static int parse_body(struct parser *, struct node **, const char **, size_t *);

static int
parse_for(struct parser *p, struct node *s)
{
	static const char *ends[] = {"else", "endfor", NULL};
	char b[64];
	size_t at;

	if (cur(p)->t != T_NAME)
		return jinja_pfail(p, cur(p)->pos, MEDHA_EFORMAT,
		    "expected a loop variable, got %s",
		    jinja_tdesc(cur(p), b, sizeof(b)));
	s->name = cur(p)->s;
	s->nlen = cur(p)->n;
	p->i++;
	if (is_op(p, ',')) {
		p->i++;
		if (cur(p)->t != T_NAME)
			return jinja_pfail(p, cur(p)->pos, MEDHA_EUNSUP,
			    "only one or two loop variables are supported");
		s->name2 = cur(p)->s;
		s->n2len = cur(p)->n;
		p->i++;
	}
	if (!name_is(cur(p), "in"))
		return jinja_pfail(p, cur(p)->pos, MEDHA_EFORMAT,
		    "expected 'in', got %s", jinja_tdesc(cur(p), b, sizeof(b)));
	p->i++;
	TRY(jinja_parse_or(p, &s->a));
	if (name_is(cur(p), "if")) {
		p->i++;
		TRY(jinja_parse_or(p, &s->d));
	}
	if (name_is(cur(p), "recursive"))
		return jinja_pfail(p, cur(p)->pos, MEDHA_EUNSUP,
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

	TRY(jinja_parse_expr(p, &s->a));
	TRY(expect_bend(p));
	TRY(parse_body(p, &s->b, ends, &at));
	if (name_is(&p->tok[at], "elif")) {
		NEW(s->c, N_IF, p->tok[at].pos);
		TRY(jinja_enter(p));
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
		return jinja_pfail(p, cur(p)->pos, MEDHA_EFORMAT,
		    "expected a name to set, got %s",
		    jinja_tdesc(cur(p), b, sizeof(b)));
	s->name = cur(p)->s;
	s->nlen = cur(p)->n;
	p->i++;
	if (is_op(p, '.')) {
		p->i++;
		if (cur(p)->t != T_NAME)
			return jinja_pfail(p, cur(p)->pos, MEDHA_EFORMAT,
			    "expected an attribute name");
		s->name2 = cur(p)->s;
		s->n2len = cur(p)->n;
		p->i++;
	}
	if (is_op(p, ','))
		return jinja_pfail(p, cur(p)->pos, MEDHA_EUNSUP,
		    "setting several names at once is not supported");
	if (cur(p)->t == T_BEND && s->name2 == NULL) {
		s->kind = N_SETBLOCK;
		p->i++;
		TRY(parse_body(p, &s->b, ends, &at));
		return expect_bend(p);
	}
	TRY(jinja_expect_op(p, '=', "'='"));
	TRY(jinja_parse_expr(p, &s->a));
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
parse_body(struct parser *p, struct node **out, const char **ends, size_t *end)
{
	struct node *head = NULL, **tail = &head, *s;
	size_t open = p->i ? p->tok[p->i - 1].pos : 0;
	char b[64];

	TRY(jinja_enter(p));
	for (;;) {
		struct tok *k = cur(p);
		const char **e;

		if (k->t == T_EOF) {
			if (ends == NULL)
				break;
			return jinja_pfail(p, open, MEDHA_EFORMAT,
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
			TRY(jinja_parse_expr(p, &s->a));
			if (cur(p)->t != T_VEND)
				return jinja_pfail(p, cur(p)->pos,
				    MEDHA_EFORMAT, "expected '}}', got %s",
				    jinja_tdesc(cur(p), b, sizeof(b)));
			p->i++;
		} else {
			p->i++; /* T_BBEGIN */
			k = cur(p);
			if (k->t != T_NAME)
				return jinja_pfail(p, k->pos, MEDHA_EFORMAT,
				    "expected a tag name, got %s",
				    jinja_tdesc(k, b, sizeof(b)));
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
			               name_is(k, "continue")) &&
			    p->loops > 0) {
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
				return jinja_pfail(p, k->pos, MEDHA_EUNSUP,
				    "{%% %.*s %%} is not supported", (int)k->n,
				    k->s);
			else
				return jinja_pfail(p, k->pos, MEDHA_EFORMAT,
				    "unexpected tag %s",
				    jinja_tdesc(k, b, sizeof(b)));
		}
		*tail = s;
		tail = &s->next;
	}
	*out = head;
	p->depth--;
	return 0;
}

/* ---------------------------------------------------------------- API */

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
	if ((rc = jinja_lex(&p)) == 0)
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
	jinja_arena_free(&j->ar);
	free(j->src);
	free(j);
}
