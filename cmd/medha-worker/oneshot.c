/*
 * oneshot.c: medha-worker's one-shot mode: the prompt (-p, -f, --chat)
 * tokenized with the GGUF's tokenizer, prefilled in chunks and generated
 * from with the sampler, on the cpu backend or another of the registry
 * opened on the same file (--backend cuda), through engine/runner.c.
 */
#include "medha-worker.h"
#include "tok/tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
/*
 * The whole of path ("-": stdin) as a NUL-terminated string, of at most
 * limit bytes; exits 1 (a longer file is an error, found without reading
 * more than limit + 1 bytes of it).
 */
static char *
slurp(const char *path, size_t *len, size_t limit, const char *why_limit)
{
	FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
	char *buf = NULL;
	size_t n = 0, cap = 0, got;

	if (f == NULL)
		die(1, "%s: %s", path, strerror(errno));
	do {
		if (cap - n < 65536) {
			cap = cap ? 2 * cap : 65536;
			if ((buf = realloc(buf, cap + 1)) == NULL)
				die(1, "out of memory");
		}
		got = fread(buf + n, 1, cap - n, f);
		n += got;
		if (n > limit) {
			free(buf);
			die(1, "%s: more than %zu bytes: %s", path, limit,
			    why_limit);
		}
	} while (got > 0);
	if (ferror(f)) {
		free(buf);
		die(1, "%s: read error", path);
	}
	if (f != stdin)
		fclose(f);
	buf[n] = '\0';
	*len = n;
	return buf;
}

/* Print token id's text (or, with as_ids, its number). */
static void
emit(const struct medha_tok *t, int32_t id, int as_ids, int first)
{
	char small[256], *buf = small;
	size_t len;
	int rc;

	if (as_ids) {
		printf("%s%d", first ? "" : " ", id);
		return;
	}
	/* control tokens give no text, as in llama.cpp */
	rc = medha_tok_decode(t, &id, 1, 0, buf, sizeof(small), &len);
	if (rc == MEDHA_ENOSPACE && (buf = malloc(len)) != NULL)
		rc = medha_tok_decode(t, &id, 1, 0, buf, len, &len);
	if (rc == 0)
		fwrite(buf, 1, len, stdout);
	if (buf != small)
		free(buf);
}


/*
 * The prompt's text, -p's or -f's file (malloc'd; its length in *len);
 * exits 1 on a file that cannot be read or cannot fit the context.
 */
static char *
read_prompt(const struct args *a, struct medha_runner *r, size_t *len)
{
	const struct medha_tok *tok = medha_runner_tok(r);
	char *text;

	if (a->pfile != NULL) {
		/* no token is longer than the longest piece: a file longer
		 * than the context's worth of them cannot fit */
		int64_t ctx = medha_runner_model(r)->c.ctx_len;
		size_t piece = 1, limit;
		char msg[160];
		for (size_t i = 0; i < medha_tok_n_vocab(tok); i++) {
			const char *p;
			size_t l;
			if (medha_tok_piece(tok, (int32_t)i, &p, &l) == 0 &&
			    l > piece)
				piece = l;
		}
		if (ctx <= 0)
			ctx = (int64_t)1 << 20;
		limit = (size_t)ctx * piece + 65536;
		snprintf(msg, sizeof(msg),
		    "the model's context holds %lld tokens of at most %zu "
		    "bytes",
		    (long long)ctx, piece);
		return slurp(a->pfile, len, limit, msg);
	}
	text = strdup(a->prompt);
	*len = strlen(a->prompt);
	return text;
}

/*
 * --chat: text (len bytes) as the user's message, after --system's, in
 * the model's chat template; *out is malloc'd. Exits 1 if it cannot.
 */
