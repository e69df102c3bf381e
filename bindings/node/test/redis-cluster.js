'use strict';
// A real Redis Cluster for the RedisPacer tests: six redis-servers (three
// primaries, three replicas) on free loopback ports, each with its own free
// cluster bus port, in one temporary directory, without persistence; made a
// cluster by `redis-cli --cluster create`, and killed (by the PIDs started
// here) with the directory removed at stop() or when the test process ends,
// whatever happens. Every wait polls the nodes until a generous deadline.
const { spawn, execFile } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { createClient } = require('redis');
const { freePort } = require('./redis-server.js');
const { SCRIPT } = require('./redis-support.js');

const NODES = 6;
const DEADLINE_MS = 60000;

const running = new Set();
const directories = new Set();
process.on('exit', () => {
  for (const child of running) {
    try {
      child.kill('SIGKILL');
    } catch {
      // Gone already.
    }
  }
  for (const dir of directories) fs.rmSync(dir, { recursive: true, force: true });
});

function pause(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Polls `check` (an async function answering a truthy value when done)
 * until it does; throws `what` with the last answer past the deadline. */
async function until(what, check, deadlineMs = DEADLINE_MS) {
  const end = Date.now() + deadlineMs;
  let last;
  for (;;) {
    try {
      last = await check();
      if (last) return last;
    } catch (error) {
      last = error;
    }
    if (Date.now() > end) {
      throw new Error(`redis cluster: ${what} within ${deadlineMs} ms (last: ${last?.message ?? last})`);
    }
    await pause(50);
  }
}

/** One line of CLUSTER NODES: id, port, role, its primary's id, its slots. */
function parseNodes(text) {
  return String(text).trim().split('\n').map((line) => {
    const [id, address, flags, primaryId, , , , linkState, ...slots] = line.trim().split(' ');
    const port = Number(address.split('@')[0].split(':')[1]);
    const ranges = slots.filter((s) => !s.startsWith('[')).map((s) => {
      const [from, to = from] = s.split('-').map(Number);
      return [from, to];
    });
    return {
      id, port, primary: flags.split(',').includes('master'), primaryId: primaryId === '-' ? null : primaryId,
      failed: /fail/.test(flags), linkState, ranges,
    };
  });
}

class Node {
  constructor(cluster, index, port, busPort, module) {
    this.cluster = cluster;
    this.index = index;
    this.port = port;
    this.busPort = busPort;
    this.module = module;
    this.dir = path.join(cluster.dir, String(index));
    fs.mkdirSync(this.dir);
    this.admin = null;
  }

  get url() {
    return `redis://127.0.0.1:${this.port}`;
  }

  async launch() {
    const args = ['--port', String(this.port), '--cluster-port', String(this.busPort), '--bind', '127.0.0.1',
      '--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-node-timeout', '1000',
      '--save', '', '--appendonly', 'no', '--dir', this.dir, '--daemonize', 'no', '--loglevel', 'warning'];
    if (this.module) {
      const modulePath = process.env.PACER_REDIS_MODULE;
      if (!modulePath) throw new Error('PACER_REDIS_MODULE must name libpacer_redis.so (scripts/test-node.sh sets it)');
      args.push('--loadmodule', modulePath);
    }
    const child = spawn('redis-server', args, { stdio: ['ignore', 'ignore', 'inherit'] });
    running.add(child);
    child.on('exit', () => running.delete(child));
    this.child = child;
    this.admin = createClient({ url: this.url, socket: { reconnectStrategy: false, connectTimeout: 2000 } });
    this.admin.on('error', () => {});
    await until(`redis-server on port ${this.port} answers`, async () => {
      if (child.exitCode !== null) throw new Error(`redis-server on port ${this.port} exited with ${child.exitCode}`);
      if (!this.admin.isOpen) await this.admin.connect();
      return (await this.admin.sendCommand(['PING'])) === 'PONG';
    }, 10000);
  }

  /** Runs one command on this node (no redirection followed). */
  send(command) {
    return this.admin.sendCommand(command.map((a) => (Buffer.isBuffer(a) ? a : String(a))));
  }

  async nodes() {
    return parseNodes(await this.send(['CLUSTER', 'NODES']));
  }

  async kill() {
    try {
      await this.admin?.close();
    } catch {
      this.admin?.destroy();
    }
    const { child } = this;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const ended = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGKILL');
    await ended;
  }
}

class RedisCluster {
  /**
   * Starts the six nodes and makes them a cluster. `module`: every node
   * loads PACER_REDIS_MODULE (true), none (false), or the nodes whose
   * indices are listed (0-2 are made primaries, 3-5 replicas); `functionLibrary`:
   * the package's script is loaded as the function library on every primary.
   */
  static async start({ module = false, functionLibrary = false } = {}) {
    const cluster = new RedisCluster();
    cluster.dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pacer-node-cluster-'));
    directories.add(cluster.dir);
    try {
      const ports = new Set();
      const pick = async () => {
        for (;;) {
          const port = await freePort();
          if (!ports.has(port)) {
            ports.add(port);
            return port;
          }
        }
      };
      cluster.nodes = [];
      for (let i = 0; i < NODES; i += 1) {
        const withModule = Array.isArray(module) ? module.includes(i) : module;
        cluster.nodes.push(new Node(cluster, i, await pick(), await pick(), withModule));
      }
      await Promise.all(cluster.nodes.map((n) => n.launch()));
      await cluster.#create();
      await cluster.settled();
      if (functionLibrary) await cluster.loadFunction();
      return cluster;
    } catch (error) {
      await cluster.stop();
      throw error;
    }
  }

  #create() {
    const addresses = this.nodes.map((n) => `127.0.0.1:${n.port}`);
    return new Promise((resolve, reject) => {
      execFile('redis-cli', ['--cluster', 'create', ...addresses, '--cluster-replicas', '1', '--cluster-yes'],
        { timeout: DEADLINE_MS }, (error, stdout, stderr) => {
          if (error) reject(new Error(`redis-cli --cluster create failed: ${error.message}\n${stdout}\n${stderr}`));
          else resolve();
        });
    });
  }

  /** Resolves when every node says cluster_state:ok, knows the six nodes,
   * none failed, every replica's link to its primary is up, and all agree on which primary serves each slot range and
   * on each replica's primary. */
  async settled() {
    await until('every node agrees and says cluster_state:ok', async () => {
      const views = [];
      for (const node of this.nodes) {
        const info = String(await node.send(['CLUSTER', 'INFO']));
        if (!info.includes('cluster_state:ok')) return false;
        const nodes = await node.nodes();
        if (nodes.length !== NODES || nodes.some((n) => n.failed)) return false;
        const self = nodes.find((n) => n.port === node.port);
        if (!self.primary) {
          const replication = String(await node.send(['INFO', 'replication']));
          if (!replication.includes('master_link_status:up')) return false;
        }
        views.push(JSON.stringify(nodes.map((n) => [n.port, n.primary, n.primaryId, n.ranges])
          .sort((a, b) => a[0] - b[0])));
      }
      const primaries = JSON.parse(views[0]).filter(([, primary]) => primary);
      const slots = primaries.reduce((sum, [, , , ranges]) => sum + ranges.reduce((s, [a, b]) => s + b - a + 1, 0), 0);
      return views.every((v) => v === views[0]) && primaries.length === 3 && slots === 16384;
    });
  }

  /** The node on `port`. */
  byPort(port) {
    const node = this.nodes.find((n) => n.port === port);
    if (!node) throw new Error(`redis cluster: no node on port ${port}`);
    return node;
  }

  /** The primaries as the first node sees them: [{node, id, ranges}]. */
  async primaries() {
    const nodes = await this.nodes[0].nodes();
    return nodes.filter((n) => n.primary).map((n) => ({ node: this.byPort(n.port), id: n.id, ranges: n.ranges }));
  }

  async slotOf(key) {
    return Number(await this.nodes[0].send(['CLUSTER', 'KEYSLOT', key]));
  }

  /** The primary that owns `key`'s slot (a Node), as the first node sees it. */
  async ownerOf(key) {
    const slot = await this.slotOf(key);
    const owner = (await this.primaries()).find((p) => p.ranges.some(([a, b]) => slot >= a && slot <= b));
    if (!owner) throw new Error(`redis cluster: no primary owns slot ${slot}`);
    return owner.node;
  }

  /** `count` keys `prefix…` for each primary, by their slots: a Map of the
   * primary's port to its keys. */
  async keysPerPrimary(prefix, count) {
    const primaries = await this.primaries();
    const byPort = new Map(primaries.map((p) => [p.node.port, []]));
    for (let i = 0; [...byPort.values()].some((keys) => keys.length < count); i += 1) {
      const key = `${prefix}${i}`;
      const slot = await this.slotOf(key);
      const owner = primaries.find((p) => p.ranges.some(([a, b]) => slot >= a && slot <= b));
      const keys = byPort.get(owner.node.port);
      if (keys.length < count) keys.push(key);
    }
    return byPort;
  }

  /** The bucket's counts as its owning primary answers them, an object of
   * the INFO pairs: the module's PACER.INFO where that node has it, else the
   * function's read-only `info`, else the script's. */
  async info(key) {
    const owner = await this.ownerOf(key);
    const modules = await owner.send(['MODULE', 'LIST']);
    const libraries = await owner.send(['FUNCTION', 'LIST', 'LIBRARYNAME', 'pacer']);
    let reply;
    if (modules.length > 0) reply = await owner.send(['PACER.INFO', key]);
    else if (libraries.length > 0) reply = await owner.send(['FCALL_RO', 'pacer_ro', '1', key, 'info']);
    else reply = await owner.send(['EVAL', SCRIPT, '1', key, 'info']);
    const info = {};
    for (let i = 0; i < reply.length; i += 2) info[String(reply[i])] = reply[i + 1];
    return info;
  }

  /** Loads the package's script as the function library `pacer` on every
   * primary (each replica gets it from its primary). */
  async loadFunction() {
    const library = Buffer.concat([Buffer.from('#!lua name=pacer\n'), SCRIPT]);
    for (const { node } of await this.primaries()) {
      await node.send(['FUNCTION', 'LOAD', 'REPLACE', library]);
    }
  }

  /** Moves `slot` from its primary to the primary `target` (a Node) with its
   * keys, by the steps of a resharding: IMPORTING on the target, MIGRATING
   * on the source, MIGRATE of the slot's keys, then NODE on every primary.
   * `between` (optional) runs after the keys are migrated and before the
   * slot is given to the target: the window in which the source answers ASK
   * for them. */
  async moveSlot(slot, target, between = undefined) {
    const primaries = await this.primaries();
    const source = primaries.find((p) => p.ranges.some(([a, b]) => slot >= a && slot <= b));
    const to = primaries.find((p) => p.node === target);
    if (!source || !to || source.node === target) throw new Error(`redis cluster: cannot move slot ${slot} there`);
    await target.send(['CLUSTER', 'SETSLOT', slot, 'IMPORTING', source.id]);
    await source.node.send(['CLUSTER', 'SETSLOT', slot, 'MIGRATING', to.id]);
    for (;;) {
      const keys = await source.node.send(['CLUSTER', 'GETKEYSINSLOT', slot, '100']);
      if (keys.length === 0) break;
      await source.node.send(['MIGRATE', '127.0.0.1', target.port, '', '0', '5000', 'KEYS', ...keys]);
    }
    if (between) await between();
    await target.send(['CLUSTER', 'SETSLOT', slot, 'NODE', to.id]);
    await source.node.send(['CLUSTER', 'SETSLOT', slot, 'NODE', to.id]);
    for (const p of primaries) {
      if (p.node !== target && p.node !== source.node) await p.node.send(['CLUSTER', 'SETSLOT', slot, 'NODE', to.id]);
    }
    await this.settled();
  }

  /** Fails the primary `primary` (a Node) over to its replica: WAIT so the
   * replica has every write, CLUSTER FAILOVER on the replica, then polls
   * until the roles changed on every node and the cluster is ok. Resolves
   * to the new primary (a Node). */
  async failover(primary) {
    const nodes = await primary.nodes();
    const self = nodes.find((n) => n.port === primary.port);
    const replicaEntry = nodes.find((n) => n.primaryId === self.id);
    if (!replicaEntry) throw new Error(`redis cluster: the primary on port ${primary.port} has no replica`);
    const replica = this.byPort(replicaEntry.port);
    await until('the replica acknowledged every write (WAIT 1)',
      async () => Number(await primary.send(['WAIT', '1', '1000'])) >= 1);
    await replica.send(['CLUSTER', 'FAILOVER']);
    await until('the replica became the primary on every node', async () => {
      for (const node of this.nodes) {
        const view = await node.nodes();
        const promoted = view.find((n) => n.port === replica.port);
        const demoted = view.find((n) => n.port === primary.port);
        if (!promoted.primary || demoted.primary || demoted.primaryId !== promoted.id) return false;
      }
      return true;
    });
    await this.settled();
    return replica;
  }

  /** Kills every node this cluster started and removes its directory. */
  async stop() {
    await Promise.all((this.nodes ?? []).map((n) => n.kill()));
    if (this.dir) {
      fs.rmSync(this.dir, { recursive: true, force: true });
      directories.delete(this.dir);
    }
  }
}

module.exports = { RedisCluster };
