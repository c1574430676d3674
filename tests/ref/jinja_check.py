#!/usr/bin/env python3
"""jinja_check.py: the expected renderings of tests/ref/chat_templates.json.

Each template is rendered with Python's jinja2 set up as transformers'
apply_chat_template sets it up (ImmutableSandboxedEnvironment with
trim_blocks and lstrip_blocks, loop controls, raise_exception,
strftime_now and transformers' tojson), for every conversation below,
with add_generation_prompt false and true. The result is one JSON
document on stdout that tests/jinja_test.c (--ref FILE) renders again
with libcore/template/ and compares byte for byte: either the same
output, or both fail (with the same message where the template called
raise_exception).

MEDHA_JINJA_NOW=YYYY-MM-DD fixes strftime_now's date, as on the C side.

usage: jinja_check.py TEMPLATES.json > expected.json
"""
import datetime
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


class Raised(Exception):
    pass


def now():
    fixed = os.environ.get("MEDHA_JINJA_NOW")
    if fixed:
        return datetime.datetime.strptime(fixed[:10], "%Y-%m-%d")
    return datetime.datetime.now()


def environment():
    def raise_exception(message):
        raise Raised(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None,
               sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                          separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True,
        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
CONVERSATIONS = [
    [{"role": "user", "content": "Hello"}],
    [SYSTEM, {"role": "user", "content": "Hi there"}],
    [SYSTEM, {"role": "user", "content": "Who are you?"},
     {"role": "assistant", "content": "   I am an assistant   "},
     {"role": "user", "content": "Another question"}],
    [{"role": "user", "content": "  Line one\nline two\t \n"},
     {"role": "assistant",
      "content": " It's \"quoted\" \u2014 \u00fcn\u00efc\u00f6d\u00e9 "
                 "\u65e5\u672c\u8a9e \U0001F600\u00a0"},
     {"role": "user",
      "content": "nul\x00byte, {{ not_a_tag }} {% raw %} \\n 'q' \"dq\""}],
    [{"role": "user", "content": "Question"},
     {"role": "assistant", "content": "Answer"}],
    [{"role": "system", "content": "\n Be brief. \n"},
     {"role": "user", "content": "a"},
     {"role": "assistant", "content": "b"},
     {"role": "user", "content": "c"},
     {"role": "assistant", "content": "d"},
     {"role": "user", "content": "e"}],
]

# the special tokens each family's tokenizer has
TOKENS = [("llama3", "<|begin_of_text|>", "<|eot_id|>"),
          ("gemma", "<bos>", "<eos>"),
          ("qwen", "", "<|im_end|>"),
          ("smollm", "<|im_start|>", "<|im_end|>"),
          ("chatml", "<|im_start|>", "<|im_end|>"),
          ("deepseek", "<\uff5cbegin\u2581of\u2581sentence\uff5c>",
           "<\uff5cend\u2581of\u2581sentence\uff5c>"),
          ("", "<s>", "</s>")]


def main():
    templates = json.load(open(sys.argv[1], encoding="utf-8"))
    env = environment()
    cases = []
    for name, src in templates.items():
        bos, eos = next((b, e) for p, b, e in TOKENS if name.startswith(p))
        tmpl = env.from_string(src)
        for ci, conv in enumerate(CONVERSATIONS):
            for agp in (False, True):
                case = {"template": name, "conversation": ci,
                        "add_generation_prompt": agp, "bos_token": bos,
                        "eos_token": eos, "messages": conv,
                        "output": None, "raised": None, "error": None}
                try:
                    case["output"] = tmpl.render(
                        messages=conv, tools=None, documents=None,
                        add_generation_prompt=agp, bos_token=bos,
                        eos_token=eos)
                except Raised as e:
                    case["raised"] = str(e)
                except jinja2.TemplateError as e:
                    case["error"] = "%s: %s" % (type(e).__name__, e)
                cases.append(case)
    json.dump({"templates": templates, "cases": cases}, sys.stdout,
              ensure_ascii=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
