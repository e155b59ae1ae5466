"""The replay test's pynsq consumer (not a pytest module): an unmodified
pynsq Reader on one channel, nsqds found through nsqlookupd, that writes a
line `F <message id> <attempts> <body>` once it has handled a message and
pynsq sends FIN. Each message takes `--work-ms` (so a test can stop its
nsqd part-way). SIGTERM closes the Reader and exits.

    replay_reader.py --topic T --channel C --lookupd-http-address H:P \
        --out FILE [--work-ms 20] [--max-in-flight 2]
"""

import argparse
import logging
import os
import signal

import nsq
import tornado.ioloop


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--topic", required=True)
    p.add_argument("--channel", required=True)
    p.add_argument("--lookupd-http-address", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--work-ms", type=float, default=20.0)
    p.add_argument("--max-in-flight", type=int, default=2)
    a = p.parse_args()

    logging.basicConfig(level=logging.INFO, format="[replay_reader.py] %(asctime)s %(levelname)s %(message)s")
    fd = os.open(a.out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    loop = tornado.ioloop.IOLoop.current()

    def finish(message):
        message.finish()
        # One write per line: whole on disk even if the process is killed.
        line = "F %s %d %s\n" % (message.id.decode(), message.attempts, message.body.decode())
        os.write(fd, line.encode())

    def handle(message):
        message.enable_async()
        loop.call_later(a.work_ms / 1000.0, finish, message)

    reader = nsq.Reader(
        topic=a.topic,
        channel=a.channel,
        message_handler=handle,
        lookupd_http_addresses=[a.lookupd_http_address],
        lookupd_poll_interval=1,
        max_in_flight=a.max_in_flight,
        max_tries=0,
    )

    def stop(*_):
        reader.close()
        loop.add_callback_from_signal(loop.stop)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    loop.start()


if __name__ == "__main__":
    main()
