/*
 * medha-worker: runs a model with one backend of the registry
 * (engine/backend.h). In its one-shot mode it tokenizes a prompt the way
 * llama.cpp does for the GGUF (or through the GGUF's chat template),
 * prefills it in chunks, and generates with greedy or temperature /
 * top-k / top-p sampling, printing the text (or the token ids) as it
 * goes (engine/runner.c). With -s it serves a replica's scheduler
 * (serve/worker.c). Flags and wiring only.
 */
#include "../common.h"
#include "engine/backend.h"
#include "cpu/kvcache.h"
#include "layout.h"
#include "serve/worker.h"
#include "engine/runner.h"
#include "model/sample.h"
#include "tok/tokenizer.h"

#include <errno.h>
#include <signal.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char synopsis[] =
    "usage: medha-worker -s ADDR -m MODEL [-v] [--backend cpu|sim] "
    "[--gpu NAME]\n"
    "           [--kv f16|f32] [--kv-blocks N] [--max-seqs N] "
    "[--speed X] [-t THREADS]\n"
    "           [--tp N] [--spp N] [--kvp N] [--rank R] "
    "[--peer ADDR]\n"
    "           [--lookahead | --no-lookahead]\n"
    "       medha-worker -m MODEL (-p PROMPT | -f FILE) [-hv] [-c N]\n"
    "           [-n N] [-t THREADS] [--chat] [--ignore-eos] [--kv "
    "f16|f32]\n"
    "           [--llama-compat] [--logits FILE] [--seed S] [--temp "
    "T]\n"
    "           [--system TEXT] [--tokenize] [--tokens] [--top-k K] "
    "[--top-p P]\n";

/* -h: the synopsis, then every option with a line on it (medha-worker(1)) */
static const struct medha_help help_lines[] = {
    {NULL, "Daemon mode (-s ADDR):"},
    {"-s, --sched ADDR", "serve the scheduler (medha-sched -l) at ADDR"},
    {"-m, --model MODEL",
        "a GGUF file, or for sim a built-in name (llama3-8b)"},
    {"--backend cpu|sim", "the backend (cpu)"},
    {"--gpu NAME", "the device a sim worker models: a100 (default), h100"},
    {"--kv-blocks N", "16-token KV blocks (cpu: ctx x seqs; sim: GPU memory)"},
    {"--max-seqs N", "sequences held at once (cpu 64, sim 1024)"},
    {"--speed X", "sim backend: divide every batch's time by X (1)"},
    {"--tp N", "tensor-parallel degree of the replica (1, at most 64)"},
    {"--spp N", "sequence-pipeline degree (1, at most 64)"},
    {"--kvp N", "KV-cache-parallel degree (1, at most 64)"},
    {"--rank R", "this worker's place in the tp x spp x kvp layout (0)"},
    {"--peer ADDR", "where the other workers reach it (default: beside -s)"},
    {"--lookahead", "run the next decode step during the round trip (on)"},
    {"--no-lookahead", "wait for each batch instead"},
    LINK_HELP,
    {NULL, "One-shot mode (-p PROMPT or -f FILE):"},
    {"-m, --model MODEL", "the model, a GGUF file"},
    {"-p, --prompt PROMPT", "the prompt text"},
    {"-f, --file FILE", "read the prompt from FILE (- for standard input)"},
    {"-c, --chunk N", "prefill N prompt tokens at a time (512); 0: one piece"},
    {"-n, --n-predict N", "tokens to generate (64); 0 runs the prompt only"},
    {"--chat", "apply the GGUF's own chat template to the prompt"},
    {"--ignore-eos", "do not stop at end-of-generation tokens"},
    {"--llama-compat", "match llama.cpp's CPU logits bit for bit (f32 KV)"},
    {"--logits FILE", "write the last prompt position's logits (float32 LE)"},
    {"--seed S", "seed of the sampler's generator (1)"},
    {"--system TEXT", "--chat: a system message first (else the template's)"},
    {"--temp T", "sampling temperature; 0 (the default) is greedy"},
    {"--tokenize", "print the prompt's token ids and exit"},
    {"--tokens", "print the generated token ids instead of text"},
    {"--top-k K", "sample among the K most likely tokens (0: all)"},
    {"--top-p P", "sample within the smallest set reaching P (1: all)"},
    {NULL, "Both modes:"},
    {"-h, --help", "print this help and exit"},
    {"-t, --threads THREADS",
        "threads in all (default: online CPUs, at most usable)"},
    {"-v, --verbose", "more on stderr (-p: tokens, tok/s; -s -vv: each batch)"},
    {"--kv f16|f32", "KV cache element type (f32)"},
};

