/*
 * proto_test.c: unit tests of the wire codec (libcore/net/proto*.c):
 * every message type encoded and decoded back, with all its fields and
 * with the fewest; frames rejected with their reasons (wrong version and
 * type, wrong shapes and msgpack types, numbers and strings out of range,
 * limits on counts, arrays claiming more than the input holds, trailing
 * bytes, every prefix of every valid frame, every node of every valid
 * frame replaced by a value of the wrong type); structs the encoder must
 * refuse; and two randomised properties: random and damaged bytes never
 * crash the decoder and what it accepts round-trips, and whatever random
 * struct the encoder accepts decodes to the same struct.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <msgpack.h>
#include <string.h>

#include "net/proto.h"

static char why[512];

/* ---- frames built by hand ---- */

struct blob {
	char *p;
	size_t n;
};

/*
 * A msgpack frame from a format: A array (unsigned count), M map
 * (unsigned count), i int, I int64_t, U uint64_t, d double, s string,
 * f float32 (passed as double), b bin (const char *, int len), r raw bytes
 * (const char *, int len), n nil, T true, F false.
 */
static struct blob
mk(const char *fmt, ...)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	const char *s;
	va_list ap;
	int len;

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	va_start(ap, fmt);
	for (const char *f = fmt; *f != '\0'; f++)
		switch (*f) {
		case 'A': msgpack_pack_array(&pk, va_arg(ap, unsigned)); break;
		case 'M': msgpack_pack_map(&pk, va_arg(ap, unsigned)); break;
		case 'i': msgpack_pack_int(&pk, va_arg(ap, int)); break;
		case 'I': msgpack_pack_int64(&pk, va_arg(ap, int64_t)); break;
		case 'U': msgpack_pack_uint64(&pk, va_arg(ap, uint64_t)); break;
		case 'd': msgpack_pack_double(&pk, va_arg(ap, double)); break;
		case 'f':
			msgpack_pack_float(&pk, (float)va_arg(ap, double));
			break;
		case 's':
			s = va_arg(ap, const char *);
			msgpack_pack_str_with_body(&pk, s, strlen(s));
			break;
		case 'b':
			s = va_arg(ap, const char *);
			len = va_arg(ap, int);
			msgpack_pack_bin_with_body(&pk, s, (size_t)len);
			break;
		case 'r':
			s = va_arg(ap, const char *);
			len = va_arg(ap, int);
			msgpack_sbuffer_write(&sb, s, (size_t)len);
			break;
		case 'n': msgpack_pack_nil(&pk); break;
		case 'T': msgpack_pack_true(&pk); break;
		case 'F': msgpack_pack_false(&pk); break;
		default: fail_msg("mk: bad format %c", *f);
		}
	va_end(ap);
	return (struct blob){sb.data, sb.size};
}

/* The decoder must refuse b (freed here) with exactly this reason. */
static void
reject(struct blob b, const char *reason)
{
	struct medha_msg m;
	int rc;

	memset(&m, 0xa5, sizeof(m));
	why[0] = '\0';
	rc = medha_msg_decode(&m, b.p, b.n, why, sizeof(why));
	if (rc == 0)
		fail_msg("accepted, expected \"%s\"", reason ? reason : "");
	assert_int_equal(rc, MEDHA_EFORMAT);
	assert_int_equal(m.type, 0);
	if (reason != NULL && strcmp(why, reason) != 0)
		fail_msg("reason \"%s\", expected \"%s\"", why, reason);
	assert_true(why[0] != '\0');
	free(b.p);
}

/* The decoder must take b (freed here); the message into *m. */
static void
take(struct blob b, struct medha_msg *m)
{
	if (medha_msg_decode(m, b.p, b.n, why, sizeof(why)) != 0)
		fail_msg("refused: %s", why);
	free(b.p);
}

/* ---- example messages, full and minimal (pointers borrowed) ---- */

static int32_t ex_ids[] = {1, 2, 3, 0, INT32_MAX};
static int32_t ex_ids2[] = {42};
static char ex_stop0[] = "\n\n", ex_stop1[] = "END\xff";
static char ex_prompt[] = "h\xc3\xa9llo \xff world";
static char ex_text[] = "a\0b\xe2\x82\xac";
static char ex_rtext[] = "The sky is blue.";
static struct medha_tbt_bin ex_bins[] = {{0, 1}, {236, 8},
    {MEDHA_TBT_BUCKETS - 1, 1}};
static struct medha_record ex_rec_full = {.id = "req-1",
    .arrival = 1,
    .first_token = 1.25,
    .finish = 1.45,
    .prompt_tokens = 809,
    .output_tokens = 11,
    .cached_tokens = 512,
    .ttft = 0.25,
    .tpot_mean = 0.02,
    .tpot_max = 0.031,
    .ttft_slo = 0.5,
    .tpot_slo = 0.1,
    .queue_time = 0.125,
    .status = MEDHA_STATUS_OK,
    .finish_reason = MEDHA_FINISH_STOP,
    .reason = "",
    .token_ids = ex_ids,
    .n_token_ids = 5,
    .text = ex_rtext,
    .tbt = {ex_bins, 3, 3},
    .prefill_alone = 0.125};
static struct medha_record ex_rec_min = {.id = "r",
    .prompt_tokens = 2000000,
    .status = MEDHA_STATUS_REJECTED,
    .reason = "too long: 2000000 tokens",
    .code = MEDHA_ERANGE};
static int32_t ex_empty_ids[1];
static struct medha_record ex_rec_empty = {.id = "e",
    .status = MEDHA_STATUS_CANCELLED,
    .token_ids = ex_empty_ids,
    .n_token_ids = 0,
    .text = ""};
static struct medha_msg_event ex_events[] = {
    {.kind = MEDHA_EVENT_TOKENS,
        .handle = 7,
        .ids = ex_ids,
        .n_ids = 3,
        .text = ex_text,
        .text_len = sizeof(ex_text) - 1},
    {.kind = MEDHA_EVENT_TOKENS, .handle = UINT64_MAX},
    {.kind = MEDHA_EVENT_RECORD, .handle = 7, .record = &ex_rec_full},
    {.kind = MEDHA_EVENT_RECORD, .handle = 8, .record = &ex_rec_min},
    {.kind = MEDHA_EVENT_RECORD, .handle = 9, .record = &ex_rec_empty},
};
static uint64_t ex_frees[] = {3, 0, UINT64_MAX};
static int64_t ex_keeps[] = {0, 48, 0};
static struct medha_msg_fork ex_forks[] = {{1, 0, 32}, {UINT64_MAX, 32, 40}};
static struct medha_msg_fork ex_forks2[] = {{2, 0, 20}};
static struct medha_msg_item ex_items[] = {
    {.handle = 1,
        .pos = 0,
        .ids = ex_ids,
        .n_ids = 5,
        .sample = 1,
        .has_params = 1,
        .params = {.temp = 0.7f,
            .top_k = 40,
            .top_p = 0.9f,
            .seed = 99,
            .presence_penalty = 0.5f,
            .repetition_penalty = 1.1f,
            .min_p = 0.1f,
            .min_tokens = 7,
            .n_ban = 3,
            .ban = {2, 0, INT32_MAX}}},
    {.handle = UINT64_MAX,
        .pos = INT64_MAX,
        .ids = ex_ids2,
        .n_ids = 1,
        .n_groups = 3,
        .groups = {2, 0, 63}},
    {.handle = 5, .pos = 40, .ids = ex_ids2, .n_ids = 1, .forks = ex_forks,
        .n_forks = 2},
    {.handle = 6,
        .pos = 20,
        .ids = ex_ids2,
        .n_ids = 1,
        .n_groups = 2,
        .groups = {1, 4},
        .forks = ex_forks2,
        .n_forks = 1},
    /* a preempted request resumed: its generator skips what it drew */
    {.handle = 7,
        .pos = 10,
        .ids = ex_ids2,
        .n_ids = 1,
        .sample = 1,
        .has_params = 1,
        .params = {.temp = 1, .top_p = 1, .seed = 3, .skip = 11}},
};
static char ex_urls[2][MEDHA_PROTO_URL_MAX] = {"ipc:///tmp/w0.peer",
    "tcp://10.0.0.7:40123"};
static struct medha_msg_peers ex_peers = {7, 2, ex_urls, 256};
static struct medha_token_lp ex_lp = {.logprob = -0.5f,
    .ntop = 2,
    .top = {{5, -0.5f}, {9, -1.25f}}};
static struct medha_msg_token ex_tokens[] = {{1, 5, &ex_lp},
    {UINT64_MAX, 0, NULL}, {3, INT32_MAX, NULL}};

