/*
 * replay.c: medha-trace replay. Submits each request of a trace to a
 * scheduler (or router) at its arrival time, divided by --speed, and
 * prints one result record per request as it ends. A line with "prompt"
 * sends the text, one with "prompt_ids" the ids, one with only
 * "prompt_tokens" asks for a made-up prompt of that length. The trace is
 * read as it is replayed, so `gen | replay | report` streams.
 *
 * Sixteen req contexts: the main thread submits (SUBMIT, answered
 * ACCEPTED or ERROR: a refused request is printed at once as a
 * "rejected" record) on up to fifteen at once, so that requests due
 * together arrive together (see struct sent); a second thread polls
 * (POLL, answered with record events: each request is submitted with
 * "stream": false, as the records carry the output and no token is
 * printed before its request ends; token events too with --stream) and
 * prints the records. Every submitted request ends with exactly one
 * record: if the scheduler goes silent for longer than
 * MEDHA_PROTO_DEAD_MS, the requests still open get "failed" records.
 * Records are flushed one by one, so that a reader that stops reading
 * (`replay | head -1`) is seen at once: replay then submits nothing
 * more, cancels what is open and exits 1 with the write's error.
 */
#include "medha-trace.h"

#include "net/link.h"
#include "net/proto.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

struct open_req {
	uint64_t handle;
	char id[MEDHA_ID_MAX];
	double arrival;
	int64_t prompt_tokens;
};

struct rp {
	struct medha_cli *cli;
	struct medha_writer *w;
	pthread_mutex_t mu;
	int ids;        /* --token-ids: keep token_ids and text */
	int text;       /* --text: keep text */
	int input_done; /* every line submitted */
	int64_t submitted, accepted, done, failed_submit;
	struct open_req *open; /* accepted, no record yet */
	int64_t nopen, cap;
	struct medha_record *early; /* records that overtook their ACCEPTED */
	int64_t nearly, early_cap;
	int lost;  /* the scheduler went away */
	FILE *of;  /* the records' stream */
	int wrerr; /* the first write's errno, or 0 */
	int progress;
};

/* Write rec (mutex held), dropping what was not asked for. */
static void
emit(struct rp *p, struct medha_record *rec)
{
	static int32_t none[1];
	static char empty[1];
	int32_t *ids = rec->token_ids;
	char *text = rec->text;

	if (!p->ids)
		rec->token_ids = NULL;
	else if (rec->token_ids == NULL) /* asked for: [], never absent */
		rec->token_ids = none, rec->n_token_ids = 0;
	if (!p->ids && !p->text)
		rec->text = NULL;
	else if (rec->text == NULL)
		rec->text = empty;
	if (p->wrerr == 0) {
		errno = 0;
		if (medha_record_write(p->w, rec) != 0 || fflush(p->of) != 0)
			p->wrerr = errno != 0 ? errno : EIO;
	}
	rec->token_ids = ids;
	rec->text = text;
	p->done++;
	if (p->progress)
		progress("%lld submitted, %lld done ", (long long)p->submitted,
		    (long long)p->done);
}

static void
record_for(struct rp *p, const char *id, double arrival, int64_t prompt,
    int status, const char *reason)
{
	struct medha_record rec;

	memset(&rec, 0, sizeof(rec));
	snprintf(rec.id, sizeof(rec.id), "%s", id);
	rec.arrival = arrival;
	rec.first_token = arrival;
	rec.finish = arrival;
	rec.prompt_tokens = prompt;
	rec.status = status;
	snprintf(rec.reason, sizeof(rec.reason), "%s", reason);
	emit(p, &rec);
}

/* 1 if handle was open (and is closed now), 0 if it was not. */
static int
close_open(struct rp *p, uint64_t handle)
{
	for (int64_t i = 0; i < p->nopen; i++)
		if (p->open[i].handle == handle) {
			p->open[i] = p->open[--p->nopen];
			return 1;
		}
	return 0;
}

/*
 * A record for a handle not open (mutex held): its ACCEPTED may still be
 * on the way to the other thread, which looks here first. Taken over.
 */
static void
keep_early(struct rp *p, struct medha_record *rec)
{
	if (p->nearly == p->early_cap) {
		int64_t ncap = p->early_cap ? 2 * p->early_cap : 16;
		void *n = medha_reallocarray(p->early, (size_t)ncap,
		    sizeof(*p->early));
		if (n == NULL) {
			medha_log(MEDHA_LOG_ERROR,
			    "out of memory: record of %s lost", rec->id);
			return;
		}
		p->early = n;
		p->early_cap = ncap;
	}
	p->early[p->nearly++] = *rec;
	rec->token_ids = NULL;
	rec->logprobs = NULL;
	rec->text = NULL;
	memset(&rec->tbt, 0, sizeof(rec->tbt)); /* taken over too */
}

