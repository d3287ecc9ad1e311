"""What the magics show besides a profiled cell's own output: a report or a job opened again, a folder's listing,
the warm session's line (%nsys_session), a comparison (%nsys_diff), and the notebook-side helpers they share
(whether a person watches the cell, Ctrl-C between cells while profiles finish).  Failures become one line,
never a traceback into the user's cell."""
from __future__ import annotations

import signal
import sys
from pathlib import Path

from IPython.core.error import UsageError
from IPython.display import display

from .errors import NsightMagicError
from .heap import give_back_freed_memory, trim_after_cell


def load_job(path: Path, args) -> None:
    """%nsys_load on a job: the reports analysed on Dask with a progress bar, then the job's view."""
    from .jobs import open_job
    from .views.job import display_job

    bar = JobProgress(not args.no_render)
    try:
        job = open_job(path, pattern=args.pattern, scheduler=args.scheduler, progress=bar)
    except NsightMagicError as e:
        raise UsageError(str(e)) from None
    except KeyboardInterrupt:  # its cluster is closed and its reports only read: one line, no traceback
        print(f"nsight-magic: stopped loading the job in {path} (Ctrl-C); its reports are unchanged "
              f"(%nsys_load {path} loads it again)", file=sys.stderr)
        return
    bar.close(job)
    for e in job.errors:
        print(f"nsight-magic: {e}", file=sys.stderr)
    if job.loaded:
        display_job(job, render=not args.no_render)


class JobProgress:
    """Reports done / total while a job loads: a progress bar in a notebook, lines otherwise."""

    def __init__(self, widget: bool):
        self.bar = self.label = None
        self.widget = widget

    def __call__(self, done: int, total: int, result) -> None:
        from .jobs.rank_task import RankResult

        read = "read" if isinstance(result, RankResult) else "diagnosed"
        what = f"rank {result.rank} {read}: {'failed' if result.error else f'{result.read_s:.1f} s'}"
        if self.widget:
            import ipywidgets as w

            if self.bar is None:
                self.bar = w.IntProgress(value=0, min=0, max=total, description="reports")
                self.label = w.Label()
                display(w.HBox([self.bar, self.label]))
            self.bar.max, self.bar.value = total, done
            self.label.value = f"{done} / {total} ({what})"
        else:
            print(f"nsight-magic: {done} / {total} tasks done ({what})")

    def close(self, job) -> None:
        if self.label is not None:
            self.label.value = f"{len(job.loaded)} of {len(job.results)} reports loaded"


def display_listing(profiles, chosen: dict | None, render: bool) -> None:
    """The profiles of a folder as a table (newest first), then which one is shown below it."""
    from .views.profiles import profiles_html, profiles_text

    text = profiles_text(profiles)
    if render:
        display({"text/html": profiles_html(profiles, chosen["name"] if chosen else None), "text/plain": text},
                raw=True)
    else:
        print(text)
    if chosen:
        print(f"nsight-magic: showing {chosen['name']} (choose another with --pick NAME|INDEX)")


def session_command(args, frontend, in_place, pass_env) -> None:
    """%nsys_session: the warm session's line (--env: what is not passed; --stop, --restart), or what runs this
    kernel in place."""
    if args.env:
        from .tools.environment import profiled_environment

        _, withheld = profiled_environment(passed=pass_env)
        print(f"nsight-magic: not passed to the profiled process ({len(withheld)}): {', '.join(withheld) or '-'}"
              f"; passed beyond the allow-list: {', '.join(pass_env) or '-'}")
        return
    if in_place is not None:
        ip = in_place
        what = (f"Nsight Compute (--set {ip.set}), its report {ip.report}" if ip.tool == "ncu" else
                f"nsys session {ip.name}, tracing {ip.trace}")
        said = f"; {ip.refused}" if ip.refused else ""
        print(f"nsight-magic: in place: this kernel runs under {what}; {ip.cells} cell"
              f"{'s' if ip.cells != 1 else ''} recorded{said} (there is no worker to stop or restart: restart "
              "the kernel for a new session)")
        return
    sessions = frontend.sessions
    old = sessions.session
    if args.stop or args.restart:
        stopped = sessions.stop(replaced=True, say=lambda m: print(f"nsight-magic: {m}", flush=True))
        print(f"nsight-magic: warm session {'stopped' if stopped else 'was not running'}")
    if args.restart:
        from .cell_output import LiveStatus

        status = LiveStatus("nsys session", False)
        try:
            why = frontend.start_session(old.trace if old is not None else None, pass_env, status.output, status)
        except NsightMagicError as e:
            raise UsageError(str(e)) from None
        if why:
            print(f"nsight-magic: {why}", file=sys.stderr)
    if not args.stop:
        print(f"nsight-magic: {session_line(sessions.describe())}")


