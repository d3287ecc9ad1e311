/**
 * The "Nsight profiles" sidebar: the profile folders beside the open notebook, read through the Jupyter contents
 * API (each folder's summary.json), newest first.  Every name shown comes from files a profiled cell may have
 * influenced (NVTX range names, kernel names): always set as text, never as markup.
 */
import { Contents, ServiceManager } from '@jupyterlab/services';
import { Widget } from '@lumino/widgets';

export const PROFILES_DIR = 'nsight-profiles';
/** A finishing.json its kernel has not touched for this long: that kernel stopped (background.py beats every 5 s). */
export const STALE_MS = 60_000;

/** What a profile folder is now (store.py list_profiles says the same in Python). */
export type ProfileState = 'finished' | 'loading' | 'interrupted' | 'failed';

/** What summary.json holds (nsight_magic/store.py SUMMARY_KEYS), plus where the folder is and its state. */
export interface IProfile {
  name: string;
  path: string;
  tool?: string;
  created?: string;
  capture_ns?: number;
  kernels?: number;
  top_kernel?: string;
  top_kernel_pct?: number;
  top_range?: string;
  top_range_pct?: number;
  hasView: boolean;
  state: ProfileState;
  rawKept?: boolean; // interrupted: what the profiler wrote (report.qdstrm / report.nsys-rep) is in the folder
  error?: string; // finished without a profile to show: why, in one line (summary.json's error)
}

export function joinPath(...parts: string[]): string {
  return parts.filter(p => p !== '').join('/');
}

export function dirname(path: string): string {
  const i = path.lastIndexOf('/');
  return i < 0 ? '' : path.slice(0, i);
}

function formatMs(ns: number | undefined): string {
  if (ns === undefined || ns === null) {
    return '';
  }
  const ms = ns / 1e6;
  return ms >= 1000 ? `${(ms / 1000).toFixed(2)} s` : `${ms.toFixed(1)} ms`;
}

/** When a profile was made: the stamp in its folder's name (store.create_profile_folder), as summary.json says. */
export function stampOf(name: string): string | undefined {
  const m = /-(\d{4})(\d\d)(\d\d)-(\d\d)(\d\d)(\d\d)(?:-\d+)?$/.exec(name);
  return m ? `${m[1]}-${m[2]}-${m[3]} ${m[4]}:${m[5]}:${m[6]}` : undefined;
}

async function readJson(contents: Contents.IManager, path: string): Promise<any> {
  const f = await contents.get(path, { content: true, format: 'text' });
  return JSON.parse(String(f.content));
}

/**
 * Reads the profile folders of one directory, newest first.  `running`: the ids of the server's running kernels,
 * to tell a profile still loading (finishing.json, its kernel running) from one whose kernel stopped first.
 */
