/**
 * How a profile's output shows in JupyterLab and Notebook 7 (nsight_magic/views/output.py makes the bundle).
 *
 * - VIEW_MIME: the static view (the bundle's text/html) with its scripts (the notebook is trusted: Lab only picks
 *   an unsafe renderer for trusted output, untrusted output gets its sanitized text/html), and, while the kernel
 *   that made it lives, its live widget put in the place the view marks (`.nm-live-slot`).  The widget is found
 *   through the notebook's own ipywidgets renderer; when its model is gone (a new kernel, none, a reload after the
 *   kernel ended) the static view simply stays: never "model not found".
 * - STATUS_MIME: the line of a profile that loads in the background.  When the kernel that loads it stops first
 *   (restart, shutdown, crash) it says so and how to open what the profiler wrote; a saved notebook reopened later
 *   reads the profile folder to say what became of it.
 */
import { CodeCell } from '@jupyterlab/cells';
import { NotebookPanel } from '@jupyterlab/notebook';
import { IRenderMime, MimeModel, renderHTML } from '@jupyterlab/rendermime';
import { Contents } from '@jupyterlab/services';
import { Widget } from '@lumino/widgets';

import { dirname, PROFILES_DIR, STALE_MS } from './profiles';

export const VIEW_MIME = 'application/vnd.nsight-magic.view+json';
export const STATUS_MIME = 'application/vnd.nsight-magic.status+json';
const WIDGET_MIME = 'application/vnd.jupyter.widget-view+json';
const STOPPED = new Set(['dead', 'restarting', 'autorestarting', 'terminating']);
const UNSURE_MS = 3000; // a stopped profile's folder read again for this long when it shows no report
const UNSURE_EVERY_MS = 500;

interface ILiveRef {
  model_id: string;
  version_major?: number;
  version_minor?: number;
}

interface IStatus {
  state: string;
  tool?: string;
  folder?: string; // absolute, as the kernel sees it
  rel?: string | null; // relative to the notebook's folder
  kernel_id?: string | null;
}

/** Whether BokehJS is (or, within 30 s, becomes) loaded in this page. */
async function bokehReady(): Promise<boolean> {
  const w = window as any;
  for (let i = 0; i < 300; i++) {
    if (w.nmBokehReady) {
      try {
        await w.nmBokehReady;
      } catch {
        return false;
      }
    }
    if (w.Bokeh) {
      return true;
    }
    await new Promise(r => setTimeout(r, 100));
  }
  return false;
}

/** The notebook's ipywidgets renderer once its widget manager is there; null when it never comes. */
export type LiveRenderer = () => Promise<IRenderMime.IRenderer | null>;

/** The static view, upgraded to its live widget while that exists. */
export class ViewRenderer extends Widget implements IRenderMime.IRenderer {
  constructor(
    private readonly options: IRenderMime.IRendererOptions,
    private readonly liveRenderer: LiveRenderer | null
  ) {
    super();
    this.addClass('nm-output');
  }

