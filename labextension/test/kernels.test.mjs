// Unit tests of the GPU kernel wording (compiled lib/), run with node's built-in test runner.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { kernelSiteText } from '../lib/kernelformat.js';

test('a GPU kernel names its site the way the panel names the server', () => {
  assert.equal(kernelSiteText({ site: 'origin', site_kind: 'origin', resource: null, count: null }), 'origin');
  // a donor by its own name, never 'donor polito-hpc'
  assert.equal(kernelSiteText({ site: 'polito-hpc', site_kind: 'donor', resource: null, count: null }), 'polito-hpc');
  assert.equal(kernelSiteText({ site: null, site_kind: null, resource: null, count: null }), 'placing…');
});

test('the launcher says how many GPU kernels could start now, and where', async () => {
  const { availabilityText, kernelMemoryText } = await import('../lib/kernelformat.js');
  assert.equal(availabilityText({ origin: 2, donors: 5 }), '2 free on origin, 5 on donors');
  assert.equal(availabilityText({ origin: 0, donors: 5 }), '5 free on donors');
  assert.equal(availabilityText({ origin: 1, donors: 0 }), '1 free on origin');
  assert.equal(availabilityText({ origin: 0, donors: 0 }), 'none free now');
  assert.equal(availabilityText(null), '');
  assert.equal(kernelMemoryText({ memory_used_bytes: 1.5 * 1024 ** 3, memory_total_bytes: 40 * 1024 ** 3, utilization: 0 }), '1.5 / 40.0 GiB');
  assert.equal(kernelMemoryText({ memory_used_bytes: null, memory_total_bytes: null, utilization: null }), '—');
  assert.equal(kernelMemoryText(null), '—');
});

test('a GPU kernel row in the Kernels card shows its site and the memory its pod measures', async () => {
  const { remoteKernelCells } = await import('../lib/kernelformat.js');
  const donor = { site: 'donor-1', site_kind: 'donor', resource: 'nvidia.com/gpu', count: 1 };
  const cells = remoteKernelCells({ ...donor, gpu: { memory_used_bytes: 0.5 * 1024 ** 3, memory_total_bytes: 40 * 1024 ** 3, utilization: 3 } });
  assert.equal(cells.gpu, 'donor-1');
  assert.equal(cells.memory, '0.5 GiB');
  assert.match(cells.title, /\(donor-1, a donor cluster\)/);
  assert.doesNotMatch(cells.title, /donor donor-1/);
  // still starting, or its pod does not answer: no figure rather than a made-up one
  assert.equal(remoteKernelCells({ ...donor, gpu: null }).memory, '—');
  assert.equal(remoteKernelCells({ site: null, site_kind: null, resource: null, count: null, gpu: null }).gpu, 'placing…');
  assert.equal(remoteKernelCells({ ...donor, gpu: { memory_used_bytes: null, memory_total_bytes: null, utilization: null } }).memory, '—');
});

test('a GPU kernel that failed is named as the launcher offered it, and says why it failed', async () => {
  const { remoteKernelCells, gpuKernelName, failedText } = await import('../lib/kernelformat.js');
  // as the server lists a kernel whose start failed: no site, no GPU, the dialog's wrapped words
  const failed = {
    kernel_id: '4f0c2a9e-1b7d-4c1e-9a53-0d6a2c1f8e77',
    kernel_name: 'gpuburst-broken',
    profile: 'broken',
    display_name: 'Python 3 (broken GPU)',
    state: 'failed',
    error: 'No GPU kernel: the kernel exited while\nstarting (exit code 3)',
    site: null,
    site_kind: null,
    resource: null,
    count: null,
    gpu: null
  };
  const cells = remoteKernelCells(failed);
  assert.equal(cells.name, 'Python 3 (broken GPU)');
  assert.equal(cells.gpu, 'failed');
  assert.equal(cells.failure, 'failed: the kernel exited while starting (exit code 3)');
  assert.equal(cells.memory, '—');
  assert.match(cells.title, /^This GPU kernel failed: the kernel exited while starting/);
  for (const text of [cells.name, cells.gpu, cells.failure, cells.title]) {
    assert.doesNotMatch(text, /4f0c2a9e|gpuburst-|placing/);
  }
  // the profile where the hub gave no display name; the kernelspec's name only as a last resort
  assert.equal(gpuKernelName({ ...failed, display_name: null }), 'broken');
  assert.equal(gpuKernelName({ ...failed, display_name: null, profile: null }), 'gpuburst-broken');
  assert.equal(failedText({ ...failed, error: null }), 'failed');
  // a running one keeps its site, and is named too
  const running = remoteKernelCells({ ...failed, state: 'running', error: null, site: 'origin', site_kind: 'origin' });
  assert.equal(running.gpu, 'origin');
  assert.equal(running.name, 'Python 3 (broken GPU)');
  assert.equal(running.failure, null);
});

