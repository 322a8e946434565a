/**
 * The notice that the hub is stopping this server (culling, a budget, an admin), and JupyterLab's
 * connection-lost dialog, which would cover it.
 *
 * The server's event stream says `stopping` before it goes, and the notice says so at once, with
 * a link to the server's page at the hub (why, and Start again). Seconds later JupyterLab's
 * polls find the server gone and JupyterLab on a hub shows "Server unavailable or unreachable …
 * Restart", a modal over the notice, whose Restart opens the spawn page in another tab without
 * the reason. So this extension provides JupyterLab's connection-lost service itself (and
 * package.json disables the hub extension's provider): while the notice is up the loss is what
 * the notice already says, and no dialog comes; otherwise it is the hub extension's dialog, as
 * before.
 */
import {
  ConnectionLost,
  IConnectionLost,
  JupyterFrontEnd,
  JupyterFrontEndPlugin,
  JupyterLab
} from '@jupyterlab/application';
import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';
import { PageConfig } from '@jupyterlab/coreutils';
import { ITranslator } from '@jupyterlab/translation';

import { stoppingNotice } from './format';

/** The hub extension's command that opens the server's spawn page (it stays enabled). */
const HUB_RESTART = 'hub:restart';

/** The stop notice, while it is shown: its id among JupyterLab's notifications. */
let shownId: string | null = null;

/** Says that the server is stopping, once, until the student closes the notice. */
export function showStopNotice(): void {
  if (isStopNoticeUp()) {
    return;
  }
  const notice = stoppingNotice(PageConfig.getOption('hubPrefix'), PageConfig.getOption('hubUser'), PageConfig.getOption('hubServerName'));
  const href = notice.href;
  shownId = Notification.warning(notice.text, {
    autoClose: false,
    actions: href ? [{ label: 'Why?', callback: () => window.location.assign(href) }] : []
  });
}

/** Whether the stop notice is on the page now. */
export function isStopNoticeUp(): boolean {
  return shownId !== null && Notification.manager.has(shownId);
}

/** JupyterLab's connection-lost service: silent while the stop notice says it all. */
export const connectionLostPlugin: JupyterFrontEndPlugin<IConnectionLost> = {
  id: 'jupyter-gpuburst:connectionlost',
  description: "Tells that the connection to the server is lost, unless the notice that the hub stops it says so already.",
  autoStart: true,
  requires: [JupyterFrontEnd.IPaths, ITranslator],
  optional: [JupyterLab.IInfo],
  provides: IConnectionLost,
  activate: (app: JupyterFrontEnd, paths: JupyterFrontEnd.IPaths, translator: ITranslator, info: JupyterLab.IInfo | null): IConnectionLost => {
    const fallback: IConnectionLost = async (manager, error) => {
      if (!isStopNoticeUp()) {
        await ConnectionLost(manager, error, translator);
      }
    };
    if (!paths.urls.hubPrefix) {
      return fallback;
    }
    const trans = translator.load('jupyterlab');
    let showing = false;
    return async () => {
      if (showing || isStopNoticeUp()) {
        return;
      }
      showing = true;
      if (info) {
        info.isConnected = false;
      }
      // the hub extension's own dialog, word for word (its translations apply)
      const result = await showDialog({
        title: trans.__('Server unavailable or unreachable'),
        body: trans.__('Your server at %1 is not running.\nWould you like to restart it?', paths.urls.base),
        buttons: [Dialog.okButton({ label: trans.__('Restart') }), Dialog.cancelButton({ label: trans.__('Dismiss') })]
      });
      if (info) {
        info.isConnected = true;
      }
      showing = false;
      if (result.button.accept && app.commands.hasCommand(HUB_RESTART)) {
        await app.commands.execute(HUB_RESTART);
      }
    };
  }
};
