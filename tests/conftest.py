"""Shared test helpers: where the shared fixtures are, whether nsys is installed, reading NVTX names with SQL."""
from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
FIXTURES = SHARED / "fixtures"
DATA = Path(__file__).resolve().parent / "data"

requires_nsys = pytest.mark.skipif(shutil.which("nsys") is None,
                                   reason="nsys not installed (scripts/install-nsys-debian.sh)")
requires_ncu = pytest.mark.skipif(shutil.which("ncu") is None,
                                  reason="ncu not installed (scripts/install-ncu-debian.sh)")



def _gpu_visible() -> bool:
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "GPU " in out


GPU = _gpu_visible()
# tests/gpu/: run on the lent GPU by scripts/gpu-check.sh --pytest
requires_gpu = pytest.mark.skipif(not GPU, reason="no NVIDIA GPU (tests/gpu/ runs on the lent GPU: "
                                                  "bash scripts/gpu-check.sh --pytest)")

# Three workers share two cores (scripts/test.sh), and every process that imports torch (profiled cells, kernels,
# benchmarks) would start an OpenMP pool of both, whose threads spin while they wait: one thread each.  Measured on
# this machine, one full run each: user CPU 1019 s -> 724 s, wall 597 s -> 519 s.  Before any test imports torch;
# inherited by every process the tests start.  Not on the GPU machine, whose tier measures what users run.
if not GPU:
    os.environ.setdefault("OMP_NUM_THREADS", "1")

# Debian's Chromium, driven by Playwright (scripts/install-browser-debian.sh): its headless shell, the browser
# Playwright runs headless by default (a JupyterLab page costs 4.8 CPU-s there against 6.4 in the full browser),
# else the full browser
HEADLESS_SHELL = Path("/usr/lib/chromium/chromium-headless-shell")
CHROMIUM = HEADLESS_SHELL if HEADLESS_SHELL.exists() else Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
requires_chromium = pytest.mark.skipif(not CHROMIUM.exists(),
                                       reason=f"no {CHROMIUM} (scripts/install-browser-debian.sh)")


# pytest-xdist runs the suite in several worker processes (scripts/test.sh): each gets its own TMPDIR (warm
# sessions' folders, nsys's private folders), and tests that look for "processes of ours" count only those started
# by their own worker: every process a worker starts, kernels and nsys included, inherits NSIGHT_MAGIC_TEST_WORKER
# (a name the profiled processes' allow-list lets through, as it does not PYTEST_XDIST_WORKER)
WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if WORKER is not None:
    os.environ["NSIGHT_MAGIC_TEST_WORKER"] = WORKER


def pytest_configure(config):
    # a shell that starts the suite in the background (`cmd &` without job control) makes it ignore SIGINT, and
    # every process it starts inherits that: the Ctrl-C tests would then interrupt nothing. A handled signal is
    # reset to the default at exec, so the kernels and children the tests start can be interrupted again.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    import tempfile

    if WORKER:
        d = Path(tempfile.gettempdir()) / f"nsight-magic-tests-{WORKER}-{os.getpid()}"
        d.mkdir(mode=0o700, exist_ok=True)
        os.environ["TMPDIR"] = str(d)
        tempfile.tempdir = None
    else:
        d = Path(tempfile.mkdtemp(prefix="nsight-magic-tests-"))
    config._nm_worker_tmp = d
    _ipython_profile(d / "ipython")
    # the caches nsight-magic keeps (exports of reports in read-only folders, nsys's --version and --help
    # answers) go to a folder of the tests' own, shared by the worker's kernels, never the user's ~/.cache
    (d / "cache").mkdir(mode=0o700, exist_ok=True)
    os.environ["XDG_CACHE_HOME"] = str(d / "cache")


# What the test kernels' %%nsys traces when a cell names nothing: NVTX only.  Tracing the OS runtime too made a warm
# cell cost nsys 3 CPU-s instead of 1.2 here (three cells: 9.2 against 3.7 CPU-s), and the suite is CPU-bound; a
# test about OS runtime events names -t nvtx,osrt.  The kernels read it as a user's IPython profile would be read.
TEST_TRACE = "nvtx"


