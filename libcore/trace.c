/*
 * trace.c: traces in, result records out. The line reader hides zstd:
 * it looks at the first bytes of the stream for the zstd magic and then
 * either decompresses in blocks or reads plain lines with getline(), so
 * that it never seeks and works on pipes. The writer is its mirror
 * (optional zstd, level 3). On top of them sit the JSON Lines trace and
 * record formats (jansson), and the trace reader, which tells JSON Lines,
 * the Azure LLM inference CSV and Vidur's CSV apart by their first line.
 * man/medha-trace.5 is the normative description of every format here.
 */
#include "trace.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <zstd.h>

#define LINE_LIMIT ((size_t)16 << 20) /* longest line, newline excluded */

static const unsigned char zstd_magic[4] = {0x28, 0xb5, 0x2f, 0xfd};

/* ---- line reader ---- */

struct medha_reader {
	FILE *f;   /* not owned */
	char *buf; /* text, unread part [pos, len), (cap) */
	size_t cap, pos, len;
	size_t scan; /* bytes after pos known to hold no newline */
	int eof;     /* all text is in buf */
	char *gl;    /* plain input: getline() buffer, (glcap) */
	size_t glcap;
	ZSTD_DCtx *dctx;   /* zstd input only */
	unsigned char *in; /* compressed bytes, (incap) */
	size_t incap;
	ZSTD_inBuffer zin; /* src = in */
	size_t zret;       /* last decompress hint; 0 = at a frame end */
	int err;           /* sticky error code */
	char why[160];     /* its reason */
};

static int
reader_fail(struct medha_reader *r, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(r->why, sizeof(r->why), fmt, ap);
	va_end(ap);
	r->err = err;
	return err;
}

int
medha_reader_open(struct medha_reader **rp, FILE *f)
{
	struct medha_reader *r;
	unsigned char head[sizeof(zstd_magic)];
	size_t n = 0;
	int c;

	*rp = NULL;
	/* Read only while the bytes match the magic: no wait for more bytes
	 * behind a short first line on a pipe, and nothing to push back. */
	while (n < sizeof(head) && (c = getc(f)) != EOF) {
		head[n++] = (unsigned char)c;
		if (c != zstd_magic[n - 1])
			break;
	}
	if (ferror(f))
		return MEDHA_EIO;
	if ((r = calloc(1, sizeof(*r))) == NULL ||
	    (r->buf = malloc(r->cap = 1 << 16)) == NULL) {
		free(r);
		return MEDHA_ENOMEM;
	}
	r->f = f;
	if (n < sizeof(head) || memcmp(head, zstd_magic, n) != 0) {
		memcpy(r->buf, head, n); /* the start of the first line */
		r->len = n;
		*rp = r;
		return 0;
	}
	r->incap = ZSTD_DStreamInSize();
	if ((r->dctx = ZSTD_createDCtx()) == NULL ||
	    (r->in = malloc(r->incap)) == NULL) {
		medha_reader_close(r);
		return MEDHA_ENOMEM;
	}
	memcpy(r->in, head, n);
	r->zin.src = r->in;
	r->zin.size = n;
	r->zret = 1;
	*rp = r;
	return 0;
}

/* Moves the unread text to the front and makes room for need bytes. */
static int
reader_room(struct medha_reader *r, size_t need)
{
	size_t cap = r->cap;
	char *p;

	memmove(r->buf, r->buf + r->pos, r->len - r->pos);
	r->len -= r->pos;
	r->pos = 0;
	while (cap - r->len < need)
		cap *= 2;
	if (cap != r->cap) {
		if ((p = realloc(r->buf, cap)) == NULL)
			return reader_fail(r, MEDHA_ENOMEM, "out of memory");
		r->buf = p;
		r->cap = cap;
	}
	return 0;
}

/*
 * Appends more text to buf, always keeping a byte free for a final NUL:
 * for plain input one getline() (which returns at a newline, so lines on
 * a pipe are seen as they come), for zstd one decompression step.
 */
