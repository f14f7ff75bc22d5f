'use strict';
// Shared pieces of the node client suites (ioredis_suite.js, node_redis_suite.js).
//
// A suite is started by runner.py as `node SUITE.js CONFIG_JSON`, CONFIG_JSON being
//   {"mode": "standalone"|"cluster"|"failover"|"handshake", "target": "proxy"|"direct",
//    "host": "127.0.0.1", "port": N, "cluster_ports": [lo, hi], "real_ports": [...],
//    "tls_ca": PATH (cluster over TLS: the CA that signed every server), "deadline_ms": N}
// and prints one JSON line per check on stdout:
//   {"check": NAME, "ok": true|false, "value": ..., "ttl": {...}, "expect_ttl": {...},
//    "info": "...", "error": "..."}
// `value` must be identical through ttlguard and straight from Redis (runner.py
// compares it); `ttl` holds the TTLs that the rule makes differ, with their expected
// range per target in `expect_ttl` ({name: {proxy: [lo, hi], direct: [lo, hi]}}).
// The same script runs against both targets; only `target` tells them apart, and
// only the TTL expectations and the cluster port checks depend on it.

const assert = require('assert');
const fs = require('fs');

const cfg = JSON.parse(process.argv[2] || '{}');
cfg.host = cfg.host || '127.0.0.1';

function out(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n');
}

// Whatever happens, the suite ends by itself.
const watchdog = setTimeout(() => {
  out({ fatal: `suite still running after ${cfg.deadline_ms || 40000} ms (watchdog)` });
  process.exit(3);
}, cfg.deadline_ms || 40000);
watchdog.unref();

process.on('unhandledRejection', (e) => {
  out({ fatal: 'unhandled rejection: ' + (e && e.stack ? e.stack : String(e)) });
});

