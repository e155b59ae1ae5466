"""The cluster fault test's pynsq consumer host (not a pytest module).

The same ledger as `nsq_ledger consume` (see apps/nsq_ledger/src/ledger.rs),
written by the official Python client: one pynsq Reader per channel, nsqds
found through nsqlookupd only, an `R` line for every delivery (with its
attempt count and the nsqd that sent it) and an `F` line when the handler is
done and pynsq sends FIN. SIGTERM closes the Readers and exits.

    ledger_consumer.py --topic T --channel A --channel B --ledger FILE \
        --lookupd-http-address 10.18.0.11:4161 ... [--max-in-flight 50] \
        [--lookupd-poll-interval 5] [--heartbeat-interval 5] [--max-work-ms 5]
"""

import argparse
import logging
import os
import random
import signal
import time

import nsq
import tornado.ioloop


class LedgerReader(nsq.Reader):
    """A Reader that remembers which nsqd delivered each message.

    pynsq hands the handler only the message; the connection is known in
    `_on_message`, so it is attached to the message there."""

    def _on_message(self, conn, message, **kwargs):
        message.nsqd_address = conn.id
        return super()._on_message(conn, message, **kwargs)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--topic", required=True)
    p.add_argument("--channel", action="append", required=True)
    p.add_argument("--lookupd-http-address", action="append", required=True)
    p.add_argument("--ledger", required=True)
    p.add_argument("--max-in-flight", type=int, default=50)
    p.add_argument("--lookupd-poll-interval", type=int, default=5)
    p.add_argument("--heartbeat-interval", type=int, default=5)
    p.add_argument("--max-work-ms", type=float, default=5.0)
    a = p.parse_args()

    logging.basicConfig(level=logging.INFO, format="[ledger_consumer.py] %(asctime)s %(levelname)s %(message)s")
    # Two heartbeat lines a second would bury what matters when the test
    # prints this log after a failure.
    for h in logging.getLogger().handlers:
        h.addFilter(lambda r: "received heartbeat" not in r.getMessage())
    fd = os.open(a.ledger, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(line):
        # One write per line: whole on disk even if the process is killed.
        os.write(fd, (line + "\n").encode())

    loop = tornado.ioloop.IOLoop.current()
    readers = []

    def handler_for(channel):
        def finish(message):
            write("F %s %s %d" % (channel, message.body.split(b" ", 1)[0].decode(errors="replace"), time.time_ns()))
            message.finish()

        def handle(message):
            msg_id = message.body.split(b" ", 1)[0].decode(errors="replace")
            write("R %s %s %d %d %s" % (channel, msg_id, time.time_ns(), message.attempts, message.nsqd_address))
            message.enable_async()
            loop.call_later(random.uniform(0, a.max_work_ms) / 1000.0, finish, message)

        return handle

    for channel in a.channel:
        readers.append(
            LedgerReader(
                topic=a.topic,
                channel=channel,
                message_handler=handler_for(channel),
                lookupd_http_addresses=list(a.lookupd_http_address),
                lookupd_poll_interval=a.lookupd_poll_interval,
                max_in_flight=a.max_in_flight,
                heartbeat_interval=a.heartbeat_interval,
                max_tries=0,
            )
        )

    def stop(*_):
        for r in readers:
            r.close()
        loop.add_callback_from_signal(loop.stop)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    loop.start()


if __name__ == "__main__":
    main()
