/**
 * nsight-magic in JupyterLab: profile the active cell with Nsight Systems or Nsight Compute from the notebook
 * toolbar, the cell's context menu or the command palette (the cell's text is left as it is: the magic line is
 * added for that one execution), and browse the profiles saved beside the notebook in a sidebar.
 *
 * The profiling itself is the IPython extension's (%%nsys / %%ncu): its live status line shows the phase and the
 * elapsed time in the cell's output, the cell returns when its code has finished and the profile fills its output
 * in place once loaded, and the notebook's Stop button interrupts either stage cleanly.
 */
import {
  ILabShell,
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import {
  Dialog,
  ICommandPalette,
  MainAreaWidget,
  showDialog,
  showErrorMessage,
  ToolbarButton
} from '@jupyterlab/apputils';
import { CodeCell } from '@jupyterlab/cells';
import { INotebookTracker, NotebookActions, NotebookPanel } from '@jupyterlab/notebook';
import { OutputArea } from '@jupyterlab/outputarea';
import { IRenderMimeRegistry } from '@jupyterlab/rendermime';
import { Contents } from '@jupyterlab/services';
import { LabIcon } from '@jupyterlab/ui-components';
import { Menu } from '@lumino/widgets';

import { LiveRenderer, settleOnStop, STATUS_MIME, StatusRenderer, VIEW_MIME, ViewRenderer } from './output';
import { dirname, IProfile, joinPath, PROFILES_DIR, ProfilesPanel, stateWords } from './profiles';
import { addStyles } from './style';
import { ProfileViewer } from './viewer';

const ICON_SVG =
  '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24" width="16" height="16">' +
  '<g class="jp-icon3" fill="#616161"><rect x="2" y="4" width="9" height="3" rx="1"/>' +
  '<rect x="6" y="10" width="12" height="3" rx="1"/><rect x="4" y="16" width="6" height="3" rx="1"/>' +
  '<rect x="12" y="16" width="9" height="3" rx="1"/></g></svg>';
export const nsightIcon = new LabIcon({ name: 'nsight-magic:icon', svgstr: ICON_SVG });

const CMD = {
  nsys: 'nsight-magic:profile-nsys',
  ncu: 'nsight-magic:profile-ncu',
  insert: 'nsight-magic:insert-nsys',
  openLast: 'nsight-magic:open-last',
  open: 'nsight-magic:open-profile',
  load: 'nsight-magic:insert-load',
  reveal: 'nsight-magic:reveal-profile',
  remove: 'nsight-magic:delete-profile',
  refresh: 'nsight-magic:refresh-profiles'
};

const MAGIC_FIRST_LINE = /^\s*%%(nsys|ncu)\b/;
const WIDGET_MIME = 'application/vnd.jupyter.widget-view+json';

/**
 * Our renderers in a notebook: the view (static, upgraded to its live widget) and the loading line.  The live
 * widget comes from the notebook's ipywidgets renderer once its widget manager is there (ipywidgets swaps the
 * panel's factory when the kernel is ready); a notebook without a kernel never gets one and keeps static views.
 */
function addRenderers(panel: NotebookPanel, contents: Contents.IManager): void {
  const rm = panel.content.rendermime;
  const first = rm.getFactory(WIDGET_MIME);
  const live: LiveRenderer = async () => {
    for (let i = 0; i < 150 && !panel.isDisposed; i++) {
      const f = rm.getFactory(WIDGET_MIME);
      if (f && f !== first) {
        return rm.createRenderer(WIDGET_MIME);
      }
      await new Promise(r => setTimeout(r, 200));
    }
    return null;
  };
  rm.addFactory({ safe: false, mimeTypes: [VIEW_MIME], createRenderer: o => new ViewRenderer(o, live) }, 0);
  rm.addFactory({ safe: true, mimeTypes: [STATUS_MIME], createRenderer: () => new StatusRenderer(panel, contents) }, 0);
  settleOnStop(panel);
}

/** A cell below the active one that runs `code` (the sidebar's compare), the IPython extension loaded first. */
async function runBelow(panel: NotebookPanel, code: string): Promise<void> {
  await panel.sessionContext.ready;
  const kernel = panel.sessionContext.session?.kernel;
  if (kernel) {
    // once per kernel (a no-op when loaded already); silent: no output, no history
    await kernel.requestExecute({ code: '%load_ext nsight_magic', silent: true, store_history: false }).done;
  }
  NotebookActions.insertBelow(panel.content);
  const cell = panel.content.activeCell;
  if (cell) {
    cell.model.sharedModel.setSource(code);
    await NotebookActions.run(panel.content, panel.sessionContext);
  }
}
/** Display metadata of the update that draws a profile loaded in the background (nsight_magic/views/output.py). */
const READY_KEY = 'application/vnd.nsight-magic+json';

/** The code sent for one profiled execution: the cell's text under %%nsys / %%ncu (kept if already there). */
export function profiledCode(source: string, magic: 'nsys' | 'ncu'): string {
  // --cell-line 1: the editor numbers the cell's own first line 1 (the Lines tab uses the editor's numbers)
  return MAGIC_FIRST_LINE.test(source) ? source : `%%${magic}${magic === 'nsys' ? ' --cell-line 1' : ''}\n${source}`;
}

/** Run the active code cell under the magic, output in the cell's own output area, the cell's text untouched. */
async function profileActiveCell(panel: NotebookPanel, magic: 'nsys' | 'ncu'): Promise<boolean> {
  const cell = panel.content.activeCell;
  if (!cell || cell.model.type !== 'code') {
    await showErrorMessage('Nsight profiling', 'Select a code cell to profile.');
    return false;
  }
  const codeCell = cell as CodeCell;
  const ctx = panel.sessionContext;
  await ctx.ready;
  const kernel = ctx.session?.kernel;
  if (!kernel) {
    await showErrorMessage('Nsight profiling', 'This notebook has no running kernel: start one first.');
    return false;
  }
  // The IPython extension, once per kernel (a no-op when loaded already); silent: no output, no history.
  await kernel.requestExecute({ code: '%load_ext nsight_magic', silent: true, store_history: false }).done;
  const source = codeCell.model.sharedModel.getSource();
  codeCell.model.sharedModel.transact(() => {
    codeCell.model.clearExecution();
  });
  codeCell.setPrompt('*');
  try {
    const reply = await OutputArea.execute(profiledCode(source, magic), codeCell.outputArea, ctx, {
      cellId: codeCell.model.id,
      deletedCells: [],
      recordTiming: false
    });
    const count = reply?.content.execution_count;
    codeCell.model.executionCount = typeof count === 'number' ? count : null;
    return reply?.content.status === 'ok';
  } catch (reason) {
    codeCell.setPrompt('');
    // a restarted or dead kernel: the output area already says what happened
    console.warn('nsight-magic: the profiled execution did not finish', reason);
    return false;
  }
}

function insertMagic(panel: NotebookPanel): void {
  const cell = panel.content.activeCell;
  if (!cell || cell.model.type !== 'code') {
    return;
  }
  const source = cell.model.sharedModel.getSource();
  if (!MAGIC_FIRST_LINE.test(source)) {
    cell.model.sharedModel.setSource(`%%nsys\n${source}`);
  }
}

async function deleteRecursively(contents: Contents.IManager, path: string): Promise<void> {
  const model = await contents.get(path, { content: true });
  if (model.type === 'directory') {
    for (const child of (model.content as Contents.IModel[]) || []) {
      await deleteRecursively(contents, child.path);
    }
  }
  await contents.delete(path);
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'nsight-magic:plugin',
  description: 'Profile cells with Nsight Systems / Nsight Compute; browse saved profiles.',
  autoStart: true,
  requires: [INotebookTracker],
  optional: [ICommandPalette, ILayoutRestorer, ILabShell, IRenderMimeRegistry],
  activate: (
    app: JupyterFrontEnd,
    tracker: INotebookTracker,
    palette: ICommandPalette | null,
    restorer: ILayoutRestorer | null,
    labShell: ILabShell | null,
    rendermime: IRenderMimeRegistry | null
  ) => {
    addStyles();
    const { commands, serviceManager } = app;
    const contents = serviceManager.contents;
    let menuTarget: IProfile | null = null;
    if (rendermime) {
      // outside notebooks (an output view, a console): the static view and the line, no live part
      rendermime.addFactory({ safe: false, mimeTypes: [VIEW_MIME], createRenderer: o => new ViewRenderer(o, null) }, 0);
      rendermime.addFactory(
        { safe: true, mimeTypes: [STATUS_MIME], createRenderer: () => new StatusRenderer(null, contents) },
        0
      );
    }
    tracker.widgetAdded.connect((_, panel) => addRenderers(panel, contents));

    const panelDir = (): string => (tracker.currentWidget ? dirname(tracker.currentWidget.context.path) : '');

    const openProfile = async (p: IProfile): Promise<void> => {
      const why = stateWords(p).why;
      if (p.state !== 'finished' || !p.hasView) {
        await showErrorMessage('Nsight profile', why || `${p.name} cannot be opened here.`);
        return;
      }
      const file = await contents.get(joinPath(p.path, 'view.html'), { content: true, format: 'text' });
      const viewer = new ProfileViewer(p.name);
      viewer.setPage(String(file.content));
      const main = new MainAreaWidget({ content: viewer });
      main.id = `nsight-magic-view-${p.name}`;
      main.title.label = p.name;
      main.title.icon = nsightIcon;
      main.title.closable = true;
      app.shell.add(main, 'main');
      app.shell.activateById(main.id);
    };

    const menu = new Menu({ commands });
    menu.addItem({ command: CMD.open });
    menu.addItem({ command: CMD.load });
    menu.addItem({ command: CMD.reveal });
    menu.addItem({ type: 'separator' });
    menu.addItem({ command: CMD.remove });

    // a profile's path as the notebook's kernel reads it: relative to the notebook's folder
    const relative = (p: IProfile): string => p.path.slice(panelDir() ? panelDir().length + 1 : 0);
    const sidebar = new ProfilesPanel(serviceManager, {
      open: p => void openProfile(p),
      contextMenu: (p, event) => {
        menuTarget = p;
        menu.open(event.clientX, event.clientY);
      },
      compare: (a, b) => {
        const panel = tracker.currentWidget;
        if (!panel) {
          void showErrorMessage('Nsight profiles', 'Open the notebook the profiles belong to, then compare.');
          return;
        }
        app.shell.activateById(panel.id);
        void runBelow(panel, `%nsys_diff ${JSON.stringify(relative(a))} ${JSON.stringify(relative(b))}`);
      },
      running: async () => {
        try {
          await serviceManager.kernels.refreshRunning();
          return new Set(Array.from(serviceManager.kernels.running()).map(k => k.id));
        } catch {
          return null; // the server did not answer: finishing.json's word only
        }
      }
    });
    sidebar.title.icon = nsightIcon;
    app.shell.add(sidebar, 'left', { rank: 850 });
    if (restorer) {
      restorer.add(sidebar, 'nsight-magic-profiles');
    }
    const follow = () => sidebar.setDirectory(panelDir());
    tracker.currentChanged.connect(follow);
    follow();
    // refreshed when a profile may have been made (after a profiled cell ran) and when one finished loading in
    // the background: the kernel's update that draws it carries READY_KEY in its metadata (views/output.py)
    NotebookActions.executed.connect((_, args) => {
      if (/^\s*%%(nsys|ncu)\b|%nsys_load/.test(args.cell.model.sharedModel.getSource())) {
        void sidebar.refresh();
      }
    });
    tracker.widgetAdded.connect((_, panel) => {
      panel.sessionContext.iopubMessage.connect((__, msg) => {
        const content = msg.content as { metadata?: Record<string, unknown> };
        if (msg.header.msg_type === 'update_display_data' && content.metadata && READY_KEY in content.metadata) {
          void sidebar.refresh();
        }
      });
    });
    if (labShell) {
      labShell.currentChanged.connect(follow);
    }

    const current = (): NotebookPanel | null => tracker.currentWidget;
    const runWith = (magic: 'nsys' | 'ncu') => async () => {
      const panel = current();
      if (panel) {
        await profileActiveCell(panel, magic);
        sidebar.setDirectory(panelDir());
        await sidebar.refresh();
      }
    };

    // labels start with the tool's command name: a palette search for "nsys" ranks profiling the cell first
    commands.addCommand(CMD.nsys, {
      label: 'nsys: Profile cell with Nsight Systems',
      caption: 'Run the active cell under %%nsys (the cell text is not changed)',
      icon: nsightIcon,
      isEnabled: () => current() !== null,
      execute: runWith('nsys')
    });
    commands.addCommand(CMD.ncu, {
      label: 'ncu: Profile cell with Nsight Compute',
      caption: 'Run the active cell under %%ncu (the cell text is not changed)',
      isEnabled: () => current() !== null,
      execute: runWith('ncu')
    });
    commands.addCommand(CMD.insert, {
      label: 'Insert %%nsys magic',
      caption: 'Put %%nsys on the first line of the active cell',
      isEnabled: () => current() !== null,
      execute: () => {
        const panel = current();
        if (panel) {
          insertMagic(panel);
        }
      }
    });
    commands.addCommand(CMD.openLast, {
      label: 'Open last Nsight profile',
      execute: async () => {
        await sidebar.refresh();
        const last = sidebar.profiles[0]; // the newest run (its folder's time stamp), whatever its state
        if (last) {
          await openProfile(last);
        } else {
          await showErrorMessage('Nsight profile', `No profiles in ${PROFILES_DIR}/ beside this notebook yet.`);
        }
      }
    });
    commands.addCommand(CMD.refresh, {
      label: 'Refresh Nsight profiles',
      execute: () => sidebar.refresh()
    });
    commands.addCommand(CMD.open, {
      label: 'Open profile',
      execute: () => (menuTarget ? openProfile(menuTarget) : undefined)
    });
    commands.addCommand(CMD.load, {
      label: 'Insert %nsys_load cell',
      isEnabled: () => current() !== null && menuTarget !== null,
      execute: () => {
        const panel = current();
        if (!panel || !menuTarget) {
          return;
        }
        NotebookActions.insertBelow(panel.content);
        const cell = panel.content.activeCell;
        if (cell) {
          cell.model.sharedModel.setSource(`%nsys_load ${JSON.stringify(relative(menuTarget))}`);
        }
        // the new cell has the focus (not the sidebar): Shift+Enter runs it
        app.shell.activateById(panel.id);
        panel.content.mode = 'command';
        panel.content.activate();
        if (cell) {
          cell.node.focus();
        }
      }
    });
    commands.addCommand(CMD.reveal, {
      label: 'Show in file browser',
      execute: () => (menuTarget ? commands.execute('filebrowser:go-to-path', { path: menuTarget.path }) : undefined)
    });
    commands.addCommand(CMD.remove, {
      label: 'Delete profile…',
      execute: async () => {
        const p = menuTarget;
        if (!p) {
          return;
        }
        const answer = await showDialog({
          title: 'Delete profile',
          body: `Delete ${p.path} and every file in it (report, cell, output)?`,
          buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Delete' })]
        });
        if (answer.button.accept) {
          try {
            await deleteRecursively(contents, p.path);
          } catch (reason) {
            await showErrorMessage('Delete profile', String(reason));
          }
          await sidebar.refresh();
        }
      }
    });

    if (palette) {
      [CMD.nsys, CMD.ncu, CMD.insert, CMD.openLast, CMD.refresh].forEach((command, rank) =>
        palette.addItem({ command, category: 'Nsight', rank })
      );
    }
    app.contextMenu.addItem({ command: CMD.nsys, selector: '.jp-Notebook .jp-CodeCell', rank: 20 });
    app.contextMenu.addItem({ command: CMD.ncu, selector: '.jp-Notebook .jp-CodeCell', rank: 21 });
    app.contextMenu.addItem({ command: CMD.insert, selector: '.jp-Notebook .jp-CodeCell', rank: 22 });

    // toolbar buttons on every notebook
    tracker.widgetAdded.connect((_, panel) => {
      const button = (magic: 'nsys' | 'ncu', label: string, tooltip: string) =>
        new ToolbarButton({
          icon: magic === 'nsys' ? nsightIcon : undefined,
          label,
          tooltip,
          className: `nm-toolbar-${magic}`,
          onClick: () => void commands.execute(magic === 'nsys' ? CMD.nsys : CMD.ncu)
        });
      panel.toolbar.insertAfter('cellType', 'nsight-nsys', button('nsys', 'nsys', 'Profile cell with Nsight Systems'));
      panel.toolbar.insertAfter('nsight-nsys', 'nsight-ncu', button('ncu', 'ncu', 'Profile cell with Nsight Compute'));
    });
  }
};

export default plugin;