/* Its record if it came already (mutex held): 1 and written, else 0. */
static int
take_early(struct rp *p, uint64_t handle)
{
	for (int64_t i = 0; i < p->nearly; i++)
		if (p->early[i].handle == handle) {
			emit(p, &p->early[i]);
			medha_record_clear(&p->early[i]);
			p->early[i] = p->early[--p->nearly];
			return 1;
		}
	return 0;
}

/*
 * Has the reader of the records gone (a pipe whose other end closed)?
 * Then the error is set (mutex held) without waiting for a record to
 * fail to write: one may be a long time coming.
 */
static void
check_reader(struct rp *p)
{
	struct pollfd fd = {.fd = fileno(p->of), .events = 0};

	if (p->wrerr == 0 && poll(&fd, 1, 0) == 1 && (fd.revents & POLLERR))
		p->wrerr = EPIPE;
}

static void *
poll_main(void *arg)
{
	struct rp *p = arg;
	struct medha_msg m = {.type = MEDHA_MSG_POLL}, rep;
	double silent_since = 0;
	char why[256];

	for (;;) {
		pthread_mutex_lock(&p->mu);
		if (p->input_done &&
		    p->done >= p->accepted + p->failed_submit) {
			pthread_mutex_unlock(&p->mu);
			return NULL;
		}
		pthread_mutex_unlock(&p->mu);
		if (medha_cli_msg(p->cli, 1, &m, &rep,
		        MEDHA_PROTO_DEAD_MS / 1e3, why, sizeof(why)) != 0) {
			if (silent_since == 0)
				silent_since = medha_now();
			if (medha_now() - silent_since <
			    MEDHA_PROTO_DEAD_MS / 1e3)
				continue;
			pthread_mutex_lock(&p->mu);
			medha_log(MEDHA_LOG_ERROR,
			    "scheduler lost (%s): %lld requests fail", why,
			    (long long)p->nopen);
			for (int64_t i = 0; i < p->nopen; i++)
				record_for(p, p->open[i].id, p->open[i].arrival,
				    p->open[i].prompt_tokens,
				    MEDHA_STATUS_FAILED, "scheduler lost");
			p->nopen = 0;
			p->lost = 1;
			pthread_mutex_unlock(&p->mu);
			return NULL;
		}
		silent_since = 0;
		if (rep.type != MEDHA_MSG_EVENTS) {
			medha_log(MEDHA_LOG_WARN, "POLL answered with %s%s%s",
			    medha_msg_type_name(rep.type),
			    rep.type == MEDHA_MSG_ERROR ? ": " : "",
			    rep.type == MEDHA_MSG_ERROR ? rep.error.reason
			                                : "");
			medha_msg_clear(&rep);
			usleep(100000);
			continue;
		}
		pthread_mutex_lock(&p->mu);
		check_reader(p);
		for (int64_t i = 0; i < rep.events.n; i++) {
			struct medha_msg_event *e = &rep.events.ev[i];
			if (e->kind != MEDHA_EVENT_RECORD)
				continue;
			/* one record a request: not for one that already
			   has one (refused after its SUBMIT timed out) */
			if (close_open(p, e->handle))
				emit(p, e->record);
			else {
				e->record->handle = e->handle;
				keep_early(p, e->record);
			}
		}
		pthread_mutex_unlock(&p->mu);
		medha_msg_clear(&rep);
	}
}

/*
 * Wait until the scheduler at addr says it is ready (wait 0: until it
 * answers, ready or not, for up to 10 s); 0, or 1 after logging. What
 * it waits for is said every 5 s on a terminal, so that a wrong
 * address is not a silent minute, nor one where nothing listens.
 */
