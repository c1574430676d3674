/*
 * lookahead_sched.c: a scripted scheduler for one medha-worker, to pin
 * down its lookahead (libcore/serve/worker/ahead.c) where a live scheduler
 * rarely goes: a step run ahead that the next batch does not use must
 * give back the KV block it took, and one the next batch uses in part
 * must answer that part and run the rest.
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
 *   4. BATCH 4 frees C and runs request E, a prompt of 8 tokens (block
 *      0; its step ahead stays in it).
 *   5. BATCH 5: E's next step (as run ahead) and request D, a prompt of
 *      8 tokens (block 1): E answered from the step run ahead, D run.
 *   6. BATCH 6: D's next step alone (E left out, not freed): D answered
 *      from the step run ahead, E cut back.
 *   7. BATCH 7: E's next step (not run ahead: run).
 * Prints the sampled tokens in order (one a request a batch, two for
 * batch 5) and exits 0, or says what went wrong and exits 1 (a worker
 * that keeps A's extra block fails batch 2 with no room for B). Gives
 * up after 60 s.
 */
#include "net/link.h"
#include "net/proto.h"
#include "req.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PROMPT 16
#define SHORT 8   /* E's and D's prompts */
#define BATCHES 7
#define TOKENS 8  /* tokens over all batches */

static int32_t ids_a[PROMPT], ids_b[PROMPT], ids_e[SHORT], ids_d[SHORT];
static int32_t next_e[2], next_d[1]; /* decode steps: the tokens fed */

static void
item(struct medha_msg_item *it, uint64_t handle, int64_t pos, int32_t *ids,
    int n, int params)
{
	memset(it, 0, sizeof(*it));
	it->handle = handle;
	it->pos = pos;
	it->ids = ids;
	it->n_ids = n;
	it->sample = 1;
	it->has_params = params;
	if (params)
		it->params = medha_sampling_greedy;
}

/*
 * Batch k (1-based) into b, its items in its, from the tokens got so
 * far (tok: in order); returns the tokens its RESULT must carry.
 */
static int
script(int k, const int *tok, struct medha_msg_batch *b,
    struct medha_msg_item *its, uint64_t *frees)
{
	memset(b, 0, sizeof(*b));
	b->seq = (uint64_t)k;
	b->items = its;
	b->n_items = 1;
	switch (k) {
	case 1: item(&its[0], 1, 0, ids_a, PROMPT, 1); break; /* A */
	case 2: item(&its[0], 2, 0, ids_b, PROMPT, 1); break; /* B */
	case 3: /* A and B freed; A's prompt again as C */
		item(&its[0], 3, 0, ids_a, PROMPT, 1);
		frees[0] = 1;
		frees[1] = 2;
		b->frees = frees;
		b->n_frees = 2;
		break;
	case 4: /* C freed; E */
		item(&its[0], 5, 0, ids_e, SHORT, 1);
		frees[0] = 3;
		b->frees = frees;
		b->n_frees = 1;
		break;
	case 5: /* E's next step, and D */
		next_e[0] = tok[3];
		item(&its[0], 5, SHORT, &next_e[0], 1, 0);
		item(&its[1], 4, 0, ids_d, SHORT, 1);
		b->n_items = 2;
		return 2;
	case 6: /* D's next step alone */
		next_d[0] = tok[5];
		item(&its[0], 4, SHORT, &next_d[0], 1, 0);
		break;
	default: /* 7: E's step after */
		next_e[1] = tok[4];
		item(&its[0], 5, SHORT + 1, &next_e[1], 1, 0);
		break;
	}
	return 1;
}
int
main(int argc, char **argv)
{
	struct medha_srv *s;
	struct medha_srv_ev ev;
	struct medha_msg m, out;
	struct medha_msg_item its[2];
	uint64_t frees[2];
	char why[512];
	int step = 0, ntok = 0, want = 0, tok[TOKENS], i;
	time_t t0 = time(NULL);

	if (argc != 2) {
		fprintf(stderr, "usage: lookahead_sched ADDR\n");
		return 2;
	}
	for (i = 0; i < PROMPT; i++) {
		ids_a[i] = 100 + 7 * i;
		ids_b[i] = 200 + 11 * i;
	}
	for (i = 0; i < SHORT; i++) {
		ids_e[i] = 300 + 13 * i;
		ids_d[i] = 400 + 17 * i;
	}
	if (medha_srv_open(&s, argv[1], why, sizeof(why)) != 0) {
		fprintf(stderr, "lookahead_sched: %s\n", why);
		return 1;
	}
	while (step < BATCHES && time(NULL) - t0 < 60) {
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
				    m.result.n_tokens != want ||
				    m.result.seq != (uint64_t)step + 1) {
					fprintf(stderr,
					    "lookahead_sched: batch %llu: "
					    "%lld tokens (%d wanted), error "
					    "\"%s\"\n",
					    (unsigned long long)m.result.seq,
					    (long long)m.result.n_tokens, want,
					    m.result.error);
					return 1;
				}
				/* in item order */
				for (i = 0; i < want; i++) {
					if (m.result.tokens[i].handle !=
					    its[i].handle) {
						fprintf(stderr,
						    "lookahead_sched: batch "
						    "%d: token %d for "
						    "request %llu\n",
						    step + 1, i,
						    (unsigned long long)
						        m.result.tokens[i]
						            .handle);
						return 1;
					}
					tok[ntok++] = m.result.tokens[i].token;
				}
				step++;
			} else if (step != 0) {
				fprintf(stderr, "lookahead_sched: READY after "
				                "batch %d\n",
				    step);
				return 1;
			}
			if (step == BATCHES)
				break;
			out.type = MEDHA_MSG_BATCH;
			want = script(step + 1, tok, &out.batch, its, frees);
			break;
		default:
			fprintf(stderr, "lookahead_sched: unexpected %s\n",
			    medha_msg_type_name(m.type));
			return 1;
		}
		medha_msg_clear(&m);
		if (step == BATCHES)
			break;
		medha_srv_msg(s, ev.call, &out);
	}
	if (step < BATCHES) {
		fprintf(stderr, "lookahead_sched: no worker got through "
		                "(%d batches answered)\n",
		    step);
		return 1;
	}
	for (i = 0; i < ntok; i++)
		printf("%d%c", tok[i], i + 1 < ntok ? ' ' : '\n');
	medha_srv_close(s);
	return 0;
}
