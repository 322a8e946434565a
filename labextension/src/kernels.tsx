/**
 * GPU kernels in JupyterLab: where each remote GPU kernel of this server runs (a section of the
 * GPU panel) and where the active notebook's kernel runs (a status bar item).
 *
 * Reads `GET api/gpuburst/kernels` (site, node, GPU and the GPU memory each kernel's pod
 * measures; never an address or a key) through the same client as the rest of the extension.
 */
import { JupyterFrontEnd } from '@jupyterlab/application';
import { IStatusBar } from '@jupyterlab/statusbar';
import { ReactWidget, UseSignal } from '@jupyterlab/ui-components';
import { IDisposable } from '@lumino/disposable';
import { ISignal, Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';
import * as React from 'react';

import { GpuBurstClient } from './client';
import { gpuAmount } from './format';
import {
  failedText,
  gpuKernelName,
  isGpuKernelName,
  kernelMemoryText,
  kernelSiteText,
  remoteKernelCells,
  startingText
} from './kernelformat';
import { RemoteKernelLookup } from './panel';
import { IGpuKernel, IGpuKernelsReply } from './types';

export type { IGpuKernel };


const REFRESH_MS = 5000;
// while a GPU kernel starts, its site and what it waits for change within seconds
const STARTING_REFRESH_MS = 1000;

/** Leave the hub's queue: the kernel is shut down, which withdraws its request at the hub. */
function CancelWait(props: { kernelId: string; shutdown: (kernelId: string) => Promise<void> }): JSX.Element {
  const [busy, setBusy] = React.useState(false);
  return (
    <button
      type="button"
      className="jp-mod-styled jp-mod-warn jp-GpuBurst-cancelWait"
      disabled={busy}
      title="Stop waiting for a GPU: shuts this kernel down; cells that waited for it are not run"
      onClick={() => {
        setBusy(true);
        void props.shutdown(props.kernelId).finally(() => setBusy(false));
      }}
    >
      Cancel
    </button>
  );
}

/** The server's GPU kernels, refreshed while anything shows them. */
export class GpuKernelsModel implements IDisposable {
  constructor(private readonly _client: GpuBurstClient) {
    void this.refresh();
    this._timer = window.setInterval(() => void this.refresh(), REFRESH_MS);
  }

  /** Refresh every second while ``starting`` says a kernel is starting, else every few. */
  set starting(value: boolean) {
    if (value === this._starting || this._timer === null) {
      return;
    }
    this._starting = value;
    window.clearInterval(this._timer);
    this._timer = window.setInterval(() => void this.refresh(), value ? STARTING_REFRESH_MS : REFRESH_MS);
    if (value) {
      void this.refresh();
    }
  }

  get kernels(): IGpuKernel[] {
    return this._kernels;
  }

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get isDisposed(): boolean {
    return this._timer === null;
  }

  byKernelId(id: string | undefined | null): IGpuKernel | undefined {
    return id ? this._kernels.find(k => k.kernel_id === id) : undefined;
  }

  async refresh(): Promise<void> {
    try {
      const body = await this._client.getJSON<IGpuKernelsReply>('kernels');
      this._kernels = body.kernels ?? [];
    } catch {
      // an older server without kernel mode, or a blip: show none rather than stale ones
      this._kernels = [];
    }
    this._changed.emit();
  }

  dispose(): void {
    if (this._timer !== null) {
      window.clearInterval(this._timer);
      this._timer = null;
    }
  }

  private _kernels: IGpuKernel[] = [];
  private _starting = false;
  private _timer: number | null;
  private _changed = new Signal<this, void>(this);
}

/** Section of the GPU panel: one row per GPU kernel. */
export function GpuKernelsSection(props: {
  model: GpuKernelsModel;
  /** Shut a kernel down (JupyterLab's own shutdown), for the Cancel of one that waits in line. */
  shutdown?: (kernelId: string) => Promise<void>;
}): JSX.Element | null {
  const kernels = props.model.kernels;
  if (kernels.length === 0) {
    return null;
  }
  return (
    <section className="jp-GpuBurst-card jp-GpuBurst-gpuKernels" aria-label="GPU kernels">
      <h3>GPU kernels</h3>
      <table className="jp-GpuBurst-table">
        <thead>
          <tr>
            <th scope="col">Kernel</th>
            <th scope="col">Where</th>
            <th scope="col">GPU</th>
          </tr>
        </thead>
        <tbody>
          {kernels.map(k => (
            <tr key={k.kernel_id} title={k.reason ?? ''} data-kernel-id={k.kernel_id}>
              <td>
                {gpuKernelName(k)}
                <span className={`jp-GpuBurst-sub${k.state === 'failed' ? ' jp-GpuBurst-gpuKernelFailed' : ''}`}>
                  {k.state === 'pending' ? startingText(k) : k.state === 'failed' ? failedText(k) : (k.state ?? '')}
                  {k.files === 'scratch' ? ' · scratch files' : ''}
                </span>
                {k.queue && props.shutdown && <CancelWait kernelId={k.kernel_id} shutdown={props.shutdown} />}
              </td>
              <td>
                <span className="jp-GpuBurst-gpuKernelSite">{k.state === 'failed' ? '—' : kernelSiteText(k)}</span>
                <span className="jp-GpuBurst-sub jp-GpuBurst-gpuKernelNode">{k.node ?? '—'}</span>
              </td>
              <td>
                {k.resource ? gpuAmount(k.resource, k.count ?? 1) : ''}
                <span
                  className="jp-GpuBurst-sub jp-GpuBurst-gpuKernelMemory"
                  title={k.gpu?.reason ?? (k.gpu?.simulated ? 'simulated GPU' : 'measured in the kernel’s pod')}
                >
                  {kernelMemoryText(k.gpu)}
                </span>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}

/** What the status item needs of a notebook or console widget (no dependency on either). */
interface IWithSession {
  sessionContext?: {
    session?: { kernel?: { id: string; name: string; status: string; connectionStatus: string } | null } | null;
    statusChanged: ISignal<unknown, unknown>;
    connectionStatusChanged: ISignal<unknown, unknown>;
  };
}

/** The active notebook's kernel, read from whatever session the current widget has. */
function activeKernel(widget: Widget | null): { id: string; name: string; status: string; connectionStatus: string } | null {
  return (widget as IWithSession | null)?.sessionContext?.session?.kernel ?? null;
}

/** Whether a kernel connection still waits for its kernel: JupyterLab has not reached it yet. */
function isStarting(kernel: { status: string; connectionStatus: string }): boolean {
  return kernel.connectionStatus !== 'connected' || kernel.status === 'unknown' || kernel.status === 'starting';
}

/** Status bar item: where the active notebook's GPU kernel runs, or where it is starting and
 * what it waits for (hidden for other kernels). */
export class GpuKernelStatus extends ReactWidget {
  constructor(
    private readonly _model: GpuKernelsModel,
    private readonly _shell: JupyterFrontEnd.IShell
  ) {
    super();
    this.addClass('jp-GpuBurst-kernelStatus');
    this._shell.currentChanged?.connect(this._onCurrent, this);
    this._model.changed.connect(() => this.update());
    this._onCurrent();
  }

  get kernel(): IGpuKernel | undefined {
    return this._model.byKernelId(activeKernel(this._shell.currentWidget)?.id);
  }

  /** Follow the current widget's kernel: its status says when it stopped starting. */
  private _onCurrent(): void {
    const context = (this._shell.currentWidget as IWithSession | null)?.sessionContext ?? null;
    if (context !== this._context) {
      this._context?.statusChanged.disconnect(this._onStatus, this);
      this._context?.connectionStatusChanged.disconnect(this._onStatus, this);
      this._context = context;
      context?.statusChanged.connect(this._onStatus, this);
      context?.connectionStatusChanged.connect(this._onStatus, this);
    }
    this._onStatus();
  }

  private _onStatus(): void {
    const kernel = activeKernel(this._shell.currentWidget);
    this._model.starting = !!kernel && isGpuKernelName(kernel.name) && isStarting(kernel);
    this.update();
  }

  protected render(): JSX.Element {
    return (
      <UseSignal signal={this._model.changed}>
        {() => {
          const active = activeKernel(this._shell.currentWidget);
          if (!active || !isGpuKernelName(active.name)) {
            return <span />;
          }
          const kernel = this._model.byKernelId(active.id);
          const starting = isStarting(active) && active.status !== 'dead';
          if (!starting && !kernel) {
            return <span />;
          }
          const text = starting
            ? startingText(kernel)
            : kernel!.state === 'failed'
              ? 'GPU kernel failed'
              : `GPU kernel: ${kernelSiteText(kernel!)}`;
          return (
            // JupyterLab's own class for a status bar text: its height, font and baseline
            <span
              className={`jp-StatusBar-TextItem jp-GpuBurst-kernelStatusText${starting ? ' jp-GpuBurst-kernelStarting' : ''}`}
              title={kernel?.state === 'failed' ? `This GPU kernel ${failedText(kernel)}` : (kernel?.reason ?? text)}
              aria-label={text}
            >
              {text}
            </span>
          );
        }}
      </UseSignal>
    );
  }

  private _context: IWithSession['sessionContext'] | null = null;
}

/** Wire GPU kernels into the panel (a section of its own) and the status bar. */
export function installGpuKernels(
  app: JupyterFrontEnd,
  client: GpuBurstClient,
  panel: {
    addSection(render: () => JSX.Element | null): IDisposable;
    setRemoteKernels(lookup: RemoteKernelLookup, changed: ISignal<unknown, void>): IDisposable;
  },
  statusBar: IStatusBar | null
): GpuKernelsModel {
  const model = new GpuKernelsModel(client);
  panel.addSection(() => (
    <UseSignal signal={model.changed}>
      {() => <GpuKernelsSection model={model} shutdown={id => app.serviceManager.kernels.shutdown(id)} />}
    </UseSignal>
  ));
  // the Kernels card lists every kernel of this server: a GPU kernel's row says where its GPU is
  panel.setRemoteKernels(id => {
    const kernel = model.byKernelId(id);
    return kernel ? remoteKernelCells(kernel) : undefined;
  }, model.changed);
  if (statusBar) {
    const item = new GpuKernelStatus(model, app.shell);
    statusBar.registerStatusItem('jupyter-gpuburst:kernel-site', {
      item,
      align: 'left',
      rank: 5,
      // empty unless the active notebook runs a GPU kernel
      isActive: () => true
    });
  }
  return model;
}
