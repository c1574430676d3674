/*
 * runner_test.c: one prompt in one process (libcore/engine/runner.c),
 * on a tiny random Llama model (tinymodel.h: 2 layers, hidden 64, 4
 * heads over 2 kv heads of 16, ffn 128, context 128, Q8_0 matrices)
 * written to a GGUF file in a temporary directory together with a small
 * SentencePiece vocabulary (97 tokens: <unk>, <s>, </s> and the 94
 * printable ASCII characters), so that medha_runner_open() finds both
 * the model and its tokenizer. The checks:
 *  - open refuses no threads, a missing file, a file cut short and a
 *    model without a tokenizer, each with *r NULL and a reason; the
 *    views give the model's shape and the vocabulary;
 *  - start refuses no room, room past the context and a second start;
 *    prefill and decode refuse being called before start, an empty
 *    prompt and ids outside the vocabulary (the cache unchanged), and
 *    tokens past the room asked for (MEDHA_ENOSPACE);
 *  - greedy generation is deterministic: the same tokens from two
 *    runners, with one thread and with two;
 *  - a prompt prefilled in chunks of 1, 3, 16, its length and more
 *    gives the last position's logits bit for bit as in one chunk, and
 *    the same generation after it;
 *  - a generation loop as medha-worker's one-shot mode runs it (sample,
 *    stop at end-of-generation unless told to ignore it, count to n_gen,
 *    decode): exactly n_gen tokens in a start of prompt + n_gen; with
 *    the model's EOS id set (in a second file) to the token greedy
 *    decoding makes at step k, generation stops after k tokens, the
 *    same k tokens, and with ignore_eos it goes on to n_gen unchanged.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/runner.h"
#include "model/gguf.h"
#include "model/model.h"
#include "model/quant.h"
#include "model/sample.h"
#include "tok/tokenizer.h"
#include "tinymodel.h"

/* ---- the model and its files ---- */

#define VOCAB 97
#define DIM 64
#define NH 4
#define NKV 2
#define HD 16
#define FFN 128
#define NL 2
#define CTX 128
#define EOS_DEFAULT 2
#define PATH_LEN 512

static const struct medha_model_config shape = {.n_layers = NL,
    .dim = DIM,
    .n_heads = NH,
    .n_kv_heads = NKV,
    .head_dim = HD,
    .n_rot = HD,
    .ffn_dim = FFN,
    .ctx_len = CTX,
    .rope_theta = 10000.0f,
    .norm_eps = 1e-5f};

static struct {
	char dir[PATH_LEN - 64];
	char model[PATH_LEN]; /* model and tokenizer, EOS 2 */
	char notok[PATH_LEN]; /* the model alone */
	char cut[PATH_LEN];   /* the model file cut short */
	char eos[PATH_LEN];   /* written by test_eos: another EOS */
	struct tmodel tm;
} F;

/*
 * The model of F.tm to path; with a tokenizer (eos its EOS id) unless
 * eos < 0.
 */
static void
write_model(const char *path, int eos)
{
	struct medha_gguf_writer *w;
	static char pieces[VOCAB][8];
	const char *tok[VOCAB];
	float score[VOCAB];
	int32_t type[VOCAB];

	snprintf(pieces[0], sizeof(pieces[0]), "<unk>");
	snprintf(pieces[1], sizeof(pieces[1]), "<s>");
	/* "</s>" ends generation by its name: another EOS gets another
	 * name for token 2, so that it alone ends generation */
	snprintf(pieces[2], sizeof(pieces[2]), "%s",
	    eos == EOS_DEFAULT || eos < 0 ? "</s>" : "<stop>");
	for (int i = 0; i < VOCAB; i++) {
		if (i >= 3) {
			pieces[i][0] = (char)('!' + i - 3); /* '!' .. '~' */
			pieces[i][1] = '\0';
		}
		tok[i] = pieces[i];
		score[i] = -(float)i;
		type[i] = i == 0 ? 2 : i < 3 ? 3 : 1; /* unknown, control */
	}
	assert_int_equal(medha_gguf_writer_open(&w, path), 0);
	medha_gguf_writer_add_str(w, "general.architecture", "llama");
	medha_gguf_writer_add_str(w, "general.name", "runner_test");
	medha_gguf_writer_add_u32(w, "llama.block_count", NL);
	medha_gguf_writer_add_u32(w, "llama.embedding_length", DIM);
	medha_gguf_writer_add_u32(w, "llama.attention.head_count", NH);
	medha_gguf_writer_add_u32(w, "llama.attention.head_count_kv", NKV);
	medha_gguf_writer_add_u32(w, "llama.feed_forward_length", FFN);
	medha_gguf_writer_add_u32(w, "llama.context_length", CTX);
	medha_gguf_writer_add_u32(w, "llama.rope.dimension_count", HD);
	medha_gguf_writer_add_f32(w, "llama.rope.freq_base", shape.rope_theta);
	medha_gguf_writer_add_f32(w, "llama.attention.layer_norm_rms_epsilon",
	    shape.norm_eps);
	if (eos >= 0) {
		medha_gguf_writer_add_str(w, "tokenizer.ggml.model", "llama");
		medha_gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", tok,
		    VOCAB);
		medha_gguf_writer_add_arr_f32(w, "tokenizer.ggml.scores", score,
		    VOCAB);
		medha_gguf_writer_add_arr_i32(w, "tokenizer.ggml.token_type",
		    type, VOCAB);
		medha_gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 1);
		medha_gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id",
		    (uint32_t)eos);
	}
	for (int i = 0; i < F.tm.nt; i++)
		medha_gguf_writer_add_tensor(w, F.tm.t[i].name, F.tm.t[i].type,
		    F.tm.t[i].n_dims, F.tm.t[i].ne, F.tm.t[i].data,
		    F.tm.t[i].nbytes);
	assert_int_equal(medha_gguf_writer_close(w), 0);
}