export async function listProfiles(
  contents: Contents.IManager,
  dir: string,
  running: Set<string> | null = null
): Promise<IProfile[]> {
  const root = joinPath(dir, PROFILES_DIR);
  let listing: Contents.IModel;
  try {
    // look in the notebook's folder first: asking for a nsight-profiles/ that does not exist yet makes the
    // browser log a 404 for every notebook opened before its first profile
    const parent = await contents.get(dir, { content: true });
    const here = ((parent.content as Contents.IModel[]) || []).some(
      m => m.name === PROFILES_DIR && m.type === 'directory'
    );
    if (!here) {
      return [];
    }
    listing = await contents.get(root, { content: true });
  } catch {
    return [];
  }
  const folders = ((listing.content as Contents.IModel[]) || []).filter(m => m.type === 'directory');
  const profiles = await Promise.all(
    folders.map(async folder => {
      const p: IProfile = { name: folder.name, path: folder.path, hasView: false, state: 'failed' };
      try {
        const inner = await contents.get(folder.path, { content: true });
        const names = new Set(((inner.content as Contents.IModel[]) || []).map(m => m.name));
        p.hasView = names.has('view.html');
        // which profiler made it, also for a run that left no report (and so no summary.json)
        const nsys = names.has('report.sqlite') || names.has('report.nsys-rep') || names.has('report.qdstrm');
        const ncu = names.has('report.ncu-rep') || names.has('report_raw.csv');
        p.tool = ncu ? 'ncu' : nsys ? 'nsys' : undefined;
        if (names.has('finishing.json')) {
          // a kernel is finishing it, or was and ended first: it says so when it can, its kernel is no longer
          // running, or it stopped touching the file (a restarted kernel keeps its id; background.py beats)
          const owner = await readJson(contents, joinPath(folder.path, 'finishing.json')).catch(() => ({}));
          const file = ((inner.content as Contents.IModel[]) || []).find(m => m.name === 'finishing.json');
          const touched = Date.parse(file?.last_modified || '');
          const stale = Number.isFinite(touched) && Date.now() - touched > STALE_MS;
          const gone =
            owner.interrupted || stale || (running && owner.kernel_id && !running.has(owner.kernel_id));
          p.state = gone ? 'interrupted' : 'loading';
          p.rawKept = names.has('report.qdstrm') || names.has('report.nsys-rep') || names.has('report.sqlite');
        } else if (names.has('summary.json')) {
          p.state = 'finished'; // written once the report was read
        } else if (nsys || ncu) {
          p.state = 'interrupted'; // what the profiler wrote, never read (its loading was stopped)
          p.rawKept = true;
        }
        if (!p.tool && names.has('run.json')) {
          // written first when the run began, so even a syntax error says its tool
          const tool = (await readJson(contents, joinPath(folder.path, 'run.json')).catch(() => ({}))).tool;
          p.tool = tool === 'ncu' || tool === 'nsys' ? tool : undefined;
        }
        if (!p.tool && names.has('command.txt')) {
          const c = await contents.get(joinPath(folder.path, 'command.txt'), { content: true, format: 'text' });
          p.tool = /(^|\/)ncu(\s|$)/.test(String(c.content).split('\n')[0].split(' --')[0]) ? 'ncu' : 'nsys';
        }
        if (names.has('summary.json') && p.state === 'finished') {
          const summary = await readJson(contents, joinPath(folder.path, 'summary.json')).catch(() => null);
          if (summary && typeof summary === 'object' && !Array.isArray(summary)) {
            for (const k of ['capture_ns', 'kernels', 'top_kernel_pct', 'top_range_pct'] as const) {
              if (typeof summary[k] === 'number') {
                (p as any)[k] = summary[k];
              }
            }
            for (const k of ['top_kernel', 'top_range', 'created', 'error'] as const) {
              if (typeof summary[k] === 'string') {
                (p as any)[k] = summary[k];
              }
            }
          }
        }
      } catch {
        // a folder being written, or removed meanwhile: listed with what is known
      }
      p.created = stampOf(folder.name) || p.created || (folder.last_modified || '').replace('T', ' ').slice(0, 19);
      return p;
    })
  );
  return profiles.sort((a, b) => (b.created || '').localeCompare(a.created || '') || b.name.localeCompare(a.name));
}

/** The words a profile's state shows in the list, and what a click on it says when there is no page to open. */
export function stateWords(p: IProfile): { meta: string; title: string; why?: string } {
  switch (p.state) {
    case 'loading':
      return {
        meta: 'loading in its kernel…',
        title: 'Being loaded by its kernel: it opens here once loaded',
        why: `${p.name} is still being loaded by its kernel; it opens here once loaded.`
      };
    case 'interrupted':
      return {
        meta: p.rawKept ? 'not finished: raw recording kept' : 'not finished: its kernel stopped',
        title: 'Its kernel stopped before the profile was loaded: %nsys_load it (right click: Insert %nsys_load cell)',
        why:
          `${p.name} was not finished: its kernel stopped while loading it.` +
          (p.rawKept ? ' What the profiler recorded is kept:' : '') +
          ` run %nsys_load ${PROFILES_DIR}/${p.name} in a cell (right click: Insert %nsys_load cell).`
      };
    case 'failed':
      return {
        meta: 'no report (failed run)',
        title: 'The run left no report: stderr.txt and tool-output.txt in the folder say why',
        why: `${p.name} left no report: the run failed or was stopped before the profiler wrote one; stderr.txt and tool-output.txt in the folder say why.`
      };
    default:
      if (p.error) {
        return {
          meta: `no profile: ${p.error.length > 60 ? p.error.slice(0, 59) + '…' : p.error}`,
          title: p.error,
          why: `${p.name} was finished, but there is nothing to show: ${p.error}`
        };
      }
      if (!p.hasView) {
        return {
          meta: '',
          title: 'Shown in the notebook',
          why:
            p.tool === 'ncu'
              ? `Nsight Compute profiles show in the notebook: run %nsys_load ${PROFILES_DIR}/${p.name} in a cell.`
              : `${p.name} has no view.html yet: run %nsys_load ${PROFILES_DIR}/${p.name} in a cell.`
        };
      }
      return { meta: '', title: 'Open this profile' };
  }
}

export interface IProfilesCallbacks {
  open(profile: IProfile): void;
  contextMenu(profile: IProfile, event: MouseEvent): void;
  compare(before: IProfile, after: IProfile): void;
  running(): Promise<Set<string> | null>;
}