static int
reader_fill(struct medha_reader *r)
{
	ZSTD_outBuffer out;
	size_t ret;
	ssize_t n;

	if (r->dctx == NULL) {
		errno = 0;
		if ((n = getline(&r->gl, &r->glcap, r->f)) < 0) {
			if (ferror(r->f) || errno == ENOMEM)
				return reader_fail(r,
				    errno == ENOMEM ? MEDHA_ENOMEM : MEDHA_EIO,
				    "read error: %s", strerror(errno));
			r->eof = 1;
			return 0;
		}
		if (r->len - r->pos + n > LINE_LIMIT + 1)
			return reader_fail(r, MEDHA_EFORMAT,
			    "line longer than 16 MiB");
		if (reader_room(r, n + 1) != 0)
			return r->err;
		memcpy(r->buf + r->len, r->gl, n);
		r->len += n;
		return 0;
	}
	if (r->zin.pos == r->zin.size) {
		r->zin.size = fread(r->in, 1, r->incap, r->f);
		r->zin.pos = 0;
		if (r->zin.size == 0) {
			if (ferror(r->f))
				return reader_fail(r, MEDHA_EIO,
				    "read error: %s", strerror(errno));
			if (r->zret != 0)
				return reader_fail(r, MEDHA_EFORMAT,
				    "truncated zstd stream");
			r->eof = 1;
			return 0;
		}
	}
	if (reader_room(r, 4096) != 0)
		return r->err;
	out.dst = r->buf + r->len;
	out.size = r->cap - r->len - 1;
	out.pos = 0;
	ret = ZSTD_decompressStream(r->dctx, &out, &r->zin);
	if (ZSTD_isError(ret))
		return reader_fail(r, MEDHA_EFORMAT, "corrupt zstd stream: %s",
		    ZSTD_getErrorName(ret));
	r->zret = ret;
	r->len += out.pos;
	return 0;
}

int
medha_reader_line(struct medha_reader *r, char **lp, size_t *lenp)
{
	char *line, *nl;
	size_t n;

	while (r->err == 0) {
		line = r->buf + r->pos;
		nl = memchr(line + r->scan, '\n', r->len - r->pos - r->scan);
		if (nl == NULL && !r->eof) {
			r->scan = r->len - r->pos;
			if (r->scan > LINE_LIMIT)
				return reader_fail(r, MEDHA_EFORMAT,
				    "line longer than 16 MiB");
			reader_fill(r);
			continue;
		}
		n = nl != NULL ? (size_t)(nl - line) : r->len - r->pos;
		if (nl == NULL && n == 0)
			return 0;
		line[n] = '\0'; /* the newline, or the byte kept free */
		r->pos += nl != NULL ? n + 1 : n;
		r->scan = 0;
		if (n > 0 && line[n - 1] == '\r')
			line[--n] = '\0';
		if (memchr(line, '\0', n) != NULL)
			return reader_fail(r, MEDHA_EFORMAT,
			    "line holds a NUL byte");
		*lp = line;
		*lenp = n;
		return 1;
	}
	return r->err;
}

const char *
medha_reader_error(const struct medha_reader *r)
{
	return r->err != 0 ? r->why : "";
}

void
medha_reader_close(struct medha_reader *r)
{
	if (r == NULL)
		return;
	ZSTD_freeDCtx(r->dctx);
	free(r->in);
	free(r->buf);
	free(r->gl);
	free(r);
}

/* ---- writer ---- */

struct medha_writer {
	FILE *f;         /* not owned */
	ZSTD_CCtx *cctx; /* NULL for plain output */
	void *out;       /* compressed bytes, (outcap) */
	size_t outcap;
	int err; /* sticky */
};

int
medha_writer_open(struct medha_writer **wp, FILE *f, int zstd)
{
	struct medha_writer *w;

	*wp = NULL;
	if ((w = calloc(1, sizeof(*w))) == NULL)
		return MEDHA_ENOMEM;
	w->f = f;
	if (zstd) {
		w->outcap = ZSTD_CStreamOutSize();
		w->cctx = ZSTD_createCCtx();
		w->out = malloc(w->outcap);
		if (w->cctx == NULL || w->out == NULL) {
			ZSTD_freeCCtx(w->cctx);
			free(w->out);
			free(w);
			return MEDHA_ENOMEM;
		}
		ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_compressionLevel, 3);
		/* as the zstd tool does: damage is found, not passed on */
		ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_checksumFlag, 1);
	}
	*wp = w;
	return 0;
}

