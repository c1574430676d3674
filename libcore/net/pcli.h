/*
 * pcli.h: the client side of the wire protocol (man/medha-proto.7),
 * written once and asynchronous: SUBMIT, CANCEL and STATUS calls and a
 * POLL kept outstanding, each call on an nng context of its own driven
 * by aio callbacks, so that no call waits behind another (a 16 MB
 * prompt's SUBMIT does not hold a short one back, nor a CANCEL). The
 * client owns what every caller of the protocol needs and no caller
 * writes again: which answer is for which request (the caller names
 * each SUBMIT with a cookie), and the events that arrive before their
 * request's ACCEPTED (SUBMIT and POLL are two calls on two contexts;
 * such events wait here and are handed out right after the ACCEPTED,
 * in order; one that no SUBMIT in flight can claim is dropped, and the
 * request cancelled, unless it is its record).
 *
 * What comes back is taken from one queue, by one thread of the
 * caller's (medha_pcli_take), so that the caller's state needs no lock
 * against the client's threads; a notify callback, if given, is called
 * (from nng's threads) whenever something is queued.
 *
 *	struct medha_pcli *p;
 *	struct medha_pcli_out o;
 *	medha_pcli_open(&p, "ipc:///tmp/medha.sock", NULL, NULL, why, n);
 *	medha_pcli_submit(p, &spec, 1, 3.0, why, n);
 *	while (medha_pcli_take(p, 1.0, &o) >= 0) {
 *		if (o.kind == MEDHA_PCLI_EVENT && o.ev.kind ==
 *		    MEDHA_EVENT_RECORD)
 *			... the record of request o.cookie
 *		medha_pcli_out_clear(&o);
 *	}
 *	medha_pcli_close(p);
 */
#ifndef MEDHA_NET_PCLI_H
#define MEDHA_NET_PCLI_H

#include "net/proto.h"

#include <stdint.h>

struct medha_pcli;

enum medha_pcli_kind {
	MEDHA_PCLI_ACCEPTED = 1, /* a SUBMIT accepted: cookie, handle */
	MEDHA_PCLI_REFUSED,      /* a SUBMIT not accepted: cookie; rc and
	                            why, or (rc 0) the answer in msg (an
	                            ERROR, or another type) */
	MEDHA_PCLI_EVENT,        /* an accepted request's event: cookie,
	                            handle, ev (its record ends it) */
	MEDHA_PCLI_STATUS,       /* a STATUS call's answer: msg (rc 0), or
	                            rc and why */
	MEDHA_PCLI_ANSWER,       /* a medha_pcli_call's answer: cookie, and
	                            msg (rc 0), or rc and why */
};

struct medha_pcli_out {
	int kind;        /* MEDHA_PCLI_* */
	uint64_t cookie; /* the caller's name for the request */
	uint64_t handle; /* the server's, once accepted */
	uint64_t epoch;  /* ACCEPTED: the connection's epoch
	                    (medha_pcli_epoch) it was sent and answered in */
	int rc;          /* the call's error (MEDHA_E*), or 0 */
	char why[256];   /* rc's reason */
	struct medha_msg msg;      /* owned: the answer, as above (an
	                              ACCEPTED's too) */
	struct medha_msg_event ev; /* owned: MEDHA_PCLI_EVENT's event */
	struct medha_pcli_out *next; /* the client's queue */
};

/*
 * Dial url (ipc://, tcp:// or inproc://; with the shared secret of
 * net/auth.h when one is set) and keep a POLL outstanding from now on;
 * the dialer retries in the background, so the server may start later.
 * A POLL unanswered for MEDHA_PROTO_DEAD_MS drops the connection and
 * dials a fresh one (medha_pcli_redials).
 * notify(arg), if not NULL, is called from the client's threads each
 * time something is queued for medha_pcli_take (it must not call into
 * the client). Returns 0, MEDHA_EINVAL (a bad url) or MEDHA_ENOMEM,
 * with why.
 */
