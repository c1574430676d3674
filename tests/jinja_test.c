/*
 * jinja_test.c: the chat-template renderer (libcore/template/).
 *
 * Unit tests of each piece of syntax on small templates (text, output,
 * if/elif/else, for with loop.*, scoping of set, namespaces, whitespace
 * control with trim_blocks and lstrip_blocks, literals, operators,
 * filters, tests, methods, raise_exception, strftime_now), then the
 * hostile cases: unterminated tags, deep nesting, huge loops and
 * outputs, each an error with a position and never a crash.
 *
 * With --ref FILE it is instead the C half of tests/sh/jinja-ref.sh:
 * FILE is what tests/ref/jinja_check.py wrote (Python jinja2's
 * renderings of tests/ref/chat_templates.json); each case is rendered
 * again here and compared byte for byte.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "medha.h"
#include "template/jinja.h"

static const struct medha_jinja_msg conv[] = {
	{"system", "Be brief.", 9},
	{"user", "Hello", 5},
	{"assistant", " Hi ", 4},
	{"user", "Bye", 3},
};

/* Render src over msgs; the output (malloc'd) or NULL with why set. */
static char *
render_msgs(const char *src, const struct medha_jinja_msg *m, size_t n,
    int agp, char *why, size_t whylen, int *rc)
{
	struct medha_jinja *j;
	char *out = NULL;
	size_t len;

	*rc = medha_jinja_parse(&j, src, strlen(src), why, whylen);
	if (*rc != 0) {
		assert_null(j);
		return NULL;
	}
	*rc = medha_jinja_render(j, m, n, agp, "<s>", "</s>", &out, &len, why,
	    whylen);
	if (*rc == 0)
		assert_int_equal(strlen(out), len);
	else
		assert_null(out);
	medha_jinja_free(j);
	return out;
}

/* src renders to want over conv. */
static void
check(const char *src, const char *want)
{
	char why[256] = "", *out;
	int rc;

	out = render_msgs(src, conv, 4, 1, why, sizeof(why), &rc);
	if (out == NULL)
		fail_msg("%s: %s", src, why);
	if (strcmp(out, want) != 0)
		fail_msg("%s:\n got  [%s]\n want [%s]", src, out, want);
	free(out);
}

/* src fails with err, and why contains frag. */
static void
check_err(const char *src, int err, const char *frag)
{
	char why[256] = "", *out;
	int rc;

	out = render_msgs(src, conv, 4, 1, why, sizeof(why), &rc);
	if (out != NULL)
		fail_msg("%.60s: rendered [%.200s], want an error", src, out);
	if (rc != err || strstr(why, frag) == NULL)
		fail_msg("%.60s: %d \"%s\", want %d with \"%s\"", src, rc, why,
		    err, frag);
}

static void
test_basics(void **state)
{
	(void)state;
	check("plain text", "plain text");
	check("a{{ 1 + 2 }}b{{ 'x' ~ 3 }}", "a3bx3");
	check("{# a comment #}x", "x");
	check("{{ messages|length }} {{ messages[1].content }}"
	    "{{ messages[-1]['role'] }}", "4 Hellouser");
	check("{{ bos_token }}{{ eos_token }}{{ add_generation_prompt }}",
	    "<s></s>True");
	check("{{ nothing }}|{{ nothing|length }}|{{ nothing is defined }}",
	    "|0|False");
	check("{{ none }} {{ True }} {{ [1, 'a', none] }} {{ {'k': 2} }}",
	    "None True [1, 'a', None] {'k': 2}");
	check("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 * 3 - 1 }} "
	    "{{ 4 / 2 }} {{ 2 ** 10 }}", "3 -4 2 5 2.0 1024");
	check("{{ 'a' 'b' }}{{ \"q\\\"\\n\\t\\\\\" }}", "abq\"\n\t\\");
	check("{{ 'héllo'[1:3] }} {{ 'héllo'|length }} {{ 'abc'[::-1] }} "
	    "{{ [1,2,3][1:] }} {{ 'abc'[-1] }}", "él 5 cba [2, 3] c");
	check("{{ 1 if false }}|{{ 1 if false else 2 }}|{{ 'a' if 1 }}",
	    "|2|a");
	check("{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'b' in 'abc' }} "
	    "{{ 4 not in [1, 2] }} {{ 'role' in messages[0] }}",
	    "True False True True True");
	check("{{ 0 or 'x' }} {{ 1 and 'y' }} {{ not 0 }}", "x y True");
}