static int
setup(void **state)
{
	const char *tmp = getenv("TMPDIR");
	FILE *in, *out;
	char buf[4096];
	size_t n, total = 0;

	(void)state;
	(void)tm_find; /* the model is read from its file here */
	snprintf(F.dir, sizeof(F.dir), "%s/medha-runner-XXXXXX",
	    tmp != NULL && *tmp != '\0' ? tmp : "/tmp");
	if (mkdtemp(F.dir) == NULL)
		return -1;
	snprintf(F.model, sizeof(F.model), "%s/model.gguf", F.dir);
	snprintf(F.notok, sizeof(F.notok), "%s/notok.gguf", F.dir);
	snprintf(F.cut, sizeof(F.cut), "%s/cut.gguf", F.dir);
	snprintf(F.eos, sizeof(F.eos), "%s/eos.gguf", F.dir);
	tm_fill(&F.tm, &shape, VOCAB, MEDHA_GGML_Q8_0, MEDHA_GGML_Q8_0, 0, 42);
	write_model(F.model, EOS_DEFAULT);
	write_model(F.notok, -1);
	/* the first 3000 bytes of the model: its tensors cut off */
	if ((in = fopen(F.model, "rb")) == NULL ||
	    (out = fopen(F.cut, "wb")) == NULL)
		return -1;
	while (total < 3000 && (n = fread(buf, 1, sizeof(buf), in)) > 0) {
		if (n > 3000 - total)
			n = 3000 - total;
		fwrite(buf, 1, n, out);
		total += n;
	}
	fclose(in);
	return fclose(out) == 0 ? 0 : -1;
}

static int
teardown(void **state)
{
	(void)state;
	tm_free(&F.tm);
	unlink(F.model);
	unlink(F.notok);
	unlink(F.cut);
	unlink(F.eos);
	rmdir(F.dir);
	return 0;
}

/* ---- helpers ---- */

static struct medha_runner *
open_runner(const char *path, int threads, int64_t room)
{
	struct medha_runner_opts o = {.n_threads = threads};
	struct medha_runner *r;
	char why[256];

	if (medha_runner_open(&r, path, &o, why, sizeof(why)) != 0)
		fail_msg("open %s: %s", path, why);
	if (room > 0 && medha_runner_start(r, room, why, sizeof(why)) != 0)
		fail_msg("start: %s", why);
	return r;
}

/* A prompt of n ids in [3, VOCAB), drawn from seed. */
static void
prompt_ids(int32_t *ids, int n, uint64_t seed)
{
	uint64_t z = seed;

	for (int i = 0; i < n; i++) {
		z = z * 6364136223846793005ull + 1442695040888963407ull;
		ids[i] = 3 + (int32_t)((z >> 33) % (VOCAB - 3));
	}
}

/*
 * The one-shot loop of medha-worker -p: prefill ids (in chunks of
 * chunk), then up to n_gen greedy tokens into out, stopping before an
 * end-of-generation token unless ignore_eos. Returns the tokens made.
 */
