'use strict';
// ioredis against one target (ttlguard or Redis itself): see common.js for the
// protocol with runner.py. ioredis speaks RESP2; its connect sequence is
// [CLIENT SETNAME] CLIENT SETINFO LIB-VER, CLIENT SETINFO LIB-NAME (errors ignored:
// Redis before 7.2 has no SETINFO), INFO (the ready check), [SELECT db].

const Redis = require('ioredis');
const clusterKeySlot = require('cluster-key-slot');
const {
  assert, cfg, out, withTimeout, sleep, norm, BINARY, BINARY_KEY, clientState, checkNodePorts,
  tlsOptions, failoverLoop, runChecks, pipelineCommands, EXPECT,
} = require('./common');

const opened = [];

function mk(extra = {}) {
  const c = new Redis({
    host: cfg.host, port: cfg.port, connectTimeout: 3000, commandTimeout: 8000,
    maxRetriesPerRequest: 0, retryStrategy: () => null, enableOfflineQueue: true, ...extra,
  });
  c.on('error', () => {}); // surfaced through the commands' own rejections
  opened.push(c);
  return c;
}

function ready(c) {
  if (c.status === 'ready') return Promise.resolve(c);
  return withTimeout(new Promise((resolve, reject) => {
    c.once('ready', () => resolve(c));
    c.once('end', () => reject(new Error('connection ended before ready')));
  }), 5000, 'ioredis ready');
}

async function settle(p) {
  try { return await p; } catch (e) { return e; }
}

