/*
 * slow_sched.c: a scripted scheduler that is slow to accept, to pin down
 * how medha-trace replay submits a burst (cmd/medha-trace/replay.c): a
 * replica busy computing may take milliseconds to answer each SUBMIT,
 * and requests due at the same time must still arrive together, not
 * each one an answer after the one before.
 *
 * usage: slow_sched ADDR N DELAY_MS
 *
 * Listens at ADDR, says it is ready (STATUS), holds every SUBMIT for
 * DELAY_MS before answering ACCEPTED, answers POLLs with a record for
 * each accepted request (held up to 100 ms while there is none), and
 * after N records prints
 *
 *	spread MS
 *
 * the time from the first SUBMIT to the N-th, and exits 0; 1 on an
 * unexpected message or after 30 s. One after another, the N-th would
 * come (N - 1) * DELAY_MS after the first.
 */
#include "net/link.h"
#include "net/proto.h"
#include "req.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_N 64

struct sub {
	struct medha_srv_call *call; /* held; NULL once answered */
	double at;
	char id[MEDHA_ID_MAX];
	int told; /* its record went out */
};

/* Answer a held POLL with the records not yet told; 1 if it was. */
static int
tell(struct medha_srv *s, struct medha_srv_call *poll, struct sub *sub, int n,
    int *told)
{
	static struct medha_record rec[MAX_N];
	static struct medha_msg_event ev[MAX_N];
	struct medha_msg out = {.type = MEDHA_MSG_EVENTS};
	int k = 0;

	for (int i = 0; i < n; i++) {
		if (sub[i].call != NULL || sub[i].told)
			continue;
		memset(&rec[k], 0, sizeof(rec[k]));
		snprintf(rec[k].id, sizeof(rec[k].id), "%s", sub[i].id);
		rec[k].arrival = rec[k].first_token = rec[k].finish = sub[i].at;
		rec[k].prompt_tokens = 1;
		rec[k].status = MEDHA_STATUS_OK;
		ev[k] = (struct medha_msg_event){.kind = MEDHA_EVENT_RECORD,
		    .handle = (uint64_t)i + 1,
		    .record = &rec[k]};
		sub[i].told = 1;
		k++;
	}
	if (k == 0)
		return 0;
	out.events.ev = ev;
	out.events.n = k;
	medha_srv_msg(s, poll, &out);
	*told += k;
	return 1;
}

int
main(int argc, char **argv)
{
	struct medha_srv *s;
	struct medha_srv_ev ev;
	struct medha_srv_call *poll = NULL;
	struct sub sub[MAX_N];
	struct medha_msg m, out;
	double delay, t0 = medha_now(), poll_since = 0;
	char why[512];
	int n, nsub = 0, told = 0;

	if (argc != 4 || (n = atoi(argv[2])) < 1 || n > MAX_N ||
	    (delay = atof(argv[3]) / 1e3) <= 0) {
		fprintf(stderr, "usage: slow_sched ADDR N DELAY_MS\n");
		return 2;
	}
	if (medha_srv_open(&s, argv[1], why, sizeof(why)) != 0) {
		fprintf(stderr, "slow_sched: %s\n", why);
		return 1;
	}
	memset(sub, 0, sizeof(sub));
	while (told < n) {
		if (medha_now() - t0 > 30) {
			fprintf(stderr, "slow_sched: %d of %d records after "
			                "30 s\n",
			    told, n);
			return 1;
		}
		/* the SUBMITs held long enough, and a POLL waiting */
		for (int i = 0; i < nsub; i++)
			if (sub[i].call != NULL &&
			    medha_now() - sub[i].at >= delay) {
				memset(&out, 0, sizeof(out));
				out.type = MEDHA_MSG_ACCEPTED;
				snprintf(out.accepted.id,
				    sizeof(out.accepted.id), "%s", sub[i].id);
				out.accepted.handle = (uint64_t)i + 1;
				medha_srv_msg(s, sub[i].call, &out);
				sub[i].call = NULL;
			}
		if (poll != NULL) {
			if (tell(s, poll, sub, nsub, &told))
				poll = NULL;
			else if (medha_now() - poll_since > 0.1) {
				memset(&out, 0, sizeof(out));
				out.type = MEDHA_MSG_EVENTS;
				medha_srv_msg(s, poll, &out);
				poll = NULL;
			}
		}
		if (medha_srv_next(s, 0.002, &ev) != 0 ||
		    ev.kind != MEDHA_SRV_CALL)
			continue;
		if (medha_msg_decode(&m, ev.data, ev.len, why, sizeof(why)) !=
		    0) {
			fprintf(stderr, "slow_sched: %s\n", why);
			return 1;
		}
		memset(&out, 0, sizeof(out));
		switch (m.type) {
		case MEDHA_MSG_STATUS:
			out.type = MEDHA_MSG_STATUS_REPLY;
			out.status.workers = out.status.workers_wanted = 1;
			out.status.ready = 1;
			medha_srv_msg(s, ev.call, &out);
			break;
		case MEDHA_MSG_SUBMIT:
			if (nsub == MAX_N) {
				fprintf(stderr, "slow_sched: more than %d "
				                "requests\n",
				    MAX_N);
				return 1;
			}
			sub[nsub].call = ev.call;
			sub[nsub].at = medha_now();
			snprintf(sub[nsub].id, sizeof(sub[nsub].id), "%s",
			    m.submit.id);
			nsub++;
			break;
		case MEDHA_MSG_POLL:
			if (poll != NULL) { /* a second: the first ends */
				memset(&out, 0, sizeof(out));
				out.type = MEDHA_MSG_EVENTS;
				medha_srv_msg(s, poll, &out);
			}
			poll = ev.call;
			poll_since = medha_now();
			break;
		default:
			fprintf(stderr, "slow_sched: unexpected %s\n",
			    medha_msg_type_name(m.type));
			return 1;
		}
		medha_msg_clear(&m);
	}
	printf("spread %.1f\n", (sub[n - 1].at - sub[0].at) * 1e3);
	fflush(stdout);
	usleep(200000); /* the last answers on their way */
	medha_srv_close(s);
	return 0;
}
