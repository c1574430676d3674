/*
 * hostile_frames.h: the frames hostile_test.c throws at a live scheduler,
 * in tables: malformed SUBMITs and HELLOs (a well-formed base map with
 * one or a few keys overridden, dropped or added), SUBMITs the protocol
 * allows but no replica can serve, and frames given as raw bytes. A small
 * msgpack writer on top of msgpack-c's packer builds them, since the
 * codec (net/proto.h) refuses to encode anything malformed.
 * Header-only, for that test: include it after <cmocka.h>.
 *
 *	size_t len;
 *	void *buf = map_frame(MEDHA_MSG_SUBMIT, submit_base,
 *	    NELEM(submit_base), submit_cases[i].ov, &len);
 *	(send buf, len; free(buf))
 */
#ifndef MEDHA_HOSTILE_FRAMES_H
#define MEDHA_HOSTILE_FRAMES_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <msgpack.h>

#include "net/proto.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* ---- values, keys and maps ---- */

enum vt {
	VT_NONE = 0, /* no value (a key of NULL ends a list) */
	VT_INT,
	VT_UINT,
	VT_DBL,
	VT_STR,
	VT_BIN,
	VT_NIL,
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

/* clang-format off */
#define I(x)   {.t = VT_INT, .i = (x)}
#define U(x)   {.t = VT_UINT, .u = (x)}
#define D(x)   {.t = VT_DBL, .d = (x)}
#define S(x)   {.t = VT_STR, .s = (x), .n = sizeof(x) - 1}
#define BIN(x) {.t = VT_BIN, .s = (x), .n = sizeof(x) - 1}
#define NIL    {.t = VT_NIL}
#define MAP    {.t = VT_MAP}
#define DROP   {.t = VT_DROP}
#define NOIDS  {.t = VT_IDS, .n = 0}
#define IDS(...) {.t = VT_IDS, .ids = (const int64_t[]){__VA_ARGS__}, \
	.n = sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t)}
#define STRS(...) {.t = VT_STRS, .strs = (const char *const[]){__VA_ARGS__}, \
	.n = sizeof((const char *const[]){__VA_ARGS__}) / sizeof(char *)}
#define RAW(what, b) {what, b, sizeof(b) - 1}
/* clang-format on */
#define X16 "xxxxxxxxxxxxxxxx"
#define X64 X16 X16 X16 X16
#define X63 X16 X16 X16 "xxxxxxxxxxxxxxx"

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
		} else if (ov[j].v.t != VT_DROP && n < 32)
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
	struct kv ov[6]; /* up to 5 overrides, then {NULL} */
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
            {"prompt_ids",
                {.t = VT_STRS, .strs = (const char *const[]){"1"}, .n = 1}}}},
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
    {"stream an int", {{"stream", I(0)}}},
    {"stream a string", {{"stream", S("false")}}},
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
    {"HELLO tp 2 (not the replica's layout)", {{"tp", I(2)}}},
    {"HELLO tp = spp = kvp = 65536",
        {{"tp", I(65536)}, {"spp", I(65536)}, {"kvp", I(65536)}}},
    /* 3 * 45761 * 62571 = 2^32 * 2000 + 1: 1 in 32 bits */
    {"HELLO tp 3, spp 45761, kvp 62571",
        {{"tp", I(3)}, {"spp", I(45761)}, {"kvp", I(62571)}}},
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
    {"HELLO of a second worker (the replica has one)", {{.key = NULL}}},
};

/*
 * HELLOs sent before the worker comes, which the scheduler must refuse
 * when it tries to build its core from them, and still take the worker's
 * afterwards. None may be acceptable: it would take the worker's place.
 */
