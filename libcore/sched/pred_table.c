/*
 * pred_table.c: measured operator times for the runtime predictor: the
 * profile CSV reader (man/medha-profile.5 is normative) and the
 * interpolating lookup that medha_pred_* use before the analytic model.
 *
 * At load every operator becomes a rectangular grid: the union of its
 * token counts by its distinct kv values. Each measured kv row is first
 * carried onto the whole token grid by its own 1-D rule (piecewise linear,
 * linear towards (0, 0) below its first point, linear extrapolation past
 * its last two; for attn_prefill, whose time grows with the square of the
 * chunk, the time per token interpolated and extrapolated instead where
 * it rises: seg(), optab_finish), so interpolating the grid gives the same
 * values as interpolating the row. The grid is then made non-decreasing along both
 * axes by running maxima (measured noise must not make a bigger chunk look
 * cheaper to the scheduler's binary search), and for extrapolating past
 * the last kv row a per-token slope is kept, itself non-decreasing.
 * attn_decode, measured per sequence, is then re-gridded as rows of
 * sequences over total kv (decode_regrid), so that it is monotone in the
 * sequence count at a fixed total too. A lookup is two binary searches
 * and a few multiplications, and allocates nothing.
 */
#include "sched/pred.h"

#include <errno.h>
#include <float.h>
#include <stdarg.h>
#include <string.h>

#define ROWS_MAX (1 << 20)    /* data lines in one file */
#define CELLS_MAX (1 << 22)   /* tokens x kv grid of one operator */
#define COUNT_MAX (1LL << 40) /* largest tokens or kv value */

/* One operator's grid. */
struct optab {
	int nt, nk;        /* token points, kv rows (1 for 1-D operators) */
	double *t;         /* (nt) token counts, ascending */
	double *kv;        /* (nk) kv values, ascending; {0} for 1-D */
	double *v;         /* (nk, nt) seconds, non-decreasing both ways */
	double *slope;     /* (nt) seconds per kv past the last row */
	double *tail;      /* (nk) seconds per token past the last t, by row */
	double *curv;      /* (nk) and per token squared (attn_prefill) */
	double slope_tail; /* the same for the slope row */
	int quad;          /* attn_prefill: time per token interpolated */
};

struct medha_table {
	struct optab op[MEDHA_OP_COUNT];
};

/* One data line as read. */
struct point {
	int op;
	double tok, kv, us;
	long line;
};

static int
is_2d(int op)
{
	return op == MEDHA_OP_ATTN_PREFILL || op == MEDHA_OP_ATTN_DECODE ||
	    op == MEDHA_OP_KVP_MERGE;
}

/* ---------------------------------------------------------------- */
/* Interpolation                                                      */

/* Where q falls on an ascending grid x of n >= 2 points. */
struct pos {
	int i;    /* segment [x[i], x[i+1]], or the end used */
	int mode; /* 0 inside, 1 below x[0], 2 past x[n-1] */
	double w; /* inside: fraction; below: q / x[0]; past: q - x[n-1] */
};

static struct pos
locate(const double *x, int n, double q)
{
	struct pos ps;
	int lo = 0, hi = n - 1, mid;

	if (!(q > 0))
		q = 0;
	if (q <= x[0]) {
		ps.i = 0;
		ps.mode = 1;
		ps.w = x[0] > 0 ? q / x[0] : 1;
		return ps;
	}
	if (q >= x[n - 1]) {
		ps.i = n - 2;
		ps.mode = 2;
		ps.w = q - x[n - 1];
		return ps;
	}
	/* largest lo with x[lo] <= q; then q < x[lo + 1] */
	while (hi - lo > 1) {
		mid = lo + (hi - lo) / 2;
		if (x[mid] <= q)
			lo = mid;
		else
			hi = mid;
	}
	ps.i = lo;
	ps.mode = 0;
	ps.w = (q - x[lo]) / (x[lo + 1] - x[lo]);
	return ps;
}

/*
 * Between (x0, y0) and (x1, y1), at q: linear; with quad (attn_prefill,
 * whose time grows with the square of the chunk) the time per token is
 * linear in q instead where it rises from x0 to x1, so that times of the
 * form q (a + b q) come back exactly. Both are exact at x0 and x1 and
 * non-decreasing in q for y0 <= y1.
 */
