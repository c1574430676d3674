/*
 * tokenizer.h: the tokenizer a GGUF file carries in its metadata, built to
 * give the same token ids as llama.cpp on the same file.
 *
 * Two kinds are supported. Byte-level BPE (tokenizer.ggml.model "gpt2"):
 * special-token text is cut out first, the rest is split by the
 * pre-tokenizer regexes of tokenizer.ggml.pre (gpt2, llama3, smollm and
 * its starcoder family, qwen2, default; run with PCRE2, see pretok.c),
 * each piece's bytes are mapped to printable code points and merged by
 * rank (tokenizer.ggml.merges). SentencePiece-style (model "llama"):
 * spaces become U+2581, a space is prefixed where add_space_prefix asks,
 * pieces are merged by score (tokenizer.ggml.scores) and what is left
 * unknown falls back to <0xXX> byte tokens. Decoding is the inverse:
 * token pieces joined, bytes unmapped. A chat template (ChatML or
 * Llama-3, recognised in tokenizer.chat_template) formats messages the
 * way llama.cpp's llama_chat_apply_template does.
 *
 *	struct medha_tok *t;
 *	int32_t *ids;
 *	size_t n;
 *	char why[256];
 *	if (medha_tok_open(&t, g, why, sizeof(why)) != 0)
 *		errx(1, "%s", why);
 *	if (medha_tok_encode(t, text, strlen(text), MEDHA_TOK_DEFAULT,
 *	    &ids, &n) != 0)
 *		...;
 *	free(ids);
 *	medha_tok_close(t);
 *
 * A tokenizer is immutable once open: encode and decode may be called
 * from several threads at once. Any byte string can be encoded: invalid
 * UTF-8 is tokenized as llama.cpp does, each bad byte as U+FFFD, so such
 * input does not round-trip. Valid UTF-8 does (SPM: but for the space it
 * puts after BOS and after each special token; MEDHA_TOK_STRIP_SPACE
 * removes the first).
 */
#ifndef MEDHA_TOKENIZER_H
#define MEDHA_TOKENIZER_H

#include "model/gguf.h"

#include <stddef.h>
#include <stdint.h>

struct medha_tok; /* opaque: vocabulary, merges, special tokens, regexes */

/* Flags of medha_tok_encode. */
#define MEDHA_TOK_ADD_SPECIAL 1   /* BOS (and EOS) where the vocab asks */
#define MEDHA_TOK_PARSE_SPECIAL 2 /* "<|im_start|>" text -> its token */
#define MEDHA_TOK_DEFAULT 3       /* both: llama.cpp's command line */

/*
 * Build the tokenizer of g's metadata. Everything needed is copied: g
 * may be closed afterwards. On success *t is the caller's, to be freed
 * with medha_tok_close(); on failure *t is NULL and why (if not NULL)
 * says what is missing or wrong. Returns 0, MEDHA_ENOTFOUND (no
 * tokenizer.ggml.model or tokens), MEDHA_EFORMAT (arrays of the wrong
 * type or length, duplicate tokens, a bad merge), MEDHA_EUNSUP (a model
 * or pre-tokenizer type not listed above) or MEDHA_ENOMEM.
 */
int medha_tok_open(struct medha_tok **t, const struct medha_gguf *g, char *why,
    size_t whylen);
/* Free everything; t may be NULL. */
void medha_tok_close(struct medha_tok *t);
/*
 * medha_tok_open on the GGUF file at path (closed again), and in
 * *ctx_len the model's context length (its <arch>.context_length; 0
 * when it has none). Returns as medha_tok_open, or medha_gguf_open's
 * error; why names the file.
 */
int medha_tok_open_file(struct medha_tok **t, const char *path,
    int64_t *ctx_len, char *why, size_t whylen);

/*
 * Tokenize len bytes of text (any bytes; NUL is an ordinary byte). On
 * success *ids is a malloc'd array of *n ids that the caller frees (it
 * is not NULL even when *n is 0); on failure *ids is NULL and *n 0.
 * Returns 0, MEDHA_ENOMEM or MEDHA_ERANGE (the regex engine ran out of
 * its limits on a pathological input).
 */
int medha_tok_encode(const struct medha_tok *t, const char *text, size_t len,
    int flags, int32_t **ids, size_t *n);

/* Flags of medha_tok_decode. */
#define MEDHA_TOK_SPECIAL_TEXT 1 /* control tokens give their text */
#define MEDHA_TOK_STRIP_SPACE 2  /* drop the space the vocab prefixed */

