/*
 * medha-router: the front door of one or more replicas (serve/router.h),
 * and with --http its OpenAI-compatible HTTP front door (serve/http.h), a
 * client of the router at an inproc:// address. Flags and wiring only.
 */
#include "../common.h"
#include "serve/http/http.h"
#include "net/auth.h"
#include "net/link.h"
#include "serve/router.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char synopsis[] =
    "usage: medha-router -l ADDR -r REPLICA_ADDR [-r REPLICA_ADDR ...]"
    " [-v] [-m MODEL]\n"
    "           [--cache-balance S] [--drain-timeout S] [--http HOST:PORT]\n"
    "           [--http-max-body BYTES] [--hold-timeout S] "
    "[--http-keepalive S]\n"
    "           [--http-max-conns N] [--api-key KEY] [--api-key-file FILE]\n"
    "           [--max-queue N] [--shared-prefix-cache] "
    "[--status-interval S]\n";

/* -h: the synopsis, then every option with a line on it (medha-router(1)) */
static const struct medha_help help_lines[] = {
    {"-l, --listen ADDR",
        "where clients connect: ipc://PATH or tcp://HOST:PORT"},
    {"-r, --replica REPLICA_ADDR",
        "a replica's scheduler, once each (at most 1024)"},
    {"-m, --model MODEL",
        "GGUF: tokenizer for text prompts, --http's template"},
    {"-v, --verbose", "log more: retries on another replica, clients gone"},
    {"-h, --help", "print this help and exit"},
    {"--cache-balance S",
        "to the prefix's replica unless S s busier (1); 0: off"},
    {"--drain-timeout S",
        "on SIGTERM/SIGINT, wait for requests in flight (30 s)"},
    {"--hold-timeout S", "wait for a ready replica (30 s); 0: refuse at once"},
    {"--http HOST:PORT", "serve the HTTP front door there (port 0: any free)"},
    {"--http-max-body BYTES",
        "largest request body (1048576, at most 33554432)"},
    {"--http-keepalive S",
        "a silent stream gets a comment every S s (5)"},
    {"--http-max-conns N",
        "HTTP requests answered at once; more get 429 (1024)"},
    {"--api-key KEY", "--http: /v1/ asks for Bearer KEY (more: any of them)"},
    {"--api-key-file FILE", "--http: the API keys, one a line (mode 0600)"},
    {"--max-queue N", "requests in flight at most; more refused (100000)"},
    {"--shared-prefix-cache",
        "--api-key: one prefix cache, not a tenant per key"},
    {"--status-interval S", "seconds between STATUS calls to a replica (0.1)"},
    LINK_HELP,
};

enum {
	OPT_DRAIN = 256,
	OPT_HTTP,
	OPT_HTTP_BODY,
	OPT_HTTP_CONNS,
	OPT_HTTP_KEEPALIVE,
	OPT_MAXQ,
	OPT_STATUS,
	OPT_HOLD,
	OPT_BALANCE,
	OPT_KEY,
	OPT_KEY_FILE,
	OPT_SHARED
};

#define MAX_KEYS 256
static const char *keys[MAX_KEYS];
static int nkeys;

/* One more API key (the flag's, or a file's line). */
static void
key_add(const char *k)
{
	if (nkeys == MAX_KEYS)
		die(2, "more than %d API keys", MAX_KEYS);
	keys[nkeys++] = k;
}

/* --api-key-file: a key on each line, blank lines and the blanks
   around a key left out; a private regular file (as a secret file). */
static void
key_file(const char *path)
{
	static char buf[1 << 16];
	size_t len;
	char why[512], *save = NULL, *line;
	char *text;
	int before = nkeys;

	if (medha_auth_read("API key file", path, buf, sizeof(buf) - 1, &len,
	        why, sizeof(why)) != 0)
		die(1, "%s", why);
	if ((text = malloc(len + 1)) == NULL)
		die(1, "out of memory");
	memcpy(text, buf, len);
	text[len] = '\0';
	memset(buf, 0, sizeof(buf));
	for (line = strtok_r(text, "\n", &save); line != NULL;
	    line = strtok_r(NULL, "\n", &save)) {
		char *end = line + strlen(line);
		while (*line == ' ' || *line == '\t' || *line == '\r')
			line++;
		while (end > line && (end[-1] == ' ' || end[-1] == '\t' ||
		                         end[-1] == '\r'))
			*--end = '\0';
		if (*line != '\0')
			key_add(line);
	}
	if (nkeys == before)
		die(1, "API key file %s: no key in it", path);
}

/* The router's address for its own HTTP front door (one per process). */
#define HTTP_UPSTREAM "inproc://medha-router-http"

