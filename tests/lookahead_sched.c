/*
 * lookahead_sched.c: a scripted scheduler for one medha-worker, to pin
 * down its lookahead (cmd/medha-worker/daemon.c) where a live scheduler
 * rarely goes: a step run ahead that the next batch does not use must
 * give back the KV block it took.
 *
 * usage: lookahead_sched ADDR
 *
 * Listens at ADDR for a worker started with --kv-blocks 2 (two blocks
 * of 16 positions), welcomes it and answers its requests:
 *   1. READY: BATCH 1, request A's prompt of 16 tokens, sampled. A holds
 *      block 0; the worker then runs A's next step (position 16) ahead,
 *      taking block 1, the last, while its RESULT travels.
 *   2. RESULT 1: BATCH 2, request B's prompt of 16 tokens alone (A is
 *      neither in it nor freed). The step run ahead is not used: the
 *      worker must cut A back to 16 positions, so that B gets block 1.
 *   3. RESULT 2: must carry B's token and no error; then BATCH 3 frees
 *      both and runs A's prompt again as request C, to check that every
 *      block came back (B's own step ahead found no block: it must have
 *      taken none).
 * Prints the three sampled tokens and exits 0, or says what went wrong
 * and exits 1 (a worker that keeps A's extra block fails batch 2 with
 * no room for B). Gives up after 60 s.
 */
#include "net/link.h"
#include "net/proto.h"
#include "req.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PROMPT 16

static int32_t ids_a[PROMPT], ids_b[PROMPT];

static void
item(struct medha_msg_item *it, uint64_t handle, int32_t *ids)
{
	memset(it, 0, sizeof(*it));
	it->handle = handle;
	it->pos = 0;
	it->ids = ids;
	it->n_ids = PROMPT;
	it->sample = 1;
	it->has_params = 1;
	it->params = medha_sampling_greedy;
}

int
main(int argc, char **argv)
{
	struct medha_srv *s;
	struct medha_srv_ev ev;
	struct medha_msg m, out;
	struct medha_msg_item its[1];
	uint64_t frees[2] = {1, 2};
	char why[512];
	int step = 0, tok[3] = {-1, -1, -1};
	time_t t0 = time(NULL);

	if (argc != 2) {
		fprintf(stderr, "usage: lookahead_sched ADDR\n");
		return 2;
	}
	for (int i = 0; i < PROMPT; i++) {
		ids_a[i] = 100 + 7 * i;
		ids_b[i] = 200 + 11 * i;
	}
	if (medha_srv_open(&s, argv[1], why, sizeof(why)) != 0) {
		fprintf(stderr, "lookahead_sched: %s\n", why);
		return 1;
	}
	while (step < 3 && time(NULL) - t0 < 60) {
		if (medha_srv_next(s, 0.5, &ev) != 0 ||
		    ev.kind != MEDHA_SRV_CALL)
			continue;
		if (medha_msg_decode(&m, ev.data, ev.len, why, sizeof(why)) !=
		    0) {
			fprintf(stderr, "lookahead_sched: %s\n", why);
			return 1;
		}
		memset(&out, 0, sizeof(out));
		switch (m.type) {
		case MEDHA_MSG_HELLO:
			out.type = MEDHA_MSG_WELCOME;
			out.worker_id = 0;
			break;
		case MEDHA_MSG_HEARTBEAT: out.type = MEDHA_MSG_OK; break;
		case MEDHA_MSG_READY:
		case MEDHA_MSG_RESULT:
			if (m.type == MEDHA_MSG_RESULT) {
				if (m.result.error[0] != '\0' ||
				    m.result.n_tokens != 1) {
					fprintf(stderr,
					    "lookahead_sched: batch %llu: "
					    "%lld tokens, error \"%s\"\n",
					    (unsigned long long)m.result.seq,
					    (long long)m.result.n_tokens,
					    m.result.error);
					return 1;
				}
				tok[step++] = m.result.tokens[0].token;
			} else if (step != 0) {
				fprintf(stderr, "lookahead_sched: READY after "
				                "batch %d\n",
				    step);
				return 1;
			}
			if (step == 3)
				break;
			out.type = MEDHA_MSG_BATCH;
			out.batch.seq = (uint64_t)step + 1;
			out.batch.items = its;
			out.batch.n_items = 1;
			/* A (1), then B (2) alone, then A's prompt as C
			   (3) after both are freed */
			item(&its[0], (uint64_t)step + 1,
			    step == 1 ? ids_b : ids_a);
			if (step == 2) {
				out.batch.frees = frees;
				out.batch.n_frees = 2;
			}
			break;
		default:
			fprintf(stderr, "lookahead_sched: unexpected %s\n",
			    medha_msg_type_name(m.type));
			return 1;
		}
		medha_msg_clear(&m);
		if (step == 3)
			break;
		medha_srv_msg(s, ev.call, &out);
	}
	if (step < 3) {
		fprintf(stderr, "lookahead_sched: no worker got through\n");
		return 1;
	}
	printf("%d %d %d\n", tok[0], tok[1], tok[2]);
	medha_srv_close(s);
	return 0;
}
