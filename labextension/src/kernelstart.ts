/**
 * A GPU kernel's start as a student meets it: a cell run while the kernel starts waits for it,
 * and if the kernel cannot start, each waiting cell and a dialog say why.
 *
 * The waiting itself is JupyterLab's: the server makes GPU kernels pending kernels, so a
 * notebook has its kernel at once and its `KernelConnection` queues an execute request until the
 * kernel's websocket opens (jupyter_server opens it when the kernel is ready). When the start
 * fails, jupyter_server closes that websocket and the kernel's model says it is dead and why
 * (the hub's reason); JupyterLab then cancels the queued requests, which would leave each cell
 * an unexplained `[ ]`. Here, the reason is written into those cells as an error output
 * (JupyterLab's own "Error Starting Kernel" dialog shows it too, from the same model).
 *
 * A kernel refused at once can die before JupyterLab has finished setting its session up: the
 * notebook names the session after its file (two requests) before it listens to the kernel, so
 * on a loaded server the kernel's death comes first and JupyterLab says nothing at all. Such a
 * kernel is dead when the notebook first hands it over; its dialog is shown here.
 */
import { JupyterFrontEnd } from '@jupyterlab/application';
import { Dialog, showDialog } from '@jupyterlab/apputils';
import { Kernel, KernelAPI, ServerConnection } from '@jupyterlab/services';
import { Widget } from '@lumino/widgets';

import { isGpuKernelName, startFailedReason } from './kernelformat';
import { sayGpuKernelStarting } from './kernelstatus';

/** The ename of the error output a waiting cell gets when its GPU kernel cannot start. */
export const START_FAILED = 'GPU kernel not started';

/** What this module needs of a code cell (notebook or console), without depending on either. */
interface ICellLike {
  readonly isDisposed?: boolean;
  model: {
    type: string;
    executionState?: string;
    outputs: { add(output: Record<string, unknown>): number };
    sharedModel?: { getSource(): string };
  };
}

/** What this module needs of a console: its cells, its prompt, and running code in a new cell. */
interface IConsoleLike {
  readonly isDisposed?: boolean;
  cells?: Iterable<ICellLike>;
  promptCell?: ICellLike | null;
  inject?(code: string): Promise<void>;
}

interface ISessionContextLike {
  kernelChanged: {
    connect(fn: (sender: unknown, args: { newValue: Kernel.IKernelConnection | null; oldValue?: Kernel.IKernelConnection | null }) => void): void;
  };
  session?: { kernel?: Kernel.IKernelConnection | null } | null;
  isReady: boolean;
  isDisposed: boolean;
  ready: Promise<void>;
  hasNoKernel: boolean;
  startKernel(): Promise<boolean>;
  shutdown(): Promise<void>;
}

/** A notebook panel or a console panel: the session and the cells it runs. */
interface IRunsCells {
  sessionContext?: ISessionContextLike;
  content?: { widgets?: readonly ICellLike[] };
  console?: IConsoleLike;
  context?: { ready: Promise<void> };
}

function runningCells(widget: IRunsCells): ICellLike[] {
  const cells: ICellLike[] = [];
  // a console panel's content is the panel around the console, not its cells
  const all = widget.console ? Array.from(widget.console.cells ?? []) : (widget.content?.widgets ?? []);
  for (const cell of all) {
    if (cell.model?.type === 'code' && cell.model.executionState === 'running') {
      cells.push(cell);
    }
  }
  return cells;
}

/** JupyterLab's `CodeCell` class, as its namespace function `execute` hangs on it. */
interface ICodeCellClass {
  execute?: (cell: ICellLike, sessionContext: ISessionContextLike, ...rest: unknown[]) => Promise<unknown>;
}

const patched = new WeakSet<object>();
/** Each followed console, by its session context (what a run is given to run in). */
const consoles = new WeakMap<object, IConsoleLike>();

/**
 * Make a run wait for the session being made. Between a notebook's (or console's) opening and
 * its session's answer there is no kernel at all, not even a pending one, and JupyterLab's
 * `CodeCell.execute` drops a run then (it clears the cell and returns). Notebooks and consoles
 * call it through the class, so the class's function is wrapped: while the session context is
 * not ready yet, the cell shows `[*]` and the run waits for it, then goes on as JupyterLab's.
 */