def diff_command(args, frontend, user_ns: dict) -> None:
    """%nsys_diff: the comparison (in `_nsys_diff`) and, with --fail-above, the gate's lines (in `_nsys_gate`)."""
    from .background import imports_settled

    imports_settled()
    from .analysis.gate import check_args, gate
    from .views.diff import display_diff

    try:
        if args.fail_above is not None:
            check_args(args.fail_above, args.top_kernels)
        again = " ".join(["%nsys_diff", *args.profiles])  # refused (one line) where both cannot fit in memory
        d = frontend.diff(args.profiles, args.dir, args.match, say=say, room=None if args.force else again)
    except NsightMagicError as e:
        raise UsageError(str(e)) from None
    user_ns["_nsys_diff"] = d
    display_diff(d, render=not args.no_render)
    if args.fail_above is not None:
        try:
            result = gate(d, args.fail_above, ranges=args.range, top_kernels=args.top_kernels)
        except NsightMagicError as e:
            raise UsageError(str(e)) from None
        user_ns["_nsys_gate"] = result
        print("\n".join(result.lines()))


def session_line(info: dict | None) -> str:
    if info is None:
        return "no warm session (the next %%nsys starts one)"
    rss = f", {info['worker_rss_bytes'] / 2**20:,.0f} MiB resident" if info.get("worker_rss_bytes") else ""
    state = {"starting": "starting (its setup code runs)", "ready": "ready", "busy": "busy (running a cell)",
             "failed": "failed (its setup code raised: the next %%nsys starts a new one and shows why)"}.get(
        info.get("state"), info.get("state"))
    if info.get("state") == "finishing":
        state = f"finishing profile {', '.join(info.get('finishing') or [])}"
    pid = f"worker pid {info['worker_pid']}, " if info.get("worker_pid") else ""
    return (f"warm session {info['session']}: {state}; {pid}up {info['age_s']:.0f} s, "
            f"{info['cells']} cell{'s' if info['cells'] != 1 else ''} run{rss}, tracing {info['trace']}")


def say(text: str) -> None:
    """A line of information (waiting for a profile, ...): on stdout, not in the red of errors."""
    print(f"nsight-magic: {text}", flush=True)


def draws_later(shell) -> bool:
    """Whether the frontend shows an output that changes after the cell has returned: a kernel whose client can
    answer input() is one a person is looking at (JupyterLab, Notebook, VS Code).  nbclient, nbconvert and
    papermill cannot, and keep only what arrives while a cell runs: there the cell waits for its profile."""
    return watched(shell)


def watched(shell) -> bool:
    """A person's frontend runs the cell (it can answer input()): a view's live part is worth making; a headless
    run (nbclient, nbconvert, papermill) saves the static view only."""
    kernel = getattr(shell, "kernel", None)
    return bool(kernel is not None and getattr(kernel, "_allow_stdin", False))