function withTimeout(promise, ms, what) {
  let timer;
  return Promise.race([
    promise,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// A deterministic, JSON-able form of a reply: Buffers as hex, errors by message,
// Maps as [key, value] pairs in reply order, Sets sorted.
function norm(v) {
  if (v === null || v === undefined) return null;
  if (Buffer.isBuffer(v)) return { hex: v.toString('hex') };
  if (v instanceof Error) return { err: v.message };
  if (v instanceof Map) return { map: [...v.entries()].map(([k, x]) => [norm(k), norm(x)]) };
  if (v instanceof Set) return { set: [...v].map(norm).map((x) => JSON.stringify(x)).sort() };
  if (Array.isArray(v)) return v.map(norm);
  if (typeof v === 'bigint') return { bigint: v.toString() };
  if (typeof v === 'number' && !Number.isFinite(v)) return { num: String(v) };
  if (typeof v === 'object') {
    const o = {};
    for (const k of Object.keys(v)) o[k] = norm(v[k]);
    return { obj: o };
  }
  return v;
}

// Bytes that would break a text protocol or a naive framer: every byte value,
// CRLF, RESP type markers.
const BINARY = Buffer.concat([
  Buffer.from(Array.from({ length: 256 }, (_, i) => i)),
  Buffer.from('\r\n$-1\r\n*2\r\n+OK\r\n\x00\r\n', 'latin1'),
]);
const BINARY_KEY = Buffer.from([0x6b, 0x3a, 0x00, 0xff, 0x0d, 0x0a, 0x24, 0x33]); // "k:\0\xff\r\n$3"

// CLIENT INFO / CLIENT LIST line -> {field: value}
function parseClientInfo(line) {
  const s = Buffer.isBuffer(line) ? line.toString() : String(line);
  const o = {};
  for (const part of s.trim().split(' ')) {
    const i = part.indexOf('=');
    if (i > 0) o[part.slice(0, i)] = part.slice(i + 1);
  }
  return o;
}

// The fields of CLIENT INFO that describe the connection's state as the client set
// it up (and so must be the same through ttlguard): protocol, database, name, and
// the library fields (empty before Redis 7.2, which has no CLIENT SETINFO).
function clientState(info) {
  const o = parseClientInfo(info);
  return { resp: o.resp, db: o.db, name: o.name, 'lib-name': o['lib-name'], 'lib-ver': o['lib-ver'] };
}

// The ports of discovered cluster nodes: through ttlguard every one inside
// cluster_ports and none a real node port; straight to Redis every one a real port.
function checkNodePorts(ports) {
  assert(ports.length > 0, 'no nodes discovered');
  const real = new Set(cfg.real_ports || []);
  if (cfg.target === 'proxy') {
    const [lo, hi] = cfg.cluster_ports;
    const bad = ports.filter((p) => !(p >= lo && p <= hi));
    assert.deepStrictEqual(bad, [], `node ports outside cluster_ports ${lo}-${hi}: ${bad} (all: ${ports})`);
    const leaked = ports.filter((p) => real.has(p));
    assert.deepStrictEqual(leaked, [], `real node ports discovered through ttlguard: ${leaked}`);
  } else {
    const bad = ports.filter((p) => !real.has(p));
    assert.deepStrictEqual(bad, [], `direct: node ports that are not real nodes: ${bad}`);
  }
}

// Node's TLS options for the cluster clients when the config asks for TLS (tls_ca),
// else undefined. The servers' certificates name 127.0.0.1.
function tlsOptions() {
  return cfg.tls_ca ? { ca: [fs.readFileSync(cfg.tls_ca)] } : undefined;
}

// The failover check (mode "failover"): a cluster client writes and reads back its own
// keys (under the rule) one after the other until runner.py closes our stdin; runner.py
// fails a primary over once {"running": true} is out. Then every key is written and
// read once more, and its TTL taken. A wrong reply fails the check; client errors
// (rejected commands) are counted in `errors`, which runner.py compares with direct.
// client: the library's cluster client (its set, get and ttl methods).
async function failoverLoop(client) {
  const keys = Array.from({ length: 30 }, (_, i) => `t:fo:${i}`);
  let stop = false;
  process.stdin.on('end', () => { stop = true; });
  process.stdin.resume();
  const errors = {};
  const wrong = [];
  let ops = 0;
  for (let i = 0; !stop; i++) {
    const k = keys[i % keys.length];
    const v = `${k}=${i}`;
    try {
      const set = await client.set(k, v);
      const got = await client.get(k);
      ops += 2;
      if (set !== 'OK' || got !== v) wrong.push(`SET ${k} ${v}: ${set}, GET: ${got}`);
    } catch (e) {
      const m = String(e && e.message).slice(0, 120);
      errors[m] = (errors[m] || 0) + 1;
      await sleep(10);
    }
    if (i === keys.length - 1) out({ running: true });
  }
  const ttls = await Promise.all(keys.map((k) => client.ttl(k)));
  const final = [];
  for (const k of keys) final.push([await client.set(k, `${k}=last`), await client.get(k)]);
  assert.deepStrictEqual(wrong.slice(0, 5), [], `${wrong.length} wrong replies in ${ops}`);
  const n = Object.values(errors).reduce((a, b) => a + b, 0);
  return {
    value: { keys: keys.length, final },
    errors: n,
    info: `${ops} requests, ${n} errors${n ? ' ' + JSON.stringify(errors) : ''}`,
    ttl: { 'min after failover': Math.min(...ttls), 'max after failover': Math.max(...ttls) },
    expect_ttl: { 'min after failover': EXPECT.rule900, 'max after failover': EXPECT.rule900 },
  };
}

// Run the checks in order; each prints its line. fn returns {value, ttl, expect_ttl, info}.
async function runChecks(checks, perCheckMs = 10000) {
  for (const [name, fn] of checks) {
    const t0 = Date.now();
    try {
      const r = (await withTimeout(Promise.resolve().then(fn), perCheckMs, name)) || {};
      out({ check: name, ok: true, ms: Date.now() - t0, ...r });
    } catch (e) {
      out({ check: name, ok: false, ms: Date.now() - t0, error: e && e.stack ? e.stack : String(e) });
    }
  }
}

module.exports = {
  assert, cfg, out, withTimeout, sleep, norm, BINARY, BINARY_KEY, parseClientInfo,
  clientState, checkNodePorts, tlsOptions, failoverLoop, runChecks,
};

// The 100 commands of the pipeline check, the same for every library (as strings):
// writes, reads of what an earlier command in the same pipeline wrote, counters,
// lists, hashes, a binary-safe echo, and one command that fails in the middle.
function pipelineCommands() {
  const cmds = [];
  for (let i = 0; cmds.length < 100; i++) {
    switch (i % 6) {
      case 0: cmds.push(['SET', `p:${i}`, `val-${i}`]); break;
      case 1: cmds.push(['GET', `p:${i - 1}`]); break;
      case 2: cmds.push(['INCR', 'p:ctr']); break;
      case 3: cmds.push(['RPUSH', 'p:list', String(i)]); break;
      case 4: cmds.push(['HSET', 'p:h', `f${i}`, String(i)]); break;
      default: cmds.push(i === 47 ? ['INCR', 'p:0'] : ['LLEN', 'p:list']); break;
    }
  }
  return cmds;
}
module.exports.pipelineCommands = pipelineCommands;

// TTL expectations of the rule [ttl "t:"] ttl = 900 action = rewrite.
const EXPECT = {
  keep100: { proxy: [1, 100], direct: [-1, -1] },  // GETSET on a key with EX 100: keeps it
  rule900: { proxy: [880, 900], direct: [-1, -1] }, // a write that would leave no TTL: 900
  none: { proxy: [-1, -1], direct: [-1, -1] },      // a key outside every rule
};
module.exports.EXPECT = EXPECT;