static double
seg(double x0, double y0, double x1, double y1, double q, int quad)
{
	double g0, g1;

	if (quad && x0 > 0 && (g1 = y1 / x1) >= (g0 = y0 / x0))
		return q * (g0 + (q - x0) / (x1 - x0) * (g1 - g0));
	return y0 + (q - x0) / (x1 - x0) * (y1 - y0);
}

/*
 * Value of the row y over the token grid x at ps; past the end it goes
 * on with slope tail and curvature curv (0 but for attn_prefill). For a
 * non-decreasing y and tail, curv >= 0 every branch is non-decreasing in
 * q, also under rounding, and the branches meet without a step down.
 */
static double
row_at(const double *x, const double *y, struct pos ps, double tail,
    double curv, int quad)
{
	double v;
	int i = ps.i;

	switch (ps.mode) {
	case 1: v = y[0] * ps.w; return v < y[0] ? v : y[0];
	case 2: return y[i + 1] + ps.w * tail + ps.w * ps.w * curv;
	}
	if (quad)
		v = seg(x[i], y[i], x[i + 1], y[i + 1],
		    x[i] + ps.w * (x[i + 1] - x[i]), 1);
	else
		v = y[i] + ps.w * (y[i + 1] - y[i]);
	v = v > y[i] ? v : y[i];
	return v < y[i + 1] ? v : y[i + 1];
}

/* Value of grid o at (t, kv): within rows in t, then across rows in kv. */
static double
grid_at(const struct optab *o, double t, double kv)
{
	struct pos pt, pk;
	double a, b, lo, hi, v, w;

	pt = locate(o->t, o->nt, t);
	if (o->nk == 1)
		return row_at(o->t, o->v, pt, o->tail[0], o->curv[0], o->quad);
	pk = locate(o->kv, o->nk, kv);
	switch (pk.mode) {
	case 1:
		/* below the first row: that row */
		return row_at(o->t, o->v, pt, o->tail[0], o->curv[0], o->quad);
	case 2:
		a = row_at(o->t, o->v + (size_t)(o->nk - 1) * o->nt, pt,
		    o->tail[o->nk - 1], o->curv[o->nk - 1], o->quad);
		return a +
		    pk.w * row_at(o->t, o->slope, pt, o->slope_tail, 0, 0);
	}
	a = row_at(o->t, o->v + (size_t)pk.i * o->nt, pt, o->tail[pk.i],
	    o->curv[pk.i], o->quad);
	b = row_at(o->t, o->v + (size_t)(pk.i + 1) * o->nt, pt,
	    o->tail[pk.i + 1], o->curv[pk.i + 1], o->quad);
	w = pk.w;
	/* this form is monotone in t under rounding; the clamp keeps kv */
	v = (1 - w) * a + w * b;
	lo = a < b ? a : b;
	hi = a < b ? b : a;
	return v < lo ? lo : v > hi ? hi : v;
}

int
medha_table_lookup(const struct medha_table *tab, int op, double tokens,
    double kv, double *sec)
{
	const struct optab *o;

	if (tab == NULL || op < 0 || op >= MEDHA_OP_COUNT)
		return 0;
	o = &tab->op[op];
	if (o->nt == 0)
		return 0;
	/* attn_decode is kept as rows of sequences over total kv */
	if (op == MEDHA_OP_ATTN_DECODE)
		*sec = grid_at(o, kv, tokens);
	else
		*sec = grid_at(o, tokens, kv);
	return 1;
}

int
medha_table_extent(const struct medha_table *tab, int op, double *tokens,
    double *kv)
{
	const struct optab *o;

	if (tab == NULL || op < 0 || op >= MEDHA_OP_COUNT ||
	    tab->op[op].nt == 0)
		return 0;
	o = &tab->op[op];
	/* attn_decode's grid is kv over sequences (see lookup) */
	*tokens = op == MEDHA_OP_ATTN_DECODE ? o->kv[o->nk - 1] : o->t[o->nt - 1];
	*kv = op == MEDHA_OP_ATTN_DECODE ? o->t[o->nt - 1] : o->kv[o->nk - 1];
	return 1;
}

int
medha_table_row(const struct medha_table *tab, int op, const double **x,
    const double **y, int *n)
{
	if (tab == NULL || op < 0 || op >= MEDHA_OP_COUNT || is_2d(op) ||
	    tab->op[op].nt == 0)
		return 0;
	*x = tab->op[op].t;
	*y = tab->op[op].v;
	*n = tab->op[op].nt;
	return 1;
}

/* ---------------------------------------------------------------- */
/* Building the grids                                                 */

