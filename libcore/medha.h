/*
 * medha.h: what every part of libcore shares: the error enum and its
 * strings, the assertion macro, levelled logging to stderr, and checked
 * number parsing for the command-line front ends.
 *
 * libcore never exits the process and never writes to stdout; functions
 * return 0 or a negative MEDHA_E* code, and medha_strerror() names it.
 *
 *	int64_t n;
 *	if (medha_parse_i64(optarg, 1, 1 << 20, &n) != 0)
 *		usage();
 *	medha_log(MEDHA_LOG_INFO, "chunk %lld", (long long)n);
 */
#ifndef MEDHA_H
#define MEDHA_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

enum medha_err {
	MEDHA_OK = 0,
	MEDHA_ENOMEM = -1,    /* allocation failed */
	MEDHA_EINVAL = -2,    /* argument out of range or malformed */
	MEDHA_EIO = -3,       /* read or write failed (errno is kept) */
	MEDHA_EFORMAT = -4,   /* input does not follow its format */
	MEDHA_ENOTFOUND = -5, /* named thing (model, GPU, key) unknown */
	MEDHA_ERANGE = -6,    /* number does not fit */
	MEDHA_ETRUNC = -7,    /* input ends early */
	MEDHA_ENOSPACE = -8,  /* no KV memory (or other capacity) left */
	MEDHA_EUNSUP = -9,    /* valid but not supported by this build */
	MEDHA_ETIMEOUT = -10, /* a peer did not answer in time */
	MEDHA_EPEER = -11,    /* the connection to a peer closed or failed */
	MEDHA_EAUTH = -12,    /* a peer without the shared secret */
};

/*
 * splitmix64's finaliser: every bit of z reaches every bit of the result.
 * The one hash of ids, positions and seeds (made-up prompts, block
 * hashes, generators: medha_mix64(x += 0x9e3779b97f4a7c15) is
 * splitmix64).
 */
static inline uint64_t
medha_mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Static string for an error code; never NULL. */
const char *medha_strerror(int err);

/* Programmer errors only: abort with file and line. */
#define MEDHA_ASSERT(c)                                            \
	do {                                                       \
		if (!(c))                                          \
			medha_assert_fail(#c, __FILE__, __LINE__); \
	} while (0)
void medha_assert_fail(const char *expr, const char *file, int line)
    __attribute__((noreturn));

enum medha_log_level {
	MEDHA_LOG_ERROR = 0,
	MEDHA_LOG_WARN = 1,
	MEDHA_LOG_INFO = 2,
	MEDHA_LOG_DEBUG = 3,
};

/* Messages at or below this level are written (default WARN). */
extern int medha_log_level;
/* Program name used as the prefix of log lines (default "medha"). */
extern const char *medha_progname;
/*
 * How log lines are stamped. A command (the default, NONE) writes
 * "prog: reason" for an error and "prog: warning: ..." (info:, debug:)
 * for the rest; a server (WALL, or MONO) writes every line as
 * "TIME prog: LEVEL: ...", LEVEL error too, TIME in RFC 3339 (UTC,
 * milliseconds) or, MONO, seconds on the monotonic clock (medha_now).
 */
enum { MEDHA_STAMP_NONE, MEDHA_STAMP_WALL, MEDHA_STAMP_MONO };
extern int medha_log_stamp;

#define medha_log(lvl, ...)                                  \
	do {                                                 \
		if ((lvl) <= medha_log_level)                \
			medha_log_write((lvl), __VA_ARGS__); \
	} while (0)
void medha_log_write(int lvl, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/*
 * Parse a whole string as a number within [lo, hi]. Returns 0, or
 * MEDHA_EINVAL (not a number, trailing junk) or MEDHA_ERANGE.
 */
int medha_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);
int medha_parse_f64(const char *s, double lo, double hi, double *out);

/*
 * A command-line flag's value: like medha_parse_i64/f64, but a bad value
 * is also logged as "FLAG ARG: not in [lo, hi]" (or "not a number").
 * lo_open excludes lo itself. The caller exits 2 on a non-zero return.
 */
int medha_flag_i64(const char *flag, const char *arg, int64_t lo, int64_t hi,
    int64_t *out);
int medha_flag_f64(const char *flag, const char *arg, double lo, double hi,
    int lo_open, double *out);

/*
 * Write a reason into why (if why is not NULL and whylen > 0) and return
 * err: the one way libcore explains an error to its caller.
 *	return medha_why(why, whylen, MEDHA_EFORMAT, "line %d: ...", n);
 */
int medha_why(char *why, size_t whylen, int err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Writes s to a gnuplot(1) script as a single-quoted string. */
void medha_gp_quote(FILE *gp, const char *s);

/* Seconds on the monotonic clock (CLOCK_MONOTONIC). */
double medha_now(void);
/* Seconds of CPU time the calling thread has used
   (CLOCK_THREAD_CPUTIME_ID): what a profiler on a loaded machine times,
   where one thread does all the work. */
double medha_thread_cpu(void);

/*
 * A server gone idle gives its freed heap back to the system (glibc's
 * malloc_trim), so that its memory returns to where it was after a burst
 * of load: call each pass of its loop with the requests in flight and a
 * count that grows with activity; it trims once the count has moved and
 * nothing is in flight, at most once a second (now: monotonic seconds).
 */
struct medha_trim {
	int64_t seen;
	double at;
};
void medha_trim_idle(struct medha_trim *t, int64_t live, int64_t activity,
    double now);

/*
 * One line of a program's -h after its synopsis: an option and what it
 * does, or (opt NULL) a heading for the options that follow.
 */
struct medha_help {
	const char *opt, *desc;
};
/*
 * Print the n lines of -h to stdout, a blank line before the first and
 * before each heading, and flush it. Returns 0, or 1 after logging why
 * stdout failed (the exit status of -h).
 */
int medha_help_print(const struct medha_help *lines, size_t n);

/* Allocation helpers that return NULL on overflow as well as on failure. */
void *medha_calloc(size_t n, size_t size);
void *medha_reallocarray(void *p, size_t n, size_t size);

/*
 * Length (1 to 4) of the valid UTF-8 sequence at s, of which n bytes may
 * be read, or 0 if s does not start one: a stray continuation byte, an
 * overlong form, a surrogate, a code point past U+10FFFF, or a sequence
 * cut short (by n, or by a NUL in a NUL-terminated string).
 */
size_t medha_utf8_len(const char *s, size_t n);

#endif
