'use strict';
// node-redis (npm `redis`, v5) against one target (ttlguard or Redis itself): see
// common.js for the protocol with runner.py. RESP3 (`RESP: 3`); its connect sequence
// is one pipelined handshake: HELLO 3 [SETNAME name], [SELECT db], CLIENT SETINFO
// LIB-VER, CLIENT SETINFO LIB-NAME (errors ignored: Redis before 7.2 has no SETINFO).

const { createClient, createCluster, RESP_TYPES } = require('redis');
const clusterKeySlot = require('cluster-key-slot');
const {
  assert, cfg, out, withTimeout, sleep, norm, BINARY, BINARY_KEY, clientState, checkNodePorts,
  tlsOptions, failoverLoop, runChecks, pipelineCommands, EXPECT,
} = require('./common');

const opened = [];
const BUF = { [RESP_TYPES.BLOB_STRING]: Buffer };

function socketOpts() {
  return { host: cfg.host, port: cfg.port, connectTimeout: 3000, reconnectStrategy: false };
}

async function mk(extra = {}) {
  const c = createClient({ socket: socketOpts(), RESP: 3, ...extra });
  c.on('error', () => {}); // surfaced through the commands' own rejections
  opened.push(c);
  await withTimeout(c.connect(), 5000, 'node-redis connect');
  return c;
}

async function settle(p) {
  try { return await p; } catch (e) { return e; }
}

// A MULTI or pipeline's replies, failed commands included.
async function replies(p) {
  try {
    return norm(await p);
  } catch (e) {
    if (e && Array.isArray(e.replies)) return norm(e.replies);
    throw e;
  }
}