enum {
	OPT_BACKEND = 300,
	OPT_GPU,
	OPT_KVBLOCKS,
	OPT_MAXSEQS,
	OPT_SPEED,
	OPT_TP,
	OPT_SPP,
	OPT_KVP,
	OPT_RANK,
	OPT_PEER,
	OPT_LOOKAHEAD,
	OPT_NO_LOOKAHEAD,
	OPT_CHAT = 256,
	OPT_IGNORE_EOS,
	OPT_KV,
	OPT_LLAMA_COMPAT,
	OPT_LOGITS,
	OPT_SEED,
	OPT_TEMP,
	OPT_TOKENIZE,
	OPT_TOKENS,
	OPT_TOPK,
	OPT_TOPP,
	OPT_SYSTEM,
};

static const struct option longopts[] = {
    {"backend", required_argument, NULL, OPT_BACKEND},
    {"chat", no_argument, NULL, OPT_CHAT},
    {"system", required_argument, NULL, OPT_SYSTEM},
    {"chunk", required_argument, NULL, 'c'},
    {"file", required_argument, NULL, 'f'},
    {"gpu", required_argument, NULL, OPT_GPU},
    {"help", no_argument, NULL, 'h'},
    {"ignore-eos", no_argument, NULL, OPT_IGNORE_EOS},
    {"kv", required_argument, NULL, OPT_KV},
    {"kv-blocks", required_argument, NULL, OPT_KVBLOCKS},
    {"kvp", required_argument, NULL, OPT_KVP},
    {"llama-compat", no_argument, NULL, OPT_LLAMA_COMPAT},
    {"logits", required_argument, NULL, OPT_LOGITS},
    {"max-seqs", required_argument, NULL, OPT_MAXSEQS},
    {"model", required_argument, NULL, 'm'},
    {"n-predict", required_argument, NULL, 'n'},
    {"lookahead", no_argument, NULL, OPT_LOOKAHEAD},
    {"no-lookahead", no_argument, NULL, OPT_NO_LOOKAHEAD},
    {"peer", required_argument, NULL, OPT_PEER},
    {"prompt", required_argument, NULL, 'p'},
    {"rank", required_argument, NULL, OPT_RANK},
    {"sched", required_argument, NULL, 's'},
    {"seed", required_argument, NULL, OPT_SEED},
    {"speed", required_argument, NULL, OPT_SPEED},
    {"spp", required_argument, NULL, OPT_SPP},
    {"temp", required_argument, NULL, OPT_TEMP},
    {"threads", required_argument, NULL, 't'},
    {"tokenize", no_argument, NULL, OPT_TOKENIZE},
    {"tokens", no_argument, NULL, OPT_TOKENS},
    {"top-k", required_argument, NULL, OPT_TOPK},
    {"top-p", required_argument, NULL, OPT_TOPP},
    {"tp", required_argument, NULL, OPT_TP},
    {"verbose", no_argument, NULL, 'v'},
    LINK_LONGOPTS,
    {NULL, 0, NULL, 0},
};

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

/* Daemon mode: open the backend (p), then serve the scheduler. */
static int
daemon_main(struct medha_worker_config c, const char *backend,
    struct medha_backend_params p)
{
	struct medha_backend *be = NULL;
	struct medha_layout lay;
	char why[512];
	int rc;

	if (medha_layout_init(&lay, c.tp, c.spp, c.kvp, c.rank) != 0)
		die(2, "--rank %d: not below tp %d x spp %d x kvp %d", c.rank,
		    c.tp, c.spp, c.kvp);
	p.model = c.model;
	p.gpu = c.gpu;
	p.tp = c.tp;
	p.tp_rank = lay.rt;
	p.spp = c.spp;
	p.stage = lay.rs;
	p.kvp = c.kvp;
	if ((rc = medha_backend_open(&be, backend, &p, why, sizeof(why))) != 0)
		die(1, "%s: %s", c.model, why);
	/* a backend that computes on this machine's CPUs is the
	   predictor's "cpu" device */
	if ((be->info.caps & MEDHA_BACKEND_COMPUTES) &&
	    !(be->info.caps & MEDHA_BACKEND_GPU))
		c.gpu = "cpu";
	catch_stop();
	if ((rc = medha_worker_run(be, &c, &stop_requested, why,
	         sizeof(why))) != 0)
		medha_log(MEDHA_LOG_ERROR, "%s", why);
	medha_backend_close(be);
	return rc == 0 ? 0 : c.addr[0] == '\0' ? 2 : 1;
}