static int
point_cmp(const void *a, const void *b)
{
	const struct point *x = a, *y = b;

	if (x->op != y->op)
		return x->op < y->op ? -1 : 1;
	if (x->kv != y->kv)
		return x->kv < y->kv ? -1 : 1;
	if (x->tok != y->tok)
		return x->tok < y->tok ? -1 : 1;
	return (x->line > y->line) - (x->line < y->line);
}

static int
double_cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static void
optab_free(struct optab *o)
{
	free(o->t);
	free(o->kv);
	free(o->v);
	free(o->slope);
	free(o->tail);
	free(o->curv);
	memset(o, 0, sizeof(*o));
}

/*
 * Value of one measured row (n >= 2 points sorted by tokens, times in
 * microseconds) at q, by the 1-D rule, in seconds; exact at its points.
 */
static double
raw_row_at(const struct point *r, int n, double q, int quad)
{
	int lo = 0, hi = n - 1, mid;
	double s, v;

	if (q <= r[0].tok)
		return r[0].tok > 0 ? r[0].us * (q / r[0].tok) * 1e-6
		                    : r[0].us * 1e-6;
	if (q >= r[n - 1].tok) {
		const struct point *a = &r[n - 2], *b = &r[n - 1];
		if (quad && a->us <= b->us && a->us / a->tok <= b->us / b->tok)
			return seg(a->tok, a->us, b->tok, b->us, q, 1) * 1e-6;
		s = (b->us - a->us) / (b->tok - a->tok);
		return (b->us + (q - b->tok) * (s > 0 ? s : 0)) * 1e-6;
	}
	while (hi - lo > 1) {
		mid = lo + (hi - lo) / 2;
		if (r[mid].tok <= q)
			lo = mid;
		else
			hi = mid;
	}
	if (q == r[lo].tok)
		return r[lo].us * 1e-6;
	v = seg(r[lo].tok, r[lo].us, r[lo + 1].tok, r[lo + 1].us, q,
	    quad && r[lo].us <= r[lo + 1].us);
	return v * 1e-6;
}

/* Room for the rows and slope of o, whose token grid o->t is set. */
static int
optab_alloc(struct optab *o, int nt, int nk, const char *name, char *why,
    size_t whylen)
{
	if ((long long)nt * nk > CELLS_MAX)
		return medha_why(why, whylen, MEDHA_EFORMAT,
		    "%s: %d by %d values is more than %d "
		    "grid cells",
		    name, nt, nk, CELLS_MAX);
	o->nt = nt;
	o->nk = nk;
	o->kv = medha_calloc((size_t)nk, sizeof(double));
	o->v = medha_calloc((size_t)nk * nt, sizeof(double));
	o->slope = medha_calloc((size_t)nt, sizeof(double));
	o->tail = medha_calloc((size_t)nk, sizeof(double));
	o->curv = medha_calloc((size_t)nk, sizeof(double));
	if (o->kv == NULL || o->v == NULL || o->slope == NULL ||
	    o->tail == NULL || o->curv == NULL)
		return MEDHA_ENOMEM;
	return 0;
}

/*
 * Running maxima along t in each row, then along kv. Past the last t
 * each row goes on along its last two points, with the slopes made
 * non-decreasing over the rows so that rows cannot cross out there; with
 * quad (attn_prefill, whose time grows with the square of the chunk), a
 * row whose time per token rises between its last two points goes on
 * with its time per token along that line instead (a quadratic, its
 * curvature also non-decreasing over the rows). Past the last row the
 * grid goes on along the last two rows, with a slope per t that is made
 * non-decreasing in t so that it stays monotone in t.
 */