async function standalone() {
  const r = await ready(mk());
  const other = await ready(mk());

  await runChecks([
    ['connect', async () => {
      const info = await r.client('INFO');
      const st = clientState(info);
      assert.strictEqual(st.resp, '2');
      return {
        value: { state: st, ping: await r.ping(), echo: norm(await r.echoBuffer(BINARY)) },
        info: `resp=${st.resp} lib-name=${st['lib-name'] || '(none)'} lib-ver=${st['lib-ver'] || '(none)'}`,
      };
    }],
    ['client-setinfo', async () => {
      // What the connect sequence sent, explicitly: the same reply both ways.
      const a = await settle(r.client('SETINFO', 'LIB-NAME', 'compat-check'));
      const b = await settle(r.client('SETINFO', 'LIB-VER', '9.9.9'));
      const st = clientState(await r.client('INFO'));
      return { value: [norm(a), norm(b), st, await r.ping()] };
    }],
    ['set-get-binary', async () => {
      const v = [];
      v.push(await r.set(BINARY_KEY, BINARY));
      const got = await r.getBuffer(BINARY_KEY);
      assert(Buffer.compare(got, BINARY) === 0, 'binary value changed');
      v.push(norm(got));
      v.push(await r.strlen(BINARY_KEY));
      v.push(await r.set('b:s', 'plain'), await r.get('b:s'), await r.get('b:missing'));
      v.push(await r.incr('b:ctr'), await r.incr('b:ctr'), await r.incrby('b:ctr', 40));
      assert.strictEqual(v[v.length - 1], 42);
      v.push(norm(await settle(r.incr('b:s'))));
      v.push(await r.append('b:s', Buffer.from([0, 1, 2])), norm(await r.getBuffer('b:s')));
      return { value: v };
    }],
    ['pipeline-100', async () => {
      const p = r.pipeline();
      for (const [name, ...args] of pipelineCommands()) p.call(name, ...args);
      const res = await p.exec();
      assert.strictEqual(res.length, 100);
      const flat = res.map(([err, val]) => (err ? { err: err.message } : norm(val)));
      assert.deepStrictEqual(flat[1], 'val-0');
      assert(flat.some((x) => x && x.err && /not an integer/.test(x.err)), 'no error in the pipeline');
      return { value: flat };
    }],
    ['multi-exec', async () => {
      const res = await r.multi().set('m:a', '1').incr('m:a').lpush('m:a', 'x').get('m:a')
        .exec();
      const v = [res.map(([err, val]) => (err ? { err: err.message } : norm(val)))];
      assert.deepStrictEqual(v[0][1], 2);
      // a queue-time error: EXECABORT
      v.push(norm(await settle(r.multi().call('SET', 'm:b').incr('m:c').exec())));
      v.push(await r.get('m:c'));
      // MULTI ... DISCARD by hand
      const m = mk();
      await ready(m);
      v.push(await m.multi({ pipeline: false }), await m.set('m:d', '1'), await m.discard(),
        await m.get('m:d'));
      m.disconnect();
      return { value: v };
    }],
    ['watch-optimistic', async () => {
      const w = await ready(mk());
      await r.set('w:k', 'start');
      const v = [await w.watch('w:k'), await w.get('w:k')];
      v.push(await other.set('w:k', 'changed-by-other'));
      const aborted = await w.multi().set('w:k', 'mine').exec();
      assert.strictEqual(aborted, null, 'EXEC after a watched key changed must abort');
      v.push(aborted);
      v.push(await w.watch('w:k'), await w.get('w:k'));
      const done = await w.multi().incr('w:c').set('w:k', 'mine').exec();
      v.push(done.map(([e, x]) => (e ? { err: e.message } : x)));
      v.push(await r.get('w:k'));
      assert.strictEqual(v[v.length - 1], 'mine');
      w.disconnect();
      return { value: v };
    }],
    ['pubsub', async () => {
      const sub = await ready(mk());
      const got = [];
      sub.on('messageBuffer', (ch, msg) => got.push(['message', ch.toString('latin1'), msg.toString('hex')]));
      sub.on('pmessageBuffer', (pat, ch, msg) =>
        got.push(['pmessage', pat.toString('latin1'), ch.toString('latin1'), msg.toString('hex')]));
      const v = [await sub.subscribe('ps:ch', 'ps:other'), await sub.psubscribe('ps:pat*')];
      v.push(norm(await sub.ping()));
      v.push(await other.publish('ps:ch', 'hello'), await other.publish('ps:pat1', BINARY),
        await other.publish('ps:nobody', 'x'));
      v.push(norm(await other.pubsub('NUMSUB', 'ps:ch', 'ps:other', 'ps:nobody')));
      v.push(await other.pubsub('NUMPAT'));
      const t0 = Date.now();
      while (got.length < 2 && Date.now() - t0 < 5000) await sleep(10);
      assert.strictEqual(got.length, 2, `messages received: ${JSON.stringify(got)}`);
      v.push(got.slice());
      v.push(await sub.unsubscribe('ps:ch'), await other.publish('ps:ch', 'after'));
      v.push(await sub.punsubscribe('ps:pat*'), await sub.unsubscribe('ps:other'));
      await sleep(50);
      v.push(got.length);
      // out of subscribe mode the connection works as before
      v.push(await sub.set('ps:after', '1'), await sub.get('ps:after'));
      sub.disconnect();
      return { value: v };
    }],
    ['blpop', async () => {
      const b = await ready(mk());
      const v = [await b.set('bl:x', '1'), await b.get('bl:x')]; // a used connection first
      const t0 = Date.now();
      const p = b.blpop('bl:q', 5);
      await sleep(300);
      v.push(await other.lpush('bl:q', 'v1'));
      const res = await p;
      const ms = Date.now() - t0;
      assert(ms >= 250 && ms < 4500, `BLPOP returned after ${ms} ms`);
      v.push(res);
      const t1 = Date.now();
      v.push(await b.blpop('bl:empty', 0.3));
      const ms2 = Date.now() - t1;
      assert(ms2 >= 250 && ms2 < 4500, `BLPOP timeout 0.3 returned after ${ms2} ms`);
      v.push(await b.get('bl:x'), await b.llen('bl:q'));
      b.disconnect();
      return { value: v, info: `unblocked after ${ms} ms` };
    }],
    ['ttl-rule', async () => {
      const v = [await r.set('t:k', 'v', 'EX', 100), await r.getset('t:k', '0'), await r.get('t:k')];
      const ttl = { 't:k after GETSET': await r.ttl('t:k') };
      v.push(await r.incr('t:n'));
      ttl['t:n after INCR'] = await r.ttl('t:n');
      v.push(await r.incr('u:n'));
      ttl['u:n (no rule)'] = await r.ttl('u:n');
      const pl = await r.pipeline().set('t:p1', 'a').incr('t:p2').hset('t:p3', 'f', 'v').exec();
      v.push(pl.map(([e, x]) => (e ? { err: e.message } : x)));
      const mx = await r.multi().set('t:m1', 'a').incrby('t:m2', 5).exec();
      v.push(mx.map(([e, x]) => (e ? { err: e.message } : x)));
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
      const v = [await r.client('SETNAME', 'compat-ioredis'), await r.client('GETNAME')];
      v.push(clientState(await r.client('INFO')).name);
      await r.multi().ping().exec(); // (ttlguard: a connection of its own from here)
      v.push(await r.client('GETNAME'));
      const named = await ready(mk({ connectionName: 'compat-ioredis-named' }));
      v.push(await named.client('GETNAME'), await named.get('b:s'), await named.client('GETNAME'));
      named.disconnect();
      assert.strictEqual(v[1], 'compat-ioredis');
      assert.strictEqual(v[4], 'compat-ioredis-named');
      return { value: v };
    }],
    ['select-db1', async () => {
      const d1 = await ready(mk({ db: 1 }));
      const v = [await d1.set('sel:k', 'in-db1'), await d1.get('sel:k'), await r.get('sel:k')];
      assert.strictEqual(v[1], 'in-db1');
      assert.strictEqual(v[2], null, 'db 0 sees a key of db 1');
      v.push(await d1.dbsize(), clientState(await d1.client('INFO')).db);
      v.push((await d1.multi().get('sel:k').exec()).map(([e, x]) => x));
      v.push(await d1.get('sel:k'), await r.get('sel:k'), await r.exists('sel:k'));
      await d1.select(0);
      v.push(await d1.get('sel:k'));
      await d1.select(1);
      v.push(await d1.get('sel:k'));
      d1.disconnect();
      return { value: v };
    }],
    ['auto-pipelining', async () => {
      // enableAutoPipelining: every command of one tick in one write
      const a = await ready(mk({ enableAutoPipelining: true }));
      const sets = await Promise.all(Array.from({ length: 300 }, (_, i) => a.set(`ap:${i}`, `v${i}`)));
      const gets = await Promise.all(Array.from({ length: 300 }, (_, i) => a.get(`ap:${i}`)));
      const mixed = await Promise.all(Array.from({ length: 100 }, (_, i) =>
        (i % 3 ? a.incr('ap:n') : settle(a.incr('ap:0'))).then(norm)));
      a.disconnect();
      assert(sets.every((x) => x === 'OK'));
      assert.deepStrictEqual(gets, gets.map((_, i) => `v${i}`));
      return { value: [sets.length, gets, mixed] };
    }],
    ['concurrent-clients', async () => {
      // 8 clients at once, db 0 and db 1 alternating (ttlguard: shared backend
      // connections per db), each pipelining SET/GET/INCR of its own keys with values of
      // changing sizes, a MULTI now and then: every reply must be the client's own.
      const cs = await Promise.all(Array.from({ length: 8 }, (_, i) => ready(mk({ db: i % 2 }))));
      const bad = await Promise.all(cs.map(async (cl, i) => {
        const errs = [];
        for (let j = 0; j < 40; j++) {
          const val = `c${i}-${j}-` + 'x'.repeat((i * 131 + j * 977) % 20000);
          const res = await cl.pipeline().set(`cc:${i}`, val).get(`cc:${i}`).incr(`cc:n:${i}`).exec();
          if (res.some(([e]) => e) || res[0][1] !== 'OK' || res[1][1] !== val || res[2][1] !== j + 1) {
            errs.push(`round ${j}: ${JSON.stringify(res).slice(0, 200)}`);
          }
          if (j % 10 === 5) {
            const m = await cl.multi().incr(`cc:m:${i}`).get(`cc:${i}`).exec();
            if (m[1][1] !== val) errs.push(`multi ${j}: ${JSON.stringify(m).slice(0, 200)}`);
          }
        }
        return errs;
      }));
      const dbs = [await cs[0].dbsize(), await cs[1].dbsize()];
      cs.forEach((cl) => cl.disconnect());
      assert.deepStrictEqual(bad, bad.map(() => []), 'replies not the client\'s own');
      return { value: { bad, dbs } };
    }],
  ]);
}