static void
test_control(void **state)
{
	(void)state;
	check("{% if 0 %}a{% elif 1 %}b{% else %}c{% endif %}", "b");
	check("{% for m in messages %}{{ loop.index }}{{ loop.index0 }}"
	    "{{ loop.first }}{{ loop.last }}{{ loop.length }},{% endfor %}",
	    "10TrueFalse4,21FalseFalse4,32FalseFalse4,43FalseTrue4,");
	check("{% for x in [] %}a{% else %}empty{% endfor %}", "empty");
	check("{% for m in messages if m.role == 'user' %}{{ m.content }}"
	    "{{ loop.length }}{% endfor %}", "Hello2Bye2");
	check("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};"
	    "{% endfor %}", "a=1;b=2;");
	check("{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}"
	    "{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}", "02");
	/* a set inside a loop does not leak; a namespace does */
	check("{% set c = 0 %}{% for i in [1, 2, 3] %}{% set c = c + i %}"
	    "{{ c }}{% endfor %}{{ c }}", "1230");
	check("{% set ns = namespace(found=false, n=0) %}"
	    "{% for m in messages %}{% if m.role == 'system' %}"
	    "{% set ns.found = true %}{% endif %}{% set ns.n = ns.n + 1 %}"
	    "{% endfor %}{{ ns.found }}{{ ns.n }}", "True4");
	check("{% set x %}in {{ 1 }}{% endset %}[{{ x }}]", "[in 1]");
	check("{% generation %}g{% endgeneration %}", "g");
}

static void
test_whitespace(void **state)
{
	(void)state;
	/* trim_blocks: the newline after a block tag goes */
	check("{% if 1 %}\nyes\n{% endif %}\nend", "yes\nend");
	/* lstrip_blocks: indentation before a block tag goes */
	check("a\n    {% if 1 %}b{% endif %}", "a\nb");
	check("a\n    {{ 'v' }}", "a\n    v");
	/* "-" strips all whitespace on its side, newlines included */
	check("a  \n {{- 'b' -}} \n\n c", "abc");
	check("x {%- if 1 -%}  y  {%- endif %} z", "xy z");
	check("{%+ if 1 %}a{% endif +%}\nb", "a\nb");
	check("  {%+ if 1 %}a{% endif %}", "  a");
	check("{# c #}\nx\n", "x");
	check("a\r\nb", "a\nb");
}

static void
test_filters(void **state)
{
	(void)state;
	check("[{{ '  a b \n'|trim }}] {{ 'Ab'|upper }}{{ 'Ab'|lower }} "
	    "{{ 'hello world'|title }} {{ 'hELLO'|capitalize }}",
	    "[a b] ABab Hello World Hello");
	check("{{ [1, 2]|first }}{{ [1, 2]|last }}{{ 'xyz'|first }} "
	    "{{ [1, 2]|join(', ') }} {{ messages|map(attribute='role')|join"
	    "('/') }}", "12x 1, 2 system/user/assistant/user");
	check("{{ 'a\"b\\n'|tojson }} {{ [1, 'x', none, true]|tojson }} "
	    "{{ {'k': [1]}|tojson(indent=2) }}",
	    "\"a\\\"b\\n\" [1, \"x\", null, true] {\n  \"k\": [\n    1\n  ]\n}");
	check("{{ undefined_x|default('d') }} {{ ''|default('e', true) }} "
	    "{{ 'aXbX'|replace('X', '-') }} {{ 3|string ~ 'x' }}",
	    "d e a-b- 3x");
	check("{{ messages|selectattr('role', 'equalto', 'user')|list|length "
	    "}} {{ messages|rejectattr('role', 'equalto', 'user')|map("
	    "attribute='content')|join }} {{ [1, 2, 3]|select('odd')|list }}",
	    "2 Be brief. Hi  [1, 3]");
	check("{{ ' x '.strip() }}|{{ 'a,b'.split(',') }}|{{ 'ab'.startswith"
	    "('a') }}|{{ 'user'.title() }}|{{ {'a': 1}.get('b', 2) }}",
	    "x|['a', 'b']|True|User|2");
}