static int
generate(struct medha_runner *r, const int32_t *ids, int n, int64_t chunk,
    int n_gen, int ignore_eos, int32_t *out)
{
	const struct medha_tok *tok = medha_runner_tok(r);
	float logits[VOCAB];
	char why[256];
	int n_out = 0;

	if (medha_runner_prefill(r, ids, n, chunk, logits, why, sizeof(why)) !=
	    0)
		fail_msg("prefill: %s", why);
	while (n_out < n_gen) {
		int32_t next = medha_sample_greedy(logits, VOCAB);
		if (!ignore_eos && medha_tok_is_eog(tok, next))
			break;
		out[n_out] = next;
		if (++n_out == n_gen)
			break;
		if (medha_runner_decode(r, next, logits, why, sizeof(why)) != 0)
			fail_msg("decode %d: %s", n_out, why);
	}
	return n_out;
}

/* ---- open and start ---- */

static void
test_open(void **state)
{
	struct medha_runner_opts o = {.n_threads = 1};
	struct medha_runner *r;
	const struct medha_model *m;
	const struct medha_tok *t;
	char why[256];

	(void)state;
	r = open_runner(F.model, 1, 0);
	m = medha_runner_model(r);
	assert_int_equal(m->c.vocab, VOCAB);
	assert_int_equal(m->c.n_layers, NL);
	assert_int_equal(m->c.dim, DIM);
	assert_int_equal(m->c.ctx_len, CTX);
	t = medha_runner_tok(r);
	assert_int_equal(medha_tok_n_vocab(t), VOCAB);
	assert_int_equal(medha_tok_eos(t), EOS_DEFAULT);
	assert_int_equal(medha_tok_bos(t), 1);
	assert_true(medha_tok_is_eog(t, EOS_DEFAULT));
	assert_false(medha_tok_is_eog(t, 50));
	assert_int_equal(medha_runner_len(r), 0);
	medha_runner_close(r);
	medha_runner_close(NULL);

#define REFUSED(path, opts)                                                \
	do {                                                               \
		why[0] = '\0';                                             \
		r = (struct medha_runner *)&o;                             \
		assert_int_not_equal(medha_runner_open(&r, (path), (opts), \
		                         why, sizeof(why)),                \
		    0);                                                    \
		assert_null(r);                                            \
		assert_true(why[0] != '\0');                               \
	} while (0)

	o.n_threads = 0;
	REFUSED(F.model, &o);
	assert_int_equal(medha_runner_open(&r, F.model, &o, why, sizeof(why)),
	    MEDHA_EINVAL);
	o.n_threads = 1;
	REFUSED("/nonexistent/model.gguf", &o);
	REFUSED(F.cut, &o);
	REFUSED(F.notok, &o);
	assert_int_equal(medha_runner_open(&r, F.notok, &o, why, sizeof(why)),
	    MEDHA_ENOTFOUND);
	assert_non_null(strstr(why, "tokenizer"));
#undef REFUSED
}

static void
test_start(void **state)
{
	struct medha_runner *r = open_runner(F.model, 1, 0);
	float logits[VOCAB];
	int32_t ids[4] = {10, 11, 12, 13};
	char why[256];

	(void)state;
	/* not started */
	why[0] = '\0';
	assert_int_equal(medha_runner_prefill(r, ids, 4, 0, logits, why,
	                     sizeof(why)),
	    MEDHA_EINVAL);
	assert_non_null(strstr(why, "not started"));
	assert_int_equal(medha_runner_decode(r, 10, logits, why, sizeof(why)),
	    MEDHA_EINVAL);
	assert_int_equal(medha_runner_len(r), 0);
	/* no room, or past the context */
	assert_int_equal(medha_runner_start(r, 0, why, sizeof(why)),
	    MEDHA_EINVAL);
	assert_int_equal(medha_runner_start(r, -3, why, sizeof(why)),
	    MEDHA_EINVAL);
	why[0] = '\0';
	assert_int_equal(medha_runner_start(r, CTX + 1, why, sizeof(why)),
	    MEDHA_ERANGE);
	assert_non_null(strstr(why, "context"));
	/* the whole context; once */
	if (medha_runner_start(r, CTX, why, sizeof(why)) != 0)
		fail_msg("start: %s", why);
	assert_int_equal(medha_runner_start(r, 8, why, sizeof(why)),
	    MEDHA_EINVAL);
	if (medha_runner_prefill(r, ids, 4, 0, logits, why, sizeof(why)) != 0)
		fail_msg("prefill: %s", why);
	assert_int_equal(medha_runner_len(r), 4);
	for (int v = 0; v < VOCAB; v++)
		assert_true(isfinite(logits[v]));
	medha_runner_close(r);
}

