/*
 * medha-worker: runs a model with one backend of the registry
 * (engine/backend.h). In its one-shot mode it tokenizes a prompt the way
 * llama.cpp does for the GGUF (or through the GGUF's chat template),
 * prefills it in chunks, and generates with greedy or temperature /
 * top-k / top-p sampling, printing the text (or the token ids) as it
 * goes (engine/runner.c, oneshot.c). With -s it serves a replica's
 * scheduler (serve/worker/). Flags and wiring only.
 */
#include "medha-worker.h"
#include "layout.h"
#include "sched/pred.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char synopsis[] =
    "usage: medha-worker -s ADDR -m MODEL [-v] [--backend cpu|sim|cuda] "
    "[--gpu NAME]\n"
    "           [--kv f16|f32|bf16] [--kv-blocks N] [--max-seqs N] "
    "[--speed X]\n"
    "           [-t THREADS] [--tp N] [--spp N] [--kvp N] [--rank R] "
    "[--peer ADDR]\n"
    "           [--lookahead | --no-lookahead] [--mem-util F] "
    "[--device N]\n"
    "           [--coll nccl|nng] [--seed S] [--window-kv] [--ep] "
    "[--retry-forever]\n"
    "       medha-worker -m MODEL (-p PROMPT | -f FILE) [-hv] [-c N]\n"
    "           [-n N] [-t THREADS] [--backend cpu|cuda] [--chat] "
    "[--ignore-eos]\n"
    "           [--kv f16|f32|bf16] [--mem-util F] [--device N]\n"
    "           [--llama-compat] [--logits FILE] [--seed S] [--temp "
    "T]\n"
    "           [--system TEXT] [--tokenize] [--tokens] [--top-k K] "
    "[--top-p P]\n"
    "           [--min-p P] [--presence-penalty X] [--frequency-penalty X]\n"
    "           [--repetition-penalty X] [--step-logits FILE]\n"
    "           [--logprobs FILE [--top-logprobs N]]\n";

/* -h: the synopsis, then every option with a line on it (medha-worker(1)) */
static const struct medha_help help_lines[] = {
    {NULL, "Daemon mode (-s ADDR):"},
    {"-s, --sched ADDR", "serve the scheduler (medha-sched -l) at ADDR"},
    {"-m, --model MODEL",
        "a GGUF, or for sim and cuda a shape name (llama3-8b)"},
    {"--backend cpu|sim|cuda", "the backend (cpu); cuda: an NVIDIA GPU"},
    {"--gpu NAME",
        "predictor's device: a100, h100, h200 (cuda: its own)"},
    {"--kv-blocks N", "16-token KV blocks (cpu: ctx x seqs; sim: GPU memory)"},
    {"--max-seqs N", "sequences held at once (cpu 64, sim 1024)"},
    {"--speed X", "sim backend: divide every batch's time by X (1)"},
    {"--tp N", "tensor-parallel degree of the replica (1, at most 64)"},
    {"--spp N", "sequence-pipeline degree (1, at most 64)"},
    {"--kvp N", "KV-cache-parallel degree (1, at most 64)"},
    {"--rank R", "this worker's place in the tp x spp x kvp layout (0)"},
    {"--ep", "cpu, sim: TP ranks hold E / tp experts whole"},
    {"--peer ADDR", "where the other workers reach it (default: beside -s)"},
    {"--lookahead", "run the next decode step during the round trip (on)"},
    {"--no-lookahead", "wait for each batch instead"},
    {"--window-kv",
        "cpu: free what windows no longer see (no prefix cache)"},
    {"--retry-forever",
        "retry a HELLO refused for good (else: exit 1, 10 s)"},
    LINK_HELP,
    {"--seed S", "cuda, -m SHAPE: the random weights' seed (1)"},
    {NULL, "The cuda backend (--backend cuda), both modes:"},
    {"--mem-util F",
        "free GPU memory for weights, scratch and KV (0.9)"},
    {"--device N", "the CUDA device (0)"},
    {"--coll nccl|nng",
        "TP collectives: NCCL, or the workers' (shared GPU)"},
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
    {"--seed S", "seed of the sampler's generator (a new one each run)"},
    {"--system TEXT", "--chat: a system message first (else the template's)"},
    {"--temp T", "sampling temperature; 0 (the default) is greedy"},
    {"--tokenize", "print the prompt's token ids and exit"},
    {"--tokens", "print the generated token ids instead of text"},
    {"--top-k K", "sample among the K most likely tokens (0: all)"},
    {"--top-p P", "sample within the smallest set reaching P (1: all)"},
    {"--min-p P", "keep tokens >= P times the likeliest's probability (0)"},
    {"--presence-penalty X", "OpenAI's, on tokens output so far (0)"},
    {"--frequency-penalty X", "OpenAI's, times each was output (0)"},
    {"--repetition-penalty X", "vLLM's, on prompt and output tokens (1)"},
    {"--step-logits FILE", "write the logits each token was drawn from"},
    {"--logprobs FILE", "write each token's log-probability (JSON Lines)"},
    {"--top-logprobs N", "--logprobs: and the N likeliest tokens' (0..20)"},
    {NULL, "Both modes:"},
    {"-h, --help", "print this help and exit"},
    {"-t, --threads THREADS",
        "threads in all (default: online CPUs, at most usable)"},
    {"-v, --verbose", "more on stderr (-p: tokens, tok/s; -s: each batch)"},
    {"--kv f16|f32|bf16", "KV cache element type (cpu: f32; cuda: bf16)"},
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
	OPT_MEM_UTIL,
	OPT_DEVICE,
	OPT_COLL,
	OPT_WINDOW_KV,
	OPT_EP,
	OPT_RETRY_FOREVER,
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
	OPT_MINP,
	OPT_PRESENCE,
	OPT_FREQUENCY,
	OPT_REPETITION,
	OPT_STEP_LOGITS,
	OPT_LOGPROBS,
	OPT_TOP_LOGPROBS,
};

