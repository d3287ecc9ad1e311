"""`%%ncu` in place: a kernel started under Nsight Compute (`nsight-magic kernel install --ncu`) measures the
kernels of a cell in its own process, so a model that fills the GPU is measured where it is, held once.

The kernel runs under `ncu --target-processes application-only --replay-mode kernel --nvtx --nvtx-include
LAUNCH_NVTX_INCLUDE` (inplace_kernel.ncu_launch_argv): only kernels launched inside a range of ours
(`nsight-magic@ncu-<profile folder>`) are replayed and measured; everything else runs at full speed.  ncu writes
them, cell after cell, into one report that grows beside the notebook (nsight-profiles/.ncu-sessions/).

    record   the profile folder, the cell inside its range (run as the editor numbers it, its GPU work
             synchronised), the report's writes settled;
    finish   that cell's kernels read from the growing report by their range (`ncu --import R --nvtx-include
             nsight-magic@ncu-<folder>/ --csv --page raw|details`) into the folder's CSV pages, which the views read
             as today's %%ncu; the per-cell filters (--kernel, --module, --nvtx-include) are ncu's own, run on the
             same report, and --skip/--count pick among the cell's kernels in launch order.

What ncu fixes when it starts cannot change per cell: the sections measured (--set, --section, --metrics), the
replay mode, --ncu-args.  Such a cell says so in one line and runs in a fresh process under ncu, as %%ncu does in
any other kernel.  Every kernel inside the cell is measured (ncu's --launch-count counts over the process's whole
life): --count bounds what the profile shows, not what ncu replays.
"""
from __future__ import annotations

import csv
import io
import shlex
import subprocess
import time
from pathlib import Path

from ..errors import NsightMagicError
from ..inside.child import annotate_cell
from ..inside.marks import CAPTURE_DOMAIN
from ..store import ProfileFolder, create_profile_folder, profiles_root
from .inplace import SessionGone, cell_done, run_timed
from .prepare import tool_versions
from .process import Recording, RunResult
from .recorder import CellRequest

RANGE_PREFIX = "ncu-"
LAUNCH_NVTX_INCLUDE = f"regex:{CAPTURE_DOMAIN}@{RANGE_PREFIX}.*/"
SETTLE_S = 0.5          # the report's size unchanged this long after the cell: ncu has written its kernels
SETTLE_LIMIT_S = 60.0
IMPORT_TIMEOUT_S = 300


