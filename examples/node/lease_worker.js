#!/usr/bin/env node
// dlock lease worker with node-postgres (pg): acquire, renew in the
// background, fence every write with the token, release.
//
//   npm ci        # installs pg from package-lock.json
//   node lease_worker.js --url postgresql://app:secret@127.0.0.1:6432/app \
//       --name nightly-report --ttl 10 --steps 5 --step-time 1
//
// It needs dlock in the database and the table job_progress (see
// examples/README.md): the work it does is to write one row per step.
//
// Exit status: 0 work done and lease released; 3 lease lost (a renewal
// returned NULL, or with --events-url its "forced" or "expired" event came),
// work stopped; 4 lease lost (a fenced write was refused with SQLSTATE
// DL001), work stopped; 5 lease not granted within --timeout; 1 error.
//
// With --events-url URL (a direct session connection: LISTEN does not work
// through PgBouncer in transaction mode) it listens to dlock's change events
// and learns that its lease was forced or expired at once, not at its next
// renewal; the renewals and the fenced writes stay, for an event lost with
// its connection.
//
// Works directly and behind PgBouncer in transaction mode: every call passes
// an explicit owner, and pg only prepares statements on the server when a
// query is given a name, which this program never does.
'use strict';

const crypto = require('node:crypto');
const os = require('node:os');
const { parseArgs } = require('node:util');
const { Client } = require('pg');

const EXIT_DONE = 0, EXIT_RENEW_LOST = 3, EXIT_FENCED = 4, EXIT_NOT_GRANTED = 5;

const log = (s) => process.stdout.write(s + '\n');

async function connect(url) {
  const client = new Client({ connectionString: url });
  client.on('error', () => {}); // a dropped connection surfaces on the next query
  await client.connect();
  return client; // autocommit: each dlock call takes effect when it returns
}

// Renews the lease every ttl/3 on its own connection.  `lost` resolves with
// the reason when a renewal returns NULL, or when renewals have failed until
// the lease's end has passed.
class Renewer {
  constructor(url, name, ttl, owner, grantedAt) {
    Object.assign(this, { url, name, ttl, owner });
    // The lease ends at most ttl after the request that granted or renewed
    // it was sent (monotonic clock, as the server's).
    this.validUntil = grantedAt + ttl * 1000;
    this.reason = null;
    this.lost = new Promise((resolve) => { this.setLost = resolve; });
    this.stopped = false;
    this.done = this.loop();
  }

  lose(reason) {
    if (this.reason === null) this.reason = reason; // an event and a renewal may both tell
    this.setLost(reason);
  }

  sleep(ms) {
    return new Promise((resolve) => {
      this.wake = resolve;
      this.timer = setTimeout(resolve, ms);
    });
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
    if (this.wake) this.wake();
    return this.done;
  }

  async loop() {
    let conn = null;
    while (true) {
      await this.sleep((this.ttl * 1000) / 3);
      if (this.stopped) break;
      const sent = performance.now();
      let until;
      try {
        if (conn === null) conn = await connect(this.url);
        const r = await conn.query(
          'SELECT dlock_renew($1, make_interval(secs => $2), $3) AS until',
          [this.name, this.ttl, this.owner]);
        until = r.rows[0].until;
      } catch (e) {
        if (e.code && !e.code.startsWith('08')) {
          this.lose(`renewal error ${e.code}: ${e.message}`);
          break;
        }
        // Connection trouble: the lease is still ours until validUntil.
        log(`renewal failed (${e.code || e.message}); retrying`);
        if (conn !== null) conn.end().catch(() => {});
        conn = null;
        if (performance.now() >= this.validUntil) {
          this.lose('renewals failed until the lease ended');
          break;
        }
        continue;
      }
      if (until === null) {
        this.lose('renewal returned NULL');
        break;
      }
      this.validUntil = sent + this.ttl * 1000;
      log(`renewed until ${until.toISOString()}`);
    }
    if (conn !== null) await conn.end().catch(() => {});
  }
}

