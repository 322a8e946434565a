/** Words for GPU kernels in the panel, the launcher and the status bar (pure: unit-tested in node). */
import type { IKernelAvailability, IKernelGpuFigures } from './types';

export type { IKernelAvailability, IKernelGpuFigures };

/** Kernelspecs of GPU kernels are named so (core/keys.py KERNELSPEC_PREFIX, tested against it). */
export const GPU_KERNEL_PREFIX = 'gpuburst-';

/** Whether a kernel (by its kernelspec's name) is one of the hub's GPU kernels. */
export function isGpuKernelName(name: string | null | undefined): boolean {
  return !!name && name.startsWith(GPU_KERNEL_PREFIX);
}

/** What the formatting needs of one GPU kernel. */
export interface IGpuKernelPlace {
  site: string | null;
  site_kind: 'origin' | 'donor' | null;
  resource: string | null;
  count: number | null;
}

/** 'origin' or a donor by its own name ('polito-hpc'), as the panel names the server's site;
 * 'placing…' before the hub has answered. */
export function kernelSiteText(kernel: IGpuKernelPlace): string {
  return kernel.site ?? 'placing…';
}

/** 'origin', 'polito-hpc, a donor cluster': the site for a sentence or a tooltip. */
function kernelSiteSentence(kernel: IGpuKernelPlace): string {
  return kernel.site_kind === 'donor' ? `${kernelSiteText(kernel)}, a donor cluster` : kernelSiteText(kernel);
}


/** '2 free on origin, 5 on donors', '5 free on donors', 'none free now'; '' when unknown. */
export function availabilityText(available: IKernelAvailability | null | undefined): string {
  if (!available) {
    return '';
  }
  const { origin, donors } = available;
  if (!origin && !donors) {
    return 'none free now';
  }
  const parts: string[] = [];
  if (origin) {
    parts.push(`${origin} free on origin`);
  }
  if (donors) {
    parts.push(origin ? `${donors} on donors` : `${donors} free on donors`);
  }
  return parts.join(', ');
}

/** Whether the hub counts no GPU free anywhere for a profile now (unknown is not none). */
export function noneFree(available: IKernelAvailability | null | undefined): boolean {
  return !!available && !available.origin && !available.donors;
}

/** What the launcher knows of the user's GPU-hour budget (the hub's sentence, "" without one). */
export interface ILauncherBudget {
  budget: string;
  budget_used_up: boolean;
}

/**
 * A GPU kernel card's label: 'Python 3 (1 GPU) · 2 free on origin'; with the budget used up,
 * 'Python 3 (1 GPU) · GPU-hour budget used up' (the hub would refuse it, wherever GPUs are free).
 */
export function launcherLabel(
  displayName: string,
  available: IKernelAvailability | null | undefined,
  budget?: ILauncherBudget | null
): string {
  if (budget?.budget_used_up) {
    return `${displayName} · GPU-hour budget used up`;
  }
  const free = availabilityText(available);
  return free ? `${displayName} · ${free}` : displayName;
}

/** The sentence under the launcher's GPU kernels title, or '' when the user has no budget. */
export function launcherBudgetText(budget: ILauncherBudget | null | undefined): string {
  return budget?.budget ?? '';
}

/**
 * The sentence on GPUs a lab of another class holds now, under the launcher's GPU kernels title
 * ('' when none). Said as the hub says it on the spawn form; a hub of an earlier version sends none.
 */
export function launcherHeldText(held: unknown): string {
  return typeof held === 'string' ? held.trim() : '';
}

/** What the launcher needs of this server's own placement (`GET api/gpuburst/placement`). */
export interface IServerGpus {
  gpu_count: number | null;
  gpu_label?: string | null;
}

/** This server's own GPUs in words ("2 GPUs"), or null when it has none. */
function ownGpus(server: IServerGpus | null | undefined): string | null {
  return server && server.gpu_count ? server.gpu_label || `${server.gpu_count} GPUs` : null;
}

/**
 * The launcher's section of GPU kernels. In a server with GPUs of its own the notebooks' usual
 * kernels already use them, so the section says that its kernels take GPUs besides those.
 */
export function launcherCategory(server: IServerGpus | null | undefined): string {
  const own = ownGpus(server);
  return own ? `GPU kernels, besides this server's ${own}` : 'GPU kernels';
}

/** A GPU kernel card's tooltip: what a click starts, and where GPUs are free now; with the
 * budget used up, why it cannot start (the hub's sentence). */
export function launcherCaption(
  displayName: string,
  available: IKernelAvailability | null | undefined,
  server: IServerGpus | null | undefined,
  budget?: ILauncherBudget | null,
  queues = false
): string {
  if (budget?.budget_used_up) {
    return `A ${displayName} kernel cannot start now. ${budget.budget}`;
  }
  if (noneFree(available)) {
    return queues
      ? `New notebook with a ${displayName} kernel; no GPU is free now, so it waits in line for the next one`
      : `No GPU is free now for a ${displayName} kernel; try again in a few minutes`;
  }
  const sites = Object.entries(available?.sites ?? {})
    .map(([site, n]) => `${site}: ${n}`)
    .join(', ');
  const own = ownGpus(server);
  const what = own
    ? `New notebook with a ${displayName} kernel, which takes GPUs besides this server's ${own} (those serve the kernels that run in this server)`
    : `New notebook with a ${displayName} kernel`;
  return `${what}; the hub places it where a GPU is free${sites ? ` (free now: ${sites})` : ''}`;
}