def _ipython_profile(folder: Path) -> None:
    """An IPython folder of the tests' own (never the user's ~/.ipython) for every kernel they start."""
    prof = folder / "profile_default"
    prof.mkdir(parents=True, exist_ok=True)
    (prof / "ipython_config.py").write_text(f"c.NsightMagics.trace = {TEST_TRACE!r}\n")
    os.environ["IPYTHONDIR"] = str(folder)


def pytest_collection_modifyitems(config, items):
    """The modules whose tests run real processes first (scripts/test.sh passes --no-loadscope-reorder, so that
    pytest-xdist hands out modules in this order): a long module handed out last kept one worker busy alone while
    the others had finished (test_saved_notebook's 3.5 minutes).  A module's weight is the sum of its tests':
    a test's pytest-timeout mark (the time given to one that starts kernels, browsers or nsys), else 60 for one
    marked nsys or browser, else 1.  The sort is stable: within a module and among equal weights, collection
    order stays."""
    def cost(item) -> float:
        mark = item.get_closest_marker("timeout")
        if mark and mark.args:
            return float(mark.args[0])
        return 60.0 if item.get_closest_marker("nsys") or item.get_closest_marker("browser") else 1.0

    def module(item) -> str:
        return item.nodeid.split("::", 1)[0]

    weight: dict[str, float] = {}
    for item in items:
        weight[module(item)] = weight.get(module(item), 0.0) + cost(item)
    items.sort(key=lambda item: -weight[module(item)])


def pytest_unconfigure(config):
    """The worker's temporary folder goes with it (tests leave nothing in /tmp, as nsight-magic must not)."""
    d = getattr(config, "_nm_worker_tmp", None)
    # the IPython shell some tests make (test_idle, test_run_ncu, test_views_ncu) keeps its history in that folder:
    # closed now, not at the interpreter's exit, when it wrote to a database already deleted ("attempt to write a
    # readonly database" from every worker)
    shells = sys.modules.get("IPython.core.interactiveshell")
    if shells is not None and shells.InteractiveShell.initialized():
        import atexit

        shell = shells.InteractiveShell.instance()
        atexit.unregister(shell.atexit_operations)
        shell.atexit_operations()
    if d is not None:
        mp = sys.modules.get("multiprocessing.util")
        tmp = mp and sys.modules["multiprocessing.process"].current_process()._config.get("tempdir")
        if tmp and Path(tmp).parent == d:
            # a job's workers' forkserver (jobs.job) keeps its socket in a folder there that multiprocessing
            # removes at exit (priority -100): the worker's folder goes after it, not before (a traceback at exit)
            mp.Finalize(None, shutil.rmtree, args=(d,), kwargs={"ignore_errors": True}, exitpriority=-101)
        else:
            shutil.rmtree(d, ignore_errors=True)


def started_by_this_worker(environ: bytes) -> bool:
    """Whether a process (its /proc/PID/environ) was started by this test process's worker (always, without
    xdist)."""
    return WORKER is None or f"NSIGHT_MAGIC_TEST_WORKER={WORKER}".encode() in environ.split(b"\0")


def unxz(src: Path, dst: Path) -> Path:
    """An xz-compressed file of tests/data written out uncompressed at `dst`; its path."""
    import lzma

    with lzma.open(src) as f, open(dst, "wb") as out:
        shutil.copyfileobj(f, out)
    return dst


def unpack_job_rank(dest: Path, rank_from: int, rank_to: int | None = None) -> Path:
    """tests/data/job's report of rank `rank_from` (an H200 job's, xz-compressed), written to `dest` as the report
    of rank `rank_to` (default: the same rank); its path."""
    dst = dest / f"report.{rank_to if rank_to is not None else rank_from}.sqlite"
    return unxz(DATA / "job" / f"report.{rank_from}.sqlite.xz", dst)


@pytest.fixture(scope="module")
def opened():
    """path -> its report (nsight_magic.report.open_report), opened once per module and closed after it."""
    from nsight_magic.report import open_report

    cache: dict = {}

    def get(p):
        if p not in cache:
            cache[p] = open_report(p)
        return cache[p]

    yield get
    for r in cache.values():
        r.close()


