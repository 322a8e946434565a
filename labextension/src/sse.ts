/**
 * A Server-Sent Events parser for a stream read with `fetch` (text/event-stream, as the HTML
 * standard defines it): fields `event`, `data` (several lines joined with "\n"), comments, and
 * any of CRLF, LF or CR as line ends. `id` and `retry` are not used by the server and ignored.
 */

export interface ISseEvent {
  /** The `event` field, "message" when absent. */
  event: string;
  data: string;
}

export class SseParser {
  constructor(private readonly _onEvent: (event: ISseEvent) => void) {}

  /** Feed the next decoded chunk; complete events are dispatched, the rest is kept. */
  push(chunk: string): void {
    this._buffer += chunk;
    for (;;) {
      const match = /\r\n|\r|\n/.exec(this._buffer);
      if (!match) {
        return;
      }
      // A lone CR at the end of a chunk may be the first half of CRLF: wait for more.
      if (match[0] === '\r' && match.index === this._buffer.length - 1) {
        return;
      }
      const line = this._buffer.slice(0, match.index);
      this._buffer = this._buffer.slice(match.index + match[0].length);
      this._line(line);
    }
  }

  private _line(line: string): void {
    if (line === '') {
      if (this._data.length > 0) {
        this._onEvent({ event: this._event || 'message', data: this._data.join('\n') });
      }
      this._event = '';
      this._data = [];
      return;
    }
    if (line.startsWith(':')) {
      return; // a comment: the server's keepalive
    }
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) {
      value = value.slice(1);
    }
    if (field === 'event') {
      this._event = value;
    } else if (field === 'data') {
      this._data.push(value);
    }
  }

  private _buffer = '';
  private _event = '';
  private _data: string[] = [];
}
