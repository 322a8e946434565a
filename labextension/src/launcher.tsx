/**
 * GPU kernels in the launcher, with live availability: a "GPU kernels" section whose cards say
 * how many of each kernel could start now ("2 free on origin, 5 on donors", "none free now").
 *
 * The figures come from `GET api/gpuburst/kernel-profiles` (the server asks the hub's kernel
 * API, which counts from the spawner's ledger). The launcher renders again only when its items
 * change, so the cards are registered again whenever a figure changes. A card opens a notebook
 * with that GPU kernel, as the Notebook section's card of the same kernel does. In a server with
 * GPUs of its own the section's title says its kernels take GPUs besides those.
 *
 * Each GPU kernel is offered there only: the Notebook and Console sections, which JupyterLab
 * fills with every kernelspec, keep the server's own kernels (the kernel picker still lists all).
 *
 * With a GPU-hour budget, the hub's sentence on what is left stands under the section's title;
 * with it used up, each card says so and a click tells why instead of starting a kernel the hub
 * would refuse. While a lab of a class the student is not in holds GPUs of these kernels, the
 * hub's sentence saying so ("4 GPUs are held for the lab ML-101 until 10:30.") stands there too,
 * as on the spawn form. With no GPU free for a card and a hub that refuses rather than queues, a click
 * says so first and starts the kernel only if the student still wants to try (the figures are
 * up to ten seconds old).
 */
import { JupyterFrontEnd } from '@jupyterlab/application';
import { Dialog, showDialog } from '@jupyterlab/apputils';
import { ILauncher } from '@jupyterlab/launcher';
import { IDisposable } from '@lumino/disposable';

import { GpuBurstClient } from './client';
import { gpuIcon } from './icon';
import { LauncherNote } from './launchernote';
import {
  ILauncherBudget,
  isGpuKernelName,
  IServerGpus,
  launcherBudgetText,
  launcherCaption,
  launcherCategory,
  launcherHeldText,
  launcherLabel,
  noneFree
} from './kernelformat';
import { IKernelProfile, IPlacement, IProfilesReply } from './types';

export const CREATE_COMMAND = 'gpuburst:new-gpu-kernel-notebook';
// right after the Notebook section (0), before Console (20): the GPU kernels are notebooks too
const CATEGORY_RANK = 10;
const REFRESH_MS = 10000;
// the right-sizing note under the GPU kernels heading (launchernote.ts)
export const SUGGESTION_NOTE = 'suggestion';
// the GPU-hour budget's sentence; used up, under a note id of its own that dims the cards (base.css)
export const BUDGET_NOTE = 'budget';
export const BUDGET_USED_UP_NOTE = 'budget-used-up';
// GPUs a lab of another class holds now
export const HELD_NOTE = 'held';


/** Whether a launcher card is JupyterLab's own Notebook or Console card of a GPU kernel. */
export function isPlainGpuKernelCard(item: ILauncher.IItemOptions): boolean {
  if (item.command === CREATE_COMMAND) {
    return false;
  }
  const args = (item.args ?? {}) as { kernelName?: unknown; kernelPreference?: { name?: unknown } };
  const name = args.kernelName ?? args.kernelPreference?.name;
  return typeof name === 'string' && isGpuKernelName(name);
}

/**
 * Leave GPU kernels out of the Notebook and Console sections. JupyterLab adds a card per
 * kernelspec there and has no filter, so the launcher's model is read through one: the cards
 * stay registered (their owners dispose them as usual), the launcher just does not show them.
 */
export function offerGpuKernelsOnce(launcher: ILauncher): void {
  const model = launcher as ILauncher & { items?: () => IterableIterator<ILauncher.IItemOptions> };
  if (typeof model.items !== 'function') {
    return;
  }
  const items = model.items.bind(model);
  model.items = () => Array.from(items()).filter(item => !isPlainGpuKernelCard(item))[Symbol.iterator]();
}

export class GpuKernelLauncher implements IDisposable {
  constructor(
    private readonly _app: JupyterFrontEnd,
    private readonly _client: GpuBurstClient,
    private readonly _launcher: ILauncher
  ) {
    this._suggestionNote = new LauncherNote(this._app.shell.node, SUGGESTION_NOTE);
    offerGpuKernelsOnce(this._launcher);
    this._app.commands.addCommand(CREATE_COMMAND, {
      label: args => this._label(String(args['kernelName'] ?? '')),
      caption: args => this._caption(String(args['kernelName'] ?? '')),
      icon: gpuIcon,
      execute: args => {
        if (this._budget.budget_used_up) {
          // the hub refuses every GPU kernel now: say why rather than open a notebook that fails
          return showDialog({
            title: 'No GPU kernel',
            body: this._budget.budget,
            buttons: [Dialog.okButton()]
          });
        }
        return this._create(String(args['kernelName'] ?? ''), args['cwd']);
      }
    });
    this._budgetNote = new LauncherNote(this._app.shell.node, BUDGET_NOTE);
    this._usedUpNote = new LauncherNote(this._app.shell.node, BUDGET_USED_UP_NOTE);
    this._heldNote = new LauncherNote(this._app.shell.node, HELD_NOTE);
    this._client.placementReceived.connect(this._onPlacement, this);
    void this.refresh();
    this._timer = window.setInterval(() => {
      if (document.visibilityState === 'visible') {
        void this.refresh();
      }
    }, REFRESH_MS);
  }