static void
optab_finish(struct optab *o, int quad)
{
	int j, k, nt = o->nt, nk = o->nk;
	double *c, s, dt = o->t[nt - 1] - o->t[nt - 2];
	const double x0 = o->t[nt - 2], x1 = o->t[nt - 1];

	for (j = 0; j < nk; j++)
		for (k = 1; k < nt; k++) {
			c = &o->v[(size_t)j * nt + k];
			if (c[0] < c[-1])
				c[0] = c[-1];
		}
	for (j = 1; j < nk; j++)
		for (k = 0; k < nt; k++) {
			c = &o->v[(size_t)j * nt + k];
			if (c[0] < c[-nt])
				c[0] = c[-nt];
		}
	for (j = 0; j < nk; j++) {
		double g0, g1, gs = 0;
		c = &o->v[(size_t)j * nt + nt - 1];
		s = (c[0] - c[-1]) / dt;
		if (quad && x0 > 0) {
			/* t(x1 + d) = x * g(x), g linear through (x0, g0)
			   and (x1, g1): c1 + d (g1 + x1 gs) + d^2 gs */
			g0 = c[-1] / x0;
			g1 = c[0] / x1;
			gs = (g1 - g0) / dt;
			if (gs > 0)
				s = g1 + x1 * gs;
			else
				gs = 0;
		}
		o->tail[j] = j > 0 && s < o->tail[j - 1] ? o->tail[j - 1] : s;
		o->curv[j] = j > 0 && gs < o->curv[j - 1] ? o->curv[j - 1] : gs;
	}
	if (nk < 2)
		return;
	for (k = 0; k < nt; k++) {
		s = (o->v[(size_t)(nk - 1) * nt + k] -
		        o->v[(size_t)(nk - 2) * nt + k]) /
		    (o->kv[nk - 1] - o->kv[nk - 2]);
		o->slope[k] =
		    k > 0 && s < o->slope[k - 1] ? o->slope[k - 1] : s;
	}
	o->slope_tail = (o->slope[nt - 1] - o->slope[nt - 2]) / dt;
}

/*
 * attn_decode is measured as rows of kv per sequence over n sequences;
 * it is asked for at (n, K) with K the total. Re-grid it as rows of n
 * over K, reading each measured n_i at kv = K / n_i, on the K values
 * {0} and n_i * kv_j (where each such function bends, so the values in
 * between are reproduced). Across n the rows are then interpolated at
 * fixed K, and running maxima make the time non-decreasing in n as well
 * as in K: more sequences sharing the same cache never cost less.
 */
static int
decode_regrid(struct optab *o, const char *name, char *why, size_t whylen)
{
	struct optab g = *o, d;
	int i, j, k, nK;
	double *K;

	memset(&d, 0, sizeof(d));
	K = medha_calloc(1 + (size_t)g.nt * g.nk, sizeof(double));
	if (K == NULL)
		return MEDHA_ENOMEM;
	K[0] = 0;
	for (i = 0; i < g.nt; i++)
		for (j = 0; j < g.nk; j++)
			K[1 + (size_t)i * g.nk + j] = g.t[i] * g.kv[j];
	qsort(K, 1 + (size_t)g.nt * g.nk, sizeof(double), double_cmp);
	for (nK = 1, k = 1; k < 1 + g.nt * g.nk; k++)
		if (K[k] != K[nK - 1])
			K[nK++] = K[k];
	d.t = K;
	if ((i = optab_alloc(&d, nK, g.nt, name, why, whylen)) != 0) {
		optab_free(&d);
		return i;
	}
	for (i = 0; i < g.nt; i++) {
		d.kv[i] = g.t[i];
		for (k = 0; k < nK; k++)
			d.v[(size_t)i * nK + k] =
			    grid_at(&g, g.t[i], K[k] / g.t[i]);
	}
	optab_finish(&d, 0);
	optab_free(o);
	*o = d;
	return 0;
}

/* The grid of operator op from its n points, sorted by (kv, tokens). */
static int
build_op(struct optab *o, int op, const struct point *p, int n, char *why,
    size_t whylen)
{
	const char *name = medha_op_name(op);
	int i, j, k, nk, start, nt, rc;

	for (i = 1; i < n; i++)
		if (p[i].kv == p[i - 1].kv && p[i].tok == p[i - 1].tok)
			return medha_why(why, whylen, MEDHA_EFORMAT,
			    "line %ld: duplicate point %s "
			    "tokens=%.0f kv=%.0f (first on line %ld)",
			    p[i].line, name, p[i].tok, p[i].kv, p[i - 1].line);
	for (nk = 1, i = 1; i < n; i++)
		nk += p[i].kv != p[i - 1].kv;
	if (is_2d(op) && nk < 2)
		return medha_why(why, whylen, MEDHA_EFORMAT,
		    "line %ld: %s has 1 kv value (%.0f), "
		    "at least 2 are needed",
		    p[0].line, name, p[0].kv);
	for (start = 0, i = 1; i <= n; i++) {
		if (i < n && p[i].kv == p[start].kv)
			continue;
		if (i - start < 2)
			return medha_why(why, whylen, MEDHA_EFORMAT,
			    "line %ld: %s kv=%.0f has 1 "
			    "point, at least 2 are needed",
			    p[start].line, name, p[start].kv);
		start = i;
	}
	if ((o->t = medha_calloc((size_t)n, sizeof(double))) == NULL)
		return MEDHA_ENOMEM;
	for (i = 0; i < n; i++)
		o->t[i] = p[i].tok;
	qsort(o->t, (size_t)n, sizeof(double), double_cmp);
	for (nt = 1, i = 1; i < n; i++)
		if (o->t[i] != o->t[nt - 1])
			o->t[nt++] = o->t[i];
	if ((rc = optab_alloc(o, nt, nk, name, why, whylen)) != 0)
		return rc;
	for (j = 0, start = 0, i = 1; i <= n; i++) {
		if (i < n && p[i].kv == p[start].kv)
			continue;
		o->kv[j] = is_2d(op) ? p[start].kv : 0;
		for (k = 0; k < nt; k++)
			o->v[(size_t)j * nt + k] = raw_row_at(p + start,
			    i - start, o->t[k], op == MEDHA_OP_ATTN_PREFILL);
		j++;
		start = i;
	}
	o->quad = op == MEDHA_OP_ATTN_PREFILL;
	optab_finish(o, o->quad);
	if (op == MEDHA_OP_ATTN_DECODE)
		return decode_regrid(o, name, why, whylen);
	return 0;
}

