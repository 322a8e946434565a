/**
 * The sidebar panel: where this server runs, live GPU charts, and per-kernel GPU memory.
 */
import { ReactWidget, UseSignal } from '@jupyterlab/ui-components';
import { DisposableDelegate, IDisposable } from '@lumino/disposable';
import { Message } from '@lumino/messaging';
import { ISignal } from '@lumino/signaling';
import * as React from 'react';

import { Chart } from './chart';
import { GpuBurstClient } from './client';
import {
  cpuServer,
  filesAreLost,
  formatBytes,
  formatPercent,
  gpuModels,
  kernelLabel,
  requestLabel,
  siteLabel,
  siteSentence
} from './format';
import { gpuIcon } from './icon';
import { GpuBurstModel } from './model';
import { IGpu, IPlacement, ISample } from './types';

export const PANEL_ID = 'jupyter-gpuburst-panel';

/**
 * One more section of the panel, rendered below the built-in ones on every model change.
 * Views kept in their own modules (a list of remote kernels, say) add themselves with
 * `GpuBurstPanel.addSection`, and use `PanelSection` for the card around their content.
 */
export type PanelSectionRenderer = (model: GpuBurstModel) => JSX.Element | null;

/**
 * Where a kernel that runs outside this server holds its GPU, for its row in the Kernels card:
 * a remote GPU kernel has no process here, so this server's own GPU reading shows it using none.
 * Undefined for a kernel that runs here.
 */
/** A kernel that runs outside this server (a GPU kernel): its cells in the Kernels card, and
 * its name as the launcher offered it ('Python 3 (1 GPU)') where the row would show a raw one. */
export type RemoteKernelLookup = (kernelId: string) =>
  | { gpu: string; memory: string; title: string; name?: string | null; failure?: string | null }
  | undefined;

/** The card every section of the panel sits in. */
export function PanelSection(props: {
  title: string;
  className?: string;
  label?: string;
  children?: React.ReactNode;
}): JSX.Element {
  return (
    <section className={`jp-GpuBurst-card ${props.className ?? ''}`.trim()} aria-label={props.label ?? props.title}>
      <h3>{props.title}</h3>
      {props.children}
    </section>
  );
}

/** Re-render once a second while `active`, for the "retrying in N s" countdown. */
function useTicker(active: boolean): number {
  const [now, setNow] = React.useState(Date.now());
  React.useEffect(() => {
    if (!active) {
      return;
    }
    const timer = window.setInterval(() => setNow(Date.now()), 1000);
    return () => window.clearInterval(timer);
  }, [active]);
  return now;
}

function ConnectionBanner(props: { model: GpuBurstModel }): JSX.Element | null {
  const { state, retryAt } = props.model.connection;
  const retrying = state === 'retrying';
  const now = useTicker(retrying);
  if (retrying) {
    const seconds = retryAt ? Math.max(0, Math.ceil((retryAt - now) / 1000)) : 0;
    return (
      <div className="jp-GpuBurst-banner jp-GpuBurst-connection" role="status" aria-live="polite">
        Connection lost, retrying{seconds > 0 ? ` in ${seconds} s` : '…'}
      </div>
    );
  }
  if (props.model.error) {
    return (
      <div className="jp-GpuBurst-banner jp-GpuBurst-error" role="alert">
        {props.model.error}
      </div>
    );
  }
  return null;
}

function WhereCard(props: { placement: IPlacement | null; sample: ISample | null }): JSX.Element {
  const { placement, sample } = props;
  const rows: [string, string][] = [];
  if (placement) {
    rows.push(['Site', siteLabel(placement)]);
    if (placement.cluster) {
      rows.push(['Cluster', placement.cluster]);
    }
    rows.push(['Node', placement.node ?? '—']);
  }
  if (sample && sample.gpus.length) {
    rows.push(['GPU', gpuModels(sample.gpus)]);
  } else if (placement && requestLabel(placement)) {
    rows.push(['GPU', `${requestLabel(placement)} requested`]);
  } else if (placement?.managed && !placement.gpu_resource) {
    rows.push(['GPU', 'none (CPU only)']);
  }
  return (
    <section className="jp-GpuBurst-card jp-GpuBurst-where" aria-label="Where this server runs">
      <h3>Where this server runs</h3>
      {placement ? (
        <>
          <p className={`jp-GpuBurst-site jp-GpuBurst-site-${placement.site_kind}`}>
            {siteSentence(placement)}
          </p>
          <dl>
            {rows.map(([key, value]) => (
              <React.Fragment key={key}>
                <dt>{key}</dt>
                <dd data-field={key.toLowerCase()}>{value}</dd>
              </React.Fragment>
            ))}
          </dl>
          {placement.reason && (
            <p className="jp-GpuBurst-reason">
              <span className="jp-GpuBurst-label">Why here: </span>
              {placement.reason}
            </p>
          )}
          {placement.storage?.message && (
            <p
              className={`jp-GpuBurst-storage${filesAreLost(placement.storage) ? ' jp-GpuBurst-storage-lost' : ''}`}
              data-kind={placement.storage.kind}
              role={filesAreLost(placement.storage) ? 'note' : undefined}
            >
              <span className="jp-GpuBurst-label">Files: </span>
              {placement.storage.message}
            </p>
          )}
        </>
      ) : (
        <p className="jp-GpuBurst-muted">Loading placement…</p>
      )}
    </section>
  );
}

