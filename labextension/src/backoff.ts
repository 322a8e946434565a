/**
 * Reconnect timing for the sample stream.
 */

/** Reconnect delays: exponential from `initialMs`, capped at `maxMs`, with jitter. */
export interface IBackoff {
  initialMs: number;
  maxMs: number;
}

export const DEFAULT_BACKOFF: IBackoff = { initialMs: 1000, maxMs: 30000 };

/** Delay before reconnect attempt `attempt` (0-based); `random` in [0, 1) spreads tabs apart. */
export function backoffDelay(attempt: number, backoff: IBackoff, random: number): number {
  const base = Math.min(backoff.maxMs, backoff.initialMs * 2 ** Math.max(0, attempt));
  // Jitter keeps many tabs from reconnecting in lockstep after a server restart.
  return Math.round(base * (0.5 + 0.5 * random));
}

