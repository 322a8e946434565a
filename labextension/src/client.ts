/**
 * Talks to the server extension: one-shot GETs through `ServerConnection`, and one shared
 * Server-Sent Events stream that runs while some view needs it, and a grace period after.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';
import { IDisposable } from '@lumino/disposable';
import { ISignal, Signal } from '@lumino/signaling';

import { backoffDelay, DEFAULT_BACKOFF, IBackoff } from './backoff';
import { ISseEvent, SseParser } from './sse';
import { ConnectionState, IHistory, IPlacement, ISample } from './types';

/** URL path of the server extension's API, relative to the server's base URL. */
export const API_PATH = 'api/gpuburst';

/** Error raised when the server extension answers with a non-2xx status. */
export class GpuBurstRequestError extends Error {
  constructor(
    readonly status: number,
    message: string
  ) {
    super(message);
    this.name = 'GpuBurstRequestError';
  }
}

/** Reconnect scheduling as seen by the views ("connection lost, retrying in 4 s"). */
export interface IConnectionStatus {
  state: ConnectionState;
  /** When the next reconnect attempt starts (ms since epoch), while retrying. */
  retryAt: number | null;
  attempt: number;
}

/**
 * How long an open stream outlives the last view that wanted it (ms). Each reopen is a request
 * that the user's server accepts, parses and authenticates on its one event loop, and connects
 * from many clients are what lift the tail of its other requests; a student flipping between
 * browser tabs or toggling the panel would otherwise cause one every time.
 */
export const DEFAULT_LINGER_MS = 10_000;

export namespace GpuBurstClient {
  export interface IOptions {
    serverSettings?: ServerConnection.ISettings;
    backoff?: IBackoff;
    /** How long the stream stays open once no view wants it; 0 closes it at once. */
    lingerMs?: number;
  }
}

/**
 * Client of `/api/gpuburst`. Views call `setDemand(name, true)` while they are visible; the
 * stream is open while at least one view wants it and the browser tab is visible, and for
 * `lingerMs` after that stops being so: demand that comes back within it keeps reading the same
 * stream. While it lingers, samples still arrive and the state stays `open`.
 *
 * The stream is read from a `ServerConnection.makeRequest` response, as every JupyterLab
 * request is made: the XSRF header with the hub's cookie, or the Authorization header when the
 * server has a token. EventSource can send neither, and a token must never ride in a URL.
 */
export class GpuBurstClient implements IDisposable {
  constructor(options: GpuBurstClient.IOptions = {}) {
    this.serverSettings = options.serverSettings ?? ServerConnection.makeSettings();
    this._backoff = options.backoff ?? DEFAULT_BACKOFF;
    this._lingerMs = options.lingerMs ?? DEFAULT_LINGER_MS;
    document.addEventListener('visibilitychange', this._onVisibility);
  }

  readonly serverSettings: ServerConnection.ISettings;

  get placementReceived(): ISignal<this, IPlacement> {
    return this._placementReceived;
  }

  get samplesReceived(): ISignal<this, ISample[]> {
    return this._samplesReceived;
  }

  get statusChanged(): ISignal<this, IConnectionStatus> {
    return this._statusChanged;
  }

  /** The server said it is stopping (its stream's last event). */
  get serverStopping(): ISignal<this, void> {
    return this._serverStopping;
  }

