/*
 * common.h: what the five programs (medha-prof, medha-router,
 * medha-sched, medha-trace, medha-worker) share on the command line:
 * range-checked flag numbers, -h and usage errors, opening and closing
 * output files, and the exits. Every message goes through medha_log
 * (libcore/medha.h) to stderr as "PROG: reason"; the exit status is 0 on
 * success, 1 when the work fails and 2 for bad usage (STYLE.md rule 9).
 * Each program includes it as "../common.h" and links cmd/common.c.
 *
 *	static const char synopsis[] = "usage: prog [-h] [-n N]\n";
 *	case 'h': HELP_EXIT(synopsis, help_lines);
 *	case 'n': n = flag_i64("-n", optarg, 1, 1 << 20); break;
 *	default: usage_exit(synopsis);
 *	...
 *	if ((f = out_open(path, &w)) == NULL)
 *		return 1;
 *	...
 *	return stdout_close(status);
 */
#ifndef MEDHA_CMD_COMMON_H
#define MEDHA_CMD_COMMON_H

#include "medha.h"

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

struct medha_writer; /* io/trace.h */

/* Logs fmt as an error and exits with status (1: failed, 2: usage). */
/*
 * A server's logging (medha-sched -l, medha-router, medha-worker -s):
 * every line stamped with its time (RFC 3339; -vv: monotonic seconds),
 * normal events at info, shown by default; -v adds debug (the access
 * lines among them).
 */
void log_server(int verbose);
void die(int status, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 2, 3)));

/*
 * A flag's number within [lo, hi] ((lo, hi] if lo_open); a bad one is
 * logged by medha_flag_i64/f64 ("FLAG ARG: not in [lo, hi]") and exits 2.
 */
int64_t flag_i64(const char *flag, const char *arg, int64_t lo, int64_t hi);
double
flag_f64(const char *flag, const char *arg, double lo, double hi, int lo_open);

/*
 * -h: the synopsis (its text from "usage: " on, as the man page's
 * SYNOPSIS) and then each of the n lines (medha_help_print) on stdout.
 * Exits 0, or 1 after logging why stdout failed.
 */
void help_exit(const char *synopsis, const struct medha_help *lines, size_t n)
    __attribute__((noreturn));
#define HELP_EXIT(synopsis, lines) \
	help_exit((synopsis), (lines), sizeof(lines) / sizeof((lines)[0]))

/* A usage error: the synopsis alone on stderr; exits 2. */
void usage_exit(const char *synopsis) __attribute__((noreturn));
/* The same after logging the reason, fmt. */
void usage_fail(const char *synopsis, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 2, 3)));

/*
 * Opens path for writing ("-" or NULL: stdout, which is not reopened).
 * With w not NULL, *w is a writer on it, compressed if the name ends in
 * ".zst". Returns the FILE, or NULL after logging why (nothing is left
 * open).
 */
FILE *out_open(const char *path, struct medha_writer **w);
/*
 * Closes w (if not NULL) and f (if not stdout: stdout_close does that).
 * Returns 0, or -1 with errno set by the first failure; logs nothing.
 */
int out_finish(FILE *f, struct medha_writer *w);
/* out_finish that logs "PATH: write error: REASON"; returns 0 or 1. */
int out_close(const char *path, FILE *f, struct medha_writer *w);
/*
 * The last thing main does: closes stdout. A write error on it (now, or
 * one before that left its error flag) is logged and turns status 0
 * into 1; returns the exit status.
 */
int stdout_close(int status);

/*
 * A server's stop: after catch_stop(), SIGTERM and SIGINT set
 * stop_requested (the flag its run loop polls) and SIGPIPE is ignored
 * (a peer gone is an error return, not the end of the process).
 */
extern volatile sig_atomic_t stop_requested;
void catch_stop(void);

/* A progress line on stderr, "\rPROG: " and fmt; the caller checks that
 * stderr is a terminal and ends the line. */
void progress(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Online CPUs, at least 1 and below max (1 if sysconf cannot say). */
int online_cpus(int max);

/*
 * SplitMix64 (Steele, Lea and Flood): the next of the sequence that the
 * state *x steps through; seeds xoshiro and draws test batches.
 */
uint64_t splitmix64(uint64_t *x);

/* medha-sched --sim: the whole trace at path (NULL or "-": stdin), the
 * prompt texts dropped; exits 1 on bad input. */
struct medha_reqspec;
struct medha_reqspec *read_trace_all(const char *path, size_t *np);

/*
 * The runtime predictor's device (sched/pred.h: "a100", "h100", "h200")
 * that CUDA device `device` is, read from its name, which name (len
 * bytes) gets ("" when there is no such device); NULL for a GPU the
 * predictor does not know, no device, or a build without CUDA.
 */
const char *cuda_gpu_name(int device, char *name, size_t len);

/*
 * The links' credential (net/auth.h), for the programs that listen or
 * dial: --secret-file FILE and --insecure. LINK_LONGOPTS go in the
 * struct option table, LINK_HELP among the -h lines; the getopt loop
 * hands both options to link_flag(); link_auth() then loads the secret
 * (the flag's file, else $MEDHA_SECRET_FILE; none without either) and
 * exits 1 when the file will not do.
 */
#define OPT_SECRET 0x5ec0
#define OPT_INSECURE 0x5ec1
#define LINK_LONGOPTS                                             \
	{"secret-file", required_argument, NULL, OPT_SECRET},      \
	    {"insecure", no_argument, NULL, OPT_INSECURE}
#define LINK_HELP                                                   \
	{"--secret-file FILE",                                       \
	    "the shared secret of every link ($MEDHA_SECRET_FILE)"}, \
	    {"--insecure", "listen on a non-loopback tcp address without one"}
void link_flag(int opt, const char *arg);
void link_auth(void);

#endif
