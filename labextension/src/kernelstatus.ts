/**
 * JupyterLab's own kernel status (the status bar's "Python 3 (1 GPU) | …" and the notebook
 * toolbar's indicator) while a GPU kernel starts.
 *
 * A GPU kernel is a pending kernel: jupyter_server opens its websocket only once its pod
 * answers, tens of seconds later (minutes on a donor, behind an image pull). Until then
 * JupyterLab reads the websocket's state ("Connecting", as if the server were hard to reach),
 * and once it opens, the kernel's state before its first message ("Unknown"). Both mean that
 * the kernel is starting, and the session's display status says so; the GPU kernel status
 * item beside it says where. A connection lost later, once the kernel had answered, is
 * JupyterLab's to name.
 */
import { gpuKernelDisplayStatus, IKernelLike } from './kernelformat';

/** What this module needs of a session context (notebook or console). */
interface IDisplayedSession {
  session?: { kernel?: IKernelLike | null } | null;
  connectionStatusChanged?: { connect(fn: (sender: unknown, status: string) => void): void };
}

/** Has ``sessionContext`` (a notebook's or console's) say 'starting' while its GPU kernel starts. */
export function sayGpuKernelStarting(sessionContext: object): void {
  const context = sessionContext as IDisplayedSession;
  let proto: object | null = Object.getPrototypeOf(context);
  let getter: (() => string) | undefined;
  while (proto && !getter) {
    getter = Object.getOwnPropertyDescriptor(proto, 'kernelDisplayStatus')?.get;
    proto = Object.getPrototypeOf(proto);
  }
  if (!getter || Object.prototype.hasOwnProperty.call(context, 'kernelDisplayStatus')) {
    return; // not JupyterLab's SessionContext, or followed already
  }
  const read = getter;
  const answered = new WeakSet<object>();
  const note = (): void => {
    const kernel = context.session?.kernel;
    if (kernel?.connectionStatus === 'connected') {
      answered.add(kernel);
    }
  };
  context.connectionStatusChanged?.connect(note);
  Object.defineProperty(context, 'kernelDisplayStatus', {
    configurable: true,
    get(): string {
      note();
      const kernel = context.session?.kernel;
      return gpuKernelDisplayStatus(read.call(context), kernel, !!kernel && answered.has(kernel));
    }
  });
}
