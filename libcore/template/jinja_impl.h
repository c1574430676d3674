/*
 * jinja_impl.h: what the pieces of the chat-template engine share and
 * nothing else includes. The engine is the Jinja2 subset that chat
 * templates use (the promises are in jinja.h, the API): the source is
 * lexed into tokens (jinja_lex.c) and parsed into a tree of nodes once
 * (statements in jinja_parse.c, expressions in jinja_parse_expr.c);
 * the tree is evaluated per request (jinja_eval.c) over values
 * (jinja_value.c) printed as Python prints them (jinja_str.c), with
 * Jinja2's filters and tests (jinja_filter.c), the global functions
 * and the str and dict methods (jinja_call.c). jinja_text.c holds the
 * arena every piece allocates from and the UTF-8 and whitespace
 * helpers.
 *
 * Internal names with external linkage carry a plain jinja_ prefix;
 * the few static inline helpers here keep short names.
 */
#ifndef MEDHA_JINJA_IMPL_H
#define MEDHA_JINJA_IMPL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "template/jinja.h"

#define OP2(a, b) ((a) | (b) << 8)

/* Return x's error code, if any, from the calling function. */
#define TRY(x)                      \
	do {                        \
		int rc_ = (x);      \
		if (rc_ != 0)       \
			return rc_; \
	} while (0)

/* ---------------------------------------------------------------- arena */

struct chunk; /* jinja_text.c */

/* Memory freed all at once; limit bounds its total (bytes). */
struct arena {
	struct chunk *head;
	size_t total, limit;
	int over; /* the limit, not malloc, refused */
};

/* n bytes (16-aligned), or NULL (a->over set when the limit refused). */
void *jinja_arena_alloc(struct arena *a, size_t n);
/* n elements of size bytes, the product checked for overflow. */
void *jinja_arena_array(struct arena *a, size_t n, size_t size);
void jinja_arena_free(struct arena *a);

/* ---------------------------------------------------------------- text */

/* Code point at s (n bytes left) into *cp; its length (1 for bad bytes). */
size_t jinja_utf8_dec(const char *s, size_t n, uint32_t *cp);
/* cp as UTF-8 at o (room for 4 bytes); its length. */
size_t jinja_utf8_enc(uint32_t cp, char *o);
/* Length of the whitespace (Python's str.isspace()) at the start of s. */
size_t jinja_span_space(const char *s, size_t n);
/* Length of s without its trailing whitespace (or chars in set). */
size_t jinja_rstrip_len(const char *s, size_t n, const char *set, size_t setn);
/* Length of s's leading whitespace (or chars in set). */
size_t jinja_lstrip_len(const char *s, size_t n, const char *set, size_t setn);
/* Code points in s. */
size_t jinja_cp_count(const char *s, size_t n);
/* "line L col C: <fmt>" for byte pos of src into why; returns err. */
int jinja_vfail(const char *src, size_t pos, char *why, size_t whylen, int err,
    const char *fmt, va_list ap);

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

/* The global functions, a V_FUNC's u.i. */
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

static inline struct val
mkstr(const char *p, size_t n)
{
	struct val v;

	v.t = V_STR;
	v.u.s.p = p;
	v.u.s.n = n;
	return v;
}

static inline struct val
mkint(int t, int64_t i)
{
	struct val v;

	v.t = t;
	v.u.i = i;
	return v;
}

static inline int
isnum(const struct val *v)
{
	return v->t == V_BOOL || v->t == V_INT || v->t == V_FLOAT;
}

static inline double
numf(const struct val *v)
{
	return v->t == V_FLOAT ? v->u.f : (double)v->u.i;
}

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
	int op;     /* E_BIN operator; E_TEST negated */
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

/* The lexer's and the parser's state over one template. */
struct parser {
	struct medha_jinja *j;
	struct tok *tok; /* (ntok) the tokens, malloc'd */
	size_t ntok, cap, i;
	int depth;
	int loops; /* for loops around the statement being parsed */
	char *why;
	size_t whylen;
};