static const struct mcase hello_early_cases[] = {
    {"early HELLO of an unknown model", {{"model", S("no-such-model")}}},
    {"early HELLO of a model that is a directory", {{"model", S("/tmp")}}},
    {"early HELLO of a model that is not a GGUF",
        {{"model", S("/etc/hostname")}}},
    {"early HELLO of an unknown gpu", {{"gpu", S("tpu9")}}},
    {"early HELLO with a vocabulary not the model's", {{"vocab", I(1000)}}},
    {"early HELLO with a width not the model's", {{"dim", I(577)}}},
    {"early HELLO tp 3, spp 45761, kvp 62571",
        {{"tp", I(3)}, {"spp", I(45761)}, {"kvp", I(62571)}}},
#ifndef MEDHA_CUDA
    /* where the cuda backend is built in, a cuda worker is welcome */
    {"early HELLO backend cuda", {{"backend", S("cuda")}}},
#endif
};

/*
 * SUBMITs the protocol allows but no replica can serve, or that push a
 * limit: each must be refused with an ERROR, or accepted and then end
 * with a record, without stalling the scheduler.
 */
static const struct mcase absurd_cases[] = {
    {"prompt_tokens 2^31", {{"prompt_tokens", I(1LL << 31)}}},
    {"prompt_tokens 2^32", {{"prompt_tokens", I(1LL << 32)}}},
    {"prompt_tokens 2^40", {{"prompt_tokens", I(1LL << 40)}}},
    {"prompt_tokens 2^63-1", {{"prompt_tokens", I(INT64_MAX)}}},
    {"max_tokens 2^63-1", {{"max_tokens", I(INT64_MAX)}}},
    {"prompt_ids and max_tokens 2^63-1",
        {{"prompt_tokens", DROP}, {"prompt_ids", IDS(1, 2, 3)},
            {"max_tokens", I(INT64_MAX)}}},
    {"prompt_tokens and max_tokens 2^62",
        {{"prompt_tokens", I(1LL << 62)}, {"max_tokens", I(1LL << 62)}}},
    {"max_tokens 2^40", {{"max_tokens", I(1LL << 40)}}},
    {"ttft_slo 1e300 and tpot_slo 1e-300",
        {{"ttft_slo", D(1e300)}, {"tpot_slo", D(1e-300)}}},
    {"arrival 1e308", {{"arrival", D(1e308)}}},
    {"extreme sampling",
        {{"temperature", I(100)}, {"top_k", I(1 << 24)}, {"top_p", I(0)},
            {"seed", U(UINT64_MAX)}}},
    {"four stop strings of 64 bytes",
        {{"stop", STRS("a" X63, "b" X63, "c" X63, "d" X63)}}},
    {"an id of 63 bytes", {{"id", S(X63)}}},
};

/* [1, type, map] with the map of base and ov's overrides. */
static void *
map_frame(int type, const struct kv *base, int nbase, const struct kv *ov,
    size_t *len)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_array(&pk, 3);
	msgpack_pack_int(&pk, 1);
	msgpack_pack_int(&pk, type);
	pack_map(&pk, base, nbase, ov);
	*len = sb.size;
	return sb.data; /* the sbuffer's memory: free() */
}

/* Frames given as bytes. */
struct raw {
	const char *what;
	const char *bytes;
	size_t n;
};

static const struct raw raw_cases[] = {
    RAW("an empty array", "\x90"),
    RAW("a version alone", "\x91\x01"),
    RAW("version 2", "\x92\x02\x07"),
    RAW("version 0", "\x92\x00\x07"),
    RAW("version as a string",
        "\x92\xa1"
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
    RAW("type as a string",
        "\x92\x01\xa1"
        "7"),
    RAW("a map for a frame",
        "\x81\xa1"
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
    RAW("a string claiming 4 GiB",
        "\x93\x01\x01\x81\xdb\xff\xff\xff\xff"
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
    RAW("RESULT with an error from a stranger",
        "\x96\x01\x0d\x00\x01\x90\xa4"
        "boom"),
    RAW("HELLO with an empty map", "\x93\x01\x0a\x80"),
    RAW("HELLO with nil", "\x93\x01\x0a\xc0"),
};

#endif