/* The full or the minimal example of type t into *m. */
static void
example(int t, int full, struct medha_msg *m)
{
	memset(m, 0, sizeof(*m));
	m->type = t;
	switch (t) {
	case MEDHA_MSG_SUBMIT: {
		struct medha_reqspec *rs = &m->submit;

		rs->sampling = medha_sampling_greedy;
		rs->max_tokens = 0;
		if (!full) {
			strcpy(rs->id, "q");
			rs->prompt_tokens = 100;
			break;
		}
		memset(rs->id, 'x', MEDHA_ID_MAX - 1);
		rs->arrival = 1.5e-9;
		rs->prompt = ex_prompt;
		rs->prompt_ids = ex_ids;
		rs->prompt_tokens = 5;
		rs->max_tokens = MEDHA_TOKENS_MAX;
		rs->sampling = (struct medha_sampler_params){.temp = 0.7f,
		    .top_k = 1 << 24,
		    .top_p = 0.95f,
		    .seed = UINT64_MAX,
		    .presence_penalty = -1.5f,
		    .frequency_penalty = 0.25f,
		    .repetition_penalty = 1.25f,
		    .min_p = 0.05f,
		    .min_tokens = 3};
		rs->ignore_eos = 1;
		rs->no_stream = 1;
		rs->cache_salt = UINT64_MAX - 1;
		rs->n_stop = 2;
		rs->stop[0] = ex_stop0;
		rs->stop[1] = ex_stop1;
		rs->n_stop_ids = 2;
		rs->stop_ids[0] = 2;
		rs->stop_ids[1] = INT32_MAX;
		rs->ttft_slo = 0.5;
		rs->tpot_slo = 0.05;
		break;
	}
	case MEDHA_MSG_ACCEPTED:
		strcpy(m->accepted.id, full ? "req-1" : "q");
		m->accepted.handle = full ? UINT64_MAX : 0;
		break;
	case MEDHA_MSG_EVENTS:
		m->events.ev = ex_events;
		m->events.n = full ? 5 : 0;
		break;
	case MEDHA_MSG_CANCEL: m->cancel = full ? UINT64_MAX : 0; break;
	case MEDHA_MSG_STATUS_REPLY:
		if (!full)
			break;
		m->status = (struct medha_msg_status){.workers = 2,
		    .workers_wanted = 4,
		    .ready = 1,
		    .pending = 10,
		    .queue = 3,
		    .kv_blocks = 1 << 20,
		    .kv_used = 12345,
		    .block_size = 16,
		    .prefill = 4096,
		    .work = 1.25,
		    .evicted = 777,
		    .progress = 31,
		    .n_experts = 3,
		    .experts = {5, 0, 1LL << 40},
		    .model = "cache/models/SmolLM2-135M-Instruct.Q4_1.gguf",
		    .backend = "cpu"};
		break;
	case MEDHA_MSG_ERROR:
		m->error.code = full ? MEDHA_EFORMAT : INT32_MIN;
		strcpy(m->error.reason,
		    full ? "submit: request.id: missing" : "");
		break;
	case MEDHA_MSG_HELLO:
		m->hello = (struct medha_msg_hello){.backend = "sim",
		    .model = "llama3-8b",
		    .gpu = "a100",
		    .tp = 8,
		    .spp = 2,
		    .kvp = 1,
		    .rank_tp = 7,
		    .rank_spp = 1,
		    .rank_kvp = 0,
		    .layer_lo = 16,
		    .layer_hi = 32,
		    .block_size = 16,
		    .n_blocks = 100000,
		    .max_seqs = 256,
		    .vocab = 128256,
		    .dim = 4096,
		    .pid = 4242,
		    .peer = "tcp://10.1.2.3:40000",
		    .caps = MEDHA_HELLO_WINDOW_KV | MEDHA_HELLO_EP};
		if (!full)
			m->hello = (struct medha_msg_hello){.backend = "cpu",
			    .model = "m",
			    .gpu = "cpu",
			    .tp = 1,
			    .spp = 1,
			    .kvp = 1,
			    .layer_hi = 1,
			    .block_size = 1,
			    .n_blocks = 1,
			    .max_seqs = 1,
			    .vocab = 1,
			    .dim = 1};
		break;
	case MEDHA_MSG_WELCOME:
	case MEDHA_MSG_READY:
	case MEDHA_MSG_HEARTBEAT: m->worker_id = full ? INT32_MAX : 0; break;
	case MEDHA_MSG_RESULT:
		m->result.worker_id = full ? 3 : 0;
		m->result.seq = full ? 1234567 : 0;
		m->result.tokens = full ? ex_tokens : NULL;
		m->result.n_tokens = full ? 3 : 0;
		strcpy(m->result.error, full ? "" : "cuda: out of memory");
		m->result.n_experts = full ? 4 : 0; /* the optional element */
		m->result.experts[3] = full ? 96 : 0;
		break;
	case MEDHA_MSG_BATCH:
		if (!full)
			break;
		m->batch.seq = UINT64_MAX;
		m->batch.frees = ex_frees;
		m->batch.keeps = ex_keeps;
		m->batch.n_frees = 3;
		m->batch.items = ex_items;
		m->batch.n_items = 4;
		m->batch.peers = &ex_peers;
		break;
	case MEDHA_MSG_IDLE:
		m->batch.frees = full ? ex_frees : NULL;
		m->batch.n_frees = full ? 3 : 0;
		break;
	}
}

/* Encode m into a new blob; the encoder must accept it. */
static struct blob
enc(const struct medha_msg *m)
{
	struct blob b;
	void *p;

	if (medha_msg_encode(m, &p, &b.n, why, sizeof(why)) != 0)
		fail_msg("encode %s: %s", medha_msg_type_name(m->type), why);
	b.p = p;
	return b;
}

/* ---- round trips ---- */

static void
test_roundtrip_all(void **state)
{
	struct medha_msg m, out;
	struct blob b;

	(void)state;
	for (int t = 1; t < MEDHA_MSG_TYPE_COUNT; t++)
		for (int full = 0; full < 2; full++) {
			example(t, full, &m);
			b = enc(&m);
			if (medha_msg_decode(&out, b.p, b.n, why,
			        sizeof(why)) != 0)
				fail_msg("%s: %s", medha_msg_type_name(t), why);
			if (!medha_msg_equal(&m, &out))
				fail_msg("%s (full %d) changed in a round trip",
				    medha_msg_type_name(t), full);
			assert_int_equal(out.type, t);
			medha_msg_clear(&out);
			assert_int_equal(out.type, 0);
			free(b.p);
		}
}

/* The msgpack type a SUBMIT of prompt text sends it as (STR: UTF-8,
 * BIN: other bytes), and that it comes back as it was. */
static int
prompt_type(const char *text)
{
	struct medha_msg m = {.type = MEDHA_MSG_SUBMIT}, out;
	msgpack_unpacked u;
	int type = -1;
	void *buf;
	size_t len;

	snprintf(m.submit.id, sizeof(m.submit.id), "u");
	m.submit.prompt = (char *)text;
	m.submit.max_tokens = 1;
	m.submit.sampling = medha_sampling_greedy;
	assert_int_equal(medha_msg_encode(&m, &buf, &len, why, sizeof(why)),
	    0);
	msgpack_unpacked_init(&u);
	assert_int_equal(msgpack_unpack_next(&u, buf, len, NULL),
	    MSGPACK_UNPACK_SUCCESS);
	msgpack_object_map *mp = &u.data.via.array.ptr[2].via.map;
	for (uint32_t i = 0; i < mp->size; i++) {
		msgpack_object_str *k = &mp->ptr[i].key.via.str;
		if (k->size == 6 && memcmp(k->ptr, "prompt", 6) == 0)
			type = mp->ptr[i].val.type;
	}
	msgpack_unpacked_destroy(&u);
	take((struct blob){buf, len}, &out);
	assert_string_equal(out.submit.prompt, text);
	medha_msg_clear(&out);
	return type;
}

/* UTF-8 checked eight ASCII bytes at a time, and the rest a character
 * at a time: a bad byte anywhere makes the text bytes. */
static void
test_utf8_text(void **state)
{
	char s[64];

	(void)state;
	assert_int_equal(prompt_type("plain ascii, longer than eight"),
	    MSGPACK_OBJECT_STR);
	assert_int_equal(prompt_type("0123456789abcdef\xc3\xa9\xe2\x82\xac"
	                             "0123456789\xf0\x9f\x99\x82"),
	    MSGPACK_OBJECT_STR);
	assert_int_equal(prompt_type("short\xc3\xa9"), MSGPACK_OBJECT_STR);
	for (int at = 0; at < 20; at++) { /* a bad byte at every offset */
		memset(s, 'a', 22);
		s[22] = '\0';
		s[at] = (char)0xff;
		assert_int_equal(prompt_type(s), MSGPACK_OBJECT_BIN);
		s[at] = (char)0xc3; /* a character cut short, then whole */
		assert_int_equal(prompt_type(s), MSGPACK_OBJECT_BIN);
		s[at + 1] = (char)0xa9;
		assert_int_equal(prompt_type(s), MSGPACK_OBJECT_STR);
	}
	assert_int_equal(prompt_type("0123456789abcdef\xe2\x82"),
	    MSGPACK_OBJECT_BIN); /* cut at the end */
}

static void
test_roundtrip_values(void **state)
{
	struct medha_msg m, out;
	struct blob b;

	(void)state;
	/* the full request: every field as it was, the non-UTF-8 text too */
	example(MEDHA_MSG_SUBMIT, 1, &m);
	b = enc(&m);
	take(b, &out);
	assert_int_equal(strlen(out.submit.id), 63);
	assert_true(out.submit.arrival == 1.5e-9);
	assert_string_equal(out.submit.prompt, ex_prompt);
	assert_int_equal(out.submit.prompt_tokens, 5);
	assert_memory_equal(out.submit.prompt_ids, ex_ids, sizeof(ex_ids));
	assert_true(out.submit.max_tokens == MEDHA_TOKENS_MAX);
	assert_true(out.submit.sampling.temp == 0.7f);
	assert_true(out.submit.sampling.top_p == 0.95f);
	assert_int_equal(out.submit.sampling.top_k, 1 << 24);
	assert_true(out.submit.sampling.seed == UINT64_MAX);
	assert_true(out.submit.sampling.presence_penalty == -1.5f);
	assert_true(out.submit.sampling.frequency_penalty == 0.25f);
	assert_true(out.submit.sampling.repetition_penalty == 1.25f);
	assert_true(out.submit.sampling.min_p == 0.05f);
	assert_int_equal(out.submit.ignore_eos, 1);
	assert_int_equal(out.submit.no_stream, 1);
	assert_int_equal(out.submit.n_stop, 2);
	assert_string_equal(out.submit.stop[1], "END\xff");
	assert_int_equal(out.submit.n_stop_ids, 2);
	assert_int_equal(out.submit.stop_ids[1], INT32_MAX);
	assert_int_equal(out.submit.sampling.min_tokens, 3);
	assert_true(out.submit.cache_salt == UINT64_MAX - 1);
	assert_int_equal(out.submit.sampling.n_ban, 0); /* not a request's */
	medha_msg_clear(&out);

	/* the minimal request gets greedy sampling and zero times */
	example(MEDHA_MSG_SUBMIT, 0, &m);
	take(enc(&m), &out);
	assert_int_equal(out.submit.prompt_tokens, 100);
	assert_null(out.submit.prompt);
	assert_null(out.submit.prompt_ids);
	assert_true(out.submit.sampling.temp == 0);
	assert_true(out.submit.sampling.top_p == 1);
	assert_true(out.submit.sampling.seed == 1);
	assert_true(out.submit.ttft_slo == 0 && out.submit.arrival == 0);
	assert_int_equal(out.submit.no_stream, 0); /* streams by default */
	assert_true(out.submit.cache_salt == 0); /* no tenant */
	medha_msg_clear(&out);

	/* the minimal frames are small */
	example(MEDHA_MSG_POLL, 0, &m);
	b = enc(&m);
	assert_int_equal(b.n, 3);
	assert_memory_equal(b.p, "\x92\x01\x03", 3);
	free(b.p);

	/* token text keeps its NUL; empty id arrays and texts decode */
	example(MEDHA_MSG_EVENTS, 1, &m);
	take(enc(&m), &out);
	assert_int_equal(out.events.n, 5);
	assert_int_equal(out.events.ev[0].text_len, 6);
	assert_memory_equal(out.events.ev[0].text, "a\0b\xe2\x82\xac", 6);
	assert_int_equal(out.events.ev[1].n_ids, 0);
	assert_int_equal(out.events.ev[1].text_len, 0);
	assert_null(out.events.ev[3].record->token_ids);
	assert_null(out.events.ev[3].record->text);
	assert_string_equal(out.events.ev[3].record->reason,
	    "too long: 2000000 tokens");
	/* present but empty stays present */
	assert_non_null(out.events.ev[4].record->token_ids);
	assert_string_equal(out.events.ev[4].record->text, "");
	assert_int_equal(out.events.ev[2].record->finish_reason,
	    MEDHA_FINISH_STOP);
	/* the gaps and the prefill time alone; neither where not kept */
	assert_true(out.events.ev[2].record->prefill_alone == 0.125);
	assert_int_equal(out.events.ev[2].record->tbt.n, 3);
	assert_int_equal(out.events.ev[2].record->tbt.bin[1].bucket, 236);
	assert_int_equal(out.events.ev[2].record->tbt.bin[1].count, 8);
	assert_int_equal(out.events.ev[3].record->tbt.n, 0);
	assert_null(out.events.ev[3].record->tbt.bin);
	assert_true(out.events.ev[3].record->prefill_alone == 0);
	medha_msg_clear(&out);

	/* a hand-made request: integers where numbers go, float32 */
	take(mk("AiiMsssIsisfsi", 3, 1, MEDHA_MSG_SUBMIT, 5, "id", "z",
	         "max_tokens", (int64_t)5, "temperature", 2, "top_p",
	         (double)0.5f, "prompt_tokens", 7),
	    &out);
	assert_true(out.submit.sampling.temp == 2);
	assert_int_equal(out.submit.prompt_tokens, 7);
	medha_msg_clear(&out);
}