/* ---------------------------------------------------------------- */
/* Reading the CSV                                                    */

/* Split line in place at commas into at most 4 trimmed fields. */
static int
split(char *line, char **f)
{
	char *s = line, *e, *t;
	int n = 0;

	for (;;) {
		while (*s == ' ' || *s == '\t')
			s++;
		if (n < 4)
			f[n] = s;
		n++;
		if ((e = strchr(s, ',')) != NULL)
			*e = '\0';
		for (t = s + strlen(s);
		     t > s && (t[-1] == ' ' || t[-1] == '\t'); t--)
			t[-1] = '\0';
		if (e == NULL)
			return n;
		s = e + 1;
	}
}

/* One data line into pt. */
static int
parse_row(char *line, long lno, struct point *pt, char *why, size_t whylen)
{
	static const char *what[] = {"op", "tokens", "kv", "time_us"};
	char *f[4];
	int64_t iv[2];
	double us;
	int n, i, rc;

	if ((n = split(line, f)) != 4)
		return medha_why(why, whylen, MEDHA_EFORMAT,
		    "line %ld: %d fields, expected 4 "
		    "(op,tokens,kv,time_us)",
		    lno, n);
	if ((pt->op = medha_op_find(f[0])) < 0)
		return medha_why(why, whylen, MEDHA_EFORMAT,
		    "line %ld: unknown op \"%.40s\"", lno, f[0]);
	for (i = 0; i < 2; i++) {
		rc = medha_parse_i64(f[i + 1], 1 - i, COUNT_MAX, &iv[i]);
		if (rc == MEDHA_ERANGE)
			return medha_why(why, whylen, MEDHA_EFORMAT,
			    "line %ld: %s \"%.40s\" out "
			    "of range [%d, %lld]",
			    lno, what[i + 1], f[i + 1], 1 - i, COUNT_MAX);
		if (rc != 0)
			return medha_why(why, whylen, MEDHA_EFORMAT,
			    "line %ld: %s \"%.40s\" is "
			    "not a whole number",
			    lno, what[i + 1], f[i + 1]);
	}
	rc = medha_parse_f64(f[3], -DBL_MAX, DBL_MAX, &us);
	if (rc != 0)
		return medha_why(why, whylen, MEDHA_EFORMAT,
		    "line %ld: time_us \"%.40s\" is not "
		    "a finite number",
		    lno, f[3]);
	if (us < 0)
		return medha_why(why, whylen, MEDHA_EFORMAT,
		    "line %ld: negative time %g", lno, us);
	if (!is_2d(pt->op) && iv[1] != 0)
		return medha_why(why, whylen, MEDHA_EFORMAT,
		    "line %ld: kv must be 0 for %s", lno, f[0]);
	pt->tok = (double)iv[0];
	pt->kv = (double)iv[1];
	pt->us = us;
	pt->line = lno;
	return 0;
}

static void
table_free(struct medha_table *t)
{
	int i;

	if (t == NULL)
		return;
	for (i = 0; i < MEDHA_OP_COUNT; i++)
		optab_free(&t->op[i]);
	free(t);
}

