/*
 * hostile_test.c: the acceptance test for hostile input to the live
 * programs. It starts a real medha-sched -l and one sim medha-worker from
 * $MEDHA_BIN (and skips, saying so, without it), waits until the replica
 * says it is ready, and then throws at the scheduler's socket what a
 * broken or malicious peer might send: seeded random bytes, every
 * truncation of a valid SUBMIT, trailing bytes, wrong versions, unknown
 * and misdirected message types, fields of the wrong type or out of
 * range, worker messages from a peer that never said HELLO, HELLOs with
 * absurd values, lengths that claim more than the frame holds, deep
 * nesting, and a frame just over MEDHA_LINK_MAX_FRAME. Each goes once
 * through a client made for it (closed right after, so the scheduler
 * also sees many connections come and go) and once through one
 * long-lived client. Every frame must be answered with an ERROR that
 * says why, except the oversized one, which costs its sender the
 * connection (man/medha-proto.7, net/link.h). Afterwards the replica
 * must still serve a request to the end, still count its worker, and
 * have logged its refusals; SIGTERM must stop both programs with status
 * 0, and under the sanitizer build their logs must hold no report.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <msgpack.h>

#include "net/link.h"
#include "net/proto.h"

#define N_RANDOM 300    /* random frames */
#define RANDOM_MAX 4096 /* their largest length, bytes */
#define SEED 20261123u

/* ---- the two programs ---- */

struct live {
	int skip;        /* MEDHA_BIN unset */
	int asan;        /* the sanitizer build: slower, logs checked */
	int failed;      /* a test did not reach its end: show the logs */
	double slow;     /* time limits are multiplied by this */
	char bin[1024];  /* $MEDHA_BIN */
	char dir[64];    /* temp dir for the logs */
	char url[128];   /* the scheduler's address */
	char slog[1100]; /* the scheduler's stderr */
	char wlog[1100]; /* the worker's stderr */
	pid_t sched, worker;
	struct medha_cli *cli; /* the long-lived client */
	int sent;              /* hostile frames sent (each twice) */
	int undecodable;       /* of those, frames our decoder refuses too */
};

static struct live L;

static double
mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Start argv[0] with stdin and stdout on /dev/null, stderr into log. */
static pid_t
spawn(char *const argv[], const char *log)
{
	pid_t pid = fork();

	if (pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		int nul = open("/dev/null", O_RDWR);

		if (fd < 0 || nul < 0)
			_exit(126);
		dup2(nul, 0);
		dup2(nul, 1);
		dup2(fd, 2);
		execv(argv[0], argv);
		dprintf(2, "hostile_test: cannot run %s: %s\n", argv[0],
		    strerror(errno));
		_exit(127);
	}
	return pid;
}

/* 1 if pid has exited (reaped; *status filled), 0 if it still runs. */
static int
reaped(pid_t pid, int *status)
{
	return waitpid(pid, status, WNOHANG) == pid;
}

/* Wait up to secs for pid to exit; 1 and *status, or 0. */
static int
wait_exit(pid_t pid, double secs, int *status)
{
	double until = mono() + secs;

	do {
		if (reaped(pid, status))
			return 1;
		usleep(20000);
	} while (mono() < until);
	return 0;
}

static void
show_log(const char *name, const char *path)
{
	char line[512];
	FILE *f = fopen(path, "r");
	long n = 0, skip;

	if (f == NULL)
		return;
	while (fgets(line, sizeof(line), f) != NULL)
		n++;
	rewind(f);
	skip = n > 40 ? n - 40 : 0;
	fprintf(stderr, "---- %s (%s), last %ld of %ld lines\n", name, path,
	    n - skip, n);
	for (long i = 0; fgets(line, sizeof(line), f) != NULL; i++)
		if (i >= skip)
			fputs(line, stderr);
	fclose(f);
}

/* Lines of path holding s. */
static int
count_in_file(const char *path, const char *s)
{
	char line[4096];
	FILE *f = fopen(path, "r");
	int n = 0;

	if (f == NULL)
		return -1;
	while (fgets(line, sizeof(line), f) != NULL)
		n += strstr(line, s) != NULL;
	fclose(f);
	return n;
}

/* ---- calls ---- */

/* Encode m (a message a well-behaved peer may send); *len bytes, freed
 * by the caller. */
static void *
encode(const struct medha_msg *m, size_t *len)
{
	void *buf;
	char why[256];

	if (medha_msg_encode(m, &buf, len, why, sizeof(why)) != 0)
		fail_msg("cannot encode %s: %s", medha_msg_type_name(m->type),
		    why);
	return buf;
}

/* Call on c, decode the answer into *rep; 0 or the transport's code. */
static int
call(struct medha_cli *c, const void *req, size_t len, struct medha_msg *rep,
    double timeout)
{
	void *in;
	size_t n;
	char why[256];
	int rc;

	if ((rc = medha_cli_call(c, 0, req, len, &in, &n, timeout)) != 0)
		return rc;
	rc = medha_msg_decode(rep, in, n, why, sizeof(why));
	free(in);
	if (rc != 0)
		fail_msg("the scheduler's answer does not decode: %s", why);
	return 0;
}