  get isDisposed(): boolean {
    return this._timer === null;
  }

  async refresh(): Promise<void> {
    let reply: IProfilesReply;
    try {
      reply = await this._client.getJSON<IProfilesReply>('kernel-profiles');
    } catch {
      // a server without kernel mode, or a blip: keep what the cards say until the next try
      return;
    }
    this._showSuggestion(reply.suggestion ?? '');
    const profiles = reply.profiles ?? [];
    const budget = { budget: reply.budget ?? '', budget_used_up: reply.budget_used_up === true };
    const queues = reply.queues === true;
    const held = launcherHeldText(reply.held);
    const key = JSON.stringify([profiles, budget, queues, held]);
    if (key === this._shown) {
      return;
    }
    this._shown = key;
    this._queues = queues;
    this._profiles = new Map(profiles.map(p => [p.kernel_name, p]));
    this._budget = budget;
    this._held = held;
    this._app.commands.notifyCommandChanged(CREATE_COMMAND);
    this._register();
  }

  private _onPlacement(_: GpuBurstClient, placement: IPlacement): void {
    const before = launcherCategory(this._server);
    this._server = { gpu_count: placement.gpu_count, gpu_label: placement.gpu_label ?? null };
    if (launcherCategory(this._server) !== before) {
      this._register();
      this._showSuggestion(this._suggestion);
    }
  }

  /** The hub's right-sizing sentence, under the GPU kernels heading ('' removes it). */
  private _showSuggestion(text: string): void {
    this._suggestion = text;
    this._suggestionNote.show(launcherCategory(this._server), text);
  }

  /** The launcher re-renders when its items change: register the cards again. */
  private _register(): void {
    this._items.forEach(item => item.dispose());
    const category = launcherCategory(this._server);
    this._items = [...this._profiles.values()].map((p, rank) =>
      this._launcher.add({
        command: CREATE_COMMAND,
        args: { kernelName: p.kernel_name },
        category,
        categoryRank: CATEGORY_RANK,
        rank
      })
    );
    const budget = launcherBudgetText(this._budget);
    this._budgetNote.show(category, this._budget.budget_used_up ? '' : budget);
    this._usedUpNote.show(category, this._budget.budget_used_up ? budget : '');
    this._heldNote.show(category, this._held);
  }

  dispose(): void {
    this._client.placementReceived.disconnect(this._onPlacement, this);
    if (this._timer !== null) {
      window.clearInterval(this._timer);
      this._timer = null;
    }
    this._items.forEach(item => item.dispose());
    this._items = [];
    this._suggestionNote.dispose();
    this._budgetNote.dispose();
    this._usedUpNote.dispose();
    this._heldNote.dispose();
  }

  private async _create(kernelName: string, cwd: unknown): Promise<unknown> {
    const profile = this._profiles.get(kernelName);
    if (profile && !this._queues && noneFree(profile.available)) {
      const answer = await showDialog({
        title: 'No GPU free now',
        body: `Every GPU a ${profile.display_name} kernel can use is taken, so the hub would refuse it now. Try again in a few minutes.`,
        buttons: [Dialog.cancelButton(), Dialog.okButton({ label: 'Try anyway' })]
      });
      if (!answer.button.accept) {
        return undefined;
      }
    }
    return this._app.commands.execute('notebook:create-new', { kernelName, cwd: cwd as string | undefined });
  }

  private _label(kernelName: string): string {
    const profile = this._profiles.get(kernelName);
    if (!profile) {
      return 'GPU kernel';
    }
    return launcherLabel(profile.display_name, profile.available, this._budget);
  }

  private _caption(kernelName: string): string {
    const profile = this._profiles.get(kernelName);
    if (!profile) {
      return '';
    }
    return launcherCaption(profile.display_name, profile.available, this._server, this._budget, this._queues);
  }

  private _profiles = new Map<string, IKernelProfile>();
  private _suggestion = '';
  private readonly _suggestionNote: LauncherNote;
  private _server: IServerGpus | null = null;
  private _items: IDisposable[] = [];
  private _shown = '';
  private _queues = false;
  private _budget: ILauncherBudget = { budget: '', budget_used_up: false };
  private readonly _budgetNote: LauncherNote;
  private readonly _usedUpNote: LauncherNote;
  private _held = '';
  private readonly _heldNote: LauncherNote;
  private _timer: number | null;
}
