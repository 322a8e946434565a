// Unit tests of the extension's pure parts (compiled lib/), run with node's built-in test runner.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { backoffDelay } from '../lib/backoff.js';
import { chartPath, visibleSpan } from '../lib/chart.js';
import {
  cpuServer, filesAreLost, formatBytes, formatPercent, gpuAmount, gpuModels, kernelLabel, meanUtilization, requestLabel, siteSentence,
  statusText, stoppingNotice
} from '../lib/format.js';
import { SseParser } from '../lib/sse.js';
import { GpuBurstModel } from '../lib/model.js';

const donor = {
  managed: true, site: 'donor-1', site_kind: 'donor', cluster: 'c-1', node: 'vn', reason: 'r',
  gpu_resource: 'nvidia.com/gpu', gpu_count: 1
};
const gpu = (uuid, utilization, used = 1024) => ({
  index: 0, uuid, name: 'NVIDIA A100-SXM4-40GB', mig: false, parent_uuid: null, utilization,
  utilization_note: null, memory_used_bytes: used, memory_total_bytes: 4096, temperature_c: null, power_w: null
});
const sample = (timestamp, gpus, extra = {}) => ({
  backend: 'simulated', simulated: true, available: true, reason: null, timestamp, period_s: 1,
  gpus, kernels: [], unattributed: [], ...extra
});

test('status text names the site and the mean utilization', () => {
  assert.equal(statusText(donor, sample(1, [gpu('a', 0.3), gpu('b', 0.44)])), 'donor-1 · GPU 37 %');
  assert.equal(statusText({ ...donor, site_kind: 'origin', site: 'local' }, null), 'origin');
  assert.equal(statusText(donor, sample(1, [], { available: false })), 'donor-1 · no GPU');
  assert.equal(statusText(donor, sample(1, [gpu('a', null)])), 'donor-1 · GPU');
});

test('formatting of bytes, percentages, models and kernels', () => {
  assert.equal(formatBytes(512 * 1024 * 1024), '512 MiB');
  assert.equal(formatBytes(1536), '1.5 KiB');
  assert.equal(formatBytes(null), '—');
  assert.equal(formatPercent(1.7), '100 %');
  assert.equal(formatPercent(null), '—');
  assert.equal(meanUtilization([gpu('a', null)]), null);
  assert.equal(gpuModels([gpu('a', 0), gpu('b', 0)]), '2 × NVIDIA A100-SXM4-40GB');
  assert.equal(kernelLabel('deep/dir/train.ipynb', 'python3'), 'train.ipynb');
  assert.equal(kernelLabel(null, 'python3'), 'python3 (console)');
});

test('backoff doubles up to the cap and jitters within half', () => {
  const b = { initialMs: 1000, maxMs: 30000 };
  assert.equal(backoffDelay(0, b, 0.999999), 1000);
  assert.equal(backoffDelay(3, b, 0.999999), 8000);
  assert.equal(backoffDelay(20, b, 0.999999), 30000);
  assert.equal(backoffDelay(3, b, 0), 4000);
});

test('model keeps a time window, in order, without duplicates', () => {
  const model = new GpuBurstModel(1);
  let changes = 0;
  model.changed.connect(() => (changes += 1));
  model.addSamples([sample(100, [gpu('a', 0.1)]), sample(101, [gpu('a', 0.2)])]);
  model.addSamples([sample(130, [gpu('a', 0.3)])]);
  // A history backfill overlapping what the stream already delivered.
  model.addSamples([sample(101, [gpu('a', 0.2)]), sample(120, [gpu('a', 0.25)])]);
  assert.deepEqual(model.samples.map(s => s.timestamp), [100, 101, 120, 130]);
  model.addSamples([sample(175, [gpu('a', 0.5)])]);
  assert.deepEqual(model.samples.map(s => s.timestamp), [120, 130, 175]);
  assert.deepEqual(model.series('a').map(p => p.utilization), [0.25, 0.3, 0.5]);
  assert.equal(model.latest.timestamp, 175);
  assert.equal(changes, 4);
  assert.throws(() => (model.historyMinutes = 0), RangeError);
});

test('chart path spans the window and breaks at unknown values', () => {
  const d = chartPath([{ t: 0, v: 0 }, { t: 30, v: 1 }, { t: 45, v: null }, { t: 60, v: 0.5 }], 60, 60);
  assert.equal(d, 'M0.0 46.0 L120.0 2.0 M240.0 24.0');
  assert.equal(chartPath([{ t: -10, v: 1 }], 60, 60), '');
});

