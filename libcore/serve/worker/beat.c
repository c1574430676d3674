/*
 * beat.c: a live worker's heartbeats (beat.h). The thread wakes every
 * MEDHA_PROTO_HEARTBEAT_MS and, while a batch runs, says HEARTBEAT,
 * waiting at most MEDHA_PROTO_DEAD_MS for the scheduler's answer: OK,
 * or IDLE when the scheduler made the batch void (a worker of the
 * replica lost), or ERROR when it no longer counts this worker as its
 * own (this one was lost); after either the batch is dropped. A beat
 * unanswered in time redials the link, so that the next one, after a
 * partition, does not wait behind TCP's backoff.
 */
#include "serve/worker/beat.h"

#include "net/proto.h"

#include <time.h>

static void *
beat_main(void *arg)
{
	struct wk_beat *b = arg;
	struct medha_msg m = {.type = MEDHA_MSG_HEARTBEAT}, rep;
	char why[256];
	uint64_t seq;
	int rc;

	pthread_mutex_lock(&b->mu);
	while (!b->quit) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += MEDHA_PROTO_HEARTBEAT_MS / 1000;
		pthread_cond_timedwait(&b->cv, &b->mu, &ts);
		if (b->quit || !b->running)
			continue;
		m.worker_id = b->id;
		seq = b->seq;
		pthread_mutex_unlock(&b->mu);
		if ((rc = medha_cli_msg(b->cli, 1, &m, &rep,
		         MEDHA_PROTO_DEAD_MS / 1e3, why, sizeof(why))) != 0) {
			medha_log(MEDHA_LOG_WARN, "heartbeat: %s", why);
			/* the next one on a fresh connection: one kept
			   through a partition holds it for as long as TCP
			   backs off (medha_cli_redial), a minute after a
			   minute's cut, the batch waiting meanwhile */
			if (rc == MEDHA_ETIMEOUT)
				(void)medha_cli_redial(b->cli);
			pthread_mutex_lock(&b->mu);
			continue;
		}
		pthread_mutex_lock(&b->mu);
		/* the answer is about the batch the beat was for: drop it
		   only if it still runs */
		if ((rep.type == MEDHA_MSG_IDLE ||
		        rep.type == MEDHA_MSG_ERROR) &&
		    b->running && b->seq == seq && !b->dropped) {
			b->dropped = 1;
			medha_log(MEDHA_LOG_WARN, "batch %llu dropped: %s",
			    (unsigned long long)seq,
			    rep.type == MEDHA_MSG_IDLE
			        ? "the scheduler made it void"
			        : rep.error.reason);
		}
		medha_msg_clear(&rep);
	}
	pthread_mutex_unlock(&b->mu);
	return NULL;
}

void
wk_beat_start(struct wk_beat *b, struct medha_cli *cli)
{
	b->cli = cli;
	b->running = b->quit = b->id = 0;
	b->seq = 0;
	b->dropped = 0;
	pthread_mutex_init(&b->mu, NULL);
	pthread_cond_init(&b->cv, NULL);
	pthread_create(&b->thread, NULL, beat_main, b);
}

void
wk_beat_batch(struct wk_beat *b, int id, uint64_t seq, int on)
{
	pthread_mutex_lock(&b->mu);
	b->id = id;
	b->seq = seq;
	b->running = on;
	if (on)
		b->dropped = 0;
	pthread_mutex_unlock(&b->mu);
}

void
wk_beat_stop(struct wk_beat *b)
{
	pthread_mutex_lock(&b->mu);
	b->quit = 1;
	pthread_cond_signal(&b->cv);
	pthread_mutex_unlock(&b->mu);
	pthread_join(b->thread, NULL);
	pthread_mutex_destroy(&b->mu);
	pthread_cond_destroy(&b->cv);
}