/* ---- rejections with their reasons ---- */

static void
test_reject_frame(void **state)
{
	char deep[16], big[8];

	(void)state;
	reject(mk(""), "frame: ends early, at byte 0");
	reject(mk("i", 5), "frame: not an array [version, type, ...]");
	reject(mk("Ai", 1, 1), "frame: not an array [version, type, ...]");
	reject(mk("Aii", 2, 2, 3),
	    "frame: version: 2 not supported (this is 1)");
	reject(mk("Asi", 2, "1", 3),
	    "frame: version: not a non-negative integer");
	reject(mk("Aii", 2, 1, 99), "frame: type: 99 unknown");
	reject(mk("Aii", 2, 1, 0), "frame: type: 0 unknown");
	reject(mk("Aii", 2, 1, -3), "frame: type: not a non-negative integer");
	reject(mk("Aiii", 3, 1, MEDHA_MSG_POLL, 0),
	    "poll: a frame of 3 elements, not 2");
	reject(mk("Aii", 2, 1, MEDHA_MSG_CANCEL),
	    "cancel: a frame of 2 elements, not 3");
	/* trailing bytes, reserved and ext types */
	reject(mk("Aiin", 2, 1, MEDHA_MSG_POLL),
	    "frame: 1 bytes after the message");
	reject(mk("Air", 2, 1, "\xc1", 1),
	    "frame: byte 2: type 0xc1 is not used by the protocol");
	reject(mk("Air", 2, 1, "\xd4\x01\x00", 3),
	    "frame: byte 2: type 0xd4 is not used by the protocol");
	/* nested too deep */
	memset(deep, 0x91, sizeof(deep));
	reject(mk("Aiir", 3, 1, MEDHA_MSG_CANCEL, deep, 16),
	    "frame: byte 10: nested more than 8 deep");
	/* lengths that claim more than the input holds fail at once */
	reject(mk("AiiUAr", 5, 1, MEDHA_MSG_BATCH, (uint64_t)1, 0,
	           "\xdd\xff\xff\xff\xff", 5),
	    "frame: byte 5: 4294967295 elements but only 0 bytes left");
	reject(mk("Aiir", 3, 1, MEDHA_MSG_SUBMIT, "\xdf\x7f\xff\xff\xff\x00",
	           6),
	    "frame: byte 3: 4294967294 elements but only 1 bytes left");
	reject(mk("Aiir", 4, 1, MEDHA_MSG_ACCEPTED, "\xdb\xff\xff\xff\xf0xx",
	           7),
	    "frame: ends early, in the value at byte 3");
	reject(mk("r", "\xdd\x00\x01\x00\x00\x01\x0f", 7),
	    "frame: byte 0: 65536 elements but only 2 bytes left");
	memcpy(big, "\xc6\x7f\xff\xff\xff", 5);
	reject(mk("Aiir", 4, 1, MEDHA_MSG_ERROR, big, 5),
	    "frame: ends early, in the value at byte 3");
	reject(mk("Aiir", 3, 1, MEDHA_MSG_CANCEL, "\xcf\x01", 2),
	    "frame: ends early, in the value at byte 3");
}

static void
test_reject_oversize(void **state)
{
	size_t n = (size_t)MEDHA_PROTO_MAX_FRAME + 1;
	char *p = calloc(1, n);
	struct medha_msg m;
	char expect[96];

	(void)state;
	assert_non_null(p);
	assert_int_equal(medha_msg_decode(&m, p, n, why, sizeof(why)),
	    MEDHA_EFORMAT);
	snprintf(expect, sizeof(expect), "frame: %zu bytes, more than %u", n,
	    MEDHA_PROTO_MAX_FRAME);
	assert_string_equal(why, expect);
	free(p);
}

#define SUB(fmt, n, ...) mk("AiiM" fmt, 3, 1, MEDHA_MSG_SUBMIT, n, __VA_ARGS__)

static void
test_reject_submit(void **state)
{
	char id64[65];
	struct medha_msg m;

	(void)state;
	memset(id64, 'a', 64);
	id64[64] = '\0';
	reject(SUB("sssssI", 3, "id", "q", "prompt", "hi", "max_tokens",
	           (int64_t)-1),
	    "submit: request.max_tokens: not an integer in [0, 1000000000]");
	/* the limits of a trace: nothing a client sends can overflow the
	 * scheduler's sums */
	reject(SUB("sssssI", 3, "id", "q", "prompt", "hi", "max_tokens",
	           (int64_t)MEDHA_TOKENS_MAX + 1),
	    "submit: request.max_tokens: not an integer in [0, 1000000000]");
	reject(SUB("sssIsi", 3, "id", "q", "prompt_tokens",
	           (int64_t)INT64_MAX, "max_tokens", 1),
	    "submit: request.prompt_tokens: not an integer in [1, 1000000000]");
	reject(SUB("sssdsssi", 4, "id", "q", "arrival", 1e300, "prompt", "hi",
	           "max_tokens", 1),
	    "submit: request.arrival: not a number in [0, 1e+09]");
	reject(SUB("sssi", 2, "id", "q", "prompt_tokens", 5),
	    "submit: request.max_tokens: missing");
	reject(SUB("sisi", 2, "id", 5, "max_tokens", 1),
	    "submit: request.id: not a string");
	reject(SUB("sssisi", 3, "id", id64, "max_tokens", 1, "prompt_tokens",
	           1),
	    "submit: request.id: not a string of 1 to 63 bytes");
	id64[63] = '\0';
	take(SUB("sssisi", 3, "id", id64, "max_tokens", 1, "prompt_tokens", 1),
	    &m);
	medha_msg_clear(&m);
	reject(SUB("sssisi", 3, "id", "", "max_tokens", 1, "prompt_tokens", 1),
	    "submit: request.id: not a string of 1 to 63 bytes");
	reject(SUB("srsisi", 3, "id", "\xa3q\0q", 4, "max_tokens", 1,
	           "prompt_tokens", 1),
	    "submit: request.id: contains a NUL byte");
	reject(SUB("sssi", 2, "id", "q", "max_tokens", 1),
	    "submit: request: no prompt, prompt_ids or prompt_tokens");
	reject(SUB("sssisi", 3, "id", "q", "max_tokens", 1, "prompt_tokens",
	           -4),
	    "submit: request.prompt_tokens: not a positive integer");
	reject(SUB("sssisi", 3, "id", "q", "max_tokens", 1, "prompt_tokens", 0),
	    "submit: request.prompt_tokens: not a positive integer");
	reject(SUB("sssisA", 3, "id", "q", "max_tokens", 1, "prompt_ids", 0),
	    "submit: request.prompt_ids: not a non-empty array");
	reject(SUB("sssisAiI", 3, "id", "q", "max_tokens", 1, "prompt_ids", 2,
	           1, (int64_t)INT32_MAX + 1),
	    "submit: request.prompt_ids[1]: not a token id");
	reject(SUB("sssisAii", 3, "id", "q", "max_tokens", 1, "prompt_ids", 2,
	           1, -1),
	    "submit: request.prompt_ids[1]: not a token id");
	reject(SUB("sssisisAii", 4, "id", "q", "max_tokens", 1,
	           "prompt_tokens", 1, "stop_token_ids", 2, 1, -1),
	    "submit: request.stop_token_ids[1]: not a token id");
	reject(SUB("sssisAiisi", 4, "id", "q", "max_tokens", 1, "prompt_ids", 2,
	           1, 2, "prompt_tokens", 3),
	    "submit: request.prompt_tokens: 3 but prompt_ids has 2");
	reject(SUB("sssisisAsssss", 4, "id", "q", "max_tokens", 1,
	           "prompt_tokens", 1, "stop", 5, "a", "b", "c", "d", "e"),
	    "submit: request.stop: more than 4 strings");
	reject(SUB("sssisisAs", 4, "id", "q", "max_tokens", 1, "prompt_tokens",
	           1, "stop", 1, ""),
	    "submit: request.stop: each must be a string of 1 to 64 bytes "
	    "without NUL");
	reject(SUB("sssisisAr", 4, "id", "q", "max_tokens", 1, "prompt_tokens",
	           1, "stop", 1, "\xa2\0x", 3),
	    "submit: request.stop: contains a NUL byte");
	reject(SUB("sssisisr", 4, "id", "q", "max_tokens", 1, "prompt_tokens",
	           1, "prompt", "\xa2\0x", 3),
	    "submit: request.prompt: contains a NUL byte");
	reject(SUB("sssisisd", 4, "id", "q", "max_tokens", 1, "prompt_tokens",
	           1, "temperature", 100.5),
	    "submit: request.temperature: not a number in [0, 100]");
	reject(SUB("sssisisd", 4, "id", "q", "max_tokens", 1, "prompt_tokens",
	           1, "top_p", (double)NAN),
	    "submit: request.top_p: not a number in [0, 1]");
	reject(SUB("sssisisi", 4, "id", "q", "max_tokens", 1, "prompt_tokens",
	           1, "top_k", (1 << 24) + 1),
	    "submit: request.top_k: not an integer in [0, 16777216]");
	reject(SUB("sssisisi", 4, "id", "q", "max_tokens", 1, "prompt_tokens",
	           1, "seed", -1),
	    "submit: request.seed: not a non-negative integer");
	reject(SUB("sssisisi", 4, "id", "q", "max_tokens", 1, "prompt_tokens",
	           1, "ignore_eos", 1),
	    "submit: request.ignore_eos: not a boolean");
	reject(SUB("sssisisi", 4, "id", "q", "max_tokens", 1, "prompt_tokens",
	           1, "stream", 0),
	    "submit: request.stream: not a boolean");
	reject(SUB("sssisisd", 4, "id", "q", "max_tokens", 1, "prompt_tokens",
	           1, "ttft_slo", (double)INFINITY),
	    "submit: request.ttft_slo: not a number > 0");
	reject(SUB("sssisisd", 4, "id", "q", "max_tokens", 1, "prompt_tokens",
	           1, "tpot_slo", 0.0),
	    "submit: request.tpot_slo: not a number > 0");
	reject(SUB("sssisisd", 4, "id", "q", "max_tokens", 1, "prompt_tokens",
	           1, "arrival", -1.0),
	    "submit: request.arrival: not a number in [0, 1e+09]");
	reject(SUB("sssisisi", 4, "id", "q", "max_tokens", 1, "prompt_tokens",
	           1, "max_token", 1),
	    "submit: request: unknown key \"max_token\"");
	reject(SUB("sssisisi", 4, "id", "q", "max_tokens", 1, "prompt_tokens",
	           1, "max_tokens", 1),
	    "submit: request: key \"max_tokens\" given twice");
	reject(SUB("sssiii", 3, "id", "q", "max_tokens", 1, 7, 1),
	    "submit: request: a key is not a string");
	reject(mk("AiiAi", 3, 1, MEDHA_MSG_SUBMIT, 1, 1),
	    "submit: request: not a map");
}