int
main(int argc, char *argv[])
{
	static const struct option opts[] = {
	    {"cache-balance", required_argument, NULL, OPT_BALANCE},
	    {"drain-timeout", required_argument, NULL, OPT_DRAIN},
	    {"help", no_argument, NULL, 'h'},
	    {"hold-timeout", required_argument, NULL, OPT_HOLD},
	    {"http", required_argument, NULL, OPT_HTTP},
	    {"http-max-body", required_argument, NULL, OPT_HTTP_BODY},
	    {"http-keepalive", required_argument, NULL, OPT_HTTP_KEEPALIVE},
	    {"http-max-conns", required_argument, NULL, OPT_HTTP_CONNS},
	    {"api-key", required_argument, NULL, OPT_KEY},
	    {"api-key-file", required_argument, NULL, OPT_KEY_FILE},
	    {"listen", required_argument, NULL, 'l'},
	    {"max-queue", required_argument, NULL, OPT_MAXQ},
	    {"model", required_argument, NULL, 'm'},
	    {"replica", required_argument, NULL, 'r'},
	    {"shared-prefix-cache", no_argument, NULL, OPT_SHARED},
	    {"status-interval", required_argument, NULL, OPT_STATUS},
	    {"verbose", no_argument, NULL, 'v'},
	    LINK_LONGOPTS,
	    {NULL, 0, NULL, 0},
	};
	static const char *reps[MEDHA_ROUTER_MAX_REPLICAS];
	struct medha_router_config c;
	struct medha_http_config hc;
	struct medha_router *r;
	struct medha_http *http = NULL;
	char why[512];
	int ch, rc, verbose = 0;

	medha_progname = "medha-router";
	argv[0] = (char *)medha_progname; /* getopt says it, not the path */
	medha_router_config_default(&c);
	medha_http_config_default(&hc);
	c.replicas = reps;
	while ((ch = getopt_long(argc, argv, "hl:m:r:v", opts, NULL)) != -1) {
		switch (ch) {
		case 'h': HELP_EXIT(synopsis, help_lines);
		case 'l': c.listen = optarg; break;
		case 'm': c.model = hc.model = optarg; break;
		case 'r':
			if (c.nreplicas == MEDHA_ROUTER_MAX_REPLICAS)
				die(2, "more than %d replicas",
				    MEDHA_ROUTER_MAX_REPLICAS);
			reps[c.nreplicas++] = optarg;
			break;
		case 'v': verbose++; break;
		case OPT_DRAIN:
			c.drain_timeout =
			    flag_f64("--drain-timeout", optarg, 0, 1e6, 0);
			break;
		case OPT_BALANCE:
			c.cache_balance =
			    flag_f64("--cache-balance", optarg, 0, 1e6, 0);
			break;
		case OPT_HOLD:
			c.hold_timeout =
			    flag_f64("--hold-timeout", optarg, 0, 1e6, 0);
			break;
		case OPT_HTTP: hc.listen = optarg; break;
		case OPT_HTTP_BODY:
			hc.max_body = flag_i64("--http-max-body", optarg, 1,
			    MEDHA_PROTO_MAX_FRAME / 2);
			break;
		case OPT_HTTP_KEEPALIVE:
			hc.keepalive =
			    flag_f64("--http-keepalive", optarg, 0, 3600, 1);
			break;
		case OPT_HTTP_CONNS:
			hc.max_conns =
			    flag_i64("--http-max-conns", optarg, 1, 1 << 20);
			break;
		case OPT_MAXQ:
			c.max_queue =
			    flag_i64("--max-queue", optarg, 1, 1 << 30);
			break;
		case OPT_STATUS:
			c.status_interval =
			    flag_f64("--status-interval", optarg, 0, 60, 1);
			break;
		case OPT_KEY: key_add(optarg); break;
		case OPT_KEY_FILE: key_file(optarg); break;
		case OPT_SHARED: hc.shared_prefix_cache = 1; break;
		case OPT_SECRET:
		case OPT_INSECURE: link_flag(ch, optarg); break;
		default: usage_exit(synopsis);
		}
	}
	if (optind < argc)
		usage_fail(synopsis, "unexpected argument: %s", argv[optind]);
	if (c.listen == NULL || c.nreplicas == 0)
		usage_fail(synopsis, "%s is required",
		    c.listen == NULL ? "-l ADDR" : "at least one -r ADDR");
	for (int i = 0; i < c.nreplicas; i++)
		if (strcmp(reps[i], c.listen) == 0)
			die(2, "%s: the router's own address", reps[i]);
	if (hc.listen == NULL && nkeys > 0)
		die(2, "--api-key needs --http");
	if (hc.shared_prefix_cache && nkeys == 0)
		die(2, "--shared-prefix-cache needs --api-key (without keys "
		       "there are no tenants to share)");
	if (hc.listen != NULL && nkeys == 0 && !medha_auth_is_insecure() &&
	    !medha_auth_loopback(hc.listen))
		die(2, "will not serve HTTP at %s without an API key: anyone "
		       "who reaches it could submit; give --api-key KEY or "
		       "--api-key-file FILE, or --insecure",
		    hc.listen);
	hc.api_keys = keys;
	hc.n_api_keys = nkeys;
	link_auth();
	/* the flags' errors above are said as every program says them
	   (no time stamp); from here on the server's log */
	log_server(verbose);
	catch_stop();
	if ((rc = medha_router_open(&r, &c, why, sizeof(why))) != 0) {
		if (rc == MEDHA_EINVAL) /* a flag's: said as one */
			medha_log_stamp = MEDHA_STAMP_NONE;
		die(rc == MEDHA_EINVAL ? 2 : 1, "%s", why);
	}
	if (hc.listen != NULL) {
		hc.upstream = HTTP_UPSTREAM;
		hc.router = r;
		if ((rc = medha_router_listen(r, HTTP_UPSTREAM, why,
		         sizeof(why))) != 0 ||
		    (rc = medha_http_open(&http, &hc, why, sizeof(why))) != 0) {
			if (rc == MEDHA_EINVAL)
				medha_log_stamp = MEDHA_STAMP_NONE;
			medha_log(MEDHA_LOG_ERROR, "%s", why);
			medha_router_close(r);
			return rc == MEDHA_EINVAL ? 2 : 1;
		}
	}
	rc = medha_router_run(r, &stop_requested);
	medha_link_exit_by(3, rc != 0);
	medha_http_close(http);
	medha_router_close(r);
	if (rc != 0)
		die(1, "%s", medha_strerror(rc));
	return 0;
}