async function standalone() {
  const r = await mk();
  const other = await mk();
  const rb = r.withTypeMapping(BUF);

  await runChecks([
    ['connect', async () => {
      const st = clientState(await r.sendCommand(['CLIENT', 'INFO']));
      assert.strictEqual(st.resp, '3', 'RESP3 expected after HELLO 3');
      // the handshake's HELLO once more, explicitly: everything but the id must match
      const hello = await r.sendCommand(['HELLO', '3']);
      const h = hello instanceof Map ? Object.fromEntries(hello) : { ...hello };
      assert(typeof h.id === 'number', `HELLO id: ${h.id}`);
      delete h.id;
      return {
        value: { state: st, hello: norm(h), ping: await r.ping(), echo: norm(await rb.echo(BINARY)) },
        info: `resp=${st.resp} proto=${h.proto} lib-name=${st['lib-name'] || '(none)'}`,
      };
    }],
    ['client-setinfo', async () => {
      const a = await settle(r.sendCommand(['CLIENT', 'SETINFO', 'LIB-NAME', 'compat-check']));
      const b = await settle(r.sendCommand(['CLIENT', 'SETINFO', 'LIB-VER', '9.9.9']));
      const st = clientState(await r.sendCommand(['CLIENT', 'INFO']));
      return { value: [norm(a), norm(b), st, await r.ping()] };
    }],
    ['resp3-types', async () => {
      const v = [await r.hSet('r3:h', { a: '1', b: '2' }), norm(await r.hGetAll('r3:h'))];
      v.push(await r.zAdd('r3:z', [{ score: 1.5, value: 'm' }, { score: 2, value: 'n' }]));
      v.push(await r.zScore('r3:z', 'm'), norm(await r.zRangeWithScores('r3:z', 0, -1)));
      v.push(await r.sAdd('r3:s', ['x', 'y']), norm(await r.sendCommand(['SMEMBERS', 'r3:s'])));
      v.push(norm(await r.sendCommand(['HGETALL', 'r3:h'])), norm(await r.sendCommand(['ZSCORE', 'r3:z', 'm'])));
      v.push(norm(await r.sendCommand(['CONFIG', 'GET', 'maxmemory-policy'])));
      assert.strictEqual(v[3], 1.5);
      return { value: v };
    }],
    ['set-get-binary', async () => {
      const v = [await r.set(BINARY_KEY, BINARY)];
      const got = await rb.get(BINARY_KEY);
      assert(Buffer.compare(got, BINARY) === 0, 'binary value changed');
      v.push(norm(got), await r.strLen(BINARY_KEY));
      v.push(await r.set('b:s', 'plain'), await r.get('b:s'), await r.get('b:missing'));
      v.push(await r.incr('b:ctr'), await r.incr('b:ctr'), await r.incrBy('b:ctr', 40));
      assert.strictEqual(v[v.length - 1], 42);
      v.push(norm(await settle(r.incr('b:s'))));
      v.push(await r.append('b:s', Buffer.from([0, 1, 2])), norm(await rb.get('b:s')));
      return { value: v };
    }],
    ['pipeline-100', async () => {
      // 100 commands issued at once: node-redis writes them as one pipeline
      const auto = norm(await Promise.all(pipelineCommands().map((a) => settle(r.sendCommand(a)))));
      assert.strictEqual(auto.length, 100);
      assert.strictEqual(auto[1], 'val-0');
      assert(auto.some((x) => x && x.err && /not an integer/.test(x.err)), 'no error in the pipeline');
      // the explicit form, multi().execAsPipeline(): it rejects with the first error,
      // so once with the failing command and once without it
      const m = r.multi();
      for (const args of pipelineCommands()) m.addCommand(args);
      const failed = norm(await settle(m.execAsPipeline()));
      const m2 = r.multi();
      for (const args of pipelineCommands()) if (!(args[0] === 'INCR' && args[1] === 'p:0')) m2.addCommand(args);
      const res = await replies(m2.execAsPipeline());
      assert.strictEqual(res.length, 99);
      return { value: [auto, failed, res] };
    }],
    ['multi-exec', async () => {
      const v = [await replies(r.multi().set('m:a', '1').incr('m:a').lPush('m:a', 'x').get('m:a').exec())];
      assert.strictEqual(v[0][1], 2);
      v.push(norm(await settle(r.multi().addCommand(['SET', 'm:b']).incr('m:c').exec())));
      v.push(await r.get('m:c'));
      // MULTI ... DISCARD by hand on a connection of its own
      const m = await mk();
      v.push(await m.sendCommand(['MULTI']), await m.sendCommand(['SET', 'm:d', '1']),
        await m.sendCommand(['DISCARD']), await m.get('m:d'));
      await m.close();
      return { value: v };
    }],
    ['watch-optimistic', async () => {
      const w = await mk();
      await r.set('w:k', 'start');
      const v = [await w.watch('w:k'), await w.get('w:k')];
      v.push(await other.set('w:k', 'changed-by-other'));
      const aborted = await settle(w.multi().set('w:k', 'mine').exec());
      assert(aborted instanceof Error && aborted.constructor.name === 'WatchError',
        `EXEC after a watched key changed must abort: ${aborted}`);
      v.push(aborted.constructor.name);
      v.push(await w.watch('w:k'), await w.get('w:k'));
      v.push(await replies(w.multi().incr('w:c').set('w:k', 'mine').exec()));
      v.push(await r.get('w:k'));
      assert.strictEqual(v[v.length - 1], 'mine');
      await w.close();
      return { value: v };
    }],
    ['pubsub', async () => {
      const sub = await mk();
      const got = [];
      await sub.subscribe(['ps:ch', 'ps:other'], (msg, ch) =>
        got.push(['message', ch.toString('latin1'), msg.toString('hex')]), true);
      await sub.pSubscribe('ps:pat*', (msg, ch) =>
        got.push(['pmessage', ch.toString('latin1'), msg.toString('hex')]), true);
      const v = [];
      // RESP3: ordinary commands on the subscribed connection
      v.push(await sub.set('ps:x', '1'), await sub.get('ps:x'), await sub.ping());
      v.push(await other.publish('ps:ch', 'hello'), await other.publish('ps:pat1', BINARY),
        await other.publish('ps:nobody', 'x'));
      v.push(norm(await other.pubSubNumSub(['ps:ch', 'ps:other', 'ps:nobody'])));
      v.push(await other.pubSubNumPat());
      const t0 = Date.now();
      while (got.length < 2 && Date.now() - t0 < 5000) await sleep(10);
      assert.strictEqual(got.length, 2, `messages received: ${JSON.stringify(got)}`);
      v.push(got.slice());
      await sub.unsubscribe('ps:ch');
      v.push(await other.publish('ps:ch', 'after'), await other.publish('ps:other', 'still'));
      const t1 = Date.now();
      while (got.length < 3 && Date.now() - t1 < 5000) await sleep(10);
      // (the forms without arguments never resolve in node-redis 5, as in ioredis 5:
      // the library's own, straight to Redis too)
      await sub.pUnsubscribe('ps:pat*');
      await sub.unsubscribe('ps:other');
      v.push(await other.pubSubNumPat(), norm(await other.pubSubNumSub(['ps:other'])));
      await sleep(50);
      v.push(got.slice(2));
      v.push(await sub.set('ps:after', '1'), await sub.get('ps:after'));
      await sub.close();
      return { value: v };
    }],
    ['blpop', async () => {
      const b = await mk();
      const v = [await b.set('bl:x', '1'), await b.get('bl:x')];
      const t0 = Date.now();
      const p = b.blPop('bl:q', 5);
      await sleep(300);
      v.push(await other.lPush('bl:q', 'v1'));
      const res = await p;
      const ms = Date.now() - t0;
      assert(ms >= 250 && ms < 4500, `BLPOP returned after ${ms} ms`);
      v.push(norm(res));
      const t1 = Date.now();
      v.push(norm(await b.blPop('bl:empty', 0.3)));
      const ms2 = Date.now() - t1;
      assert(ms2 >= 250 && ms2 < 4500, `BLPOP timeout 0.3 returned after ${ms2} ms`);
      v.push(await b.get('bl:x'), await b.lLen('bl:q'));
      await b.close();
      return { value: v, info: `unblocked after ${ms} ms` };
    }],
    ['ttl-rule', async () => {
      const v = [await r.set('t:k', 'v', { EX: 100 }), await r.getSet('t:k', '0'), await r.get('t:k')];
      const ttl = { 't:k after GETSET': await r.ttl('t:k') };
      v.push(await r.incr('t:n'));
      ttl['t:n after INCR'] = await r.ttl('t:n');
      v.push(await r.incr('u:n'));
      ttl['u:n (no rule)'] = await r.ttl('u:n');
      v.push(await replies(r.multi().set('t:p1', 'a').incr('t:p2').hSet('t:p3', 'f', 'v').execAsPipeline()));
      v.push(await replies(r.multi().set('t:m1', 'a').incrBy('t:m2', 5).exec()));
      for (const k of ['t:p1', 't:p2', 't:p3', 't:m1', 't:m2']) ttl[k] = await r.ttl(k);
      return {
        value: v, ttl,
        expect_ttl: {
          't:k after GETSET': EXPECT.keep100, 't:n after INCR': EXPECT.rule900,
          'u:n (no rule)': EXPECT.none, 't:p1': EXPECT.rule900, 't:p2': EXPECT.rule900,
          't:p3': EXPECT.rule900, 't:m1': EXPECT.rule900, 't:m2': EXPECT.rule900,
        },
      };
    }],
    ['client-name', async () => {
      const v = [await r.clientSetName('compat-node-redis'), await r.clientGetName()];
      v.push(clientState(await r.sendCommand(['CLIENT', 'INFO'])).name);
      await r.multi().ping().exec();
      v.push(await r.clientGetName());
      // `name` goes into the handshake's HELLO 3 ... SETNAME
      const named = await mk({ name: 'compat-node-redis-named' });
      v.push(await named.clientGetName(), await named.get('b:s'), await named.clientGetName());
      await named.close();
      assert.strictEqual(v[1], 'compat-node-redis');
      assert.strictEqual(v[4], 'compat-node-redis-named');
      return { value: v };
    }],
    ['select-db1', async () => {
      // `database: 1`: SELECT 1 inside the handshake, between HELLO and CLIENT SETINFO
      const d1 = await mk({ database: 1 });
      const v = [await d1.set('sel:k', 'in-db1'), await d1.get('sel:k'), await r.get('sel:k')];
      assert.strictEqual(v[1], 'in-db1');
      assert.strictEqual(v[2], null, 'db 0 sees a key of db 1');
      v.push(await d1.dbSize(), clientState(await d1.sendCommand(['CLIENT', 'INFO'])).db);
      v.push(await replies(d1.multi().get('sel:k').exec()));
      v.push(await d1.get('sel:k'), await r.get('sel:k'), await r.exists('sel:k'));
      await d1.select(0);
      v.push(await d1.get('sel:k'));
      await d1.select(1);
      v.push(await d1.get('sel:k'));
      await d1.close();
      return { value: v };
    }],
    ['client-side-cache', async () => {
      // RESP3 client-side caching: CLIENT TRACKING ON in the handshake, GETs served
      // from the cache until another client's write brings an invalidation push
      const a = await mk({ clientSideCache: { ttl: 0, maxEntries: 0 } });
      const v = [await other.set('csc:k', 'v1'), await a.get('csc:k'), await a.get('csc:k')];
      const s1 = a.clientSideCache.stats();
      v.push([s1.hitCount, s1.missCount]);
      v.push(await other.set('csc:k', 'v2'));
      const t0 = Date.now();
      let got;
      while ((got = await a.get('csc:k')) !== 'v2' && Date.now() - t0 < 3000) await sleep(20);
      v.push(got);
      assert.strictEqual(got, 'v2', 'no invalidation: the cache still answers v1');
      assert.strictEqual(s1.hitCount, 1);
      v.push(norm(await a.sendCommand(['CLIENT', 'TRACKINGINFO'])));
      await a.close();
      return { value: v };
    }],
    ['concurrent-clients', async () => {
      // 8 clients at once, RESP2/RESP3 and db 0/1 mixed (ttlguard: shared backend
      // connections per db x protocol), each pipelining SET/GET/INCR of its own keys
      // with values of changing sizes, a MULTI now and then: every reply its own.
      const cs = await Promise.all(Array.from({ length: 8 }, (_, i) =>
        mk({ database: i % 2, RESP: (i >> 1) % 2 ? 3 : 2 })));
      const bad = await Promise.all(cs.map(async (cl, i) => {
        const errs = [];
        for (let j = 0; j < 40; j++) {
          const val = `c${i}-${j}-` + 'x'.repeat((i * 131 + j * 977) % 20000);
          const res = await Promise.all([cl.set(`cc:${i}`, val), cl.get(`cc:${i}`), cl.incr(`cc:n:${i}`)]);
          if (res[0] !== 'OK' || res[1] !== val || res[2] !== j + 1) {
            errs.push(`round ${j}: ${JSON.stringify(res).slice(0, 200)}`);
          }
          if (j % 10 === 5) {
            const m = await cl.multi().incr(`cc:m:${i}`).get(`cc:${i}`).exec();
            if (m[1] !== val) errs.push(`multi ${j}: ${JSON.stringify(m).slice(0, 200)}`);
          }
        }
        return errs;
      }));
      const dbs = [await cs[0].dbSize(), await cs[1].dbSize()];
      await Promise.all(cs.map((cl) => cl.close()));
      assert.deepStrictEqual(bad, bad.map(() => []), 'replies not the client\'s own');
      return { value: { bad, dbs } };
    }],
  ]);
}

