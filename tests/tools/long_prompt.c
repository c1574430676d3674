/*
 * long_prompt.c: a client of the protocol (net/pcli.h) for
 * tests/sh/router-long-prompt.sh. Usage: long_prompt ADDR BYTES [--ack].
 *
 * With --ack: a text prompt of BYTES bytes alone; printed, "ack", the
 * ms to its ACCEPTED (-1: refused) and to its record or refusal, the
 * status (1: rejected) and the reason.
 *
 * Alone: five short text requests submitted at once (twice: the
 * second round counts). Then: a long
 * request (ignore_eos, 4000 tokens) streams; a text prompt of BYTES
 * bytes is submitted on a second connection, and just after it (once
 * the router has accepted it: it is on its way to the replica) five
 * short requests at once on the first, and once they have their first
 * tokens a CANCEL of the long request (said "during" if the long
 * prompt has not ended by then). Printed, in ms: the first-token times of both
 * rounds as their records say (TTFT on the router's clock, from when
 * the router took the SUBMIT), and as this client saw them (from its
 * SUBMIT to the first token event); the time from the CANCEL to the
 * long request's record (its status "cancelled"); then, if the long
 * prompt has not ended (said "during"), a CANCEL of it and the time to
 * its record ("cancel_long"); and how the long prompt ended. Exit 0 when every request ended as said, else 1 (the
 * test judges the times).
 */
#include "net/pcli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NSHORT 5

struct req {
	uint64_t handle;
	double ttft; /* its record's: the router's clock */
	double sent, acc, first, end;
	int status; /* its record's, or -1 */
	char reason[256];
};

static struct medha_pcli *pc, *pc2; /* pc2: the long prompt's */
static struct req rq[64]; /* by cookie */

static void
submit(uint64_t cookie, const char *text, int64_t max_tokens, int ignore_eos)
{
	struct medha_reqspec rs;
	char why[256];

	memset(&rs, 0, sizeof(rs));
	snprintf(rs.id, sizeof(rs.id), "q%llu", (unsigned long long)cookie);
	rs.prompt = (char *)text;
	rs.max_tokens = max_tokens;
	rs.ignore_eos = ignore_eos;
	rs.sampling = medha_sampling_greedy;
	rq[cookie].status = -1;
	rq[cookie].sent = medha_now();
	if (medha_pcli_submit(pc, &rs, cookie, 30, why, sizeof(why)) != 0) {
		fprintf(stderr, "long_prompt: submit: %s\n", why);
		exit(1);
	}
}

/* Take what comes for up to s seconds, or until cond() holds. */
static void
pump(double s, int (*cond)(void))
{
	double until = medha_now() + s;
	struct medha_pcli_out o;

	while (!(cond != NULL && cond()) && medha_now() < until) {
		if (!medha_pcli_take(pc, 0.01, &o))
			continue;
		struct req *q = o.cookie < 64 ? &rq[o.cookie] : NULL;
		double t = medha_now();
		if (q == NULL) {
		} else if (o.kind == MEDHA_PCLI_ACCEPTED) {
			q->handle = o.handle;
			q->acc = t;
			if (getenv("LP_DEBUG"))
				fprintf(stderr, "accepted q%d after %.1f ms\n",
				    (int)o.cookie, 1e3 * (t - q->sent));
		} else if (o.kind == MEDHA_PCLI_REFUSED) {
			q->status = MEDHA_STATUS_REJECTED;
			q->end = t;
			snprintf(q->reason, sizeof(q->reason), "%s",
			    o.rc != 0 ? o.why : o.msg.type == MEDHA_MSG_ERROR
			        ? o.msg.error.reason : "?");
		} else if (o.kind == MEDHA_PCLI_EVENT &&
		    o.ev.kind == MEDHA_EVENT_TOKENS && q->first == 0) {
			q->first = t;
		} else if (o.kind == MEDHA_PCLI_EVENT &&
		    o.ev.kind == MEDHA_EVENT_RECORD) {
			q->status = o.ev.record->status;
			q->ttft = o.ev.record->ttft;
			q->end = t;
			snprintf(q->reason, sizeof(q->reason), "%s",
			    o.ev.record->reason);
			if (q->first == 0 && o.ev.record->output_tokens > 0)
				q->first = t;
		}
		medha_pcli_out_clear(&o);
	}
}

/* What came for the long prompt (cookie 7, on pc2) within s seconds,
 * until it ended. */
static void
take7(double s)
{
	double until = medha_now() + s;
	struct medha_pcli_out o;

	do {
		if (!medha_pcli_take(pc2, s > 0 ? 0.01 : 0, &o))
			continue;
		if (o.kind == MEDHA_PCLI_ACCEPTED)
			rq[7].handle = o.handle;
		if (o.kind == MEDHA_PCLI_REFUSED ||
		    (o.kind == MEDHA_PCLI_EVENT &&
		        o.ev.kind == MEDHA_EVENT_RECORD)) {
			rq[7].status = o.kind == MEDHA_PCLI_REFUSED
			    ? MEDHA_STATUS_REJECTED
			    : o.ev.record->status;
			rq[7].end = medha_now();
			snprintf(rq[7].reason, sizeof(rq[7].reason), "%s",
			    o.kind == MEDHA_PCLI_REFUSED ? o.why
			                                 : o.ev.record->reason);
		}
		medha_pcli_out_clear(&o);
	} while (rq[7].status < 0 && medha_now() < until);
}

static uint64_t want; /* the cookie cond_* look at */
static int cond_first(void) { return rq[want].first > 0; }
static int cond_end(void) { return rq[want].status >= 0; }
static int
cond_firsts(void)
{
	for (uint64_t i = 8; i <= want; i++)
		if (rq[i].first == 0 && rq[i].status < 0)
			return 0;
	return 1;
}
static int
cond_all(void)
{
	for (uint64_t i = 1; i <= want; i++)
		if (i != 7 && rq[i].status < 0) /* 7's come on pc2 */
			return 0;
	return 1;
}