/* Runs the compressor over in with mode, writing what it produces. */
static int
writer_zstd(struct medha_writer *w, ZSTD_inBuffer *in, ZSTD_EndDirective mode)
{
	ZSTD_outBuffer out;
	size_t ret;

	do {
		out.dst = w->out;
		out.size = w->outcap;
		out.pos = 0;
		ret = ZSTD_compressStream2(w->cctx, &out, in, mode);
		if (ZSTD_isError(ret))
			return w->err = MEDHA_EIO;
		if (out.pos > 0 && fwrite(w->out, 1, out.pos, w->f) != out.pos)
			return w->err = MEDHA_EIO;
	} while (mode == ZSTD_e_end ? ret != 0 : in->pos < in->size);
	return 0;
}

int
medha_writer_write(struct medha_writer *w, const void *buf, size_t len)
{
	ZSTD_inBuffer in = {buf, len, 0};

	if (w->err != 0)
		return w->err;
	if (len == 0)
		return 0;
	if (w->cctx != NULL)
		return writer_zstd(w, &in, ZSTD_e_continue);
	if (fwrite(buf, 1, len, w->f) != len)
		return w->err = MEDHA_EIO;
	return 0;
}

int
medha_writer_printf(struct medha_writer *w, const char *fmt, ...)
{
	char small[512], *p = small;
	va_list ap, ap2;
	int n, rc;

	va_start(ap, fmt);
	va_copy(ap2, ap);
	n = vsnprintf(small, sizeof(small), fmt, ap);
	va_end(ap);
	if (n < 0) {
		va_end(ap2);
		return w->err = MEDHA_EINVAL;
	}
	if ((size_t)n >= sizeof(small)) {
		if ((p = malloc((size_t)n + 1)) == NULL) {
			va_end(ap2);
			return w->err = MEDHA_ENOMEM;
		}
		vsnprintf(p, (size_t)n + 1, fmt, ap2);
	}
	va_end(ap2);
	rc = medha_writer_write(w, p, n);
	if (p != small)
		free(p);
	return rc;
}

int
medha_writer_close(struct medha_writer *w)
{
	ZSTD_inBuffer in = {NULL, 0, 0};
	int err;

	if (w == NULL)
		return 0;
	if (w->cctx != NULL && w->err == 0)
		writer_zstd(w, &in, ZSTD_e_end);
	if (fflush(w->f) != 0 || ferror(w->f))
		w->err = MEDHA_EIO;
	err = w->err;
	ZSTD_freeCCtx(w->cctx);
	free(w->out);
	free(w);
	return err;
}

int
medha_path_is_zst(const char *path)
{
	size_t n = strlen(path);

	return n >= 4 && strcmp(path + n - 4, ".zst") == 0;
}

/* ---- JSON fields ---- */

/* What v is, for messages: its value if a number, else its type. */
static const char *
json_what(json_t *v, char *buf, size_t len)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT: return "an object";
	case JSON_ARRAY: return "an array";
	case JSON_STRING: return "a string";
	case JSON_TRUE:
	case JSON_FALSE: return "a boolean";
	case JSON_NULL: return "null";
	default: snprintf(buf, len, "%.9g", json_number_value(v)); return buf;
	}
}

/*
 * A time in seconds: any JSON number, >= 0 (positive: > 0). An absent
 * optional key leaves *out alone. Returns 0 or MEDHA_EFORMAT.
 */
static int
json_time(json_t *o, const char *key, int required, int positive, double *out,
    char *why, size_t whylen)
{
	json_t *v = json_object_get(o, key);
	char buf[32];
	double d;

	if (v == NULL)
		return required
		    ? medha_why(why, whylen, MEDHA_EFORMAT, "%s: missing", key)
		    : 0;
	d = json_number_value(v);
	if (!json_is_number(v) || !isfinite(d) || d < 0 || (positive && d == 0))
		return medha_why(why, whylen, MEDHA_EFORMAT,
		    "%s: not a %s number (got %s)", key,
		    positive ? "positive" : "non-negative",
		    json_what(v, buf, sizeof(buf)));
	*out = d;
	return 0;
}

/* A count: a JSON integer (or integral real) >= min (0 or 1). */
static int
json_count(json_t *o, const char *key, int required, int64_t min, int64_t *out,
    char *why, size_t whylen)
{
	json_t *v = json_object_get(o, key);
	char buf[32];
	double d;

	if (v == NULL)
		return required
		    ? medha_why(why, whylen, MEDHA_EFORMAT, "%s: missing", key)
		    : 0;
	if (json_is_integer(v) && json_integer_value(v) >= min) {
		*out = json_integer_value(v);
		return 0;
	}
	d = json_real_value(v);
	if (json_is_real(v) && d >= min && d <= 9007199254740992.0 &&
	    d == floor(d)) {
		*out = (int64_t)d;
		return 0;
	}
	return medha_why(why, whylen, MEDHA_EFORMAT,
	    "%s: not a %s integer (got %s)", key,
	    min > 0 ? "positive" : "non-negative",
	    json_what(v, buf, sizeof(buf)));
}

