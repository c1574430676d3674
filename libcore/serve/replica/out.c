/*
 * out.c: what the live replica sends a request's client (out.h). A
 * request's output text is streamed to its client as tokens come,
 * holding back the bytes that could still turn into a stop string; its
 * record, the core's or one of the replica's own, ends it (reqs.c:
 * END). Calls reqs.c, seqs.c and the core below it; flights.c (tokens)
 * and intake.c (records) call it.
 */
#include "serve/replica/impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- tokens ---- */

static int
append_text(struct lreq *q, const char *s, size_t n)
{
	if (q->text_len + n + 1 > q->text_cap) {
		size_t ncap = (q->text_len + n + 1) * 2;
		char *t = realloc(q->text, ncap);
		if (t == NULL)
			return MEDHA_ENOMEM;
		q->text = t;
		q->text_cap = ncap;
	}
	memcpy(q->text + q->text_len, s, n);
	q->text_len += n;
	q->text[q->text_len] = '\0';
	return 0;
}

/*
 * lp's tokens named, the drawn token tok first, then its top ones, as
 * many as fit (medha_token_lp_name): their bytes are the only names a
 * client gets, so nothing past the replica detokenizes (medha-proto(7),
 * "logprobs").
 */
static void
name_lp(const struct medha_tok *t, int32_t tok, struct medha_token_lp *lp)
{
	char buf[MEDHA_LP_BYTES_MAX];
	size_t n;

	lp->nnamed = 0;
	for (int k = 0; t != NULL && k <= lp->ntop; k++) {
		int32_t id = k == 0 ? tok : lp->top[k - 1].id;
		if (medha_tok_decode(t, &id, 1, 0, buf, sizeof(buf), &n) != 0 ||
		    medha_token_lp_name(lp, buf, n) != 0)
			break;
	}
}

/*
 * A token came out for q: returns MEDHA_FINISH_STOP if the request ends
 * here (end of generation, or its text now holds a stop string, where
 * the text is cut and the token kept in the ids), else 0.
 */
int
rep_on_token(struct medha_replica *r, struct lreq *q, int32_t tok,
    const struct medha_token_lp *lp)
{
	const char *piece = "";
	size_t plen = 0, from;
	char buf[MEDHA_LP_BYTES_MAX]; /* a token's text, as long as its name */

	q->last = tok;
	if (r->core.tok != NULL && !r->core.sim && !q->ignore_eos &&
	    medha_tok_is_eog(r->core.tok, tok))
		return MEDHA_FINISH_STOP;
	for (int i = 0; i < q->n_stop_ids; i++)
		if (tok == q->stop_ids[i]) /* not output, as the EOS is not */
			return MEDHA_FINISH_STOP;
	if (q->n_out == q->out_cap) {
		int64_t ncap = q->out_cap ? 2 * q->out_cap : 64;
		void *n =
		    medha_reallocarray(q->out, (size_t)ncap, sizeof(*q->out));
		if (n == NULL)
			return 0;
		q->out = n;
		if (q->lps != NULL || lp != NULL) { /* asked for: kept alike */
			void *l = medha_reallocarray(q->lps, (size_t)ncap,
			    sizeof(*q->lps));
			if (l == NULL)
				return 0;
			q->lps = l;
		}
		q->out_cap = ncap;
	}
	if (q->lps != NULL) {
		if (lp != NULL) {
			q->lps[q->n_out] = *lp;
			name_lp(r->core.tok, tok, &q->lps[q->n_out]);
		} else
			memset(&q->lps[q->n_out], 0, sizeof(*q->lps));
	}
	q->out[q->n_out++] = tok;
	if (r->core.tok != NULL &&
	    medha_tok_decode(r->core.tok, &tok, 1, 0, buf, sizeof(buf), &plen) == 0)
		piece = buf;
	else
		plen = 0;
	from = q->text_len; /* a stop string must end in the new text */
	if (append_text(q, piece, plen) != 0)
		return 0;
	/* as vLLM, none is looked for until the output holds more than
	   min_tokens tokens, nor found in the text before the token */
	for (int i = 0; q->n_out > q->sp.min_tokens && i < q->n_stop; i++) {
		size_t len = strlen(q->stop[i]),
		       at = from > len - 1 ? from - (len - 1) : 0;
		char *hit = memmem(q->text + at, q->text_len - at, q->stop[i],
		    len);
		if (hit != NULL) {
			/* the text is cut, but the token that completed the
			   stop string was generated: token_ids and logprobs
			   keep it and finalize counts it in output_tokens
			   (the core counts no stopping token), as vLLM
			   does; the end-of-generation token stays out */
			q->stop_hit = 1;
			q->text_len = (size_t)(hit - q->text);
			q->text[q->text_len] = '\0';
			return MEDHA_FINISH_STOP;
		}
	}
	return 0;
}

