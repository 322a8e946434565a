/**
 * Wire types of the server extension's HTTP contract (`/api/gpuburst/*`), all of them: the
 * server's JSON is checked against them (tests/labextension/test_wire_types.py).
 */

/** Where this notebook server runs, as the spawner decided it. */
export interface IPlacement {
  managed: boolean;
  site: string;
  site_kind: 'origin' | 'donor' | 'standalone';
  cluster: string | null;
  node: string | null;
  reason: string | null;
  gpu_resource: string | null;
  gpu_count: number | null;
  /** What was requested in the product's words ("2 GPUs", "1 MIG 1g.10gb slice"). */
  gpu_label?: string | null;
  /** Where the student's files are, and the sentence that says so; null when the hub said nothing. */
  storage?: IStorage | null;
}

/** ``scratch`` and ``none``: files saved on this server are lost when it stops. */
export interface IStorage {
  kind: 'none' | 'home' | 'shared' | 'scratch';
  message: string;
}

/** One GPU (or MIG slice) in a sample. */
export interface IGpu {
  index: number;
  uuid: string;
  name: string;
  mig: boolean;
  parent_uuid: string | null;
  /** Fraction 0..1, or null when the device cannot report it. */
  utilization: number | null;
  utilization_note: string | null;
  memory_used_bytes: number;
  memory_total_bytes: number;
  temperature_c: number | null;
  power_w: number | null;
}

/** GPU memory a kernel holds on one device. */
export interface IKernelGpuUse {
  uuid: string;
  memory_used_bytes: number;
}

/** A running kernel and the GPUs it uses. */
export interface IKernelUse {
  kernel_id: string;
  name: string;
  notebook: string | null;
  gpus: IKernelGpuUse[];
}

/** A GPU process that is not one of this server's kernels. */
export interface IUnattributed {
  pid: number | null;
  gpu_uuid: string;
  memory_used_bytes: number | null;
}

/** One telemetry sample. */
export interface ISample {
  backend: 'nvml' | 'simulated' | 'none' | string;
  simulated: boolean;
  available: boolean;
  reason: string | null;
  timestamp: number;
  period_s: number;
  gpus: IGpu[];
  kernels: IKernelUse[];
  unattributed: IUnattributed[];
}

/** Response of `GET /api/gpuburst/history`. */
export interface IHistory {
  period_s: number;
  samples: ISample[];
}

/** State of the live connection to the sample stream. */
export type ConnectionState = 'idle' | 'connecting' | 'open' | 'retrying' | 'paused';

/** How many GPU kernels of a profile could start now, per site, as the hub counts them. */
export interface IKernelAvailability {
  origin: number;
  donors: number;
  sites?: Record<string, number>;
}

/** One GPU kernel profile the hub offers this server's user (`GET /api/gpuburst/kernel-profiles`). */
export interface IKernelProfile {
  slug: string;
  kernel_name: string;
  display_name: string;
  available: IKernelAvailability | null;
}

/** Response of `GET /api/gpuburst/kernel-profiles`: `error` says why there are none. */
export interface IProfilesReply {
  profiles: IKernelProfile[];
  /** The hub's sentence on the user's GPU-hour budget ("7.5 of 20 GPU-hours left this week, …"), "" without one. */
  budget: string;
  /** The budget is used up: the hub refuses every GPU kernel start until it resets or an admin grants more. */
  budget_used_up: boolean;
  error: string | null;
  /** The hub's right-sizing sentence ('' or absent when it has none). */
  suggestion?: string;
  /** What labs of other classes hold now ("4 GPUs are held for the lab ML-101 until 10:30."); '' or absent when none. */
  held?: string;
  /** With none free, a new GPU kernel waits in line for one (else the hub refuses it). */
  queues?: boolean;
}

/** What the panel shows of a GPU kernel's own GPU figures (measured in its pod). */
export interface IKernelGpuFigures {
  memory_used_bytes: number | null;
  memory_total_bytes: number | null;
  utilization: number | null;
  simulated?: boolean;
  reason?: string | null;
  /** The backend the kernel's pod reads its GPUs with ('nvml', 'simulated', 'none'). */
  backend?: string | null;
  /** When the pod sampled them (seconds since the epoch). */
  sampled_at?: number | null;
}

/** One GPU kernel as the server extension reports it. */
export interface IGpuKernel {
  kernel_id: string;
  kernel_name: string;
  id: string | null;
  profile: string | null;
  display_name: string | null;
  state: string | null;
  site: string | null;
  site_kind: 'origin' | 'donor' | null;
  cluster_id: string | null;
  node: string | null;
  resource: string | null;
  count: number | null;
  reason: string | null;
  /** While it starts: what it waits for, in the hub's words ('a GPU'); null once it runs. */
  waiting: string | null;
  /** While it waits in the hub's queue for a GPU: its place and the expected wait; else null. */
  queue: IGpuKernelQueue | null;
  relocated_from: string | null;
  files: string | null;
  /** Why it failed (state 'failed'), in the hub's or the server's words; else null. */
  error: string | null;
  /** Measured in the kernel's pod; null while it starts or when it does not answer. */
  gpu: IKernelGpuFigures | null;
}

/** A GPU kernel's place in the hub's queue, as the hub's kernel record gives it. */
export interface IGpuKernelQueue {
  /** 1 for the next in line. */
  position: number;
  /** The expected wait in seconds; null when there is no basis for one. */
  seconds: number | null;
  basis: 'sessions' | 'history' | 'unknown';
  /** 'a GPU: 2nd in line, about 3 min', in the hub's words. */
  text: string;
}

/** Response of `GET /api/gpuburst/kernels`. */
export interface IGpuKernelsReply {
  kernels: IGpuKernel[];
}