int medha_pcli_open(struct medha_pcli **p, const char *url,
    void (*notify)(void *), void *arg, char *why, size_t whylen);

/*
 * Event ev of the server's request ev->handle (taken over: *ev is
 * zeroed), handed over by a server in this process rather than in a
 * POLL's answer, so that it is not encoded and decoded again inside one
 * process (serve/router.h, medha_router_local): it goes to its request
 * as a POLL's would, or waits for its ACCEPTED. Any thread but the
 * notify callback's; dropped once the client is closing.
 */
void medha_pcli_deliver(struct medha_pcli *p, struct medha_msg_event *ev);

/*
 * Stop every call (no answer is queued for them any more) and free the
 * client, and what is queued and not taken. Events still waiting for
 * an ACCEPTED are logged and dropped.
 */
void medha_pcli_close(struct medha_pcli *p);

/*
 * SUBMIT rs (only read: it may be freed on return) as request cookie
 * (!= 0, the caller's, unique among its requests in flight): sent at
 * once, its answer queued within timeout seconds (a REFUSED with
 * MEDHA_ETIMEOUT after that) as ACCEPTED or REFUSED, then the
 * request's events until its record. A SUBMIT's ACCEPTED that comes
 * on a connection other than the one it was sent on is a REFUSED
 * (MEDHA_EPEER): the server forgot the request with the connection.
 * Returns 0, or MEDHA_EINVAL (rs cannot be encoded: nothing is sent)
 * or MEDHA_ENOMEM, with why.
 */
int medha_pcli_submit(struct medha_pcli *p, const struct medha_reqspec *rs,
    uint64_t cookie, double timeout, char *why, size_t whylen);

/* CANCEL the request of the server's handle; its answer is not queued
 * (the record, if the request was live, is). */
void medha_pcli_cancel(struct medha_pcli *p, uint64_t handle);

/* Ask for STATUS; the answer is queued (MEDHA_PCLI_STATUS) within
 * timeout seconds. */
void medha_pcli_status(struct medha_pcli *p, double timeout);

/*
 * Any other client message m (CANCEL, STATUS, or one a test makes up;
 * not SUBMIT or POLL, which the client keeps to itself), its answer
 * queued as MEDHA_PCLI_ANSWER with cookie, within timeout seconds.
 * Returns 0, or MEDHA_EINVAL (m cannot be encoded, or is a SUBMIT or
 * POLL) or MEDHA_ENOMEM, with why.
 */
int medha_pcli_call(struct medha_pcli *p, const struct medha_msg *m,
    uint64_t cookie, double timeout, char *why, size_t whylen);

/*
 * The next thing queued into *o (the caller's, for
 * medha_pcli_out_clear), waiting up to timeout seconds (0: not at
 * all). Returns 1, or 0 when there was nothing.
 */
int medha_pcli_take(struct medha_pcli *p, double timeout,
    struct medha_pcli_out *o);
void medha_pcli_out_clear(struct medha_pcli_out *o);

/* medha_now() of the server's last answer (any, a keep-alive too), or
 * 0 before the first. */
double medha_pcli_last_ok(struct medha_pcli *p);
/* Connections to the server lost so far (medha_cli_epoch). */
uint64_t medha_pcli_epoch(struct medha_pcli *p);
/* Times the POLL went unanswered for MEDHA_PROTO_DEAD_MS and the
 * client dropped the connection and dialled a fresh one (a partition
 * leaves TCP retrying a dead one for minutes; medha_cli_redial). */
uint64_t medha_pcli_redials(struct medha_pcli *p);
/* 1 if connected now. */
int medha_pcli_connected(struct medha_pcli *p);
/* Events waiting for an ACCEPTED now, and those dropped so far, for
 * logs and tests. */
int64_t medha_pcli_early(struct medha_pcli *p, int64_t *dropped);

#endif
