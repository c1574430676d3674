/*
 * sample.h: choosing the next token from a row of logits: greedy, or
 * random after top-k, top-p and temperature, from a seeded generator of
 * our own (xoshiro256**), so that a seed gives the same tokens on every
 * machine and run.
 *
 * The order is llama.cpp's default chain: the penalties change the
 * logits first; top-k keeps the k largest logits; top-p keeps the
 * smallest prefix (by falling probability, computed before temperature)
 * whose probability reaches p; min-p keeps of those the tokens whose
 * probability is at least min_p times the likeliest's (before
 * temperature: exp(l - l_max) >= min_p); temperature then divides the
 * kept logits, and one token is drawn from their softmax. Ties in logit
 * go to the lower token id, in greedy choice as in sorting. A
 * temperature <= 0 is greedy (after the penalties).
 *
 * The penalties, as vLLM applies them, in this order, to a token's
 * logit l (every backend implements the same):
 *   repetition r (r > 0, r != 1), if the token is in the prompt or the
 *     output so far: l / r if l > 0, else l * r;
 *   frequency f and presence p (OpenAI's), with c the times the token
 *     is in the output so far: l - f * c - p * (c > 0).
 * The output so far is what this sampler has drawn; the prompt is what
 * medha_sampler_prompt() was given (every input token may be: a token
 * seen twice counts once).
 *
 * vLLM's min_tokens: until the sampler has drawn min_tokens tokens, the
 * ids in ban[] (the end-of-generation tokens and the stop token ids)
 * have their logits set to -inf after the penalties, greedy or not, so
 * they cannot be drawn; from then on the logits are as given. A
 * sequence that starts again after preemption gets a sampler whose
 * min_tokens is what is left (serve/replica/flights.c).
 *
 * Log-probabilities, where the parameters ask for them, are those of the
 * model: the log-softmax of the logits as given, before penalties,
 * temperature and truncation (vLLM's raw logprobs), computed in double
 * and stored as float; the top ones by falling log-probability, the
 * lower id first on ties.
 *
 *	struct medha_sampler *s;
 *	struct medha_sampler_params p = { .temp = 0.8f, .top_k = 40,
 *	    .top_p = 0.95f, .seed = 42 };
 *	if (medha_sampler_init(&s, &p, vocab) != 0)
 *		...;
 *	tok = medha_sample(s, logits);
 *	medha_sampler_free(s);
 */
#ifndef MEDHA_SAMPLE_H
#define MEDHA_SAMPLE_H

#include "medha.h"
#include "req.h" /* struct medha_sampler_params */

#include <stdint.h>


struct medha_sampler; /* opaque: parameters, generator, scratch (none
                       * when greedy: a greedy sequence costs bytes) */

/*
 * A sampler for rows of n_vocab logits. On success *s is the caller's,
 * for medha_sampler_free(). Returns 0, MEDHA_EINVAL (n_vocab < 1, a NaN
 * temperature or top_p, a ban id outside the vocabulary) or
 * MEDHA_ENOMEM.
 */
int medha_sampler_init(struct medha_sampler **s,
    const struct medha_sampler_params *p, int n_vocab);
void medha_sampler_free(struct medha_sampler *s);

/*
 * The next token for logits (n_vocab floats); advances the generator and
 * counts the token as output for the penalties.
 */
int medha_sample(struct medha_sampler *s, const float *logits);

/*
 * After medha_sample(), for the token it drew: its log-probability in
 * *lp and, in *top (valid until the next draw), the log-probabilities
 * of the top_logprobs likeliest tokens; returns their count, or -1 when
 * the parameters ask for none (logprobs 0).
 */
int medha_sample_logprobs(const struct medha_sampler *s, float *lp,
    const struct medha_logprob **top);

/*
 * Input tokens the repetition penalty counts (the prompt's; the output's
 * are counted as drawn). Returns 0, or MEDHA_EINVAL for an id outside
 * the vocabulary (nothing counted). Without penalties, nothing to do.
 */
int medha_sampler_prompt(struct medha_sampler *s, const int32_t *ids,
    int64_t n);

/*
 * The candidates medha_sample() draws from for these logits, without
 * drawing: *ids and *probs (valid until the next call on s) hold the
 * returned count of token ids by falling probability and their
 * probabilities after temperature (summing to 1). Greedy gives one.
 */
int medha_sample_candidates(struct medha_sampler *s, const float *logits,
    const int **ids, const float **probs);

/* The index of the largest of n logits, the lowest on ties. */
int medha_sample_greedy(const float *logits, int n);

/* 1 if s chooses greedily (temperature <= 0) with no penalty, no ban
   in force (min_tokens) and no logprobs asked: its token is the argmax of the row and it draws
   nothing from its generator and counts nothing (so a backend may take
   the argmax where the logits are, on a GPU); otherwise the backend
   hands the row to medha_sample(), which does the rest. */
int medha_sampler_is_greedy(const struct medha_sampler *s);

/* A uniform float in [0, 1) from the sampler's generator (for tests). */
float medha_sampler_uniform(struct medha_sampler *s);

#endif