function GpuCard(props: { gpu: IGpu; model: GpuBurstModel; end: number }): JSX.Element {
  const { gpu, model, end } = props;
  const series = model.series(gpu.uuid);
  const minutes = Math.round(model.historySeconds / 60);
  const memFraction = gpu.memory_total_bytes > 0 ? gpu.memory_used_bytes / gpu.memory_total_bytes : null;
  const title = `GPU ${gpu.index}${gpu.mig ? ' (MIG)' : ''}`;
  return (
    <section className="jp-GpuBurst-card jp-GpuBurst-gpu" aria-label={`${title}: ${gpu.name}`} data-uuid={gpu.uuid}>
      <h3>
        {title} <span className="jp-GpuBurst-muted">{gpu.name}</span>
      </h3>
      <Chart
        kind="utilization"
        title="Utilization"
        label={`${title} utilization over the last ${minutes} minutes`}
        valueText={gpu.utilization == null ? 'n/a' : formatPercent(gpu.utilization)}
        points={series.map(p => ({ t: p.t, v: p.utilization }))}
        windowSeconds={model.historySeconds}
        end={end}
      />
      {gpu.utilization_note && <p className="jp-GpuBurst-note">{gpu.utilization_note}</p>}
      <Chart
        kind="memory"
        title="Memory"
        label={`${title} memory over the last ${minutes} minutes`}
        valueText={`${formatBytes(gpu.memory_used_bytes)} / ${formatBytes(gpu.memory_total_bytes)}`}
        points={series.map(p => ({ t: p.t, v: p.memoryTotal > 0 ? p.memoryUsed / p.memoryTotal : null }))}
        windowSeconds={model.historySeconds}
        end={end}
      />
      <p className="jp-GpuBurst-gpuFacts">
        {memFraction != null && <span>{formatPercent(memFraction)} memory</span>}
        {gpu.temperature_c != null && <span>{gpu.temperature_c} °C</span>}
        {gpu.power_w != null && <span>{gpu.power_w.toFixed(0)} W</span>}
      </p>
    </section>
  );
}

function KernelList(props: { sample: ISample; remote?: RemoteKernelLookup }): JSX.Element {
  const { sample, remote } = props;
  const indexOf = new Map(sample.gpus.map(g => [g.uuid, g.index]));
  return (
    <section className="jp-GpuBurst-card jp-GpuBurst-kernels" aria-label="Kernels using GPUs">
      <h3>Kernels</h3>
      {sample.kernels.length === 0 ? (
        <p className="jp-GpuBurst-muted">No running kernels.</p>
      ) : (
        <table>
          <thead>
            <tr>
              <th scope="col">Notebook</th>
              <th scope="col">GPU</th>
              <th scope="col">Memory</th>
            </tr>
          </thead>
          <tbody>
            {sample.kernels.map(kernel => {
              const total = kernel.gpus.reduce((sum, g) => sum + g.memory_used_bytes, 0);
              const gpus = kernel.gpus.map(g => indexOf.get(g.uuid) ?? '?').join(', ');
              const elsewhere = kernel.gpus.length ? undefined : remote?.(kernel.kernel_id);
              return (
                <tr key={kernel.kernel_id} data-kernel-id={kernel.kernel_id} title={elsewhere?.title}>
                  <td title={kernel.notebook ?? elsewhere?.name ?? kernel.name}>
                    {kernelLabel(kernel.notebook, elsewhere?.name || kernel.name)}
                    {elsewhere?.failure && <span className="jp-GpuBurst-sub jp-GpuBurst-kernelFailed">{elsewhere.failure}</span>}
                  </td>
                  <td className={elsewhere?.failure ? 'jp-GpuBurst-kernelFailed' : undefined}>{elsewhere ? elsewhere.gpu : gpus || '—'}</td>
                  <td>{elsewhere ? elsewhere.memory : kernel.gpus.length ? formatBytes(total) : '—'}</td>
                </tr>
              );
            })}
          </tbody>
        </table>
      )}
      {sample.unattributed.length > 0 && (
        <p className="jp-GpuBurst-muted">
          {sample.unattributed.length} other GPU process{sample.unattributed.length > 1 ? 'es' : ''} not
          started from this server.
        </p>
      )}
    </section>
  );
}

