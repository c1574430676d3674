/*
 * hello.h: a live worker's registration with its scheduler (hello.c):
 * a warm-up forward before it first says anything, the HELLO that
 * describes it (backend, model and fingerprint, layout, KV block size
 * and count, where its peers reach it), and HELLO said until the
 * scheduler's WELCOME gives it its id. Calls net/ and the backend, and
 * reads the peers' address (peers.h). Not for use outside
 * serve/worker/.
 *
 *	wk_hello_warm_up(be);
 *	wk_hello_of(&h, &config, be, &peers, fingerprint);
 *	if (wk_hello_say(cli, &h, addr, forever, &stop, &id, why,
 *	    whylen) != 0) (stopping, or refused for good)
 */
#ifndef MEDHA_WK_HELLO_H
#define MEDHA_WK_HELLO_H

#include "serve/worker/peers.h"
#include "net/link.h"
#include "net/proto.h"

#include <signal.h>

/* One forward of a few tokens on a sequence of its own, freed after. */
void wk_hello_warm_up(struct medha_backend *be);
/* *h: the HELLO of a worker on be configured by c, with peers p and
 * the model's fingerprint fp (medha_model_fingerprint). */
void wk_hello_of(struct medha_msg_hello *h,
    const struct medha_worker_config *c, const struct medha_backend *be,
    const struct wk_peers *p, const char *fp);
/*
 * Say HELLO h on link cli (context 0) until the scheduler at addr
 * answers WELCOME (*id gets the worker id it gives) or *stop is set;
 * refusals back off (net/greet.h). 0, 1 when stopping, or MEDHA_EAUTH /
 * MEDHA_EINVAL with why when refused for good (never when forever).
 */
int wk_hello_say(struct medha_cli *cli, const struct medha_msg_hello *h,
    const char *addr, int forever, volatile sig_atomic_t *stop, int *id,
    char *why, size_t whylen);

#endif
