'use strict';
// RedisPacer: the Pacer's interface over one bucket in Redis, shared by every
// process of a fleet (SPEC §12; docs/redis.md, docs/fleet-clients.md). The
// decision is made inside the server by the module, the function or the
// script, all on the server's clock; this file sends the call, reads the
// reply, and answers by the failure policy when Redis cannot.
//
// The local fallback is pacer.js's Pacer, with its tickets and bookings.

const crypto = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');
const { sleep } = require('./wait.js');
const { checkKey } = require('./bookings.js');
const { native, outcomeCode } = require('./native.js');
const {
  Pacer, Ticket, Booking, describe, monotonicNow, defaultSchedule, abortReason, waitBucketOf, WAIT_BOUNDS_MS,
} = require('./pacer.js');

const ENGINES = ['auto', 'module', 'function', 'script'];
const POLICIES = ['local', 'open', 'closed'];

/** The codes of error replies that say the server cannot serve now. */
const OUTAGE_CODES = new Set(['LOADING', 'BUSY', 'MASTERDOWN', 'READONLY', 'CLUSTERDOWN', 'TRYAGAIN', 'OOM',
  'NOREPLICAS', 'MISCONF']);
const UNKNOWN_COMMAND = "ERR unknown command '";

const DEFAULT_TIMEOUT_MS = 1000;
const DEFAULT_RETRY_AFTER_MS = 1000;

// ---------------------------------------------------------------- the script

let script;

/** The package's copy of redis/pacer.lua (bytes as shipped) and its SHA1. */
function pacerScript() {
  if (script === undefined) {
    const text = fs.readFileSync(path.join(__dirname, 'pacer.lua'));
    script = { text, sha: crypto.createHash('sha1').update(text).digest('hex') };
  }
  return script;
}

// ---------------------------------------------------------------- small helpers

function wholeOption(field, value, fallback, min, max) {
  if (value === undefined) return fallback;
  if (typeof value !== 'number') {
    throw new TypeError(`pacer: ${field} must be a number, got ${describe(value)}`);
  }
  if (!Number.isSafeInteger(value) || value < min || value > max) {
    throw new RangeError(`pacer: ${field} must be a whole number between ${min} and ${max}, got ${value}`);
  }
  return value;
}

function choiceOption(field, value, choices) {
  if (value === undefined) return choices[0];
  if (typeof value !== 'string') {
    throw new TypeError(`pacer: ${field} must be one of ${choices.join(', ')}, got ${describe(value)}`);
  }
  if (!choices.includes(value)) {
    throw new RangeError(`pacer: ${field} must be one of ${choices.join(', ')}, got ${describe(value)}`);
  }
  return value;
}

/** `promise`, or a rejection with the signal's reason as soon as `signal`
 * aborts before it settles (then `onAbort()` is called; the promise goes
 * on). */
function untilAborted(promise, signal, onAbort) {
  if (signal === undefined) return promise;
  return new Promise((resolve, reject) => {
    const abort = () => {
      onAbort();
      reject(abortReason(signal));
    };
    // Settled: an abort from now on is the caller's to see, not this wait's.
    const settle = (end) => (value) => {
      signal.removeEventListener('abort', abort);
      end(value);
    };
    signal.addEventListener('abort', abort, { once: true });
    promise.then(settle(resolve), settle(reject));
  });
}

function closedError() {
  const error = new Error('pacer: this Redis pacer is closed: close() was called on it');
  error.code = 'ERR_PACER_CLOSED';
  return error;
}

/** An error reply from the server (node-redis's ErrorReply and its kinds). */
function isErrorReply(error) {
  const name = error?.constructor?.name;
  return name === 'ErrorReply' || name === 'SimpleError' || name === 'BlobError';
}

/**
 * The class of an error reply's text (docs/fleet-clients.md, "Which replies
 * are failures"): 'outage' (the failure policy answers), 'engine' (the
 * engine in use is gone: find it again and retry once) or 'pacer' (an error
 * to the caller). Internal: exported for the tests only.
 */
function classifyReply(replyText) {
  const words = replyText.split(' ', 2);
  // Redis prefixes with `ERR ` the error a script's redis.call raised.
  const code = words[0] === 'ERR' && OUTAGE_CODES.has(words[1]) ? words[1] : words[0];
  if (OUTAGE_CODES.has(code)) return 'outage';
  if (code === 'NOSCRIPT' || replyText.startsWith('ERR Function not found')) return 'engine';
  if (replyText.startsWith(UNKNOWN_COMMAND)
    && replyText.slice(UNKNOWN_COMMAND.length, UNKNOWN_COMMAND.length + 6).toLowerCase() === 'pacer.') {
    return 'engine';
  }
  return 'pacer';
}

/** The class of what a call to Redis threw: an error reply by its text; a
 * reply this client does not recognise is a pacer error; anything else
 * (refused, lost or closed connection, no reply by the deadline) an outage. */
function failureClass(error) {
  if (isErrorReply(error)) return classifyReply(String(error.message ?? ''));
  if (error?.code === 'ERR_PACER_REDIS') return 'pacer';
  return 'outage';
}

/** The call took longer than the timeout. */
class RedisTimeout extends Error {
  constructor(ms) {
    super(`no reply from Redis within ${ms} ms`);
  }
}

/** Rejects with RedisTimeout when `promise` has not settled by `deadline`;
 * sets `call.expired` then, when given. */
function beforeDeadline(promise, deadline, call = undefined) {
  const ms = Math.max(0, deadline - monotonicNow());
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => {
      if (call) call.expired = true;
      reject(new RedisTimeout(ms));
    }, ms);
  });
  // A reply or an error after the deadline is dropped.
  promise.catch(() => {});
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

/** A field of one entry of MODULE LIST or FUNCTION LIST, in RESP2 (a flat
 * array) or RESP3 (a map, as a Map or an object). */
function field(entry, name) {
  if (Array.isArray(entry)) {
    for (let i = 0; i + 1 < entry.length; i += 2) {
      if (String(entry[i]) === name) return entry[i + 1];
    }
    return undefined;
  }
  if (entry instanceof Map) return entry.get(name);
  if (typeof entry === 'object' && entry !== null) return entry[name];
  return undefined;
}

