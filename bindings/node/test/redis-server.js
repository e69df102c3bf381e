'use strict';
// Real redis-servers for the RedisPacer tests: each on a free loopback port,
// in its own temporary directory, without persistence, killed when the test
// process ends whatever happens.
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');

const running = new Set();

function killAll() {
  for (const child of running) {
    try {
      child.kill('SIGKILL');
    } catch {
      // Gone already.
    }
  }
  running.clear();
}
process.on('exit', killAll);
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, () => {
    killAll();
    process.exit(1);
  });
}

/** A loopback port nothing listens on now. */
function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

/** Resolves when the server on `port` answers PING; rejects after `tries`. */
async function untilUp(port, child, tries = 200) {
  for (let i = 0; i < tries; i += 1) {
    if (child.exitCode !== null) throw new Error(`redis-server exited with ${child.exitCode}`);
    const pong = await new Promise((resolve) => {
      const socket = net.connect(port, '127.0.0.1');
      socket.setTimeout(500);
      let data = '';
      socket.on('connect', () => socket.write('PING\r\n'));
      socket.on('data', (chunk) => {
        data += chunk;
        if (data.includes('\r\n')) {
          socket.destroy();
          resolve(data.startsWith('+PONG'));
        }
      });
      socket.on('error', () => resolve(false));
      socket.on('timeout', () => {
        socket.destroy();
        resolve(false);
      });
    });
    if (pong) return;
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  throw new Error(`redis-server on port ${port} did not answer`);
}

class RedisServer {
  /** `module`: load PACER_REDIS_MODULE (without `test-clock`); `args`:
   * more arguments of redis-server (`--enable-module-command local`). */
  static async start({ module = false, args = [] } = {}) {
    const server = new RedisServer();
    server.module = module;
    server.extraArgs = args;
    server.dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pacer-node-redis-'));
    server.port = await freePort();
    await server.#launch();
    return server;
  }

  async #launch() {
    const args = ['--port', String(this.port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no',
      '--dir', this.dir, '--daemonize', 'no', '--loglevel', 'warning'];
    if (this.module) {
      const modulePath = process.env.PACER_REDIS_MODULE;
      if (!modulePath) throw new Error('PACER_REDIS_MODULE must name libpacer_redis.so (scripts/test-node.sh sets it)');
      args.push('--loadmodule', modulePath);
    }
    args.push(...this.extraArgs);
    const child = spawn('redis-server', args, { stdio: ['ignore', 'ignore', 'inherit'] });
    running.add(child);
    child.on('exit', () => running.delete(child));
    this.child = child;
    await untilUp(this.port, child);
  }

  get url() {
    return `redis://127.0.0.1:${this.port}`;
  }

  /** SIGKILL, and wait for the process to end. */
  async kill() {
    const { child } = this;
    if (child.exitCode !== null || child.signalCode !== null) return;
    const ended = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGKILL');
    await ended;
  }

  /** Starts again on the same port and directory. */
  async restart() {
    await this.kill();
    await this.#launch();
  }

  async stop() {
    await this.kill();
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

module.exports = { RedisServer, freePort };
