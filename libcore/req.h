/*
 * req.h: the one vocabulary of requests and results that every part of
 * medha shares (doc/DESIGN.md section 4). A request is what a client
 * asks for: a prompt (text, token ids, or only a length for simulation),
 * how many tokens to generate, how to sample them, when to stop, and its
 * latency targets. A record is what happened to it: exactly one per
 * request, whatever its fate.
 *
 * Two codecs carry these structs: JSON Lines for traces and records
 * (io/trace.h, man/medha-trace.5) and msgpack on the wire (net/proto.h,
 * man/medha-proto.7). Neither format travels further than its codec.
 *
 *	struct medha_reqspec rs = {0};
 *	strcpy(rs.id, "q1");
 *	rs.prompt = strdup("Hello");
 *	rs.max_tokens = 16;
 *	rs.sampling = medha_sampling_greedy;
 *	...
 *	medha_reqspec_clear(&rs);	(frees prompt, prompt_ids, stop)
 */
#ifndef MEDHA_REQ_H
#define MEDHA_REQ_H

#include "medha.h"

#include <stdint.h>

#define MEDHA_ID_MAX 64   /* longest id, NUL included */
#define MEDHA_STOP_MAX 4  /* stop strings per request */
#define MEDHA_STOP_LEN 64 /* longest stop string, bytes, NUL excluded */
#define MEDHA_STOP_IDS_MAX 16 /* stop token ids per request */
/* ids a sampler keeps from being drawn before min_tokens: the stop
   token ids and up to 16 end-of-generation tokens */
#define MEDHA_BAN_MAX (MEDHA_STOP_IDS_MAX + 16)

/*
 * Limits of what a trace, a result record or a flag may say, checked once
 * where the number is read (io/trace.c, medha-trace gen's flags;
 * man/medha-trace.5). A count of tokens is at most MEDHA_TOKENS_MAX:
 * a hundred times the longest context of any model (10M tokens), yet
 * small enough that a sum of two counts fits an int32_t and a product of
 * two (a prompt's causal attention) an int64_t, so that no scheduler
 * arithmetic on counts that passed can overflow. A time (arrival, SLO)
 * is at most MEDHA_TIME_MAX seconds, about 31.7 years: a double there
 * still resolves 0.12 microseconds, far below one iteration.
 */
#define MEDHA_TOKENS_MAX ((int64_t)1000000000) /* 1e9 tokens */
#define MEDHA_TIME_MAX 1e9                     /* s */

/* How the next token is drawn (model/sample.h implements it). */
struct medha_sampler_params {
	float temp;    /* temperature; <= 0 is greedy */
	int top_k;     /* keep the k largest logits; <= 0 keeps all */
	float top_p;   /* keep the top-p nucleus; >= 1 keeps all, 0 the
	                  most likely token only */
	uint64_t seed; /* the generator's seed */
	/* penalties (model/sample.h), each 0 for none (zeroed params are
	   the defaults): OpenAI's presence and frequency over the output
	   so far, in [-2, 2]; vLLM's repetition over the prompt and the
	   output, > 0 (1: none) */
	float presence_penalty, frequency_penalty, repetition_penalty;
	float min_p; /* keep tokens at least min_p times as likely as the
	                likeliest, in [0, 1]; 0 keeps all */
	/* log-probabilities asked for (model/sample.h): logprobs 1, the
	   drawn token's, and top_logprobs (0 to MEDHA_TOP_LOGPROBS_MAX)
	   of the likeliest's; 0, 0: none */
	int logprobs, top_logprobs;
	/* values the generator has drawn already: a preempted request
	   resumed has its sampler go on where it was (one value a token
	   when temp > 0), so that its tokens are those of a run without
	   preemption; 0 for a new request. Only on the wire of BATCH. */
	uint64_t skip;
	/* vLLM's min_tokens: until the sampler has drawn min_tokens
	   tokens, the ban[] ids (the end-of-generation tokens and the
	   request's stop_token_ids, filled in where the request is served)
	   cannot be drawn: their logits are -inf. A request's min_tokens
	   is in [0, max_tokens] (0: none); a batch item's is what is left
	   of it (model/sample.h) */
	int64_t min_tokens;
	int n_ban;
	int32_t ban[MEDHA_BAN_MAX];
};

#define MEDHA_TOP_LOGPROBS_MAX 20

/* The highest temperature a client may ask for, OpenAI's, one rule for
 * the HTTP API and medha-worker's --temp (the wire and traces take up
 * to 100, so that older peers' requests still decode). */
#define MEDHA_TEMP_MAX 2