/* The command line: what each flag set (its default in parse_args). */
struct args {
	const char *model;       /* -m: a GGUF file, or for sim a name */
	const char *addr;        /* -s: the scheduler (NULL: one-shot) */
	const char *prompt;      /* -p */
	const char *pfile;       /* -f: the prompt's file ("-": stdin) */
	const char *logits_path; /* --logits */
	const char *sys_msg;     /* --system */
	const char *backend;     /* --backend */
	const char *gpu;         /* --gpu */
	int64_t kv_blocks;       /* --kv-blocks (0: the backend's choice) */
	int64_t max_seqs;        /* --max-seqs (0: the backend's choice) */
	double speed;            /* --speed */
	int64_t n_gen;           /* -n */
	int64_t chunk;           /* -c */
	int chat, ignore_eos, tokenize, as_ids, verbose;
	struct medha_runner_opts ro;    /* -t, --kv, --llama-compat */
	struct medha_sampler_params sp; /* --seed, --temp, --top-k, --top-p */
	struct medha_worker_config wo;  /* --tp --spp --kvp --rank --peer ... */
};

/* The getopt_long loop: fills *a; -h and a bad flag exit here. */
static void
parse_args(struct args *a, int argc, char *argv[])
{
	const struct medha_backend_kind *bk;
	int ch;

	*a = (struct args){
	    .backend = "cpu",
	    .gpu = "a100",
	    .kv_blocks = 0,
	    .max_seqs = 0,
	    .speed = 1,
	    .n_gen = 64,
	    .chunk = 512,
	    .ro = {.n_threads = 0}, /* -t: all CPUs */
	    .sp = {.temp = 0, .top_k = 0, .top_p = 1, .seed = 1},
	    .wo = {.tp = 1, .spp = 1, .kvp = 1, .lookahead = 1},
	};
	while ((ch = getopt_long(argc, argv, "c:f:hm:n:p:s:t:v", longopts,
	            NULL)) != -1) {
		switch (ch) {
		case 'c':
			a->chunk = flag_i64("--chunk", optarg, 0, 1 << 24);
			break;
		case 'f': a->pfile = optarg; break;
		case 'h': HELP_EXIT(synopsis, help_lines);
		case 'm': a->model = optarg; break;
		case 'n': a->n_gen = flag_i64("-n", optarg, 0, 1 << 24); break;
		case 'p': a->prompt = optarg; break;
		case 's': a->addr = optarg; break;
		case OPT_BACKEND:
			if ((bk = medha_backend_find(optarg)) == NULL ||
			    bk->open == NULL)
				die(2, "--backend: %s: %s", optarg,
				    bk == NULL ? "expected cpu or sim"
				               : "not built into this program");
			a->backend = optarg;
			break;
		case OPT_GPU: a->gpu = optarg; break;
		case OPT_KVBLOCKS:
			a->kv_blocks =
			    flag_i64("--kv-blocks", optarg, 1, INT32_MAX);
			break;
		case OPT_MAXSEQS:
			a->max_seqs = flag_i64("--max-seqs", optarg, 1, 65536);
			break;
		case OPT_SPEED:
			a->speed = flag_f64("--speed", optarg, 1e-3, 1e6, 0);
			break;
		case OPT_TP: a->wo.tp = flag_i64("--tp", optarg, 1, 64); break;
		case OPT_SPP:
			a->wo.spp = flag_i64("--spp", optarg, 1, 64);
			break;
		case OPT_KVP:
			a->wo.kvp = flag_i64("--kvp", optarg, 1, 64);
			break;
		case OPT_RANK:
			a->wo.rank = flag_i64("--rank", optarg, 0, 4095);
			break;
		case OPT_PEER: a->wo.peer = optarg; break;
		case OPT_LOOKAHEAD: a->wo.lookahead = 1; break;
		case OPT_NO_LOOKAHEAD: a->wo.lookahead = 0; break;
		case 't':
			a->ro.n_threads = flag_i64("-t", optarg, 1, 256);
			break;
		case 'v': a->verbose++; break;
		case OPT_CHAT: a->chat = 1; break;
		case OPT_SYSTEM: a->sys_msg = optarg; break;
		case OPT_IGNORE_EOS: a->ignore_eos = 1; break;
		case OPT_LLAMA_COMPAT: a->ro.llama_compat = 1; break;
		case OPT_KV:
			if (strcmp(optarg, "f16") == 0)
				a->ro.kv_f16 = 1;
			else if (strcmp(optarg, "f32") == 0)
				a->ro.kv_f16 = 0;
			else
				die(2, "--kv: %s: expected f16 or f32", optarg);
			break;
		case OPT_LOGITS: a->logits_path = optarg; break;
		case OPT_SEED:
			a->sp.seed = flag_i64("--seed", optarg, 0, INT64_MAX);
			break;
		case OPT_TEMP:
			a->sp.temp = flag_f64("--temp", optarg, 0, 100, 0);
			break;
		case OPT_TOKENIZE: a->tokenize = 1; break;
		case OPT_TOKENS: a->as_ids = 1; break;
		case OPT_TOPK:
			a->sp.top_k = flag_i64("--top-k", optarg, 0, 1 << 24);
			break;
		case OPT_TOPP:
			a->sp.top_p = flag_f64("--top-p", optarg, 0, 1, 0);
			break;
		case OPT_SECRET:
		case OPT_INSECURE: link_flag(ch, optarg); break;
		default: usage_exit(synopsis);
		}
	}
}