/** The panel's content for one model state. */
export function PanelView(props: {
  model: GpuBurstModel;
  sections?: PanelSectionRenderer[];
  remoteKernels?: RemoteKernelLookup;
}): JSX.Element {
  const { model } = props;
  const sample = model.latest;
  return (
    <div className="jp-GpuBurst-content">
      <header className="jp-GpuBurst-header">
        <h2>GPU</h2>
        {sample?.simulated && (
          <span className="jp-GpuBurst-badge jp-GpuBurst-simulated" title="The numbers below are simulated, not measured">
            simulated data
          </span>
        )}
      </header>
      <ConnectionBanner model={model} />
      <WhereCard placement={model.placement} sample={sample} />
      {sample === null ? (
        <p className="jp-GpuBurst-muted">Waiting for the first GPU sample…</p>
      ) : !sample.available || sample.gpus.length === 0 ? (
        cpuServer(model.placement) ? null : (
          <section className="jp-GpuBurst-card jp-GpuBurst-nogpu" role="status">
            <h3>No GPU visible</h3>
            <p>{sample.reason ?? 'This server sees no GPU.'}</p>
          </section>
        )
      ) : (
        sample.gpus.map(gpu => <GpuCard key={gpu.uuid} gpu={gpu} model={model} end={sample.timestamp} />)
      )}
      {sample && <KernelList sample={sample} remote={props.remoteKernels} />}
      {(props.sections ?? []).map((render, i) => (
        <React.Fragment key={i}>{render(model)}</React.Fragment>
      ))}
    </div>
  );
}

/** Sidebar widget; asks the client for live samples only while it is shown. */
export class GpuBurstPanel extends ReactWidget {
  constructor(
    private readonly _model: GpuBurstModel,
    private readonly _client: GpuBurstClient
  ) {
    super();
    this.id = PANEL_ID;
    this.addClass('jp-GpuBurst-panel');
    this.title.icon = gpuIcon;
    this.title.caption = 'GPU: where this server runs and how its GPUs are used';
    this.node.setAttribute('role', 'region');
    this.node.setAttribute('aria-label', 'GPU panel');
  }

  /** Add a section below the built-in ones; dispose the result to remove it. */
  addSection(render: PanelSectionRenderer): IDisposable {
    this._sections.push(render);
    this.update();
    return new DisposableDelegate(() => {
      this._sections = this._sections.filter(r => r !== render);
      this.update();
    });
  }

  /**
   * Say where kernels that run outside this server hold their GPU; ``changed`` fires when that
   * does, so their rows follow at once rather than at the next GPU sample. Dispose the result
   * to stop.
   */
  setRemoteKernels(lookup: RemoteKernelLookup, changed: ISignal<unknown, void>): IDisposable {
    const refresh = (): void => this.update();
    this._remoteKernels = lookup;
    changed.connect(refresh);
    this.update();
    return new DisposableDelegate(() => {
      changed.disconnect(refresh);
      if (this._remoteKernels === lookup) {
        this._remoteKernels = undefined;
        this.update();
      }
    });
  }

  protected render(): JSX.Element {
    return (
      <UseSignal signal={this._model.changed}>
        {() => <PanelView model={this._model} sections={this._sections} remoteKernels={this._remoteKernels} />}
      </UseSignal>
    );
  }

  private _sections: PanelSectionRenderer[] = [];
  private _remoteKernels: RemoteKernelLookup | undefined;

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this._client.setDemand('panel', true);
  }

  protected onAfterHide(msg: Message): void {
    super.onAfterHide(msg);
    this._client.setDemand('panel', false);
  }

  protected onBeforeDetach(msg: Message): void {
    this._client.setDemand('panel', false);
    super.onBeforeDetach(msg);
  }
}