static int
wait_ready(struct rp *p, const char *addr, double wait)
{
	struct medha_msg m = {.type = MEDHA_MSG_STATUS}, rep;
	double t0 = medha_now(), until = t0 + (wait > 0 ? wait : 10);
	double told = t0;
	char why[256] = "";
	int said = 0, refused = 0;

	for (;;) {
		if (p->progress && medha_now() - told >= 5) {
			told = medha_now();
			progress("waiting for %s: %s (%.0f of %.0f s) ", addr,
			    said ? "not ready" : "no answer", told - t0,
			    until - t0);
		}
		if (medha_cli_msg(p->cli, 0, &m, &rep, 1, why, sizeof(why)) ==
		    0) {
			int ok = rep.type == MEDHA_MSG_STATUS_REPLY &&
			    (rep.status.ready || wait == 0);
			if (rep.type == MEDHA_MSG_STATUS_REPLY && !ok &&
			    !said++)
				medha_log(MEDHA_LOG_WARN,
				    "waiting for the replica at %s: %lld of "
				    "%lld workers",
				    addr, (long long)rep.status.workers,
				    (long long)rep.status.workers_wanted);
			medha_msg_clear(&rep);
			if (ok)
				return 0;
			usleep(100000);
		} else if (!medha_cli_connected(p->cli) &&
		    medha_link_refused(addr, &refused, why, sizeof(why))) {
			medha_log(MEDHA_LOG_ERROR, "%s", why);
			return 1;
		}
		if (medha_now() > until) {
			if (p->progress && told > t0)
				fputc('\n', stderr);
			medha_log(MEDHA_LOG_ERROR, "%s: %s after %.0f s%s%s",
			    addr, said ? "not ready" : "no answer",
			    wait > 0 ? wait : 10, said ? "" : ": ",
			    said ? "" : why);
			return 1;
		}
	}
}

/* Sleep until at; 1 if the scheduler or the reader is gone (before or
 * meanwhile). */
static int
wait_until(struct rp *p, double at)
{
	int gone;

	pthread_mutex_lock(&p->mu);
	gone = p->lost || p->wrerr;
	pthread_mutex_unlock(&p->mu);
	/* in steps, so that a reader gone is seen within 0.1 s */
	while (at > medha_now() && !gone) {
		double d = at - medha_now();
		usleep((useconds_t)((d < 0.1 ? d : 0.1) * 1e6));
		pthread_mutex_lock(&p->mu);
		check_reader(p);
		gone = p->lost || p->wrerr;
		pthread_mutex_unlock(&p->mu);
	}
	return gone;
}

/* A trace out of order is sent at once: say so, the first time. */
static void
in_order(const char *in, const struct medha_reqspec *rs, double *last,
    int64_t *back)
{
	if (rs->arrival < *last && (*back)++ == 0)
		medha_log(MEDHA_LOG_WARN,
		    "%s: request %s arrives at %g s, before the one before it "
		    "(%g s): sent at once",
		    in != NULL ? in : "stdin", rs->id, rs->arrival, *last);
	if (rs->arrival > *last)
		*last = rs->arrival;
}

/* The output is gone: cancel every request still open (mutex not held). */
static void
cancel_open(struct rp *p)
{
	uint64_t *h = NULL;
	int64_t n;
	char why[256];

	pthread_mutex_lock(&p->mu);
	n = p->nopen;
	if (n > 0 && (h = medha_reallocarray(NULL, (size_t)n,
	                  sizeof(*h))) != NULL)
		for (int64_t i = 0; i < n; i++)
			h[i] = p->open[i].handle;
	pthread_mutex_unlock(&p->mu);
	for (int64_t i = 0; h != NULL && i < n; i++) {
		struct medha_msg m = {.type = MEDHA_MSG_CANCEL}, rep;
		m.cancel = h[i];
		if (medha_cli_msg(p->cli, 0, &m, &rep,
		        MEDHA_PROTO_DEAD_MS / 1e3, why, sizeof(why)) != 0)
			break; /* the poller finds it lost */
		medha_msg_clear(&rep);
	}
	free(h);
}

/*
 * A SUBMIT on its way. Requests due at once go out without waiting for
 * each other's answers (a replica busy computing may take milliseconds
 * to answer each; one after another, the last of a burst would arrive
 * that much later than its trace says), on up to SUBMITS contexts;
 * their answers are taken in the order they were sent.
 */
#define SUBMITS 15 /* contexts 0 and 2..15 (1 polls) */

/* The context of ring slot i: its own, for the whole run. */
#define SLOT_CTX(i) ((i) == 0 ? 0 : (i) + 1)

struct sent {
	int ctx;
	int rc; /* the send's error, 0 if it went */
	char why[256];
	char id[MEDHA_ID_MAX];
	double arrival;
	int64_t prompt_tokens;
};

