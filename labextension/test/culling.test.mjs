// The culling warning's sentences (compiled lib/): what the panel and status bar say.
import assert from 'node:assert/strict';
import { register } from 'node:module';
import { test } from 'node:test';

register(
  'data:text/javascript,' +
    encodeURIComponent(`export async function resolve(specifier, context, next) {
      const bare = /^\\.\\.?\\//.test(specifier) && !/\\.[cm]?js$/.test(specifier);
      return next(bare ? specifier + '.js' : specifier, context);
    }`)
);

const { basisText, cullingTitle, duration, warningText, warnings } = await import('../lib/cullingformat.js');

const policy = { enabled: true, timeout_s: 3600, warning_s: 600, max_age_s: 0, keep_limit: 3 };
const target = (over = {}) => ({
  target: 'abc', kind: 'kernel', kernel_id: 'k1', state: 'warn', idle_s: 3000, stops_in_s: 600,
  warned: true, keepable: true, keeps_left: 3, basis: 'utilization', reason: 'its GPU was idle for 50 min', policy, ...over
});

test('the warning says how long the GPU was idle and when it stops', () => {
  assert.equal(warningText(target()), 'GPU idle for 50 min: this GPU kernel stops in 10 min');
  assert.equal(warningText(target(), 'train.ipynb'), 'GPU idle for 50 min: the kernel of train.ipynb stops in 10 min');
  assert.equal(warningText(target({ kind: 'server' })), 'GPU idle for 50 min: this server stops in 10 min');
});

test('a maximum age is not called idleness', () => {
  assert.equal(warningText(target({ idle_s: 5, reason: 'it reached the maximum age of 8 h' })), 'Maximum age reached: this GPU kernel stops in 10 min');
});

test('the panel says when idleness is judged without utilization', () => {
  assert.equal(basisText('utilization'), null);
  assert.match(basisText('memory'), /MIG slice/);
  assert.match(basisText('kernel'), /running cells/);
});

test('warnings come soonest first, and quiet targets are not warnings', () => {
  const state = { reporting: true, culling: { period_s: 60, targets: [target({ target: 'b', stops_in_s: 300 }), target({ target: 'a', state: 'active' }), target({ target: 'c', stops_in_s: 60 })] } };
  assert.deepEqual(warnings(state).map(t => t.target), ['c', 'b']);
  assert.deepEqual(warnings(null), []);
  assert.deepEqual([45, 3000, 7200, 9000].map(duration), ['45 s', '50 min', '2 h', '2 h 30 min']);
});

test('a used-up GPU-hour budget is warned in its own words, with no Keep', () => {
  const budget = target({
    kind: 'server', cause: 'budget', keepable: false, idle_s: null, stops_in_s: 600,
    reason: 'your GPU-hour budget is used up (0 of 20 GPU-hours left this week, resets Monday 00:00 UTC)'
  });
  assert.equal(warningText(budget), "GPU-hour budget used up: this server stops in 10 min. Ask the hub's admins for more hours.");
  // a GPU kernel's notebook is named, as for idleness
  assert.equal(
    warningText({ ...budget, kind: 'kernel' }, 'train.ipynb'),
    "GPU-hour budget used up: the kernel of train.ipynb stops in 10 min. Ask the hub's admins for more hours."
  );
  // the hub only warns (budget_stop off): nothing stops, no new GPU starts
  assert.equal(
    warningText({ ...budget, stops_in_s: null }),
    "GPU-hour budget used up: this server runs on, but no new GPU can start. Ask the hub's admins for more hours."
  );
  // it is a warning like any other, and the card says what it is about
  assert.deepEqual(warnings({ reporting: true, culling: { period_s: 60, targets: [budget] } }), [budget]);
  assert.equal(cullingTitle([budget]), 'GPU-hour budget');
  assert.equal(cullingTitle([budget, target()]), 'GPU idle');
  assert.equal(cullingTitle([]), 'GPU idle');
  assert.equal(cullingTitle([], true), 'Stopped GPU kernels');
});
