/**
 * The "Nsight profiles" sidebar: the profile folders beside the open notebook, read through the Jupyter contents
 * API (each folder's summary.json), newest first.  Every name shown comes from files a profiled cell may have
 * influenced (NVTX range names, kernel names): always set as text, never as markup.
 */
import { Contents, ServiceManager } from '@jupyterlab/services';
import { Widget } from '@lumino/widgets';

export const PROFILES_DIR = 'nsight-profiles';

/** What summary.json holds (nsight_magic/store.py SUMMARY_KEYS), plus where the folder is. */
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
  failed?: boolean; // the run left no report (its cell and output are kept)
  loading?: boolean; // its report is being exported and drawn in the background (finishing.json, store.py)
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

/** Reads the profile folders of one directory. */
export async function listProfiles(contents: Contents.IManager, dir: string): Promise<IProfile[]> {
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
      const p: IProfile = { name: folder.name, path: folder.path, hasView: false };
      try {
        const inner = await contents.get(folder.path, { content: true });
        const names = new Set(((inner.content as Contents.IModel[]) || []).map(m => m.name));
        p.hasView = names.has('view.html');
        // a kernel is still finishing it (or was, and ended first): not a finished profile yet
        p.loading = names.has('finishing.json');
        // which profiler made it, also for a run that left no report (and so no summary.json)
        const nsys = names.has('report.sqlite') || names.has('report.nsys-rep');
        const ncu = names.has('report.ncu-rep') || names.has('report_raw.csv');
        p.tool = ncu ? 'ncu' : nsys ? 'nsys' : undefined;
        if (!nsys && !ncu && !p.loading) {
          p.failed = true;
          if (names.has('run.json')) {
            // written first when the run began (nsight-magic 0.1+), so even a syntax error says its tool
            const r = await contents.get(joinPath(folder.path, 'run.json'), { content: true, format: 'text' });
            const tool = JSON.parse(String(r.content)).tool;
            p.tool = tool === 'ncu' || tool === 'nsys' ? tool : undefined;
          }
          if (!p.tool && names.has('command.txt')) {
            const c = await contents.get(joinPath(folder.path, 'command.txt'), { content: true, format: 'text' });
            p.tool = /(^|\/)ncu(\s|$)/.test(String(c.content).split('\n')[0].split(' --')[0]) ? 'ncu' : 'nsys';
          }
        }
        if (names.has('summary.json')) {
          const s = await contents.get(joinPath(folder.path, 'summary.json'), { content: true, format: 'text' });
          Object.assign(p, JSON.parse(String(s.content)), { name: folder.name, path: folder.path });
        }
      } catch {
        // a folder being written, or removed meanwhile: listed with what is known
      }
      if (!p.created) {
        p.created = (folder.last_modified || '').replace('T', ' ').slice(0, 19);
      }
      return p;
    })
  );
  return profiles.sort((a, b) => (b.created || '').localeCompare(a.created || '') || b.name.localeCompare(a.name));
}

export interface IProfilesCallbacks {
  open(profile: IProfile): void;
  contextMenu(profile: IProfile, event: MouseEvent): void;
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
    const refresh = document.createElement('button');
    refresh.className = 'jp-Button jp-mod-minimal nm-profiles-refresh';
    refresh.title = 'Refresh';
    refresh.textContent = '⟳';
    refresh.onclick = () => void this.refresh();
    header.append(title, refresh);
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
      void this.refresh();
    }
  }

  get profiles(): IProfile[] {
    return this.items;
  }

  async refresh(): Promise<void> {
    const dir = this.dir;
    const items = await listProfiles(this.manager.contents, dir);
    if (dir !== this.dir) {
      return; // the notebook changed meanwhile
    }
    this.items = items;
    this.render();
  }

  private render(): void {
    this.where.textContent = `${joinPath(this.dir, PROFILES_DIR) || PROFILES_DIR}/`;
    this.list.replaceChildren();
    if (this.items.length === 0) {
      const empty = document.createElement('li');
      empty.className = 'nm-profiles-empty';
      empty.textContent = 'No profiles yet: run a cell with the Nsight Systems button, or %%nsys.';
      this.list.append(empty);
      return;
    }
    for (const p of this.items) {
      const li = document.createElement('li');
      li.className = 'nm-profile';
      li.dataset.path = p.path;
      li.title = p.loading
        ? 'Being loaded by its kernel (or its kernel stopped first: %nsys_load it)'
        : p.hasView
          ? 'Open this profile'
          : 'No view.html in this folder';
      if (p.loading) {
        li.classList.add('nm-profile-loading');
      }
      const name = document.createElement('div');
      name.className = 'nm-profile-name';
      name.textContent = p.name;
      const meta = document.createElement('div');
      meta.className = 'nm-profile-meta';
      const kernels = p.kernels ? ` · ${p.kernels.toLocaleString()} kernels` : '';
      meta.textContent =
        [p.tool, p.created, formatMs(p.capture_ns), p.loading ? 'loading…' : p.failed ? 'no report (failed run)' : '']
          .filter(Boolean)
          .join(' · ') + kernels;
      const top = document.createElement('div');
      top.className = 'nm-profile-top';
      if (p.top_kernel) {
        top.textContent = `top kernel: ${p.top_kernel}`;
      } else if (p.top_range) {
        top.textContent = `top NVTX range: ${p.top_range}`;
      }
      li.append(name, meta, top);
      li.onclick = () => this.callbacks.open(p);
      li.oncontextmenu = (event: MouseEvent) => {
        event.preventDefault();
        event.stopPropagation();
        this.callbacks.contextMenu(p, event);
      };
      this.list.append(li);
    }
  }

  private dir = '';
  private items: IProfile[] = [];
  private readonly where: HTMLDivElement;
  private readonly list: HTMLUListElement;
}
