/*
 * util.c: error strings, assertion failure, levelled logging and checked
 * number parsing shared by every libcore module and front end.
 */
#include "medha.h"

#include <errno.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

int medha_log_level = MEDHA_LOG_WARN;
const char *medha_progname = "medha";
int medha_log_stamp = MEDHA_STAMP_NONE;

const char *
medha_strerror(int err)
{
	switch (err) {
	case MEDHA_OK: return "success";
	case MEDHA_ENOMEM: return "out of memory";
	case MEDHA_EINVAL: return "invalid argument";
	case MEDHA_EIO: return "input/output error";
	case MEDHA_EFORMAT: return "malformed input";
	case MEDHA_ENOTFOUND: return "not found";
	case MEDHA_ERANGE: return "value out of range";
	case MEDHA_ETRUNC: return "input truncated";
	case MEDHA_ENOSPACE: return "no space left";
	case MEDHA_EUNSUP: return "not supported";
	case MEDHA_ETIMEOUT: return "timed out";
	case MEDHA_EPEER: return "peer closed or unreachable";
	case MEDHA_EAUTH: return "not authenticated (no secret, or another)";
	}
	return "unknown error";
}

void
medha_assert_fail(const char *expr, const char *file, int line)
{
	fprintf(stderr, "%s: assertion failed: %s (%s:%d)\n", medha_progname,
	    expr, file, line);
	abort();
}

void
medha_log_write(int lvl, const char *fmt, ...)
{
	/* an error reads as every program's own messages do, "prog:
	 * reason"; the other levels say what they are; a server's lines
	 * all say their time and level */
	static const char *names[] = {"error: ", "warning: ", "info: ",
	    "debug: "};
	char ts[48] = "";
	va_list ap;

	if (lvl < 0 || lvl > MEDHA_LOG_DEBUG)
		lvl = MEDHA_LOG_DEBUG;
	if (medha_log_stamp == MEDHA_STAMP_WALL) {
		struct timespec t;
		struct tm tm;
		clock_gettime(CLOCK_REALTIME, &t);
		gmtime_r(&t.tv_sec, &tm);
		strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
		snprintf(ts + strlen(ts), sizeof(ts) - strlen(ts), ".%03ldZ ",
		    t.tv_nsec / 1000000);
	} else if (medha_log_stamp == MEDHA_STAMP_MONO)
		snprintf(ts, sizeof(ts), "%.6f ", medha_now());
	flockfile(stderr); /* one line, whole, among threads */
	fprintf(stderr, "%s%s: %s", ts, medha_progname,
	    lvl == MEDHA_LOG_ERROR && ts[0] == '\0' ? "" : names[lvl]);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	funlockfile(stderr);
}

int
medha_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
	char *end;
	long long v;

	if (s == NULL || *s == '\0')
		return MEDHA_EINVAL;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (*end != '\0')
		return MEDHA_EINVAL;
	if (errno == ERANGE || v < lo || v > hi)
		return MEDHA_ERANGE;
	*out = v;
	return 0;
}

int
medha_parse_f64(const char *s, double lo, double hi, double *out)
{
	char *end;
	double v;

	if (s == NULL || *s == '\0')
		return MEDHA_EINVAL;
	errno = 0;
	v = strtod(s, &end);
	if (*end != '\0' || isnan(v))
		return MEDHA_EINVAL;
	if (errno == ERANGE || v < lo || v > hi)
		return MEDHA_ERANGE;
	*out = v;
	return 0;
}

int
medha_flag_i64(const char *flag, const char *arg, int64_t lo, int64_t hi,
    int64_t *out)
{
	int rc = medha_parse_i64(arg, lo, hi, out);

	if (rc == MEDHA_EINVAL)
		medha_log(MEDHA_LOG_ERROR, "%s %s: not an integer", flag, arg);
	else if (rc != 0)
		medha_log(MEDHA_LOG_ERROR, "%s %s: not in [%lld, %lld]", flag,
		    arg, (long long)lo, (long long)hi);
	return rc;
}

int
medha_flag_f64(const char *flag, const char *arg, double lo, double hi,
    int lo_open, double *out)
{
	int rc = medha_parse_f64(arg, lo, hi, out);

	if (rc == 0 && lo_open && *out == lo)
		rc = MEDHA_ERANGE;
	if (rc == MEDHA_EINVAL)
		medha_log(MEDHA_LOG_ERROR, "%s %s: not a number", flag, arg);
	else if (rc != 0)
		medha_log(MEDHA_LOG_ERROR, "%s %s: not in %c%.15g, %.15g]",
		    flag, arg, lo_open ? '(' : '[', lo, hi);
	return rc;
}

int
medha_why(char *why, size_t whylen, int err, const char *fmt, ...)
{
	va_list ap;

	if (why == NULL || whylen == 0)
		return err;
	va_start(ap, fmt);
	vsnprintf(why, whylen, fmt, ap);
	va_end(ap);
	return err;
}

void *
medha_calloc(size_t n, size_t size)
{
	if (n == 0 || size == 0)
		return calloc(1, 1);
	return calloc(n, size);
}

void *
medha_reallocarray(void *p, size_t n, size_t size)
{
	if (size != 0 && n > SIZE_MAX / size)
		return NULL;
	return realloc(p, n * size == 0 ? 1 : n * size);
}

size_t
medha_utf8_len(const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t k;
	uint32_t c;

	if (n == 0)
		return 0;
	if (u[0] < 0x80)
		return 1;
	if (u[0] >= 0xc2 && u[0] <= 0xdf)
		k = 2, c = u[0] & 0x1f;
	else if (u[0] >= 0xe0 && u[0] <= 0xef)
		k = 3, c = u[0] & 0x0f;
	else if (u[0] >= 0xf0 && u[0] <= 0xf4)
		k = 4, c = u[0] & 0x07;
	else
		return 0;
	if (n < k)
		return 0;
	for (size_t i = 1; i < k; i++) {
		if ((u[i] & 0xc0) != 0x80)
			return 0;
		c = c << 6 | (u[i] & 0x3f);
	}
	if ((k == 3 && c < 0x800) || (k == 4 && (c < 0x10000 || c > 0x10ffff)) ||
	    (c >= 0xd800 && c <= 0xdfff))
		return 0;
	return k;
}

void
medha_gp_quote(FILE *gp, const char *s)
{
	fputc('\'', gp);
	for (; *s != '\0'; s++) {
		if (*s == '\'')
			fputc('\'', gp);
		fputc(*s, gp);
	}
	fputc('\'', gp);
}

double
medha_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

double
medha_thread_cpu(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void
medha_trim_idle(struct medha_trim *t, int64_t live, int64_t activity,
    double now)
{
	if (live > 0 || activity == t->seen || now - t->at < 1)
		return;
	t->seen = activity;
	t->at = now;
#ifdef __GLIBC__
	malloc_trim(0);
#endif
}

int
medha_help_print(const struct medha_help *lines, size_t n)
{
	if (n > 0 && lines[0].opt != NULL)
		printf("\n");
	for (size_t i = 0; i < n; i++)
		if (lines[i].opt == NULL)
			printf("\n%s\n", lines[i].desc);
		else
			printf("  %-22s  %s\n", lines[i].opt, lines[i].desc);
	if (fflush(stdout) != 0 || ferror(stdout)) {
		medha_log(MEDHA_LOG_ERROR, "stdout: %s", strerror(errno));
		return 1;
	}
	return 0;
}
