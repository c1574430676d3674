/*
 * replay.c: medha-trace replay. Submits each request of a trace to a
 * scheduler (or router) at its arrival time, divided by --speed, and
 * prints one result record per request as it ends. A line with "prompt"
 * sends the text, one with "prompt_ids" the ids, one with only
 * "prompt_tokens" asks for a made-up prompt of that length. The trace is
 * read as it is replayed, so `gen | replay | report` streams.
 *
 * One client of the protocol (net/pcli.h): the main thread submits each
 * request when it is due without waiting for its answer, so that
 * requests due together arrive together; a second thread takes what
 * comes back: an ACCEPTED, or a refusal, printed at once as a "rejected"
 * record; then the record event (each request is submitted with
 * "stream": false, as the records carry the output and no token is
 * printed before its request ends; token events too with --stream).
 * Every submitted request ends with exactly one record: if the
 * scheduler goes silent for longer than MEDHA_PROTO_DEAD_MS, the
 * requests still open get "failed" records.
 * Records are flushed one by one, so that a reader that stops reading
 * (`replay | head -1`) is seen at once: replay then submits nothing
 * more, cancels what is open and exits 1 with the write's error.
 */
#include "medha-trace.h"

#include "map.h"
#include "net/link.h"
#include "net/pcli.h"
#include "net/proto.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

/* A request submitted, its record not printed yet. */
struct open_req {
	uint64_t handle; /* the scheduler's, once accepted; else 0 */
	char id[MEDHA_ID_MAX];
	double arrival;
	int64_t prompt_tokens;
};

