/*
 * greet.c: HELLO with a backoff (greet.h).
 */
#include "net/greet.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

double
medha_backoff_refused(struct medha_backoff *b, const char *why)
{
	double now = medha_now();
	int same = b->n > 0 && strcmp(b->last, why) == 0;

	if (!same) { /* a new run: said at once, at error level */
		b->first = now;
		b->n = 0;
		b->wait = 0;
		snprintf(b->last, sizeof(b->last), "%s", why);
		medha_log(MEDHA_LOG_ERROR, "%s", why);
		b->said = now;
	}
	b->n++;
	if (same && now - b->said >= MEDHA_GREET_SAY) {
		medha_log(MEDHA_LOG_WARN, "%lld times in %.0f s: %s",
		    (long long)b->n, now - b->first, why);
		b->said = now;
	}
	b->wait = b->wait <= 0 ? MEDHA_GREET_MIN : 2 * b->wait;
	if (b->wait > MEDHA_GREET_MAX)
		b->wait = MEDHA_GREET_MAX;
	return b->wait;
}

void
medha_backoff_sleep(double s, volatile sig_atomic_t *stop)
{
	double until = medha_now() + s;

	while (!*stop && medha_now() < until) {
		double d = until - medha_now();
		usleep((useconds_t)((d < 0.1 ? d : 0.1) * 1e6));
	}
}

int
medha_cli_greet(struct medha_cli *c, const struct medha_msg *m,
    struct medha_msg *rep, const char *addr, int forever,
    volatile sig_atomic_t *stop, char *why, size_t whylen)
{
	struct medha_backoff b;
	char msg[512];
	double since = 0, said = 0;
	int rc;

	memset(&b, 0, sizeof(b));
	while (!*stop) {
		int final = 0, code = MEDHA_EINVAL;
		rc = medha_cli_msg(c, 0, m, rep, MEDHA_PROTO_DEAD_MS / 1e3, msg,
		    sizeof(msg));
		if (rc != 0 && rc != MEDHA_EAUTH) { /* no answer: wait on */
			double now = medha_now();
			/* on a fresh connection: one kept through a
			   partition would hold the next HELLO, or its
			   WELCOME, for as long as TCP backs off */
			if (rc == MEDHA_ETIMEOUT)
				(void)medha_cli_redial(c);
			if (since == 0)
				since = now;
			if (said == 0 || now - said >= MEDHA_GREET_SAY) {
				medha_log(MEDHA_LOG_WARN,
				    "no scheduler at %s yet (%s): waiting "
				    "(%.0f s)",
				    addr, msg, now - since);
				said = now;
			}
			continue;
		}
		since = 0;
		if (rc == MEDHA_EAUTH) {
			char saw[sizeof(msg)];
			final = 1;
			code = MEDHA_EAUTH;
			/* what the handshake saw (net/link_auth.c): another
			   secret, none, or an answer that is no handshake's */
			snprintf(saw, sizeof(saw), "%s", msg);
			snprintf(msg, sizeof(msg), "refused by %s: the "
			    "handshake of the shared secret failed: %.400s",
			    addr, saw);
		} else if (rep->type == MEDHA_MSG_WELCOME) {
			return 0;
		} else {
			final = rep->type == MEDHA_MSG_ERROR &&
			    (rep->error.code == MEDHA_EINVAL ||
			        rep->error.code == MEDHA_EUNSUP);
			if (rep->type == MEDHA_MSG_ERROR)
				snprintf(msg, sizeof(msg), "refused by %s: %s",
				    addr, rep->error.reason);
			else
				snprintf(msg, sizeof(msg), "refused by %s: HELLO "
				    "answered with %s", addr,
				    medha_msg_type_name(rep->type));
			medha_msg_clear(rep);
		}
		double wait = medha_backoff_refused(&b, msg);
		if (final && !forever &&
		    medha_now() - b.first >= MEDHA_GREET_GIVE_UP)
			return medha_why(why, whylen, code,
			    "%s: still refused after %.0f s (%lld tries); "
			    "retrying cannot change it (--retry-forever "
			    "would)",
			    msg, medha_now() - b.first, (long long)b.n);
		medha_backoff_sleep(wait, stop);
	}
	return 1;
}
