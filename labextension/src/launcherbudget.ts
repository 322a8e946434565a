/**
 * The user's GPU-hour budget under the launcher's GPU kernels title ("7.5 of 20 GPU-hours left
 * this week, resets Monday 00:00 UTC.").
 *
 * JupyterLab's launcher has no place for a section's note: it renders each category as a title
 * and its cards, again whenever its items change, in every open launcher. So the note is kept
 * beside the title from outside: whenever launcher sections appear or change, the section that
 * holds the GPU kernel cards gets the sentence as the last child of its header (React leaves
 * nodes it did not make alone), and, with the budget used up, a class that dims its cards.
 */
import { IDisposable } from '@lumino/disposable';

export const NOTE_CLASS = 'jp-GpuBurst-launcherBudget';
export const USED_UP_CLASS = 'jp-GpuBurst-budgetUsedUp';

export class LauncherBudgetNote implements IDisposable {
  constructor(private readonly _root: HTMLElement) {
    // our own edits wake it up once more, and then change nothing
    this._observer = new MutationObserver(() => this._schedule());
    this._observer.observe(this._root, { childList: true, subtree: true });
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  /** Say ``sentence`` ("" for none) under the title of the section named ``category``. */
  update(category: string, sentence: string, usedUp: boolean): void {
    this._category = category;
    this._sentence = sentence;
    this._usedUp = usedUp;
    this.apply();
  }

  /** Bring every open launcher's GPU kernels section in line with the budget. */
  apply(): void {
    const sections = this._root.querySelectorAll<HTMLElement>('.jp-Launcher-section');
    sections.forEach(section => {
      const header = section.querySelector<HTMLElement>('.jp-Launcher-sectionHeader');
      const ours = Array.from(section.querySelectorAll<HTMLElement>('.jp-LauncherCard')).some(
        card => card.dataset.category === this._category
      );
      let note = header?.querySelector<HTMLElement>(`.${NOTE_CLASS}`) ?? null;
      if (!header || !ours || !this._sentence) {
        note?.remove();
        section.classList.remove(USED_UP_CLASS);
        return;
      }
      if (note === null) {
        note = document.createElement('p');
        note.className = NOTE_CLASS;
        header.appendChild(note);
      }
      if (note.textContent !== this._sentence) {
        note.textContent = this._sentence;
      }
      section.classList.toggle(USED_UP_CLASS, this._usedUp);
    });
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    this._observer.disconnect();
    if (this._frame !== 0) {
      window.cancelAnimationFrame(this._frame);
    }
    this._sentence = '';
    this.apply();
  }

  private _schedule(): void {
    if (this._frame === 0 && !this._disposed) {
      this._frame = window.requestAnimationFrame(() => {
        this._frame = 0;
        this.apply();
      });
    }
  }

  private _observer: MutationObserver;
  private _category = '';
  private _sentence = '';
  private _usedUp = false;
  private _frame = 0;
  private _disposed = false;
}
