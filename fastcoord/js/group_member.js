'use strict'
/**
 * One member of a consumer group, run by kafkajs as an application would run it, for tests
 * that drive it from another language (fastcoord.testing_kafkajs). kafkajs comes from
 * NODE_PATH: the cache directory where fastcoord.testing_kafkajs installed it.
 *
 * Usage: node group_member.js CONFIG, CONFIG being one JSON object: brokers (a list of
 * HOST:PORT), topics, groupId, clientId, and optionally sessionTimeout, heartbeatInterval,
 * rebalanceTimeout (ms), logLevel (ERROR, WARN, INFO or DEBUG; WARN when absent) and
 * consumer, any other kafkajs consumer options, which win.
 *
 * Each event is one JSON object a line on stdout, its kind in `event`:
 *   joined     {memberId, leaderId, isLeader, groupProtocol, assignment: {TOPIC: [P, ...]}}
 *              (GROUP_JOIN, after each JoinGroup and SyncGroup; kafkajs's assignor is eager,
 *              so each assignment is the whole of what the member holds)
 *   heartbeat  {memberId, generation}: the first heartbeat the coordinator accepted in a
 *              generation (kafkajs sends its own; a heartbeat is accepted only in the
 *              generation the group is at), so the generation of the last assignment
 *   fetching   {topic, partition, offset}: the first Fetch offset of a partition after
 *              each join, where the member consumes from (its committed offset, or the
 *              reset position when it has none)
 *   rebalancing {memberId}, crash {error, restart}: as kafkajs reports them
 *   committed  {id, topic, partition, offset}, fetched {id, topic, offsets: {P: OFFSET}}
 *              (-1: none): answers to commands; error {id, command, error} when one failed
 *   closed     {}: once consumer.disconnect() has returned (it left its group)
 * Offsets are strings, as kafkajs has them (int64).
 *
 * Commands come one JSON object a line on stdin, run one after another:
 *   {"id": 1, "command": "commit", "topic": T, "partition": P, "offset": N}
 *       consumer.commitOffsets, with the member's generation
 *   {"id": 2, "command": "fetch", "topic": T}   admin.fetchOffsets of the group
 *   {"command": "close"}
 * The end of stdin closes too, so a member whose driver died leaves its group. kafkajs's
 * own log lines go to stderr, one JSON object each, never to stdout.
 */

const readline = require('readline')
const { Kafka, logLevel: LogLevel } = require('kafkajs')
// Not kafkajs's public API: the Broker class whose fetch() every Fetch request goes through,
// the one place that says which offset a member consumes from (its batches of an empty
// partition never reach eachBatch). The version is pinned by fastcoord.testing_kafkajs.
const Broker = require('kafkajs/src/broker')

function emit(event, fields = {}) {
  // Pipes are written synchronously on Linux: a line is out before process.exit().
  process.stdout.write(JSON.stringify({ event, ...fields }) + '\n')
}

function describe(error) {
  if (!(error instanceof Error)) return String(error)
  return error.type ? `${error.name} (${error.type}): ${error.message}` : `${error.name}: ${error.message}`
}

