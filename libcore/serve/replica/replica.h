/*
 * replica.h: a live replica's scheduler: the scheduler core (sched.h)
 * on the monotonic clock, behind the wire protocol (net/proto.h) on one
 * listening socket (net/link.h) that clients and workers both dial.
 *
 * Workers introduce themselves (HELLO) and the replica takes from them
 * what the core must agree on: the KV block size and count, how many
 * sequences a worker holds, the model (for the predictor and, with a
 * GGUF, the tokenizer) and the device the predictor models ("cpu" is
 * measured on this machine). Once all its workers are there it is
 * ready: clients SUBMIT requests (text, token ids, or a length for a
 * made-up prompt), POLL for their tokens and final records, and CANCEL.
 * Each formed batch goes to the worker that asked for work (READY or
 * RESULT held until there is one), and the tokens it samples come back
 * to the core as per-item results: end-of-generation and stop strings
 * end a request there. A client that goes away has its requests
 * cancelled; a worker that goes away (its connection closes, or it is
 * silent past MEDHA_PROTO_DEAD_MS) fails every request holding KV, and
 * the replica serves again when a worker with the same shape returns.
 * Every request ends with exactly one record.
 *
 *	struct medha_replica *r;
 *	struct medha_replica_config c;
 *	medha_replica_config_default(&c);
 *	c.listen = "ipc:///tmp/medha.sock";
 *	if (medha_replica_open(&r, &c, why, sizeof(why)) != 0) ...
 *	rc = medha_replica_run(r, &stop_flag);	(until *stop_flag, drained)
 *	medha_replica_close(r);
 */
#ifndef MEDHA_REPLICA_H
#define MEDHA_REPLICA_H

#include "medha.h"
#include "sched/sched.h"

#include <signal.h>

struct medha_replica_config {
	const char *listen;              /* url to listen at */
	int workers;                     /* workers the replica waits for (1) */
	struct medha_sched_config sched; /* policy and chunking; block size,
	                                    KV blocks and max_seqs come from
	                                    the workers */
	const char *model;     /* GGUF for the tokenizer and predictor; NULL:
	                          the path the worker announces (NULL) */
	const char *predictor; /* measured profile (medha-profile(5)) or NULL */
	int cpu_threads; /* threads the "cpu" device is measured with (2) */
	int target_auto; /* raise sched.target to twice the predicted
	                    time of a 32-token chunk alone when that is
	                    more, so prefills can join running decodes
	                    on a slow device (1) */
	double drain_timeout; /* s a stop waits for requests in flight (30) */
	int64_t max_queue;    /* requests in flight at most; more are
	                         refused (100000) */
	int64_t max_queue_bytes; /* bytes of prompt ids held for requests
	                            in flight at most; more are refused
	                            (1 GiB; a made-up prompt holds none) */
};

void medha_replica_config_default(struct medha_replica_config *c);

struct medha_replica;

/*
 * Listen at c->listen. On success *r is the caller's, for
 * medha_replica_close(). Returns 0, MEDHA_EINVAL, MEDHA_EIO (cannot
 * listen) or MEDHA_ENOMEM, with why.
 */
int medha_replica_open(struct medha_replica **r,
    const struct medha_replica_config *c, char *why, size_t whylen);

/*
 * Serve until *stop becomes non-zero; then refuse new requests, let
 * those in flight finish for up to drain_timeout seconds, cancel the
 * rest, give clients a moment to collect their records, and return 0
 * (or MEDHA_ENOMEM if it had to give up).
 */
int medha_replica_run(struct medha_replica *r, volatile sig_atomic_t *stop);

void medha_replica_close(struct medha_replica *r);

#endif