static const struct option longopts[] = {
    {"backend", required_argument, NULL, OPT_BACKEND},
    {"chat", no_argument, NULL, OPT_CHAT},
    {"coll", required_argument, NULL, OPT_COLL},
    {"device", required_argument, NULL, OPT_DEVICE},
    {"ep", no_argument, NULL, OPT_EP},
    {"mem-util", required_argument, NULL, OPT_MEM_UTIL},
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
    {"window-kv", no_argument, NULL, OPT_WINDOW_KV},
    {"retry-forever", no_argument, NULL, OPT_RETRY_FOREVER},
    {"min-p", required_argument, NULL, OPT_MINP},
    {"presence-penalty", required_argument, NULL, OPT_PRESENCE},
    {"frequency-penalty", required_argument, NULL, OPT_FREQUENCY},
    {"repetition-penalty", required_argument, NULL, OPT_REPETITION},
    {"step-logits", required_argument, NULL, OPT_STEP_LOGITS},
    {"logprobs", required_argument, NULL, OPT_LOGPROBS},
    {"top-logprobs", required_argument, NULL, OPT_TOP_LOGPROBS},
    {"tp", required_argument, NULL, OPT_TP},
    {"verbose", no_argument, NULL, 'v'},
    LINK_LONGOPTS,
    {NULL, 0, NULL, 0},
};

/*
 * The predictor's device (pred.h) for CUDA device `device`, by its name
 * (cuda_gpu_name); a GPU the predictor does not know is modelled as an
 * h100, with a warning: its scheduler should be given a profile.
 */
static const char *
gpu_model(int device)
{
	char name[256];
	const char *g = cuda_gpu_name(device, name, sizeof(name));

	if (g != NULL)
		return g;
	medha_log(MEDHA_LOG_WARN,
	    "CUDA device %d (%s) is none the predictor knows: modelled as "
	    "h100 (give --gpu, or medha-sched --predictor a medha-prof "
	    "profile)",
	    device, name[0] ? name : "unnamed");
	return "h100";
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
	p.gpu = c.gpu != NULL ? c.gpu : "a100";
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
	else if (c.gpu == NULL && (be->info.caps & MEDHA_BACKEND_GPU))
		c.gpu = gpu_model(p.device);
	else if (c.gpu == NULL)
		c.gpu = p.gpu;
	catch_stop();
	if ((rc = medha_worker_run(be, &c, &stop_requested, why,
	         sizeof(why))) != 0)
		medha_log(MEDHA_LOG_ERROR, "%s", why);
	medha_backend_close(be);
	return rc == 0 ? 0 : c.addr[0] == '\0' ? 2 : 1;
}