// A Redis.Cluster seeded with the target alone (over TLS when the config says so),
// ready. redisOptions: more options for every node connection.
async function mkCluster(opts = {}, redisOptions = {}) {
  const c = new Redis.Cluster([{ host: cfg.host, port: cfg.port }], {
    clusterRetryStrategy: () => null, ...opts,
    redisOptions: { connectTimeout: 3000, commandTimeout: 8000, tls: tlsOptions(), ...redisOptions },
  });
  c.on('error', () => {});
  opened.push(c);
  await withTimeout(new Promise((resolve, reject) => {
    c.once('ready', resolve);
    c.once('end', () => reject(new Error('cluster client ended before ready')));
  }), 8000, 'ioredis cluster ready');
  return c;
}

async function cluster() {
  const c = await mkCluster({ slotsRefreshTimeout: 3000, enableOfflineQueue: true },
    { maxRetriesPerRequest: 1 });

  await runChecks([
    ['cluster-nodes', async () => {
      const masters = c.nodes('master').map((n) => n.options.port);
      const replicas = c.nodes('slave').map((n) => n.options.port);
      const all = c.nodes('all').map((n) => n.options.port);
      checkNodePorts(all);
      // every slot's owner too
      const owners = [...new Set(c.slots.filter(Boolean).map((s) => Number(s[0].split(':').pop())))];
      checkNodePorts(owners);
      assert.strictEqual(owners.length, 3, `slot owners: ${owners}`);
      return {
        value: { masters: masters.length, replicas: replicas.length, all: all.length },
        info: `nodes ${all.sort().join(',')}`,
      };
    }],
    ['cluster-set-get-slots', async () => {
      const keys = Array.from({ length: 300 }, (_, i) => `cs:${i}`);
      const sets = await Promise.all(keys.map((k, i) => c.set(k, `v${i}`)));
      const gets = await Promise.all(keys.map((k) => c.get(k)));
      const slots = new Set(keys.map((k) => clusterKeySlot(k)));
      const nodes = new Set(keys.map((k) => c.slots[clusterKeySlot(k)][0]));
      assert(sets.every((x) => x === 'OK'));
      assert.deepStrictEqual(gets, keys.map((_, i) => `v${i}`));
      assert.strictEqual(nodes.size, 3, `keys on ${nodes.size} primaries`);
      return { value: { sets: sets.length, gets, slots: slots.size, nodes: nodes.size } };
    }],
    ['cluster-hashtag-multikey', async () => {
      const v = [await c.mset('{ht}:a', '1', '{ht}:b', '2', '{ht}:c', BINARY)];
      v.push(norm(await c.mgetBuffer('{ht}:a', '{ht}:b', '{ht}:c', '{ht}:none')));
      const tx = await c.multi().incr('{ht}:n').incrby('{ht}:n', 10).rename('{ht}:a', '{ht}:a2').exec();
      v.push(tx.map(([e, x]) => (e ? { err: e.message } : x)));
      const pl = await c.pipeline().get('{ht}:a2').get('{ht}:b').del('{ht}:a2', '{ht}:b').exec();
      v.push(pl.map(([e, x]) => (e ? { err: e.message } : x)));
      v.push(norm(await settle(c.call('MGET', '{ht}:a', '{other}:a'))));
      return { value: v };
    }],
    ['cluster-moved', async () => {
      // a key asked of a primary that does not own it: -MOVED names the owner's port
      // as the client knows it (through ttlguard: one of its own ports)
      const v = [];
      for (const k of ['mv:a', 'mv:b', 'mv:c']) {
        const slot = clusterKeySlot(k);
        const owner = Number(c.slots[slot][0].split(':').pop());
        for (const node of c.nodes('master')) {
          if (node.options.port === owner) continue;
          const e = await settle(node.get(k));
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
      // SUBSCRIBE through a second cluster client (ioredis picks one node for it) and
      // PUBLISH through the first (the cluster bus carries it across)
      const sub = await mkCluster();
      const got = [];
      sub.on('message', (ch, m) => got.push([ch, m]));
      const v = [await sub.subscribe('cps:plain')];
      checkNodePorts([sub.subscriber.subscriber.options.port]);
      const t0 = Date.now();
      while (got.length < 1 && Date.now() - t0 < 5000) {
        await c.publish('cps:plain', 'hi');     // (until the subscription has reached every node)
        await sleep(50);
      }
      v.push(got[0]);
      assert(got.length >= 1, 'no message');
      sub.disconnect();
      return { value: v };
    }],
    ['cluster-ttl-rule', async () => {
      const keys = Array.from({ length: 30 }, (_, i) => `t:{${i}}:n`);
      const incrs = await Promise.all(keys.map((k) => c.incr(k)));
      const ttls = await Promise.all(keys.map((k) => c.ttl(k)));
      const v = [incrs, await c.set('t:{g}:k', 'v', 'EX', 100), await c.getset('t:{g}:k', '0')];
      const nodes = new Set(keys.map((k) => c.slots[clusterKeySlot(k)][0]));
      assert.strictEqual(nodes.size, 3);
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
  const c = await mkCluster({ slotsRefreshTimeout: 3000 }, { maxRetriesPerRequest: 1 });
  await runChecks([['cluster-failover', () => failoverLoop(c)]], 30000);
}

// Two connections with the library's connect sequence and nothing else, each
// closed after one PING (runner.py records what they send on the way): the
// defaults, then db 1 with a connection name.
async function handshake() {
  await runChecks([
    ['handshake', async () => {
      const a = await ready(mk());
      const v = [await a.ping()];
      a.disconnect();
      await sleep(100);
      const b = await ready(mk({ db: 1, connectionName: 'compat-handshake' }));
      v.push(await b.ping());
      b.disconnect();
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
  for (const c of opened) c.disconnect();
  out({ done: true, library: 'ioredis', version: require('ioredis/package.json').version });
  process.exit(0);
})();