static void
test_tests(void **state)
{
	(void)state;
	check("{{ x is defined }}{{ x is undefined }}{{ none is none }}"
	    "{{ 'a' is string }}{{ 1 is number }}{{ 3 is odd }}"
	    "{{ 4 is divisibleby 2 }}{{ {} is mapping }}{{ 1 is not string }}",
	    "FalseTrueTrueTrueTrueTrueTrueTrueTrue");
	check("{{ 'abc' is lower }}{{ 2 is equalto 2 }}{{ 2 is eq(3) }}",
	    "TrueTrueFalse");
}

static void
test_raise_and_date(void **state)
{
	char why[256];
	int rc;
	char *out;

	(void)state;
	check_err("{{ raise_exception('Roles must alternate') }}",
	    MEDHA_EINVAL, "Roles must alternate");
	out = render_msgs("{{ raise_exception('exact') }}", conv, 4, 1, why,
	    sizeof(why), &rc);
	assert_null(out);
	assert_string_equal(why, "exact");
	setenv("MEDHA_JINJA_NOW", "2024-09-05", 1);
	check("{{ strftime_now('%d %b %Y') }} {{ strftime_now is defined }}",
	    "05 Sep 2024 True");
	unsetenv("MEDHA_JINJA_NOW");
}

/* Content with a NUL and template syntax passes through as bytes. */
static void
test_bytes(void **state)
{
	static const struct medha_jinja_msg m[] = {{"user", "a\0b{{ x }}", 10}};
	struct medha_jinja *j;
	char why[128], *out;
	size_t len;
	const char *src = "[{{ messages[0].content }}]{{ messages[0].content|"
	    "length }}";

	(void)state;
	assert_int_equal(medha_jinja_parse(&j, src, strlen(src), why,
	    sizeof(why)), 0);
	assert_int_equal(medha_jinja_render(j, m, 1, 0, NULL, NULL, &out,
	    &len, why, sizeof(why)), 0);
	assert_int_equal(len, 14);
	assert_memory_equal(out, "[a\0b{{ x }}]10", 14);
	assert_int_equal(out[len], '\0');
	free(out);
	medha_jinja_free(j);
}

static void
test_errors(void **state)
{
	(void)state;
	check_err("{{ 1 + }}", MEDHA_EFORMAT, "line 1 col 8");
	check_err("a\n{% if 1 %}x", MEDHA_EFORMAT, "missing {% endif %}");
	check_err("{{ 'abc }}", MEDHA_EFORMAT, "unterminated string");
	check_err("{{ x", MEDHA_EFORMAT, "unterminated {{ tag");
	check_err("{# x", MEDHA_EFORMAT, "unterminated comment");
	check_err("{% for x in y %}", MEDHA_EFORMAT, "endfor");
	check_err("{% endif %}", MEDHA_EFORMAT, "unexpected tag");
	check_err("{% macro m() %}{% endmacro %}", MEDHA_EUNSUP,
	    "{% macro %} is not supported");
	check_err("{{ x|nosuchfilter }}", MEDHA_EFORMAT, "no filter named");
	check_err("{{ x is nosuchtest }}", MEDHA_EFORMAT, "no test named");
	check_err("{{ [1]|sort }}", MEDHA_EUNSUP, "filter 'sort'");
	check_err("{{ x.y }}", MEDHA_EFORMAT, "'x' is undefined");
	check_err("{{ x + 'a' }}", MEDHA_EFORMAT, "undefined");
	check_err("{{ 'a' + 1 }}", MEDHA_EFORMAT, "unsupported operand");
	check_err("{{ 1 // 0 }}", MEDHA_EFORMAT, "division by zero");
	check_err("{% set x.y = 1 %}", MEDHA_EFORMAT, "namespace");
	check_err("{{ 9223372036854775807 + 1 }}", MEDHA_ERANGE, "overflow");
	check_err("{{ 'a'.nosuch() }}", MEDHA_EUNSUP, "not supported");
	check_err("{{ (1 }}", MEDHA_EFORMAT, "unexpected '}'");
	check_err("{{ 1) }}", MEDHA_EFORMAT, "unexpected ')'");
	check_err("{% break %}", MEDHA_EFORMAT, "unexpected tag");
}

/* pre, n copies of a, mid, n copies of c, post. */
static char *
nest(const char *pre, const char *a, const char *mid, const char *c,
    const char *post, int n)
{
	size_t la = strlen(a), lc = strlen(c);
	char *s = malloc((size_t)n * (la + lc) + strlen(pre) + strlen(mid) +
	    strlen(post) + 1), *p = s;
	int i;

	assert_non_null(s);
	p = stpcpy(p, pre);
	for (i = 0; i < n; i++, p += la)
		memcpy(p, a, la);
	p = stpcpy(p, mid);
	for (i = 0; i < n; i++, p += lc)
		memcpy(p, c, lc);
	strcpy(p, post);
	return s;
}

