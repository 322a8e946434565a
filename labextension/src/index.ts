/**
 * jupyter-gpuburst: a sidebar panel and a status bar item that show where this notebook server
 * runs (origin cluster or a Liqo donor) and how its GPUs are used.
 */
import { ILayoutRestorer, JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { ILauncher } from '@jupyterlab/launcher';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStatusBar } from '@jupyterlab/statusbar';

import { GpuBurstClient } from './client';
import { CullingWatch, installGpuCulling } from './culling';
import { gpuIcon } from './icon';
import { installGpuKernels } from './kernels';
import { followGpuKernelStarts } from './kernelstart';
import { GpuKernelLauncher } from './launcher';
import { GpuBurstModel } from './model';
import { GpuBurstPanel } from './panel';
import { GpuBurstStatus } from './statusbar';
import { connectionLostPlugin, showStopNotice } from './stopnotice';

const PLUGIN_ID = 'jupyter-gpuburst:plugin';

export namespace CommandIDs {
  export const openPanel = 'gpuburst:open-panel';
}

/** Settings as typed by `schema/plugin.json`. */
interface ISettings {
  historyMinutes: number;
  area: 'left' | 'right';
  statusBarUtilization: boolean;
}

const DEFAULTS: ISettings = { historyMinutes: 5, area: 'right', statusBarUtilization: true };

async function loadSettings(
  registry: ISettingRegistry | null,
  onChange: (settings: ISettings) => void
): Promise<ISettings> {
  if (!registry) {
    return DEFAULTS;
  }
  try {
    const settings = await registry.load(PLUGIN_ID);
    const read = (): ISettings => ({ ...DEFAULTS, ...(settings.composite as Partial<ISettings>) });
    settings.changed.connect(() => onChange(read()));
    return read();
  } catch (reason) {
    console.warn('gpuburst: settings could not be loaded, using defaults', reason);
    return DEFAULTS;
  }
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'GPU panel and status bar item: where this server runs and how its GPUs are used.',
  autoStart: true,
  optional: [ILayoutRestorer, ICommandPalette, ISettingRegistry, IStatusBar, ILauncher],
  activate: async (
    app: JupyterFrontEnd,
    restorer: ILayoutRestorer | null,
    palette: ICommandPalette | null,
    registry: ISettingRegistry | null,
    statusBar: IStatusBar | null,
    launcher: ILauncher | null
  ): Promise<void> => {
    // before anything awaits: notebooks that open meanwhile are followed from their start
    let culling: CullingWatch | null = null;
    followGpuKernelStarts(app, () => void culling?.refresh());
    const client = new GpuBurstClient({ serverSettings: app.serviceManager.serverSettings });
    const model = new GpuBurstModel(DEFAULTS.historyMinutes);
    client.placementReceived.connect((_, placement) => model.setPlacement(placement));
    client.samplesReceived.connect((_, samples) => model.addSamples(samples));
    client.statusChanged.connect((_, status) => model.setConnection(status));
    // said at once, before JupyterLab finds the server gone (see stopnotice.ts)
    client.serverStopping.connect(() => showStopNotice());

    const panel = new GpuBurstPanel(model, client);
    let status: GpuBurstStatus | null = null;

    const apply = (settings: ISettings): void => {
      try {
        model.historyMinutes = settings.historyMinutes;
      } catch (reason) {
        console.warn('gpuburst: ignoring setting historyMinutes', reason);
      }
      if (status) {
        status.live = settings.statusBarUtilization;
        client.setDemand('statusbar', settings.statusBarUtilization);
      }
    };
    const settings = await loadSettings(registry, apply);

    app.commands.addCommand(CommandIDs.openPanel, {
      label: 'Show GPU Panel',
      caption: 'Where this server runs and how its GPUs are used',
      icon: gpuIcon,
      // Before the layout is restored, the restore would collapse the sidebar just opened: an
      // open asked for that early (a click, a notice's action) is carried out once it is done.
      execute: async () => {
        await app.restored;
        app.shell.activateById(panel.id);
      }
    });
    palette?.addItem({ command: CommandIDs.openPanel, category: 'GPU' });

    app.shell.add(panel, settings.area, { rank: 900 });
    restorer?.add(panel, panel.id);

    if (statusBar) {
      status = new GpuBurstStatus(model, () => {
        void app.commands.execute(CommandIDs.openPanel);
      });
      const item = status;
      // Offered once the layout is restored: the restore collapses a sidebar saved collapsed, so
      // a press on the item before it would open the panel only to hide it again. Not awaited
      // here: the restore itself waits for every plugin, this one included, to activate.
      void app.restored.then(() =>
        statusBar.registerStatusItem(PLUGIN_ID, {
          item,
          align: 'left',
          rank: 4,
          isActive: () => true
        })
      );
    }
    apply(settings);
    const gpuKernels = installGpuKernels(app, client, panel, statusBar);
    // a GPU kernel gone from the server's list may be the hub's stop: its reason, now
    let listed = new Set<string>();
    gpuKernels.changed.connect(() => {
      const now = new Set(gpuKernels.kernels.map(k => k.kernel_id));
      if ([...listed].some(id => !now.has(id))) {
        void culling?.refresh();
      }
      listed = now;
    });
    culling = installGpuCulling(client, panel, statusBar, () => void app.commands.execute(CommandIDs.openPanel));
    if (launcher) {
      new GpuKernelLauncher(app, client, launcher);
    }

    const refreshPlacement = (): Promise<void> =>
      client
        .fetchPlacement()
        .then(() => undefined)
        .catch(reason => model.setError(`Placement unavailable: ${String(reason?.message ?? reason)}`));
    await refreshPlacement();
    // The history fills the charts right away instead of after a few streamed samples.
    client.fetchHistory().catch(reason => console.warn('gpuburst: history unavailable', reason));
  }
};

export default [plugin, connectionLostPlugin];
