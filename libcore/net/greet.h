/*
 * greet.h: saying HELLO to a server that may refuse it (issue 39). A
 * worker greets its scheduler with medha_cli_greet(), which retries a
 * refusal the way a refused client should:
 *  - with a wait that doubles from MEDHA_GREET_MIN to MEDHA_GREET_MAX
 *    seconds between tries (a worker without the secret spun at once
 *    before, taking half a core, and a third of the scheduler's);
 *  - saying why at error level once, then (the same reason) at most
 *    every MEDHA_GREET_SAY seconds with the count, and again at once
 *    when the reason changes;
 *  - ending with an error after MEDHA_GREET_GIVE_UP seconds of refusals
 *    that no retry can change (the server wants another secret or none:
 *    MEDHA_EAUTH; it refused the HELLO as not its model, layout or
 *    backend: ERROR with MEDHA_EINVAL or MEDHA_EUNSUP), unless told to
 *    go on for ever (medha-worker --retry-forever: a scheduler being
 *    restarted with the right flags is then waited for).
 * A server that does not answer at all is not a refusal: it is waited
 * for (and said every MEDHA_GREET_SAY seconds) as before.
 */
#ifndef MEDHA_NET_GREET_H
#define MEDHA_NET_GREET_H

#include "net/link.h"
#include "net/proto.h"

#include <signal.h>

#define MEDHA_GREET_MIN 0.1      /* s: the first wait after a refusal */
#define MEDHA_GREET_MAX 5.0      /* s: the longest */
#define MEDHA_GREET_SAY 30.0     /* s between lines on the same refusal */
#define MEDHA_GREET_GIVE_UP 10.0 /* s of final refusals, then an error */

/* The state of a run of refusals (zeroed: none yet). */
struct medha_backoff {
	double wait;  /* s before the next try */
	double first; /* medha_now() of the run's first refusal, or 0 */
	double said;  /* of its last line */
	int64_t n;    /* refusals in the run */
	char last[256];
};

/*
 * One refusal, why (the whole line): said as above, at error level when
 * it is new, then as "N times in S s: why" every MEDHA_GREET_SAY s;
 * returns the seconds to wait before the next try. A server uses it
 * too, for the line alone (medha-sched's "worker refused").
 */
double medha_backoff_refused(struct medha_backoff *b, const char *why);
/* Wait s seconds, in steps of 0.1 s, less if *stop becomes non-zero. */
void medha_backoff_sleep(double s, volatile sig_atomic_t *stop);

/*
 * Send HELLO m through c (context 0) until it is answered WELCOME: 0
 * and the WELCOME in *rep (the caller's, for medha_msg_clear); 1 when
 * *stop became non-zero; MEDHA_EAUTH or MEDHA_EINVAL after
 * MEDHA_GREET_GIVE_UP seconds of final refusals (never when forever),
 * with why. addr names the server in the lines said.
 */
int medha_cli_greet(struct medha_cli *c, const struct medha_msg *m,
    struct medha_msg *rep, const char *addr, int forever,
    volatile sig_atomic_t *stop, char *why, size_t whylen);

#endif