/* "id": a string of 1 to MEDHA_ID_MAX - 1 bytes or an integer >= 0. */
static int
json_id(json_t *o, int required, char *id, char *why, size_t whylen)
{
	json_t *v = json_object_get(o, "id");
	char buf[32];
	size_t n;

	id[0] = '\0';
	if (v == NULL)
		return required
		    ? medha_why(why, whylen, MEDHA_EFORMAT, "id: missing")
		    : 0;
	if (json_is_integer(v) && json_integer_value(v) >= 0) {
		snprintf(id, MEDHA_ID_MAX, "%lld",
		    (long long)json_integer_value(v));
		return 0;
	}
	if (!json_is_string(v))
		return medha_why(why, whylen, MEDHA_EFORMAT,
		    "id: not a string or non-negative integer (got %s)",
		    json_what(v, buf, sizeof(buf)));
	n = json_string_length(v);
	if (n == 0)
		return medha_why(why, whylen, MEDHA_EFORMAT, "id: empty");
	if (n > MEDHA_ID_MAX - 1)
		return medha_why(why, whylen, MEDHA_EFORMAT,
		    "id: longer than %d bytes", MEDHA_ID_MAX - 1);
	memcpy(id, json_string_value(v), n + 1);
	return 0;
}

/* Parses line as one JSON object; *root is to be json_decref()ed. */
static int
json_line(const char *line, json_t **root, char *why, size_t whylen)
{
	json_error_t e;

	*root = json_loads(line, JSON_REJECT_DUPLICATES, &e);
	if (*root == NULL)
		return medha_why(why, whylen, MEDHA_EFORMAT,
		    "not JSON: %s (column %d)", e.text, e.column);
	if (!json_is_object(*root)) {
		json_decref(*root);
		*root = NULL;
		return medha_why(why, whylen, MEDHA_EFORMAT,
		    "not a JSON object");
	}
	return 0;
}

/* Writes s as a JSON string. */
static int
write_jstr(struct medha_writer *w, const char *s)
{
	const char *run = s;
	char esc[8];

	medha_writer_write(w, "\"", 1);
	for (; *s != '\0'; s++) {
		unsigned char c = (unsigned char)*s;

		if (c >= 0x20 && c != '"' && c != '\\')
			continue;
		medha_writer_write(w, run, s - run);
		if (c == '"' || c == '\\')
			snprintf(esc, sizeof(esc), "\\%c", c);
		else if (c == '\n' || c == '\t' || c == '\r')
			snprintf(esc, sizeof(esc), "\\%c",
			    c == '\n'       ? 'n'
			        : c == '\t' ? 't'
			                    : 'r');
		else
			snprintf(esc, sizeof(esc), "\\u%04x", c);
		medha_writer_write(w, esc, strlen(esc));
		run = s + 1;
	}
	medha_writer_write(w, run, s - run);
	return medha_writer_write(w, "\"", 1);
}

/* Writes an id as a JSON integer if it is one (<= 18 digits), else a string. */
static int
write_id(struct medha_writer *w, const char *id)
{
	size_t n = strspn(id, "0123456789");

	if (id[n] == '\0' && n >= 1 && n <= 18 && (n == 1 || id[0] != '0'))
		return medha_writer_write(w, id, n);
	return write_jstr(w, id);
}

static int
id_valid(const char *id)
{
	return memchr(id, '\0', MEDHA_ID_MAX) != NULL;
}

/* ---- requests ---- */

void
medha_reqspec_clear(struct medha_reqspec *rs)
{
	free(rs->prompt);
	rs->prompt = NULL;
}

