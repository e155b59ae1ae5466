// The replication client test's nsqjs consumer (tests/tests/replication/clients.rs):
// an unmodified nsqjs Reader on one channel, nsqds found through nsqlookupd
// only, that writes a line `F <message id> <attempts> <body>` once it has
// handled a message and sent FIN. SIGTERM closes the Reader and exits.
//
//   node reader.js TOPIC CHANNEL LOOKUPD_HTTP_ADDRESS OUT_FILE [MAX_IN_FLIGHT]
'use strict'

const fs = require('fs')
const nsq = require('nsqjs')

const [topic, channel, lookupd, out, maxInFlight] = process.argv.slice(2)
if (!out) {
  console.error('usage: node reader.js TOPIC CHANNEL LOOKUPD_HTTP_ADDRESS OUT_FILE [MAX_IN_FLIGHT]')
  process.exit(2)
}
const fd = fs.openSync(out, 'a')
const log = (...a) => console.error(`[reader.js] ${new Date().toISOString()}`, ...a)

const reader = new nsq.Reader(topic, channel, {
  lookupdHTTPAddresses: [lookupd],
  lookupdPollInterval: 1,
  maxInFlight: Number(maxInFlight || 20),
  maxAttempts: 0,
})
reader.on('message', (msg) => {
  msg.finish()
  // One write per line: whole on disk even if the process is killed.
  fs.writeSync(fd, `F ${msg.id} ${msg.attempts} ${msg.body.toString()}\n`)
})
// A member that does not lead the topic's group refuses the SUB, and members
// come and go: each is logged; the Reader finds the nsqds again through
// nsqlookupd. (An 'error' event without a listener would end the process.)
reader.on('error', (err) => log('error:', String(err)))
reader.on('nsqd_connected', (host, port) => log(`connected to ${host}:${port}`))
reader.on('nsqd_closed', (host, port) => log(`closed ${host}:${port}`))
const stop = () => {
  reader.close()
  setTimeout(() => process.exit(0), 200)
}
process.on('SIGTERM', stop)
process.on('SIGINT', stop)
reader.connect()
