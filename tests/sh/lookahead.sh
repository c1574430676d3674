#!/bin/sh
# lookahead.sh: medha-worker --lookahead (running the likely next decode
# step while its RESULT makes the round trip) where a live scheduler
# rarely takes it: tests/tools/lookahead_sched, a scripted scheduler,
# gives a worker of two KV blocks a batch that does not use the step run
# ahead, which then must give its KV block back (the batch after needs
# it), and a step ahead that finds no block must take none; then a batch
# that uses the step run ahead and adds a new prompt, and one that uses
# it for one of its two sequences. The tokens must be those of the same
# worker with --no-lookahead. The live checks (16 requests at once give
# medha-worker -p's tokens, steps run ahead are used) are in
# live-single.sh. Needs contrib/fetch-refs.sh.
. "$(dirname "$0")/lib.sh"
need_model

# run the script against a worker with flags $1; tokens into $tmp/$2
script() {
	addr=ipc://$tmp/$2.sock
	"$bin/medha-worker" -s "$addr" -m "$model" -t 2 --kv-blocks 2 \
	    --max-seqs 4 -v $1 2>"$tmp/$2.log" &
	worker=$!
	if ! "$tools/lookahead_sched" "$addr" >"$tmp/$2" 2>"$tmp/$2.err"; then
		echo "lookahead_sched against medha-worker $1:"
		cat "$tmp/$2.err" "$tmp/$2.log"
		exit 1
	fi
	kill -TERM "$worker"
	wait "$worker" || true
	no_sanitizer_report "$tmp/$2.log"
}

script --lookahead ahead
script --no-lookahead plain
read -r a b c _ <"$tmp/ahead"
if [ "$(cat "$tmp/ahead")" != "$(cat "$tmp/plain")" ] || [ "$a" != "$c" ]; then
	echo "tokens: with lookahead $(cat "$tmp/ahead"), without" \
	    "$(cat "$tmp/plain") (the first and third prompts are the same)"
	exit 1
fi
# a step was run ahead after each batch (the second's found no block);
# batch 5 used the one after batch 4 in part (E, with D run), batch 6
# the one after batch 5 in part (D, E left out)
grep -q "stopped after 7 batches (2 of 7 steps run ahead used)" \
    "$tmp/ahead.log" || { cat "$tmp/ahead.log"; exit 1; }
grep -q "stopped after 7 batches (0 of 0 steps run ahead used)" \
    "$tmp/plain.log" || { cat "$tmp/plain.log"; exit 1; }
echo "lookahead: ok (tokens $(cat "$tmp/ahead"))"