/* All lines of f into *pts (the caller's, to free). */
static int
read_points(FILE *f, struct point **pts, int *npts, char *why, size_t whylen)
{
	char *line = NULL;
	size_t cap = 0, len;
	ssize_t got;
	long lno = 0;
	int header = 0, n = 0, alloc = 0, rc = 0;
	struct point *p = NULL, *np;

	while ((got = getline(&line, &cap, f)) != -1) {
		lno++;
		len = (size_t)got;
		while (len > 0 &&
		    (line[len - 1] == '\n' || line[len - 1] == '\r' ||
		        line[len - 1] == ' ' || line[len - 1] == '\t'))
			line[--len] = '\0';
		if (lno == 1 && len >= 3 &&
		    memcmp(line, "\xef\xbb\xbf", 3) == 0) {
			memmove(line, line + 3, len - 2); /* byte-order mark */
			len -= 3;
		}
		if (len == 0 || line[0] == '#')
			continue;
		if (strlen(line) != len) {
			rc = medha_why(why, whylen, MEDHA_EFORMAT,
			    "line %ld: NUL byte", lno);
			break;
		}
		if (!header) {
			char *h[4];

			if (split(line, h) != 4 || strcmp(h[0], "op") != 0 ||
			    strcmp(h[1], "tokens") != 0 ||
			    strcmp(h[2], "kv") != 0 ||
			    strcmp(h[3], "time_us") != 0) {
				rc = medha_why(why, whylen, MEDHA_EFORMAT,
				    "line %ld: expected the "
				    "header op,tokens,kv,time_us",
				    lno);
				break;
			}
			header = 1;
			continue;
		}
		if (n == ROWS_MAX) {
			rc = medha_why(why, whylen, MEDHA_EFORMAT,
			    "line %ld: more than %d rows", lno, ROWS_MAX);
			break;
		}
		if (n == alloc) {
			alloc = alloc ? 2 * alloc : 64;
			np = medha_reallocarray(p, (size_t)alloc, sizeof(*p));
			if (np == NULL) {
				rc = MEDHA_ENOMEM;
				break;
			}
			p = np;
		}
		if ((rc = parse_row(line, lno, &p[n], why, whylen)) != 0)
			break;
		n++;
	}
	if (rc == 0 && ferror(f)) {
		snprintf(why, whylen, "read: %s", strerror(errno));
		rc = MEDHA_EIO;
	}
	if (rc == 0 && n == 0)
		rc = medha_why(why, whylen, MEDHA_EFORMAT, "%s",
		    header ? "no data rows"
		           : "no header line op,tokens,kv,time_us");
	free(line);
	if (rc != 0) {
		free(p);
		return rc;
	}
	*pts = p;
	*npts = n;
	return 0;
}

int
medha_pred_load_table(struct medha_pred *pr, const char *path, char *why,
    size_t whylen)
{
	struct medha_table *t;
	struct point *p = NULL;
	FILE *f;
	char dummy[1];
	int n = 0, i, j, rc;

	MEDHA_ASSERT(pr != NULL && path != NULL);
	if (why == NULL || whylen == 0) {
		why = dummy;
		whylen = sizeof(dummy);
	}
	why[0] = '\0';
	if ((f = fopen(path, "r")) == NULL) {
		snprintf(why, whylen, "%s", strerror(errno));
		return MEDHA_EIO;
	}
	rc = read_points(f, &p, &n, why, whylen);
	fclose(f);
	if (rc != 0)
		return rc;
	if ((t = calloc(1, sizeof(*t))) == NULL) {
		free(p);
		return MEDHA_ENOMEM;
	}
	qsort(p, (size_t)n, sizeof(*p), point_cmp);
	for (i = 0; i < n; i = j) {
		for (j = i; j < n && p[j].op == p[i].op; j++)
			;
		if (j - i < 2) {
			rc = medha_why(why, whylen, MEDHA_EFORMAT,
			    "line %ld: %s has 1 point, at "
			    "least 2 are needed",
			    p[i].line, medha_op_name(p[i].op));
			break;
		}
		rc = build_op(&t->op[p[i].op], p[i].op, p + i, j - i, why,
		    whylen);
		if (rc != 0)
			break;
	}
	free(p);
	if (rc == MEDHA_ENOMEM)
		snprintf(why, whylen, "out of memory");
	if (rc != 0) {
		table_free(t);
		return rc;
	}
	table_free(pr->table);
	pr->table = t;
	return 0;
}

void
medha_pred_free(struct medha_pred *p)
{
	if (p == NULL)
		return;
	table_free(p->table);
	p->table = NULL;
}