@pytest.fixture(scope="module")
def browser():
    """A headless Chromium for the module's tests (every browser test takes it as an argument)."""
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, timeout=60_000)
        yield b
        b.close()


def eventually(check, timeout: float = 10.0, every: float = 0.05):
    """check()'s value once it is truthy, or its last value after `timeout` s: a wait on what the test waits for,
    not a fixed sleep (a loaded machine is slower, an idle one need not wait)."""
    end = time.monotonic() + timeout
    while True:
        got = check()
        if got or time.monotonic() >= end:
            return got
        time.sleep(every)


# every Bokeh document of a page has drawn its roots (BokehJS's Document.is_idle): a wait for the drawing instead of
# a fixed pause before a screenshot or a pixel read
BOKEH_IDLE = "() => !!window.Bokeh && Bokeh.documents.length > 0 && Bokeh.documents.every(d => d.is_idle)"


def in_page(page, value: str, ok: str, arg=None, timeout: float = 10.0):
    """The JavaScript function `value`'s result in the page once the function `ok(result, arg)` holds, or its
    result after `timeout` s (the test's assert then shows it): the browser's counterpart of eventually()."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    both = f"(arg) => {{ const got = ({value})(arg); return ({ok})(got, arg) ? [got] : null; }}"
    try:
        return page.wait_for_function(both, arg=arg, timeout=timeout * 1000).json_value()[0]
    except PlaywrightTimeout:
        return page.evaluate(value, arg)


def run_notebook(cells: list[str], cwd: Path, timeout: int = 240, allow_errors: bool = False):
    """Execute code cells in a real kernel (nbclient) with `cwd` as the notebook's folder; the executed notebook."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=allow_errors,
                   resources={"metadata": {"path": str(cwd)}}).execute()
    return nb


READY_KEY = "application/vnd.nsight-magic+json"  # views.output: the update that drew a profile carries it


def start_kernel(cwd, env: dict | None = None):
    """jupyter_client's start_new_kernel, once more when the kernel died binding its ports: jupyter_client picks
    free TCP ports and the kernel binds them later, and under a parallel run another process took one in between
    ("ZMQError: Address already in use", seen in a full run); start_new_kernel shuts such a kernel down."""
    from jupyter_client.manager import start_new_kernel

    for attempt in range(2):
        try:
            return start_new_kernel(kernel_name="python3", cwd=str(cwd), **({"env": env} if env else {}))
        except RuntimeError:
            if attempt:
                raise


def kernel_runner(cwd, env: dict | None = None):
    """A real kernel (jupyter_client) started in `cwd`, driven like JupyterLab (allow_stdin): (km, kc, run);
    run(code) executes one cell and returns (the text it showed: streams, results, tracebacks, and the final text of
    a profile that loads after the cell returned; the pager's text (`%%nsys?`); its execution count)."""
    km, kc = start_kernel(cwd, env)

    def run(code: str, profile_timeout: float = 120):
        out, loading, drawn = [], {}, {}

        def hook(msg):
            c = msg["content"]
            if msg["msg_type"] == "stream":
                out.append(c["text"])
            elif msg["msg_type"] == "error":
                out.append("\n".join(c["traceback"]))
            elif msg["msg_type"] in ("display_data", "execute_result", "update_display_data"):
                text = c["data"].get("text/plain", "")
                did = c.get("transient", {}).get("display_id")
                if _drawn_profile(msg) in loading:  # drawn while the cell still ran (it went on after its profile)
                    drawn[did] = text
                    return
                if did and text.startswith(("nsys: loading the profile", "ncu: loading the profile")):
                    loading[did] = len(out)
                out.append(text)

        reply = kc.execute_interactive(code, output_hook=hook, timeout=240)["content"]
        waiting = set(loading) - set(drawn)
        drawn.update(_profiles_drawn(kc, waiting, profile_timeout) if waiting else {})
        for did, i in loading.items():
            out[i] = drawn.get(did, out[i])
        pages = [p["data"].get("text/plain", "") for p in reply.get("payload", []) if p.get("source") == "page"]
        return "".join(out), "".join(pages), reply.get("execution_count")

    return km, kc, run