static void
test_hostile(void **state)
{
	char *s;

	(void)state;
	s = nest("{{ ", "(", "1", ")", " }}", 100000);
	check_err(s, MEDHA_ENOSPACE, "nested too deep");
	free(s);
	s = nest("", "{% if 1 %}", "x", "{% endif %}", "", 20000);
	check_err(s, MEDHA_ENOSPACE, "nested too deep");
	free(s);
	s = nest("{{ ", "not ", "1", "", " }}", 100000);
	check_err(s, MEDHA_ENOSPACE, "nested too deep");
	free(s);
	s = nest("{{ ", "-", "1", "", " }}", 100000);
	check_err(s, MEDHA_ENOSPACE, "nested too deep");
	free(s);
	s = nest("{{ ", "[", "", "]", " }}", 100000);
	check_err(s, MEDHA_ENOSPACE, "nested too deep");
	free(s);
	s = nest("{{ x", "", "", "|trim", " }}", 20000);
	check_err(s, MEDHA_ENOSPACE, "nested too deep");
	free(s);
	s = nest("{{ 1", "", "", " + 1", " }}", 20000);
	check_err(s, MEDHA_ENOSPACE, "nested too deep");
	free(s);
	check("{{ x|trim|trim|trim }}{{ 1 + 1 + 1 + 1 }}", "4");
	/* a list nested by a loop: too deep to print, compare, serialise */
	check_err("{% set ns = namespace(x=[]) %}{% for i in range(5000) %}"
	    "{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}", MEDHA_ENOSPACE,
	    "too deep");
	check_err("{% set ns = namespace(x=[]) %}{% for i in range(5000) %}"
	    "{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x|tojson }}",
	    MEDHA_ENOSPACE, "too deep");
	check_err("{% set ns = namespace(x=[]) %}{% for i in range(5000) %}"
	    "{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x < ns.x }}",
	    MEDHA_ENOSPACE, "too deep");
	check("{% set ns = namespace(x=[]) %}{% for i in range(5000) %}"
	    "{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x == ns.x }}", "False");
	check_err("{% for i in range(1000000) %}{% for j in range(1000000) %}"
	    "{% endfor %}{% endfor %}", MEDHA_ENOSPACE, "more than");
	check_err("{% set r = range(10000) %}{% for i in r %}{% for j in r %}"
	    "{% endfor %}{% endfor %}", MEDHA_ENOSPACE, "steps");
	check_err("{{ range(100000000) }}", MEDHA_ENOSPACE, "range");
	check_err("{% for i in range(1000000) %}{{ 'xxxxxxxxxxxxxxxxxxxxxxxxxx"
	    "xxxxxxxxxxxxxxxxxxxxxx' }}{% endfor %}", MEDHA_ENOSPACE,
	    "output longer");
	check_err("{% set ns = namespace(s='x') %}{% for i in range(100) %}"
	    "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
	    MEDHA_ENOSPACE, "bytes");
	check_err("{{ 2 ** 100000000000 }}", MEDHA_ERANGE, "overflow");
	check("{{ 1 ** 100000000000 }}", "1");
	check_err("{% if 1 %}{% for x in y %}{% endif %}", MEDHA_EFORMAT,
	    "unexpected tag");
	check_err("{{ '\\x4' }}", MEDHA_EFORMAT, "truncated");
	check_err("{{ '\\N{DASH}' }}", MEDHA_EUNSUP, "\\N");
	check_err("{% %}", MEDHA_EFORMAT, "tag name");
	check_err("{{ }}", MEDHA_EFORMAT, "unexpected");
	check_err("{{ @ }}", MEDHA_EFORMAT, "unexpected character");
}