static void
test_reject_others(void **state)
{
	char id64[65];

	(void)state;
	memset(id64, 'a', 64);
	id64[64] = '\0';
	reject(mk("AiisU", 4, 1, MEDHA_MSG_ACCEPTED, id64, (uint64_t)1),
	    "accepted: id: not a string of 1 to 63 bytes");
	reject(mk("Aiisi", 4, 1, MEDHA_MSG_ACCEPTED, "q", -1),
	    "accepted: handle: not a non-negative integer");
	reject(mk("Aiid", 3, 1, MEDHA_MSG_CANCEL, 1.0),
	    "cancel: handle: not a non-negative integer");
	reject(mk("Aiiis", 4, 1, MEDHA_MSG_ERROR, 0, "x"),
	    "error: code: not a negative integer");
	reject(mk("AiiIs", 4, 1, MEDHA_MSG_ERROR, (int64_t)INT32_MIN - 1, "x"),
	    "error: code: out of range");
	reject(mk("Aiii", 3, 1, MEDHA_MSG_READY, -1),
	    "ready: worker_id: not a non-negative integer");
	reject(mk("Aiis", 3, 1, MEDHA_MSG_HEARTBEAT, "1"),
	    "heartbeat: worker_id: not an integer");
	reject(mk("AiiMsi", 3, 1, MEDHA_MSG_STATUS_REPLY, 1, "workers", 1),
	    "status_reply: workers_wanted: missing");
	/* events: shapes, kinds, records */
	reject(mk("AiiAAiUA", 3, 1, MEDHA_MSG_EVENTS, 1, 3, 0, (uint64_t)1, 0),
	    "events: [0]: not [0, handle, ids, text(, logprobs)] or [1, "
	    "handle, record]");
	reject(mk("AiiAAiUn", 3, 1, MEDHA_MSG_EVENTS, 1, 3, 2, (uint64_t)1),
	    "events: [0]: not [0, handle, ids, text(, logprobs)] or [1, "
	    "handle, record]");
	reject(mk("AiiAAiUAii", 3, 1, MEDHA_MSG_EVENTS, 1, 4, 0, (uint64_t)1, 1,
	           -5, 9),
	    "events: [0].ids[0]: not a token id");
	reject(mk("AiiAAiUAi", 3, 1, MEDHA_MSG_EVENTS, 1, 4, 0, (uint64_t)1, 0,
	           9),
	    "events: [0].text: not a string");
	reject(mk("AiiAAiUMss", 3, 1, MEDHA_MSG_EVENTS, 1, 3, 1, (uint64_t)1, 1,
	           "id", "r"),
	    "events: [0].record.arrival: missing");
	/* hello */
	reject(mk("AiiMss", 3, 1, MEDHA_MSG_HELLO, 1, "backend", "cpu"),
	    "hello: tp: missing");
	/* batch and idle */
	reject(mk("AiiUAAAUiAiTn", 5, 1, MEDHA_MSG_BATCH, (uint64_t)1, 0, 1, 5,
	           (uint64_t)1, -1, 1, 5),
	    "batch: items[0].pos: not a non-negative integer");
	reject(mk("AiiUAAAUiATn", 5, 1, MEDHA_MSG_BATCH, (uint64_t)1, 0, 1, 5,
	           (uint64_t)1, 0, 0),
	    "batch: items[0].ids: not a non-empty array");
	reject(mk("AiiUAAAUiAiiAddd", 5, 1, MEDHA_MSG_BATCH, (uint64_t)1, 0, 1,
	           5, (uint64_t)1, 0, 1, 5, 1, 3, 0.5, 1.0, 1.0),
	    "batch: items[0].sample: not a boolean");
	reject(mk("AiiUAAAUiAiTAddd", 5, 1, MEDHA_MSG_BATCH, (uint64_t)1, 0, 1,
	           5, (uint64_t)1, 0, 1, 5, 3, 0.5, 1.0, 1.0),
	    "batch: items[0].params: not an array of 4 to 13");
	reject(mk("AiiUAAAUiAiTAdidUdd", 5, 1, MEDHA_MSG_BATCH, (uint64_t)1, 0,
	           1, 5, (uint64_t)1, 0, 1, 5, 6, 0.5, 1, 0.5, (uint64_t)1, 0.5,
	           0.5),
	    "batch: items[0].params: not an array of 4, 8, 10, 11 or 13");
	/* a generator skip past any output: the worker would spin */
	reject(mk("AiiUAAAUiAiTAdidUddddFiU", 5, 1, MEDHA_MSG_BATCH,
	           (uint64_t)1, 0, 1, 5, (uint64_t)1, 0, 1, 5, 11, 0.5, 1, 0.5,
	           (uint64_t)1, 0.0, 0.0, 0.0, 0.0, 0, (uint64_t)1000000001),
	    "batch: items[0].params.skip: more than 1000000000");
	reject(mk("AiiUAAAUiAiTAdidU", 5, 1, MEDHA_MSG_BATCH, (uint64_t)1, 0, 1,
	           5, (uint64_t)1, 0, 1, 5, 4, 0.5, 1, 1.5, (uint64_t)1),
	    "batch: items[0].params.top_p: not a number in [0, 1]");
	reject(mk("AiiAi", 3, 1, MEDHA_MSG_IDLE, 1, -1),
	    "idle: frees[0]: not a non-negative integer");
	/* prefix caching: a trim keeps 1 position or more; a fork's runs
	   are [src, from, to] from 0 to the item's pos */
	reject(mk("AiiAAUi", 3, 1, MEDHA_MSG_IDLE, 1, 2, (uint64_t)5, 0),
	    "idle: frees[0]: a kept length below 1");
	reject(mk("AiiUAAAUiAiTnnAAUi", 5, 1, MEDHA_MSG_BATCH, (uint64_t)1, 0,
	           1, 7, (uint64_t)1, 16, 1, 5, 1, 2, (uint64_t)3, 0),
	    "batch: items[0].forks[0]: not an array of 3");
	reject(mk("AiiUAAAUiAiTnnAAUii", 5, 1, MEDHA_MSG_BATCH, (uint64_t)1, 0,
	           1, 7, (uint64_t)1, 16, 1, 5, 1, 3, (uint64_t)3, 0, 15),
	    "batch: items[0].forks: runs ending at 15, not at pos 16");
	/* result */
	reject(mk("AiiiUAAUIs", 6, 1, MEDHA_MSG_RESULT, 0, (uint64_t)1, 1, 2,
	           (uint64_t)1, (int64_t)1 << 31, ""),
	    "result: tokens[0]: not a token id");
	reject(mk("AiiiUAi", 6, 1, MEDHA_MSG_RESULT, 0, (uint64_t)1, 0, 5),
	    "result: error: not a string");
}

/*
 * An EVENTS frame of one record with its required keys (11 output
 * tokens: 10 gaps at most) and then the nextra key-value pairs of tail
 * (freed here).
 */
static struct blob
rec_frame(unsigned nextra, struct blob tail)
{
	struct blob head, b;

	head = mk("AiiAAiUMsssdsdsdsdsdsdsdsdsisiss", 3, 1, MEDHA_MSG_EVENTS, 1,
	    3, 1, (uint64_t)1, 12 + nextra, "id", "r", "arrival", 0.0,
	    "first_token", 1.0, "finish", 2.0, "ttft", 1.0, "tpot_mean", 0.1,
	    "tpot_max", 0.1, "ttft_slo", 0.0, "tpot_slo", 0.0, "prompt_tokens",
	    5, "output_tokens", 11, "status", "ok");
	b = mk("rr", head.p, (int)head.n, tail.p, (int)tail.n);
	free(head.p);
	free(tail.p);
	return b;
}