def _drawn_profile(msg) -> str | None:
    """The display id of the profile an iopub message draws (its final update), else None."""
    c = msg["content"]
    if msg["msg_type"] != "update_display_data" or not isinstance(c, dict) or READY_KEY not in c.get("metadata", {}):
        return None
    return c.get("transient", {}).get("display_id")


def _profiles_drawn(kc, ids: set, timeout: float) -> dict:
    """The text of the updates that drew the profiles `ids` (display ids), read from iopub after the cell."""
    import queue
    import time

    drawn, end = {}, time.monotonic() + timeout
    while ids - set(drawn) and time.monotonic() < end:
        try:
            msg = kc.get_iopub_msg(timeout=0.5)
        except queue.Empty:
            continue
        did = _drawn_profile(msg)
        if did in ids:
            drawn[did] = msg["content"]["data"].get("text/plain", "")
    if ids - set(drawn):
        pytest.fail(f"the profile was not drawn within {timeout:g} s after its cell returned")
    return drawn


def cell_text(cell, name: str | None = None) -> str:
    """What a cell showed as text: its streams (only stream `name` when given), text/plain results (without
    `name`) and tracebacks."""
    parts = []
    for o in cell.outputs:
        if o.output_type == "stream" and (name is None or o.name == name):
            parts.append(o.text)
        elif o.output_type in ("display_data", "execute_result") and name is None:
            parts.append(o.data.get("text/plain", ""))
        elif o.output_type == "error":
            parts.append("\n".join(o.traceback))
    return "".join(parts)


def run_bounded(argv, timeout=120, *, fail=True, **kw) -> subprocess.CompletedProcess:
    """Run a process in its own group, its output as text; after `timeout` s kill the whole group (nsys's agents
    and a job's ranks outlive their parent) and fail the test, or with fail=False return with returncode None."""
    kw = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "stdin": subprocess.DEVNULL, **kw}
    proc = subprocess.Popen(argv, text=True, start_new_session=True, **kw)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        if fail:
            pytest.fail(f"{argv[:3]} did not finish within {timeout} s")
        return subprocess.CompletedProcess(argv, None, out, err)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def nsys_failing_once(folder: Path, verb: str, times: int = 1, how: str = "endpoint",
                      after_s: float = 0.0) -> tuple[Path, Path]:
    """A front for the real nsys that fails its first `nsys VERB` (its first `times`) as nsys 2022.4 sometimes
    does at start-up (nothing started) and passes every other call (`--help` too: we read the
    verb's switches from it) to the real one: (the front, a file that exists once it failed, holding an "x"
    per failure).  `how`: "endpoint" (its message, exit 1) or "agent" ("Connection to the Agent lost." twice, exit
    0: seen in CI on a loaded machine).  `after_s`: it fails that long after it was started (meanwhile another
    rank's nsys starts its process).  Set $NSIGHT_MAGIC_NSYS to the front."""
    from nsight_magic.tools import find_qdstrm_importer

    failure = {"endpoint": ('"std::exception::what: RuntimeException\\n'
                            '[QuadDCommon::tag_message*] = Local Endpoint is not available."', 1),
               "agent": ('"Connection to the Agent lost.\\nConnection to the Agent lost."', 0)}[how]

    real = shutil.which("nsys")
    marker = folder / f"nsys-{verb}-failed"
    # NVIDIA's layout, two levels down: another test's search for a QdstrmImporter beside its own nsys (up to three
    # folders up, then one down) must not find this one
    root = folder / "nsys-front"
    (root / "target-linux-x64").mkdir(parents=True)
    front = root / "target-linux-x64" / "nsys"
    front.write_text(f"""#!{sys.executable}
import os, sys
def claim():  # one failure each, also when ranks start their nsys at the same moment
    for n in range({times}):
        try:
            os.close(os.open({str(marker)!r} + f".claim{{n}}", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            return True
        except FileExistsError:
            pass
    return False
if sys.argv[1:2] == [{verb!r}] and "--help" not in sys.argv and claim():
    open({str(marker)!r}, "a").write("x")
    import time; time.sleep({after_s!r})
    print({failure[0]})
    sys.exit({failure[1]})
os.execv({real!r}, [{real!r}, *sys.argv[1:]])
""")
    front.chmod(0o755)
    (root / "host-linux-x64").symlink_to(find_qdstrm_importer(real).parent)  # QdstrmImporter, found beside it
    return front, marker