function waitForTheSession(cell: ICellLike): void {
  let cls = Object.getPrototypeOf(cell)?.constructor as (ICodeCellClass & object) | undefined;
  while (cls && !Object.prototype.hasOwnProperty.call(cls, 'execute')) {
    cls = Object.getPrototypeOf(cls) as (ICodeCellClass & object) | undefined;
  }
  if (!cls || typeof cls.execute !== 'function' || patched.has(cls)) {
    return;
  }
  patched.add(cls);
  const execute = cls.execute;
  cls.execute = async (target, sessionContext, ...rest) => {
    if (sessionContext && !sessionContext.session?.kernel && !sessionContext.isReady && !sessionContext.isDisposed) {
      target.model.executionState = 'running';
      const codeConsole = consoles.get(sessionContext);
      if (codeConsole) {
        void runInConsoleOnceReady(codeConsole, target, sessionContext, () => execute(target, sessionContext, ...rest));
        return undefined;
      }
      await sessionContext.ready;
    }
    return execute(target, sessionContext, ...rest);
  };
}

/**
 * A console clears its cells whenever its kernel changes, and the first kernel's arrival is
 * such a change: a cell run before the session was made would vanish with its code. So the
 * console's run ends at once (the cell stays, `[*]`, until the kernel comes and the console
 * clears it), and once the session is there the code runs again in a new cell, after the
 * kernel's banner, as if typed then. A console that kept the cell runs it in place.
 */
async function runInConsoleOnceReady(
  codeConsole: IConsoleLike,
  cell: ICellLike,
  sessionContext: ISessionContextLike,
  runInPlace: () => Promise<unknown>
): Promise<void> {
  const code = cell.model.sharedModel?.getSource() ?? '';
  await sessionContext.ready;
  if (codeConsole.isDisposed || sessionContext.isDisposed) {
    return;
  }
  if (!cell.isDisposed) {
    await runInPlace();
  } else if (code.trim() && codeConsole.inject) {
    await codeConsole.inject(code);
  }
}

/**
 * One kernel start at a time per notebook (or console). A notebook starts its kernel once its
 * file has loaded, after reading the server's sessions; a cell run in between finds no kernel
 * and JupyterLab starts one for it, and then the notebook's own start comes: two starts of
 * one session, and JupyterLab shuts down the first one's, with the run (`[ ]`, never run). So
 * a start asked while another is under way waits for it, and starts a kernel only if that
 * left none.
 */
function startOnce(session: ISessionContextLike): void {
  const start = session.startKernel.bind(session);
  let starting: Promise<boolean> | null = null;
  session.startKernel = async () => {
    if (starting) {
      // a start left to the student's choice is theirs to make once, in one dialog: the
      // first caller's
      const selecting = await starting.catch(() => true);
      if (!session.hasNoKernel || session.isDisposed || selecting) {
        return false;
      }
    }
    const mine = start();
    starting = mine;
    try {
      return await mine;
    } finally {
      if (starting === mine) {
        starting = null;
      }
    }
  };
}

/** The error output a waiting cell gets: the reason as the hub gave it, nothing else. */
export function startFailedOutput(reason: string): Record<string, unknown> {
  const said = startFailedReason(reason);
  // the traceback is what JupyterLab shows of an error: here, the sentence alone
  return { output_type: 'error', ename: START_FAILED, evalue: said, traceback: [`${START_FAILED}: ${said}`] };
}

/** Has the server drop the dead GPU kernel of a notebook (or console). */
type Forget = (widget: IRunsCells) => Promise<void>;

/** JupyterLab's own dialog for a kernel that could not start, with the same title and body. */
function showStartError(reason: string): void {
  const body = document.createElement('div');
  body.appendChild(document.createElement('pre')).textContent = reason;
  void showDialog({ title: 'Error Starting Kernel', body: new Widget({ node: body }), buttons: [Dialog.okButton()] });
}

/** Why a dead kernel died, as the server says: a kernel the list of running kernels ended
 * (rather than its own websocket) never read its model. */
async function deathReason(kernel: Kernel.IKernelConnection, settings: ServerConnection.ISettings): Promise<string> {
  if (kernel.model.reason) {
    return kernel.model.reason;
  }
  try {
    return (await KernelAPI.getKernelModel(kernel.id, settings))?.reason ?? '';
  } catch {
    return '';
  }
}

/**
 * Follows one notebook's or console's GPU kernels from their start. ``forget`` is called with
 * a GPU kernel that died (its start failed, or it died for good): its pod is gone and it can
 * never run again, so the server should drop it rather than list it as an existing kernel.
 */
