/**
 * Wire types of the server extension's HTTP contract (`/api/gpuburst/*`).
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