function text(value) {
  return Buffer.isBuffer(value) ? value.toString('utf8') : String(value);
}

/** Whether `client` is a node-redis cluster client (`createCluster()`):
 * it routes each command by a key (`sendCommand(firstKey, isReadonly,
 * args)`) and reaches each primary by `nodeClient(master)`. */
function isClusterClient(client) {
  return typeof client.nodeClient === 'function' && 'masters' in client;
}

/** The error of a cluster client that knows no primary yet (an outage). */
function noPrimaries() {
  return new Error('the Redis cluster client knows no primary');
}

// ---------------------------------------------------------------- tickets and bookings

/**
 * A ticket the server issued: its string and the key of the bucket it
 * belongs to. Released at most once through a RedisPacer (a second release
 * through the same object answers false without asking the server).
 */
class RedisTicket {
  #key;
  #text;
  #spent = false;

  constructor(key, ticketText) {
    if (typeof key !== 'string' || key === '') {
      throw new TypeError(`pacer: key must be a non-empty string, got ${describe(key)}`);
    }
    if (typeof ticketText !== 'string' || ticketText === '') {
      throw new TypeError(`pacer: ticket must be a non-empty string, got ${describe(ticketText)}`);
    }
    this.#key = key;
    this.#text = ticketText;
  }

  /** The key of the bucket that issued it. */
  get key() {
    return this.#key;
  }

  /** The server's ticket string (docs/redis.md, "Tickets"). */
  get text() {
    return this.#text;
  }

  /** Whether it was released through this object already. */
  get spent() {
    return this.#spent;
  }

  static spend(ticket) {
    ticket.#spent = true;
  }

  static isRedisTicket(value) {
    return typeof value === 'object' && value !== null && #text in value;
  }
}

/**
 * A place in line the server booked: its slot (ms on the server's clock)
 * and its ticket (the booking string). Redeem it with `redeem()` on the
 * request's retry, or release its ticket if the request ends first.
 */
class RedisBooking {
  #slotMs;
  #ticket;
  #redeemed = false;

  constructor(slotMs, ticket) {
    if (!Number.isSafeInteger(slotMs) || slotMs < 0) {
      throw new RangeError(`pacer: slotMs must be a whole number of ms, got ${describe(slotMs)}`);
    }
    if (!RedisTicket.isRedisTicket(ticket)) {
      throw new TypeError(`pacer: ticket must be a RedisTicket, got ${describe(ticket)}`);
    }
    this.#slotMs = slotMs;
    this.#ticket = ticket;
  }

  /** When the connection may open, ms on the server's clock. */
  get slotMs() {
    return this.#slotMs;
  }

  get ticket() {
    return this.#ticket;
  }

  static redeemed(booking) {
    return booking.#redeemed;
  }

  static markRedeemed(booking) {
    booking.#redeemed = true;
  }

  static isRedisBooking(value) {
    return typeof value === 'object' && value !== null && #slotMs in value;
  }
}

// ---------------------------------------------------------------- replies

// Each reply is checked against its shape in docs/redis.md: a reply of
// another shape is an error to the caller showing it (never read as an
// admission).

const PATHS = ['paced', 'shaped', 'overflow', 'disabled', 'booked'];

/** A reply item that must be a whole number (an integer, or its decimal
 * text when a client maps numbers to strings). */
function whole(reply, item) {
  const value = Buffer.isBuffer(item) ? item.toString('latin1') : item;
  if (typeof value === 'number' && Number.isSafeInteger(value) && value >= 0) return value;
  if (typeof value === 'string' && /^(0|[1-9][0-9]{0,15})$/.test(value)) return Number(value);
  throw unexpected(reply);
}

/** A reply item that must be 0 or 1, as a boolean. */
function flag(reply, item) {
  const value = whole(reply, item);
  if (value > 1) throw unexpected(reply);
  return value === 1;
}

/** A reply item that must be a non-empty string (a ticket, a path). */
function word(reply, item) {
  if ((typeof item !== 'string' && !Buffer.isBuffer(item)) || item.length === 0) throw unexpected(reply);
  return text(item);
}

/** A reply that must be an array of `length` items whose first is `kind`. */
function isShape(reply, kind, length) {
  return Array.isArray(reply) && reply.length === length && (typeof reply[0] === 'string' || Buffer.isBuffer(reply[0]))
    && text(reply[0]) === kind;
}

function admittedFrom(key, reply) {
  const waitMs = whole(reply, reply[1]);
  const ticket = reply[2] === null || reply[2] === undefined ? null : new RedisTicket(key, word(reply, reply[2]));
  const path = word(reply, reply[3]);
  if (!PATHS.includes(path)) throw unexpected(reply);
  return { kind: 'admitted', waitMs, queued: waitMs > 0, path, clockRegressed: flag(reply, reply[4]), ticket };
}

/** A RESERVE or BOOK reply as the local Pacer's answer. */
function decisionFrom(key, reply) {
  if (isShape(reply, 'admitted', 5)) return admittedFrom(key, reply);
  if (isShape(reply, 'refused', 4)) {
    return {
      kind: 'refused',
      requiredWaitMs: whole(reply, reply[2]),
      retryAfterSeconds: whole(reply, reply[1]),
      clockRegressed: flag(reply, reply[3]),
    };
  }
  if (isShape(reply, 'booked', 5)) {
    const slotMs = whole(reply, reply[3]);
    return {
      kind: 'booked',
      booking: new RedisBooking(slotMs, new RedisTicket(key, word(reply, reply[2]))),
      retryAfterSeconds: whole(reply, reply[1]),
      clockRegressed: flag(reply, reply[4]),
    };
  }
  throw unexpected(reply);
}

function unexpected(reply) {
  const error = new Error(`pacer: unexpected reply from Redis: ${JSON.stringify(reply)}`);
  error.code = 'ERR_PACER_REDIS';
  return error;
}

