/*
 * fuzz-proto.c: a libFuzzer target for the wire codec (libcore/net/
 * proto*.c). Each input is decoded as one frame. A refusal must say why;
 * a message taken must encode again, the encoding must decode to the
 * same message, and encoding that must give the same bytes (the encoder
 * is canonical). Built with ASan and UBSan, any crash, leak or abort is
 * a bug; with -rss_limit_mb and -malloc_limit_mb libFuzzer also catches a
 * decoder that allocates more than the input justifies.
 *
 * Built with -DPROTO_SEEDS instead, it is the seed writer:
 *	fuzz-proto-seeds -w DIR     one frame a file, every message type,
 *	                            with all its fields and with the fewest
 *	fuzz-proto-seeds -d FILE    a libFuzzer dictionary: the map keys
 *
 *	sh contrib/fuzz-proto.sh          # builds, seeds, runs FUZZ_SECONDS
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/proto.h"

#ifndef PROTO_SEEDS

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct medha_msg m, m2;
	void *buf, *buf2;
	size_t len, len2;
	char why[512];
	int rc;

	why[0] = '\0';
	if ((rc = medha_msg_decode(&m, data, size, why, sizeof(why))) != 0) {
		if (why[0] == '\0' ||
		    (rc != MEDHA_EFORMAT && rc != MEDHA_ENOMEM))
			abort(); /* every refusal says why */
		if (m.type != 0)
			abort(); /* and leaves nothing behind */
		return 0;
	}
	if (medha_msg_encode(&m, &buf, &len, why, sizeof(why)) != 0) {
		fprintf(stderr, "decoded but not encoded: %s\n", why);
		abort();
	}
	if (medha_msg_decode(&m2, buf, len, why, sizeof(why)) != 0) {
		fprintf(stderr, "re-encoded frame refused: %s\n", why);
		abort();
	}
	if (!medha_msg_equal(&m, &m2)) {
		fprintf(stderr, "%s changed in a round trip\n",
		    medha_msg_type_name(m.type));
		abort();
	}
	if (medha_msg_encode(&m2, &buf2, &len2, why, sizeof(why)) != 0 ||
	    len2 != len || memcmp(buf, buf2, len) != 0)
		abort(); /* the encoding is a function of the message */
	free(buf);
	free(buf2);
	medha_msg_clear(&m);
	medha_msg_clear(&m2);
	return 0;
}

#else /* PROTO_SEEDS */

#include <err.h>
#include <unistd.h>

static int32_t ids[] = {1, 2, 3, 0, 2147483647};
static struct medha_record rec_full = {.id = "req-1",
    .arrival = 1,
    .first_token = 1.25,
    .finish = 1.45,
    .prompt_tokens = 809,
    .output_tokens = 11,
    .ttft = 0.25,
    .tpot_mean = 0.02,
    .tpot_max = 0.031,
    .ttft_slo = 0.5,
    .tpot_slo = 0.1,
    .status = MEDHA_STATUS_OK,
    .finish_reason = MEDHA_FINISH_STOP,
    .token_ids = ids,
    .n_token_ids = 5,
    .text = "Blue."};
static struct medha_record rec_min = {.id = "r",
    .status = MEDHA_STATUS_REJECTED,
    .reason = "too long"};
static struct medha_msg_event events[] = {
    {.kind = MEDHA_EVENT_TOKENS,
        .handle = 7,
        .ids = ids,
        .n_ids = 3,
        .text = "a\xff",
        .text_len = 2},
    {.kind = MEDHA_EVENT_RECORD, .handle = 7, .record = &rec_full},
    {.kind = MEDHA_EVENT_RECORD, .handle = 8, .record = &rec_min},
};
static uint64_t frees[] = {3, 0, UINT64_MAX};
static struct medha_msg_item items[] = {
    {.handle = 1,
        .pos = 0,
        .ids = ids,
        .n_ids = 5,
        .sample = 1,
        .has_params = 1,
        .params = {.temp = 0.7f, .top_k = 40, .top_p = 0.9f, .seed = 99}},
    {.handle = 2, .pos = 100, .ids = ids, .n_ids = 1},
};
static struct medha_msg_token tokens[] = {{1, 5}, {2, 0}};