// A createCluster client (RESP3) seeded with the target alone, over TLS when the
// config says so, connected.
async function mkCluster(extra = {}) {
  const tls = tlsOptions() && { tls: true, ...tlsOptions() };
  const c = createCluster({
    rootNodes: [{ socket: { host: cfg.host, port: cfg.port, ...tls } }],
    defaults: { socket: { connectTimeout: 3000, reconnectStrategy: false, ...tls } },
    RESP: 3, ...extra,
  });
  c.on('error', () => {});
  opened.push(c);
  await withTimeout(c.connect(), 8000, 'node-redis cluster connect');
  return c;
}

async function cluster() {
  const c = await mkCluster();
  const cb = c.withTypeMapping(BUF);
  const ownerOf = (k) => c.slots[clusterKeySlot(k)].master.port;

  await runChecks([
    ['cluster-nodes', async () => {
      const masters = c.masters.map((n) => n.port);
      checkNodePorts(masters);
      const owners = [...new Set(c.slots.map((s) => s.master.port))];
      checkNodePorts(owners);
      assert.strictEqual(owners.length, 3, `slot owners: ${owners}`);
      // node-redis lists replicas only with useReplicas: a second client with it, which
      // connects to every replica (READONLY in its handshake) and reads from them
      const v = [await c.set('{rep}:k', 'v'), await c.sendCommand('{rep}:k', false, ['WAIT', '1', '2000'])];
      const c2 = await mkCluster({ useReplicas: true });
      const replicas = c2.replicas.map((n) => n.port);
      const all = [...c2.masters.map((n) => n.port), ...replicas];
      checkNodePorts(all);
      const reads = await Promise.all(Array.from({ length: 12 }, () => c2.get('{rep}:k')));
      v.push(reads);
      await c2.close();
      return {
        value: { masters: masters.length, replicas: replicas.length, all: all.length, v },
        info: `nodes ${all.sort().join(',')}`,
      };
    }],
    ['cluster-set-get-slots', async () => {
      const keys = Array.from({ length: 300 }, (_, i) => `cs:${i}`);
      const sets = await Promise.all(keys.map((k, i) => c.set(k, `v${i}`)));
      const gets = await Promise.all(keys.map((k) => c.get(k)));
      const slots = new Set(keys.map((k) => clusterKeySlot(k)));
      const nodes = new Set(keys.map(ownerOf));
      assert(sets.every((x) => x === 'OK'));
      assert.deepStrictEqual(gets, keys.map((_, i) => `v${i}`));
      assert.strictEqual(nodes.size, 3, `keys on ${nodes.size} primaries`);
      return { value: { sets: sets.length, gets, slots: slots.size, nodes: nodes.size } };
    }],
    ['cluster-hashtag-multikey', async () => {
      const v = [await c.mSet([['{ht}:a', '1'], ['{ht}:b', '2'], ['{ht}:c', BINARY]])];
      v.push(norm(await cb.mGet(['{ht}:a', '{ht}:b', '{ht}:c', '{ht}:none'])));
      v.push(await replies(c.multi('{ht}').incr('{ht}:n').incrBy('{ht}:n', 10).rename('{ht}:a', '{ht}:a2').exec()));
      v.push(await replies(c.multi('{ht}').get('{ht}:a2').get('{ht}:b').del(['{ht}:a2', '{ht}:b']).execAsPipeline()));
      v.push(norm(await settle(c.sendCommand('{ht}', false, ['MGET', '{ht}:a', '{other}:a']))));
      return { value: v };
    }],
    ['cluster-moved', async () => {
      // a key asked of a primary that does not own it: -MOVED names the owner's port
      // as the client knows it (through ttlguard: one of its own ports)
      const v = [];
      for (const k of ['mv:a', 'mv:b', 'mv:c']) {
        const slot = clusterKeySlot(k);
        const owner = ownerOf(k);
        for (const node of c.masters) {
          if (node.port === owner) continue;
          const nc = await c.nodeClient(node);
          const e = await settle(nc.get(k));
          const m = /^MOVED (\d+) ([\d.]+):(\d+)$/.exec(e && e.message);
          assert(m, `not a MOVED: ${e && e.message}`);
          assert.strictEqual(Number(m[1]), slot);
          assert.strictEqual(Number(m[3]), owner, `MOVED to ${m[2]}:${m[3]}, owner is ${owner}`);
          checkNodePorts([Number(m[3])]);
          v.push([k, Number(m[1]), m[2]]);
        }
      }
      return { value: v };
    }],
    ['cluster-pubsub', async () => {
      // SSUBSCRIBE on the channel's shard (through ttlguard: that node's port) and
      // SPUBLISH there; plain SUBSCRIBE/PUBLISH too (any node)
      const got = [];
      const sub = c.duplicate();
      sub.on('error', () => {});
      opened.push(sub);
      await withTimeout(sub.connect(), 8000, 'subscriber cluster connect');
      await sub.sSubscribe('{cps}:ch', (m, ch) => got.push(['smessage', String(ch), String(m)]));
      await sub.subscribe('cps:plain', (m, ch) => got.push(['message', String(ch), String(m)]));
      const v = [await c.sPublish('{cps}:ch', 'hello'), await c.sPublish('{cps}:nobody', 'x')];
      await c.publish('cps:plain', 'hi');
      const t0 = Date.now();
      while (got.length < 2 && Date.now() - t0 < 5000) await sleep(10);
      v.push(got.slice().sort());
      assert.strictEqual(got.length, 2, `messages: ${JSON.stringify(got)}`);
      await sub.sUnsubscribe('{cps}:ch');
      await sub.unsubscribe('cps:plain');
      await sub.close();
      return { value: v };
    }],
    ['cluster-ttl-rule', async () => {
      const keys = Array.from({ length: 30 }, (_, i) => `t:{${i}}:n`);
      const incrs = await Promise.all(keys.map((k) => c.incr(k)));
      const ttls = await Promise.all(keys.map((k) => c.ttl(k)));
      const v = [incrs, await c.set('t:{g}:k', 'v', { EX: 100 }), await c.getSet('t:{g}:k', '0')];
      assert.strictEqual(new Set(keys.map(ownerOf)).size, 3);
      return {
        value: v,
        ttl: { 'INCR t:{i}:n min': Math.min(...ttls), 'INCR t:{i}:n max': Math.max(...ttls),
          't:{g}:k after GETSET': await c.ttl('t:{g}:k') },
        expect_ttl: { 'INCR t:{i}:n min': EXPECT.rule900, 'INCR t:{i}:n max': EXPECT.rule900,
          't:{g}:k after GETSET': EXPECT.keep100 },
      };
    }],
  ]);
}

async function failover() {
  const c = await mkCluster();
  await runChecks([['cluster-failover', () => failoverLoop(c)]], 30000);
}

// Two connections with the library's connect sequence and nothing else, each
// closed after one PING (runner.py records what they send on the way): the
// defaults (RESP3), then db 1 with a connection name.
async function handshake() {
  await runChecks([
    ['handshake', async () => {
      const a = await mk();
      const v = [await a.ping()];
      await a.close();
      await sleep(100);
      const b = await mk({ database: 1, name: 'compat-handshake' });
      v.push(await b.ping());
      await b.close();
      return { value: v };
    }],
  ]);
}

(async () => {
  try {
    if (cfg.mode === 'handshake') await handshake();
    else if (cfg.mode === 'cluster') await cluster();
    else if (cfg.mode === 'failover') await failover();
    else await standalone();
  } catch (e) {
    out({ fatal: e && e.stack ? e.stack : String(e) });
  }
  for (const c of opened) {
    try { c.destroy(); } catch (e) { /* already closed */ }
  }
  out({ done: true, library: 'redis', version: require('redis/package.json').version });
  process.exit(0);
})();
