/*
 * hello.c: a live worker's registration (hello.h). A scheduler that does
 * not answer is said, with its address, at once and every 30 s: a worker
 * aimed at none would otherwise wait in silence. One that refuses the
 * HELLO (another model, another layout) is asked again a second later.
 */
#include "serve/worker/hello.h"

#include "net/greet.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/*
 * One forward of WARM_TOKENS tokens on a sequence of its own, freed
 * after, before the worker says HELLO: otherwise the first batch pays
 * for the first touch of the backend's buffers and KV pages (a 5-token
 * prefill measured 64.6 ms as a fresh worker's first batch, 10-12 ms
 * after).
 */
#define WARM_TOKENS 16

void
wk_hello_warm_up(struct medha_backend *be)
{
	int32_t tok[WARM_TOKENS] = {0};
	struct medha_batch_seq bs = {.pos = 0,
	    .n_tokens = WARM_TOKENS,
	    .logits = MEDHA_LOGITS_LAST};
	struct medha_batch batch = {tok, WARM_TOKENS, &bs, 1};
	struct medha_fwd f;
	float *lg;
	char why[256];
	double t;

	if ((lg = medha_calloc((size_t)be->info.shape.vocab,
	         sizeof(*lg))) == NULL)
		return;
	if (medha_backend_seq_alloc(be, &bs.seq) != 0) {
		free(lg);
		return;
	}
	memset(&f, 0, sizeof(f));
	f.b = &batch;
	f.layer_lo = be->info.layer_lo;
	f.layer_hi = be->info.layer_hi;
	f.logits = lg;
	t = medha_now();
	if (medha_backend_forward(be, &f, why, sizeof(why)) != 0)
		medha_log(MEDHA_LOG_INFO, "warm-up forward: %s", why);
	else
		medha_log(MEDHA_LOG_INFO, "warm-up: a forward of %d tokens "
		    "in %.1f ms", WARM_TOKENS, (medha_now() - t) * 1e3);
	medha_backend_seq_free(be, bs.seq);
	free(lg);
}

void
wk_hello_of(struct medha_msg_hello *h, const struct medha_worker_config *c,
    const struct medha_backend *be, const struct wk_peers *p, const char *fp)
{
	const struct medha_backend_info *in = &be->info;

	memset(h, 0, sizeof(*h));
	snprintf(h->backend, sizeof(h->backend), "%s", in->name);
	snprintf(h->model, sizeof(h->model), "%s", c->model);
	snprintf(h->gpu, sizeof(h->gpu), "%s", c->gpu);
	h->tp = p->lay.tp;
	h->spp = p->lay.spp;
	h->kvp = p->lay.kvp;
	h->rank_tp = p->lay.rt;
	h->rank_spp = p->lay.rs;
	h->rank_kvp = p->lay.rg;
	snprintf(h->peer, sizeof(h->peer), "%s", wk_peers_url(p));
	h->layer_lo = in->layer_lo;
	h->layer_hi = in->layer_hi;
	h->block_size = in->block_size;
	h->n_blocks = in->n_blocks > INT32_MAX ? INT32_MAX : (int)in->n_blocks;
	h->max_seqs = in->max_seqs;
	h->vocab = in->shape.vocab;
	h->dim = in->shape.dim;
	h->pid = (int)getpid();
	snprintf(h->fingerprint, sizeof(h->fingerprint), "%s", fp);
	if (in->caps & MEDHA_BACKEND_WINDOW_KV)
		h->caps |= MEDHA_HELLO_WINDOW_KV;
	if (in->ep && p->lay.tp > 1)
		h->caps |= MEDHA_HELLO_EP;
}

/*
 * The HELLO retry loop: the one place a worker waits to be taken. HELLO
 * until WELCOME (net/greet.h: a refusal is retried with a backoff, and
 * one retrying cannot change ends it unless --retry-forever). 0, 1 when
 * stopping, or an error with why.
 */
int
wk_hello_say(struct medha_cli *cli, const struct medha_msg_hello *h,
    const char *addr, int forever, volatile sig_atomic_t *stop, int *id,
    char *why, size_t whylen)
{
	struct medha_msg m = {.type = MEDHA_MSG_HELLO}, rep;
	int rc;

	m.hello = *h;
	if ((rc = medha_cli_greet(cli, &m, &rep, addr, forever, stop, why,
	         whylen)) != 0)
		return rc;
	*id = rep.worker_id;
	medha_msg_clear(&rep);
	return 0;
}