/* STATUS on c: 0 and *st, or the transport's code. */
static int
status(struct medha_cli *c, struct medha_msg_status *st, double timeout)
{
	struct medha_msg m = {.type = MEDHA_MSG_STATUS}, rep;
	void *buf;
	size_t len;
	int rc;

	buf = encode(&m, &len);
	rc = call(c, buf, len, &rep, timeout);
	free(buf);
	if (rc != 0)
		return rc;
	if (rep.type != MEDHA_MSG_STATUS_REPLY)
		fail_msg("STATUS answered with %s",
		    medha_msg_type_name(rep.type));
	*st = rep.status;
	medha_msg_clear(&rep);
	return 0;
}

/* The scheduler must answer frame with an ERROR that says why. */
static void
expect_error_on(struct medha_cli *c, const char *via, const void *buf,
    size_t len, const char *what)
{
	struct medha_msg rep;
	int rc = call(c, buf, len, &rep, 10 * L.slow);

	if (rc != 0)
		fail_msg("%s (%zu bytes, %s client): no answer: %s", what, len,
		    via, medha_strerror(rc));
	if (rep.type != MEDHA_MSG_ERROR)
		fail_msg("%s (%zu bytes, %s client): answered with %s", what,
		    len, via, medha_msg_type_name(rep.type));
	if (rep.error.code >= 0 || rep.error.reason[0] == '\0')
		fail_msg("%s: ERROR %d without a reason", what, rep.error.code);
	if (getenv("HOSTILE_VERBOSE") != NULL)
		fprintf(stderr, "%s (%s): %s\n", what, via, rep.error.reason);
	medha_msg_clear(&rep);
}

/*
 * Send frame through a new client (closed after the answer) and through
 * the long-lived one; both must get an ERROR.
 */
static void
hostile(const void *buf, size_t len, const char *what)
{
	struct medha_cli *c;
	struct medha_msg m;
	char why[256];

	if (medha_msg_decode(&m, buf, len, why, sizeof(why)) == 0)
		medha_msg_clear(&m); /* decodes, refused by the scheduler */
	else
		L.undecodable++;
	L.sent++;
	assert_int_equal(medha_cli_open(&c, L.url, 1, why, sizeof(why)), 0);
	expect_error_on(c, "new", buf, len, what);
	medha_cli_close(c);
	expect_error_on(L.cli, "long-lived", buf, len, what);
}

/* ---- msgpack frames built by hand ---- */

enum vt {
	VT_END = 0, /* end of a list of overrides */
	VT_INT,
	VT_UINT,
	VT_DBL,
	VT_STR,
	VT_BIN,
	VT_NIL,
	VT_BOOL,
	VT_IDS,  /* an array of integers */
	VT_STRS, /* an array of strings */
	VT_MAP,  /* {"a": 1} */
	VT_DROP, /* leave the key out */
};

struct val {
	int t;
	int64_t i;
	uint64_t u;
	double d;
	const char *s; /* VT_STR, VT_BIN: n bytes */
	size_t n;      /* bytes of s, elements of ids or strs */
	const int64_t *ids;
	const char *const *strs;
};

#define I(x) {.t = VT_INT, .i = (x)}
#define U(x) {.t = VT_UINT, .u = (x)}
#define D(x) {.t = VT_DBL, .d = (x)}
#define S(x) {.t = VT_STR, .s = (x), .n = sizeof(x) - 1}
#define BIN(x) {.t = VT_BIN, .s = (x), .n = sizeof(x) - 1}
#define NIL {.t = VT_NIL}
#define MAP {.t = VT_MAP}
#define DROP {.t = VT_DROP}
#define IDS(...)                                  \
	{.t = VT_IDS, .ids = (const int64_t[]){__VA_ARGS__}, \
	    .n = sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t)}
#define STRS(...)                                             \
	{.t = VT_STRS, .strs = (const char *const[]){__VA_ARGS__},     \
	    .n = sizeof((const char *const[]){__VA_ARGS__}) /     \
	        sizeof(const char *)}
#define NOIDS {.t = VT_IDS, .n = 0}
#define X16 "xxxxxxxxxxxxxxxx"
#define X64 X16 X16 X16 X16

struct kv {
	const char *key;
	struct val v;
};

static void
pack_str(msgpack_packer *pk, const char *s, size_t n)
{
	msgpack_pack_str(pk, n);
	msgpack_pack_str_body(pk, s, n);
}

static void
pack_val(msgpack_packer *pk, const struct val *v)
{
	switch (v->t) {
	case VT_INT: msgpack_pack_int64(pk, v->i); break;
	case VT_UINT: msgpack_pack_uint64(pk, v->u); break;
	case VT_DBL: msgpack_pack_double(pk, v->d); break;
	case VT_STR: pack_str(pk, v->s, v->n); break;
	case VT_BIN:
		msgpack_pack_bin(pk, v->n);
		msgpack_pack_bin_body(pk, v->s, v->n);
		break;
	case VT_NIL: msgpack_pack_nil(pk); break;
	case VT_BOOL:
		if (v->i)
			msgpack_pack_true(pk);
		else
			msgpack_pack_false(pk);
		break;
	case VT_IDS:
		msgpack_pack_array(pk, v->n);
		for (size_t i = 0; i < v->n; i++)
			msgpack_pack_int64(pk, v->ids[i]);
		break;
	case VT_STRS:
		msgpack_pack_array(pk, v->n);
		for (size_t i = 0; i < v->n; i++)
			pack_str(pk, v->strs[i], strlen(v->strs[i]));
		break;
	case VT_MAP:
		msgpack_pack_map(pk, 1);
		pack_str(pk, "a", 1);
		msgpack_pack_int(pk, 1);
		break;
	default: fail_msg("bad value kind %d", v->t);
	}
}

