/*
 * trace_read.c: the trace reader (io/trace.h: medha_trace_open, _next,
 * _error, _close). It tells JSON Lines, the Azure LLM inference CSV and
 * Vidur's CSV apart by their first line. A JSON line is a request as
 * trace.c parses it; a CSV row is split here, its columns found by name
 * in the header, and an Azure timestamp becomes seconds after the first
 * row's. Lines come through lineio.c, which hides zstd.
 * man/medha-trace.5 is the normative description of every format here.
 */
#include "io/trace.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---- trace reader: JSON Lines and the two CSVs ---- */

enum trace_fmt { FMT_UNKNOWN, FMT_JSON, FMT_AZURE, FMT_VIDUR };

struct medha_trace_in {
	struct medha_reader *r;
	enum trace_fmt fmt;
	long long lineno;    /* physical line last read, 1-based */
	long long nreq;      /* requests returned so far: the default id */
	int ncols;           /* CSV: fields in the header */
	int col[3];          /* CSV: arrival, prompt, output columns */
	const char *name[3]; /* CSV: their names, for messages */
	int have_t0;         /* Azure: origin taken from the first row */
	int64_t t0_sec;
	double t0_frac;
	int err; /* sticky */
	char why[256];
};

static const char *azure_cols[3] = {"TIMESTAMP", "ContextTokens",
    "GeneratedTokens"};
static const char *vidur_cols[3] = {"arrived_at", "num_prefill_tokens",
    "num_decode_tokens"};

int
medha_trace_open(struct medha_trace_in **tp, FILE *f)
{
	struct medha_trace_in *t;
	int rc;

	*tp = NULL;
	if ((t = calloc(1, sizeof(*t))) == NULL)
		return MEDHA_ENOMEM;
	if ((rc = medha_reader_open(&t->r, f)) != 0) {
		free(t);
		return rc;
	}
	*tp = t;
	return 0;
}

static int
trace_fail(struct medha_trace_in *t, int err, const char *fmt, ...)
{
	va_list ap;
	int n;

	n = snprintf(t->why, sizeof(t->why), "line %lld: ", t->lineno);
	va_start(ap, fmt);
	vsnprintf(t->why + n, sizeof(t->why) - n, fmt, ap);
	va_end(ap);
	t->err = err;
	return err;
}

/* Splits a CSV line in place at commas; fields are trimmed of blanks
 * and of one pair of double quotes. Returns the number of fields. */
static int
csv_split(char *s, char **field, int max)
{
	int n = 0;
	char *e, *end;

	for (;;) {
		end = strchr(s, ',');
		if (end != NULL)
			*end = '\0';
		while (isspace((unsigned char)*s))
			s++;
		e = s + strlen(s);
		while (e > s && isspace((unsigned char)e[-1]))
			*--e = '\0';
		if (e - s >= 2 && *s == '"' && e[-1] == '"') {
			e[-1] = '\0';
			s++;
		}
		if (n < max)
			field[n] = s;
		n++;
		if (end == NULL)
			return n;
		s = end + 1;
	}
}

#define CSV_MAXCOLS 64

static int
trace_header(struct medha_trace_in *t, char *line)
{
	char *f[CSV_MAXCOLS];
	const char **want;
	int n, i, j, fmt;

	t->ncols = csv_split(line, f, CSV_MAXCOLS);
	n = t->ncols < CSV_MAXCOLS ? t->ncols : CSV_MAXCOLS;
	for (fmt = FMT_AZURE; fmt <= FMT_VIDUR; fmt++) {
		want = fmt == FMT_AZURE ? azure_cols : vidur_cols;
		for (j = 0; j < 3; j++) {
			for (i = 0; i < n && strcmp(f[i], want[j]) != 0; i++)
				;
			if (i == n)
				break;
			t->col[j] = i;
			t->name[j] = want[j];
		}
		if (j == 3) {
			t->fmt = fmt;
			return 0;
		}
	}
	return trace_fail(t, MEDHA_EFORMAT,
	    "unknown trace format: expected a JSON object or a CSV header "
	    "with TIMESTAMP,ContextTokens,GeneratedTokens or "
	    "arrived_at,num_prefill_tokens,num_decode_tokens");
}

/*
 * A CSV count in [min, MEDHA_TOKENS_MAX]: an integer, or a decimal with no
 * fraction ("12.0"). Fails naming the column, the field and the range.
 */
static int
csv_count(struct medha_trace_in *t, const char *col, const char *s, int64_t min,
    int64_t *out)
{
	double d;

	if (medha_parse_i64(s, min, MEDHA_TOKENS_MAX, out) == 0)
		return 0;
	if (medha_parse_f64(s, (double)min, (double)MEDHA_TOKENS_MAX, &d) ==
	        0 &&
	    d == floor(d)) {
		*out = (int64_t)d;
		return 0;
	}
	return trace_fail(t, MEDHA_EFORMAT,
	    "%s: not an integer in [%lld, %lld] (got \"%.40s\")", col,
	    (long long)min, (long long)MEDHA_TOKENS_MAX, s);
}

/* Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant). */
static int64_t
days_from_civil(int64_t y, unsigned m, unsigned d)
{
	int64_t era;
	unsigned yoe, doy, doe;

	y -= m <= 2;
	era = (y >= 0 ? y : y - 399) / 400;
	yoe = (unsigned)(y - era * 400);
	doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + (int64_t)doe - 719468;
}