/* The full or the fewest-fields example of type t. */
static void
example(int t, int full, struct medha_msg *m)
{
	static char stop0[] = "\n\n", stop1[] = "END";

	memset(m, 0, sizeof(*m));
	m->type = t;
	switch (t) {
	case MEDHA_MSG_SUBMIT:
		strcpy(m->submit.id, "q1");
		m->submit.sampling = medha_sampling_greedy;
		m->submit.prompt_tokens = 100;
		if (!full)
			break;
		m->submit.arrival = 1.5;
		m->submit.prompt = "Why is the sky blue?";
		m->submit.prompt_ids = ids;
		m->submit.prompt_tokens = 5;
		m->submit.max_tokens = 16;
		m->submit.sampling.temp = 0.7f;
		m->submit.sampling.top_k = 40;
		m->submit.sampling.top_p = 0.9f;
		m->submit.sampling.seed = 12345;
		m->submit.ignore_eos = 1;
		m->submit.n_stop = 2;
		m->submit.stop[0] = stop0;
		m->submit.stop[1] = stop1;
		m->submit.ttft_slo = 0.5;
		m->submit.tpot_slo = 0.05;
		break;
	case MEDHA_MSG_ACCEPTED:
		strcpy(m->accepted.id, "q1");
		m->accepted.handle = full ? UINT64_MAX : 1;
		break;
	case MEDHA_MSG_EVENTS:
		m->events.ev = events;
		m->events.n = full ? 3 : 0;
		break;
	case MEDHA_MSG_CANCEL: m->cancel = 42; break;
	case MEDHA_MSG_STATUS_REPLY:
		m->status = (struct medha_msg_status){.workers = 2,
		    .workers_wanted = 4,
		    .ready = full,
		    .pending = 10,
		    .queue = 3,
		    .kv_blocks = 4096,
		    .kv_used = 100,
		    .block_size = 16,
		    .model = "llama3-8b",
		    .backend = "sim"};
		break;
	case MEDHA_MSG_ERROR:
		m->error.code = MEDHA_EFORMAT;
		strcpy(m->error.reason,
		    full ? "submit: request.id: missing" : "");
		break;
	case MEDHA_MSG_HELLO:
		m->hello = (struct medha_msg_hello){.backend = "cpu",
		    .model = "cache/models/SmolLM2-135M-Instruct.Q4_1.gguf",
		    .gpu = "cpu",
		    .tp = 2,
		    .spp = 2,
		    .kvp = 1,
		    .rank_tp = 1,
		    .rank_spp = 1,
		    .layer_lo = 15,
		    .layer_hi = 30,
		    .block_size = 16,
		    .n_blocks = 2048,
		    .max_seqs = 64,
		    .vocab = 49152,
		    .dim = 576,
		    .pid = 4242};
		break;
	case MEDHA_MSG_WELCOME:
	case MEDHA_MSG_READY:
	case MEDHA_MSG_HEARTBEAT: m->worker_id = full ? 3 : 0; break;
	case MEDHA_MSG_RESULT:
		m->result.worker_id = 3;
		m->result.seq = 77;
		m->result.tokens = full ? tokens : NULL;
		m->result.n_tokens = full ? 2 : 0;
		strcpy(m->result.error, full ? "" : "out of memory");
		break;
	case MEDHA_MSG_BATCH:
		m->batch.seq = 77;
		m->batch.frees = full ? frees : NULL;
		m->batch.n_frees = full ? 3 : 0;
		m->batch.items = items;
		m->batch.n_items = full ? 2 : 1;
		break;
	case MEDHA_MSG_IDLE:
		m->batch.frees = full ? frees : NULL;
		m->batch.n_frees = full ? 3 : 0;
		break;
	}
}

static void
write_seeds(const char *dir)
{
	struct medha_msg m;
	char path[4096], why[256];
	void *buf;
	size_t len;
	FILE *f;

	for (int t = 1; t < MEDHA_MSG_TYPE_COUNT; t++)
		for (int full = 0; full < 2; full++) {
			example(t, full, &m);
			if (medha_msg_encode(&m, &buf, &len, why,
			        sizeof(why)) != 0)
				errx(1, "%s", why);
			snprintf(path, sizeof(path), "%s/%s-%s.bin", dir,
			    medha_msg_type_name(t), full ? "full" : "min");
			if ((f = fopen(path, "wb")) == NULL ||
			    fwrite(buf, 1, len, f) != len || fclose(f) != 0)
				err(1, "%s", path);
			free(buf);
		}
}

/* Every key of every map, as msgpack strings. */
static void
write_dict(const char *path)
{
	static const char *keys[] = {"id", "arrival", "prompt", "prompt_ids",
	    "prompt_tokens", "max_tokens", "temperature", "top_k", "top_p",
	    "seed", "ignore_eos", "stop", "ttft_slo", "tpot_slo", "first_token",
	    "finish", "output_tokens", "ttft", "tpot_mean", "tpot_max",
	    "status", "finish_reason", "reason", "token_ids", "text", "workers",
	    "workers_wanted", "ready", "pending", "queue", "kv_blocks",
	    "kv_used", "block_size", "model", "backend", "gpu", "tp", "spp",
	    "kvp", "rank_tp", "rank_spp", "rank_kvp", "layers", "n_blocks",
	    "max_seqs", "vocab", "dim", "pid", "ok", "rejected", "failed",
	    "cancelled", "length", "cpu", "sim", "cuda"};
	FILE *f = fopen(path, "w");

	if (f == NULL)
		err(1, "%s", path);
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		fprintf(f, "\"\\x%02x%s\"\n", 0xa0 | (unsigned)strlen(keys[i]),
		    keys[i]);
	fprintf(f, "\"\\xcb\"\n\"\\xcf\"\n\"\\xdd\"\n\"\\xdf\"\n\"\\xc4\"\n");
	if (fclose(f) != 0)
		err(1, "%s", path);
}

int
main(int argc, char **argv)
{
	int c;

	while ((c = getopt(argc, argv, "d:w:")) != -1)
		switch (c) {
		case 'd': write_dict(optarg); break;
		case 'w': write_seeds(optarg); break;
		default:
			fprintf(stderr,
			    "usage: fuzz-proto-seeds [-d dict] [-w dir]\n");
			return 2;
		}
	return 0;
}

#endif /* PROTO_SEEDS */