/*
 * Pack the map base (nbase entries) with ov applied: an override of a
 * key in base replaces its value (VT_DROP removes it), any other key is
 * added at the end. A key given twice in ov is packed twice.
 */
static void
pack_map(msgpack_packer *pk, const struct kv *base, int nbase,
    const struct kv *ov)
{
	struct kv all[32];
	int n = 0, live = 0, done[32] = {0};

	for (int i = 0; i < nbase; i++)
		all[n++] = base[i];
	for (int j = 0; ov != NULL && ov[j].key != NULL; j++) {
		int k;
		for (k = 0; k < nbase; k++)
			if (strcmp(all[k].key, ov[j].key) == 0)
				break;
		if (k < nbase && !done[k]) {
			all[k].v = ov[j].v;
			done[k] = 1;
		}
		else if (ov[j].v.t != VT_DROP && n < 32)
			all[n++] = ov[j];
	}
	for (int i = 0; i < n; i++)
		live += all[i].v.t != VT_DROP;
	msgpack_pack_map(pk, (size_t)live);
	for (int i = 0; i < n; i++)
		if (all[i].v.t != VT_DROP) {
			pack_str(pk, all[i].key, strlen(all[i].key));
			pack_val(pk, &all[i].v);
		}
}

static const struct kv submit_base[] = {
    {"id", S("h")},
    {"prompt_tokens", I(8)},
    {"max_tokens", I(1)},
};

static const struct kv hello_base[] = {
    {"backend", S("sim")},
    {"model", S("smollm2-135m")},
    {"gpu", S("a100")},
    {"tp", I(1)},
    {"spp", I(1)},
    {"kvp", I(1)},
    {"rank_tp", I(0)},
    {"rank_spp", I(0)},
    {"rank_kvp", I(0)},
    {"layers", IDS(0, 30)},
    {"block_size", I(16)},
    {"n_blocks", I(1000)},
    {"max_seqs", I(64)},
    {"vocab", I(49152)},
    {"dim", I(576)},
    {"pid", I(1)},
};

struct mcase {
	const char *what;
	struct kv ov[4];
};

/* SUBMITs that break one rule each (or are refused by the scheduler). */
static const struct mcase submit_cases[] = {
    {"max_tokens as a string", {{"max_tokens", S("8")}}},
    {"max_tokens negative", {{"max_tokens", I(-1)}}},
    {"max_tokens a float", {{"max_tokens", D(8.0)}}},
    {"max_tokens nil", {{"max_tokens", NIL}}},
    {"max_tokens 2^64-1", {{"max_tokens", U(UINT64_MAX)}}},
    {"max_tokens missing", {{"max_tokens", DROP}}},
    {"id as an int array", {{"id", IDS(1, 2, 3)}}},
    {"id empty", {{"id", S("")}}},
    {"id of 64 bytes", {{"id", S(X64)}}},
    {"id with a NUL", {{"id", S("a\0b")}}},
    {"id as a map", {{"id", MAP}}},
    {"id missing", {{"id", DROP}}},
    {"prompt_ids with a negative id",
        {{"prompt_tokens", DROP}, {"prompt_ids", IDS(1, -1, 2)}}},
    {"prompt_ids with id 2^31",
        {{"prompt_tokens", DROP}, {"prompt_ids", IDS(1, 2147483648LL)}}},
    {"prompt_ids with id 2^63-1",
        {{"prompt_tokens", DROP}, {"prompt_ids", IDS(1, INT64_MAX)}}},
    {"prompt_ids with id 2^31-1 (outside the vocabulary)",
        {{"prompt_tokens", DROP}, {"prompt_ids", IDS(1, 2147483647)}}},
    {"prompt_ids with id 49152 (the vocabulary's size)",
        {{"prompt_tokens", DROP}, {"prompt_ids", IDS(49152)}}},
    {"prompt_ids empty", {{"prompt_tokens", DROP}, {"prompt_ids", NOIDS}}},
    {"prompt_ids as a map", {{"prompt_tokens", DROP}, {"prompt_ids", MAP}}},
    {"prompt_ids as a string",
        {{"prompt_tokens", DROP}, {"prompt_ids", S("1 2")}}},
    {"prompt_ids of strings",
        {{"prompt_tokens", DROP},
            {"prompt_ids", {.t = VT_STRS, .strs = (const char *const[]){"1"},
                               .n = 1}}}},
    {"prompt_ids and a different prompt_tokens",
        {{"prompt_ids", IDS(1, 2, 3)}}},
    {"prompt_tokens 0", {{"prompt_tokens", I(0)}}},
    {"prompt_tokens negative", {{"prompt_tokens", I(-8)}}},
    {"prompt_tokens a string", {{"prompt_tokens", S("8")}}},
    {"prompt_tokens a float", {{"prompt_tokens", D(8.0)}}},
    {"no prompt at all", {{"prompt_tokens", DROP}}},
    {"a text prompt (no tokenizer for a sim model)",
        {{"prompt_tokens", DROP}, {"prompt", S("Hello there")}}},
    {"a text prompt with a NUL",
        {{"prompt_tokens", DROP}, {"prompt", S("a\0b")}}},
    {"prompt as an array", {{"prompt_tokens", DROP}, {"prompt", IDS(1)}}},
    {"stop as a map", {{"stop", MAP}}},
    {"stop as a string", {{"stop", S("a")}}},
    {"five stop strings", {{"stop", STRS("a", "b", "c", "d", "e")}}},
    {"an empty stop string", {{"stop", STRS("")}}},
    {"a stop string of 65 bytes", {{"stop", STRS(X64 "x")}}},
    {"a stop string that is an int", {{"stop", IDS(7)}}},
    {"temperature NaN", {{"temperature", D(NAN)}}},
    {"temperature infinite", {{"temperature", D(INFINITY)}}},
    {"temperature negative", {{"temperature", D(-0.5)}}},
    {"temperature 101", {{"temperature", D(101)}}},
    {"temperature 1e300", {{"temperature", D(1e300)}}},
    {"temperature a string", {{"temperature", S("hot")}}},
    {"top_p 2", {{"top_p", D(2)}}},
    {"top_p NaN", {{"top_p", D(NAN)}}},
    {"top_k negative", {{"top_k", I(-1)}}},
    {"top_k 2^24+1", {{"top_k", I((1 << 24) + 1)}}},
    {"top_k 2^64-1", {{"top_k", U(UINT64_MAX)}}},
    {"top_k a float", {{"top_k", D(4.0)}}},
    {"seed negative", {{"seed", I(-1)}}},
    {"seed a float", {{"seed", D(7.0)}}},
    {"ignore_eos an int", {{"ignore_eos", I(1)}}},
    {"ignore_eos nil", {{"ignore_eos", NIL}}},
    {"arrival negative", {{"arrival", D(-1)}}},
    {"arrival NaN", {{"arrival", D(NAN)}}},
    {"arrival infinite", {{"arrival", D(INFINITY)}}},
    {"arrival a string", {{"arrival", S("now")}}},
    {"ttft_slo 0", {{"ttft_slo", I(0)}}},
    {"ttft_slo negative", {{"ttft_slo", D(-1)}}},
    {"tpot_slo NaN", {{"tpot_slo", D(NAN)}}},
    {"an unknown key", {{"priority", I(1)}}},
    {"id twice", {{"id", S("a")}, {"id", S("b")}}},
    {"a binary key", {{"id", BIN("h")}}},
};