  get status(): IConnectionStatus {
    return { state: this._state, retryAt: this._retryAt, attempt: this._attempt };
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  /** GET a JSON document below `api/gpuburst/`. */
  async getJSON<T>(endpoint: string): Promise<T> {
    const url = URLExt.join(this.serverSettings.baseUrl, API_PATH, endpoint);
    const response = await ServerConnection.makeRequest(url, {}, this.serverSettings);
    if (!response.ok) {
      throw new GpuBurstRequestError(
        response.status,
        `GET ${endpoint} failed: ${response.status} ${response.statusText}`
      );
    }
    return (await response.json()) as T;
  }

  async fetchPlacement(): Promise<IPlacement> {
    const placement = await this.getJSON<IPlacement>('placement');
    this._placementReceived.emit(placement);
    return placement;
  }

  async fetchHistory(): Promise<IHistory> {
    const history = await this.getJSON<IHistory>('history');
    this._samplesReceived.emit(history.samples);
    return history;
  }

  /** Declare whether `consumer` currently needs live samples. */
  setDemand(consumer: string, wanted: boolean): void {
    if (wanted) {
      this._demand.add(consumer);
    } else {
      this._demand.delete(consumer);
    }
    this._reconcile();
  }

  /** URL of the event stream (credentials travel in headers, never here). */
  streamUrl(): string {
    return URLExt.join(this.serverSettings.baseUrl, API_PATH, 'stream');
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    document.removeEventListener('visibilitychange', this._onVisibility);
    this._close();
    Signal.clearData(this);
  }

  private get _wanted(): boolean {
    return !this._disposed && this._demand.size > 0 && document.visibilityState !== 'hidden';
  }

  private _reconcile(): void {
    if (this._wanted) {
      this._stopLinger();
      if (this._state === 'idle' || this._state === 'paused') {
        this._open();
      }
    } else if (this._abort && this._lingerMs > 0) {
      // A request is out (the stream is open, or its connect is under way): the server has paid,
      // or is paying, for it, so it is kept a while in case a view wants it again.
      if (this._lingerTimer === null) {
        this._lingerTimer = window.setTimeout(() => this._pause(), this._lingerMs);
      }
    } else if (this._state !== 'idle' && this._state !== 'paused') {
      // Waiting to retry holds no connection, so stopping now costs the server nothing. With no
      // linger, an open stream closes here too.
      this._pause();
    }
  }

  private _pause(): void {
    this._close();
    // A pause is deliberate: resuming is a fresh connection, not a retry.
    this._attempt = 0;
    this._setState('paused');
  }

  private _open(): void {
    this._close();
    this._setState(this._attempt > 0 ? 'retrying' : 'connecting');
    const abort = new AbortController();
    this._abort = abort;
    void this._read(abort).then(
      () => this._onStreamEnd(abort),
      () => this._onStreamEnd(abort)
    );
  }

  /** Read one stream until it ends, fails or is aborted. */
  private async _read(abort: AbortController): Promise<void> {
    const init: RequestInit = {
      method: 'GET',
      headers: { Accept: 'text/event-stream' },
      cache: 'no-store',
      signal: abort.signal
    };
    const response = await ServerConnection.makeRequest(this.streamUrl(), init, this.serverSettings);
    if (!response.ok || !response.body) {
      throw new GpuBurstRequestError(response.status, `stream: ${response.status} ${response.statusText}`);
    }
    if (abort !== this._abort) {
      return;
    }
    const reconnected = this._attempt > 0 || this._everOpened;
    this._attempt = 0;
    this._everOpened = true;
    this._setState('open');
    if (reconnected) {
      // Fill the gap left while disconnected or paused; the model drops duplicates.
      this.fetchHistory().catch(() => undefined);
    }
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    const parser = new SseParser(event => this._dispatch(event));
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done || abort !== this._abort) {
          return;
        }
        parser.push(value);
      }
    } finally {
      reader.releaseLock();
    }
  }

  private _dispatch(event: ISseEvent): void {
    if (event.event === 'placement') {
      const placement = parse<IPlacement>(event.data);
      if (placement) {
        this._placementReceived.emit(placement);
      }
    } else if (event.event === 'sample') {
      const sample = parse<ISample>(event.data);
      if (sample) {
        this._samplesReceived.emit([sample]);
      }
    } else if (event.event === 'stopping') {
      this._serverStopping.emit();
    }
  }

  private _onStreamEnd(abort: AbortController): void {
    if (abort !== this._abort) {
      return; // closed on purpose, or replaced by a newer stream
    }
    this._abort = null;
    abort.abort();
    if (this._wanted) {
      this._scheduleRetry();
    } else {
      this._pause(); // it was lingering: nobody waits for a retry
    }
  }

  private _scheduleRetry(): void {
    const delay = backoffDelay(this._attempt, this._backoff, Math.random());
    this._attempt += 1;
    this._retryAt = Date.now() + delay;
    this._setState('retrying');
    this._timer = window.setTimeout(() => {
      this._timer = null;
      this._retryAt = null;
      if (this._wanted) {
        this._open();
      } else {
        this._setState('paused');
      }
    }, delay);
  }

  private _stopLinger(): void {
    if (this._lingerTimer !== null) {
      window.clearTimeout(this._lingerTimer);
      this._lingerTimer = null;
    }
  }

  private _close(): void {
    this._stopLinger();
    if (this._timer !== null) {
      window.clearTimeout(this._timer);
      this._timer = null;
    }
    this._retryAt = null;
    if (this._abort) {
      const abort = this._abort;
      this._abort = null;
      abort.abort();
    }
  }

  private _setState(state: ConnectionState): void {
    this._state = state;
    this._statusChanged.emit(this.status);
  }

  private _onVisibility = (): void => {
    this._reconcile();
  };

  private _backoff: IBackoff;
  private _lingerMs: number;
  private _lingerTimer: number | null = null;
  private _demand = new Set<string>();
  private _abort: AbortController | null = null;
  private _state: ConnectionState = 'idle';
  private _attempt = 0;
  private _everOpened = false;
  private _retryAt: number | null = null;
  private _timer: number | null = null;
  private _disposed = false;
  private _placementReceived = new Signal<this, IPlacement>(this);
  private _samplesReceived = new Signal<this, ISample[]>(this);
  private _statusChanged = new Signal<this, IConnectionStatus>(this);
  private _serverStopping = new Signal<this, void>(this);
}

function parse<T>(data: unknown): T | null {
  if (typeof data !== 'string') {
    return null;
  }
  try {
    return JSON.parse(data) as T;
  } catch {
    console.warn('gpuburst: ignoring a malformed stream event');
    return null;
  }
}