/* Daemon mode (-s ADDR): its flags checked, then daemon_main. */
static int
daemon_mode(struct args *a, int argc)
{
	if (optind != argc || a->model == NULL || a->prompt != NULL ||
	    a->pfile != NULL)
		usage_fail(synopsis, "-s ADDR takes -m MODEL and no prompt");
	medha_log_level = MEDHA_LOG_WARN + a->verbose;
	if (a->ro.n_threads == 0)
		a->ro.n_threads = online_cpus(256);
	a->wo.addr = a->addr;
	a->wo.model = a->model;
	a->wo.gpu = a->gpu;
	return daemon_main(a->wo, a->backend,
	    (struct medha_backend_params){.n_threads = a->ro.n_threads,
	        .max_seqs = (int)a->max_seqs,
	        .kv_blocks = a->kv_blocks,
	        .kv_type = a->ro.kv_f16 ? MEDHA_KV_F16 : MEDHA_KV_F32,
	        .ref = a->ro.ref,
	        .speed = a->speed});
}

/* One-shot mode's usage errors: -m MODEL and one of -p and -f. */
static void
check_oneshot(const struct args *a, int argc)
{
	if (optind != argc || a->model == NULL ||
	    (a->prompt == NULL) == (a->pfile == NULL)) {
		if (a->model == NULL)
			usage_fail(synopsis, "-m MODEL is required");
		if (optind == argc)
			usage_fail(synopsis, "give the prompt with -p or -f");
		usage_exit(synopsis);
	}
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
	if (medha_sampler_init(&smp, &a->sp, vocab) != 0)
		die(1, "sampler: bad parameters");

	t0 = medha_now();
	if ((rc = medha_runner_prefill(r, ids, (int64_t)n_ids, a->chunk, logits,
	         why, sizeof(why))) != 0)
		die(1, "prompt: %s", why);
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
		next = medha_sample(smp, logits);
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
	if (a->as_ids || a->n_gen > 0)
		printf("\n");
	fflush(stdout);
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
static int
oneshot_main(struct args *a)
{
	struct medha_runner *r;
	const struct medha_tok *tok;
	int32_t *ids;
	size_t n_ids, plen, chat_len = 0;
	char *text, *chat_text = NULL, why[512];
	int rc, status = 0;

	medha_log_level = MEDHA_LOG_WARN + a->verbose;
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

int
main(int argc, char *argv[])
{
	struct args a;

	medha_progname = "medha-worker";
	parse_args(&a, argc, argv);
	link_auth();
	if (a.addr != NULL)
		return daemon_mode(&a, argc);
	check_oneshot(&a, argc);
	return oneshot_main(&a);
}