/* HELLOs from a peer that is not the replica's worker. */
static const struct mcase hello_cases[] = {
    {"HELLO block_size 0", {{"block_size", I(0)}}},
    {"HELLO n_blocks -1", {{"n_blocks", I(-1)}}},
    {"HELLO backend tpu", {{"backend", S("tpu")}}},
    {"HELLO backend cuda", {{"backend", S("cuda")}}},
    {"HELLO backend of 16 bytes", {{"backend", S(X16)}}},
    {"HELLO empty model", {{"model", S("")}}},
    {"HELLO empty gpu", {{"gpu", S("")}}},
    {"HELLO tp 0", {{"tp", I(0)}}},
    {"HELLO tp 65537", {{"tp", I(65537)}}},
    {"HELLO tp 2 (not the replica's layout)",
        {{"tp", I(2)}, {"layers", IDS(0, 30)}}},
    {"HELLO tp = spp = kvp = 65536",
        {{"tp", I(65536)}, {"spp", I(65536)}, {"kvp", I(65536)}}},
    {"HELLO rank_tp out of its degree", {{"rank_tp", I(1)}}},
    {"HELLO layers backwards", {{"layers", IDS(30, 0)}}},
    {"HELLO layers of one element", {{"layers", IDS(0)}}},
    {"HELLO layers beyond 65536", {{"layers", IDS(0, 65537)}}},
    {"HELLO vocab 0", {{"vocab", I(0)}}},
    {"HELLO dim 2^31", {{"dim", I(2147483648LL)}}},
    {"HELLO pid -1", {{"pid", I(-1)}}},
    {"HELLO max_seqs a string", {{"max_seqs", S("64")}}},
    {"HELLO without n_blocks", {{"n_blocks", DROP}}},
    {"HELLO with an unknown key", {{"colour", S("blue")}}},
    {"HELLO vocab not the model's", {{"vocab", I(1000)}}},
    {"HELLO of a second worker (the replica has one)", {{.key = NULL}}},
};

/* [1, type, map] with the map of base and ov. */
static void
send_map_frame(int type, const struct kv *base, int nbase,
    const struct mcase *c)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_array(&pk, 3);
	msgpack_pack_int(&pk, 1);
	msgpack_pack_int(&pk, type);
	pack_map(&pk, base, nbase, c->ov);
	hostile(sb.data, sb.size, c->what);
	msgpack_sbuffer_destroy(&sb);
}

/* Frames given as bytes. */
struct raw {
	const char *what;
	const char *bytes;
	size_t n;
};
#define RAW(what, b) {what, b, sizeof(b) - 1}

