#!/bin/sh
# router-long-prompt.sh: a 16 MB text prompt through the router holds
# nothing back (issue 38). A router that tokenizes text (-m: SmolLM2's
# tokenizer) in front of one replica (a sim worker);
# tests/tools/long_prompt, a client of the protocol (net/pcli.h), sends
# five short text requests at once; then, while a long request streams,
# a 16 MB text prompt on a connection of its own and, just after the
# router accepted it (its tokenizer's thread has it), the five short
# requests again (the router tokenizes each on its loop, tens of
# microseconds); once they have their first tokens, while the router
# still tokenizes the long prompt, a CANCEL of the long request; once
# that has ended, a CANCEL of the long prompt itself, still being
# tokenized. The short ones get their first tokens (TTFT as their
# records say, on the router's clock) as fast as alone: within twice
# the slowest alone plus 0.1 s (a loaded machine; on an idle one they
# take about a millisecond, as alone); each CANCEL ends its request
# ("cancelled") within 0.1 s of being sent (the long prompt's at once:
# the router does not wait for its tokens). Before issue 38 the short
# ones waited seconds: the router's sender waited on each SUBMIT's
# answer, and the replica answered the long prompt's only once
# tokenized. A replica asked directly (no router) acknowledges a long
# text at once and tokenizes it on a thread of its own: its ACCEPTED of
# the long prompt comes in less than half the time its "rejected"
# record takes; so does the router's, whose "rejected" record then gives
# the prompt's token count against the model's context. Needs
# contrib/fetch-refs.sh (the tokenizer).
. "$(dirname "$0")/lib.sh"
need_model
mkdir -p "$tmp/logs"
"$bin/medha-sched" -l "ipc://$tmp/r.sock" -m "$model" \
    2>"$tmp/logs/sched.log" &
"$bin/medha-worker" -s "ipc://$tmp/r.sock" --backend sim --gpu a100 \
    -m "$model" --speed 10 2>"$tmp/logs/worker.log" &
"$bin/medha-router" -l "ipc://$tmp/router.sock" -r "ipc://$tmp/r.sock" \
    -m "$model" 2>"$tmp/logs/router.log" &
wait_for "$tmp/logs/router.log" 'ready: ' 60
# the replica itself acknowledges the long prompt before tokenizing it:
# its ACCEPTED within a small part of the time to its record
"$tools/long_prompt" "ipc://$tmp/r.sock" $((16 << 20)) --ack >"$tmp/ack"
read -r _ ack rec status reason <"$tmp/ack"
echo "router-long-prompt: the replica accepted 16 MB of text after" \
    "$ack ms, its record ($status: $reason) came after $rec ms"
[ "$status" = 1 ] && awk -v a="$ack" -v r="$rec" 'BEGIN { exit !(a >= 0 && a < r / 2) }' ||
    { echo "not acknowledged before it was tokenized"; exit 1; }
# the router too, and once tokenized it refuses it with the counts
"$tools/long_prompt" "ipc://$tmp/router.sock" $((16 << 20)) --ack >"$tmp/rack"
read -r _ ack rec status reason <"$tmp/rack"
echo "router-long-prompt: the router accepted 16 MB of text after" \
    "$ack ms, its record ($status: $reason) came after $rec ms"
[ "$status" = 1 ] && awk -v a="$ack" -v r="$rec" 'BEGIN { exit !(a >= 0 && a < r / 2) }' ||
    { echo "not acknowledged before it was tokenized"; exit 1; }
case $reason in
*" prompt + 1 output tokens exceed the model's context of "*) ;;
*) echo "not refused by its token count"; exit 1 ;;
esac
"$tools/long_prompt" "ipc://$tmp/router.sock" $((16 << 20)) >"$tmp/out" ||
    { cat "$tmp/out" "$tmp/logs/router.log"; exit 1; }
python3 - "$tmp/out" <<'PY'
import sys
lines = dict((l.split()[0], l.split()[1:]) for l in open(sys.argv[1]))
alone = [float(x) for x in lines["alone"]]
after = [float(x) for x in lines["after"]]
cancel = float(lines["cancel"][0])
cancel_long = float(lines["cancel_long"][0])
bound = 2 * max(alone) + 100
ms = lambda k: " ".join("%.1f" % float(x) for x in lines[k])
print("router-long-prompt: TTFT alone %s ms, after a 16 MB prompt %s ms "
      "(bound %.1f; the client saw %s and %s); CANCEL took %.1f ms, the "
      "long prompt's own %.1f ms; the long prompt: %s" % (ms("alone"),
      ms("after"), bound, ms("alone_client"), ms("after_client"), cancel,
      cancel_long,
      " ".join(lines["long"][1:]) or lines["long"][0]))
assert max(after) <= bound, (after, bound)
assert lines["cancel"][1:] == ["3", "during"], lines["cancel"]
assert cancel <= 100, cancel
assert lines["cancel_long"][1:] == ["3", "during"], lines["cancel_long"]
assert cancel_long <= 100, cancel_long
PY