test('in a server with GPUs of its own, the launcher says GPU kernels take GPUs besides those', async () => {
  const { launcherCategory, launcherCaption } = await import('../lib/kernelformat.js');
  const available = { origin: 1, donors: 4, sites: { origin: 1, 'donor-1': 4 } };
  // a CPU server (or no placement yet): the kernels are its GPUs
  assert.equal(launcherCategory(null), 'GPU kernels');
  assert.equal(launcherCategory({ gpu_count: 0, gpu_label: null }), 'GPU kernels');
  assert.equal(
    launcherCaption('Python 3 (1 GPU)', available, { gpu_count: null, gpu_label: null }),
    'New notebook with a Python 3 (1 GPU) kernel; the hub places it where a GPU is free (free now: origin: 1, donor-1: 4)'
  );
  // a whole-GPU server: its own GPUs are named, in the product's words
  assert.equal(launcherCategory({ gpu_count: 2, gpu_label: '2 GPUs' }), "GPU kernels, besides this server's 2 GPUs");
  assert.equal(launcherCategory({ gpu_count: 1, gpu_label: '1 MIG 1g.10gb slice' }), "GPU kernels, besides this server's 1 MIG 1g.10gb slice");
  assert.equal(launcherCategory({ gpu_count: 2 }), "GPU kernels, besides this server's 2 GPUs");
  assert.match(
    launcherCaption('Python 3 (1 GPU)', null, { gpu_count: 2, gpu_label: '2 GPUs' }),
    /^New notebook with a Python 3 \(1 GPU\) kernel, which takes GPUs besides this server's 2 GPUs \(those serve the kernels that run in this server\); the hub places it where a GPU is free$/
  );
});

test('with no GPU free, a card says whether a new kernel waits in line or would be refused', async () => {
  const { launcherCaption, launcherLabel, noneFree } = await import('../lib/kernelformat.js');
  const none = { origin: 0, donors: 0, sites: {} };
  assert.ok(noneFree(none) && !noneFree({ origin: 0, donors: 1 }) && !noneFree(null));
  assert.equal(launcherLabel('Python 3 (1 GPU)', none, null), 'Python 3 (1 GPU) · none free now');
  assert.equal(
    launcherCaption('Python 3 (1 GPU)', none, null, null, true),
    'New notebook with a Python 3 (1 GPU) kernel; no GPU is free now, so it waits in line for the next one'
  );
  assert.equal(
    launcherCaption('Python 3 (1 GPU)', none, null, null, false),
    'No GPU is free now for a Python 3 (1 GPU) kernel; try again in a few minutes'
  );
});

test('while a GPU kernel starts, the status bar says where and what it waits for', async () => {
  const { startingText, isGpuKernelName } = await import('../lib/kernelformat.js');
  assert.equal(startingText(undefined), 'Starting a GPU kernel…');
  assert.equal(startingText({ site: 'donor-1' }), 'Starting a GPU kernel on donor-1…');
  assert.equal(startingText({ site: 'origin', waiting: 'a GPU' }), 'Starting a GPU kernel on origin… (waiting for a GPU)');
  assert.equal(
    startingText({ site: null, waiting: 'a GPU: 2nd in line, about 3 min', queue: { text: 'a GPU: 2nd in line, about 3 min' } }),
    'Waiting for a GPU: 2nd in line, about 3 min'
  );
  assert.ok(isGpuKernelName('gpuburst-gpu-1'));
  assert.ok(!isGpuKernelName('python3') && !isGpuKernelName(null));
});