/** The server's INFO pairs as an object with camelCase names. */
function infoFrom(reply) {
  if (!Array.isArray(reply) || reply.length % 2 !== 0) throw unexpected(reply);
  const info = {};
  for (let i = 0; i + 1 < reply.length; i += 2) {
    const name = text(reply[i]).replace(/_([a-z])/g, (_, c) => c.toUpperCase());
    const value = reply[i + 1];
    info[name] = typeof value === 'number' ? value : text(value);
  }
  return info;
}

// ---------------------------------------------------------------- the pacer

const CONNECT_TOKEN = Symbol('pacer.redisConnect');

/**
 * A pacer whose bucket lives in one Redis key: every process that uses the
 * same key and configuration paces against one bucket, decided on the
 * server's clock. Made by `RedisPacer.connect(options)`; every call is async.
 */
class RedisPacer {
  #client;
  #ownClient;
  /** Whether #client is a cluster client: keyed commands go by its routing
   * (it follows MOVED and ASK), keyless ones to every primary. */
  #cluster = false;
  /** A connect() of the pacer's own cluster client in flight. */
  #connecting = null;
  #key;
  /** The local Pacer of the same configuration: checks it, gives mode and
   * bound, and answers when the mode is `disabled`. */
  #configPacer;
  /** The configuration arguments of RESERVE and BOOK, and `ADAPT floor
   * ceiling` (docs/redis.md) when adaptation is on, else nothing. */
  #configArgs;
  #adaptArgs;
  #engineOption;
  #engine = null;
  #scriptLoaded = false;
  #policy;
  #fleetSize;
  #timeoutMs;
  #retryAfterMs;
  #sink;
  #registry;
  #fallback = null;
  #downUntil = -1;
  #outage = false;
  #closed = false;
  #keyed = new Map();
  #waiting = new Set();
  /** While the client is not ready: the one wait for its next 'ready' or
   * 'error' that every call shares (one pair of listeners, however many
   * calls wait), and how to stop listening. */
  #readyWait = null;
  #stopReadyWait = null;
  #onReady = () => {
    // A new connection may reach another server: ask again which engine.
    this.#engine = null;
    this.#scriptLoaded = false;
  };
  /** The answers this object got, counted as the core counts a pacer's
   * (core/src/counters.rs): a booking and a redemption's "not yet" are
   * refusals too; `waitBuckets` as `Pacer.counters()`. */
  #counters = {
    admitted: 0, admittedAfterWait: 0, refused: 0, shaped: 0, released: 0, refunded: 0,
    clockRegressions: 0, booked: 0, redeemed: 0, opened: 0, throttled: 0, waitMsTotal: 0,
    waitBuckets: WAIT_BOUNDS_MS.map(() => 0), fallbacks: 0,
  };
  /** The bucket's rate in force as the server last reported it (null: the
   * configured rate). */
  #rateReported = null;

  constructor(token, options) {
    if (token !== CONNECT_TOKEN) throw new TypeError('pacer: use RedisPacer.connect(options)');
    const { url, client, rootNodes } = options;
    if ([url, client, rootNodes].filter((given) => given !== undefined).length !== 1) {
      throw new TypeError('pacer: give exactly one of url (a redis:// URL), client (a node-redis client or '
        + 'cluster client) and rootNodes (seed nodes of a Redis Cluster)');
    }
    if (url !== undefined && typeof url !== 'string') {
      throw new TypeError(`pacer: url must be a string, got ${describe(url)}`);
    }
    if (rootNodes !== undefined && (!Array.isArray(rootNodes) || rootNodes.length === 0
      || !rootNodes.every((n) => (typeof n === 'string' && n !== '') || (typeof n === 'object' && n !== null)))) {
      throw new TypeError('pacer: rootNodes must be a non-empty array of redis:// URLs or node-redis client '
        + `options, got ${describe(rootNodes)}`);
    }
    if (client !== undefined && (typeof client !== 'object' || client === null
      || typeof client.sendCommand !== 'function')) {
      throw new TypeError(`pacer: client must be a node-redis client, got ${describe(client)}`);
    }
    if (typeof options.key !== 'string' || options.key === '') {
      throw new TypeError(`pacer: key must be a non-empty string, got ${describe(options.key)}`);
    }
    if (options.now !== undefined) {
      throw new TypeError('pacer: a Redis pacer takes no `now`: the server\'s clock decides');
    }
    this.#configPacer = new Pacer({
      ratePerMinute: options.ratePerMinute,
      burst: options.burst,
      idleTimeoutMs: options.idleTimeoutMs,
      maxRetries: options.maxRetries,
      releasePolicy: options.releasePolicy,
      adaptive: options.adaptive,
      onNotice: options.onNotice,
      noticeRegistry: options.noticeRegistry,
    });
    const config = this.#configPacer.config;
    this.#configArgs = [config.ratePerMinute, config.burst, config.idleTimeoutMs, config.maxRetries]
      .map(String).concat(config.releasePolicy);
    // The ceiling as given: 0 (the rate) when left out, as every client
    // sends it.
    const { adaptive } = this.#configPacer;
    this.#adaptArgs = adaptive === null ? [] : ['ADAPT', String(adaptive.floorPerMinute),
      String(options.adaptive.ceilingPerMinute === undefined ? 0 : adaptive.ceilingPerMinute)];
    this.#key = options.key;
    this.#engineOption = choiceOption('engine', options.engine, ENGINES);
    this.#policy = choiceOption('onFailure', options.onFailure, POLICIES);
    this.#fleetSize = wholeOption('fleetSize', options.fleetSize, 1, 1, 1000000);
    const bound = this.#configPacer.waitBoundMs;
    // A request never waits on Redis longer than the pacer could make it wait.
    const timeout = wholeOption('timeoutMs', options.timeoutMs, DEFAULT_TIMEOUT_MS, 1, Number.MAX_SAFE_INTEGER);
    this.#timeoutMs = Math.max(1, Math.min(timeout, bound));
    this.#retryAfterMs = wholeOption('retryAfterMs', options.retryAfterMs, DEFAULT_RETRY_AFTER_MS,
      0, Number.MAX_SAFE_INTEGER);
    this.#sink = options.onNotice ?? ((notice) => process.stderr.write(`pacer: ${notice.text}\n`));
    if (typeof this.#sink !== 'function') {
      throw new TypeError(`pacer: onNotice must be a function, got ${describe(this.#sink)}`);
    }
    this.#registry = options.noticeRegistry;
    if (client !== undefined) {
      this.#client = client;
      this.#ownClient = false;
      this.#cluster = isClusterClient(client);
    } else {
      let redis;
      try {
        redis = require('redis');
      } catch (error) {
        throw new Error(`pacer: RedisPacer with ${url === undefined ? 'rootNodes' : 'a url'} needs the node-redis `
          + 'package: npm install redis', { cause: error });
      }
      // While it reconnects a call fails at once (the policy answers)
      // instead of waiting in node-redis's offline queue.
      const connection = {
        disableOfflineQueue: true,
        socket: {
          connectTimeout: this.#timeoutMs,
          reconnectStrategy: (retries) => Math.min(50 * 2 ** Math.min(retries, 10), 500),
        },
      };
      if (url !== undefined) {
        this.#client = redis.createClient({ url, ...connection });
      } else {
        // Every node's connection (the seeds' and the ones discovered) is
        // made from `defaults`.
        this.#client = redis.createCluster({
          rootNodes: rootNodes.map((n) => (typeof n === 'string' ? { url: n } : n)),
          defaults: connection,
        });
        this.#cluster = true;
      }
      this.#ownClient = true;
      // Errors reach the calls that meet them; the event needs a listener.
      this.#client.on('error', () => {});
    }
    if (typeof this.#client.on === 'function') {
      for (const event of this.#readyEvents()) this.#client.on(event, this.#onReady);
    }
  }

  /** The events after which the engine is asked again: a client's 'ready'
   * (a new connection may reach another server); a cluster client's
   * 'connect' (its topology found) and 'node-ready' (a connection to a
   * node made, a primary promoted by a failover among them). */
  #readyEvents() {
    return this.#cluster ? ['connect', 'node-ready'] : ['ready'];
  }

  /**
   * Makes a RedisPacer. `options`: `url` (a redis:// URL; the pacer makes
   * and owns its node-redis client), `rootNodes` (seed nodes of a Redis
   * Cluster, redis:// URLs or node-redis client options: the pacer makes and
   * owns a cluster client, `createCluster({ rootNodes })`) or `client` (a
   * node-redis client or cluster client of yours, which close() leaves
   * open); `key`, the bucket's key; the
   * configuration as `new Pacer()` takes it (`ratePerMinute`, `burst`,
   * `idleTimeoutMs`, `maxRetries`, `releasePolicy`, `adaptive`: sent as
   * `ADAPT floor ceiling`); `engine` ('auto',
   * 'module', 'function', 'script'); `onFailure` ('local', 'open',
   * 'closed'); `fleetSize`; `timeoutMs`; `retryAfterMs`; `onNotice` and
   * `noticeRegistry`. Resolves once the client connected, or failed to
   * connect within the timeout: a server that is down is an outage the
   * failure policy answers, not an error here.
   */
  static async connect(options) {
    if (typeof options !== 'object' || options === null) {
      throw new TypeError(`pacer: options must be an object, got ${describe(options)}`);
    }
    const pacer = new RedisPacer(CONNECT_TOKEN, options);
    await pacer.#start();
    return pacer;
  }

  async #start() {
    // A disabled configuration never asks Redis: a client made for it stays
    // unconnected.
    if (this.#configPacer.mode === 'disabled') return;
    if (!this.#client.isOpen) {
      if (this.#cluster) this.#connecting = this.#client.connect().finally(() => { this.#connecting = null; });
      else this.#client.connect().catch(() => {});
    }
    try {
      await this.#whenReady(monotonicNow() + this.#timeoutMs);
    } catch {
      // Down or slow: the first call meets it and the policy answers.
    }
  }

  /** Resolves when the client is ready; rejects on its next connection
   * error, when it is closed, or at `deadline`. */
  #whenReady(deadline) {
    const client = this.#client;
    if (client.isReady) return Promise.resolve();
    // The pacer's own cluster client connects (finds the cluster's nodes)
    // when a call needs it: at connect(), and again after a connect that
    // failed (a cluster client closes itself then).
    if (this.#cluster && this.#ownClient && !client.isOpen && this.#connecting === null && !this.#closed) {
      this.#connecting = client.connect().finally(() => { this.#connecting = null; });
    }
    if (this.#connecting !== null) return beforeDeadline(this.#connecting, deadline);
    if (!client.isOpen) return Promise.reject(new Error('the Redis client is closed'));
    const readyEvent = this.#cluster ? 'connect' : 'ready';
    if (this.#readyWait === null) {
      let onReady;
      let onError;
      this.#stopReadyWait = () => {
        client.off(readyEvent, onReady);
        client.off('error', onError);
        this.#readyWait = null;
        this.#stopReadyWait = null;
      };
      this.#readyWait = new Promise((resolve, reject) => {
        onReady = () => {
          this.#stopReadyWait();
          resolve();
        };
        onError = (error) => {
          this.#stopReadyWait();
          reject(error ?? new Error('Redis connection error'));
        };
        client.on(readyEvent, onReady);
        client.on('error', onError);
      });
    }
    return beforeDeadline(this.#readyWait, deadline);
  }

  // ---------------------------------------------------------------- getters

  /** The bucket's key. */
  get key() { return this.#key; }

  /** The configuration in force (defaults filled in), as `Pacer.config`. */
  get config() { return this.#configPacer.config; }

  /** The adaptive bounds (SPEC §14), as `Pacer.adaptive`: null when off. */
  get adaptive() { return this.#configPacer.adaptive; }

  get mode() { return this.#configPacer.mode; }

  get waitBoundMs() { return this.#configPacer.waitBoundMs; }

  get canRefuse() { return this.#configPacer.canRefuse; }

  get enabled() { return this.#configPacer.enabled; }

  /** The engine in use: 'module', 'function' or 'script'; null until a
   * call has asked the server (and again after a reconnect or a failure). */
  get engine() { return this.#engine; }

  /** The failure policy: 'local', 'open' or 'closed'. */
  get onFailure() { return this.#policy; }

  /** The timeout of a call to Redis in force, ms. */
  get timeoutMs() { return this.#timeoutMs; }

  /** Whether the last call found Redis failing (an outage not yet ended). */
  get outage() { return this.#outage; }

  get closed() { return this.#closed; }

  /** Keyed requests refused and not yet admitted or forgotten. */
  get pendingKeys() { return this.#keyed.size; }

  /** The bucket's rate in force per minute as the server last reported it
   * (an observe() reply); the configured rate before any, and always with
   * adaptation off. Asks nothing. */
  get lastRateInForce() { return this.#rateReported ?? this.#configPacer.config.ratePerMinute; }

  #open() {
    if (this.#closed) throw closedError();
  }

  // ---------------------------------------------------------------- talking to Redis

  /** Sends `op` to the engine in use; the reply, or FAILED when Redis
   * cannot answer (an outage: the caller answers by the policy). A pacer
   * error or WRONGTYPE (or any other error reply) rejects. */
  async #redis(op, args, key = this.#key) {
    if (monotonicNow() < this.#downUntil) return FAILED;
    const deadline = monotonicNow() + this.#timeoutMs;
    // A call that timed out sends nothing more (#send checks `expired`
    // before each command).
    const call = { expired: false };
    let reply;
    try {
      reply = await beforeDeadline(this.#send(key, op, args, deadline, call), deadline, call);
    } catch (error) {
      if (failureClass(error) === 'pacer') throw isErrorReply(error) ? pacerError(error) : error;
      // An outage, or the engine gone again after the retry.
      this.#failed(error);
      return FAILED;
    }
    if (this.#outage) {
      this.#outage = false;
      this.#notice('redis_recovered', `Redis answers again for the bucket '${this.#key}'; `
        + `pacing by the fleet bucket (engine ${this.#engine})`);
    }
    return reply;
  }

  #failed(error) {
    this.#downUntil = monotonicNow() + this.#retryAfterMs;
    this.#engine = null;
    this.#scriptLoaded = false;
    if (!this.#outage) {
      this.#outage = true;
      this.#notice('redis_unavailable', `Redis is unavailable for the bucket '${this.#key}' `
        + `(${error?.message ?? error}); answering by the failure policy '${this.#policy}' until it answers `
        + `again (asking again every ${this.#retryAfterMs} ms)`);
    }
  }

  /** A notice for each start and end of an outage (never deduplicated:
   * each outage is news). A throwing sink never fails a call. */
  #notice(kind, noticeText) {
    try {
      this.#sink(Object.freeze({ kind, key: `redis:${kind}:${this.#key}`, text: noticeText, raw: '',
        values: Object.freeze([]) }));
    } catch {
      // A diagnostic must never fail a request.
    }
  }

  /** Connects if needed, then sends `op` by the engine in use; all of it
   * before the call's `deadline` (#redis ends it there). */
  async #send(key, op, args, deadline, call) {
    const client = this.#client;
    const live = () => {
      if (call.expired) throw new RedisTimeout(this.#timeoutMs);
    };
    // `send(command)`: a command on the bucket's key (on a cluster, to the
    // primary that owns its slot, as the cluster client routes it and
    // follows MOVED and ASK); `send.everyPrimary(command, ask)`: a keyless
    // command, `ask(send)` on each primary (one server: the server), the
    // replies in an array.
    const send = this.#cluster
      ? (command) => {
        live();
        return client.sendCommand(key, false, command);
      }
      : (command) => {
        live();
        return client.sendCommand(command);
      };
    send.everyPrimary = this.#cluster
      ? (ask) => {
        const { masters } = client;
        if (!Array.isArray(masters) || masters.length === 0) throw noPrimaries();
        return Promise.all(masters.map(async (master) => {
          live();
          const node = await client.nodeClient(master);
          return ask((command) => {
            live();
            return node.sendCommand(command);
          });
        }));
      }
      : async (ask) => [await ask(send)];
    await this.#whenReady(deadline);
    try {
      return await this.#sendByEngine(send, key, op, args);
    } catch (error) {
      if (failureClass(error) !== 'engine') throw error;
      // The engine in use is gone (a restart or failover emptied the script
      // cache, the function was deleted, the module unloaded): ask again
      // which engine, load the script if that is the one, retry once. The
      // same class again is an outage (#redis). The script's retry is EVAL
      // of the script: on a cluster it was loaded on every primary the
      // client knows, and a replica promoted a moment ago may not be among
      // them yet (its EVALSHA would answer NOSCRIPT again).
      this.#engine = null;
      this.#scriptLoaded = false;
      return this.#sendByEngine(send, key, op, args, true);
    }
  }

  /** `op` by the engine in use (found first when not known); with
   * `carry`, the script's command is EVAL of the script itself rather than
   * EVALSHA of its SHA1. */
  async #sendByEngine(send, key, op, args, carry = false) {
    if (this.#engine === null) this.#engine = await this.#detect(send);
    if (this.#engine === 'module') {
      return send([`PACER.${op.toUpperCase()}`, key, ...args]);
    }
    if (this.#engine === 'function') {
      return send(['FCALL', 'pacer', '1', key, op, ...args]);
    }
    const { text: source, sha } = pacerScript();
    if (!this.#scriptLoaded) {
      await this.#loadScript(send, source, sha);
    }
    if (carry) return send(['EVAL', source, '1', key, op, ...args]);
    return send(['EVALSHA', sha, '1', key, op, ...args]);
  }

  /** SCRIPT LOAD on every primary (on a cluster, so that EVALSHA finds
   * the script whichever primary owns the key). */
  async #loadScript(send, source, sha) {
    const loaded = await send.everyPrimary((sendTo) => sendTo(['SCRIPT', 'LOAD', source]));
    for (const reply of loaded) {
      if (text(reply) !== sha) throw unexpected(reply);
    }
    this.#scriptLoaded = true;
  }

  /** The engine `engine: 'auto'` finds (docs/fleet-clients.md), asking
   * every primary of a cluster: the module only when every primary has it,
   * else the function only when every primary has it, else the script. A
   * server that refuses MODULE LIST or FUNCTION LIST has neither. */
  async #detect(send) {
    if (this.#engineOption !== 'auto') return this.#engineOption;
    const ask = (command) => async (sendTo) => {
      try {
        return await sendTo(command);
      } catch (error) {
        if (isErrorReply(error) && failureClass(error) !== 'outage') return [];
        throw error;
      }
    };
    const modules = await send.everyPrimary(ask(['MODULE', 'LIST']));
    if (modules.every((reply) => Array.isArray(reply)
      && reply.some((m) => text(field(m, 'name') ?? '') === 'pacer'))) {
      return 'module';
    }
    const libraries = await send.everyPrimary(ask(['FUNCTION', 'LIST', 'LIBRARYNAME', 'pacer']));
    if (libraries.every((reply) => Array.isArray(reply)
      && reply.some((l) => text(field(l, 'library_name') ?? '') === 'pacer'))) {
      return 'function';
    }
    return 'script';
  }

  // ---------------------------------------------------------------- the policy

  /** The fallback pacer: this configuration at ⌊rate/N⌋, ⌊burst/N⌋ (at
   * least 1), adaptive (SPEC §14) between the bounds so divided. */
  #local() {
    if (this.#fallback === null) {
      const c = this.#configPacer.config;
      const n = this.#fleetSize;
      const share = (value) => Math.max(1, Math.floor(value / n));
      const { adaptive } = this.#configPacer;
      this.#fallback = new Pacer({
        ratePerMinute: share(c.ratePerMinute),
        burst: share(Math.max(1, c.burst)),
        idleTimeoutMs: c.idleTimeoutMs,
        maxRetries: c.maxRetries,
        releasePolicy: c.releasePolicy,
        adaptive: adaptive === null ? undefined
          : { floorPerMinute: share(adaptive.floorPerMinute), ceilingPerMinute: share(adaptive.ceilingPerMinute) },
        onNotice: this.#sink,
        noticeRegistry: this.#registry,
      });
    }
    return this.#fallback;
  }

  /** The refusal hint of this configuration, whole seconds. */
  #hintSeconds() {
    return native.hintCapSeconds(this.#configPacer.waitBoundMs);
  }

  /** `reserve` (or `reserveOrBook` with `retriesLeft`) decided by the policy. */
  #byPolicy(retriesLeft) {
    this.#counters.fallbacks += 1;
    if (this.#policy === 'open') {
      return { kind: 'admitted', waitMs: 0, queued: false, path: 'disabled', clockRegressed: false, ticket: null,
        fallback: 'open' };
    }
    if (this.#policy === 'closed') {
      const hint = this.#hintSeconds();
      return { kind: 'refused', requiredWaitMs: hint * 1000, retryAfterSeconds: hint, clockRegressed: false,
        fallback: 'closed' };
    }
    const local = this.#local();
    const d = retriesLeft === undefined
      ? local.reserve(monotonicNow())
      : local.reserveOrBook(monotonicNow(), retriesLeft);
    return { ...d, fallback: 'local' };
  }

  /** Counts one answer (`reserve`, `reserveOrBook`, an admitting
   * `redeem`) as the core counts a decision; returns it. */
  #count(d) {
    const c = this.#counters;
    if (d.kind === 'admitted') {
      c.admitted += 1;
      if (d.waitMs > 0) {
        c.admittedAfterWait += 1;
        c.waitMsTotal += d.waitMs;
        const bucket = waitBucketOf(d.waitMs);
        if (bucket >= 0) c.waitBuckets[bucket] += 1;
      }
      if (d.path === 'shaped' || d.path === 'overflow') c.shaped += 1;
      else if (d.path === 'booked') c.redeemed += 1;
    } else {
      // A booking is a refusal on the wire, and booked.
      c.refused += 1;
      if (d.kind === 'booked') c.booked += 1;
    }
    if (d.clockRegressed) c.clockRegressions += 1;
    return d;
  }

  /** Counts a redemption's "not yet" (a refusal again); returns it. */
  #countNotYet(r) {
    this.#counters.refused += 1;
    return r;
  }

  // ---------------------------------------------------------------- the calls

  /**
   * Decides now, on the server's clock, without waiting: as `Pacer.reserve`
   * (`{kind: 'admitted', waitMs, queued, path, clockRegressed, ticket}` or
   * `{kind: 'refused', requiredWaitMs, retryAfterSeconds, clockRegressed}`),
   * with `fallback` ('open', 'closed', 'local') when the failure policy
   * decided. The ticket is a RedisTicket, or a Ticket of the local fallback.
   */
  async reserve() {
    this.#open();
    if (!this.enabled) return this.#count(this.#configPacer.reserve(monotonicNow()));
    const reply = await this.#redis('reserve', [...this.#configArgs, ...this.#adaptArgs]);
    return this.#count(reply === FAILED ? this.#byPolicy() : decisionFrom(this.#key, reply));
  }

  /**
   * As `reserve`, except that a refusal whose wait fits the horizon of the
   * request's `retriesLeft` retries books a place in the bucket's line:
   * `{kind: 'booked', booking, retryAfterSeconds, clockRegressed}` (a
   * RedisBooking; a booking of the local fallback also has
   * `requiredWaitMs`).
   */
  async reserveOrBook(retriesLeft) {
    this.#open();
    wholeOption('retriesLeft', retriesLeft, undefined, 0, 0xffffffff);
    if (retriesLeft === undefined) throw new TypeError('pacer: retriesLeft must be a number, got undefined');
    if (!this.enabled) return this.#count(this.#configPacer.reserveOrBook(monotonicNow(), retriesLeft));
    const reply = await this.#redis('book', [...this.#configArgs, String(retriesLeft), ...this.#adaptArgs]);
    return this.#count(reply === FAILED ? this.#byPolicy(retriesLeft) : decisionFrom(this.#key, reply));
  }

  /**
   * Presents a booking on the request's retry; changes nothing in the
   * bucket. `{kind: 'admitted', waitMs, queued, path: 'booked', ticket}`
   * when the slot is within the bound (`ticket` is the one the reply
   * carries; the booking is spent), else `{kind: 'booked', booking,
   * retryAfterSeconds}`. A booking already redeemed or released is a
   * RangeError. When Redis fails, the policy answers (the booking stays).
   */
  async redeem(booking) {
    this.#open();
    if (Booking.isBooking(booking)) {
      const local = this.#fallback;
      if (local === null) throw new RangeError('pacer: this booking is not from this pacer');
      const r = local.redeem(booking, monotonicNow());
      const answer = { ...r, fallback: 'local' };
      return r.kind === 'admitted' ? this.#count(answer) : this.#countNotYet(answer);
    }
    if (!RedisBooking.isRedisBooking(booking)) {
      throw new TypeError(`pacer: booking must be a booking from reserveOrBook(), got ${describe(booking)}`);
    }
    const { ticket } = booking;
    if (ticket.spent || RedisBooking.redeemed(booking)) {
      throw new RangeError('pacer: this booking was redeemed or released already');
    }
    const reply = await this.#redis('redeem', [ticket.text]);
    if (reply === FAILED) {
      const d = this.#byPolicy();
      if (d.kind === 'admitted') return this.#count(d);
      return this.#countNotYet({
        kind: 'booked', booking, retryAfterSeconds: d.retryAfterSeconds, fallback: d.fallback,
      });
    }
    if (isShape(reply, 'admitted', 5)) {
      // The redemption spent the booking; the admission's ticket is the
      // reply's (item 3), on the booking's key.
      const d = admittedFrom(ticket.key, reply);
      RedisBooking.markRedeemed(booking);
      RedisTicket.spend(ticket);
      return this.#count(d);
    }
    if (isShape(reply, 'notyet', 3)) {
      word(reply, reply[2]);
      return this.#countNotYet({ kind: 'booked', booking, retryAfterSeconds: whole(reply, reply[1]) });
    }
    throw unexpected(reply);
  }

  /**
   * Gives back an admission's debit (a ticket, or a booking's ticket) when
   * no connection will open: to the server for a RedisTicket, on the key it
   * belongs to; to the local fallback for a ticket the fallback issued.
   * True when refunded; false when the release policy refused it, when
   * this object released the ticket already, or when Redis cannot answer
   * (the debit then passes with time). A ticket the server refuses (spent
   * through another object, from another bucket) rejects with its error.
   */
  async release(ticket) {
    this.#open();
    return this.#releaseTicket(ticket);
  }

  async #releaseTicket(ticket) {
    if (Ticket.isTicket(ticket)) {
      if (this.#fallback === null) return false;
      const refunded = this.#fallback.release(ticket, monotonicNow());
      this.#counters.released += 1;
      if (refunded) this.#counters.refunded += 1;
      return refunded;
    }
    if (!RedisTicket.isRedisTicket(ticket)) {
      throw new TypeError(`pacer: ticket must be a ticket from reserve(), got ${describe(ticket)}`);
    }
    if (ticket.spent) return false;
    // On the key the ticket belongs to.
    const reply = await this.#redis('release', [ticket.text], ticket.key);
    if (reply === FAILED) return false;
    const refunded = flag(reply, reply);
    RedisTicket.spend(ticket);
    this.#counters.released += 1;
    if (refunded) this.#counters.refunded += 1;
    return refunded;
  }

  /**
   * Reports what the upstream answered to a new connection (SPEC §14),
   * 'opened' or 'throttled', to the fleet's bucket: `PACER.OBSERVE key
   * outcome` (the function's and the script's `observe`), on the server's
   * clock, so a throttle one process saw slows the whole fleet. Resolves to
   * the bucket's rate in force after it, per minute. With adaptation off (or
   * the mode disabled) nothing is sent and it resolves to the configured
   * rate, as `Pacer.observe`. While Redis cannot answer, `local` reports it
   * to the fallback pacer and resolves to that pacer's rate in force (its
   * share of the fleet's); `open` and `closed` learn nothing and resolve to
   * the configured rate. A bad outcome rejects with a TypeError.
   */
  async observe(outcome) {
    this.#open();
    outcomeCode(outcome);
    // Counted whether adaptation is on or off, and whether Redis answers.
    if (outcome === 'opened') this.#counters.opened += 1;
    else this.#counters.throttled += 1;
    const c = this.#configPacer;
    if (c.adaptive === null || !this.enabled) return c.observe(outcome, monotonicNow());
    const reply = await this.#redis('observe', [outcome]);
    if (reply === FAILED) {
      return this.#policy === 'local' ? this.#local().observe(outcome, monotonicNow()) : c.config.ratePerMinute;
    }
    this.#rateReported = whole(reply, reply);
    return this.#rateReported;
  }

  /**
   * Waits for permission to open one new connection, as `Pacer.admit`:
   * `{kind: 'admitted', waitedMs, queued, release()}` (release() resolves
   * to whether it refunded) or `{kind: 'refused', requiredWaitMs,
   * retryAfterSeconds}`, each with `fallback` when the policy decided. An
   * abort of `signal` rejects at once with the signal's reason, at any point
   * before admission: a ticket Redis gave the call is released (one still on
   * its way when it comes). With `key`, a refusal books a place in the
   * fleet's line that the key's retry redeems (SPEC §11).
   */
  async admit(options = undefined) {
    if (options === undefined) options = {};
    if (typeof options !== 'object' || options === null) {
      throw new TypeError(`pacer: options must be an object, got ${describe(options)}`);
    }
    const { signal, key } = options;
    if (signal !== undefined && (typeof signal !== 'object' || signal === null
      || typeof signal.aborted !== 'boolean' || typeof signal.addEventListener !== 'function')) {
      throw new TypeError(`pacer: signal must be an AbortSignal, got ${describe(signal)}`);
    }
    if (key !== undefined) checkKey(key);
    this.#open();
    if (signal?.aborted) throw abortReason(signal);
    // close() waits for this entry: while Redis answers, and while it sleeps
    // (then it ends the sleep), so a debit made here is released first.
    const waiter = { outcome: undefined, interrupt: undefined };
    let finish;
    const finished = new Promise((resolve) => { finish = resolve; });
    waiter.finished = finished;
    this.#waiting.add(waiter);
    let ticket = null;
    // The decision still on its way when the signal aborted.
    let late = null;
    try {
      const deciding = key === undefined ? this.reserve() : this.#attemptKeyed(key);
      const d = await untilAborted(deciding, signal, () => { late = deciding; });
      const mark = d.fallback === undefined ? {} : { fallback: d.fallback };
      if (d.kind !== 'admitted') {
        return { kind: 'refused', requiredWaitMs: d.requiredWaitMs, retryAfterSeconds: d.retryAfterSeconds, ...mark };
      }
      ticket = d.ticket;
      const admitted = ticket;
      const release = () => (admitted === null ? Promise.resolve(false) : this.release(admitted));
      // The signal may have aborted, or close() been called, while Redis answered.
      if (signal?.aborted) throw abortReason(signal);
      if (this.#closed) throw closedError();
      if (!d.queued) return { kind: 'admitted', waitedMs: 0, queued: false, release, ...mark };
      const startedAt = monotonicNow();
      await sleep(defaultSchedule, d.waitMs, signal, abortReason, waiter);
      return { kind: 'admitted', waitedMs: Math.max(0, monotonicNow() - startedAt), queued: true, release, ...mark };
    } catch (error) {
      // A cancelled request opens no connection: give the debit back.
      if (ticket !== null) await this.#releaseQuietly(ticket);
      if (late !== null) {
        // Rejected at the abort; what the reply admits is released when it
        // comes, and close() waits for that.
        late.then((d) => (d.kind === 'admitted' && d.ticket !== null ? this.#releaseQuietly(d.ticket) : undefined))
          .catch(() => {})
          .finally(() => {
            this.#waiting.delete(waiter);
            finish();
          });
      }
      throw error;
    } finally {
      if (late === null) {
        this.#waiting.delete(waiter);
        finish();
      }
    }
  }

  /** Releases an admission no connection will use; a failed refund passes
   * with time (the caller's answer is the abort or the close). */
  async #releaseQuietly(ticket) {
    try {
      await this.#releaseTicket(ticket);
    } catch {
      // As above.
    }
  }

  /** One attempt of the keyed request `key`: redeems its booking, else
   * reserves or books with the retries it has left. */
  async #attemptKeyed(key) {
    const entry = this.#keyed.get(key) ?? { attempts: 0, booking: null };
    let d;
    if (entry.booking !== null) {
      const r = await this.redeem(entry.booking);
      if (r.kind === 'admitted') {
        d = r;
      } else {
        entry.booking = r.booking;
        d = { kind: 'refused', requiredWaitMs: r.retryAfterSeconds * 1000, retryAfterSeconds: r.retryAfterSeconds,
          clockRegressed: false, fallback: r.fallback };
      }
    } else {
      const r = await this.reserveOrBook(Math.max(0, this.config.maxRetries - entry.attempts));
      if (r.kind === 'booked') {
        entry.booking = r.booking;
        d = { kind: 'refused', requiredWaitMs: r.requiredWaitMs ?? r.retryAfterSeconds * 1000,
          retryAfterSeconds: r.retryAfterSeconds, clockRegressed: r.clockRegressed, fallback: r.fallback };
      } else {
        d = r;
      }
    }
    if (d.fallback === undefined) delete d.fallback;
    if (d.kind === 'admitted') {
      this.#keyed.delete(key);
    } else {
      entry.attempts += 1;
      this.#keyed.set(key, entry);
    }
    return d;
  }

  /**
   * Gives back what the keyed request `key` holds (its booking) when it
   * ends without opening; resolves to whether a booking was refunded.
   */
  async forget(key) {
    this.#open();
    checkKey(key);
    const entry = this.#keyed.get(key);
    this.#keyed.delete(key);
    if (entry === undefined || entry.booking === null) return false;
    return this.#releaseTicket(entry.booking.ticket);
  }

  /**
   * The bucket as the server reports it (PACER.INFO: configuration, mode,
   * level, counters, the server's clock), names in camelCase, plus
   * `engine`. Null when the mode is `disabled` (no bucket is kept). Rejects
   * when Redis cannot answer.
   */
  async info() {
    this.#open();
    if (!this.enabled) return null;
    const reply = await this.#redis('info', []);
    if (reply === FAILED) {
      const error = new Error(`pacer: Redis is unavailable for the bucket '${this.#key}'`);
      error.code = 'ERR_PACER_REDIS_UNAVAILABLE';
      throw error;
    }
    return { ...infoFrom(reply), engine: this.#engine };
  }

  /** The answers this object got, as `Pacer.counters()` counts a pacer's
   * decisions, and how many the policy decided (`fallbacks`). */
  counters() {
    return { ...this.#counters, waitBuckets: this.#counters.waitBuckets.slice() };
  }

  /**
   * Ends the pacer: admits still waiting release their tickets and reject
   * with an Error whose `code` is 'ERR_PACER_CLOSED', then a client the
   * pacer made is closed (one passed in stays open). Later calls reject
   * with that error. Idempotent.
   */
  async close() {
    if (this.#closed) return;
    this.#closed = true;
    const pending = [];
    for (const waiter of this.#waiting) {
      waiter.interrupt?.(closedError());
      pending.push(waiter.finished);
    }
    await Promise.all(pending);
    this.#stopReadyWait?.();
    if (typeof this.#client.off === 'function') {
      for (const event of this.#readyEvents()) this.#client.off(event, this.#onReady);
    }
    if (this.#ownClient) {
      try {
        this.#client.destroy();
      } catch {
        // Closed already.
      }
    }
  }
}

/** Marks "Redis did not answer" in #redis. */
const FAILED = Symbol('pacer.redisFailed');

/** A pacer error (`ERR pacer: …`), WRONGTYPE or another error reply, as the
 * caller sees it: an Error with the server's text and `code`
 * 'ERR_PACER_REDIS'. */
function pacerError(reply) {
  const error = new Error(String(reply.message), { cause: reply });
  error.code = 'ERR_PACER_REDIS';
  return error;
}

// classifyReply is internal (index.js does not export it): for the tests.
module.exports = { RedisPacer, RedisTicket, RedisBooking, classifyReply };
