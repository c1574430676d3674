#!/bin/sh
# jinja-ref.sh: libcore's chat-template renderer (libcore/template/)
# against Python's jinja2, set up as transformers' apply_chat_template
# sets it up, on every template of tests/ref/chat_templates.json and
# every conversation of tests/ref/jinja_check.py, with and without the
# generation prompt: the outputs must be identical byte for byte, and
# where jinja2 fails (raise_exception, as Mistral's and Gemma's role
# checks do) ours must fail too, with the same message.
# Needs jinja2 in the cache's venv (MEDHA_CACHE, default cache/); skips
# without it. The C side is tests/jinja_test --ref, taken from
# MEDHA_TESTS (set by tests/run.sh) or built here.
. "$(dirname "$0")/lib.sh"
need_py jinja2

cd "$top"
t=${MEDHA_TESTS:+$MEDHA_TESTS/jinja_test}
if [ -z "$t" ] || [ ! -x "$t" ]; then
	t=$tmp/jinja_test
	${CC:-cc} -std=c11 -D_GNU_SOURCE -O2 -iquote libcore -o "$t" \
	    tests/jinja_test.c libcore/template/*.c libcore/util.c \
	    -lcmocka -ljansson -lm
fi

# a fixed date, so that strftime_now() agrees on both sides
MEDHA_JINJA_NOW=2024-09-05
export MEDHA_JINJA_NOW
"$py" tests/ref/jinja_check.py tests/ref/chat_templates.json > "$tmp/want.json"
"$t" --ref "$tmp/want.json"

# the worker's --chat on SmolLM2: the GGUF's own template, rendered by
# jinja2 (its default system prompt when none is given; --system
# otherwise) and tokenized, gives the ids medha-worker --chat gives
if [ -s "$model" ] && [ -x "$bin/medha-worker" ]; then
	n=0
	for sys in "" "Be brief." "You answer in French."; do
		for prompt in "hello" "What is 2+2?" "  spaces and
newlines  "; do
			c=$tmp/c$n
			printf %s "$sys" >"$c.sys"
			printf %s "$prompt" >"$c.prompt"
			if [ -n "$sys" ]; then
				"$bin/medha-worker" -m "$model" --chat --system "$sys" \
				    -p "$prompt" --tokenize >"$c.ids"
			else
				"$bin/medha-worker" -m "$model" --chat -p "$prompt" \
				    --tokenize >"$c.ids"
			fi
			n=$((n + 1))
		done
	done
	# every conversation rendered by jinja2 in one process (the template
	# read from the file once)
	"$py" - "$model" "$tmp" $n <<'PY'
import sys
sys.path.insert(0, "tests/ref")
from arch_model import header
from jinja_check import environment
tmpl = environment().from_string(
    header(sys.argv[1], tokenizer=True)[1]["tokenizer.chat_template"])
for i in range(int(sys.argv[3])):
    c = "%s/c%d." % (sys.argv[2], i)
    system, prompt = open(c + "sys").read(), open(c + "prompt").read()
    msgs = [{"role": "system", "content": system}] if system else []
    msgs.append({"role": "user", "content": prompt})
    open(c + "rendered", "w").write(tmpl.render(
        messages=msgs, add_generation_prompt=True, bos_token="",
        eos_token=""))
PY
	i=0
	while [ $i -lt $n ]; do
		c=$tmp/c$i
		"$bin/medha-worker" -m "$model" -f "$c.rendered" \
		    --tokenize >"$c.ref.ids"
		if ! cmp -s "$c.ids" "$c.ref.ids"; then
			sys=$(cat "$c.sys")
			echo "medha-worker --chat ${sys:+--system '$sys' }-p '$(cat "$c.prompt")': not jinja2's rendering"
			cat "$c.rendered"
			exit 1
		fi
		i=$((i + 1))
	done
	echo "medha-worker --chat on $(basename "$model"): $n conversations, the ids of jinja2's rendering of its template"
else
	echo "skip: no $model or $bin/medha-worker (the --chat check)"
fi