/* ---- bad input ---- */

static void
test_bad_input(void **state)
{
	struct medha_runner *r = open_runner(F.model, 1, 16);
	float logits[VOCAB];
	int32_t ids[20];
	char why[256];

	(void)state;
	prompt_ids(ids, 20, 5);
	/* an empty prompt */
	why[0] = '\0';
	assert_int_equal(medha_runner_prefill(r, ids, 0, 0, logits, why,
	                     sizeof(why)),
	    MEDHA_EINVAL);
	assert_non_null(strstr(why, "empty"));
	/* ids outside the vocabulary: refused, nothing cached */
	ids[3] = VOCAB;
	why[0] = '\0';
	assert_int_equal(medha_runner_prefill(r, ids, 5, 0, logits, why,
	                     sizeof(why)),
	    MEDHA_EINVAL);
	assert_non_null(strstr(why, "out of range"));
	assert_int_equal(medha_runner_len(r), 0);
	ids[3] = -1;
	assert_int_equal(medha_runner_prefill(r, ids, 5, 0, logits, why,
	                     sizeof(why)),
	    MEDHA_EINVAL);
	assert_int_equal(medha_runner_len(r), 0);
	ids[3] = 40;
	/* past the room of 16 */
	why[0] = '\0';
	assert_int_equal(medha_runner_prefill(r, ids, 17, 0, logits, why,
	                     sizeof(why)),
	    MEDHA_ENOSPACE);
	assert_non_null(strstr(why, "room"));
	assert_int_equal(medha_runner_len(r), 0);
	/* a good prompt; then bad decodes change nothing */
	if (medha_runner_prefill(r, ids, 10, 4, logits, why, sizeof(why)) != 0)
		fail_msg("prefill: %s", why);
	assert_int_equal(medha_runner_len(r), 10);
	assert_int_equal(medha_runner_decode(r, VOCAB, logits, why,
	                     sizeof(why)),
	    MEDHA_EINVAL);
	assert_int_equal(medha_runner_decode(r, -5, logits, why, sizeof(why)),
	    MEDHA_EINVAL);
	assert_int_equal(medha_runner_len(r), 10);
	/* the room fills up exactly */
	for (int i = 10; i < 16; i++)
		if (medha_runner_decode(r, 20 + i, logits, why, sizeof(why)) !=
		    0)
			fail_msg("decode at %d: %s", i, why);
	assert_int_equal(medha_runner_len(r), 16);
	assert_int_equal(medha_runner_decode(r, 20, logits, why, sizeof(why)),
	    MEDHA_ENOSPACE);
	assert_int_equal(medha_runner_len(r), 16);
	medha_runner_close(r);
}

/* ---- generation ---- */

#define PROMPT 40
#define NGEN 24

static void
test_deterministic(void **state)
{
	int32_t ids[PROMPT], a[NGEN], b[NGEN], c[NGEN];
	struct medha_runner *r;
	int na, nb, nc;

	(void)state;
	prompt_ids(ids, PROMPT, 9);
	r = open_runner(F.model, 1, PROMPT + NGEN);
	na = generate(r, ids, PROMPT, 0, NGEN, 1, a);
	/* n_gen tokens; the last one is not fed back */
	assert_int_equal(na, NGEN);
	assert_int_equal(medha_runner_len(r), PROMPT + NGEN - 1);
	medha_runner_close(r);
	r = open_runner(F.model, 1, PROMPT + NGEN);
	nb = generate(r, ids, PROMPT, 0, NGEN, 1, b);
	medha_runner_close(r);
	r = open_runner(F.model, 2, PROMPT + NGEN);
	nc = generate(r, ids, PROMPT, 0, NGEN, 1, c);
	medha_runner_close(r);
	assert_int_equal(nb, NGEN);
	assert_int_equal(nc, NGEN);
	for (int i = 0; i < NGEN; i++) {
		assert_true(a[i] >= 0 && a[i] < VOCAB);
		if (a[i] != b[i] || a[i] != c[i])
			fail_msg("token %d: %d, %d again, %d on two threads", i,
			    a[i], b[i], c[i]);
	}
	/* another prompt, another generation (the model reads it) */
	prompt_ids(ids, PROMPT, 10);
	r = open_runner(F.model, 1, PROMPT + NGEN);
	nb = generate(r, ids, PROMPT, 0, NGEN, 1, b);
	medha_runner_close(r);
	assert_true(memcmp(a, b, sizeof(a)) != 0);
}