struct rp {
	struct medha_pcli *pc;
	struct medha_writer *w;
	pthread_mutex_t mu;
	int ids;        /* --token-ids: keep token_ids and text */
	int text;       /* --text: keep text */
	int input_done; /* every line submitted */
	int64_t submitted, done;
	struct medha_map open; /* cookie (the line's number) -> open_req */
	uint64_t lines;
	double t0;      /* medha_now() at the start */
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

/* Request cookie ends (mutex held): rec printed, or one made of
 * status and reason. */
static void
end_req(struct rp *p, uint64_t cookie, struct medha_record *rec, int status,
    const char *reason)
{
	struct open_req *q = medha_map_del(&p->open, cookie);

	if (q == NULL)
		return;
	if (rec != NULL)
		emit(p, rec);
	else
		record_for(p, q->id,
		    status == MEDHA_STATUS_REJECTED ? medha_now() - p->t0
		                                    : q->arrival,
		    q->prompt_tokens, status, reason);
	free(q);
}

/* The scheduler is silent (mutex held): every request open fails. */
static void
lose_all(struct rp *p)
{
	size_t it = 0;
	uint64_t k;
	void *v;

	medha_log(MEDHA_LOG_ERROR, "scheduler lost: %lld requests fail",
	    (long long)p->open.n);
	while (medha_map_next(&p->open, &it, &k, &v)) {
		struct open_req *q = v;
		record_for(p, q->id, q->arrival, q->prompt_tokens,
		    MEDHA_STATUS_FAILED, "scheduler lost");
		free(q);
	}
	medha_map_free(&p->open);
	memset(&p->open, 0, sizeof(p->open));
	p->lost = 1;
}

/* What the client brings back, until every request has its record. */
static void *
take_main(void *arg)
{
	struct rp *p = arg;
	struct medha_pcli_out o;

	for (;;) {
		int got = medha_pcli_take(p->pc, 0.1, &o);
		double ok = medha_pcli_last_ok(p->pc);
		struct open_req *q;

		pthread_mutex_lock(&p->mu);
		check_reader(p);
		if (got && o.kind == MEDHA_PCLI_ACCEPTED &&
		    (q = medha_map_get(&p->open, o.cookie)) != NULL)
			q->handle = o.handle;
		else if (got && o.kind == MEDHA_PCLI_REFUSED) {
			const char *reason = o.rc != 0 ? o.why
			    : o.msg.type == MEDHA_MSG_ERROR
			    ? o.msg.error.reason
			    : "unexpected answer";
			if ((q = medha_map_get(&p->open, o.cookie)) != NULL)
				medha_log(MEDHA_LOG_INFO,
				    "request %s refused: %s", q->id, reason);
			end_req(p, o.cookie, NULL, MEDHA_STATUS_REJECTED,
			    reason);
		} else if (got && o.kind == MEDHA_PCLI_EVENT &&
		    o.ev.kind == MEDHA_EVENT_RECORD)
			end_req(p, o.cookie, o.ev.record, 0, NULL);
		if (!got && medha_now() - (ok > p->t0 ? ok : p->t0) >
		        MEDHA_PROTO_DEAD_MS / 1e3 && p->open.n > 0)
			lose_all(p);
		int over = p->input_done && p->open.n == 0;
		pthread_mutex_unlock(&p->mu);
		if (got)
			medha_pcli_out_clear(&o);
		if (over)
			return NULL;
	}
}

/* STATUS, a second at most, before anything is submitted: 0 and *rep
 * (the caller's), or an error with why. */
static int
status_of(struct rp *p, struct medha_msg *rep, char *why, size_t whylen)
{
	struct medha_pcli_out o;

	medha_pcli_status(p->pc, 1);
	if (!medha_pcli_take(p->pc, 1.5, &o))
		return medha_why(why, whylen, MEDHA_ETIMEOUT, "no answer");
	if (o.rc != 0) {
		int rc = o.rc == MEDHA_EAUTH ? MEDHA_EAUTH : MEDHA_EPEER;
		medha_why(why, whylen, o.rc, "%s", o.why);
		medha_pcli_out_clear(&o);
		if (rc != MEDHA_EAUTH)
			usleep(100000); /* not connected: the dialer's next try */
		return rc;
	}
	*rep = o.msg;
	memset(&o.msg, 0, sizeof(o.msg));
	medha_pcli_out_clear(&o);
	return 0;
}

/*
 * Wait until the scheduler at addr says it is ready (wait 0: until it
 * answers, ready or not, for up to 10 s; any, nothing to send: the same
 * for up to 5 s, or wait if less); 0, or 1 after logging, at once when the server
 * refuses this program's secret (or its lack of one). What
 * it waits for is said every 5 s on a terminal, so that a wrong
 * address is not a silent minute, nor one where nothing listens.
 */
static int
wait_ready(struct rp *p, const char *addr, double wait, int any)
{
	struct medha_msg rep;
	double lim = wait > 0 && !(any && wait > 5) ? wait : any ? 5 : 10;
	double t0 = medha_now(), until = t0 + lim;
	double told = t0;
	char why[256] = "";
	int said = 0, refused = 0, rc;

	for (;;) {
		if (p->progress && medha_now() - told >= 5) {
			told = medha_now();
			progress("waiting for %s: %s (%.0f of %.0f s) ", addr,
			    said ? "not ready" : "no answer", told - t0,
			    until - t0);
		}
		if ((rc = status_of(p, &rep, why, sizeof(why))) == 0) {
			int ok = rep.type == MEDHA_MSG_STATUS_REPLY &&
			    (rep.status.ready || wait == 0 || any);
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
		} else if (rc == MEDHA_EAUTH) {
			/* the secret will not change by asking again (the
			   client said why, once) */
			medha_log(MEDHA_LOG_ERROR, "%s: %s: nothing submitted",
			    addr, why);
			return 1;
		} else if (!medha_pcli_connected(p->pc) &&
		    medha_link_refused(addr, &refused, why, sizeof(why))) {
			medha_log(MEDHA_LOG_ERROR, "%s", why);
			return 1;
		}
		if (medha_now() > until) {
			if (p->progress && told > t0)
				fputc('\n', stderr);
			medha_log(MEDHA_LOG_ERROR, "%s: %s after %.0f s%s%s",
			    addr, said ? "not ready" : "no answer",
			    lim, said ? "" : ": ",
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

/* The output is gone: cancel every request still open (mutex held). */
static void
cancel_open(struct rp *p)
{
	size_t it = 0;
	uint64_t k;
	void *v;

	while (medha_map_next(&p->open, &it, &k, &v))
		if (((struct open_req *)v)->handle != 0)
			medha_pcli_cancel(p->pc, ((struct open_req *)v)->handle);
}

/* Submit rs as the next line, now: 0, or 1 after its record (it cannot
 * be sent). */
static int
submit(struct rp *p, const struct medha_reqspec *rs, int stream)
{
	struct medha_reqspec m = *rs; /* borrowed */
	struct open_req *q = calloc(1, sizeof(*q));
	uint64_t cookie;
	char why[256];

	if (q == NULL)
		die(1, "out of memory");
	memcpy(q->id, rs->id, MEDHA_ID_MAX);
	q->arrival = rs->arrival;
	q->prompt_tokens = rs->prompt_tokens;
	m.no_stream = !stream; /* it prints only records */
	pthread_mutex_lock(&p->mu);
	cookie = ++p->lines;
	if (medha_map_put(&p->open, cookie, q) != 0)
		die(1, "out of memory");
	p->submitted++;
	pthread_mutex_unlock(&p->mu);
	if (medha_pcli_submit(p->pc, &m, cookie, MEDHA_PROTO_DEAD_MS / 1e3,
	        why, sizeof(why)) == 0)
		return 0;
	medha_log(MEDHA_LOG_INFO, "request %s refused: %s", rs->id, why);
	pthread_mutex_lock(&p->mu);
	end_req(p, cookie, NULL, MEDHA_STATUS_REJECTED, why);
	pthread_mutex_unlock(&p->mu);
	return 1;
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
	double speed = 1, wait = 60, last = 0;
	int64_t back = 0;
	FILE *f = stdin, *of;
	pthread_t taker;
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
	if (medha_pcli_open(&p.pc, addr, NULL, NULL, why, sizeof(why)) != 0) {
		medha_log(MEDHA_LOG_ERROR, "%s", why);
		return 2;
	}
	pthread_mutex_init(&p.mu, NULL);
	p.progress = isatty(STDERR_FILENO);
	memset(&rs, 0, sizeof(rs));
	/* the first request read before waiting: with nothing to send,
	   replay only checks that the server answers (a few seconds, not
	   --wait for a ready replica) */
	rc = medha_trace_next(t, &rs);
	if (wait_ready(&p, addr, wait, rc != 1) != 0) {
		medha_reqspec_clear(&rs);
		medha_pcli_close(p.pc);
		return 1;
	}
	p.t0 = medha_now();
	pthread_create(&taker, NULL, take_main, &p);
	for (; rc == 1; rc = medha_trace_next(t, &rs)) {
		double at = p.t0 + rs.arrival / speed;

		if (wait_until(&p, 0) != 0) /* gone already? */
			break;
		in_order(in, &rs, &last, &back);
		if (wait_until(&p, at) != 0)
			break;
		submit(&p, &rs, stream);
		medha_reqspec_clear(&rs);
	}
	pthread_mutex_lock(&p.mu);
	if (p.wrerr) /* nobody reads the records: nothing left to wait for */
		cancel_open(&p);
	pthread_mutex_unlock(&p.mu);
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
	pthread_join(taker, NULL);
	if (p.progress)
		fputc('\n', stderr);
	medha_trace_close(t);
	if (f != stdin)
		fclose(f);
	medha_pcli_close(p.pc);
	medha_map_free(&p.open);
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