static void
render_chat(const struct args *a, const struct medha_tok *tok, const char *text,
    size_t len, char **out, size_t *out_len)
{
	struct medha_tok_msg msgs[2] = {{"system", a->sys_msg, 0},
	    {"user", text, len}};
	int first = a->sys_msg == NULL;
	int rc;

	if ((rc = medha_tok_chat_msgs(tok, msgs + first, 2 - first, 1, out,
	         out_len)) != 0)
		die(1, "--chat: %s",
		    rc == MEDHA_EUNSUP
		        ? "the model's chat template is not one medha "
		          "can render (Jinja it cannot read, and "
		          "neither ChatML nor Llama-3)"
		        : rc == MEDHA_EINVAL
		        ? "the model's chat template refused the "
		          "conversation (the reason is above)"
		        : medha_strerror(rc));
}

/*
 * The prompt into the cache, chunk by chunk, the last position's logits
 * into logits; on a terminal with more than one chunk, the progress on
 * stderr. Exits 1 on a failure.
 */
static void
prefill(const struct args *a, struct medha_runner *r, const int32_t *ids,
    size_t n_ids, float *logits)
{
	int64_t n = (int64_t)n_ids, step = a->chunk, done = 0;
	int show = step > 0 && n > step && isatty(STDERR_FILENO);
	char why[512];

	if (!show)
		step = n; /* the runner chunks it alike */
	while (done < n) {
		int64_t k = n - done < step ? n - done : step;
		if (medha_runner_prefill(r, ids + done, k, a->chunk, logits,
		        why, sizeof(why)) != 0)
			die(1, "prompt: %s", why);
		done += k;
		if (show)
			progress("prefill: %lld of %lld prompt tokens ",
			    (long long)done, (long long)n);
	}
	if (show)
		fputc('\n', stderr);
}

/* --logprobs: one JSON line a token, {"id", "logprob", "top": [[id,
 * logprob], ...]} (the draw's, model/sample.h). */
static void
write_logprobs(FILE *f, const struct medha_sampler *smp, int32_t tok)
{
	const struct medha_logprob *top;
	float lp;
	int n = medha_sample_logprobs(smp, &lp, &top);

	fprintf(f, "{\"id\": %d, \"logprob\": %.9g, \"top\": [", tok, lp);
	for (int i = 0; i < n; i++)
		fprintf(f, "%s[%d, %.9g]", i ? ", " : "", top[i].id,
		    top[i].logprob);
	fprintf(f, "]}\n");
}

/*
 * Prefills the n_ids tokens of ids, writes --logits, then generates up
 * to -n tokens to stdout and logs the speeds; exits 1 on a failure.
 */