/* A token and its log-probability. */
struct medha_logprob {
	int32_t id;
	float logprob;
};

/* The bytes that name a drawn token and its top ones, together. */
#define MEDHA_LP_BYTES_MAX 512

/*
 * A drawn token's log-probability and the top ones' (model/sample.h),
 * and the bytes each token decodes to where the replica named them
 * (medha-proto(7), "logprobs"): the client's names come from these
 * bytes, so that nothing but the replica detokenizes.
 */
struct medha_token_lp {
	float logprob;
	int ntop; /* 0 to MEDHA_TOP_LOGPROBS_MAX */
	struct medha_logprob top[MEDHA_TOP_LOGPROBS_MAX];
	/* the names: the drawn token's bytes, then top[0]'s, top[1]'s...,
	   nbytes[k] each, joined in bytes; only the first nnamed tokens
	   have theirs (0: none, as a worker's RESULT or an older peer's;
	   1: the drawn token's; 1 + k: top[0..k) too) */
	int nnamed;
	uint16_t nbytes[1 + MEDHA_TOP_LOGPROBS_MAX];
	char bytes[MEDHA_LP_BYTES_MAX];
};

/*
 * The next token's name in lp (the drawn token's first, then top[0]'s
 * ...): n bytes at s, copied. 0, or MEDHA_ENOSPACE where they do not fit
 * (with those named before, MEDHA_LP_BYTES_MAX) or every token of lp is
 * named already, lp unchanged.
 */
int medha_token_lp_name(struct medha_token_lp *lp, const char *s, size_t n);
/*
 * Token k's bytes (0 the drawn token, 1 + i top[i]), *n of them, inside
 * lp; NULL where it has none.
 */
const char *medha_token_lp_bytes(const struct medha_token_lp *lp, int k,
    size_t *n);

/* Greedy decoding: temperature 0, seed 1. */
extern const struct medha_sampler_params medha_sampling_greedy;

/*
 * A named run of tokens that requests share (a system prompt, a
 * document, a conversation's earlier turns): the compact form of a
 * trace's shared prompt tokens (medha-trace(5), "prefix"). Two requests
 * whose prompts start with the same names hold the same tokens there.
 */
#define MEDHA_SEG_NAME 32   /* longest segment name, NUL included */
#define MEDHA_SEG_MAX 1024  /* segments of one prompt */
struct medha_seg {
	char name[MEDHA_SEG_NAME]; /* non-empty, NUL-terminated */
	int64_t tokens;            /* in [1, MEDHA_TOKENS_MAX] */
};

/* One request as a trace or a client gives it. */
struct medha_reqspec {
	char id[MEDHA_ID_MAX]; /* NUL-terminated; numbers are kept as text */
	double arrival;        /* s since the trace's origin, in [0,
	                          MEDHA_TIME_MAX] */
	int64_t prompt_tokens; /* in [1, MEDHA_TOKENS_MAX]; with prompt_ids,
	                          their count; 0 if only a text prompt is
	                          given (not yet tokenized) */
	int64_t max_tokens;    /* output tokens to generate at most, in [0,
	                          MEDHA_TOKENS_MAX] */
	int64_t output_tokens; /* a trace's: the length the model will
	                          produce, in [1, MEDHA_TOKENS_MAX]; 0 if not
	                          given (then max_tokens). The simulator
	                          stops the request there (as at an
	                          end-of-generation token) when it is below
	                          max_tokens; live, requests stop as the
	                          model does, and this is not sent */
	double ttft_slo;       /* s, <= MEDHA_TIME_MAX; 0 if not given */
	double tpot_slo;       /* s, <= MEDHA_TIME_MAX; 0 if not given */
	char *prompt;          /* owned text prompt, or NULL */
	int32_t *prompt_ids;   /* owned (prompt_tokens) token ids, or NULL */
	struct medha_seg *prefix; /* owned (n_prefix) segments the prompt
	                             starts with, their tokens summing to at
	                             most prompt_tokens; the rest is its own;
	                             or NULL (a trace's, for simulation) */
	int n_prefix;
	struct medha_sampler_params sampling;
	int ignore_eos;             /* generate past end-of-generation */
	int no_stream;              /* the client wants no token events, the
	                               record alone (it carries the whole
	                               output); a client's choice on the wire
	                               ("stream": false); a trace line's
	                               is ignored */
	uint64_t cache_salt;        /* its tenant in the prefix cache
	                               (sched/prefix.h): only requests of
	                               the same salt share cached prompt
	                               blocks, as vLLM's cache_salt; 0: none
	                               (one pool). On the wire alone
	                               (medha-proto(7)); medha-router's
	                               HTTP door derives it from the API
	                               key and the body's "cache_salt" */
	int n_stop;                 /* stop strings in stop[] */
	char *stop[MEDHA_STOP_MAX]; /* owned stop strings: the output ends
	                               before the first one it contains */
	int n_stop_ids;             /* stop token ids in stop_ids[] */
	int32_t stop_ids[MEDHA_STOP_IDS_MAX]; /* ids that end the output as
	                               the end-of-generation token does
	                               (vLLM's stop_token_ids), each in
	                               [0, INT32_MAX] */
};