  async renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    const ref = model.data[VIEW_MIME] as unknown as ILiveRef | undefined;
    // the same view sent again with its saved copy made (an nsys view comes first with its live timeline only,
    // views/output.py): the live view it shows, or is drawing, is moved into the new page, not made again (its
    // zoom stays)
    const kept = this.live && ref && ref.model_id === this.live.modelId && model.trusted ? this.live : null;
    if (kept) {
      this.node.appendChild(kept.box); // parked while the page is made anew (a DOM move: the widget stays attached)
    } else {
      this.dropLive();
    }
    for (const child of Array.from(this.node.children)) {
      if (!kept || child !== kept.box) {
        child.remove();
      }
    }
    const host = document.createElement('div');
    host.className = 'nm-static'; // our own styles (view.css), not Lab's rendered-HTML ones
    this.node.insertBefore(host, this.node.firstChild);
    await renderHTML({
      host,
      source: String(model.data['text/html'] ?? ''),
      trusted: model.trusted,
      sanitizer: this.options.sanitizer,
      resolver: this.options.resolver,
      linkHandler: this.options.linkHandler,
      shouldTypeset: false,
      latexTypesetter: null,
      translator: this.options.translator
    });
    const slot = host.querySelector('.nm-live-slot') as HTMLElement | null;
    if (kept) {
      if (slot && this.live === kept) {
        slot.appendChild(kept.box);
        kept.slot = slot;
        this.syncLive();
      } else {
        this.dropLive();
      }
      return;
    }
    if (model.trusted && ref && ref.model_id && slot && this.liveRenderer) {
      void this.tryLive(ref, slot);
    }
  }

  /** Ask the notebook's ipywidgets renderer for the model; show its view only once it has drawn one. */
  private async tryLive(ref: ILiveRef, slot: HTMLElement): Promise<void> {
    const token = (this.token += 1);
    // the live widget's Bokeh view needs BokehJS at once: the page's copy first, which the notebook's first view
    // carries (views/bokehjs.py) and loads once its output is on the page
    if (!(await bokehReady())) {
      return;
    }
    const inner = await this.liveRenderer!().catch(() => null);
    if (!inner || token !== this.token || this.isDisposed) {
      inner?.dispose();
      return; // no widget manager in this notebook, or a newer model: the static view it is
    }
    const box = document.createElement('div');
    box.className = 'nm-live';
    box.style.display = 'none';
    slot.appendChild(box);
    this.live = { inner, box, slot, modelId: ref.model_id, observer: new MutationObserver(() => this.syncLive()) };
    this.live.observer.observe(inner.node, { childList: true });
    const data = { [WIDGET_MIME]: { version_major: 2, version_minor: 0, ...ref } };
    await inner.renderModel(new MimeModel({ data: data as any, trusted: true })).catch(() => undefined);
    this.syncLive();
  }

  /** The live view is shown while the inner renderer holds a widget view, the static one otherwise. */
  private syncLive(): void {
    const live = this.live;
    if (!live || this.isDisposed) {
      return;
    }
    const has = live.inner.node.querySelector(':scope > .lm-Widget') !== null;
    // the slot's static content hides while the live view shows (style.ts), and comes back when it goes
    live.slot.classList.toggle('nm-live-on', has);
    live.box.style.display = has ? '' : 'none';
    if (has && !live.inner.isAttached && this.isAttached) {
      Widget.attach(live.inner, live.box);
    }
    this.node.classList.toggle('nm-is-live', has);
  }

  protected onAfterAttach(msg: any): void {
    super.onAfterAttach(msg);
    this.syncLive();
  }

  protected onBeforeDetach(msg: any): void {
    if (this.live && this.live.inner.isAttached) {
      Widget.detach(this.live.inner);
    }
    super.onBeforeDetach(msg);
  }

  private dropLive(): void {
    this.token += 1;
    const live = this.live;
    this.live = null;
    this.node.classList.remove('nm-is-live');
    if (live) {
      live.box.remove();
      live.observer.disconnect();
      if (live.inner.isAttached) {
        Widget.detach(live.inner);
      }
      live.inner.dispose();
    }
  }

  dispose(): void {
    this.dropLive();
    super.dispose();
  }

  private token = 0;
  private live: {
    inner: IRenderMime.IRenderer;
    box: HTMLElement;
    slot: HTMLElement;
    modelId: string;
    observer: MutationObserver;
  } | null = null;
}

/** A contents path: `rel` (relative to the notebook's folder, as the kernel wrote it) from the notebook's folder. */
export function contentsPath(dir: string, rel: string): string | null {
  const parts = dir ? dir.split('/') : [];
  for (const p of rel.split('/')) {
    if (p === '..') {
      if (!parts.length) {
        return null; // above the server's root: not reachable through the contents API
      }
      parts.pop();
    } else if (p && p !== '.') {
      parts.push(p);
    }
  }
  return parts.join('/');
}


/**
 * What became of a profile whose output still says it is loading, from its folder through the contents API:
 * 'finishing' (finishing.json, touched lately), 'stale' (finishing.json its kernel stopped touching), 'finished'
 * (summary.json: its report was read), 'raw' (what the profiler wrote, never read), 'failed', 'gone', 'unknown'.
 */
export async function folderState(contents: Contents.IManager, path: string | null): Promise<string> {
  if (path === null) {
    return 'unknown';
  }
  let files: Contents.IModel[];
  try {
    files = ((await contents.get(path, { content: true })).content as Contents.IModel[]) || [];
  } catch {
    return 'gone';
  }
  const byName = new Map(files.map(m => [m.name, m]));
  const finishing = byName.get('finishing.json');
  if (finishing) {
    const touched = Date.parse(finishing.last_modified || '');
    return Number.isFinite(touched) && Date.now() - touched > STALE_MS ? 'stale' : 'finishing';
  }
  if (byName.has('summary.json')) {
    return 'finished';
  }
  const raw = ['report.sqlite', 'report.nsys-rep', 'report.qdstrm', 'report.ncu-rep', 'report_raw.csv'];
  return raw.some(n => byName.has(n)) ? 'raw' : 'failed';
}

export function stoppedLine(st: IStatus, state = 'raw'): string {
  const tool = st.tool || 'nsys';
  const folder = st.folder || PROFILES_DIR;
  if (state === 'finished') {
    return `${tool}: the profile finished loading after this output was saved: %nsys_load ${folder} shows it`;
  }
  const kept = state === 'failed' || state === 'gone' ? 'its folder' : `what ${tool} recorded is kept in ${folder}/`;
  return (
    `${tool}: not finished: the kernel stopped while this profile was loading; ${kept} ` +
    `(%nsys_load ${folder} opens it)`
  );
}

/** The line of a profile that loads in the background (see the module's comment). */
export class StatusRenderer extends Widget implements IRenderMime.IRenderer {
  constructor(
    private readonly panel: NotebookPanel | null,
    private readonly contents: Contents.IManager | null
  ) {
    super();
    this.addClass('jp-RenderedText');
    this.pre = document.createElement('pre');
    this.node.appendChild(this.pre);
    this.panel?.sessionContext.statusChanged.connect(this.onStatus, this);
  }