def catch_idle_interrupts(shell) -> None:
    """Ctrl-C (the notebook's stop button) while the kernel is idle reaches the kernel as SIGINT, which ipykernel
    ignores between requests: while profiles finish in the background it stops them (keeping what the profiler
    wrote).  Installed as the handler ipykernel restores after each request; with no background work it does
    what that handler did."""
    kernel = getattr(shell, "kernel", None)
    previous = getattr(kernel, "saved_sigint_handler", None)
    if kernel is None or previous is None or getattr(previous, "_nsight_magic", False):
        return

    def on_sigint(signum, frame):
        from . import background

        if background.interrupt_pending():
            return
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:
            raise KeyboardInterrupt

    on_sigint._nsight_magic = True
    kernel.saved_sigint_handler = on_sigint


def print_manifest(manifest) -> None:
    from .inside.state import manifest_line

    if manifest:
        print(f"nsight-magic: {manifest_line(manifest)}")


def show_report(path: Path, folder: Path | None, render: bool, thresholds: dict | None = None,
                force: bool = False) -> None:
    """Open and display a report; failures become one line, never a traceback into the user's cell.  A report
    that needs more memory than the kernel has room for is not read unless `force` (memory_room.py)."""
    from . import saved_analysis
    from .memory_room import check_room
    from .report import open_report

    big = large_report(path)
    if big is not None:  # minutes of silence otherwise (round 4: 3.15M NVTX ranges, 46 s without a word)
        say(f"reading {big[0].name} ({big[1] / 1e9:.1f} GB): a report this large takes a while (Ctrl-C stops; "
             "its files stay as they are)")
    try:
        report = open_report(path)
        if not force:
            check_room(report, f"%nsys_load {folder or path}")
        nsys = report.tool == "nsys"
        cold = nsys and not report.data.cached  # no columnar cache beside the export yet
        if cold:  # the read's largest transient, the NVTX events, freed before the view allocates (3.15M ranges:
            report.nvtx  # peak 2.0 -> 1.6 GB)
            give_back_freed_memory()
        # a profile drawn before: its page shown as it was kept, at once (its live part made after)
        page = saved_analysis.kept_page(report.data, thresholds) if nsys and not cold and render else None
        if page is None or not display_kept(report, folder, page, thresholds):
            # a profile seen before: its verdict, findings (and timeline, to draw) as they were kept, not made again
            known = nsys and not cold and saved_analysis.restore(report.data, thresholds, timeline=render)
            display_report(report, folder, render, thresholds)
            if cold:  # the first open of a report without the cache writes it: opening it again reads it alone
                report.data.write_cache()
            if nsys and (not known or render):  # (kept before a page was, or for another folder: the page added)
                saved_analysis.save(report.data, thresholds)
        trim_after_cell()  # a large report's reading and drawing leave the heap grown (heap.py)
    except NsightMagicError as e:
        print(f"nsight-magic: {e}", file=sys.stderr)
        return
    except KeyboardInterrupt:  # reading and drawing change no file (pages are written whole): say so, no traceback
        print(f"nsight-magic: stopped loading {path.name} (Ctrl-C); its files are unchanged in "
              f"{folder or path.parent}/ (%nsys_load {folder or path} shows it again)", file=sys.stderr)
        return
    except Exception as e:  # a view bug must not look like the user's cell failed
        print(f"nsight-magic: could not render {path.name} ({type(e).__name__}: {e}); the files are in "
              f"{folder or path.parent}/", file=sys.stderr)
        return
    if folder is not None:
        from .store import clear_finishing, finishing_state

        if finishing_state(Path(folder)) == "interrupted":  # its kernel ended while loading it: now it is loaded
            clear_finishing(Path(folder))


LARGE_REPORT_BYTES = 200_000_000


def large_report(path: Path) -> tuple[Path, int] | None:
    """(file, size) of the report `path` names (a file, or the largest report in a folder) when it is large."""
    try:
        files = [path] if path.is_file() else [p for p in path.iterdir() if p.is_file() and p.suffix.lower() in (
            ".sqlite", ".nsys-rep", ".qdrep", ".ncu-rep", ".qdstrm")]
        sized = max(((p, p.stat().st_size) for p in files), key=lambda x: x[1], default=None)
    except OSError:
        return None
    return sized if sized is not None and sized[1] >= LARGE_REPORT_BYTES else None