export class ProfilesPanel extends Widget {
  constructor(
    private readonly manager: ServiceManager.IManager,
    private readonly callbacks: IProfilesCallbacks
  ) {
    super();
    this.id = 'nsight-magic-profiles';
    this.addClass('nm-profiles');
    this.title.caption = 'Nsight profiles';
    const header = document.createElement('div');
    header.className = 'nm-profiles-header';
    const title = document.createElement('span');
    title.className = 'nm-profiles-title';
    title.textContent = 'Nsight profiles';
    this.compareButton = document.createElement('button');
    this.compareButton.className = 'jp-Button jp-mod-minimal nm-profiles-compare';
    this.compareButton.textContent = 'Compare';
    this.compareButton.title = 'Tick two Nsight Systems profiles to compare them (%nsys_diff)';
    this.compareButton.disabled = true;
    this.compareButton.onclick = () => {
      const [a, b] = this.items.filter(p => this.picked.has(p.path)).reverse(); // older first
      if (a && b) {
        this.callbacks.compare(a, b);
      }
    };
    const refresh = document.createElement('button');
    refresh.className = 'jp-Button jp-mod-minimal nm-profiles-refresh';
    refresh.title = 'Refresh';
    refresh.textContent = '⟳';
    refresh.onclick = () => void this.refresh();
    header.append(title, this.compareButton, refresh);
    this.where = document.createElement('div');
    this.where.className = 'nm-profiles-where';
    this.list = document.createElement('ul');
    this.list.className = 'nm-profiles-list';
    this.node.append(header, this.where, this.list);
  }

  /** The folder whose nsight-profiles/ is shown (the open notebook's). */
  setDirectory(dir: string): void {
    if (dir !== this.dir) {
      this.dir = dir;
      this.picked.clear();
      void this.refresh();
    }
  }

  get profiles(): IProfile[] {
    return this.items;
  }

  get directory(): string {
    return this.dir ?? '';
  }

  async refresh(): Promise<void> {
    const dir = this.dir ?? '';
    const items = await listProfiles(this.manager.contents, dir, await this.callbacks.running());
    if (dir !== (this.dir ?? '')) {
      return; // the notebook changed meanwhile
    }
    this.items = items;
    this.render();
  }

  private render(): void {
    this.where.textContent = `${joinPath(this.dir ?? '', PROFILES_DIR) || PROFILES_DIR}/`;
    this.list.replaceChildren();
    const paths = new Set(this.items.map(p => p.path));
    for (const p of Array.from(this.picked)) {
      if (!paths.has(p)) {
        this.picked.delete(p);
      }
    }
    this.compareButton.disabled = this.picked.size !== 2;
    if (this.items.length === 0) {
      const empty = document.createElement('li');
      empty.className = 'nm-profiles-empty';
      empty.textContent = 'No profiles yet: run a cell with the Nsight Systems button, or %%nsys.';
      this.list.append(empty);
      return;
    }
    for (const p of this.items) {
      const words = stateWords(p);
      const li = document.createElement('li');
      li.className = `nm-profile nm-profile-${p.state}`;
      li.dataset.path = p.path;
      li.title = words.title;
      const head = document.createElement('div');
      head.className = 'nm-profile-head';
      if (p.tool === 'nsys' && p.state === 'finished') {
        const pick = document.createElement('input');
        pick.type = 'checkbox';
        pick.className = 'nm-profile-pick';
        pick.title = 'Tick two profiles, then Compare';
        pick.checked = this.picked.has(p.path);
        pick.onclick = (event: MouseEvent) => {
          event.stopPropagation();
          if (pick.checked) {
            this.picked.add(p.path);
          } else {
            this.picked.delete(p.path);
          }
          this.compareButton.disabled = this.picked.size !== 2;
        };
        head.append(pick);
      }
      const name = document.createElement('span');
      name.className = 'nm-profile-name';
      name.textContent = p.name;
      head.append(name);
      const meta = document.createElement('div');
      meta.className = 'nm-profile-meta';
      const kernels = p.kernels ? ` · ${p.kernels.toLocaleString()} kernels` : '';
      meta.textContent = [p.tool, p.created, formatMs(p.capture_ns)].filter(Boolean).join(' · ') + kernels;
      const top = document.createElement('div');
      top.className = 'nm-profile-top';
      if (words.meta) {
        top.classList.add('nm-profile-state'); // what became of it, in full: it may say what to do
        top.textContent = words.meta;
      } else if (p.top_kernel) {
        top.textContent = `top kernel: ${p.top_kernel}`;
      } else if (p.top_range) {
        top.textContent = `top NVTX range: ${p.top_range}`;
      }
      li.append(head, meta, top);
      li.onclick = () => this.callbacks.open(p);
      li.oncontextmenu = (event: MouseEvent) => {
        event.preventDefault();
        event.stopPropagation();
        this.callbacks.contextMenu(p, event);
      };
      this.list.append(li);
    }
  }

  // null until a notebook's folder is set: the first setDirectory, also to '' (the server's root), lists
  private dir: string | null = null;
  private items: IProfile[] = [];
  private readonly picked = new Set<string>();
  private readonly where: HTMLDivElement;
  private readonly list: HTMLUListElement;
  private readonly compareButton: HTMLButtonElement;
}