/* The getopt_long loop: fills *a; -h and a bad flag exit here. */
static void
parse_args(struct args *a, int argc, char *argv[])
{
	int ch;

	*a = (struct args){
	    .backend = "cpu",
	    .gpu = NULL,
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
			/* a kind not built here: after the other flags'
			   checks (check_backend) */
			if (medha_backend_find(optarg) == NULL)
				die(2, "--backend: %s: expected cpu, sim or cuda",
				    optarg);
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
		case OPT_RETRY_FOREVER: a->wo.retry_forever = 1; break;
		case OPT_WINDOW_KV: a->bp.window_kv = 1; break;
		case OPT_EP: a->bp.ep = 1; break;
		case 't':
			a->ro.n_threads = flag_i64("-t", optarg, 1, 256);
			break;
		case 'v': a->verbose++; break;
		case OPT_CHAT: a->chat = 1; break;
		case OPT_SYSTEM: a->sys_msg = optarg; break;
		case OPT_IGNORE_EOS: a->ignore_eos = 1; break;
		case OPT_LLAMA_COMPAT: a->ro.llama_compat = 1; break;
		case OPT_KV:
			if (strcmp(optarg, "f16") != 0 &&
			    strcmp(optarg, "f32") != 0 &&
			    strcmp(optarg, "bf16") != 0)
				die(2, "--kv: %s: expected f16, f32 or bf16",
				    optarg);
			a->kv = optarg;
			break;
		case OPT_MEM_UTIL:
			a->bp.mem_util = flag_f64("--mem-util", optarg, 0, 1, 1);
			a->cuda_flag = "--mem-util";
			break;
		case OPT_DEVICE:
			a->bp.device = (int)flag_i64("--device", optarg, 0, 255);
			a->cuda_flag = "--device";
			break;
		case OPT_COLL:
			if (strcmp(optarg, "nccl") == 0)
				a->bp.coll = MEDHA_COLL_NCCL;
			else if (strcmp(optarg, "nng") == 0)
				a->bp.coll = MEDHA_COLL_HOST;
			else
				die(2, "--coll: %s: expected nccl or nng",
				    optarg);
			a->cuda_flag = "--coll";
			break;
		case OPT_LOGITS: a->logits_path = optarg; break;
		case OPT_SEED:
			a->sp.seed = flag_i64("--seed", optarg, 0, INT64_MAX);
			a->seed_set = 1;
			break;
		case OPT_TEMP:
			a->sp.temp =
			    flag_f64("--temp", optarg, 0, MEDHA_TEMP_MAX, 0);
			break;
		case OPT_TOKENIZE: a->tokenize = 1; break;
		case OPT_TOKENS: a->as_ids = 1; break;
		case OPT_TOPK:
			a->sp.top_k = flag_i64("--top-k", optarg, 0, 1 << 24);
			break;
		case OPT_TOPP:
			a->sp.top_p = flag_f64("--top-p", optarg, 0, 1, 0);
			break;
		case OPT_MINP:
			a->sp.min_p = flag_f64("--min-p", optarg, 0, 1, 0);
			break;
		case OPT_PRESENCE:
			a->sp.presence_penalty =
			    flag_f64("--presence-penalty", optarg, -2, 2, 0);
			break;
		case OPT_FREQUENCY:
			a->sp.frequency_penalty =
			    flag_f64("--frequency-penalty", optarg, -2, 2, 0);
			break;
		case OPT_REPETITION:
			a->sp.repetition_penalty =
			    flag_f64("--repetition-penalty", optarg, 0, 100, 1);
			break;
		case OPT_STEP_LOGITS: a->step_logits = optarg; break;
		case OPT_LOGPROBS:
			a->logprobs = optarg;
			a->sp.logprobs = 1;
			break;
		case OPT_TOP_LOGPROBS:
			a->sp.top_logprobs = (int)flag_i64("--top-logprobs",
			    optarg, 0, MEDHA_TOP_LOGPROBS_MAX);
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
	log_server(a->verbose);
	if (a->ro.n_threads == 0)
		a->ro.n_threads = online_cpus(256);
	a->wo.addr = a->addr;
	a->wo.model = a->model;
	a->wo.gpu = a->gpu;
	a->bp.n_threads = a->ro.n_threads;
	a->bp.max_seqs = (int)a->max_seqs;
	a->bp.kv_blocks = a->kv_blocks;
	a->bp.ref = a->ro.ref;
	a->bp.speed = a->speed;
	return daemon_main(a->wo, a->backend, a->bp);
}

/* Is model a shape name (pred.h's built-in names), not a file? */
static int
is_shape_name(const char *model)
{
	struct medha_pred_model m;

	return access(model, F_OK) != 0 && medha_model_resolve(model, &m) == 0;
}

/*
 * The flags that depend on the backend (exit 2): cuda's own given to
 * another, --ep to a backend without it or without -s, --kv's type against the backend's, a shape name in one-shot
 * mode (random weights have no tokenizer: a cuda worker on one serves
 * requests that send token ids, -s). Fills a->bp's KV type and seed and
 * the runner's backend.
 */
static void
check_backend(struct args *a)
{
	int cuda = strcmp(a->backend, "cuda") == 0;
	const char *kv = a->kv;

	if (!cuda && a->cuda_flag != NULL)
		die(2, "%s goes with --backend cuda", a->cuda_flag);
	if (kv == NULL)
		kv = cuda ? "bf16" : "f32";
	if (cuda && strcmp(kv, "f32") == 0)
		die(2, "--kv f32: the cuda backend keeps its KV cache in bf16 "
		       "or f16");
	if (!cuda && strcmp(kv, "bf16") == 0)
		die(2, "--kv bf16 goes with --backend cuda (cpu: f32 or f16)");
	a->bp.kv_type = strcmp(kv, "f16") == 0    ? MEDHA_KV_F16
	    : strcmp(kv, "bf16") == 0             ? MEDHA_KV_BF16
	                                          : MEDHA_KV_F32;
	a->ro.kv_f16 = a->bp.kv_type == MEDHA_KV_F16;
	a->bp.seed = a->sp.seed;
	if (a->addr == NULL && a->model != NULL && is_shape_name(a->model))
		die(2,
		    "-m %s: a shape name has random weights and no "
		    "tokenizer: one-shot mode needs a GGUF (serve the shape "
		    "with -s, requests sending prompt_ids)",
		    a->model);
	if (a->bp.ep && a->addr == NULL)
		die(2, "--ep: expert parallelism is a TP replica's (-s, "
		       "--tp N)");
	if (a->bp.ep &&
	    !(medha_backend_find(a->backend)->caps & MEDHA_BACKEND_EP))
		die(2, "--ep: the %s backend splits every expert's rows over "
		       "its TP ranks, not experts whole (--ep: cpu and sim)",
		    a->backend);
	if (a->addr == NULL && strcmp(a->backend, "sim") == 0)
		die(2, "--backend sim computes nothing: it serves a scheduler "
		       "(-s) only");
	if (medha_backend_find(a->backend)->open == NULL)
		die(2, "--backend: %s: not built into this program%s",
		    a->backend,
		    cuda ? " (built without nvcc, or with CUDA=0)" : "");
	a->ro.backend = a->backend;
	a->ro.bp = &a->bp;
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
	if (a->sys_msg != NULL && !a->chat)
		usage_fail(synopsis, "--system needs --chat");
}


int
main(int argc, char *argv[])
{
	struct args a;

	medha_progname = "medha-worker";
	argv[0] = (char *)medha_progname; /* getopt says it, not the path */
	parse_args(&a, argc, argv);
	check_backend(&a);
	link_auth();
	if (a.addr != NULL)
		return daemon_mode(&a, argc);
	check_oneshot(&a, argc);
	return oneshot_main(&a);
}
