/*
 * medha-trace.h: what the subcommands of medha-trace share: their entry
 * points, usage() and help(), and (../common.h) what every program
 * does: flag numbers, output files, the exits. Only this program
 * includes it.
 */
#ifndef MEDHA_TRACE_CMD_H
#define MEDHA_TRACE_CMD_H

#include "../common.h"
#include "io/trace.h"

/* Each takes the arguments after the subcommand name (argv[0] is the
 * subcommand) and returns the exit status. */
int trace_gen(int argc, char *argv[]);
int trace_convert(int argc, char *argv[]);
int trace_report(int argc, char *argv[]);
int trace_replay(int argc, char *argv[]);

/* report_cache.c: the prefix cache lines of "report" (class numbers and
 * names as report.c's: all, short, long); root is its json_t. */
void report_cache_add(int cls, const struct medha_record *rec);
void report_cache_print(const char *const *names);
void report_cache_json(void *root, const char *const *names);

/* A usage error: the whole synopsis on stderr; exits 2. */
void usage(void) __attribute__((noreturn));

/*
 * -h of subcommand sub: prints its synopsis and then each of the n lines to
 * stdout and exits 0 (1 if stdout fails).
 */
void help(const char *sub, const struct medha_help *lines, size_t n)
    __attribute__((noreturn));
#define HELP(sub, lines) help(sub, lines, sizeof(lines) / sizeof(lines[0]))

#endif