int
main(int argc, char *argv[])
{
	const char *shorts = "Say hello.";
	struct medha_pcli_out o;
	char why[256];
	size_t big;
	char *text;
	int bad = 0;

	if ((argc != 3 && (argc != 4 || strcmp(argv[3], "--ack") != 0)) ||
	    (big = strtoul(argv[2], NULL, 10)) < 1) {
		fprintf(stderr, "usage: long_prompt ADDR BYTES [--ack]\n");
		return 2;
	}
	if ((text = malloc(big + 1)) == NULL)
		return 1;
	for (size_t i = 0; i < big; i++)
		text[i] = "ab "[i % 3];
	text[big] = '\0';
	if (medha_pcli_open(&pc, argv[1], NULL, NULL, why, sizeof(why)) != 0 ||
	    medha_pcli_open(&pc2, argv[1], NULL, NULL, why, sizeof(why)) != 0) {
		fprintf(stderr, "long_prompt: %s\n", why);
		return 1;
	}
	for (int tries = 0;; tries++) { /* ready */
		medha_pcli_status(pc, 1);
		if (medha_pcli_take(pc, 2, &o) && o.kind == MEDHA_PCLI_STATUS &&
		    o.rc == 0 && o.msg.status.ready) {
			medha_pcli_out_clear(&o);
			break;
		}
		medha_pcli_out_clear(&o);
		if (tries == 60) {
			fprintf(stderr, "long_prompt: not ready\n");
			return 1;
		}
	}
	if (argc == 4) { /* the long prompt alone: when it is accepted */
		submit(1, text, 1, 0);
		want = 1;
		pump(60, cond_end);
		printf("ack %.1f %.1f %d %s\n",
		    rq[1].acc > 0 ? 1e3 * (rq[1].acc - rq[1].sent) : -1,
		    1e3 * (rq[1].end - rq[1].sent), rq[1].status, rq[1].reason);
		medha_pcli_close(pc);
		medha_pcli_close(pc2);
		free(text);
		return rq[1].status < 0;
	}
	/* alone: cookies 1..5, at once; the second round counts (the
	   first warms the processes up) */
	for (int round = 0; round < 2; round++) {
		for (uint64_t c = 1; c <= NSHORT; c++) {
			memset(&rq[c], 0, sizeof(rq[c]));
			submit(c, shorts, 2, 0);
		}
		want = NSHORT;
		pump(10, cond_all);
	}
	/* the long one streams (6), then the long prompt (7), the short
	   ones (8..12) and the CANCEL of 6 */
	submit(6, shorts, 4000, 1);
	want = 6;
	pump(10, cond_first);
	double t7 = medha_now();
	struct medha_pcli *mine = pc;
	pc = pc2;
	submit(7, text, 1, 0);
	pc = mine;
	/* the router has it */
	while (rq[7].handle == 0 && rq[7].status < 0 &&
	    medha_now() < t7 + 10)
		take7(0.01);
	if (getenv("LP_DEBUG"))
		fprintf(stderr, "the long prompt accepted after %.1f ms\n",
		    1e3 * (medha_now() - t7));
	for (uint64_t c = 8; c < 8 + NSHORT; c++)
		submit(c, shorts, 2, 0);
	want = 7 + NSHORT; /* their first tokens, then the CANCEL */
	pump(10, cond_firsts);
	take7(0);
	int during = rq[7].status < 0; /* 7 not over */
	medha_pcli_cancel(pc, rq[6].handle);
	double cancel_at = medha_now();
	want = 6;
	pump(10, cond_end);
	want = 12;
	pump(30, cond_all);
	/* then the long prompt's own CANCEL, if it is not over */
	take7(0);
	int during7 = rq[7].status < 0 && rq[7].handle != 0;
	double cancel7_at = medha_now();
	if (during7)
		medha_pcli_cancel(pc2, rq[7].handle);
	take7(30); /* the long prompt's end */
	int status7 = rq[7].status;
	printf("alone");
	for (int c = 1; c <= NSHORT; c++)
		printf(" %.2f", 1e3 * rq[c].ttft);
	printf("\nafter");
	for (int c = 8; c < 8 + NSHORT; c++)
		printf(" %.2f", 1e3 * rq[c].ttft);
	printf("\nalone_client");
	for (int c = 1; c <= NSHORT; c++)
		printf(" %.2f", 1e3 * (rq[c].first - rq[c].sent));
	printf("\nafter_client");
	for (int c = 8; c < 8 + NSHORT; c++)
		printf(" %.2f", 1e3 * (rq[c].first - rq[c].sent));
	printf("\n");
	for (int c = 1; c <= 12; c++)
		if (c != 6 && c != 7 && (rq[c].status != MEDHA_STATUS_OK ||
		                            rq[c].first == 0)) {
			fprintf(stderr, "long_prompt: q%d: status %d %s\n", c,
			    rq[c].status, rq[c].reason);
			bad = 1;
		}
	printf("cancel %.2f %d %s\n", 1e3 * (rq[6].end - cancel_at),
	    rq[6].status, during ? "during" : "after");
	if (rq[6].status != MEDHA_STATUS_CANCELLED)
		bad = 1;
	printf("cancel_long %.2f %d %s\n", 1e3 * (rq[7].end - cancel7_at),
	    status7, during7 ? "during" : "after");
	printf("long %d %s\n", rq[7].status, rq[7].reason);
	medha_pcli_close(pc);
	medha_pcli_close(pc2);
	free(text);
	return bad;
}