/** '1.2 / 40.0 GiB': a GPU kernel's memory in use (GPU memory is GiB-sized); '—' when its pod
 * does not say. Standalone, not format.ts, so node runs it without a bundler. */
export function kernelMemoryText(gpu: IKernelGpuFigures | null | undefined): string {
  if (!gpu || gpu.memory_used_bytes === null || gpu.memory_total_bytes === null) {
    return '—';
  }
  const gib = (bytes: number): string => (bytes / 1024 ** 3).toFixed(1);
  return `${gib(gpu.memory_used_bytes)} / ${gib(gpu.memory_total_bytes)} GiB`;
}

/** What naming a GPU kernel and its state needs of its record. */
export interface IGpuKernelState {
  kernel_name: string;
  profile: string | null;
  display_name: string | null;
  state: string | null;
  error?: string | null;
}

/** 'Python 3 (1 GPU)': a GPU kernel as the launcher offered it, never its kernelspec's name. */
export function gpuKernelName(kernel: IGpuKernelState): string {
  return kernel.display_name || kernel.profile || kernel.kernel_name;
}

/** 'failed: the kernel exited while starting (exit code 3)', or 'failed' when nobody said why. */
export function failedText(kernel: IGpuKernelState): string {
  const why = kernel.error ? startFailedReason(kernel.error) : '';
  return why ? `failed: ${why}` : 'failed';
}

/**
 * A GPU kernel's row in the panel's Kernels card: its name as the launcher offered it, its
 * site in the GPU column and the GPU memory its pod measures, where this server's own GPU
 * reading has nothing for it. One that failed says so in the GPU column, and why under its
 * name (``failure``: the card is narrow, and only the name's column wraps).
 */
export function remoteKernelCells(kernel: IGpuKernelPlace & Partial<IGpuKernelState> & { gpu: IKernelGpuFigures | null }): {
  gpu: string;
  memory: string;
  title: string;
  name: string | null;
  failure: string | null;
} {
  const used = kernel.gpu?.memory_used_bytes;
  const name = kernel.kernel_name ? gpuKernelName(kernel as IGpuKernelState) : null;
  if (kernel.state === 'failed') {
    const failure = failedText(kernel as IGpuKernelState);
    return { gpu: 'failed', memory: '—', title: `This GPU kernel ${failure}`, name, failure };
  }
  return {
    // the card is narrow: the site's name alone ("origin", "donor-1"); the title says more
    gpu: kernelSiteText(kernel),
    memory: used === null || used === undefined ? '—' : `${(used / 1024 ** 3).toFixed(1)} GiB`,
    title: `A GPU kernel in a pod of its own (${kernelSiteSentence(kernel)}); see GPU kernels`,
    name,
    failure: null
  };
}

/** What the status bar needs of a GPU kernel that is starting (all unknown before the hub answers). */
export interface IStartingKernel {
  site: string | null;
  /** What the start waits for now, in the hub's words ('a GPU', 'its image to download'). */
  waiting?: string | null;
  /** Its place in the hub's queue while no site has a GPU for it. */
  queue?: { text: string } | null;
}

/**
 * 'Starting a GPU kernel on donor-1… (waiting for a GPU)': the status bar while a GPU kernel
 * starts; 'Waiting for a GPU: 2nd in line, about 3 min' while it waits in the hub's queue.
 */
export function startingText(kernel: IStartingKernel | null | undefined): string {
  if (kernel?.queue) {
    return `Waiting for ${kernel.queue.text}`;
  }
  const where = kernel?.site ? ` on ${kernel.site}` : '';
  const waiting = kernel?.waiting ? ` (waiting for ${kernel.waiting})` : '';
  return `Starting a GPU kernel${where}…${waiting}`;
}

/** A refused GPU kernel's reason, for the cell that waited for it. The server words it for
 * JupyterLab's error dialog ("No GPU kernel: ...", in lines that fit the dialog): the cell's own
 * heading says the first, and the output area wraps by itself. */
export function startFailedReason(reason: string): string {
  return reason
    .replace(/^\s*No GPU kernel:\s*/, '')
    .split(/\s+/)
    .join(' ')
    .trim();
}

/** What the display status needs of a kernel connection. */
export interface IKernelLike {
  readonly name: string;
  readonly status: string;
  readonly connectionStatus: string;
}

/**
 * JupyterLab's kernel status for ``kernel`` where it would show ``shown`` (see kernelstatus.ts):
 * 'starting' for a GPU kernel that has not answered yet (``answered``: its websocket was open
 * once), else ``shown``.
 */
export function gpuKernelDisplayStatus(shown: string, kernel: IKernelLike | null | undefined, answered: boolean): string {
  if (!kernel || !isGpuKernelName(kernel.name)) {
    return shown;
  }
  if (shown === 'connecting' && !answered) {
    return 'starting';
  }
  if (shown === 'unknown' && kernel.connectionStatus === 'connected' && kernel.status === 'unknown') {
    return 'starting';
  }
  return shown;
}