int
medha_reqspec_parse(const char *line, struct medha_reqspec *rs, char *why,
    size_t whylen)
{
	json_t *root, *p;
	int rc;

	memset(rs, 0, sizeof(*rs));
	if ((rc = json_line(line, &root, why, whylen)) != 0)
		return rc;
	if ((rc = json_id(root, 0, rs->id, why, whylen)) != 0 ||
	    (rc = json_time(root, "arrival", 1, 0, &rs->arrival, why,
	         whylen)) != 0 ||
	    (rc = json_count(root, "prompt_tokens", 0, 1, &rs->prompt_tokens,
	         why, whylen)) != 0 ||
	    (rc = json_count(root, "max_tokens", 1, 0, &rs->max_tokens, why,
	         whylen)) != 0 ||
	    (rc = json_time(root, "ttft_slo", 0, 1, &rs->ttft_slo, why,
	         whylen)) != 0 ||
	    (rc = json_time(root, "tpot_slo", 0, 1, &rs->tpot_slo, why,
	         whylen)) != 0)
		goto out;
	if ((p = json_object_get(root, "prompt")) != NULL) {
		if (!json_is_string(p)) {
			rc = medha_why(why, whylen, MEDHA_EFORMAT,
			    "prompt: not a string");
			goto out;
		}
		if ((rs->prompt = strdup(json_string_value(p))) == NULL) {
			rc = MEDHA_ENOMEM;
			goto out;
		}
	} else if (rs->prompt_tokens == 0)
		rc = medha_why(why, whylen, MEDHA_EFORMAT,
		    "prompt_tokens: missing (and no prompt)");
out:
	json_decref(root);
	if (rc != 0)
		medha_reqspec_clear(rs);
	return rc;
}

int
medha_reqspec_write(struct medha_writer *w, const struct medha_reqspec *rs)
{
	if (!id_valid(rs->id) || !isfinite(rs->arrival) || rs->arrival < 0 ||
	    rs->prompt_tokens < 0 ||
	    (rs->prompt_tokens == 0 && rs->prompt == NULL) ||
	    rs->max_tokens < 0 || !isfinite(rs->ttft_slo) || rs->ttft_slo < 0 ||
	    !isfinite(rs->tpot_slo) || rs->tpot_slo < 0)
		return MEDHA_EINVAL;
	medha_writer_write(w, "{", 1);
	if (rs->id[0] != '\0') {
		medha_writer_write(w, "\"id\": ", 6);
		write_id(w, rs->id);
		medha_writer_write(w, ", ", 2);
	}
	medha_writer_printf(w, "\"arrival\": %.9g", rs->arrival);
	if (rs->prompt_tokens > 0)
		medha_writer_printf(w, ", \"prompt_tokens\": %lld",
		    (long long)rs->prompt_tokens);
	if (rs->prompt != NULL) {
		medha_writer_write(w, ", \"prompt\": ", 12);
		write_jstr(w, rs->prompt);
	}
	medha_writer_printf(w, ", \"max_tokens\": %lld",
	    (long long)rs->max_tokens);
	if (rs->ttft_slo > 0)
		medha_writer_printf(w, ", \"ttft_slo\": %.9g", rs->ttft_slo);
	if (rs->tpot_slo > 0)
		medha_writer_printf(w, ", \"tpot_slo\": %.9g", rs->tpot_slo);
	return medha_writer_write(w, "}\n", 2);
}

/* ---- records ---- */

static const char *status_names[] = {"ok", "rejected", "failed"};

const char *
medha_status_name(int status)
{
	if (status < 0 || status > MEDHA_STATUS_FAILED)
		return "unknown";
	return status_names[status];
}

int
medha_status_parse(const char *name)
{
	int i;

	for (i = 0; i <= MEDHA_STATUS_FAILED; i++)
		if (strcmp(name, status_names[i]) == 0)
			return i;
	return -1;
}