void
rep_send_tokens(struct medha_replica *r, struct lreq *q, int final)
{
	struct medha_msg_event ev = {.kind = MEDHA_EVENT_TOKENS};
	size_t upto = q->text_len;

	if (q->no_stream)
		return;
	if (!final && q->n_stop > 0)
		upto = q->text_len > q->stop_max - 1
		    ? q->text_len - (q->stop_max - 1)
		    : 0;
	if (upto < q->text_sent)
		upto = q->text_sent;
	if (q->n_out == q->ids_sent && upto == q->text_sent)
		return;
	ev.handle = q->ch;
	ev.n_ids = q->n_out - q->ids_sent;
	if (ev.n_ids > 0 &&
	    (ev.ids = medha_reallocarray(NULL, (size_t)ev.n_ids,
	         sizeof(int32_t))) == NULL)
		return;
	if (ev.n_ids > 0)
		memcpy(ev.ids, q->out + q->ids_sent,
		    (size_t)ev.n_ids * sizeof(int32_t));
	if (ev.n_ids > 0 && q->lps != NULL &&
	    (ev.lps = medha_reallocarray(NULL, (size_t)ev.n_ids,
	         sizeof(*ev.lps))) != NULL)
		memcpy(ev.lps, q->lps + q->ids_sent,
		    (size_t)ev.n_ids * sizeof(*ev.lps));
	ev.text_len = upto - q->text_sent;
	if ((ev.text = malloc(ev.text_len + 1)) == NULL) {
		free(ev.ids);
		return;
	}
	if (ev.text_len > 0)
		memcpy(ev.text, q->text + q->text_sent, ev.text_len);
	ev.text[ev.text_len] = '\0';
	q->ids_sent = q->n_out;
	q->text_sent = upto;
	medha_clients_push(&r->f.clients, q->peer, &ev);
}

/* ---- records ---- */

/* The core finished a request: its record goes to its client. */
static void
finalize(struct medha_replica *r, struct medha_record *rec)
{
	struct lreq *q = rep_lreq_get(r, rec->handle);
	struct medha_msg_event ev = {.kind = MEDHA_EVENT_RECORD};

	r->served++;
	medha_log(rec->status == MEDHA_STATUS_OK ? MEDHA_LOG_DEBUG
	                                         : MEDHA_LOG_INFO,
	    "request %s: %s%s%s, %lld tokens", rec->id,
	    medha_status_name(rec->status), rec->reason[0] ? ": " : "",
	    rec->reason, (long long)rec->output_tokens);
	if (q == NULL) { /* rejected at arrival, before it had an lreq */
		medha_record_clear(rec);
		return;
	}
	if (q->text_sent > q->text_len) /* cut at a stop string */
		q->text_sent = q->text_len;
	rep_send_tokens(r, q, 1);
	if ((ev.record = malloc(sizeof(*ev.record))) != NULL) {
		*ev.record = *rec;
		ev.record->output_tokens += q->stop_hit;
		if (q->state == REP_REQ_RUNNING && q->first_batch > rec->arrival)
			ev.record->queue_time = q->first_batch - rec->arrival;
		/* no output is an empty array, never an absent one */
		if (q->out == NULL)
			q->out = malloc(sizeof(*q->out));
		ev.record->token_ids = q->out;
		ev.record->n_token_ids = q->out != NULL ? q->n_out : 0;
		ev.record->logprobs = q->out != NULL ? q->lps : NULL;
		if (q->out != NULL)
			q->lps = NULL;
		ev.record->text = q->text;
		if (ev.record->text == NULL)
			ev.record->text = strdup("");
		q->out = NULL;
		q->text = NULL;
		ev.handle = ev.record->handle = q->ch;
		medha_clients_push(&r->f.clients, q->peer, &ev);
	} else
		medha_record_clear(rec);
	rep_req_move(r, q, REP_REQ_END);
}

void
rep_drain_records(struct medha_replica *r)
{
	struct medha_record rec;

	while (medha_sched_pop_record(r->core.sched, &rec) == 1)
		finalize(r, &rec);
}

void
rep_pre_end(struct medha_replica *r, struct lreq *q, int status, int code,
    const char *why)
{
	struct medha_msg_event ev = {.kind = MEDHA_EVENT_RECORD};
	struct medha_client *c = medha_clients_find(&r->f.clients, q->peer, 0);
	struct medha_record *rec;

	medha_log(MEDHA_LOG_INFO, "request %s: %s: %s", q->id,
	    medha_status_name(status), why);
	if (c != NULL && (rec = calloc(1, sizeof(*rec))) != NULL) {
		memcpy(rec->id, q->id, sizeof(rec->id));
		rec->handle = ev.handle = q->ch;
		rec->arrival = q->t_sub;
		rec->first_token = rec->finish = now_s(r);
		rec->prompt_tokens = q->n_prompt;
		rec->status = status;
		rec->code = code;
		snprintf(rec->reason, sizeof(rec->reason), "%s", why);
		rec->token_ids = malloc(sizeof(*rec->token_ids));
		rec->text = strdup("");
		ev.record = rec;
		medha_clients_push(&r->f.clients, q->peer, &ev);
	}
	r->served++;
	rep_req_move(r, q, REP_REQ_END);
}