/* Frees rs's prompt, prompt_ids, prefix and stop strings and clears
 * them. */
void medha_reqspec_clear(struct medha_reqspec *rs);
/*
 * A deep copy of src into *dst (whose old contents are not freed).
 * Returns 0 or MEDHA_ENOMEM (then *dst owns nothing).
 */
int
medha_reqspec_copy(struct medha_reqspec *dst, const struct medha_reqspec *src);

enum medha_status {
	MEDHA_STATUS_OK = 0,    /* completed */
	MEDHA_STATUS_REJECTED,  /* could never be served (too long, bad) */
	MEDHA_STATUS_FAILED,    /* lost: a worker died and it could not end */
	MEDHA_STATUS_CANCELLED, /* its client went away or cancelled it */
	MEDHA_STATUS_COUNT
};
/* "ok", "rejected", "failed", "cancelled"; "unknown" out of range. */
const char *medha_status_name(int status);
/* Returns MEDHA_STATUS_* or -1 if the name is unknown. */
int medha_status_parse(const char *name);

/* Why a completed request stopped. */
enum medha_finish {
	MEDHA_FINISH_NONE = 0, /* not completed (or not known) */
	MEDHA_FINISH_LENGTH,   /* max_tokens reached */
	MEDHA_FINISH_STOP,     /* end-of-generation token or a stop string */
	MEDHA_FINISH_COUNT
};
/* "", "length", "stop" (the OpenAI API's finish_reason). */
const char *medha_finish_name(int finish);
/* Returns MEDHA_FINISH_* or -1. */
int medha_finish_parse(const char *name);

/*
 * Time between tokens (TBT): the gap from each output token to the one
 * before it, kept per request as a histogram over fixed log-spaced
 * buckets, so that a record stays small and the histograms of many
 * requests add up to the histogram of all their gaps, from which any
 * percentile is read within one bucket (man/medha-trace.5 gives the
 * buckets to whoever decodes a record). Bucket 0 holds gaps under
 * MEDHA_TBT_MIN; bucket b in [1, MEDHA_TBT_BUCKETS - 2] holds
 * [MEDHA_TBT_MIN * r^(b-1), MEDHA_TBT_MIN * r^b) with r = MEDHA_TBT_RATIO;
 * the last bucket everything from MEDHA_TBT_MIN * r^(MEDHA_TBT_BUCKETS - 2)
 * (about 10031 s) up. Only buckets that hold a gap are stored.
 *
 *	struct medha_tbt h = {0};
 *	if ((rc = medha_tbt_add(&h, now - last_token)) != 0) ...
 *	...				(a gap per token after the first)
 *	medha_tbt_move(&rec.tbt, &h);	(the record owns it now)
 *	medha_tbt_quantile(&rec.tbt, 0.99);
 *	medha_record_clear(&rec);	(frees it)
 */
#define MEDHA_TBT_MIN 1e-6    /* s: bucket 1's lower edge */
#define MEDHA_TBT_RATIO 1.05  /* a bucket's upper edge over its lower */
#define MEDHA_TBT_BUCKETS 474 /* 0: under 1 us; 473: from ~10031 s up */

/* One bucket that holds gaps. */
struct medha_tbt_bin {
	int32_t bucket; /* in [0, MEDHA_TBT_BUCKETS) */
	int64_t count;  /* gaps in it, >= 1 */
};

/* A TBT histogram; all zero is empty. */
struct medha_tbt {
	struct medha_tbt_bin *bin; /* owned (cap) bins, the first n used,
	                              buckets ascending; NULL when cap is 0 */
	int n;                     /* bins used, <= MEDHA_TBT_BUCKETS */
	int cap;                   /* bins allocated */
	int last;                  /* the bin added to last, tried first
	                              (any index: checked) */
};