static const struct raw raw_cases[] = {
    RAW("an empty array", "\x90"),
    RAW("a version alone", "\x91\x01"),
    RAW("version 2", "\x92\x02\x07"),
    RAW("version 0", "\x92\x00\x07"),
    RAW("version as a string", "\x92\xa1"
                               "1\x07"),
    RAW("version -1", "\x92\xff\x07"),
    RAW("version 2^64-1", "\x92\xcf\xff\xff\xff\xff\xff\xff\xff\xff\x07"),
    RAW("version as a float", "\x92\xcb\x3f\xf0\0\0\0\0\0\0\x07"),
    RAW("type 0", "\x92\x01\x00"),
    RAW("type 17", "\x92\x01\x11"),
    RAW("type 200", "\x92\x01\xcc\xc8"),
    RAW("type 65535", "\x92\x01\xcd\xff\xff"),
    RAW("type 2^64-1", "\x92\x01\xcf\xff\xff\xff\xff\xff\xff\xff\xff"),
    RAW("type -7", "\x92\x01\xf9"),
    RAW("type as a float", "\x92\x01\xcb\x40\x1c\0\0\0\0\0\0"),
    RAW("type as a string", "\x92\x01\xa1"
                            "7"),
    RAW("a map for a frame", "\x81\xa1"
                             "1\x07"),
    RAW("nil for a frame", "\xc0"),
    RAW("a never-used byte", "\xc1"),
    RAW("a lone integer", "\x07"),
    RAW("STATUS and a trailing nil", "\x92\x01\x07\xc0"),
    RAW("STATUS and trailing text", "\x92\x01\x07junk"),
    RAW("STATUS with a body", "\x93\x01\x07\x00"),
    RAW("POLL with a body", "\x93\x01\x03\x01"),
    RAW("SUBMIT without a body", "\x92\x01\x01"),
    RAW("SUBMIT with a string body", "\x93\x01\x01\xa1x"),
    RAW("SUBMIT with two bodies", "\x94\x01\x01\x80\x80"),
    RAW("SUBMIT with a map keyed by an integer", "\x93\x01\x01\x81\x01\x01"),
    RAW("an array claiming 2^32-1 elements", "\xdd\xff\xff\xff\xff\x01\x07"),
    RAW("a map claiming 2^32-1 pairs", "\x93\x01\x01\xdf\xff\xff\xff\xff"),
    RAW("a string claiming 4 GiB", "\x93\x01\x01\x81\xdb\xff\xff\xff\xff"
                                  "id"),
    RAW("a bin claiming 4 GiB", "\x93\x01\x05\xc6\xff\xff\xff\xff"),
    RAW("an ext value", "\x93\x01\x05\xd4\x01\x00"),
    RAW("CANCEL of a string", "\x93\x01\x05\xa1x"),
    RAW("CANCEL of -1", "\x93\x01\x05\xff"),
    RAW("CANCEL of handle 0", "\x93\x01\x05\x00"),
    RAW("CANCEL of a handle never given", "\x93\x01\x05\xcd\x30\x39"),
    RAW("CANCEL of handle 2^64-1",
        "\x93\x01\x05\xcf\xff\xff\xff\xff\xff\xff\xff\xff"),
    RAW("READY of worker 0 from a stranger", "\x93\x01\x0c\x00"),
    RAW("READY of worker 1", "\x93\x01\x0c\x01"),
    RAW("READY of worker 2^31-1", "\x93\x01\x0c\xce\x7f\xff\xff\xff"),
    RAW("READY of worker -1", "\x93\x01\x0c\xff"),
    RAW("HEARTBEAT of worker 0 from a stranger", "\x93\x01\x0e\x00"),
    RAW("RESULT of worker 0 from a stranger", "\x96\x01\x0d\x00\x01\x90\xa0"),
    RAW("RESULT with a token for handle 1",
        "\x96\x01\x0d\x00\x01\x91\x92\x01\x05\xa0"),
    RAW("RESULT with an error from a stranger", "\x96\x01\x0d\x00\x01\x90\xa4"
                                                "boom"),
    RAW("HELLO with an empty map", "\x93\x01\x0a\x80"),
    RAW("HELLO with nil", "\x93\x01\x0a\xc0"),
};

/* Messages only the scheduler sends, well formed. */
static void
send_misdirected(void)
{
	struct medha_msg m;
	struct medha_msg_event ev = {.kind = MEDHA_EVENT_TOKENS, .handle = 1};
	uint64_t frees[] = {1, 2};
	int32_t ids[] = {5};
	struct medha_msg_item item = {
	    .handle = 1, .pos = 0, .ids = ids, .n_ids = 1, .sample = 1};
	int types[] = {MEDHA_MSG_ACCEPTED, MEDHA_MSG_EVENTS, MEDHA_MSG_OK,
	    MEDHA_MSG_STATUS_REPLY, MEDHA_MSG_ERROR, MEDHA_MSG_WELCOME,
	    MEDHA_MSG_BATCH, MEDHA_MSG_IDLE};
	char what[64];

	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		void *buf;
		size_t len;

		memset(&m, 0, sizeof(m));
		m.type = types[i];
		switch (m.type) {
		case MEDHA_MSG_ACCEPTED:
			strcpy(m.accepted.id, "q1");
			m.accepted.handle = 1;
			break;
		case MEDHA_MSG_EVENTS:
			m.events.ev = &ev;
			m.events.n = 1;
			break;
		case MEDHA_MSG_STATUS_REPLY: m.status.ready = 1; break;
		case MEDHA_MSG_ERROR:
			m.error.code = MEDHA_EINVAL;
			strcpy(m.error.reason, "you are wrong");
			break;
		case MEDHA_MSG_BATCH:
			m.batch.seq = 1;
			m.batch.items = &item;
			m.batch.n_items = 1;
			/* fall through */
		case MEDHA_MSG_IDLE:
			m.batch.frees = frees;
			m.batch.n_frees = 2;
			break;
		}
		buf = encode(&m, &len);
		snprintf(what, sizeof(what), "%s from a client",
		    medha_msg_type_name(m.type));
		hostile(buf, len, what);
		free(buf);
	}
}