function main() {
  if (process.argv.length !== 3) {
    process.stderr.write('usage: node group_member.js CONFIG_JSON\n')
    process.exit(2)
  }
  const config = JSON.parse(process.argv[2])
  const level = LogLevel[(config.logLevel || 'WARN').toUpperCase()]
  if (level === undefined) {
    process.stderr.write(`unknown logLevel ${config.logLevel}\n`)
    process.exit(2)
  }

  const kafka = new Kafka({
    clientId: config.clientId,
    brokers: config.brokers,
    logLevel: level,
    logCreator: () => ({ namespace, label, log }) => {
      process.stderr.write(JSON.stringify({ level: label, namespace, ...log }) + '\n')
    },
  })
  const options = { groupId: config.groupId }
  for (const key of ['sessionTimeout', 'heartbeatInterval', 'rebalanceTimeout']) {
    if (config[key] != null) options[key] = config[key]
  }
  const consumer = kafka.consumer({ ...options, ...(config.consumer || {}) })
  const admin = kafka.admin()
  let adminConnected = null

  // Fetch offsets: the first of each partition since the last join.
  let fetched = new Set()
  const fetch = Broker.prototype.fetch
  Broker.prototype.fetch = function (request) {
    for (const { topic, partitions } of request.topics || []) {
      for (const { partition, fetchOffset } of partitions) {
        const key = `${topic}\0${partition}`
        if (!fetched.has(key)) {
          fetched.add(key)
          emit('fetching', { topic, partition, offset: String(fetchOffset) })
        }
      }
    }
    return fetch.call(this, request)
  }

  let generation = null
  const { GROUP_JOIN, HEARTBEAT, REBALANCING, CRASH } = consumer.events
  consumer.on(GROUP_JOIN, ({ payload }) => {
    generation = null
    fetched = new Set()
    const { memberId, leaderId, isLeader, groupProtocol, memberAssignment } = payload
    emit('joined', { memberId, leaderId, isLeader, groupProtocol, assignment: memberAssignment })
  })
  consumer.on(HEARTBEAT, ({ payload }) => {
    if (payload.groupGenerationId !== generation) {
      generation = payload.groupGenerationId
      emit('heartbeat', { memberId: payload.memberId, generation })
    }
  })
  consumer.on(REBALANCING, ({ payload }) => emit('rebalancing', { memberId: payload.memberId }))
  consumer.on(CRASH, ({ payload }) =>
    emit('crash', { error: describe(payload.error), restart: payload.restart })
  )

  // Started at once; a close waits for the first join (or its failure) to be over, as a
  // consumer stopped while joining would not leave its group.
  const running = consumer
    .connect()
    .then(() => consumer.subscribe({ topics: config.topics, fromBeginning: true }))
    .then(() =>
      // Offsets move only when the driver says so.
      consumer.run({ autoCommit: false, eachBatch: async () => {} })
    )
    .catch(error => emit('error', { id: null, command: 'run', error: describe(error) }))

  async function run(command) {
    const { id = null, topic, partition, offset } = command
    if (command.command === 'commit') {
      await consumer.commitOffsets([{ topic, partition, offset: String(offset) }])
      emit('committed', { id, topic, partition, offset: String(offset) })
    } else if (command.command === 'fetch') {
      adminConnected = adminConnected || admin.connect()
      await adminConnected
      const answer = await admin.fetchOffsets({ groupId: config.groupId, topics: [topic] })
      const offsets = {}
      for (const t of answer) {
        for (const p of t.partitions) offsets[p.partition] = String(p.offset)
      }
      emit('fetched', { id, topic, offsets })
    } else {
      throw new Error('unknown command')
    }
  }

  let closing = null
  async function close() {
    let code = 0
    await running
    for (const [what, done] of [
      ['consumer', () => consumer.disconnect()],
      ['admin', () => (adminConnected ? admin.disconnect() : null)],
    ]) {
      try {
        await done()
      } catch (error) {
        emit('error', { id: null, command: `close ${what}`, error: describe(error) })
        code = 1
      }
    }
    emit('closed')
    process.exit(code)
  }

  // One command at a time, in the order they came.
  let queue = Promise.resolve()
  const lines = readline.createInterface({ input: process.stdin, terminal: false })
  lines.on('line', line => {
    if (!line.trim() || closing) return
    let command
    try {
      command = JSON.parse(line)
    } catch (error) {
      emit('error', { id: null, command: line, error: describe(error) })
      return
    }
    if (command.command === 'close') {
      closing = queue.then(close)
      return
    }
    queue = queue.then(() =>
      run(command).catch(error =>
        emit('error', { id: command.id ?? null, command: command.command, error: describe(error) })
      )
    )
  })
  lines.on('close', () => {
    closing = closing || queue.then(close)
  })
}

main()