/* The bucket of a gap >= 0 (s); -1 for a negative gap or NaN. */
int medha_tbt_bucket(double gap);
/*
 * What a bucket stands for (s): 0 for bucket 0, the geometric middle
 * MEDHA_TBT_MIN * r^(b - 1/2) of bucket b, the lower edge of the last; so
 * a gap and its bucket's value differ by a factor of at most sqrt(r)
 * (between 1 us and 10031 s).
 */
double medha_tbt_value(int bucket);
/* Count one gap of gap seconds: 0, MEDHA_EINVAL for a negative gap or
 * NaN, MEDHA_ENOMEM (h unchanged). */
int medha_tbt_add(struct medha_tbt *h, double gap);
/* Count n >= 1 gaps in bucket (medha_tbt_bucket's): 0, MEDHA_EINVAL for a
 * bucket out of range or n < 1, MEDHA_ENOMEM (h unchanged). */
int medha_tbt_add_n(struct medha_tbt *h, int bucket, int64_t n);
/* Add src's counts to dst's (src only read): 0 or MEDHA_ENOMEM (dst is
 * then partly merged, still valid). */
int medha_tbt_merge(struct medha_tbt *dst, const struct medha_tbt *src);
/* Gaps counted in all. */
int64_t medha_tbt_count(const struct medha_tbt *h);
/*
 * The q-quantile (q in [0, 1]) of the gaps, the nearest-rank way: the
 * value of the bucket of the ceil(q * count)-th smallest gap (the
 * smallest for q = 0). NaN for an empty histogram.
 */
double medha_tbt_quantile(const struct medha_tbt *h, double q);
/*
 * 0 if h is a histogram the codecs may carry: at most MEDHA_TBT_BUCKETS
 * bins, buckets in range and strictly ascending, each count in [1,
 * MEDHA_TOKENS_MAX], and at most max_gaps gaps in all (a record's
 * output_tokens - 1); else MEDHA_EINVAL with a reason ("bin 3: bucket 7
 * after bucket 9").
 */
int medha_tbt_check(const struct medha_tbt *h, int64_t max_gaps, char *why,
    size_t whylen);
/* Moves src's bins into *dst (whose old bins are freed first); src is
 * left empty. */
void medha_tbt_move(struct medha_tbt *dst, struct medha_tbt *src);
/* Frees h's bins and empties it. */
void medha_tbt_free(struct medha_tbt *h);

/* One result record: what happened to one request. */
struct medha_record {
	char id[MEDHA_ID_MAX];
	double arrival;     /* s */
	double first_token; /* s, absolute; = finish when output_tokens = 0 */
	double finish;      /* s, absolute */
	int64_t prompt_tokens; /* in [0, MEDHA_TOKENS_MAX] */
	int64_t output_tokens; /* in [0, MEDHA_TOKENS_MAX] */
	double ttft;           /* first_token - arrival */
	double tpot_mean; /* (finish - first_token) / (output_tokens - 1); 0
	                     if < 2 */
	double tpot_max;  /* longest gap between consecutive tokens; 0 if < 2 */
	struct medha_tbt tbt; /* owned: every such gap; empty if not kept */
	double prefill_alone; /* s: predicted time to prefill the prompt on an
	                         empty replica (the TTFT it would have had
	                         alone); 0 if not known */
	double queue_time;    /* s from arrival to its first batch (a live
	                         replica's); 0 if not known */
	double ttft_slo;      /* the TTFT SLO the request was held to (s) */
	double tpot_slo;      /* the TPOT SLO it was held to (s); 0 if none */
	int status;           /* MEDHA_STATUS_* */
	int finish_reason;    /* MEDHA_FINISH_* */
	char reason[128];     /* why it was rejected, failed or cancelled */
	int32_t *token_ids;   /* owned generated ids (n_token_ids), or NULL */
	struct medha_token_lp *logprobs; /* owned, one a token_ids, or NULL */
	int64_t n_token_ids;  /* the end-of-generation token not counted */
	char *text;           /* owned generated text, or NULL */
	uint64_t handle;      /* the scheduler's handle (not in JSON) */
	int64_t cached_tokens; /* prompt tokens whose KV came from the prefix
	                          cache (in JSON when > 0) */
	int64_t preemptions;   /* times it was preempted (in JSON when > 0) */
	int code;              /* why a refusal: the libcore error code
	                          (MEDHA_E*, < 0) a replica refused the
	                          request with after acknowledging it, as
	                          an ERROR's code; 0 when none was given
	                          (on the wire only, not in JSON) */
};

/* Frees rec's token_ids, text and tbt and clears them. */
void medha_record_clear(struct medha_record *rec);

#endif