static void
test_chunked(void **state)
{
	static const int64_t chunks[] = {1, 3, 16, PROMPT, PROMPT + 7, -1};
	int32_t ids[PROMPT], ref_tok[NGEN], tok[NGEN];
	float ref[VOCAB], got[VOCAB];
	struct medha_runner *r;
	char why[256];

	(void)state;
	prompt_ids(ids, PROMPT, 11);
	r = open_runner(F.model, 2, PROMPT + NGEN);
	if (medha_runner_prefill(r, ids, PROMPT, 0, ref, why, sizeof(why)) != 0)
		fail_msg("prefill: %s", why);
	medha_runner_close(r);
	r = open_runner(F.model, 2, PROMPT + NGEN);
	assert_int_equal(generate(r, ids, PROMPT, 0, NGEN, 1, ref_tok), NGEN);
	medha_runner_close(r);
	for (size_t k = 0; k < sizeof(chunks) / sizeof(chunks[0]); k++) {
		r = open_runner(F.model, 2, PROMPT + NGEN);
		if (medha_runner_prefill(r, ids, PROMPT, chunks[k], got, why,
		        sizeof(why)) != 0)
			fail_msg("prefill in chunks of %lld: %s",
			    (long long)chunks[k], why);
		assert_int_equal(medha_runner_len(r), PROMPT);
		if (memcmp(got, ref, sizeof(ref)) != 0)
			fail_msg("chunks of %lld: other logits",
			    (long long)chunks[k]);
		medha_runner_close(r);
		r = open_runner(F.model, 2, PROMPT + NGEN);
		assert_int_equal(generate(r, ids, PROMPT, chunks[k], NGEN, 1,
		                     tok),
		    NGEN);
		assert_memory_equal(tok, ref_tok, sizeof(tok));
		medha_runner_close(r);
	}
}

static void
test_eos(void **state)
{
	int32_t ids[PROMPT], all[NGEN], got[NGEN];
	struct medha_runner *r;
	int k = -1, n;

	(void)state;
	prompt_ids(ids, PROMPT, 12);
	r = open_runner(F.model, 1, PROMPT + NGEN);
	assert_int_equal(generate(r, ids, PROMPT, 0, NGEN, 1, all), NGEN);
	medha_runner_close(r);
	/* step k: the first ordinary token not made before, from half way
	 * (else from the second token; else the first: the EOS comes at
	 * once) */
	for (int f = 0; f < 2 && k < 0; f++)
		for (int i = f == 0 ? NGEN / 2 : 1; i < NGEN && k < 0; i++) {
			int seen = all[i] < 3;
			for (int j = 0; j < i; j++)
				seen |= all[j] == all[i];
			if (!seen)
				k = i;
		}
	if (k < 0)
		k = 0;
	write_model(F.eos, all[k]);
	r = open_runner(F.eos, 1, PROMPT + NGEN);
	assert_int_equal(medha_tok_eos(medha_runner_tok(r)), all[k]);
	assert_true(medha_tok_is_eog(medha_runner_tok(r), all[k]));
	n = generate(r, ids, PROMPT, 0, NGEN, 0, got);
	medha_runner_close(r);
	assert_int_equal(n, k);
	assert_memory_equal(got, all, (size_t)k * sizeof(int32_t));
	/* ignore_eos: all n_gen, the same */
	r = open_runner(F.eos, 1, PROMPT + NGEN);
	n = generate(r, ids, PROMPT, 0, NGEN, 1, got);
	medha_runner_close(r);
	assert_int_equal(n, NGEN);
	assert_memory_equal(got, all, sizeof(all));
	/* n_gen below k: n_gen tokens; n_gen 0: none */
	if (k > 1) {
		r = open_runner(F.eos, 1, PROMPT + k - 1);
		assert_int_equal(generate(r, ids, PROMPT, 0, k - 1, 0, got),
		    k - 1);
		assert_memory_equal(got, all,
		    (size_t)(k - 1) * sizeof(int32_t));
		medha_runner_close(r);
	}
	r = open_runner(F.eos, 1, PROMPT);
	assert_int_equal(generate(r, ids, PROMPT, 0, 0, 0, got), 0);
	assert_int_equal(medha_runner_len(r), PROMPT);
	medha_runner_close(r);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_open),
	    cmocka_unit_test(test_start),
	    cmocka_unit_test(test_bad_input),
	    cmocka_unit_test(test_deterministic),
	    cmocka_unit_test(test_chunked),
	    cmocka_unit_test(test_eos),
	};

	medha_log_level = MEDHA_LOG_ERROR;
	return cmocka_run_group_tests(tests, setup, teardown);
}