/* A record's tbt and prefill_alone: taken when right, else refused. */
static void
test_record_tbt(void **state)
{
	struct medha_msg out;
	msgpack_sbuffer sb;
	msgpack_packer pk;

	(void)state;
	take(rec_frame(2,
	         mk("sAAiiAiisd", "tbt", 2, 2, 236, 9, 2, 286, 1,
	             "prefill_alone", 0.5)),
	    &out);
	assert_int_equal(out.events.ev[0].record->tbt.n, 2);
	assert_int_equal(out.events.ev[0].record->tbt.bin[1].bucket, 286);
	assert_true(out.events.ev[0].record->prefill_alone == 0.5);
	medha_msg_clear(&out);
	take(rec_frame(1, mk("sA", "tbt", 0)), &out);
	assert_int_equal(out.events.ev[0].record->tbt.n, 0);
	medha_msg_clear(&out);

	reject(rec_frame(1, mk("si", "tbt", 5)),
	    "events: [0].record.tbt: not an array");
	/* more bins than buckets */
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_str_with_body(&pk, "tbt", 3);
	msgpack_pack_array(&pk, MEDHA_TBT_BUCKETS + 1);
	for (int i = 0; i <= MEDHA_TBT_BUCKETS; i++) {
		msgpack_pack_array(&pk, 2);
		msgpack_pack_int(&pk, i);
		msgpack_pack_int(&pk, 1);
	}
	reject(rec_frame(1, (struct blob){sb.data, sb.size}),
	    "events: [0].record.tbt: not an array of 0 to 474");
	reject(rec_frame(1, mk("sAi", "tbt", 1, 5)),
	    "events: [0].record.tbt[0]: not a [bucket, count] pair");
	reject(rec_frame(1, mk("sAAiii", "tbt", 1, 3, 5, 1, 1)),
	    "events: [0].record.tbt[0]: not a [bucket, count] pair");
	reject(rec_frame(1, mk("sAAis", "tbt", 1, 2, 5, "1")),
	    "events: [0].record.tbt[0]: not an integer");
	reject(rec_frame(1, mk("sAAdi", "tbt", 1, 2, 5.0, 1)),
	    "events: [0].record.tbt[0]: not an integer");
	reject(rec_frame(1, mk("sAAii", "tbt", 1, 2, -1, 1)),
	    "events: [0].record.tbt[0]: bucket -1 not in [0, 473]");
	reject(rec_frame(1, mk("sAAUi", "tbt", 1, 2, (uint64_t)1 << 32, 1)),
	    "events: [0].record.tbt[0]: bucket 4294967296 not in [0, 473]");
	reject(rec_frame(1, mk("sAAiiAii", "tbt", 2, 2, 9, 1, 2, 5, 1)),
	    "events: [0].record.tbt: bin 1: bucket 5 after bucket 9");
	reject(rec_frame(1, mk("sAAiiAii", "tbt", 2, 2, 9, 1, 2, 9, 1)),
	    "events: [0].record.tbt: bin 1: bucket 9 after bucket 9");
	reject(rec_frame(1, mk("sAAii", "tbt", 1, 2, 5, 0)),
	    "events: [0].record.tbt: bin 0: count 0 not in [1, 1000000000]");
	reject(rec_frame(1, mk("sAAii", "tbt", 1, 2, 5, 11)),
	    "events: [0].record.tbt: 11 gaps, more than 10");
	reject(rec_frame(1, mk("sd", "prefill_alone", 0.0)),
	    "events: [0].record.prefill_alone: not a number > 0");
	reject(rec_frame(1, mk("sd", "prefill_alone", NAN)),
	    "events: [0].record.prefill_alone: not a number > 0");
	reject(rec_frame(1, mk("ss", "prefill_alone", "1")),
	    "events: [0].record.prefill_alone: not a number");
}

/* head (hlen bytes) then count copies of the byte v, as a blob. */
static struct blob
fill(const char *head, size_t hlen, unsigned count, int v)
{
	struct blob b = {malloc(hlen + count), hlen + count};

	assert_non_null(b.p);
	memcpy(b.p, head, hlen);
	memset(b.p + hlen, v, count);
	return b;
}

static void
test_reject_limits(void **state)
{
	unsigned n = MEDHA_PROTO_MAX_ITEMS + 1;
	struct medha_msg m;
	struct blob b;

	(void)state;
	/* 65537 items (nils), frees, events: refused on the count */
	reject(fill("\x95\x01\x0f\x00\x90\xdd\x00\x01\x00\x01", 10, n, 0xc0),
	    "batch: items: not an array of 0 to 65536");
	reject(fill("\x93\x01\x10\xdd\x00\x01\x00\x01", 8, n, 0x01),
	    "idle: frees: not an array of 0 to 65536");
	reject(fill("\x93\x01\x04\xdd\x00\x01\x00\x01", 8, n, 0xc0),
	    "events: not an array of 0 to 65536");
	/* 65536 frees are fine */
	take(fill("\x93\x01\x10\xdd\x00\x01\x00\x00", 8, n - 1, 0x07), &m);
	assert_int_equal(m.batch.n_frees, 65536);
	assert_true(m.batch.frees[65535] == 7);
	medha_msg_clear(&m);
	/* 5 stop strings, the encoder's side */
	example(MEDHA_MSG_SUBMIT, 0, &m);
	m.submit.n_stop = 5;
	assert_int_equal(medha_msg_encode(&m, (void **)&b.p, &b.n, why,
	                     sizeof(why)),
	    MEDHA_EINVAL);
	assert_string_equal(why, "submit: request.stop: more than 4 strings");
	assert_null(b.p);
}

/* Two items of (1 << 23) + 1 ids each: one id too many in all. */
static void
test_reject_ids_total(void **state)
{
	const size_t k = (1u << 23) + 1, item = 10 + k;
	struct blob b;
	char *p;

	(void)state;
	/* [1, BATCH, 0, [], [[1, 0, [5 x k], true, nil] x 2]] */
	b.n = 6 + 2 * item;
	b.p = p = malloc(b.n);
	assert_non_null(p);
	memcpy(p, "\x95\x01\x0f\x00\x90\x92", 6);
	p += 6;
	for (int i = 0; i < 2; i++) {
		memcpy(p, "\x95\x01\x00\xdd", 4);
		p[4] = (char)(k >> 24), p[5] = (char)(k >> 16);
		p[6] = (char)(k >> 8), p[7] = (char)k;
		memset(p + 8, 0x05, k);
		p[8 + k] = (char)0xc3, p[9 + k] = (char)0xc0;
		p += item;
	}
	assert_true((size_t)(p - b.p) == b.n);
	reject(b, "batch: items: more than 16777216 ids in all");
}

/* ---- structs the encoder refuses ---- */

static void
refuse(const struct medha_msg *m, const char *reason)
{
	void *buf = (void *)1;
	size_t len = 1;
	int rc = medha_msg_encode(m, &buf, &len, why, sizeof(why));

	if (rc == 0)
		fail_msg("encoded, expected \"%s\"", reason);
	assert_int_equal(rc, MEDHA_EINVAL);
	assert_null(buf);
	assert_int_equal(len, 0);
	if (strcmp(why, reason) != 0)
		fail_msg("reason \"%s\", expected \"%s\"", why, reason);
}