def display_kept(report, folder: Path | None, page, thresholds: dict | None = None) -> bool:
    """Show an nsys report's view from its kept static page (saved_analysis.kept_page) at once; then, where a
    person watches, its live part (the kept verdict, findings and timeline restored) in its place.  False where
    the page was made for another folder: nothing shown."""
    from IPython import get_ipython
    from IPython.display import display

    from . import saved_analysis
    from .views.bokehjs import bokehjs_html, needs_bokehjs
    from .views.output import kept_bundle, profile_bundle

    first = kept_bundle(report, page, folder)
    if first is None:
        return False
    loader = needs_bokehjs()  # the view sent twice carries BokehJS both times, as the first one of a notebook
    if loader:
        first["text/html"] = bokehjs_html() + first["text/html"]
    handle = display(first, raw=True, display_id=True)
    if watched(get_ipython()):  # its timeline's zoom fetches exact events from this kernel
        known = saved_analysis.restore(report.data, thresholds, timeline=True)
        handle.update(profile_bundle(report, folder, thresholds=thresholds, loader=loader, page=page), raw=True)
        if not known:  # kept by a headless run, without the timeline: kept now, while the live view holds it
            saved_analysis.save(report.data, thresholds)
    return True


def display_report(report, folder: Path | None, render: bool, thresholds: dict | None = None) -> None:
    """The one place that shows a report (Nsight Systems or Nsight Compute) in the cell: its view (and view.html
    beside an nsys report in a profile folder), or with render=False its text summary."""
    from IPython.display import publish_display_data

    from .views.bokehjs import needs_bokehjs
    from .views.output import profile_bundle

    if render:
        from IPython import get_ipython

        publish_display_data(profile_bundle(report, folder, render=True, thresholds=thresholds,
                                            loader=needs_bokehjs(), live=watched(get_ipython())))
    else:
        print(profile_bundle(report, folder, render=False, thresholds=thresholds)["text/plain"])


def open_again(args) -> None:
    """%nsys_load: a saved profile, a report, a job's reports, or a folder of profiles (listed, one shown)."""
    path = Path(args.path).expanduser()
    from . import background

    background.imports_settled()
    from .frontend import is_job
    from .store import is_profile_folder, list_profiles, pick_profile

    background.wait_for([path], say=say)  # a profile of this kernel still loading: shown once it is
    if path.is_dir():
        background.wait_under(path, say=say)

    if path.is_dir() and not is_profile_folder(path) and is_job(path, args.pattern):
        load_job(path, args)
        return
    if path.is_dir() and not is_profile_folder(path):
        profiles = list_profiles(path)
        failed = list_profiles(path, include_failed=True) if args.all else None
        if profiles.empty:
            n = len(list_profiles(path, include_failed=True))
            more = f" ({n} run{'s' if n != 1 else ''} left no report: %nsys_load {args.path} --all lists them)" \
                if n and not args.all else ""
            print(f"nsight-magic: {path} holds no profile with a report{more}; profiles are made by %%nsys "
                  f"and %%ncu in nsight-profiles/ beside the notebook", file=sys.stderr)
            if failed is not None and len(failed):
                display_listing(failed, None, render=not args.no_render)
            return
        try:
            chosen = pick_profile(profiles, args.pick)
        except NsightMagicError as e:
            raise UsageError(str(e)) from None
        display_listing(failed if failed is not None else profiles, chosen, render=not args.no_render)
        path = Path(chosen["folder"])
    elif args.pick is not None:
        raise UsageError(f"--pick chooses among the profiles of a folder; {path} is not such a folder")
    show_report(path, path if path.is_dir() else None, not args.no_render, force=args.force)