// Listens to change events (LISTEN dlock) on its own connection, opened
// before the grant; an end of the lease with `token` makes `renewer` report
// the lease lost at once.
async function listenEvents(url) {
  const ev = await connect(url);
  await ev.query('LISTEN dlock');
  ev.watch = (token, renewer) => {
    ev.on('notification', (n) => {
      if (n.channel !== 'dlock') return;
      const e = JSON.parse(n.payload);
      // tokens are 64-bit: compared as the digits they are, not as a Number
      const tok = /"token": (\d+)/.exec(n.payload);
      if (tok && tok[1] === token && ['forced', 'expired', 'ended'].includes(e.event)) {
        renewer.lose(`lease ${e.event} (event seq ${/"seq": (\d+)/.exec(n.payload)[1]})`);
      }
    });
    ev.on('end', () => log('events: connection lost; the renewals go on'));
  };
  return ev;
}

// The fence and the write commit together, or not at all.
async function fencedWrite(conn, name, token, step, owner) {
  await conn.query('BEGIN');
  try {
    await conn.query('SELECT dlock_fence($1, $2)', [name, token]);
    await conn.query(
      'INSERT INTO job_progress (job, step, token, worker) VALUES ($1, $2, $3, $4)',
      [name, step, token, owner]);
    await conn.query('COMMIT');
  } catch (e) {
    await conn.query('ROLLBACK').catch(() => {});
    throw e;
  }
}

async function main() {
  const { values: a } = parseArgs({
    options: {
      url: { type: 'string' },
      name: { type: 'string' },
      owner: { type: 'string' },
      ttl: { type: 'string', default: '10' },
      timeout: { type: 'string', default: '30' },
      steps: { type: 'string', default: '5' },
      'step-time': { type: 'string', default: '1' },
      'events-url': { type: 'string' },
    },
  });
  if (!a.url || !a.name) {
    console.error('usage: lease_worker.js --url URL --name LOCK [--owner O] [--ttl S]' +
      ' [--timeout S] [--steps N] [--step-time S] [--events-url URL]');
    return 2;
  }
  const ttl = Number(a.ttl), timeout = Number(a.timeout), steps = Number(a.steps);
  const stepMs = Number(a['step-time']) * 1000;
  const owner = a.owner || `${os.hostname()}:${process.pid}:${crypto.randomUUID()}`;
  const name = a.name;

  // listening before the grant: none of the lease's events is missed
  const events = a['events-url'] ? await listenEvents(a['events-url']) : null;
  const conn = await connect(a.url);
  try {
    const sent = performance.now();
    // bigint comes back as a string: keep the token as it is, never a Number.
    // With events, the grant asks for them (SET LOCAL's effect, in the
    // statement itself: fine behind PgBouncer too).
    const r = await conn.query(
      'SELECT dlock_acquire($1, make_interval(secs => $2), make_interval(secs => $3), $4) AS token' +
      (events ? " FROM set_config('dlock.events', 'on', true)" : ''),
      [name, ttl, timeout, owner]);
    const token = r.rows[0].token;
    if (token === null) {
      log(`not granted within ${timeout} s`);
      return EXIT_NOT_GRANTED;
    }
    log(`acquired ${name} token=${token} owner=${owner}`);

    const renewer = new Renewer(a.url, name, ttl, owner, sent);
    if (events) events.watch(token, renewer);
    let status = EXIT_DONE;
    try {
      for (let step = 1; step <= steps; step++) {
        // The work of this step; cut short as soon as the lease is lost.
        let timer;
        const lost = await Promise.race([
          renewer.lost.then(() => true),
          new Promise((resolve) => { timer = setTimeout(resolve, stepMs, false); }),
        ]);
        clearTimeout(timer);
        if (lost) {
          log(`lease lost: ${renewer.reason}; stopping work`);
          status = EXIT_RENEW_LOST;
          break;
        }
        try {
          await fencedWrite(conn, name, token, step, owner);
        } catch (e) {
          if (e.code !== 'DL001') throw e;
          log(`lease lost: fenced write refused (DL001: ${e.message}); stopping work`);
          status = EXIT_FENCED;
          break;
        }
        log(`step ${step} written`);
      }
    } finally {
      await renewer.stop();
      // Harmless if the lease is gone: it never releases another's lease.
      const rel = await conn.query('SELECT dlock_release($1, $2, $3) AS released',
        [name, owner, token]);
      log(`released=${rel.rows[0].released}`);
    }
    return status;
  } finally {
    await conn.end();
    if (events) {
      events.removeAllListeners('end');
      await events.end().catch(() => {});
    }
  }
}

main().then(
  (code) => { process.exitCode = code; },
  (e) => { console.error(e); process.exitCode = 1; });