static void
test_encode_refuses(void **state)
{
	struct medha_msg_peers peers;
	struct medha_record rec;
	struct medha_msg_event ev;
	struct medha_msg_item it;
	struct medha_msg m;
	int32_t bad[] = {1, -2};
	char *huge;
	size_t n = MEDHA_PROTO_MAX_FRAME + 1;

	(void)state;
	/* prefix caching: a fork's runs go from 0 to the item's pos */
	example(MEDHA_MSG_BATCH, 1, &m);
	m.batch.peers = NULL;
	it = ex_items[2];
	it.pos = 41;
	m.batch.items = &it;
	m.batch.n_items = 1;
	refuse(&m, "batch: items[0].forks: runs ending at 40, not at pos 41");
	it.pos = 40;
	it.forks = (struct medha_msg_fork[]){{1, 0, 32}, {2, 33, 40}};
	refuse(&m, "batch: items[0].forks: runs not one after another from 0");
	m.batch.n_items = 0;
	m.batch.keeps = (int64_t[]){0, -1, 0};
	refuse(&m, "batch: frees: a kept length below 0");
	example(MEDHA_MSG_SUBMIT, 0, &m);
	m.submit.max_tokens = -1;
	refuse(&m, "submit: request.max_tokens: not an integer in [0, 1000000000]");
	example(MEDHA_MSG_SUBMIT, 0, &m);
	m.submit.id[0] = '\0';
	refuse(&m, "submit: request.id: not a string of 1 to 63 bytes");
	memset(m.submit.id, 'a', sizeof(m.submit.id));
	refuse(&m, "submit: request.id: not a string of 1 to 63 bytes");
	example(MEDHA_MSG_SUBMIT, 0, &m);
	m.submit.sampling.temp = NAN;
	refuse(&m, "submit: request.temperature: not a number in [0, 100]");
	example(MEDHA_MSG_SUBMIT, 0, &m);
	m.submit.prompt_tokens = 0;
	refuse(&m, "submit: request: no prompt, prompt_ids or prompt_tokens");
	example(MEDHA_MSG_SUBMIT, 0, &m);
	m.submit.prompt_ids = bad;
	m.submit.prompt_tokens = 2;
	refuse(&m, "submit: request.prompt_ids[1]: not a token id");
	example(MEDHA_MSG_SUBMIT, 0, &m);
	m.submit.sampling.min_tokens = m.submit.max_tokens + 1;
	refuse(&m, "submit: request.min_tokens: 1, more than max_tokens (0)");
	example(MEDHA_MSG_SUBMIT, 0, &m);
	m.submit.tpot_slo = -1;
	refuse(&m, "submit: request.tpot_slo: not a number in (0, 1e+09]");
	example(MEDHA_MSG_SUBMIT, 0, &m);
	m.submit.n_stop = 1;
	m.submit.stop[0] = "";
	refuse(&m,
	    "submit: request.stop: each must be a string of 1 to 64 bytes "
	    "without NUL");
	/* a prompt that makes the frame too large */
	huge = malloc(n);
	assert_non_null(huge);
	memset(huge, 'a', n - 1);
	huge[n - 1] = '\0';
	example(MEDHA_MSG_SUBMIT, 0, &m);
	m.submit.prompt = huge;
	assert_int_equal(medha_msg_encode(&m, (void **)&huge, &n, why,
	                     sizeof(why)),
	    MEDHA_EINVAL);
	assert_null(huge);
	assert_non_null(strstr(why, "bytes, more than 67108864"));
	huge = m.submit.prompt;
	free(huge);

	example(MEDHA_MSG_HELLO, 1, &m);
	m.hello.rank_tp = 8;
	refuse(&m, "hello: rank_tp: not in [0, tp)");
	example(MEDHA_MSG_HELLO, 1, &m);
	strcpy(m.hello.backend, "tpu");
	refuse(&m, "hello: backend: not \"cpu\", \"sim\" or \"cuda\"");
	example(MEDHA_MSG_HELLO, 1, &m);
	m.hello.layer_hi = m.hello.layer_lo;
	refuse(&m, "hello: layers: not [lo, hi) with 0 <= lo < hi <= 65536");
	example(MEDHA_MSG_HELLO, 1, &m);
	m.hello.caps = MEDHA_HELLO_CAPS + 1; /* the bit after the known ones */
	refuse(&m, "hello: caps: a capability this build does not know");
	example(MEDHA_MSG_STATUS_REPLY, 1, &m);
	m.status.work = -0.5;
	refuse(&m, "status_reply: work: not a number of seconds >= 0");
	m.status.work = NAN;
	refuse(&m, "status_reply: work: not a number of seconds >= 0");

	rec = ex_rec_full;
	rec.status = MEDHA_STATUS_COUNT;
	ev = (struct medha_msg_event){.kind = MEDHA_EVENT_RECORD,
	    .record = &rec};
	m = (struct medha_msg){.type = MEDHA_MSG_EVENTS};
	m.events.ev = &ev;
	m.events.n = 1;
	refuse(&m,
	    "events: [0].record.status: not \"ok\", \"rejected\", \"failed\" "
	    "or \"cancelled\"");
	rec = ex_rec_full;
	rec.tpot_max = INFINITY;
	refuse(&m, "events: [0].record.tpot_max: not a number >= 0");
	rec = ex_rec_full;
	rec.prefill_alone = -1;
	refuse(&m, "events: [0].record.prefill_alone: not a number >= 0");
	rec = ex_rec_full;
	rec.output_tokens = 10; /* 9 gaps, the histogram holds 10 */
	refuse(&m, "events: [0].record.tbt: 10 gaps, more than 9");
	rec = ex_rec_full;
	rec.code = 8;
	refuse(&m, "events: [0].record.code: not a negative integer");
	rec = ex_rec_full;
	rec.tbt.bin = NULL;
	refuse(&m, "events: [0].record.tbt: not an array of at most 474 bins");
	ev.kind = 2;
	refuse(&m, "events: [0]: kind 2: not 0 or 1");
	m.events.n = MEDHA_PROTO_MAX_EVENTS + 1;
	refuse(&m, "events: not an array of at most 65536 events");

	m = (struct medha_msg){.type = MEDHA_MSG_ERROR};
	refuse(&m, "error: code: not a negative integer");
	m = (struct medha_msg){.type = MEDHA_MSG_IDLE};
	m.batch.seq = 1;
	refuse(&m, "idle: has a batch_seq or items");
	it = ex_items[1];
	it.n_ids = 0;
	m = (struct medha_msg){.type = MEDHA_MSG_BATCH};
	m.batch.items = &it;
	m.batch.n_items = 1;
	refuse(&m, "batch: items[0].ids: not a non-empty array");
	it = ex_items[0];
	it.params.top_k = -1;
	refuse(&m,
	    "batch: items[0].params.top_k: not an integer in [0, "
	    "16777216]");
	it.params.top_k = 40;
	it.params.min_tokens = -1;
	refuse(&m,
	    "batch: items[0].params.min_tokens: not an integer in [0, "
	    "1000000000]");
	it.params.min_tokens = 1;
	it.params.ban[1] = -1;
	refuse(&m, "batch: items[0].params.ban[1]: not a token id");
	it.params.n_ban = MEDHA_BAN_MAX + 1;
	refuse(&m, "batch: items[0].params.ban: more than 32 ids");
	it.has_params = 0;
	it.n_ids = MEDHA_PROTO_MAX_IDS + 1;
	refuse(&m, "batch: items: more than 16777216 ids in all");
	it = ex_items[1];
	it.groups[1] = 64;
	refuse(&m, "batch: items[0].groups: a group not below 64");
	it = ex_items[1];
	peers = ex_peers;
	m.batch.peers = &peers;
	peers.gen = 0;
	refuse(&m, "batch: peers.gen: not a positive integer");
	peers = ex_peers;
	peers.kvp_tokens = 0;
	refuse(&m, "batch: peers.kvp_tokens: not a positive integer");
	m = (struct medha_msg){.type = 99};
	refuse(&m, "unknown message type 99");
}

/* ---- every prefix, every node replaced ---- */

static void
test_prefixes_and_trailing(void **state)
{
	struct medha_msg m, out;
	struct blob b;
	char *p;

	(void)state;
	for (int t = 1; t < MEDHA_MSG_TYPE_COUNT; t++)
		for (int full = 0; full < 2; full++) {
			example(t, full, &m);
			b = enc(&m);
			for (size_t n = 0; n < b.n; n++) {
				/* a copy of exactly n bytes, for ASan */
				p = malloc(n ? n : 1);
				memcpy(p, b.p, n);
				if (medha_msg_decode(&out, p, n, why,
				        sizeof(why)) != MEDHA_EFORMAT)
					fail_msg(
					    "%s: prefix of %zu bytes taken",
					    medha_msg_type_name(t), n);
				assert_int_equal(out.type, 0);
				free(p);
			}
			p = malloc(b.n + 1);
			memcpy(p, b.p, b.n);
			p[b.n] = 0x00;
			assert_int_equal(medha_msg_decode(&out, p, b.n + 1, why,
			                     sizeof(why)),
			    MEDHA_EFORMAT);
			assert_string_equal(why,
			    "frame: 1 bytes after the message");
			free(p);
			free(b.p);
		}
}

/* All the objects of the tree under o, keys included, into list. */
static void
nodes(msgpack_object *o, msgpack_object **list, size_t *n, size_t max)
{
	uint32_t i;

	assert_true(*n < max);
	list[(*n)++] = o;
	if (o->type == MSGPACK_OBJECT_ARRAY)
		for (i = 0; i < o->via.array.size; i++)
			nodes(&o->via.array.ptr[i], list, n, max);
	else if (o->type == MSGPACK_OBJECT_MAP)
		for (i = 0; i < o->via.map.size; i++) {
			nodes(&o->via.map.ptr[i].key, list, n, max);
			nodes(&o->via.map.ptr[i].val, list, n, max);
		}
}

/* The tree o packed into a new blob. */
static struct blob
repack(const msgpack_object *o)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_object(&pk, *o);
	return (struct blob){sb.data, sb.size};
}

/*
 * Every node of every example frame but the version and the type
 * replaced by an empty map, and by a value of the wrong type (7 for a
 * string, "x" for anything else): the decoder must refuse each.
 */
static void
test_wrong_types(void **state)
{
	msgpack_object *list[512], keep, repl[2];
	msgpack_unpacked up;
	struct medha_msg m, out;
	struct blob b, c;
	size_t n, off, tried = 0;

	(void)state;
	for (int t = 1; t < MEDHA_MSG_TYPE_COUNT; t++) {
		example(t, 1, &m);
		b = enc(&m);
		msgpack_unpacked_init(&up);
		off = 0;
		assert_int_equal(msgpack_unpack_next(&up, b.p, b.n, &off),
		    MSGPACK_UNPACK_SUCCESS);
		n = 0;
		nodes(&up.data, list, &n, 512);
		for (size_t i = 3; i < n; i++) {
			repl[0].type = MSGPACK_OBJECT_MAP;
			repl[0].via.map.size = 0;
			repl[0].via.map.ptr = NULL;
			if (list[i]->type == MSGPACK_OBJECT_STR ||
			    list[i]->type == MSGPACK_OBJECT_BIN) {
				repl[1].type = MSGPACK_OBJECT_POSITIVE_INTEGER;
				repl[1].via.u64 = 7;
			} else {
				repl[1].type = MSGPACK_OBJECT_STR;
				repl[1].via.str.ptr = "x";
				repl[1].via.str.size = 1;
			}
			for (int r = 0; r < 2; r++) {
				keep = *list[i];
				*list[i] = repl[r];
				c = repack(&up.data);
				*list[i] = keep;
				if (medha_msg_decode(&out, c.p, c.n, why,
				        sizeof(why)) == 0)
					fail_msg("%s: node %zu replaced, taken",
					    medha_msg_type_name(t), i);
				free(c.p);
				tried++;
			}
		}
		msgpack_unpacked_destroy(&up);
		free(b.p);
	}
	assert_true(tried > 300);
}

/* ---- randomised ---- */

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t
rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* Decode p; if it is taken, it must survive encode and decode unchanged. */
static int
check_bytes(const char *p, size_t n)
{
	struct medha_msg m, m2;
	void *buf;
	size_t len;
	int rc;

	why[0] = '\0';
	if ((rc = medha_msg_decode(&m, p, n, why, sizeof(why))) != 0) {
		assert_int_equal(rc, MEDHA_EFORMAT);
		assert_true(why[0] != '\0');
		return 0;
	}
	if (medha_msg_encode(&m, &buf, &len, why, sizeof(why)) != 0)
		fail_msg("decoded but not encoded: %s", why);
	if (medha_msg_decode(&m2, buf, len, why, sizeof(why)) != 0)
		fail_msg("re-encoded frame refused: %s", why);
	assert_true(medha_msg_equal(&m, &m2));
	medha_msg_clear(&m);
	medha_msg_clear(&m2);
	free(buf);
	return 1;
}

