/**
 * Status bar item: "donor-1 · GPU 37 %"; a button that opens the panel.
 */
import { ReactWidget, UseSignal } from '@jupyterlab/ui-components';
import * as React from 'react';

import { cpuServer, formatPercent, meanUtilization, siteSentence, statusText } from './format';
import { gpuIcon } from './icon';
import { GpuBurstModel } from './model';

/** Accessible description of the current state, for the button's label. */
export function statusLabel(model: GpuBurstModel): string {
  const parts = [model.placement ? siteSentence(model.placement) : 'Placement loading.'];
  const sample = model.latest;
  if (sample) {
    if (!sample.available || sample.gpus.length === 0) {
      if (!cpuServer(model.placement)) {
        parts.push('No GPU visible.');
      }
    } else {
      const util = meanUtilization(sample.gpus);
      parts.push(`GPU utilization ${util == null ? 'unavailable' : formatPercent(util)}.`);
      if (sample.simulated) {
        parts.push('Simulated data.');
      }
    }
  }
  if (model.connection.state === 'retrying') {
    parts.push('Connection lost, retrying.');
  }
  parts.push('Open the GPU panel.');
  return parts.join(' ');
}

function StatusView(props: { model: GpuBurstModel; live: boolean; onOpen: () => void }): JSX.Element {
  const { model } = props;
  // Without a live stream the last sample goes stale, so only the site is shown.
  const sample = props.live ? model.latest : null;
  const lost = model.connection.state === 'retrying';
  return (
    <button
      type="button"
      className={`jp-GpuBurst-status${lost ? ' jp-GpuBurst-status-lost' : ''}`}
      aria-label={statusLabel(model)}
      title={statusLabel(model)}
      onClick={props.onOpen}
    >
      <gpuIcon.react tag="span" className="jp-GpuBurst-statusIcon" />
      <span className="jp-GpuBurst-statusText">{statusText(model.placement, sample)}</span>
    </button>
  );
}

/** Widget placed in the status bar. */
export class GpuBurstStatus extends ReactWidget {
  constructor(
    private readonly _model: GpuBurstModel,
    private readonly _onOpen: () => void
  ) {
    super();
    this.addClass('jp-GpuBurst-statusItem');
  }

  /** Whether the item shows live utilization (and so needs the stream). */
  get live(): boolean {
    return this._live;
  }

  set live(value: boolean) {
    this._live = value;
    this.update();
  }

  private _live = true;

  protected render(): JSX.Element {
    return (
      <UseSignal signal={this._model.changed}>
        {() => <StatusView model={this._model} live={this._live} onOpen={this._onOpen} />}
      </UseSignal>
    );
  }
}