/* A parse error at byte pos into p->why; returns err. */
int jinja_pfail(struct parser *p, size_t pos, int err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The whole source into p->tok, whitespace control applied to text. */
int jinja_lex(struct parser *p);

/* ---------------------------------------------------------------- parser */

/* The token being parsed. */
static inline struct tok *
cur(struct parser *p)
{
	return &p->tok[p->i];
}

static inline int
is_op(struct parser *p, int op)
{
	return cur(p)->t == T_OP && cur(p)->op == op;
}

/* Whether k is the name s. */
static inline int
name_is(const struct tok *k, const char *s)
{
	return k->t == T_NAME && k->n == strlen(s) &&
	    memcmp(k->s, s, k->n) == 0;
}

/* jinja_parse.c: token helpers, statements */

/* k described for a message ("'name'", "'+ '", "end of template"). */
const char *jinja_tdesc(const struct tok *k, char *buf, size_t len);
/* Skip the operator op, else fail with "expected <what>". */
int jinja_expect_op(struct parser *p, int op, const char *what);
/* A zeroed node in the template's arena; NULL when out of memory. */
struct node *jinja_node(struct parser *p, int kind, size_t pos);
/* One nesting level deeper (p->depth), within MEDHA_JINJA_MAX_DEPTH. */
int jinja_enter(struct parser *p);

/* e = a new node, or return MEDHA_ENOMEM from a parsing function of p. */
#define NEW(e, kind, pos)                                          \
	do {                                                       \
		if (((e) = jinja_node(p, (kind), (pos))) == NULL)  \
			return jinja_pfail(p, (pos), MEDHA_ENOMEM, \
			    "out of memory");                      \
	} while (0)

/* jinja_parse_expr.c: an expression into *out. */
int jinja_parse_expr(struct parser *p, struct node **out);
/* An expression without its `if ... else ...` (for's iterable and filter). */
int jinja_parse_or(struct parser *p, struct node **out);

/* ---------------------------------------------------------------- render */

/* A growing output, malloc'd. */
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

/* One render: everything it makes lives in ar. */
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

/* A call's arguments: positional into pv, keywords matched by name. */
struct args {
	struct val pv[4];
	size_t np;
	const struct node *kw[8];
	struct val kv[8];
	size_t nk;
};

/* jinja_eval.c: errors, output, evaluation */

/* A render error at byte pos into r->why; returns err. */
int jinja_rfail(struct rctx *r, size_t pos, int err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Out of memory, or over the render's memory limit (MEDHA_ENOSPACE). */
int jinja_nomem(struct rctx *r, size_t pos);
/* Append n bytes to b, within MEDHA_JINJA_MAX_OUT. */
int
jinja_put(struct rctx *r, struct buf *b, const char *s, size_t n, size_t pos);
/* b's bytes as a string in the arena (unless rc != 0); frees b. */
int jinja_buf_take(struct rctx *r, struct buf *b, int rc, struct val *out,
    size_t pos);
int jinja_eval(struct rctx *r, const struct node *e, struct val *out);
/* Evaluate e's arguments (e->v) into a. */
int jinja_eval_args(struct rctx *r, const struct node *e, struct args *a);

/* jinja_value.c: values, scopes, access and operators */

const char *jinja_tname(const struct val *v);
int jinja_truthy(const struct val *v);
/* ==, deeply (to a bounded depth). */
int jinja_equal(const struct val *a, const struct val *b);
struct val *jinja_dict_get(struct dict *d, const struct val *k);
/* Set d[k] = v; -1 when out of memory. */
int jinja_dict_put(struct rctx *r, struct dict *d, struct val k, struct val v);
struct dict *jinja_dict_new(struct rctx *r);
struct list *jinja_list_new(struct rctx *r, size_t n);
/* A list of copies of the n items. */
int jinja_mklist(struct rctx *r, const struct val *items, size_t n,
    struct val *out, size_t pos);
/* Set a name in frame f; -1 when out of memory. */
int jinja_frame_set(struct rctx *r, struct frame *f, const char *name, size_t n,
    struct val v);
/* A name from the innermost scope out, then the global functions. */
struct val jinja_lookup(struct rctx *r, const char *name, size_t n);
/* The items a for loop or a filter walks: list items, chars, keys. */
int jinja_iterate(struct rctx *r, const struct val *v, struct val **items,
    size_t *n, size_t pos);
/* The error for using the undefined value that e gave. */
int jinja_undef_use(struct rctx *r, const struct node *e);
int jinja_getitem(struct rctx *r, const struct val *o, const struct val *key,
    struct val *out, size_t pos);
int jinja_slice(struct rctx *r, const struct val *o, const struct val *sv,
    size_t pos, struct val *out);
/* *c: <0, 0, >0 as a orders before, with, after b. */
int jinja_cmp_order(struct rctx *r, const struct val *a, const struct val *b,
    int *c, size_t pos);
int jinja_contains(struct rctx *r, const struct val *hay, const struct val *x,
    int *found, size_t pos);
/* Two strings joined, in the arena. */
int jinja_concat(struct rctx *r, const struct val *a, const struct val *b,
    struct val *out, size_t pos);
/* a op b, op an operator token (OP2 for two characters; 'i' in, 'n' not in). */
int jinja_binop(struct rctx *r, int op, const struct val *a,
    const struct val *b, struct val *out, size_t pos);

/* jinja_str.c: values as text */

/* Python's json.dumps(v, ensure_ascii=False, indent, separators). */
struct jsonfmt {
	const char *indent, *isep, *ksep;
	size_t indn;
	int sort;
};

/* str(v) (repr: repr(v)) appended to b. */
int jinja_tostr_buf(struct rctx *r, const struct val *v, struct buf *b,
    int repr, size_t pos);
/* str(v) as a string value (in the arena unless it is one already). */
int
jinja_tostr(struct rctx *r, const struct val *v, struct val *out, size_t pos);
int jinja_tojson(struct rctx *r, const struct val *v, struct buf *b,
    const struct jsonfmt *f, int level, size_t pos);

/* jinja_filter.c: filters, tests and the helpers methods share */

/* Whether Jinja2 has a filter (test) of that name: parse-time checks. */
int jinja_filter_known(const char *s, size_t n);
int jinja_test_known(const char *s, size_t n);
/* The filter named fs (fn bytes) applied to in. */
int jinja_filter(struct rctx *r, const char *fs, size_t fn,
    const struct val *in, struct args *a, struct val *out, size_t pos);
/* *res: whether v passes the test named ts (argument x, nx given). */
int jinja_test(struct rctx *r, const char *ts, size_t tn, const struct val *v,
    const struct val *x, size_t nx, int *res, size_t pos);
/* Argument name, given as a keyword; NULL if not. */
const struct val *jinja_kwarg(const struct args *a, const char *name);
/* Argument k (positional) or name (keyword); NULL if not given. */
const struct val *jinja_arg(const struct args *a, size_t k, const char *name);
/* MEDHA_EFORMAT ("what: expected a string") unless v is a string. */
int jinja_want_str(struct rctx *r, const struct val *v, const char *what,
    size_t pos);
/* ASCII case mapping: mode 'U'pper, 'L'ower, 'T'itle, 'C'apitalize. */
int jinja_recase(struct rctx *r, const struct val *in, int mode,
    struct val *out, size_t pos);
/* s stripped of whitespace (or chars) on the left (lr 1), right (2). */
int jinja_strip(struct rctx *r, const struct val *s, const struct val *chars,
    int lr, struct val *out, size_t pos);
/* Python's str.replace(old, new[, count]). */
int jinja_replace(struct rctx *r, const struct val *s, const struct val *old,
    const struct val *new, const struct val *count, struct val *out,
    size_t pos);

/* jinja_call.c: e(...) (a global function, or a method of a str or dict). */
int jinja_call(struct rctx *r, const struct node *e, struct val *out);

#endif