function follow(
  widget: IRunsCells,
  reported: WeakSet<object>,
  onDead: () => void,
  forget: Forget,
  settings: ServerConnection.ISettings
): void {
  const session = widget.sessionContext;
  if (!session) {
    return;
  }
  if (widget.console) {
    consoles.set(session, widget.console);
  }
  startOnce(session);
  sayGpuKernelStarting(session);
  /** ``unheard``: it died before JupyterLab listened, so JupyterLab showed no dialog. */
  const died = (reason: string, unheard: boolean, waiting: ICellLike[]): void => {
    // the hub may have stopped it (culling, an admin): its word on why should come now, not
    // at the culling state's next poll
    onDead();
    if (unheard && reason) {
      showStartError(reason);
    }
    window.setTimeout(() => {
      for (const cell of reason ? waiting : []) {
        cell.model.outputs.add(startFailedOutput(reason));
      }
      // JupyterLab read the reason when the kernel died (its dialog says it); what is left
      // is a dead kernel that the kernel picker would offer to connect to (preselected for
      // this notebook), so the server forgets it and the next run starts a new GPU kernel
      void forget(widget).catch(reason => console.warn('gpuburst: a dead GPU kernel could not be shut down', reason));
    }, 0);
  };
  const watch = (kernel: Kernel.IKernelConnection | null | undefined): void => {
    if (!kernel || !isGpuKernelName(kernel.name) || reported.has(kernel)) {
      return;
    }
    if (kernel.status === 'dead') {
      reported.add(kernel);
      // the cells that waited for the session go on to fail in JupyterLab's hands now
      const waiting = runningCells(widget);
      void deathReason(kernel, settings).then(reason => died(reason, true, waiting));
      return;
    }
    kernel.statusChanged.connect((_, status) => {
      if (status !== 'dead' || reported.has(kernel)) {
        return;
      }
      reported.add(kernel);
      // the cells still wait now; JupyterLab cancels their requests right after this signal
      died(kernel.model.reason ?? '', false, runningCells(widget));
    });
  };
  // the first code cell tells JupyterLab's CodeCell class (a notebook's once its model loaded)
  const patch = (): void => {
    const cell = widget.console?.promptCell ?? widget.content?.widgets?.find(c => c.model?.type === 'code');
    if (cell) {
      waitForTheSession(cell);
    }
  };
  patch();
  void widget.context?.ready.then(patch);
  session.kernelChanged.connect((_, change) => {
    patch();
    watch(change.newValue);
    if (!change.newValue && change.oldValue && isGpuKernelName(change.oldValue.name)) {
      onDead(); // shut down by its server: perhaps the hub's stop, whose reason should show now
    }
  });
  watch(session.session?.kernel);
}

/** Every notebook and console, as they open; ``onDead`` is called when one's GPU kernel dies. */
export function followGpuKernelStarts(app: JupyterFrontEnd, onDead: () => void = () => undefined): void {
  const followed = new WeakSet<object>();
  const reported = new WeakSet<object>();
  // JupyterLab's own Shut Down Kernel: the server drops the dead kernel (one whose start
  // failed at once) and its session, the notebook reads "No Kernel", and its next run starts
  // its GPU kernel anew. Not a console's: a console clears its cells when its session goes,
  // and the reason with them; its dead kernel stays listed until the console is closed.
  const forget: Forget = async widget => {
    if (!widget.console) {
      // The kernel picker offers what the kernel manager last listed, read once as it opens,
      // and the toolbar reads "No Kernel" as soon as the session's shutdown begins: the dead
      // kernel leaves the server and that list first (the manager's shutdown lists again), or
      // a student who opens the picker at once would be offered it.
      const dead = widget.sessionContext?.session?.kernel?.id;
      if (dead) {
        await app.serviceManager.kernels
          .shutdown(dead)
          .catch(reason => console.warn('gpuburst: a dead GPU kernel could not be shut down', reason));
      }
      // its session, whose kernel the server no longer has (a 404 that JupyterLab accepts)
      await widget.sessionContext?.shutdown();
    }
  };
  const add = (widget: unknown): void => {
    if (widget && typeof widget === 'object' && !followed.has(widget) && (widget as IRunsCells).sessionContext) {
      followed.add(widget);
      follow(widget as IRunsCells, reported, onDead, forget, app.serviceManager.serverSettings);
    }
  };
  app.docRegistry.addWidgetExtension('Notebook', {
    createNew: panel => {
      add(panel);
    }
  });
  // consoles are no documents: take each as it becomes current (a console opens focused)
  app.shell.currentChanged?.connect((_, change) => add(change.newValue));
}
