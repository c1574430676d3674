/*
 * medha-trace.h: what the subcommands of medha-trace share: their entry
 * points, usage() and help(), and opening and closing an output file
 * (".zst" names are compressed). Only this program includes it.
 */
#ifndef MEDHA_TRACE_CMD_H
#define MEDHA_TRACE_CMD_H

#include "io/trace.h"

/* Each takes the arguments after the subcommand name (argv[0] is the
 * subcommand) and returns the exit status. */
int trace_gen(int argc, char *argv[]);
int trace_convert(int argc, char *argv[]);
int trace_report(int argc, char *argv[]);
int trace_replay(int argc, char *argv[]);

/* Prints the synopsis to stdout (status 0) or stderr and exits. */
void usage(int status) __attribute__((noreturn));

/*
 * -h of subcommand sub: prints its synopsis and then each of the n lines to
 * stdout and exits 0 (1 if stdout fails).
 */
void help(const char *sub, const struct medha_help *lines, size_t n)
    __attribute__((noreturn));
#define HELP(sub, lines) help(sub, lines, sizeof(lines) / sizeof(lines[0]))
/*
 * A flag's number within [lo, hi] ((lo, hi] if lo_open); a bad one is
 * logged and exits 2.
 */
double
flag_f64(const char *flag, const char *arg, double lo, double hi, int lo_open);
int64_t flag_i64(const char *flag, const char *arg, int64_t lo, int64_t hi);

/*
 * Opens path ("-" or NULL: stdout) for writing through *w, compressed if
 * the name ends in ".zst". Returns the FILE or NULL after logging why.
 */
FILE *out_open(const char *path, struct medha_writer **w);
/* Closes both (not stdout; main checks it); returns 0 or 1 after logging. */
int out_close(const char *path, FILE *f, struct medha_writer *w);

#endif