/* A valid SUBMIT with every field, for truncation and trailing bytes. */
static void *
full_submit(size_t *len)
{
	struct medha_msg m = {.type = MEDHA_MSG_SUBMIT};
	int32_t ids[16];
	char *stop[2] = {"a", "bc"};

	for (int i = 0; i < 16; i++)
		ids[i] = 100 + i;
	strcpy(m.submit.id, "truncated");
	m.submit.arrival = 0.5;
	m.submit.prompt_ids = ids;
	m.submit.prompt_tokens = 16;
	m.submit.max_tokens = 4;
	m.submit.sampling = medha_sampling_greedy;
	m.submit.sampling.temp = 0.5f;
	m.submit.sampling.top_k = 40;
	m.submit.sampling.top_p = 0.875f;
	m.submit.sampling.seed = 7;
	m.submit.ignore_eos = 1;
	m.submit.n_stop = 2;
	m.submit.stop[0] = stop[0];
	m.submit.stop[1] = stop[1];
	m.submit.ttft_slo = 1;
	m.submit.tpot_slo = 0.125;
	return encode(&m, len);
}

static uint64_t rng = SEED;

static uint64_t
next_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* ---- the tests ---- */

static void
test_start(void **state)
{
	const char *bin = getenv("MEDHA_BIN");
	struct medha_msg_status st;
	char sched[1100], worker[1100], why[256];
	double until;

	(void)state;
	if (bin == NULL || bin[0] == '\0') {
		fprintf(stderr, "hostile_test: skip: MEDHA_BIN is not set "
		                "(run it through tests/run.sh)\n");
		L.skip = 1;
		skip();
	}
	L.failed = 1;
	snprintf(L.bin, sizeof(L.bin), "%s", bin);
	L.asan = strstr(bin, "asan") != NULL;
	L.slow = L.asan ? 3 : 1;
	/* sanitizer reports go to the logs; leaks at exit are reported
	 * (and turn the exit status into 23) */
	setenv("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0", 0);
	setenv("UBSAN_OPTIONS", "print_stacktrace=1", 0);
	snprintf(L.dir, sizeof(L.dir), "/tmp/medha-hostile-XXXXXX");
	assert_non_null(mkdtemp(L.dir));
	snprintf(L.url, sizeof(L.url), "ipc:///tmp/medha-hostile-%d.sock",
	    (int)getpid());
	snprintf(L.slog, sizeof(L.slog), "%s/sched.log", L.dir);
	snprintf(L.wlog, sizeof(L.wlog), "%s/worker.log", L.dir);
	snprintf(sched, sizeof(sched), "%s/medha-sched", L.bin);
	snprintf(worker, sizeof(worker), "%s/medha-worker", L.bin);
	{
		char *sargv[] = {sched, "-l", L.url, "-v", NULL};
		char *wargv[] = {worker, "-s", L.url, "--backend", "sim",
		    "--gpu", "a100", "-m", "smollm2-135m", "--speed", "100",
		    NULL};
		assert_true((L.sched = spawn(sargv, L.slog)) > 0);
		assert_true((L.worker = spawn(wargv, L.wlog)) > 0);
	}
	assert_int_equal(medha_cli_open(&L.cli, L.url, 1, why, sizeof(why)),
	    0);
	until = mono() + 20 * L.slow;
	for (;;) {
		int rc = status(L.cli, &st, 1), ws;

		if (rc == 0 && st.ready && st.workers == 1)
			break;
		if (reaped(L.sched, &ws)) {
			L.sched = 0;
			fail_msg("medha-sched exited (status %#x)", ws);
		}
		if (reaped(L.worker, &ws)) {
			L.worker = 0;
			fail_msg("medha-worker exited (status %#x)", ws);
		}
		if (mono() > until)
			fail_msg("the replica did not become ready in %.0f s",
			    20 * L.slow);
		if (rc == 0)
			usleep(50000);
	}
	assert_string_equal(st.backend, "sim");
	L.failed = 0;
}