  async renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    this.text = String(model.data['text/plain'] ?? '');
    this.status = (model.data[STATUS_MIME] as unknown as IStatus) || { state: 'loading' };
    this.node.dataset.mimeType = STATUS_MIME;
    this.pre.textContent = this.text;
    this.node.dataset.nmState = this.status.state;
    if (this.status.state === 'stopped') {
      this.stopped = true; // its kernel stopped while this page watched (settleOnStop)
    }
    await this.check();
  }

  private onStatus(_: unknown, status: string): void {
    if (STOPPED.has(status)) {
      this.stopped = true;
      void this.check();
    }
  }

  /** Whether the kernel that loads this profile is this notebook's, and running. */
  private ownerRunning(): boolean {
    const st = this.status;
    const kernel = this.panel?.sessionContext.session?.kernel;
    if (this.stopped || !kernel || STOPPED.has(kernel.status)) {
      return false;
    }
    return !st?.kernel_id || kernel.id === st.kernel_id;
  }

  private async check(): Promise<void> {
    clearTimeout(this.timer);
    const st = this.status;
    if (!st || (st.state !== 'loading' && st.state !== 'stopped') || this.isDisposed) {
      return;
    }
    const ctx = this.panel?.sessionContext;
    if (ctx && !this.stopped) {
      await ctx.ready.catch(() => undefined);
    }
    const dir = this.panel ? dirname(this.panel.context.path) : '';
    const path = this.panel && st.rel ? contentsPath(dir, st.rel) : null;
    const state = this.contents ? await folderState(this.contents, path) : 'unknown';
    if (this.isDisposed) {
      return;
    }
    const tool = st.tool || 'nsys';
    let line = this.text;
    let shown = 'loading';
    if (!this.ownerRunning() || state === 'stale') {
      if (state === 'gone' || state === 'failed') {
        // a stop is when the folder and the server are busiest (the kernel restarting, its export killed): a
        // listing that failed or showed no report is read again for a while before the line settles on "its
        // folder" (by time: a restart calls this several times within a second)
        this.unsureSince = this.unsureSince || Date.now();
        if (Date.now() - this.unsureSince < UNSURE_MS) {
          this.timer = window.setTimeout(() => void this.check(), UNSURE_EVERY_MS);
          return;
        }
      }
      if (state !== 'unknown' || this.stopped) {
        line = stoppedLine(st, state);
        shown = state === 'finished' ? 'finished' : 'interrupted';
      }
    } else if (state !== 'finishing' && state !== 'unknown') {
      // its kernel is done with it, yet this line was never replaced: the kernel's update went to a page that
      // was reloaded or closed since.  Give the update a few seconds, then say where the profile is.
      this.gone += 1;
      if (this.gone > 3) {
        line =
          state === 'finished'
            ? `${tool}: the profile finished loading while this page was away: %nsys_load ${st.folder} shows it`
            : `${tool}: the profile was not loaded; what ${tool} recorded is in ${st.folder}/ (%nsys_load ` +
              `${st.folder} opens it)`;
        shown = state === 'finished' ? 'finished' : 'interrupted';
      }
    }
    this.node.dataset.nmState = shown;
    this.pre.textContent = line;
    if (shown === 'loading') {
      this.timer = window.setTimeout(() => void this.check(), 3000);
    }
  }

  dispose(): void {
    clearTimeout(this.timer);
    this.panel?.sessionContext.statusChanged.disconnect(this.onStatus, this);
    super.dispose();
  }

  private pre: HTMLPreElement;
  private text = '';
  private status: IStatus | null = null;
  private stopped = false;
  private gone = 0; // checks that found the folder done while its kernel runs
  private unsureSince = 0; // when a check after the stop first found no report or no folder (ms)
  private timer = 0;
}

/**
 * When the notebook's kernel stops (restart, shutdown, death), the lines of the profiles it was still loading
 * say so in the notebook itself, so that a save keeps it; what became of each profile is read from its folder
 * whenever the line is shown (StatusRenderer).
 */
export function settleOnStop(panel: NotebookPanel): void {
  panel.sessionContext.statusChanged.connect((ctx, status) => {
    if (!STOPPED.has(status)) {
      return;
    }
    const id = ctx.session?.kernel?.id;
    for (const cell of panel.content.widgets) {
      if (cell.model.type !== 'code') {
        continue;
      }
      const outputs = (cell as CodeCell).model.outputs;
      for (let i = 0; i < outputs.length; i++) {
        const st = outputs.get(i).data[STATUS_MIME] as unknown as IStatus | undefined;
        if (!st || st.state !== 'loading' || (st.kernel_id && id && st.kernel_id !== id)) {
          continue;
        }
        const tool = st.tool || 'nsys';
        outputs.set(i, {
          output_type: 'display_data',
          data: {
            'text/plain':
              `${tool}: its kernel stopped while this profile was loading; %nsys_load ${st.folder} opens what ` +
              `${tool} wrote`,
            [STATUS_MIME]: { ...st, state: 'stopped' }
          } as any,
          metadata: {}
        });
      }
    }
  });
}