/* Take the answer to s and account for it. */
static void
submitted(struct rp *p, struct sent *s, double t0)
{
	struct medha_msg rep;
	int rc = s->rc;

	if (rc == 0)
		rc = medha_cli_msg_wait(p->cli, s->ctx, &rep, s->why,
		    sizeof(s->why));
	pthread_mutex_lock(&p->mu);
	p->submitted++;
	if (rc != 0 || rep.type != MEDHA_MSG_ACCEPTED) {
		const char *reason = rc != 0      ? s->why
		    : rep.type == MEDHA_MSG_ERROR ? rep.error.reason
		                                  : "unexpected answer";
		medha_log(MEDHA_LOG_INFO, "request %s refused: %s", s->id,
		    reason);
		p->failed_submit++;
		record_for(p, s->id, medha_now() - t0, s->prompt_tokens,
		    MEDHA_STATUS_REJECTED, reason);
	} else if (p->accepted++, !take_early(p, rep.accepted.handle)) {
		if (p->nopen == p->cap) {
			int64_t ncap = p->cap ? 2 * p->cap : 256;
			void *n = medha_reallocarray(p->open, (size_t)ncap,
			    sizeof(*p->open));
			if (n == NULL)
				die(1, "out of memory");
			p->open = n;
			p->cap = ncap;
		}
		p->open[p->nopen++] = (struct open_req){rep.accepted.handle, "",
		    s->arrival, s->prompt_tokens};
		memcpy(p->open[p->nopen - 1].id, s->id, MEDHA_ID_MAX);
	}
	pthread_mutex_unlock(&p->mu);
	if (rc == 0)
		medha_msg_clear(&rep);
}

enum { OPT_SPEED = 256, OPT_IDS, OPT_STREAM, OPT_TEXT, OPT_WAIT };

/* -h: every option of opts below, as medha-trace(1) says */
static const struct medha_help replay_help[] = {
    {"-a, --addr addr", "the replica or router: ipc://PATH or tcp://HOST:PORT"},
    {"-h, --help", "print this help and exit"},
    {"-o, --output file",
        "write records to file, not stdout (.zst: compressed)"},
    {"-v, --verbose", "more messages (each refused request)"},
    {"--speed x", "divide every arrival time by x (1)"},
    {"--stream", "ask for token events as a streaming client does"},
    {"--text", "records carry the generated text"},
    {"--token-ids", "records carry the generated token_ids and text"},
    {"--wait seconds", "wait for a ready replica (60 s); 0: till it answers"},
    {"--secret-file FILE", "the replica's shared secret ($MEDHA_SECRET_FILE)"},
    {"file", "the trace to submit (default: stdin)"},
};

/* Records that came before their SUBMIT was seen sent, and never were:
   not ours after all. */
static void
drop_early(struct rp *p)
{
	for (int64_t i = 0; i < p->nearly; i++) {
		medha_log(MEDHA_LOG_WARN, "record for %s, not submitted: ignored",
		    p->early[i].id);
		medha_record_clear(&p->early[i]);
	}
	free(p->early);
}

