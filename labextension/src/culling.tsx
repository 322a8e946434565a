/**
 * GPU idle culling in the Lab: the panel's warning card with its Keep button, a status bar
 * warning, and a notification when the hub stopped a GPU kernel of this server (with why).
 * Warnings stay in the panel and the status bar, not in toasts that would cover the panel.
 */
import { Notification } from '@jupyterlab/apputils';
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';
import { IStatusBar } from '@jupyterlab/statusbar';
import { ReactWidget, UseSignal } from '@jupyterlab/ui-components';
import { ISignal, Signal } from '@lumino/signaling';
import * as React from 'react';

import { GpuBurstClient } from './client';
import { ICullTarget, ICullingState, basisText, cullingTitle, warningText, watchText, warnings } from './cullingformat';
import { kernelLabel } from './format';
import { GpuBurstModel } from './model';
import { GpuBurstPanel, PanelSection } from './panel';

const POLL_MS = 15_000;

/** Polls the server extension's culling state; a Keep goes through it to the hub. */
export class CullingWatch {
  constructor(private readonly _settings: ServerConnection.ISettings) {}

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get state(): ICullingState | null {
    return this._state;
  }

  get message(): string | null {
    return this._message;
  }

  async refresh(): Promise<void> {
    const url = URLExt.join(this._settings.baseUrl, 'api/gpuburst/culling');
    try {
      const response = await ServerConnection.makeRequest(url, {}, this._settings);
      if (response.ok) {
        this._state = (await response.json()) as ICullingState;
        this._changed.emit();
      }
    } catch (reason) {
      console.debug('gpuburst: culling state unavailable', reason);
    }
  }

  async keep(target: string): Promise<void> {
    const url = URLExt.join(this._settings.baseUrl, 'api/gpuburst/culling/keep');
    const response = await ServerConnection.makeRequest(
      url,
      { method: 'POST', body: JSON.stringify({ target }) },
      this._settings
    );
    const body = await response.json().catch(() => ({}));
    this._message = String(body.message ?? (response.ok ? 'Kept.' : `Keep failed (${response.status}).`));
    if (body.culling !== undefined) {
      this._state = body as ICullingState;
    }
    this._changed.emit();
    if (response.ok) {
      await this.refresh();
    }
  }

  start(): void {
    if (this._timer === null) {
      void this.refresh();
      this._timer = window.setInterval(() => void this.refresh(), POLL_MS);
    }
  }

  private _state: ICullingState | null = null;
  private _message: string | null = null;
  private _timer: number | null = null;
  private _changed = new Signal<this, void>(this);
}

function notebookOf(model: GpuBurstModel, kernelId: string): string | undefined {
  const kernel = model.latest?.kernels.find(k => k.kernel_id === kernelId);
  return kernel ? kernelLabel(kernel.notebook, kernel.name) : undefined;
}

function Warning(props: { target: ICullTarget; model: GpuBurstModel; watch: CullingWatch }): JSX.Element {
  const { target, model, watch } = props;
  const [busy, setBusy] = React.useState(false);
  const notebook = target.kind === 'kernel' ? notebookOf(model, target.kernel_id) : undefined;
  const basis = basisText(target.basis);
  return (
    <div className="jp-GpuBurst-cullWarning" role="alert" data-target={target.target}>
      <p className="jp-GpuBurst-cullText">{warningText(target, notebook)}</p>
      {basis && target.cause !== 'budget' && <p className="jp-GpuBurst-note">{basis}</p>}
      {target.cause === 'budget' ? (
        target.stops_in_s !== null && <p className="jp-GpuBurst-muted">Save your work.</p>
      ) : target.keepable ? (
        <button
          type="button"
          className="jp-mod-styled jp-mod-accept jp-GpuBurst-keep"
          disabled={busy}
          title={`Count this as GPU activity now (${target.keeps_left} left)`}
          onClick={() => {
            setBusy(true);
            void watch.keep(target.target).finally(() => setBusy(false));
          }}
        >
          Keep
        </button>
      ) : (
        <p className="jp-GpuBurst-muted">
          {target.keeps_left === 0
            ? 'Keep was used as often as allowed; the GPU goes back to others then.'
            : 'The GPU goes back to others then.'}{' '}
          Save your work.
        </p>
      )}
    </div>
  );
}

/** The panel's "GPU idle" card: warnings with Keep, the quiet idle lines, stopped kernels. */
export function CullingSection(props: { model: GpuBurstModel; watch: CullingWatch }): JSX.Element | null {
  const { model, watch } = props;
  const state = watch.state;
  if (!state?.reporting || !state.culling) {
    return null;
  }
  const warned = warnings(state);
  const quiet = state.culling.targets.map(t => [t, watchText(t)] as const).filter(([, text]) => text);
  const stopped = state.stopped ?? [];
  if (!warned.length && !quiet.length && !stopped.length) {
    return null;
  }
  return (
    <PanelSection title={cullingTitle(warned, !warned.length && !quiet.length)} className="jp-GpuBurst-culling">
      {warned.map(t => (
        <Warning key={t.target} target={t} model={model} watch={watch} />
      ))}
      {watch.message && <p className="jp-GpuBurst-muted" role="status">{watch.message}</p>}
      {quiet.map(([t, text]) => (
        <p key={t.target} className="jp-GpuBurst-muted" data-target={t.target}>
          {t.kind === 'server' ? 'This server: ' : `${notebookOf(model, t.kernel_id) ?? 'GPU kernel'}: `}
          {text}
        </p>
      ))}
      {stopped.map(s => (
        <p key={`${s.kernel_id}-${s.at}`} className="jp-GpuBurst-cullStopped" role="note">
          {s.reason}
        </p>
      ))}
    </PanelSection>
  );
}

/** Status bar: "GPU stops in 10 min" while a warning stands; opens the panel. */
class CullingStatus extends ReactWidget {
  constructor(
    private readonly _watch: CullingWatch,
    private readonly _open: () => void
  ) {
    super();
    this.addClass('jp-GpuBurst-cullStatusItem');
  }

  protected render(): JSX.Element {
    return (
      <UseSignal signal={this._watch.changed}>
        {() => {
          const first = warnings(this._watch.state)[0];
          if (!first) {
            return <span hidden />;
          }
          const text = warningText(first);
          return (
            <button type="button" className="jp-GpuBurst-cullStatus" title={text} aria-label={`${text}. Open the GPU panel.`} onClick={this._open}>
              {text}
            </button>
          );
        }}
      </UseSignal>
    );
  }
}

/** Wire culling into the panel, the status bar and notifications. */
export function installGpuCulling(
  client: GpuBurstClient,
  panel: GpuBurstPanel,
  statusBar: IStatusBar | null,
  openPanel: () => void
): CullingWatch {
  const watch = new CullingWatch(client.serverSettings);
  const told = new Set<string>();
  panel.addSection(m => <CullingSection model={m} watch={watch} />);
  watch.changed.connect(() => {
    panel.update();
    for (const stop of watch.state?.stopped ?? []) {
      const key = `${stop.kernel_id}-${stop.at}`;
      if (!told.has(key)) {
        told.add(key);
        Notification.warning(stop.reason, { autoClose: false });
      }
    }
  });
  if (statusBar) {
    statusBar.registerStatusItem('jupyter-gpuburst:culling', {
      item: new CullingStatus(watch, openPanel),
      align: 'left',
      rank: 5,
      isActive: () => true
    });
  }
  watch.start();
  return watch;
}
