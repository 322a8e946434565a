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

const { basisText, duration, warningText, warnings } = await import('../lib/cullingformat.js');

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
