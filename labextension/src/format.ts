/**
 * Pure formatting helpers shared by the panel and the status bar item.
 */
import { IGpu, IPlacement, ISample, IStorage } from './types';

const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];

/** Human-readable byte count in binary units ("3.2 GiB"). */
export function formatBytes(bytes: number | null | undefined): string {
  if (bytes == null || !Number.isFinite(bytes) || bytes < 0) {
    return '—';
  }
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < UNITS.length - 1) {
    value /= 1024;
    unit += 1;
  }
  const digits = unit === 0 || value >= 100 ? 0 : 1;
  return `${value.toFixed(digits)} ${UNITS[unit]}`;
}

/** A 0..1 fraction as a whole percentage ("37 %"), or a dash when unknown. */
export function formatPercent(fraction: number | null | undefined): string {
  if (fraction == null || !Number.isFinite(fraction)) {
    return '—';
  }
  const clamped = Math.min(1, Math.max(0, fraction));
  return `${Math.round(clamped * 100)} %`;
}

/** Short site label: "origin", the donor's name, or "standalone". */
export function siteLabel(placement: IPlacement | null): string {
  if (!placement) {
    return '…';
  }
  if (placement.site_kind === 'origin') {
    return 'origin';
  }
  if (placement.site_kind === 'standalone') {
    return 'standalone';
  }
  return placement.site;
}

/**
 * A server the hub started without a GPU (a CPU profile, or a CPU server whose GPU kernels run
 * elsewhere). The where card already says so; a warning that no GPU is visible, with the
 * driver's own words, would only alarm the student who chose it.
 */
export function cpuServer(placement: IPlacement | null): boolean {
  return !!placement && placement.managed && placement.site_kind !== 'standalone' && !placement.gpu_resource;
}

/** One sentence that says where the server runs, for the "where" card and screen readers. */
export function siteSentence(placement: IPlacement): string {
  switch (placement.site_kind) {
    case 'origin':
      return placement.gpu_resource
        ? 'Running on the origin, the university cluster.'
        : 'Running on the origin, on a CPU node: this server has no GPU of its own.';
    case 'donor':
      return `Running on ${placement.site}, a donor cluster.`;
    default:
      return 'Not started by the hub: no placement information.';
  }
}

/** What the server asked for: the server's own words, else a mirror of core/names.py. */
export function requestLabel(placement: IPlacement): string | null {
  if (placement.gpu_label) {
    return placement.gpu_label;
  }
  if (!placement.gpu_resource) {
    return null;
  }
  return gpuAmount(placement.gpu_resource, placement.gpu_count ?? 1);
}

/** "GPU", "MIG 1g.10gb slice", or an unknown resource name as given (as core/names.py). */
export function gpuName(resource: string): string {
  if (['nvidia.com/gpu', 'amd.com/gpu', 'gpu.intel.com/i915', 'gpu.intel.com/xe'].includes(resource)) {
    return 'GPU';
  }
  const mig = /^nvidia\.com\/mig-(\d+g\.\d+gb(?:\.[a-z0-9+]+)?)$/.exec(resource);
  return mig ? `MIG ${mig[1]} slice` : resource;
}

/** "1 GPU", "2 GPUs", "3 MIG 1g.10gb slices". */
export function gpuAmount(resource: string, count: number): string {
  const name = gpuName(resource);
  const plural = name === 'GPU' || name.endsWith(' slice') ? `${name}s` : name;
  return `${count} ${count === 1 ? name : plural}`;
}

/** Mean utilization of the GPUs that report one, or null when none does. */
export function meanUtilization(gpus: IGpu[]): number | null {
  const known = gpus
    .map(g => g.utilization)
    .filter((u): u is number => u != null && Number.isFinite(u));
  if (known.length === 0) {
    return null;
  }
  return known.reduce((a, b) => a + b, 0) / known.length;
}

/** Distinct GPU model names, with a count when there are several of one ("2 × NVIDIA A100"). */
export function gpuModels(gpus: IGpu[]): string {
  const counts = new Map<string, number>();
  for (const gpu of gpus) {
    counts.set(gpu.name, (counts.get(gpu.name) ?? 0) + 1);
  }
  return Array.from(counts.entries())
    .map(([name, n]) => (n > 1 ? `${n} × ${name}` : name))
    .join(', ');
}

/** Status bar text: "donor-1 · GPU 37 %", "origin · no GPU", or just the site while loading. */
export function statusText(placement: IPlacement | null, sample: ISample | null): string {
  const site = siteLabel(placement);
  if (!sample) {
    return site;
  }
  if (!sample.available || sample.gpus.length === 0) {
    return `${site} · no GPU`;
  }
  const util = meanUtilization(sample.gpus);
  return util == null ? `${site} · GPU` : `${site} · GPU ${formatPercent(util)}`;
}

/** The notebook's file name without folders, or the kernel's name when it has no notebook. */
export function kernelLabel(notebook: string | null, kernelName: string): string {
  if (!notebook) {
    return `${kernelName} (console)`;
  }
  const parts = notebook.split('/');
  return parts[parts.length - 1] || notebook;
}

/** Whether files saved on this server are gone once it stops (scratch space, or no volume). */
export function filesAreLost(storage: IStorage | null | undefined): boolean {
  return storage?.kind === 'scratch' || storage?.kind === 'none';
}

/** What a page says when its server stops, and where to read why and start it again: the
 * server's spawn page at the hub, which says why the hub stopped it (page config's `hubPrefix`,
 * `hubUser`, `hubServerName`; no hub, no link). */
export function stoppingNotice(hubPrefix: string, user = '', serverName = ''): { text: string; href: string | null } {
  if (!hubPrefix) {
    return { text: 'This server is stopping.', href: null };
  }
  const path = [user, serverName].filter(Boolean).map(encodeURIComponent).join('/');
  const href = `${hubPrefix.replace(/\/?$/, '/')}spawn${path ? `/${path}` : ''}`;
  return { text: "This server is stopping. Its page at the hub says why and starts it again.", href };
}