class InPlaceNcu:
    """This kernel's Nsight Compute session: the report that grows, what ncu measures (fixed at launch)."""

    tool = "ncu"

    def __init__(self, cfg: dict):
        self.refused = cfg.get("refused")
        self.name = cfg.get("session", "")
        self.ncu = Path(cfg.get("ncu") or "ncu")
        self.version = cfg.get("version")
        self.report = Path(cfg.get("report") or "")
        self.launch = cfg.get("launch", "")
        self.set = cfg.get("set")
        self.sections = tuple(cfg.get("sections") or ())
        self.cells = 0

    def why_not_in_place(self, ncu_opts, fresh: bool = False) -> str | None:
        """Why this %%ncu cannot be measured in place (it runs in a fresh process instead), or None."""
        if fresh:
            return "--fresh"
        if ncu_opts.set != self.set or tuple(ncu_opts.sections) != self.sections or ncu_opts.metrics:
            return (f"this kernel's ncu measures --set {self.set} "
                    f"{' '.join('--section ' + s for s in self.sections)} (fixed when ncu started it; install "
                    "another: nsight-magic kernel install --ncu --set ... --section ... --name ...)").replace("  ", " ")
        if ncu_opts.replay != "kernel":
            return "--replay: this kernel's ncu replays each kernel (fixed when ncu started it)"
        if ncu_opts.extra_args:
            return "--ncu-args are flags of ncu's launch (this kernel's ncu was started with its flags)"
        return None

    def record(self, req: CellRequest) -> Recording:
        """Run the request's cell here inside its range: ncu measures the kernels it launches; finish() reads them
        (a Recorder: profilers/recorder.py)."""
        cell, opts, ncu_opts, shell, on_status = req.cell, req.opts, req.tool_opts, req.shell, req.on_status
        cell_first_line, number, header = req.cell_first_line, req.number, req.header
        t0 = time.monotonic()
        root = profiles_root(opts.directory)
        folder = ProfileFolder(create_profile_folder(root, opts.name))
        folder.cell.write_text(cell, encoding="utf-8", errors="surrogatepass")
        if self.refused:
            raise SessionGone(f"{self.refused}; the cell was not run (kept in {folder.path}/)")
        range_name = f"{RANGE_PREFIX}{folder.path.name}"
        folder.write_json(folder.run_config, {"tool": "ncu", "mode": "in place", "session": self.name,
                                              "report": str(self.report), "range": f"{CAPTURE_DOMAIN}@{range_name}",
                                              "cell_first_line": cell_first_line})
        folder.command.write_text(f"in place: {self.launch}\n{shlex.join(self._import_argv(range_name, 'raw'))}\n")
        folder.write_json(folder.versions, tool_versions(self.ncu, "ncu", self.version))
        messages: list[str] = []
        notes = [f"measured in place (cell {self.cells + 1} of this kernel's Nsight Compute session, --set "
                 f"{self.set})"]
        if opts.send_vars or opts.no_vars or opts.return_vars:
            notes.append("in place nothing is sent or returned: the cell runs in this kernel, with its variables")
        size_before = _size(self.report)
        self.cells += 1
        status, annotations = "ok", []
        cell_file, file_first = None, cell_first_line
        record_start = time.monotonic()
        try:
            wanted = {"modules": 0 if ncu_opts.module else opts.modules, "functions": list(opts.functions)}
            if wanted["modules"] is not None or wanted["functions"]:
                annotations = annotate_cell(wanted, shell.user_ns, folder.path)
            import nvtx

            nvtx.push_range(range_name, domain=CAPTURE_DOMAIN)
            try:
                status, cell_file, file_first = run_timed(shell, cell, opts.timeout, cell_first_line, number, header)
            finally:
                nvtx.pop_range(domain=CAPTURE_DOMAIN)
        except KeyboardInterrupt:
            status = "interrupted"
        finally:
            for h in annotations:
                h.remove()
        cell_s = time.monotonic() - record_start
        cell_done(folder, shell, status, cell_file, file_first, opts.timeout, messages)
        record_s = time.monotonic() - t0

        def finish(on_status_cb=None, cancel=None) -> RunResult:
            return self._finish(folder, range_name, ncu_opts, status, messages, notes, t0, record_s, cell_s,
                                size_before, on_status_cb or on_status, cancel)

        return Recording(folder, "ncu", status, record_s, {}, [], messages, notes, finish)

    # ---- finish ---------------------------------------------------------------------------------------------
    def _import_argv(self, range_name: str | None, page: str, filters=()) -> list[str]:
        argv = [str(self.ncu), "--import", str(self.report)]
        if range_name:
            argv += ["--nvtx-include", f"{CAPTURE_DOMAIN}@{range_name}/"]
        return [*argv, *filters, "--csv", "--page", page, "--print-units", "base"]

    def _import(self, argv: list[str]) -> tuple[int | None, str, str]:
        from ..tools.injection import tool_environment

        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=IMPORT_TIMEOUT_S,
                               stdin=subprocess.DEVNULL, env=tool_environment())
            return p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired:
            return None, "", f"ncu --import did not answer within {IMPORT_TIMEOUT_S} s"
        except OSError as e:
            return None, "", f"ncu could not run ({e.strerror or e})"

    def _finish(self, folder: ProfileFolder, range_name: str, ncu_opts, status: str, messages: list[str],
                notes: list[str], t0: float, record_s: float, cell_s: float, size_before: int, on_status,
                cancel) -> RunResult:
        from ..tools.ncu import count_limit_note, describe_filters, explain_ncu_failure

        messages, notes = list(messages), list(notes)
        t_fin = time.monotonic()
        if on_status:
            on_status("waiting for ncu to write the cell's kernels", time.monotonic() - t0)
        _settle(self.report, size_before, cancel)
        pages = {}
        log = []
        for page in ("raw", "details"):
            if cancel is not None and cancel.is_set():
                break
            if on_status:
                on_status(f"reading the cell's kernels ({page})", time.monotonic() - t0)
            argv = self._import_argv(range_name, page)
            rc, out, err = self._import(argv)
            log.append(f"$ {shlex.join(argv)}\n{err}")
            if rc != 0 or not out.strip():
                pages = {}
                why = explain_ncu_failure(out + err, rc or 0, ncu_opts)
                if why and why.startswith("no kernels were profiled"):
                    why = ("no kernel was measured in this cell: it launched no CUDA kernel (or torch ran it on "
                           "the CPU)")
                messages.append(f"{why or 'ncu could not read the cell from ' + str(self.report)}; "
                                f"ncu's output is in {folder.tool_log}")
                break
            pages[page] = out
        if pages and _filtered(ncu_opts):
            keep, said = self._filter_ids(ncu_opts, pages["raw"], log)
            if keep is not None:
                pages = {k: keep_kernels(v, keep) for k, v in pages.items()}
                if not kernel_ids(pages["raw"]):
                    messages.append(f"no kernel of this cell matched {describe_filters(ncu_opts)}"
                                    f"{said}; all the cell's kernels are in {self.report}")
                    pages = {}
        folder.tool_log.write_text("\n".join(log) + "\n")
        raw = details = None
        if pages:
            raw, details = folder.path / "report_raw.csv", folder.path / "report_details.csv"
            raw.write_text(pages["raw"], encoding="utf-8")
            details.write_text(pages["details"], encoding="utf-8")
            n = len(kernel_ids(pages["raw"]))
            note = count_limit_note(ncu_opts, n)
            if note:
                notes.append(note)
            notes.append(f"{n} kernel{'s' if n != 1 else ''} of this cell, read from the kernel's report "
                         f"{self.report} (range {CAPTURE_DOMAIN}@{range_name})")
            try:
                from ..readers.ncu import open_ncu_pages
                from ..readers.summary import write_summary

                write_summary(folder.path, open_ncu_pages(raw, details))
            except NsightMagicError as e:
                messages.append(f"{e}; the CSV pages are kept in {folder.path}/")
        timings = {"record_s": round(record_s, 3), "cell_s": round(cell_s, 3),
                   "report_s": round(time.monotonic() - t_fin, 3)}
        return RunResult(folder, status, 0 if status == "ok" else None, time.monotonic() - t0, raw, None, messages,
                         {}, [], timings, notes)

    def _filter_ids(self, ncu_opts, raw_page: str, log: list) -> tuple[set | None, str]:
        """The ids of the cell's kernels that the per-cell filters keep: ncu applies --kernel, --module and
        --nvtx-include to the whole report (its own rules), the cell's ids are kept, then --skip and --count in
        launch order."""
        from ..tools.ncu import module_nvtx_filter

        cell_ids = kernel_ids(raw_page)
        filters: list[str] = []
        if ncu_opts.kernel:
            filters += ["--kernel-name-base", "function", "--kernel-name", f"regex:{ncu_opts.kernel}"]
        for inc in (*ncu_opts.nvtx_include, *([module_nvtx_filter(ncu_opts.module)] if ncu_opts.module else [])):
            filters += ["--nvtx-include", inc]
        matched = cell_ids
        if filters:
            argv = self._import_argv(None, "raw", filters)
            rc, out, err = self._import(argv)
            log.append(f"$ {shlex.join(argv)}\n{err}")
            chosen = set(kernel_ids(out)) if rc == 0 else set()
            matched = [i for i in cell_ids if i in chosen]
        start = ncu_opts.skip or 0
        end = None if ncu_opts.count is None else start + ncu_opts.count
        picked = matched[start:end]
        said = f" ({len(cell_ids)} measured)" if len(picked) < len(cell_ids) else ""
        return set(picked), said