/* Every prefix of a real template parses or fails cleanly. */
static void
test_prefixes(void **state)
{
	const char *src = "{%- set ns = namespace(i=0) %}{% for m in messages "
	    "if m.role != 'x' %}{{- '<|' ~ m['role'] ~ '|>\\n' + m.content|"
	    "trim }}{% if not loop.last %}{{ ', ' }}{% endif %}{% set ns.i = "
	    "ns.i + 1 %}{% endfor %}{# end #}{{ ns.i if ns.i > 0 else 'none' }}";
	size_t n, len = strlen(src);
	char why[256];

	(void)state;
	for (n = 0; n <= len; n++) {
		struct medha_jinja *j;
		char *out;
		size_t olen;

		if (medha_jinja_parse(&j, src, n, why, sizeof(why)) != 0)
			continue;
		if (medha_jinja_render(j, conv, 4, 1, "<s>", "</s>", &out,
		    &olen, why, sizeof(why)) == 0)
			free(out);
		medha_jinja_free(j);
	}
}

/* ------------------------------------------------------------ --ref */

static int
ref(const char *path)
{
	json_error_t jerr;
	json_t *doc = json_load_file(path, JSON_ALLOW_NUL, &jerr), *cases,
	       *c, *tmpls;
	size_t i, k, ncase = 0, differ = 0, ntmpl;
	const char *name;
	int convs = 0;

	if (doc == NULL) {
		fprintf(stderr, "%s: %s\n", path, jerr.text);
		return 2;
	}
	tmpls = json_object_get(doc, "templates");
	cases = json_object_get(doc, "cases");
	ntmpl = json_object_size(tmpls);
	json_array_foreach(cases, i, c) {
		json_t *msgs = json_object_get(c, "messages"), *m, *want, *raised;
		struct medha_jinja_msg mv[16];
		struct medha_jinja *j;
		const char *src;
		char why[512] = "", *out = NULL;
		size_t len = 0, nm = 0;
		int rc, conv = (int)json_integer_value(json_object_get(c,
		    "conversation"));

		name = json_string_value(json_object_get(c, "template"));
		src = json_string_value(json_object_get(tmpls, name));
		if (conv + 1 > convs)
			convs = conv + 1;
		json_array_foreach(msgs, k, m) {
			json_t *ct = json_object_get(m, "content");

			if (nm == 16)
				break;
			mv[nm].role = json_string_value(json_object_get(m,
			    "role"));
			mv[nm].content = json_string_value(ct);
			mv[nm++].len = json_string_length(ct);
		}
		ncase++;
		rc = medha_jinja_parse(&j, src, strlen(src), why, sizeof(why));
		if (rc == 0) {
			rc = medha_jinja_render(j, mv, nm,
			    json_is_true(json_object_get(c,
			    "add_generation_prompt")),
			    json_string_value(json_object_get(c, "bos_token")),
			    json_string_value(json_object_get(c, "eos_token")),
			    &out, &len, why, sizeof(why));
			medha_jinja_free(j);
		}
		want = json_object_get(c, "output");
		raised = json_object_get(c, "raised");
		if (json_is_string(want) && rc == 0 &&
		    json_string_length(want) == len &&
		    memcmp(json_string_value(want), out, len) == 0) {
			free(out);
			continue;
		}
		if (!json_is_string(want) && rc != 0 && (!json_is_string(raised) ||
		    (rc == MEDHA_EINVAL && strcmp(why,
		    json_string_value(raised)) == 0))) {
			free(out);
			continue;
		}
		if (differ++ < 10) {
			printf("  %s conversation %d add_generation_prompt=%d:\n",
			    name, conv, json_is_true(json_object_get(c,
			    "add_generation_prompt")));
			if (rc == 0)
				printf("    ours   %s\n", out);
			else
				printf("    ours   error: %s\n", why);
			if (json_is_string(want))
				printf("    jinja2 %s\n", json_string_value(want));
			else
				printf("    jinja2 error: %s\n",
				    json_is_string(raised) ?
				    json_string_value(raised) :
				    json_string_value(json_object_get(c,
				    "error")));
		}
		free(out);
	}
	printf("jinja: %zu templates x %d conversations x 2 "
	    "(add_generation_prompt), %zu renders, %zu differ from jinja2\n",
	    ntmpl, convs, ncase, differ);
	json_decref(doc);
	return differ != 0;
}

int
main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_basics),
		cmocka_unit_test(test_control),
		cmocka_unit_test(test_whitespace),
		cmocka_unit_test(test_filters),
		cmocka_unit_test(test_tests),
		cmocka_unit_test(test_raise_and_date),
		cmocka_unit_test(test_bytes),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_hostile),
		cmocka_unit_test(test_prefixes),
	};

	if (argc == 3 && strcmp(argv[1], "--ref") == 0)
		return ref(argv[2]);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
