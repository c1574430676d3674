/*
 * cap.c: the client's cap against the real length, for "gen" and
 * "convert" (medha-trace(1), "Output lengths"). A request's real length
 * is its output_tokens, else its max_tokens (a trace that says one
 * length says the real one); --max-tokens-policy picks the max_tokens it
 * is written with: the real length (actual), what the model's context
 * leaves after the prompt (context), or a fixed cap N, the real length
 * then truncated to the cap as a client of the model would see it.
 * output_tokens is written where it differs from max_tokens.
 */
#include "medha-trace.h"
#include "sched/pred.h"

#include <string.h>

int64_t
cap_context(const char *arg)
{
	struct medha_pred_model m;
	char why[256];
	int64_t n;
	int rc;

	if (medha_parse_i64(arg, 1, MEDHA_TOKENS_MAX, &n) == 0)
		return n;
	if ((rc = medha_model_resolve_why(arg, &m, why, sizeof(why))) != 0)
		die(2,
		    "--context %s: not a number of tokens in [1, %lld], nor "
		    "a model: %s",
		    arg, (long long)MEDHA_TOKENS_MAX,
		    why[0] != '\0' ? why : medha_strerror(rc));
	if (m.c.ctx_len <= 0 || m.c.ctx_len > MEDHA_TOKENS_MAX)
		die(2,
		    "--context %s: the model does not say its context "
		    "length; give it in tokens",
		    arg);
	return m.c.ctx_len;
}

void
cap_parse(struct cap_policy *p, const char *arg)
{
	memset(p, 0, sizeof(*p));
	if (strcmp(arg, "actual") == 0)
		p->kind = CAP_ACTUAL;
	else if (strcmp(arg, "context") == 0)
		p->kind = CAP_CONTEXT;
	else {
		p->kind = CAP_FIXED;
		if (medha_parse_i64(arg, 0, MEDHA_TOKENS_MAX, &p->cap) != 0)
			die(2,
			    "--max-tokens-policy %s: not actual, context "
			    "or a number of tokens in [0, %lld]",
			    arg, (long long)MEDHA_TOKENS_MAX);
	}
}

void
cap_check(const struct cap_policy *p, int64_t context)
{
	if (p->kind == CAP_CONTEXT && context == 0)
		die(2,
		    "--max-tokens-policy context needs --context (tokens "
		    "or a model)");
	if (p->kind != CAP_CONTEXT && context != 0)
		die(2, "--context goes with --max-tokens-policy context");
}

int
cap_apply(const struct cap_policy *p, struct medha_reqspec *rs)
{
	int64_t real =
	    rs->output_tokens > 0 ? rs->output_tokens : rs->max_tokens;
	int64_t cap = real;

	switch (p->kind) {
	case CAP_CONTEXT:
		if (rs->prompt_tokens == 0) {
			medha_log(MEDHA_LOG_ERROR,
			    "request %s: a text prompt of no known length: "
			    "the context policy needs prompt_tokens",
			    rs->id);
			return MEDHA_ERANGE;
		}
		cap = p->context - rs->prompt_tokens;
		if (cap < 1) {
			medha_log(MEDHA_LOG_ERROR,
			    "request %s: its %lld prompt tokens leave no room "
			    "in a context of %lld",
			    rs->id, (long long)rs->prompt_tokens,
			    (long long)p->context);
			return MEDHA_ERANGE;
		}
		break;
	case CAP_FIXED: cap = p->cap; break;
	default: break;
	}
	if (real == 0) /* output_tokens cannot say 0: kept as max_tokens */
		cap = 0;
	rs->max_tokens = cap;
	rs->output_tokens = real < cap ? real : 0; /* 0: max_tokens */
	return 0;
}