int
medha_record_parse(const char *line, struct medha_record *rec, char *why,
    size_t whylen)
{
	struct medha_record r;
	json_t *root, *v;
	int rc, ok, have_ttft, have_tpot;

	memset(&r, 0, sizeof(r));
	if ((rc = json_line(line, &root, why, whylen)) != 0)
		return rc;
	v = json_object_get(root, "status");
	if (v == NULL) {
		rc = medha_why(why, whylen, MEDHA_EFORMAT, "status: missing");
		goto out;
	}
	if (!json_is_string(v) ||
	    (r.status = medha_status_parse(json_string_value(v))) < 0) {
		rc = medha_why(why, whylen, MEDHA_EFORMAT,
		    "status: not one of \"ok\", \"rejected\", \"failed\"");
		goto out;
	}
	ok = r.status == MEDHA_STATUS_OK;
	have_ttft = json_object_get(root, "ttft") != NULL;
	have_tpot = json_object_get(root, "tpot_mean") != NULL;
	if ((rc = json_id(root, 1, r.id, why, whylen)) != 0 ||
	    (rc = json_time(root, "arrival", 1, 0, &r.arrival, why, whylen)) !=
	        0 ||
	    (rc = json_time(root, "first_token", ok, 0, &r.first_token, why,
	         whylen)) != 0 ||
	    (rc = json_time(root, "finish", ok, 0, &r.finish, why, whylen)) !=
	        0 ||
	    (rc = json_count(root, "prompt_tokens", 1, 0, &r.prompt_tokens, why,
	         whylen)) != 0 ||
	    (rc = json_count(root, "output_tokens", 1, 0, &r.output_tokens, why,
	         whylen)) != 0 ||
	    (rc = json_time(root, "ttft", 0, 0, &r.ttft, why, whylen)) != 0 ||
	    (rc = json_time(root, "tpot_mean", 0, 0, &r.tpot_mean, why,
	         whylen)) != 0 ||
	    (rc = json_time(root, "tpot_max", 0, 0, &r.tpot_max, why,
	         whylen)) != 0 ||
	    (rc = json_time(root, "ttft_slo", 0, 0, &r.ttft_slo, why,
	         whylen)) != 0 ||
	    (rc = json_time(root, "tpot_slo", 0, 0, &r.tpot_slo, why,
	         whylen)) != 0)
		goto out;
	/* Derive what a terse writer left out. */
	if (!have_ttft && ok)
		r.ttft = r.first_token - r.arrival;
	if (!have_tpot && ok && r.output_tokens >= 2)
		r.tpot_mean =
		    (r.finish - r.first_token) / (r.output_tokens - 1);
	*rec = r;
out:
	json_decref(root);
	return rc;
}

int
medha_record_write(struct medha_writer *w, const struct medha_record *rec)
{
	const double *t[] = {&rec->arrival, &rec->first_token, &rec->finish,
	    &rec->ttft, &rec->tpot_mean, &rec->tpot_max, &rec->ttft_slo,
	    &rec->tpot_slo};
	size_t i;

	for (i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		if (!isfinite(*t[i]) || *t[i] < 0)
			return MEDHA_EINVAL;
	if (!id_valid(rec->id) || rec->id[0] == '\0' ||
	    rec->prompt_tokens < 0 || rec->output_tokens < 0 ||
	    rec->status < 0 || rec->status > MEDHA_STATUS_FAILED)
		return MEDHA_EINVAL;
	medha_writer_write(w, "{\"id\": ", 7);
	write_id(w, rec->id);
	medha_writer_printf(w,
	    ", \"arrival\": %.9g, \"first_token\": %.9g, \"finish\": %.9g"
	    ", \"prompt_tokens\": %lld, \"output_tokens\": %lld"
	    ", \"ttft\": %.9g, \"tpot_mean\": %.9g, \"tpot_max\": %.9g"
	    ", \"ttft_slo\": %.9g, \"tpot_slo\": %.9g, \"status\": \"%s\"}\n",
	    rec->arrival, rec->first_token, rec->finish,
	    (long long)rec->prompt_tokens, (long long)rec->output_tokens,
	    rec->ttft, rec->tpot_mean, rec->tpot_max, rec->ttft_slo,
	    rec->tpot_slo, medha_status_name(rec->status));
	return w->err;
}

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

/* A CSV count: an integer, or a decimal with no fraction ("12.0"). */
static int
csv_count(const char *s, int64_t min, int64_t *out)
{
	double d;

	if (medha_parse_i64(s, min, INT64_MAX, out) == 0)
		return 0;
	if (medha_parse_f64(s, (double)min, 9007199254740992.0, &d) == 0 &&
	    d == floor(d)) {
		*out = (int64_t)d;
		return 0;
	}
	return -1;
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
		if (!isdigit((unsigned char)p[1]))
			return -1;
		*frac = strtod(p, &p);
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
	} else if (medha_parse_f64(a, 0, 1e300, &rs->arrival) != 0)
		return trace_fail(t, MEDHA_EFORMAT,
		    "arrived_at: not a non-negative number");
	if (csv_count(p, 1, &rs->prompt_tokens) != 0)
		return trace_fail(t, MEDHA_EFORMAT,
		    "%s: not a positive integer", t->name[1]);
	if (csv_count(o, 0, &rs->max_tokens) != 0)
		return trace_fail(t, MEDHA_EFORMAT,
		    "%s: not a non-negative integer", t->name[2]);
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