static void
test_random_bytes(void **state)
{
	char buf[256];
	struct medha_msg m;
	struct blob b;
	int taken = 0;

	(void)state;
	for (int i = 0; i < 20000; i++) {
		size_t n = rnd() % sizeof(buf);

		for (size_t k = 0; k < n; k++)
			buf[k] = (char)rnd();
		if (n > 2 && i % 2 == 0) /* a plausible start */
			buf[0] = (char)(0x92 + rnd() % 6), buf[1] = 1,
			buf[2] = (char)(1 + rnd() % 16);
		taken += check_bytes(buf, n);
	}
	/* damaged valid frames: a byte or two changed */
	for (int t = 1; t < MEDHA_MSG_TYPE_COUNT; t++)
		for (int i = 0; i < 400; i++) {
			example(t, i & 1, &m);
			b = enc(&m);
			b.p[rnd() % b.n] = (char)rnd();
			if (i & 2)
				b.p[rnd() % b.n] ^= (char)(1u << rnd() % 8);
			taken += check_bytes(b.p, b.n);
			free(b.p);
		}
	assert_true(taken > 100);
}

/* A value near the edges of what fields accept. */
static int64_t
rnd_int(void)
{
	static const int64_t v[] = {-1, 0, 1, 2, 7, 63, 64, 65, 127, 128, 65536,
	    65537, 1 << 24, (1 << 24) + 1, INT32_MAX, (int64_t)INT32_MAX + 1,
	    INT32_MIN, INT64_MAX, INT64_MIN};

	return rnd() % 4 == 0 ? (int64_t)(rnd() % 1000)
	                      : v[rnd() % (sizeof(v) / sizeof(v[0]))];
}

static double
rnd_num(void)
{
	static const double v[] = {0, -0.0, 1e-9, 0.5, 1, 1.5, 99.9, 100, 100.5,
	    -1, 1e300, NAN, INFINITY};

	return v[rnd() % (sizeof(v) / sizeof(v[0]))];
}

/* A string of about the field's limit in buf[cap], sometimes unended. */
static void
rnd_name(char *buf, size_t cap)
{
	size_t n = rnd() % 3 == 0 ? cap - 1 - rnd() % 2 : rnd() % 5;

	memset(buf, 'a' + (int)(rnd() % 26), cap);
	if (rnd() % 16 != 0)
		buf[n] = '\0';
}

/* Fills *m of type t with random fields; storage from the pools given. */
static void
rnd_msg(int t, struct medha_msg *m, int32_t *ids, struct medha_record *rec,
    struct medha_msg_event *ev, struct medha_msg_item *it,
    struct medha_msg_token *tok, uint64_t *frees)
{
	static const char *backends[] = {"cpu", "sim", "cuda", "gpu", ""};
	static char *stops[] = {"a", "",
	    "0123456789012345678901234567890123"
	    "456789012345678901234567890123"};
	static struct medha_tbt_bin bins[2];
	int n_ids = (int)(rnd() % 5);

	memset(m, 0, sizeof(*m));
	m->type = t;
	for (int i = 0; i < 8; i++)
		ids[i] = rnd() % 8 == 0 ? -1 : (int32_t)(rnd() % 1000);
	switch (t) {
	case MEDHA_MSG_SUBMIT:
		rnd_name(m->submit.id, sizeof(m->submit.id));
		m->submit.arrival = rnd_num();
		m->submit.prompt_ids = rnd() % 2 ? ids : NULL;
		m->submit.prompt_tokens =
		    m->submit.prompt_ids != NULL || rnd() % 2 ? n_ids
		                                              : rnd_int();
		m->submit.prompt = rnd() % 2 ? "hi" : NULL;
		m->submit.max_tokens = rnd_int();
		m->submit.ttft_slo = rnd_num();
		m->submit.tpot_slo = rnd() % 2 ? 0 : rnd_num();
		m->submit.sampling.temp = (float)rnd_num();
		m->submit.sampling.top_p = (float)rnd_num();
		m->submit.sampling.top_k = (int)rnd_int();
		m->submit.sampling.seed = rnd();
		m->submit.ignore_eos = (int)(rnd() % 3);
		m->submit.no_stream = (int)(rnd() % 3);
		m->submit.n_stop = (int)(rnd() % 6);
		for (int i = 0; i < m->submit.n_stop && i < MEDHA_STOP_MAX; i++)
			m->submit.stop[i] = stops[rnd() % 3];
		if (m->submit.n_stop > MEDHA_STOP_MAX && rnd() % 2)
			m->submit.n_stop = MEDHA_STOP_MAX;
		break;
	case MEDHA_MSG_EVENTS:
		m->events.ev = ev;
		m->events.n = (int64_t)(rnd() % 4);
		for (int i = 0; i < 3; i++) {
			memset(&ev[i], 0, sizeof(ev[i]));
			ev[i].kind = rnd() % 7 == 0 ? 2 : (int)(rnd() % 2);
			ev[i].handle = rnd();
			ev[i].ids = ids;
			ev[i].n_ids = n_ids;
			ev[i].text = rnd() % 2 ? "x\0y" : NULL;
			ev[i].text_len = ev[i].text ? rnd() % 4 : 0;
			ev[i].record = rec;
		}
		memset(rec, 0, sizeof(*rec));
		rnd_name(rec->id, sizeof(rec->id));
		rec->arrival = rnd_num();
		rec->finish = rnd() % 2 ? 2 : rnd_num();
		rec->prompt_tokens = rnd_int();
		rec->output_tokens = rnd() % 2 ? 3 : rnd_int();
		rec->status = (int)(rnd() % 5);
		rec->finish_reason = (int)(rnd() % 4);
		rnd_name(rec->reason, sizeof(rec->reason));
		rec->token_ids = rnd() % 2 ? ids : NULL;
		rec->n_token_ids = rec->token_ids != NULL ? n_ids
		    : rnd() % 2                           ? 0
		                                          : rnd_int();
		rec->text = rnd() % 2 ? "done" : NULL;
		rec->prefill_alone = rnd() % 2 ? 0 : rnd_num();
		rec->tbt.n = rnd() % 2 ? 0 : (int)(rnd() % 3);
		rec->tbt.bin = rec->tbt.n > 0 || rnd() % 2 ? bins : NULL;
		for (int i = 0; i < rec->tbt.n; i++) {
			bins[i].bucket = rnd() % 4 ? 5 * i + (int)(rnd() % 5)
			                           : (int32_t)rnd_int();
			bins[i].count = rnd() % 4 ? 1 : rnd_int();
		}
		break;
	case MEDHA_MSG_HELLO:
		strcpy(m->hello.backend, backends[rnd() % 5]);
		rnd_name(m->hello.model, sizeof(m->hello.model));
		rnd_name(m->hello.gpu, sizeof(m->hello.gpu));
		m->hello.tp = (int)(rnd() % 3),
		m->hello.rank_tp = (int)(rnd() % 3);
		m->hello.spp = 1, m->hello.kvp = (int)rnd_int();
		m->hello.layer_lo = (int)(rnd() % 3);
		m->hello.layer_hi = (int)(rnd() % 4);
		m->hello.block_size = m->hello.n_blocks = m->hello.max_seqs = 1;
		m->hello.vocab = (int)rnd_int(), m->hello.dim = 9;
		m->hello.pid = (int)rnd_int();
		break;
	case MEDHA_MSG_BATCH:
	case MEDHA_MSG_IDLE:
		m->batch.seq = t == MEDHA_MSG_IDLE && rnd() % 2 ? 0 : rnd();
		m->batch.frees = frees;
		m->batch.n_frees = (int64_t)(rnd() % 4);
		for (int i = 0; i < 3; i++)
			frees[i] = rnd();
		m->batch.items = it;
		m->batch.n_items = (int64_t)(rnd() % 3);
		for (int i = 0; i < 2; i++) {
			it[i] = (struct medha_msg_item){.handle = rnd(),
			    .pos = rnd() % 2 ? 5 : rnd_int(),
			    .ids = ids,
			    .n_ids = n_ids,
			    .sample = (int)(rnd() % 2),
			    .has_params = (int)(rnd() % 2)};
			it[i].params.temp = (float)rnd_num();
			it[i].params.top_k = (int)(rnd() % 2 ? 0 : rnd_int());
			it[i].params.top_p = (float)rnd_num();
			it[i].params.seed = rnd();
		}
		break;
	case MEDHA_MSG_RESULT:
		m->result.worker_id = (int)rnd_int();
		m->result.seq = rnd();
		m->result.tokens = tok;
		m->result.n_tokens = (int64_t)(rnd() % 3);
		for (int i = 0; i < 2; i++)
			tok[i] = (struct medha_msg_token){rnd(), ids[i], NULL};
		rnd_name(m->result.error, sizeof(m->result.error));
		m->result.n_experts = (int)(rnd() % 3);
		for (int i = 0; i < m->result.n_experts; i++)
			m->result.experts[i] = rnd_int();
		break;
	case MEDHA_MSG_STATUS_REPLY:
		m->status.workers = rnd_int(), m->status.kv_used = rnd_int();
		m->status.prefill = rnd_int();
		m->status.evicted = rnd_int();
		m->status.progress = rnd_int();
		m->status.n_experts = (int)(rnd() % 3);
		for (int i = 0; i < m->status.n_experts; i++)
			m->status.experts[i] = rnd_int();
		m->status.work = (double)(rnd() % 1000) / 8;
		m->status.ready = (int)(rnd() % 3);
		rnd_name(m->status.model, sizeof(m->status.model));
		rnd_name(m->status.backend, sizeof(m->status.backend));
		break;
	case MEDHA_MSG_ERROR:
		m->error.code = (int)rnd_int();
		rnd_name(m->error.reason, sizeof(m->error.reason));
		break;
	default: m->worker_id = (int)rnd_int(); break;
	}
}

/* What the encoder accepts, the decoder returns unchanged. */
static void
test_random_structs(void **state)
{
	static const int types[] = {MEDHA_MSG_SUBMIT, MEDHA_MSG_EVENTS,
	    MEDHA_MSG_HELLO, MEDHA_MSG_BATCH, MEDHA_MSG_IDLE, MEDHA_MSG_RESULT,
	    MEDHA_MSG_STATUS_REPLY, MEDHA_MSG_ERROR, MEDHA_MSG_READY};
	int ok[sizeof(types) / sizeof(types[0])] = {0}, bad = 0;
	struct medha_record rec;
	struct medha_msg_event ev[3];
	struct medha_msg_item it[2];
	struct medha_msg_token tok[2];
	struct medha_msg m, out;
	uint64_t frees[3];
	int32_t ids[8];
	void *buf;
	size_t len;
	int rc;

	(void)state;
	for (int i = 0; i < 60000; i++) {
		int k = (int)(rnd() % (sizeof(types) / sizeof(types[0])));

		rnd_msg(types[k], &m, ids, &rec, ev, it, tok, frees);
		if ((rc = medha_msg_encode(&m, &buf, &len, why, sizeof(why))) !=
		    0) {
			assert_int_equal(rc, MEDHA_EINVAL);
			assert_true(why[0] != '\0');
			bad++;
			continue;
		}
		if (medha_msg_decode(&out, buf, len, why, sizeof(why)) != 0)
			fail_msg("%s: encoded but refused: %s",
			    medha_msg_type_name(m.type), why);
		if (!medha_msg_equal(&m, &out))
			fail_msg("%s: changed in a round trip",
			    medha_msg_type_name(m.type));
		medha_msg_clear(&out);
		free(buf);
		ok[k]++;
	}
	for (size_t k = 0; k < sizeof(types) / sizeof(types[0]); k++)
		if (ok[k] < 20)
			fail_msg("%s: only %d random structs encoded",
			    medha_msg_type_name(types[k]), ok[k]);
	assert_true(bad > 1000);
}