test('chart x axis grows with the data, between 30 s and the window', () => {
  const pts = t0 => [{ t: t0, v: 0.1 }, { t: 1000, v: 0.2 }];
  assert.equal(visibleSpan(pts(995), 300, 1000), 30);
  assert.equal(visibleSpan(pts(880), 300, 1000), 120);
  assert.equal(visibleSpan(pts(100), 300, 1000), 300);
  assert.equal(visibleSpan([], 20, 1000), 20);
});

test('event stream parser: fields, multi-line data, comments, any line end, split chunks', () => {
  const events = [];
  const parser = new SseParser(e => events.push(e));
  parser.push(': keepalive\n\nevent: placement\ndata: {"a":');
  assert.equal(events.length, 0);
  parser.push('1}\n\nevent: sample\r\ndata: x\r\ndata:y\r');
  parser.push('\n\r\ndata: plain\r\r');
  parser.push('\n'); // a CR that ends a chunk may be half of a CRLF: held until the next one
  assert.deepEqual(events, [
    { event: 'placement', data: '{"a":1}' },
    { event: 'sample', data: 'x\ny' },
    { event: 'message', data: 'plain' }
  ]);
});

test('GPU resources and sites are named as everywhere else', () => {
  assert.equal(gpuAmount('nvidia.com/gpu', 1), '1 GPU');
  assert.equal(gpuAmount('nvidia.com/gpu', 2), '2 GPUs');
  assert.equal(gpuAmount('nvidia.com/mig-1g.10gb', 1), '1 MIG 1g.10gb slice');
  assert.equal(gpuAmount('example.com/fpga', 2), '2 example.com/fpga');
  assert.equal(requestLabel({ ...donor, gpu_label: null, gpu_resource: 'nvidia.com/mig-1g.10gb', gpu_count: 3 }), '3 MIG 1g.10gb slices');
  assert.equal(siteSentence(donor), 'Running on donor-1, a donor cluster.');
  const cpu = { ...donor, site: 'origin', site_kind: 'origin', gpu_resource: null, gpu_count: null };
  assert.equal(siteSentence(cpu), "Running on the origin, on a CPU node: this server has no GPU of its own.");
});

test('a CPU server the hub started is told apart from a server that should see a GPU', () => {
  const placement = { managed: true, site: 'origin', site_kind: 'origin', cluster: null, node: 'cpu-1', reason: null, gpu_resource: null, gpu_count: null };
  assert.equal(cpuServer(placement), true);
  assert.equal(cpuServer({ ...placement, gpu_resource: 'nvidia.com/gpu', gpu_count: 1 }), false);
  // not started by the hub: nothing says a GPU was not wanted
  assert.equal(cpuServer({ ...placement, managed: false, site_kind: 'standalone' }), false);
  assert.equal(cpuServer(null), false);
});

test('files are lost on scratch space and without a volume, kept at home and on shared storage', () => {
  assert.equal(filesAreLost({ kind: 'scratch', message: 'm' }), true);
  assert.equal(filesAreLost({ kind: 'none', message: 'm' }), true);
  assert.equal(filesAreLost({ kind: 'home', message: 'm' }), false);
  assert.equal(filesAreLost({ kind: 'shared', message: 'm' }), false);
  assert.equal(filesAreLost(null), false);
  assert.equal(filesAreLost(undefined), false);
});

test("a stopping server points to its spawn page, where the hub says why", () => {
  assert.deepEqual(stoppingNotice('/hub/', 'alice', ''), {
    text: 'This server is stopping. Its page at the hub says why and starts it again.',
    href: '/hub/spawn/alice'
  });
  assert.equal(stoppingNotice('/base/hub', 'a b', 'gpu').href, '/base/hub/spawn/a%20b/gpu');
  assert.equal(stoppingNotice('/hub/').href, '/hub/spawn');
  assert.deepEqual(stoppingNotice(''), { text: 'This server is stopping.', href: null });
});

test('the stream parser hands on a stopping event', () => {
  const seen = [];
  const parser = new SseParser(event => seen.push(event.event));
  parser.push('event: sample\ndata: {}\n\nevent: stopping\ndata: {}\n\n');
  assert.deepEqual(seen, ['sample', 'stopping']);
});
