/*
 * jinja.h: a small, strict Jinja2 renderer for the chat templates that
 * GGUF files carry (tokenizer.chat_template), so that a model's own
 * template formats the prompt: SmolLM2's default system prompt, the
 * Llama-3.1 date header, Mistral's alternation check and the like.
 *
 * It renders as transformers' apply_chat_template does: Jinja2's
 * ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks,
 * loop controls ({% break %}, {% continue %}), raise_exception(msg),
 * strftime_now(fmt) and transformers' tojson. What it does not know is
 * an error with a line and column, at parse time where Jinja2 itself
 * would refuse at compile time (unknown tags, filters, tests), else at
 * render time: never a guess. The variables are messages (a list of
 * {role, content}), add_generation_prompt, bos_token, eos_token, and
 * tools and documents (none); date_string is left undefined, as
 * transformers leaves it.
 *
 *	struct medha_jinja *j;
 *	struct medha_jinja_msg m[] = {{"user", "Hi", 2}};
 *	char why[256], *out;
 *	size_t n;
 *
 *	if (medha_jinja_parse(&j, tmpl, strlen(tmpl), why, sizeof(why)) != 0)
 *		errx(1, "template: %s", why);
 *	if (medha_jinja_render(j, m, 1, 1, "<s>", "</s>", &out, &n, why,
 *	    sizeof(why)) != 0)
 *		errx(1, "render: %s", why);
 *	fwrite(out, 1, n, stdout);
 *	free(out);
 *	medha_jinja_free(j);
 *
 * The template is untrusted (it comes with the model file): parsing and
 * rendering are bounded by the limits below, and hitting one is an
 * error (MEDHA_ENOSPACE), not a crash or a hang.
 *
 * Set MEDHA_JINJA_NOW=YYYY-MM-DD in the environment to fix the date
 * that strftime_now() sees (tests).
 */
#ifndef MEDHA_JINJA_H
#define MEDHA_JINJA_H

#include <stddef.h>

#define MEDHA_JINJA_MAX_SRC (1 << 20)    /* template bytes */
#define MEDHA_JINJA_MAX_DEPTH 128        /* nesting of tags and expressions */
#define MEDHA_JINJA_MAX_OUT (16 << 20)   /* output bytes */
#define MEDHA_JINJA_MAX_MEM (64 << 20)   /* scratch bytes of one render */
#define MEDHA_JINJA_MAX_STEPS 20000000L  /* expressions evaluated, loop turns */

struct medha_jinja; /* a parsed template */

/*
 * One chat message: role is a NUL-terminated string, content len bytes
 * that may hold any byte, NUL included. The renderer only reads them.
 */
struct medha_jinja_msg {
	const char *role;
	const char *content;
	size_t len;
};

/*
 * Parse len bytes of template source (a copy is kept). On success *j
 * is the template, to be freed with medha_jinja_free(). On failure *j
 * is NULL and why says what and where: MEDHA_EFORMAT (syntax),
 * MEDHA_EUNSUP (a Jinja2 feature this renderer lacks), MEDHA_ENOSPACE
 * (a limit), MEDHA_ENOMEM.
 */
int medha_jinja_parse(struct medha_jinja **j, const char *src, size_t len,
    char *why, size_t whylen);

/*
 * Render the template with n messages. bos_token and eos_token are
 * NUL-terminated (NULL: undefined). On success *out is a malloc'd
 * buffer of *outlen bytes plus a NUL, owned by the caller; on failure
 * *out is NULL and why says why: the template's own message when it
 * called raise_exception() (MEDHA_EINVAL), else what failed and where
 * (MEDHA_EFORMAT, MEDHA_EUNSUP, MEDHA_ENOSPACE, MEDHA_ENOMEM).
 * The template may be rendered from several threads at once.
 */
int medha_jinja_render(const struct medha_jinja *j,
    const struct medha_jinja_msg *msgs, size_t n, int add_generation_prompt,
    const char *bos_token, const char *eos_token, char **out, size_t *outlen,
    char *why, size_t whylen);

void medha_jinja_free(struct medha_jinja *j);

#endif