test('the launcher says what is left of the GPU-hour budget, and over it, why a card cannot start', async () => {
  const { launcherBudgetText, launcherCaption, launcherLabel } = await import('../lib/kernelformat.js');
  const available = { origin: 2, donors: 0, sites: { origin: 2 } };
  const left = { budget: '7.5 of 20 GPU-hours left this week, resets Monday 00:00 UTC.', budget_used_up: false };
  const usedUp = {
    budget: "Your GPU-hour budget is used up: 0 of 20 GPU-hours left this week, resets Monday 00:00 UTC. Ask the hub's admins for more.",
    budget_used_up: true
  };
  // no budget: nothing is said, and the cards are as before
  assert.equal(launcherBudgetText({ budget: '', budget_used_up: false }), '');
  assert.equal(launcherBudgetText(null), '');
  assert.equal(launcherLabel('Python 3 (1 GPU)', available, null), 'Python 3 (1 GPU) · 2 free on origin');
  // hours left: the sentence under the title; the cards still say where GPUs are free
  assert.equal(launcherBudgetText(left), left.budget);
  assert.equal(launcherLabel('Python 3 (1 GPU)', available, left), 'Python 3 (1 GPU) · 2 free on origin');
  assert.match(launcherCaption('Python 3 (1 GPU)', available, null, left), /^New notebook with a Python 3 \(1 GPU\) kernel/);
  // used up: free GPUs do not matter, the hub would refuse; the card and its tooltip say why
  assert.equal(launcherLabel('Python 3 (1 GPU)', available, usedUp), 'Python 3 (1 GPU) · GPU-hour budget used up');
  assert.equal(launcherBudgetText(usedUp), usedUp.budget);
  assert.equal(
    launcherCaption('Python 3 (1 GPU)', available, null, usedUp),
    `A Python 3 (1 GPU) kernel cannot start now. ${usedUp.budget}`
  );
});

test('the launcher says what a lab of another class holds, as the hub says it, and nothing otherwise', async () => {
  const { launcherHeldText } = await import('../lib/kernelformat.js');
  const held = '4 GPUs are held for the lab ML-101 until 10:30.';
  assert.equal(launcherHeldText(held), held);
  assert.equal(launcherHeldText(` ${held}\n`), held);
  // nothing held, the class's own students, or a hub of an earlier version: no note
  for (const none of ['', '  ', undefined, null, 4, { held }]) {
    assert.equal(launcherHeldText(none), '', JSON.stringify(none));
  }
});

test("a cell whose GPU kernel did not start reads the hub's reason once, in one paragraph", async () => {
  const { startFailedReason } = await import('../lib/kernelformat.js');
  assert.equal(
    startFailedReason('No GPU kernel: No site can start 1 GPU now (origin 0 of 1 free; donor-1\n0 of 1 free).'),
    'No site can start 1 GPU now (origin 0 of 1 free; donor-1 0 of 1 free).'
  );
  assert.equal(startFailedReason('it was shut down before it started'), 'it was shut down before it started');
});

test("JupyterLab's kernel status says a GPU kernel is starting, not connecting or unknown", async () => {
  const { gpuKernelDisplayStatus } = await import('../lib/kernelformat.js');
  const gpu = (status, connectionStatus) => ({ name: 'gpuburst-gpu-1', status, connectionStatus });
  // its websocket opens only once its pod answers
  assert.equal(gpuKernelDisplayStatus('connecting', gpu('unknown', 'connecting'), false), 'starting');
  // open, before the kernel's first message
  assert.equal(gpuKernelDisplayStatus('unknown', gpu('unknown', 'connected'), true), 'starting');
  assert.equal(gpuKernelDisplayStatus('idle', gpu('idle', 'connected'), true), 'idle');
  // a connection lost once the kernel had answered is JupyterLab's to name
  assert.equal(gpuKernelDisplayStatus('connecting', gpu('idle', 'connecting'), true), 'connecting');
  assert.equal(gpuKernelDisplayStatus('restarting', gpu('unknown', 'connecting'), false), 'restarting');
  assert.equal(gpuKernelDisplayStatus('dead', gpu('dead', 'connecting'), false), 'dead');
  // other kernels as JupyterLab says
  assert.equal(gpuKernelDisplayStatus('connecting', { name: 'python3', status: 'unknown', connectionStatus: 'connecting' }, false), 'connecting');
  assert.equal(gpuKernelDisplayStatus('unknown', null, false), 'unknown');
});