static void
test_hostile_frames(void **state)
{
	struct medha_msg_status st;
	unsigned char *buf, *big;
	size_t n, len;
	char what[96];
	void *sub;
	double t0 = mono();

	(void)state;
	if (L.skip)
		skip();
	L.failed = 1;
	assert_true(L.sched > 0 && L.worker > 0);

	/* random bytes, and random bytes after a frame's first bytes; a
	 * draw our own decoder takes (vanishingly rare) is drawn again */
	buf = malloc(RANDOM_MAX + 8);
	assert_non_null(buf);
	for (int i = 0; i < N_RANDOM; i++) {
		struct medha_msg m;
		char why[128];

		do {
			n = next_rand() % (RANDOM_MAX + 1);
			for (size_t k = 0; k < n; k++)
				buf[k] = (unsigned char)next_rand();
			if (i % 2 == 1 && n >= 3) { /* [1, type, ...] */
				buf[0] = (unsigned char)(0x92 +
				    next_rand() % 4);
				buf[1] = 0x01;
				buf[2] = (unsigned char)(next_rand() % 18);
			}
		} while (medha_msg_decode(&m, buf, n, why, sizeof(why)) == 0 &&
		    (medha_msg_clear(&m), 1));
		snprintf(what, sizeof(what), "random frame %d", i);
		hostile(buf, n, what);
	}
	free(buf);

	/* every truncation of a valid SUBMIT, then trailing bytes */
	sub = full_submit(&len);
	for (n = 0; n < len; n++) {
		snprintf(what, sizeof(what), "SUBMIT cut to %zu of %zu bytes",
		    n, len);
		hostile(sub, n, what);
	}
	buf = malloc(len + 4);
	assert_non_null(buf);
	memcpy(buf, sub, len);
	buf[len] = 0xc0;
	hostile(buf, len + 1, "SUBMIT and a trailing nil");
	memcpy(buf + len, "\x01\x02\x03", 3);
	hostile(buf, len + 3, "SUBMIT and three trailing bytes");
	free(buf);
	free(sub);

	for (size_t i = 0; i < sizeof(raw_cases) / sizeof(raw_cases[0]); i++)
		hostile(raw_cases[i].bytes, raw_cases[i].n, raw_cases[i].what);
	for (size_t i = 0; i < sizeof(submit_cases) / sizeof(submit_cases[0]);
	     i++)
		send_map_frame(MEDHA_MSG_SUBMIT, submit_base,
		    sizeof(submit_base) / sizeof(submit_base[0]),
		    &submit_cases[i]);
	for (size_t i = 0; i < sizeof(hello_cases) / sizeof(hello_cases[0]);
	     i++)
		send_map_frame(MEDHA_MSG_HELLO, hello_base,
		    sizeof(hello_base) / sizeof(hello_base[0]),
		    &hello_cases[i]);
	send_misdirected();

	/* nesting far deeper than 8 levels */
	n = 100000;
	buf = malloc(n + 4);
	assert_non_null(buf);
	memcpy(buf, "\x93\x01\x01", 3);
	memset(buf + 3, 0x91, n - 1);
	buf[n + 2] = 0x90;
	hostile(buf, n + 3, "a SUBMIT nested 100000 deep");
	free(buf);

	/* just under the frame limit: refused, not choked on */
	n = MEDHA_LINK_MAX_FRAME - 64;
	big = malloc(MEDHA_LINK_MAX_FRAME + 16);
	assert_non_null(big);
	memset(big, 0xc1, MEDHA_LINK_MAX_FRAME + 16);
	memcpy(big, "\x93\x01\x01", 3);
	hostile(big, n, "a frame of 64 MiB - 64 bytes");

	/* just over it: the transport drops the sender's connection */
	{
		struct medha_cli *c;
		void *rep;
		size_t rn;
		char why[256];
		int rc;

		assert_int_equal(medha_cli_open(&c, L.url, 1, why, sizeof(why)),
		    0);
		rc = medha_cli_call(c, 0, big, MEDHA_LINK_MAX_FRAME + 16, &rep,
		    &rn, 2 * L.slow);
		if (rc == 0)
			fail_msg("a frame over the limit was answered");
		assert_true(rc == MEDHA_EPEER || rc == MEDHA_ETIMEOUT);
		medha_cli_close(c);
		rc = medha_cli_call(L.cli, 0, big, MEDHA_LINK_MAX_FRAME + 1,
		    &rep, &rn, 2 * L.slow);
		if (rc == 0)
			fail_msg("a frame over the limit was answered");
		assert_true(rc == MEDHA_EPEER || rc == MEDHA_ETIMEOUT);
	}
	free(big);

	/* the long-lived client dials again and is served */
	assert_int_equal(status(L.cli, &st, 10 * L.slow), 0);
	assert_true(st.ready);
	hostile("\x92\x02\x07", 3, "version 2, after the oversized frame");
	fprintf(stderr,
	    "hostile_test: %d hostile frames (%d undecodable) sent twice "
	    "each in %.1f s\n",
	    L.sent, L.undecodable, mono() - t0);
	L.failed = 0;
}