static void
generate(const struct args *a, struct medha_runner *r, const int32_t *ids,
    size_t n_ids)
{
	const struct medha_tok *tok = medha_runner_tok(r);
	struct medha_sampler *smp;
	float *logits;
	FILE *steps = NULL; /* --step-logits */
	FILE *lpf = NULL;   /* --logprobs */
	double t0, t_prompt, t_gen = 0;
	int64_t n_out = 0;
	int32_t next;
	char why[512];
	int rc, vocab;

	if ((rc = medha_runner_start(r, (int64_t)n_ids + a->n_gen, why,
	         sizeof(why))) != 0)
		die(1, "prompt: %s", why);
	vocab = medha_runner_model(r)->c.vocab;
	if ((logits = calloc((size_t)vocab, sizeof(float))) == NULL)
		die(1, "logits: out of memory");
	if (medha_sampler_init(&smp, &a->sp, vocab) != 0 ||
	    medha_sampler_prompt(smp, ids, (int64_t)n_ids) != 0)
		die(1, "sampler: bad parameters");
	if (a->step_logits != NULL && (steps = fopen(a->step_logits, "wb")) ==
	    NULL)
		die(1, "%s: %s", a->step_logits, strerror(errno));
	if (a->logprobs != NULL && (lpf = fopen(a->logprobs, "w")) == NULL)
		die(1, "%s: %s", a->logprobs, strerror(errno));

	t0 = medha_now();
	prefill(a, r, ids, n_ids, logits);
	t_prompt = medha_now() - t0;
	if (a->logits_path != NULL) {
		FILE *f = fopen(a->logits_path, "wb");
		if (f == NULL ||
		    fwrite(logits, sizeof(float), (size_t)vocab, f) !=
		        (size_t)vocab ||
		    fclose(f) != 0)
			die(1, "%s: %s", a->logits_path, strerror(errno));
	}
	t0 = medha_now();
	while (n_out < a->n_gen) {
		/* the row each token is drawn from: for references */
		if (steps != NULL && fwrite(logits, sizeof(float),
		                         (size_t)vocab, steps) != (size_t)vocab)
			die(1, "%s: %s", a->step_logits, strerror(errno));
		next = medha_sample(smp, logits);
		if (lpf != NULL)
			write_logprobs(lpf, smp, next);
		if (!a->ignore_eos && medha_tok_is_eog(tok, next))
			break;
		emit(tok, next, a->as_ids, n_out == 0);
		if (fflush(stdout) != 0) /* the reader is gone, a full disk */
			die(1, "stdout: %s", strerror(errno));
		if (++n_out == a->n_gen)
			break;
		if ((rc = medha_runner_decode(r, next, logits, why,
		         sizeof(why))) != 0)
			die(1, "generation: %s", why);
	}
	t_gen = medha_now() - t0;
	if (steps != NULL && fclose(steps) != 0)
		die(1, "%s: %s", a->step_logits, strerror(errno));
	if (lpf != NULL && fclose(lpf) != 0)
		die(1, "%s: %s", a->logprobs, strerror(errno));
	if (a->as_ids || a->n_gen > 0)
		printf("\n");
	fflush(stdout);
	medha_log(MEDHA_LOG_INFO, "KV: at most %lld blocks of %d positions "
	    "held (%lld positions)",
	    (long long)medha_runner_kv_peak(r), MEDHA_KV_BLOCK,
	    (long long)medha_runner_len(r));
	medha_log(MEDHA_LOG_INFO,
	    "prompt %zu tokens in %.3f s (%.1f tok/s), generated %lld in %.3f "
	    "s (%.1f tok/s), %d threads",
	    n_ids, t_prompt, n_ids / t_prompt, (long long)n_out, t_gen,
	    n_out > 1 && t_gen > 0 ? (n_out - 1) / t_gen : 0.0,
	    a->ro.n_threads);
	medha_sampler_free(smp);
	free(logits);
}

/* One-shot mode: the prompt tokenized, then printed (--tokenize) or run. */
int
oneshot_main(struct args *a)
{
	struct medha_runner *r;
	const struct medha_tok *tok;
	int32_t *ids;
	size_t n_ids, plen, chat_len = 0;
	char *text, *chat_text = NULL, why[512];
	int rc, status = 0;

	medha_log_level = MEDHA_LOG_WARN + a->verbose;
	if (!a->seed_set) { /* as HTTP does for a request without one */
		uint64_t x = (uint64_t)(medha_now() * 1e9) ^
		    ((uint64_t)getpid() << 32);
		a->sp.seed = splitmix64(&x) >> 1; /* what --seed takes */
		if (a->sp.temp > 0)
			medha_log(MEDHA_LOG_INFO, "seed %llu (--seed repeats it)",
			    (unsigned long long)a->sp.seed);
	}
	if (a->ro.n_threads == 0)
		a->ro.n_threads = online_cpus(256);
	if ((rc = medha_runner_open(&r, a->model, &a->ro, why, sizeof(why))) !=
	    0)
		die(1, "%s: %s", a->model, why);
	tok = medha_runner_tok(r);
	text = read_prompt(a, r, &plen);
	if (a->chat)
		render_chat(a, tok, text, plen, &chat_text, &chat_len);
	if ((rc = medha_tok_encode(tok, a->chat ? chat_text : text,
	         a->chat ? chat_len : plen, MEDHA_TOK_DEFAULT, &ids,
	         &n_ids)) != 0)
		die(1, "tokenizing the prompt: %s", medha_strerror(rc));
	if (a->tokenize) {
		for (size_t i = 0; i < n_ids; i++)
			printf("%s%d", i ? " " : "", ids[i]);
		printf("\n");
	} else if (n_ids == 0) {
		medha_log(MEDHA_LOG_ERROR, "the prompt has no tokens");
		status = 1;
	} else
		generate(a, r, ids, n_ids);
	free(ids);
	free(text);
	free(chat_text);
	medha_runner_close(r);
	return stdout_close(status);
}