def fixture_path(*parts: str) -> Path:
    """A file under ../shared/fixtures, or skip the test when the shared folder is absent."""
    p = FIXTURES.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"shared fixture {p} not present")
    return p


def nvtx_ranges(sqlite_path: Path) -> list[str]:
    """Names of the NVTX ranges in an nsys export, whether stored as text or through StringIds."""
    con = sqlite3.connect(sqlite_path)
    try:
        return [r[0] for r in con.execute(
            "SELECT COALESCE(n.text, s.value) FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId "
            "WHERE n.eventType IN (59, 60) ORDER BY n.start")]
    finally:
        con.close()


STATS_2025 = DATA / "nsys-stats-2025.3"


def parse_nsys_csv(text: str):
    """What `nsys stats/analyze --format csv --output -` printed, as a DataFrame; None when nsys skipped it
    (no such data) or printed no rows."""
    import io

    import pandas as pd

    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith(("Processing [", "NOTICE:"))]
    if not lines or lines[0].startswith("SKIPPED") or any("does not contain" in ln for ln in lines[:2]):
        return None
    return pd.read_csv(io.StringIO("\n".join(lines)), keep_default_na=False, na_values=[""])


def recorded_text(stem: str, report: str) -> str:
    """nsys 2025.3's output of `report` (a stats report or analyze rule) for the fixture `stem`, as printed;
    recorded on the lent GPU (tests/data/nsys-stats-2025.3/README.md); skip when not recorded."""
    import gzip

    p = STATS_2025 / stem / f"{report}.csv.gz"
    if not p.exists():
        pytest.skip(f"no recorded nsys 2025.3 output {p}")
    return gzip.decompress(p.read_bytes()).decode()


def recorded_stats(stem: str, report: str):
    """recorded_text() as a DataFrame; None when nsys printed no table."""
    return parse_nsys_csv(recorded_text(stem, report))


def processes_mentioning(text: str) -> list[int]:
    """Live processes (other than this one) whose command line holds `text`."""
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            try:
                if text.encode() in (d / "cmdline").read_bytes():
                    pids.append(int(d.name))
            except OSError:
                pass
    return pids


def zombie_children() -> set[str]:
    """This process's children that ended and were never waited for ("pid name"): an aborted run's unshare, nsys
    or setpriv left as <defunct>."""
    out = set()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                st = (d / "stat").read_text()
            except OSError:
                continue
            state, ppid = st[st.rindex(")") + 2:].split()[:2]
            if state == "Z" and int(ppid) == os.getpid():
                out.add(f"{d.name} {st[st.index('(') + 1:st.rindex(')')]}")
    return out


@pytest.fixture
def no_zombies():
    """Fails a test after which a child of this process (the kernel's stand-in) is left <defunct>."""
    before = zombie_children()
    yield
    end = time.monotonic() + 5
    while zombie_children() - before and time.monotonic() < end:
        time.sleep(0.1)
    assert zombie_children() - before == set()


def rules_of(rep) -> list:
    """(kernel, rule, estimated speedup to 0.01) of an Nsight Compute report's guided-analysis rules, in order:
    what the .ncu-rep (ncu_report) and the CSV details page (rounded to 0.01) must agree on."""
    r = rep.rules
    return [(int(k), str(n), None if s != s else round(float(s), 2))
            for k, n, s in zip(r["kernel_id"], r["rule"], r["speedup_pct"])]


def rules_agree(a, b) -> bool:
    """rules_of(a) and rules_of(b): the same rules in the same order, each speedup within one unit of the CSV page's
    last printed digit (ncu prints 6.245 as 6.25 where the report's own value rounds to 6.24: seen on the H200)."""
    ra, rb = rules_of(a), rules_of(b)
    return len(ra) == len(rb) and all(
        x[:2] == y[:2] and (x[2] is None) == (y[2] is None) and (x[2] is None or abs(x[2] - y[2]) < 0.0101)
        for x, y in zip(ra, rb))