/* "YYYY-MM-DD HH:MM:SS[.frac]" (or 'T' between), as UTC. */
static int
parse_timestamp(const char *s, int64_t *sec, double *frac)
{
	int y, mo, d, h, mi, se, n = 0;
	char sep;
	char *p;

	if (sscanf(s, "%4d-%2d-%2d%c%2d:%2d:%2d%n", &y, &mo, &d, &sep, &h, &mi,
	        &se, &n) != 7 ||
	    n == 0 || (sep != ' ' && sep != 'T') || mo < 1 || mo > 12 ||
	    d < 1 || d > 31 || h < 0 || h > 23 || mi < 0 || mi > 59 || se < 0 ||
	    se > 60 || !isdigit((unsigned char)*s))
		return -1;
	*frac = 0;
	p = (char *)s + n;
	if (*p == '.') {
		/* digits only: strtod alone would take ".5e999" (inf) */
		size_t nd = strspn(p + 1, "0123456789");
		char digits[32];

		if (nd == 0)
			return -1;
		snprintf(digits, sizeof(digits), "0.%.*s",
		    (int)(nd < 28 ? nd : 28), p + 1);
		*frac = strtod(digits, NULL);
		p += 1 + nd;
	}
	if (*p == 'Z')
		p++;
	if (*p != '\0')
		return -1;
	*sec = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + se;
	return 0;
}

static int
trace_csv_row(struct medha_trace_in *t, char *line, struct medha_reqspec *rs)
{
	char *f[CSV_MAXCOLS];
	const char *a, *p, *o;
	int64_t sec;
	double frac;
	int n;

	n = csv_split(line, f, CSV_MAXCOLS);
	if (n != t->ncols)
		return trace_fail(t, MEDHA_EFORMAT,
		    "%d fields, the header has %d", n, t->ncols);
	a = f[t->col[0]];
	p = f[t->col[1]];
	o = f[t->col[2]];
	if (t->fmt == FMT_AZURE) {
		if (parse_timestamp(a, &sec, &frac) != 0)
			return trace_fail(t, MEDHA_EFORMAT,
			    "TIMESTAMP: not a time like "
			    "\"2023-11-16 18:15:46.6805900\"");
		if (!t->have_t0) {
			t->have_t0 = 1;
			t->t0_sec = sec;
			t->t0_frac = frac;
		}
		rs->arrival = (double)(sec - t->t0_sec) + (frac - t->t0_frac);
		if (rs->arrival < 0)
			return trace_fail(t, MEDHA_EFORMAT,
			    "TIMESTAMP: earlier than the first row's");
		if (rs->arrival > MEDHA_TIME_MAX)
			return trace_fail(t, MEDHA_EFORMAT,
			    "TIMESTAMP: \"%.40s\" is %.15g s after the first "
			    "row's, more than %.15g",
			    a, rs->arrival, MEDHA_TIME_MAX);
	} else if (medha_parse_f64(a, 0, MEDHA_TIME_MAX, &rs->arrival) != 0)
		return trace_fail(t, MEDHA_EFORMAT,
		    "arrived_at: not a number in [0, %.15g] (got \"%.40s\")",
		    MEDHA_TIME_MAX, a);
	if (csv_count(t, t->name[1], p, 1, &rs->prompt_tokens) != 0 ||
	    csv_count(t, t->name[2], o, 0, &rs->max_tokens) != 0)
		return t->err;
	return 0;
}

int
medha_trace_next(struct medha_trace_in *t, struct medha_reqspec *rs)
{
	char why[200];
	char *line, *s;
	size_t len;
	int rc;

	medha_reqspec_clear(rs);
	memset(rs, 0, sizeof(*rs));
	if (t->err != 0)
		return t->err;
	for (;;) {
		rc = medha_reader_line(t->r, &line, &len);
		if (rc == 0)
			return 0;
		t->lineno++;
		if (rc < 0)
			return trace_fail(t, rc, "%s",
			    medha_reader_error(t->r));
		s = line;
		if (t->lineno == 1 && strncmp(s, "\xef\xbb\xbf", 3) == 0)
			s += 3; /* UTF-8 byte order mark */
		while (isspace((unsigned char)*s))
			s++;
		if (*s == '\0' || *s == '#')
			continue;
		if (t->fmt == FMT_UNKNOWN) {
			if (*s != '{') {
				if ((rc = trace_header(t, s)) != 0)
					return rc;
				continue;
			}
			t->fmt = FMT_JSON;
		}
		if (t->fmt == FMT_JSON) {
			rc = medha_reqspec_parse(s, rs, why, sizeof(why));
			if (rc == MEDHA_EFORMAT)
				return trace_fail(t, rc, "%s", why);
			if (rc != 0)
				return trace_fail(t, rc, "%s",
				    medha_strerror(rc));
		} else if ((rc = trace_csv_row(t, s, rs)) != 0)
			return rc;
		if (rs->id[0] == '\0')
			snprintf(rs->id, sizeof(rs->id), "%lld", t->nreq);
		t->nreq++;
		return 1;
	}
}

const char *
medha_trace_error(const struct medha_trace_in *t)
{
	return t->err != 0 ? t->why : "";
}

void
medha_trace_close(struct medha_trace_in *t)
{
	if (t == NULL)
		return;
	medha_reader_close(t->r);
	free(t);
}