/*
 * Bytes of ids joined into buf (bufsz bytes, the caller's; not
 * NUL-terminated): each token's piece, as llama_token_to_piece gives it.
 * Without MEDHA_TOK_SPECIAL_TEXT control and unknown tokens give no text
 * (llama.cpp's special=false). MEDHA_TOK_STRIP_SPACE drops one leading
 * space of the first token where the vocabulary adds a space prefix
 * (SPM), as llama_detokenize does. *outlen is set to the full length even
 * when it does not fit, in which case buf holds a prefix and
 * MEDHA_ENOSPACE is returned (buf may be NULL when bufsz is 0). Returns
 * MEDHA_EINVAL for an id out of range.
 */
int medha_tok_decode(const struct medha_tok *t, const int32_t *ids, size_t n,
    int flags, char *buf, size_t bufsz, size_t *outlen);
/*
 * The bytes of one token (special text included) in *s, *len bytes, not
 * NUL-terminated; they live until medha_tok_close(). MEDHA_EINVAL if id
 * is out of range.
 */
int medha_tok_piece(const struct medha_tok *t, int32_t id, const char **s,
    size_t *len);

size_t medha_tok_n_vocab(const struct medha_tok *t);
int32_t medha_tok_bos(const struct medha_tok *t); /* -1 when none */
int32_t medha_tok_eos(const struct medha_tok *t); /* -1 when none */
/* Whether MEDHA_TOK_ADD_SPECIAL puts a BOS first. */
int medha_tok_add_bos(const struct medha_tok *t);
/* Whether generation should stop at id (EOS, EOT, <|im_end|>, ...). */
int medha_tok_is_eog(const struct medha_tok *t, int32_t id);
/* "bpe" or "spm"; and the pre-tokenizer name as given in the file. */
const char *medha_tok_kind(const struct medha_tok *t);
const char *medha_tok_pre(const struct medha_tok *t);

/* One chat message. */
struct medha_tok_msg {
	const char *role;    /* "system", "user", "assistant" (NUL-ended) */
	const char *content; /* len bytes (any, NULs too) */
	size_t len;          /* 0: up to content's NUL */
};

/* Whether the file's own chat template (Jinja) formats chats. */
int medha_tok_chat_jinja(const struct medha_tok *t);

/*
 * Name of the chat template recognised in tokenizer.chat_template:
 * "chatml" (also the fallback when the file has no template), "llama3",
 * or NULL when the template is of another kind.
 */
const char *medha_tok_chat_name(const struct medha_tok *t);
/*
 * Format n messages as the model's own chat template does (the Jinja in
 * tokenizer.chat_template, rendered as transformers' apply_chat_template
 * does: template/jinja.h; SmolLM2's default system prompt included), then
 * the assistant's header when add_assistant is set. A BOS the template
 * writes at the start is left out when the tokenizer adds one. Without
 * a template it can read, the recognised layout stands in
 * (medha_tok_chat_builtin). On success *out is a malloc'd string of
 * *outlen bytes (outlen may be NULL), NUL-terminated, that the caller
 * frees (a message may hold NULs: then so does *out); on failure it is
 * NULL. Returns 0, MEDHA_EUNSUP (no template it can use), MEDHA_EINVAL
 * (the template refuses the conversation, e.g. roles that do not
 * alternate; the reason is logged) or MEDHA_ENOMEM.
 */
int medha_tok_chat_msgs(const struct medha_tok *t,
    const struct medha_tok_msg *msgs, size_t n, int add_assistant, char **out,
    size_t *outlen);
/*
 * The layout llama_chat_apply_template gives for the recognised
 * templates (ChatML: "<|im_start|>role\ncontent<|im_end|>\n"; Llama-3:
 * "<|start_header_id|>role<|end_header_id|>\n\n" + trimmed content +
 * "<|eot_id|>"), without what the Jinja adds (a default system prompt):
 * for comparison with llama.cpp. Returns as medha_tok_chat_msgs.
 */
int medha_tok_chat_builtin(const struct medha_tok *t,
    const struct medha_tok_msg *msgs, size_t n, int add_assistant, char **out,
    size_t *outlen);
/* One user message of len bytes and the assistant's header: the common
 * case. */
int medha_tok_chat(const struct medha_tok *t, const char *user_msg, size_t len,
    char **out, size_t *outlen);

#endif
