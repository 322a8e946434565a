/**
 * GPU idle culling in the student's words: the warning, the basis of the idle signal, and the
 * types of the server extension's `api/gpuburst/culling` (what the hub's culler replied).
 */

/** One server or GPU kernel the hub's culler watches. */
export interface ICullTarget {
  target: string;
  kind: 'server' | 'kernel';
  kernel_id: string;
  state: 'off' | 'exempt' | 'unknown' | 'no-gpu' | 'active' | 'warn' | 'stop';
  idle_s: number | null;
  stops_in_s: number | null;
  warned: boolean;
  keepable: boolean;
  keeps_left: number;
  basis: 'utilization' | 'memory' | 'kernel';
  reason: string;
  /** What the stop comes from: GPU idleness, the maximum age, or a used-up GPU-hour budget. */
  cause?: 'idle' | 'age' | 'budget' | '';
  policy: { enabled: boolean; timeout_s: number; warning_s: number; max_age_s: number; keep_limit: number };
}

export interface ICullingState {
  reporting: boolean;
  error?: string | null;
  culling?: { period_s: number; targets: ICullTarget[] } | null;
  stopped?: { kernel_id: string; reason: string; at: number }[];
}

/** '45 s', '50 min', '2 h', '2 h 30 min' (as the hub says it). */
export function duration(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) {
    return `${s} s`;
  }
  const minutes = Math.round(s / 60);
  if (minutes < 60) {
    return `${minutes} min`;
  }
  const h = Math.floor(minutes / 60);
  const m = minutes % 60;
  return `${h} h` + (m ? ` ${m} min` : '');
}

/** 'this server' or 'this kernel (train.ipynb)'. */
export function targetName(target: ICullTarget, notebook?: string): string {
  if (target.kind === 'server') {
    return 'this server';
  }
  return notebook ? `the kernel of ${notebook}` : 'this GPU kernel';
}

/** "GPU idle for 50 min: this kernel stops in 10 min", the maximum age's or the budget's sentence. */
export function warningText(target: ICullTarget, notebook?: string): string {
  const name = targetName(target, notebook);
  if (target.cause === 'budget') {
    // stops_in_s null: the hub only warns (its budget_stop is off)
    return target.stops_in_s === null
      ? `GPU-hour budget used up: ${name} runs on, but no new GPU can start. Ask the hub's admins for more hours.`
      : `GPU-hour budget used up: ${name} stops in ${duration(target.stops_in_s)}. Ask the hub's admins for more hours.`;
  }
  const stops = `${name} stops in ${duration(target.stops_in_s ?? 0)}`;
  if (target.idle_s != null && target.idle_s >= target.policy.timeout_s - target.policy.warning_s && target.reason.includes('idle')) {
    return `GPU idle for ${duration(target.idle_s)}: ${stops}`;
  }
  return `Maximum age reached: ${stops}`;
}

/** How the idleness was judged, when it is not by utilization. */
export function basisText(basis: ICullTarget['basis']): string | null {
  if (basis === 'memory') {
    return 'This GPU reports no utilization (a MIG slice): GPU memory activity and running cells decide whether it is idle.';
  }
  if (basis === 'kernel') {
    return 'No GPU reading: running cells decide whether it is idle.';
  }
  return null;
}

/** The quiet line under a watched target: how long until it would be warned. */
export function watchText(target: ICullTarget): string | null {
  if (target.state !== 'active' || target.idle_s == null) {
    return null;
  }
  return `GPU idle ${duration(target.idle_s)} of ${duration(target.policy.timeout_s)} allowed`;
}

/** The panel card's title: what its warnings are about; with nothing idle or warned, that it
 * lists GPU kernels the hub stopped (by culling or an admin's hand). */
export function cullingTitle(warned: ICullTarget[], onlyStopped = false): string {
  if (onlyStopped) {
    return 'Stopped GPU kernels';
  }
  return warned.length > 0 && warned.every(t => t.cause === 'budget') ? 'GPU-hour budget' : 'GPU idle';
}

/** Warnings first, the soonest first. */
export function warnings(state: ICullingState | null): ICullTarget[] {
  const targets = state?.culling?.targets ?? [];
  return targets
    .filter(t => t.state === 'warn' || (t.state === 'stop' && t.warned))
    .sort((a, b) => (a.stops_in_s ?? 0) - (b.stops_in_s ?? 0));
}
