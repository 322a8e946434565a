/**
 * A sentence under the launcher's GPU kernels heading: the hub's right-sizing suggestion
 * ("Your last 5 GPU sessions peaked at 6 GiB of GPU memory: a MIG 1g.10gb slice would do").
 *
 * JupyterLab's launcher has no place for text of an extension's own, and renders its sections
 * again whenever its cards change, so the note is put back after each render: a MutationObserver
 * on the shell, active only while there is something to say, does it once per animation frame.
 */
import { IDisposable } from '@lumino/disposable';

export const NOTE_CLASS = 'jp-GpuBurst-launcherNote';

/** The launcher section whose heading is `category`, in `root`. */
export function launcherSection(root: ParentNode, category: string): HTMLElement | null {
  for (const title of Array.from(root.querySelectorAll('.jp-Launcher-sectionTitle'))) {
    if (title.textContent?.trim() === category) {
      return title.closest('.jp-Launcher-section') as HTMLElement | null;
    }
  }
  return null;
}

/**
 * Put `text` (or nothing, when empty) under the heading of each launcher section titled
 * `category` in `root`; a note already there is changed in place. Returns how many it placed.
 */
export function placeNote(root: ParentNode, category: string, text: string, noteId: string): number {
  let placed = 0;
  const mine = `.${NOTE_CLASS}[data-note="${noteId}"]`;
  for (const note of Array.from(root.querySelectorAll(mine))) {
    const section = note.closest('.jp-Launcher-section');
    const title = section?.querySelector('.jp-Launcher-sectionTitle')?.textContent?.trim();
    if (!text || title !== category) {
      note.remove();
    }
  }
  if (!text) {
    return 0;
  }
  for (const title of Array.from(root.querySelectorAll('.jp-Launcher-sectionTitle'))) {
    if (title.textContent?.trim() !== category) {
      continue;
    }
    const section = title.closest('.jp-Launcher-section');
    const header = section?.querySelector('.jp-Launcher-sectionHeader');
    if (!section || !header) {
      continue;
    }
    let note = section.querySelector(mine) as HTMLElement | null;
    if (!note) {
      note = document.createElement('p');
      note.className = NOTE_CLASS;
      note.dataset.note = noteId;
      note.setAttribute('role', 'note');
      header.insertAdjacentElement('afterend', note);
    }
    if (note.textContent !== text) {
      note.textContent = text;
    }
    placed++;
  }
  return placed;
}

/** Keeps the note under the GPU kernels heading of every open launcher. */
export class LauncherNote implements IDisposable {
  constructor(
    private readonly _root: HTMLElement,
    private readonly _noteId: string
  ) {}

  get isDisposed(): boolean {
    return this._disposed;
  }

  /** What to say under the heading `category` ('' says nothing). */
  show(category: string, text: string): void {
    this._category = category;
    this._text = text;
    if (text && !this._observer) {
      this._observer = new MutationObserver(() => this._schedule());
      this._observer.observe(this._root, { childList: true, subtree: true });
    } else if (!text && this._observer) {
      this._observer.disconnect();
      this._observer = null;
    }
    this._place();
  }

  private _schedule(): void {
    if (this._frame === null) {
      this._frame = window.requestAnimationFrame(() => {
        this._frame = null;
        this._place();
      });
    }
  }

  private _place(): void {
    // the note's own insertion is a mutation too: placing it again changes nothing, so it settles
    placeNote(this._root, this._category, this._text, this._noteId);
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    this._observer?.disconnect();
    this._observer = null;
    if (this._frame !== null) {
      window.cancelAnimationFrame(this._frame);
      this._frame = null;
    }
    placeNote(this._root, this._category, '', this._noteId);
  }

  private _category = '';
  private _text = '';
  private _observer: MutationObserver | null = null;
  private _frame: number | null = null;
  private _disposed = false;
}