def _filtered(ncu_opts) -> bool:
    return bool(ncu_opts.kernel or ncu_opts.nvtx_include or ncu_opts.module or ncu_opts.skip
                or ncu_opts.count is not None)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _settle(report: Path, size_before: int, cancel, settle_s: float = SETTLE_S,
            limit_s: float = SETTLE_LIMIT_S) -> None:
    """Until the growing report's size has not changed for `settle_s` (ncu writes each kernel's result after
    the kernel: the last ones may still be on their way when the cell ends)."""
    end = time.monotonic() + limit_s
    last, since = _size(report), time.monotonic()
    while time.monotonic() < end and not (cancel is not None and cancel.is_set()):
        time.sleep(0.05)
        now = _size(report)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= settle_s:
            return


def _split(page: str) -> tuple[str, str]:
    """(ncu's own messages before the table: "==WARNING== ..." lines, the CSV table)."""
    lines = page.splitlines(keepends=True)
    i = 0
    while i < len(lines) and lines[i].startswith("=="):
        i += 1
    return "".join(lines[:i]), "".join(lines[i:])


def _rows(page: str) -> tuple[list[str], list[list[str]]]:
    rows = list(csv.reader(io.StringIO(_split(page)[1])))
    return (rows[0], rows[1:]) if rows else ([], [])


def kernel_ids(page: str) -> list[str]:
    """The kernel ids of a raw page, in launch order (its unit row has none)."""
    header, rows = _rows(page)
    if "ID" not in header:
        return []
    i = header.index("ID")
    return list(dict.fromkeys(r[i] for r in rows if len(r) > i and r[i].strip()))


def keep_kernels(page: str, keep: set) -> str:
    """A CSV page (raw or details: both have an ID column) with the rows of `keep` only; rows without an id (the
    raw page's units) stay."""
    header, rows = _rows(page)
    if "ID" not in header:
        return page
    i = header.index("ID")
    out = io.StringIO()
    out.write(_split(page)[0])
    w = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n")
    w.writerow(header)
    for r in rows:
        if len(r) <= i or not r[i].strip() or r[i] in keep:
            w.writerow(r)
    return out.getvalue()