static void
test_still_serving(void **state)
{
	struct medha_msg m = {.type = MEDHA_MSG_SUBMIT}, rep;
	struct medha_msg poll = {.type = MEDHA_MSG_POLL};
	struct medha_msg_status st;
	struct medha_cli *c;
	void *buf, *pbuf;
	size_t len, plen;
	uint64_t handle;
	int64_t ntok = 0;
	double until;
	char why[256];
	int done = 0, n;

	(void)state;
	if (L.skip)
		skip();
	L.failed = 1;
	assert_true(L.sched > 0 && L.worker > 0);
	assert_int_equal(kill(L.sched, 0), 0);
	assert_int_equal(kill(L.worker, 0), 0);

	/* a valid request is served to the end */
	strcpy(m.submit.id, "after");
	m.submit.prompt_tokens = 64;
	m.submit.max_tokens = 8;
	m.submit.sampling = medha_sampling_greedy;
	buf = encode(&m, &len);
	pbuf = encode(&poll, &plen);
	assert_int_equal(medha_cli_open(&c, L.url, 1, why, sizeof(why)), 0);
	assert_int_equal(call(c, buf, len, &rep, 10 * L.slow), 0);
	if (rep.type != MEDHA_MSG_ACCEPTED)
		fail_msg("a valid SUBMIT answered with %s: %s",
		    medha_msg_type_name(rep.type),
		    rep.type == MEDHA_MSG_ERROR ? rep.error.reason : "");
	assert_string_equal(rep.accepted.id, "after");
	handle = rep.accepted.handle;
	medha_msg_clear(&rep);
	until = mono() + 20 * L.slow;
	while (!done) {
		if (mono() > until)
			fail_msg("no record within %.0f s", 20 * L.slow);
		assert_int_equal(call(c, pbuf, plen, &rep, 5 * L.slow), 0);
		assert_int_equal(rep.type, MEDHA_MSG_EVENTS);
		for (int64_t i = 0; i < rep.events.n; i++) {
			const struct medha_msg_event *ev = &rep.events.ev[i];
			assert_true(ev->handle == handle);
			if (ev->kind == MEDHA_EVENT_TOKENS) {
				ntok += ev->n_ids;
				continue;
			}
			assert_string_equal(ev->record->id, "after");
			assert_string_equal(
			    medha_status_name(ev->record->status), "ok");
			assert_int_equal(ev->record->output_tokens, 8);
			assert_int_equal(ev->record->prompt_tokens, 64);
			done = 1;
		}
		medha_msg_clear(&rep);
	}
	assert_int_equal(ntok, 8);
	medha_cli_close(c);
	free(buf);
	free(pbuf);

	/* still ready, one worker, nothing left in flight */
	assert_int_equal(status(L.cli, &st, 10 * L.slow), 0);
	assert_true(st.ready);
	assert_int_equal(st.workers, 1);
	assert_int_equal(st.pending, 0);
	assert_int_equal(kill(L.sched, 0), 0);
	assert_int_equal(kill(L.worker, 0), 0);

	/* every frame the decoder refused was logged with its reason */
	n = count_in_file(L.slog, "message refused");
	fprintf(stderr, "hostile_test: %d \"message refused\" lines logged\n",
	    n);
	if (n < 2 * L.undecodable)
		fail_msg("%d refusals logged, %d expected", n,
		    2 * L.undecodable);
	assert_int_equal(count_in_file(L.wlog, "starting over"), 0);
	L.failed = 0;
}

static void
test_clean_exit(void **state)
{
	static const char *const reports[] = {
	    "ERROR: AddressSanitizer", "runtime error:", "LeakSanitizer"};
	int ss, ws;

	(void)state;
	if (L.skip)
		skip();
	L.failed = 1;
	assert_true(L.sched > 0 && L.worker > 0);
	medha_cli_close(L.cli);
	L.cli = NULL;
	assert_int_equal(kill(L.sched, SIGTERM), 0);
	assert_int_equal(kill(L.worker, SIGTERM), 0);
	if (!wait_exit(L.sched, 5 * L.slow, &ss))
		fail_msg("medha-sched still runs %.0f s after SIGTERM",
		    5 * L.slow);
	L.sched = 0;
	if (!wait_exit(L.worker, 5 * L.slow, &ws))
		fail_msg("medha-worker still runs %.0f s after SIGTERM",
		    5 * L.slow);
	L.worker = 0;
	for (size_t i = 0; i < sizeof(reports) / sizeof(reports[0]); i++) {
		assert_int_equal(count_in_file(L.slog, reports[i]), 0);
		assert_int_equal(count_in_file(L.wlog, reports[i]), 0);
	}
	if (!WIFEXITED(ss) || WEXITSTATUS(ss) != 0)
		fail_msg("medha-sched ended with status %#x", ss);
	if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
		fail_msg("medha-worker ended with status %#x", ws);
	assert_true(count_in_file(L.slog, "stopped:") == 1);
	L.failed = 0;
}

/* Whatever happened: no process left behind; the logs shown on failure,
 * kept only then. */
static int
teardown(void **state)
{
	int st;

	(void)state;
	if (L.cli != NULL)
		medha_cli_close(L.cli);
	if (L.sched > 0) {
		kill(L.sched, SIGKILL);
		waitpid(L.sched, &st, 0);
	}
	if (L.worker > 0) {
		kill(L.worker, SIGKILL);
		waitpid(L.worker, &st, 0);
	}
	if (L.dir[0] == '\0')
		return 0;
	if (L.failed) {
		show_log("medha-sched", L.slog);
		show_log("medha-worker", L.wlog);
		fprintf(stderr, "hostile_test: logs kept in %s\n", L.dir);
		return 0;
	}
	unlink(L.slog);
	unlink(L.wlog);
	rmdir(L.dir);
	unlink(L.url + strlen("ipc://"));
	return 0;
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_start),
	    cmocka_unit_test(test_hostile_frames),
	    cmocka_unit_test(test_still_serving),
	    cmocka_unit_test(test_clean_exit),
	};

	return cmocka_run_group_tests(tests, NULL, teardown);
}
