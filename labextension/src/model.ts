/**
 * What the views show: the placement, a time window of samples, and the connection status.
 */
import { ISignal, Signal } from '@lumino/signaling';

import { IConnectionStatus } from './client';
import { IPlacement, ISample } from './types';

/** One point of a GPU's history. */
export interface IGpuPoint {
  t: number;
  utilization: number | null;
  memoryUsed: number;
  memoryTotal: number;
}

/** Placement + sample window, kept in timestamp order without duplicates. */
export class GpuBurstModel {
  constructor(historyMinutes = 5) {
    this._historySeconds = GpuBurstModel.checkMinutes(historyMinutes) * 60;
  }

  /** Validate the "history minutes" setting. */
  static checkMinutes(minutes: number): number {
    if (!Number.isFinite(minutes) || minutes <= 0 || minutes > 60) {
      throw new RangeError(`historyMinutes must be in (0, 60], got ${minutes}`);
    }
    return minutes;
  }

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get placement(): IPlacement | null {
    return this._placement;
  }

  get samples(): readonly ISample[] {
    return this._samples;
  }

  get latest(): ISample | null {
    return this._samples.length ? this._samples[this._samples.length - 1] : null;
  }

  get connection(): IConnectionStatus {
    return this._connection;
  }

  /** Set when the last GET failed, cleared by the next success. */
  get error(): string | null {
    return this._error;
  }

  get historySeconds(): number {
    return this._historySeconds;
  }

  set historyMinutes(minutes: number) {
    this._historySeconds = GpuBurstModel.checkMinutes(minutes) * 60;
    this._trim();
    this._changed.emit();
  }

  setPlacement(placement: IPlacement): void {
    this._placement = placement;
    this._error = null;
    this._changed.emit();
  }

  setConnection(status: IConnectionStatus): void {
    this._connection = status;
    this._changed.emit();
  }

  setError(message: string | null): void {
    this._error = message;
    this._changed.emit();
  }

  /** Merge samples (from history or the stream); older-than-window and duplicate ones are dropped. */
  addSamples(samples: readonly ISample[]): void {
    if (samples.length === 0) {
      return;
    }
    const last = this.latest;
    const inOrder =
      last === null || samples.every((s, i) => s.timestamp > (i ? samples[i - 1].timestamp : last.timestamp));
    if (inOrder) {
      // The common case (one streamed sample after the last one) stays O(1) amortised.
      this._samples.push(...samples);
    } else {
      const byTime = new Map<number, ISample>();
      for (const s of this._samples) {
        byTime.set(s.timestamp, s);
      }
      for (const s of samples) {
        byTime.set(s.timestamp, s);
      }
      this._samples = Array.from(byTime.values()).sort((a, b) => a.timestamp - b.timestamp);
    }
    this._error = null;
    this._trim();
    this._changed.emit();
  }

  /** The history of one GPU (by uuid) within the window. */
  series(uuid: string): IGpuPoint[] {
    const points: IGpuPoint[] = [];
    for (const sample of this._samples) {
      const gpu = sample.gpus.find(g => g.uuid === uuid);
      if (gpu) {
        points.push({
          t: sample.timestamp,
          utilization: gpu.utilization,
          memoryUsed: gpu.memory_used_bytes,
          memoryTotal: gpu.memory_total_bytes
        });
      }
    }
    return points;
  }

  private _trim(): void {
    const last = this.latest;
    if (!last) {
      return;
    }
    const cutoff = last.timestamp - this._historySeconds;
    let drop = 0;
    while (drop < this._samples.length && this._samples[drop].timestamp < cutoff) {
      drop += 1;
    }
    if (drop) {
      this._samples.splice(0, drop);
    }
  }

  private _placement: IPlacement | null = null;
  private _samples: ISample[] = [];
  private _connection: IConnectionStatus = { state: 'idle', retryAt: null, attempt: 0 };
  private _error: string | null = null;
  private _historySeconds: number;
  private _changed = new Signal<this, void>(this);
}