int
trace_replay(int argc, char *argv[])
{
	static const struct option opts[] = {
	    {"addr", required_argument, NULL, 'a'},
	    {"help", no_argument, NULL, 'h'},
	    {"output", required_argument, NULL, 'o'},
	    {"speed", required_argument, NULL, OPT_SPEED},
	    {"stream", no_argument, NULL, OPT_STREAM},
	    {"text", no_argument, NULL, OPT_TEXT},
	    {"token-ids", no_argument, NULL, OPT_IDS},
	    {"verbose", no_argument, NULL, 'v'},
	    {"wait", required_argument, NULL, OPT_WAIT},
	    {"secret-file", required_argument, NULL, OPT_SECRET},
	    {NULL, 0, NULL, 0},
	};
	struct rp p;
	struct medha_trace_in *t;
	struct medha_reqspec rs;
	const char *addr = NULL, *out = NULL, *in = NULL;
	double speed = 1, wait = 60, t0, last = 0;
	int64_t back = 0;
	FILE *f = stdin, *of;
	pthread_t poller;
	struct sent fl[SUBMITS]; /* in flight: a ring from head */
	int nfl = 0, head = 0;
	char why[512];
	int ch, rc, status = 0, stream = 0;

	memset(&p, 0, sizeof(p));
	while ((ch = getopt_long(argc, argv, "a:ho:v", opts, NULL)) != -1) {
		switch (ch) {
		case 'a': addr = optarg; break;
		case 'h': HELP("replay", replay_help);
		case 'o': out = optarg; break;
		case 'v': medha_log_level++; break;
		case OPT_SPEED:
			speed = flag_f64("--speed", optarg, 0, 1e9, 1);
			break;
		case OPT_IDS: p.ids = 1; break;
		case OPT_STREAM: stream = 1; break;
		case OPT_TEXT: p.text = 1; break;
		case OPT_WAIT:
			wait = flag_f64("--wait", optarg, 0, 1e6, 0);
			break;
		case OPT_SECRET: link_flag(ch, optarg); break;
		default: usage();
		}
	}
	if (addr == NULL) {
		medha_log(MEDHA_LOG_ERROR, "-a ADDR is required");
		usage();
	}
	if (argc - optind > 1) {
		medha_log(MEDHA_LOG_ERROR, "one trace at most");
		usage();
	}
	if (optind < argc && strcmp(argv[optind], "-") != 0)
		in = argv[optind];
	if (in != NULL && (f = fopen(in, "rb")) == NULL) {
		medha_log(MEDHA_LOG_ERROR, "%s: %s", in, strerror(errno));
		return 1;
	}
	if ((rc = medha_trace_open(&t, f)) != 0) {
		medha_log(MEDHA_LOG_ERROR, "%s", medha_strerror(rc));
		return 1;
	}
	if ((of = out_open(out, &p.w)) == NULL)
		return 1;
	p.of = of;
	signal(SIGPIPE, SIG_IGN);
	link_auth();
	if (medha_cli_open(&p.cli, addr, SUBMITS + 1, why, sizeof(why)) != 0) {
		medha_log(MEDHA_LOG_ERROR, "%s", why);
		return 2;
	}
	pthread_mutex_init(&p.mu, NULL);
	p.progress = isatty(STDERR_FILENO);
	if (wait_ready(&p, addr, wait) != 0) {
		medha_cli_close(p.cli);
		return 1;
	}
	pthread_create(&poller, NULL, poll_main, &p);
	t0 = medha_now();
	memset(&rs, 0, sizeof(rs));
	while ((rc = medha_trace_next(t, &rs)) == 1) {
		struct medha_msg m = {.type = MEDHA_MSG_SUBMIT};
		double at = t0 + rs.arrival / speed;
		struct sent *s;

		if (wait_until(&p, 0) != 0) /* gone already? */
			break;
		in_order(in, &rs, &last, &back);
		/* not due yet: the answers first, then wait for its time;
		   every context busy: the oldest answer first */
		for (; nfl > 0 && (at > medha_now() || nfl == SUBMITS);
		     nfl--, head = (head + 1) % SUBMITS)
			submitted(&p, &fl[head], t0);
		if (wait_until(&p, at) != 0)
			break;
		s = &fl[(head + nfl) % SUBMITS];
		s->ctx = SLOT_CTX((head + nfl) % SUBMITS);
		nfl++;
		memcpy(s->id, rs.id, MEDHA_ID_MAX);
		s->arrival = rs.arrival;
		s->prompt_tokens = rs.prompt_tokens;
		m.submit = rs;
		m.submit.no_stream = !stream; /* it prints only records */
		s->rc = medha_cli_msg_send(p.cli, s->ctx, &m,
		    MEDHA_PROTO_DEAD_MS / 1e3, s->why, sizeof(s->why));
		medha_reqspec_clear(&rs);
	}
	for (; nfl > 0; nfl--, head = (head + 1) % SUBMITS)
		submitted(&p, &fl[head], t0);
	if (p.wrerr) /* nobody reads the records: nothing left to wait for */
		cancel_open(&p);
	if (back > 1)
		medha_log(MEDHA_LOG_WARN,
		    "%lld requests arrived before the one before them",
		    (long long)back);
	if (rc < 0 && !p.wrerr) {
		medha_log(MEDHA_LOG_ERROR, "%s: %s", in != NULL ? in : "stdin",
		    medha_trace_error(t));
		status = 1;
	}
	medha_reqspec_clear(&rs);
	pthread_mutex_lock(&p.mu);
	p.input_done = 1;
	pthread_mutex_unlock(&p.mu);
	pthread_join(poller, NULL);
	if (p.progress)
		fputc('\n', stderr);
	medha_trace_close(t);
	if (f != stdin)
		fclose(f);
	medha_cli_close(p.cli);
	free(p.open);
	drop_early(&p);
	if (p.wrerr) { /* the first error, not what the close says after */
		out_finish(of, p.w);
		medha_log(MEDHA_LOG_ERROR, "%s: write error: %s",
		    out != NULL && strcmp(out, "-") != 0 ? out : "stdout",
		    strerror(p.wrerr));
		status = 1;
	} else if (out_close(out, of, p.w) != 0)
		status = 1;
	if (p.lost)
		status = 1;
	return status;
}
