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

/*
 * cap.c: --max-tokens-policy, the max_tokens a request is written with
 * against its real length (output_tokens, else max_tokens).
 */
enum { CAP_ACTUAL = 0, CAP_CONTEXT, CAP_FIXED };
struct cap_policy {
	int kind;        /* CAP_*: the real length (default), context
	                    minus prompt, a fixed cap */
	int64_t cap;     /* CAP_FIXED: the cap, tokens */
	int64_t context; /* CAP_CONTEXT: the model's context, tokens */
};
/* --max-tokens-policy arg into *p; exits 2 on a bad one. */
void cap_parse(struct cap_policy *p, const char *arg);
/* --context arg: tokens, or a model (sched/pred.h's names, or a GGUF
 * file) whose context length is taken; exits 2 if neither. */
int64_t cap_context(const char *arg);
/* The flags together (context: --context's, 0 if not given); exits 2 if
 * the context policy lacks a context or a context has no use. */
void cap_check(const struct cap_policy *p, int64_t context);
/* rs's max_tokens by p and its output_tokens the real length within it
 * (0 where equal). Returns 0, or MEDHA_ERANGE (logged,
 * naming the request) for a request the context policy cannot cap. */
int cap_apply(const struct cap_policy *p, struct medha_reqspec *rs);

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