/* STATUS_REPLY's "evicted" (prefix cache evictions) is optional: a
 * scheduler that sends none reads as 0; one that does, as sent; a
 * string there is refused. */
static void
test_status_evicted(void **state)
{
	struct medha_msg m;
	struct blob b;
	const char *f = "AiiMsisisisisisisisisdsTssss";
#define ST12 "workers", 1, "workers_wanted", 1, "pending", 0, "queue", 0, \
	    "kv_blocks", 100, "kv_used", 0, "block_size", 16, "prefill", 0, \
	    "work", 0.0, "ready", "model", "m", "backend", "sim"

	(void)state;
	b = mk(f, 3, 1, MEDHA_MSG_STATUS_REPLY, 12, ST12);
	if (medha_msg_decode(&m, b.p, b.n, why, sizeof(why)) != 0)
		fail_msg("%s", why);
	assert_int_equal(m.status.evicted, 0);
	assert_int_equal(m.status.progress, 0); /* likewise optional */
	assert_int_equal(m.status.kv_blocks, 100);
	medha_msg_clear(&m);
	free(b.p);
	b = mk("AiiMsisisisisisisisisdsTsssssi", 3, 1, MEDHA_MSG_STATUS_REPLY,
	    13, ST12, "evicted", 42);
	if (medha_msg_decode(&m, b.p, b.n, why, sizeof(why)) != 0)
		fail_msg("%s", why);
	assert_int_equal(m.status.evicted, 42);
	medha_msg_clear(&m);
	free(b.p);
	b = mk("AiiMsisisisisisisisisdsTsssssisi", 3, 1, MEDHA_MSG_STATUS_REPLY,
	    14, ST12, "evicted", 42, "progress", 9);
	if (medha_msg_decode(&m, b.p, b.n, why, sizeof(why)) != 0)
		fail_msg("%s", why);
	assert_int_equal(m.status.progress, 9);
	medha_msg_clear(&m);
	free(b.p);
	reject(mk("AiiMsisisisisisisisisdsTssssss", 3, 1,
	           MEDHA_MSG_STATUS_REPLY, 13, ST12, "evicted", "x"),
	    "status_reply: evicted: not an integer");
#undef ST12
}

/*
 * Logprobs' names (medha-proto(7), "logprobs"): each token's bytes,
 * where the replica gave them, after its logprob; the drawn token's
 * last. Round trips in token events and records, the form without them
 * still taken, and the shapes refused.
 */
static void
test_lp_names(void **state)
{
	struct medha_token_lp lps[3];
	struct medha_record rec = ex_rec_full;
	struct medha_msg_event ev[2] = {{.kind = MEDHA_EVENT_TOKENS,
	                                    .handle = 7,
	                                    .ids = ex_ids,
	                                    .n_ids = 3,
	                                    .text = ex_text,
	                                    .text_len = 2,
	                                    .lps = lps},
	    {.kind = MEDHA_EVENT_RECORD, .handle = 7, .record = &rec}};
	struct medha_msg m = {.type = MEDHA_MSG_EVENTS}, out;
	char big[MEDHA_LP_BYTES_MAX + 1];
	const char *b;
	size_t n;

	(void)state;
	memset(lps, 0, sizeof(lps));
	memset(big, 'x', sizeof(big));
	for (int i = 0; i < 3; i++)
		lps[i] = ex_lp;
	/* every token named, one of them not whole UTF-8, one empty */
	assert_int_equal(medha_token_lp_name(&lps[0], "ab", 2), 0);
	assert_int_equal(medha_token_lp_name(&lps[0], "\xe6\x9d", 2), 0);
	assert_int_equal(medha_token_lp_name(&lps[0], "", 0), 0);
	assert_int_equal(medha_token_lp_name(&lps[0], "c", 1), MEDHA_ENOSPACE);
	/* the drawn token only; none */
	assert_int_equal(medha_token_lp_name(&lps[1], big,
	                     MEDHA_LP_BYTES_MAX),
	    0);
	assert_int_equal(medha_token_lp_name(&lps[1], "c", 1), MEDHA_ENOSPACE);
	assert_int_equal(lps[1].nnamed, 1);
	rec.logprobs = lps;
	rec.n_token_ids = 3;
	m.events.ev = ev;
	m.events.n = 2;
	take(enc(&m), &out);
	assert_true(medha_msg_equal(&m, &out));
	b = medha_token_lp_bytes(&out.events.ev[0].lps[0], 1, &n);
	assert_int_equal(n, 2);
	assert_memory_equal(b, "\xe6\x9d", 2);
	assert_non_null(medha_token_lp_bytes(&out.events.ev[0].lps[0], 2, &n));
	assert_int_equal(n, 0);
	assert_null(medha_token_lp_bytes(&out.events.ev[0].lps[1], 1, &n));
	assert_int_equal(out.events.ev[0].lps[2].nnamed, 0);
	assert_int_equal(out.events.ev[1].record->logprobs[1].nnamed, 1);
	medha_msg_clear(&out);

	/* an older replica's: no names */
	take(mk("AiiAAiUAisAAdAAid", 3, 1, MEDHA_MSG_EVENTS, 1, 5, 0,
	         (uint64_t)1, 1, 5, "x", 1, 2, -0.5, 1, 2, 5, -0.5),
	    &out);
	assert_int_equal(out.events.ev[0].lps[0].ntop, 1);
	assert_int_equal(out.events.ev[0].lps[0].nnamed, 0);
	medha_msg_clear(&out);
	/* bytes, or a string, as names */
	take(mk("AiiAAiUAisAAdAAidbs", 3, 1, MEDHA_MSG_EVENTS, 1, 5, 0,
	         (uint64_t)1, 1, 5, "x", 1, 3, -0.5, 1, 3, 5, -0.5, "\xe6\x9d",
	         2, "ab"),
	    &out);
	assert_int_equal(out.events.ev[0].lps[0].nnamed, 2);
	b = medha_token_lp_bytes(&out.events.ev[0].lps[0], 0, &n);
	assert_int_equal(n, 2);
	assert_memory_equal(b, "ab", 2);
	medha_msg_clear(&out);

	/* refused: a top one named where the drawn one is not; not bytes;
	   names over MEDHA_LP_BYTES_MAX together; a worker's RESULT names
	   none */
	reject(mk("AiiAAiUAisAAdAAids", 3, 1, MEDHA_MSG_EVENTS, 1, 5, 0,
	           (uint64_t)1, 1, 5, "x", 1, 2, -0.5, 1, 3, 5, -0.5, "a"),
	    "events: [0].logprobs[0][0]: bytes where the tokens before have "
	    "none");
	reject(mk("AiiAAiUAisAAdAi", 3, 1, MEDHA_MSG_EVENTS, 1, 5, 0,
	           (uint64_t)1, 1, 5, "x", 1, 3, -0.5, 0, 7),
	    "events: [0].logprobs[0]: not a token's bytes");
	reject(mk("AiiAAiUAisAAdAAidbb", 3, 1, MEDHA_MSG_EVENTS, 1, 5, 0,
	           (uint64_t)1, 1, 5, "x", 1, 3, -0.5, 1, 3, 5, -0.5, big, 1,
	           big, MEDHA_LP_BYTES_MAX),
	    "events: [0].logprobs[0][0]: names over 512 bytes together");
	reject(mk("AiiAAiUAisAAdAAidsA", 3, 1, MEDHA_MSG_EVENTS, 1, 5, 0,
	           (uint64_t)1, 1, 5, "x", 1, 4, -0.5, 1, 2, 5, -0.5, "a", 0),
	    "events: [0].logprobs[0]: not [logprob, top(, bytes)]");
	reject(mk("AiiiUAAUidAAidss", 6, 1, MEDHA_MSG_RESULT, 0, (uint64_t)1, 1,
	           4, (uint64_t)1, 5, -0.5, 1, 3, 5, -0.5, "a", ""),
	    "result: tokens[0][0]: bytes where the tokens before have none");
}

static void
test_names(void **state)
{
	(void)state;
	assert_string_equal(medha_msg_type_name(MEDHA_MSG_SUBMIT), "submit");
	assert_string_equal(medha_msg_type_name(MEDHA_MSG_STATUS_REPLY),
	    "status_reply");
	assert_string_equal(medha_msg_type_name(MEDHA_MSG_IDLE), "idle");
	assert_string_equal(medha_msg_type_name(0), "unknown");
	assert_string_equal(medha_msg_type_name(MEDHA_MSG_TYPE_COUNT),
	    "unknown");
	assert_int_equal(MEDHA_MSG_IDLE, 16);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_roundtrip_all),
	    cmocka_unit_test(test_roundtrip_values),
	    cmocka_unit_test(test_utf8_text),
	    cmocka_unit_test(test_reject_frame),
	    cmocka_unit_test(test_reject_oversize),
	    cmocka_unit_test(test_reject_submit),
	    cmocka_unit_test(test_reject_others),
	    cmocka_unit_test(test_record_tbt),
	    cmocka_unit_test(test_reject_limits),
	    cmocka_unit_test(test_reject_ids_total),
	    cmocka_unit_test(test_encode_refuses),
	    cmocka_unit_test(test_prefixes_and_trailing),
	    cmocka_unit_test(test_wrong_types),
	    cmocka_unit_test(test_random_bytes),
	    cmocka_unit_test(test_random_structs),
	    cmocka_unit_test(test_status_evicted),
	    cmocka_unit_test(test_lp_names),
	    cmocka_unit_test(test_names),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
