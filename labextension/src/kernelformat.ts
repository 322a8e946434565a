/** Words for GPU kernels in the panel and the status bar (pure: unit-tested in node). */

/** What the formatting needs of one GPU kernel. */
export interface IGpuKernelPlace {
  site: string | null;
  site_kind: 'origin' | 'donor' | null;
  resource: string | null;
  count: number | null;
}

/** 'origin', 'donor polito-hpc', or 'placing…' before the hub has answered. */
export function kernelSiteText(kernel: IGpuKernelPlace): string {
  if (!kernel.site) {
    return 'placing…';
  }
  return kernel.site_kind === 'donor' ? `donor ${kernel.site}` : 'origin';
}

/** '1 × gpu', '2 × mig-1g.10gb': the GPU a kernel holds. */
export function kernelGpuText(kernel: IGpuKernelPlace): string {
  if (!kernel.resource) {
    return '';
  }
  return `${kernel.count ?? 1} × ${kernel.resource.replace(/^nvidia\.com\//, '')}`;
}
