// Unit tests of the client's stream lifetime (compiled lib/), against a fake server: a fetch whose
// stream bodies the tests write to and end, and a document whose visibility they set.
import assert from 'node:assert/strict';
import { register } from 'node:module';
import { test } from 'node:test';

import { ServerConnection } from '@jupyterlab/services';

// lib/ is written for the bundler: its relative imports carry no extension, which node needs.
register(
  'data:text/javascript,' +
    encodeURIComponent(`export async function resolve(specifier, context, next) {
      const bare = /^\\.\\.?\\//.test(specifier) && !/\\.[cm]?js$/.test(specifier);
      return next(bare ? specifier + '.js' : specifier, context);
    }`)
);

const BASE = 'http://lab.test/';
const encoder = new TextEncoder();

// Made before the fake document exists: with a document, makeSettings parses URLs through it.
let server = null;
const serverSettings = ServerConnection.makeSettings({ baseUrl: BASE, fetch: request => server.fetch(request) });

class FakeDocument extends EventTarget {
  visibilityState = 'visible';
  cookie = '';

  setVisibility(state) {
    this.visibilityState = state;
    this.dispatchEvent(new Event('visibilitychange'));
  }
}
const fakeDocument = new FakeDocument();
globalThis.document = fakeDocument;
globalThis.window = globalThis;

const { GpuBurstClient } = await import('../lib/client.js');

/** A server that answers every stream request with a body the test writes to and ends. */
function fakeServer() {
  const streams = [];
  const gets = [];
  const fake = { streams, gets, down: false };
  fake.fetch = async request => {
    const path = new URL(request.url).pathname;
    if (fake.down) {
      return new Response('down', { status: 503 });
    }
    if (path !== '/api/gpuburst/stream') {
      gets.push(path);
      return new Response(JSON.stringify({ samples: [] }), { status: 200 });
    }
    const stream = { aborted: false };
    const body = new ReadableStream({
      start(controller) {
        stream.send = (event, data) => controller.enqueue(encoder.encode(`event: ${event}\ndata: ${data}\n\n`));
        stream.end = () => controller.close();
      }
    });
    request.signal.addEventListener('abort', () => {
      stream.aborted = true;
      try {
        stream.end();
      } catch {
        // already ended
      }
    });
    streams.push(stream);
    return new Response(body, { status: 200, headers: { 'Content-Type': 'text/event-stream' } });
  };
  return fake;
}

function untilState(client, state) {
  if (client.status.state === state) {
    return Promise.resolve();
  }
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`still ${client.status.state}, not ${state}`)), 5000);
    const check = (_, status) => {
      if (status.state === state) {
        clearTimeout(timer);
        client.statusChanged.disconnect(check);
        resolve();
      }
    };
    client.statusChanged.connect(check);
  });
}

const tick = (ms = 20) => new Promise(resolve => setTimeout(resolve, ms));

async function openClient(options = {}) {
  server = fakeServer();
  const client = new GpuBurstClient({ serverSettings, ...options });
  const samples = [];
  const states = [];
  client.samplesReceived.connect((_, received) => samples.push(...received));
  client.statusChanged.connect((_, status) => states.push(status.state));
  client.setDemand('panel', true);
  await untilState(client, 'open');
  assert.equal(server.streams.length, 1);
  return { client, server, samples, states };
}

test('demand that comes back within the linger keeps reading the same stream', async () => {
  const { client, server, samples } = await openClient({ lingerMs: 60_000 });
  try {
    client.setDemand('panel', false);
    await tick();
    assert.equal(client.status.state, 'open', 'a lingering stream is still open');
    server.streams[0].send('sample', JSON.stringify({ timestamp: 1 }));
    await tick();
    assert.deepEqual(samples, [{ timestamp: 1 }], 'samples still arrive while it lingers');
    client.setDemand('panel', true);
    fakeDocument.setVisibility('hidden');
    await tick();
    assert.equal(client.status.state, 'open');
    fakeDocument.setVisibility('visible');
    await tick();
    assert.equal(server.streams.length, 1, 'no new request');
    assert.equal(server.streams[0].aborted, false);
    assert.deepEqual(server.gets, [], 'no history refetch');
  } finally {
    client.dispose();
  }
});

test('past the linger the stream is aborted and the client is paused', async () => {
  const { client, server } = await openClient({ lingerMs: 50 });
  try {
    client.setDemand('panel', false);
    assert.equal(client.status.state, 'open');
    await untilState(client, 'paused');
    assert.equal(server.streams[0].aborted, true);
    assert.deepEqual(client.status, { state: 'paused', retryAt: null, attempt: 0 });
    // Resuming is a fresh stream, and the history fills the gap.
    client.setDemand('panel', true);
    await untilState(client, 'open');
    assert.equal(server.streams.length, 2);
    await tick();
    assert.deepEqual(server.gets, ['/api/gpuburst/history']);
  } finally {
    client.dispose();
  }
});

test('a hidden tab closes the stream after the linger too', async () => {
  const { client, server } = await openClient({ lingerMs: 50 });
  try {
    fakeDocument.setVisibility('hidden');
    assert.equal(client.status.state, 'open');
    await untilState(client, 'paused');
    assert.equal(server.streams[0].aborted, true);
  } finally {
    fakeDocument.setVisibility('visible');
    client.dispose();
  }
});

test('a stream that ends while it lingers is not retried', async () => {
  const { client, server, states } = await openClient({ lingerMs: 60_000 });
  try {
    client.setDemand('panel', false);
    await tick();
    server.streams[0].end();
    await untilState(client, 'paused');
    assert.deepEqual(states, ['connecting', 'open', 'paused']);
    assert.deepEqual(client.status, { state: 'paused', retryAt: null, attempt: 0 });
    assert.equal(server.streams.length, 1);
  } finally {
    client.dispose();
  }
});

test('dispose closes the stream at once, lingering or not', async () => {
  for (const lingering of [false, true]) {
    const { client, server } = await openClient({ lingerMs: 60_000 });
    if (lingering) {
      client.setDemand('panel', false);
    }
    client.dispose();
    assert.equal(server.streams[0].aborted, true, lingering ? 'while lingering' : 'while wanted');
  }
});

test('a linger of 0 closes the stream as soon as demand drops', async () => {
  const { client, server } = await openClient({ lingerMs: 0 });
  try {
    client.setDemand('panel', false);
    assert.equal(client.status.state, 'paused');
    assert.equal(server.streams[0].aborted, true);
  } finally {
    client.dispose();
  }
});

test('a connect under way when demand drops lingers like an open stream', async () => {
  server = fakeServer();
  const client = new GpuBurstClient({ serverSettings, lingerMs: 50 });
  try {
    client.setDemand('panel', true);
    client.setDemand('panel', false);
    assert.equal(client.status.state, 'connecting');
    await untilState(client, 'open');
    await untilState(client, 'paused');
    assert.equal(server.streams.length, 1);
    assert.equal(server.streams[0].aborted, true);
  } finally {
    client.dispose();
  }
});

test('demand that drops while waiting to retry pauses at once', async () => {
  server = fakeServer();
  server.down = true;
  const client = new GpuBurstClient({ serverSettings, lingerMs: 60_000, backoff: { initialMs: 60_000, maxMs: 60_000 } });
  try {
    client.setDemand('panel', true);
    await untilState(client, 'retrying');
    assert.notEqual(client.status.retryAt, null, 'waiting for the next attempt');
    client.setDemand('panel', false);
    assert.deepEqual(client.status, { state: 'paused', retryAt: null, attempt: 0 });
  } finally {
    client.dispose();
  }
});
