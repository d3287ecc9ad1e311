"""Profile in place (issue 44): a real kernel started from the in-place kernelspec (installed into a temporary
prefix) runs under Debian's nsys; `%%nsys` records the cell in the kernel itself, between `nsys start` and
`nsys stop` of the kernel's session.  Driven as JupyterLab drives a kernel (allow_stdin), so the profile loads in
the background as in the Lab."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from conftest import ARGS, BOKEH_IDLE, CHROMIUM, nsys_failing_once, requires_chromium, requires_ncu, requires_nsys
from kernels import inplace_kernel, nsys_of

pytestmark = [requires_nsys, pytest.mark.nsys, pytest.mark.timeout(400)]

SECRET = f"inplace-{uuid.uuid4().hex}"


@pytest.fixture
def kernel(tmp_path):
    k = inplace_kernel(tmp_path, env={"MY_SERVICE_CREDS": SECRET, "CUDA_HIDDEN": SECRET, "TRITON_KEYISH": SECRET})
    session = k.session
    yield k
    k.close()
    assert _gone_within([session]) == []  # nothing of the kernel's nsys is left


def test_the_cell_runs_once_in_the_kernel_and_its_state_stays(kernel):
    assert "in-place kernel" not in kernel.run("counter = 0")
    out = kernel.run("%%nsys --name first\nimport nvtx\nwith nvtx.annotate('inside the cell'):\n    counter += 1\n"
                     "print('counter', counter)")
    assert "counter 1" in out and "profiled in place" in out and "profile ready" in out, out
    assert "environment variables are not passed" not in out  # the kernel's own environment is the profiled one
    # back to back: the second waits for the first's nsys stop, if needed, and both record
    out2 = kernel.run("%%nsys --name second\ncounter += 1\nbig = list(range(10))\nprint('counter', counter)")
    assert "counter 2" in out2 and "profile ready" in out2, out2
    assert "counter 2 [0, 1, 2]" in kernel.run("print('counter', counter, big[:3])")  # what the cell made stays
    folders = {p.name.rsplit("-", 2)[0]: p for p in (kernel.cwd / "nsight-profiles").iterdir()}
    assert set(folders) == {"first", "second"}
    from nsight_magic import open_report

    first = open_report(folders["first"])
    names = set(first.nvtx_summary()["name"])
    assert names == {"inside the cell"}, names  # the cell's range; the magic's own work is outside the capture
    assert json.loads((folders["first"] / "run.json").read_text())["mode"] == "in place"
    assert "nsys" in kernel.run("%nsys_session") and "2 cells recorded" in kernel.run("%nsys_session")
    # the kernel is the profiled process: it got the allow-listed environment, so no secret is in the reports
    for f in folders.values():
        for p in f.rglob("*"):
            if p.is_file():
                assert SECRET.encode() not in p.read_bytes(), p


def _prompt(kernel) -> int:
    """The number the next cell will get (the running cell's is one less than the shell's counter)."""
    return int(kernel.run("print(get_ipython().execution_count)").strip())


def test_the_cell_is_numbered_and_named_as_the_editor_shows_it_and_the_kernel_threads_are_folded(kernel):
    """Python samples, tracebacks and the verdict in place: the editor's line numbers (the %%nsys line is 1),
    functions named by the cell that defined them (In [N]), the cell's own thread measured against itself while
    the kernel's idle threads sit in one folded row, and no word about OS waits that were not traced."""
    from nsight_magic import open_report
    from nsight_magic.analysis.python_code import CELL, KERNEL, cell_lines, functions, thread_roles
    from nsight_magic.views.timeline_prepare import default_folds, prepare_timeline

    defined = _prompt(kernel)
    kernel.run("def busy(n):\n    s = 0\n    for i in range(n):\n        s += i\n    return s")
    out = kernel.run("%%nsys --name lines\nimport time\ntotal = busy(4_000_000)\ntime.sleep(0.4)\n"
                     "print('done', total > 0)")
    assert "done True" in out and "profile ready" in out, out
    verdict = next(ln for ln in out.splitlines() if ln.startswith("Verdict"))
    assert "blocked in the OS" not in verdict.replace("blocked in the OS is not known", "") and \
        "not traced" in verdict, verdict
    rep = open_report(next((kernel.cwd / "nsight-profiles").glob("lines-*")))
    ps = rep.python_samples
    lines = cell_lines(ps).set_index("line")
    assert set(lines.index) <= {2, 3, 4, 5} and {3, 4} <= set(lines.index), lines  # never ipykernel's line 19
    # time.sleep(0.4) on line 4: a share of the cell's own thread (about 40 %; under load busy() runs longer), not
    # of every thread the kernel has (its idle threads would make it a few per cent)
    assert lines.loc[4, "total_ns"] >= 0.3e9 and lines.loc[4, "pct"] >= 15, lines
    assert lines.loc[3, "top_call"] == f"line 3 › busy (In [{defined}]:1)", lines
    assert lines["pct"].sum() >= 85, lines  # shares of the cell's own thread
    fn = functions(ps)
    assert fn.iloc[0]["function"] in ("busy", "<module>") and f"In [{defined}]" in set(fn["file"]), fn.head()
    assert not fn["file"].astype(str).str.contains("selectors|ipykernel|tornado|asyncio").any(), fn.head(10)
    roles = thread_roles(ps)
    assert list(roles.values()).count(CELL) == 1 and list(roles.values()).count(KERNEL) >= 3, roles
    data = prepare_timeline(rep)
    group = data.rows[data.rows["label"].str.startswith("kernel threads")]
    assert len(group) == 1 and group.iloc[0]["key"] in default_folds(data.rows), data.rows
    folded = data.rows[data.rows["ancestors"].str.contains(group.iloc[0]["key"], regex=False)]
    assert len(folded) >= 3 and folded["label"].str.contains("IOPub").any(), folded["label"].tolist()
    # the program's own rows are the cell's thread's only
    program = data.rows[(data.rows["kind"] == "python") & ~data.rows.index.isin(folded.index)]
    assert len(program) == 1, (program["label"].tolist(), ps.thread_names)
    # a traceback numbers the cell as the editor does: In [N], the %%nsys line 1
    n = _prompt(kernel)
    out = kernel.run("%%nsys --name boom\nx = 1\ny = 2\nraise ValueError('on line 4')")
    assert f"Cell In[{n}], line 4" in out and "----> 4 raise ValueError" in out, out


def test_an_exception_and_ctrl_c_in_the_cell_keep_the_profile_and_the_kernel(kernel):
    out = kernel.run("%%nsys --name boom\nimport nvtx\nwith nvtx.annotate('before the error'):\n    x = 1\n"
                     "raise ValueError('boom in the cell')")
    assert "ValueError: boom in the cell" in out and "profile ready" in out, out
    out = kernel.run("%%nsys --name stopped\nimport time, nvtx\nwith nvtx.annotate('sleeping'):\n"
                     "    time.sleep(30)\nprint('not reached')", interrupt_after=4)
    assert "KeyboardInterrupt" in out and not re.search("^not reached", out, re.M) and "profile ready" in out, out
    assert "alive 1" in kernel.run("print('alive', x)")
    from nsight_magic import open_report

    folder = next((kernel.cwd / "nsight-profiles").glob("stopped-*"))
    assert "sleeping" in set(open_report(folder).nvtx_summary()["name"])


def test_no_byte_of_another_process_reaches_a_file_of_an_in_place_kernel(tmp_path):
    """The in-place kernel's reports hold its own processes only: a value in the environment and on the command
    line of an unrelated process of the same machine is in no byte written, in place or by --fresh, --lines and
    --ops (which run in a fresh process from the kernel: isolated too, and recording their cell)."""
    planted = f"planted-{uuid.uuid4().hex}"
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", f"--arg={planted}"],
                             env={**os.environ, "UNRELATED_PROCESS_VALUE": planted}, stdin=subprocess.DEVNULL)
    k = inplace_kernel(tmp_path)
    try:
        assert planted not in k.run("import os; print(os.environ)")
        cells = {"ordinary": " --gpu-metrics", "fresh": " --fresh", "lines": " --lines", "ops": " --ops"}
        for name, flags in cells.items():
            body = ("import torch\nx = torch.ones(3)\nprint('recorded', (x + 1).sum().item())" if name == "ops" else
                    "import nvtx\nwith nvtx.annotate('the cell'):\n    print('recorded', 6.0)")
            out = k.run(f"%%nsys --name {name}{flags}\n{body}")
            assert "recorded 6.0" in out and "profile ready" in out, out
            assert "PID namespace" not in out and "empty capture" not in out, out
            if "--gpu-metrics" in flags:  # per cell in place too: here, with no GPU, it says why none were sampled
                assert "GPU metrics were not sampled: no GPU is visible" in out, out
        from nsight_magic import open_report

        for name in cells:
            folder = next((k.cwd / "nsight-profiles").glob(f"{name}-*"))
            rep = open_report(folder)
            assert len(rep.nvtx) >= 1, name
            assert len(rep.processes) <= 12, (name, rep.processes)  # the kernel's or the fresh run's own
    finally:
        k.close()
        other.kill()
        other.wait()
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name == "report.nsys-rep" for p in written)
    assert [p for p in written if planted.encode() in p.read_bytes()] == []


def test_what_cannot_be_in_place_says_so_and_runs_fresh(kernel):
    out = kernel.run("%%nsys --name other -t nvtx,osrt\nprint('ran fresh')")
    assert "in a fresh process, not in place: this kernel traces nvtx" in out, out
    assert "nsight-magic kernel install --trace nvtx,osrt" in out and "ran fresh" in out
    out = kernel.run("%%nsys --name timed --timeout 2\nimport time\nfor _ in range(100):\n    time.sleep(0.1)\n"
                     "print('not reached')")
    assert "ran past --timeout 2 s" in out and not re.search("^not reached", out, re.M), out
    assert "still here" in kernel.run("print('still here')")


GONE_WITHIN_S = 10  # the bound: nothing of the kernel's session 10 s after it ended


def _gone_within(names: list[str], seconds: float = GONE_WITHIN_S) -> list[str]:
    """Processes whose command line names any of `names`, once none is left or `seconds` have passed."""
    end = time.monotonic() + seconds
    while True:
        left = [p for n in names if n for p in nsys_of(n)]
        if not left or time.monotonic() > end:
            return left
        time.sleep(0.1)


@pytest.mark.parametrize("how", ["restarts-then-shutdown-now", "exit-with-leftovers"])
def test_a_restart_shutdown_or_death_leaves_no_process_of_the_session(tmp_path, how):
    """Whatever ends the kernel (a restart, Jupyter's SIGKILL on a restart or shutdown "now", the kernel's own death
    while processes it started still run: a Popen, a fork), within 10 s no process of its session is left (nsys,
    its agent, the kernel, what the cell started), a restarted kernel profiles again and says what was stopped,
    and the settings file nsys wrote for a SIGKILLed kernel is removed by the next in-place kernel to start."""
    mark = f"left-by-the-cell-{uuid.uuid4().hex}"
    k = inplace_kernel(tmp_path)
    sessions = [k.session]
    injection = lambda: k.run("import os; print(os.environ.get('QUADD_INJECTION_CONFIG', ''))").strip()  # noqa: E731
    try:
        assert "profile ready" in k.run("%%nsys --name once\nprint('once')")
        assert nsys_of(sessions[0])
        if how == "restarts-then-shutdown-now":
            for now in (False, True):
                killed = injection()
                k.km.restart_kernel(now=now)
                k.kc.wait_for_ready(timeout=120)
                sessions.append(k.session)
                assert "profile ready" in k.run(f"%%nsys --name after{int(now)}\nprint('after the restart')")
                assert _gone_within(sessions[:-1]) == []  # the old sessions went with their kernels
            # the restart "now" SIGKILLed the kernel, leaving nsys's settings file: the new kernel's start removed it
            assert "injection_config_" in killed and not Path(killed).exists(), killed
        else:
            k.run(f"import os, subprocess, sys, time\nchild = subprocess.Popen([sys.executable, '-c', "
                  f"'import time; time.sleep(300)', {mark!r}])\nif os.fork() == 0:\n    time.sleep(300)\n"
                  f"    os._exit(0)")
            assert nsys_of(mark)
            k.kc.execute("import os; os._exit(1)")  # nsys launch would wait for them, holding the session
            end = time.monotonic() + GONE_WITHIN_S
            while k.km.is_alive() and time.monotonic() < end:
                time.sleep(0.1)
            assert not k.km.is_alive(), "the kernel's process is still there"
            assert _gone_within([mark]) == []
            # Jupyter restarts a kernel that died: the new one says what was stopped as the old one ended
            k.km.restart_kernel(now=True)
            k.kc.wait_for_ready(timeout=120)
            out = k.run("print('restarted')")
            sessions.append(k.session)
            assert "the previous kernel: the kernel ended while 2 processes it had started still ran" in out, out
            assert "a fork of the kernel's process" in out and "time.sleep(300) left-by-the-cell" in out, out
            assert "they were stopped" in out, out
    finally:
        k.close(now=True)
    assert _gone_within([*sessions, mark]) == []


def test_a_profiler_that_fails_as_it_starts_is_started_again(tmp_path):
    """nsys 2022.4 sometimes fails at start-up before it starts the kernel ("sem_open", "Local Endpoint is not
    available"): the kernel's host starts it again, as the other modes do, and the kernel comes up and profiles."""
    front, failed = nsys_failing_once(tmp_path, "launch", times=2)
    k = inplace_kernel(tmp_path, env={"NSIGHT_MAGIC_NSYS": str(front)})
    try:
        assert failed.read_text() == "xx"  # two failed starts, then the real one
        out = k.run("%%nsys --name started\nprint('started at last')")
        assert "started at last" in out and "profile ready" in out, out
    finally:
        k.close()


def test_where_no_pid_namespace_can_be_made_the_kernel_records_nothing_and_says_why(tmp_path):
    """unshare refused (a container without the privilege): nsys would record every process of the machine, so the
    kernel starts without it and `%%nsys` says so in one line; the cell is kept, not run, and the kernel answers."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    refusing = bin_dir / "unshare"
    refusing.write_text("#!/bin/sh\necho 'unshare: unshare failed: Operation not permitted' >&2\nexit 1\n")
    refusing.chmod(0o755)
    k = inplace_kernel(tmp_path, env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    try:
        out = k.run("%%nsys --name refused\nprint('not run')")
        assert "records nothing" in out and "unshare was refused" in out and "every process of this machine" in out
        assert "not run" not in out.replace("was not run", ""), out
        assert len([ln for ln in out.splitlines() if ln.startswith("UsageError")]) == 1, out
        assert "still here" in k.run("print('still here')")
        folder = next((k.cwd / "nsight-profiles").glob("refused-*"))
        assert (folder / "cell.py").read_text().strip() == "print('not run')"
    finally:
        k.close()


def _finish_state(text: str, root: Path) -> str:
    """What a test that waited in vain for a profile's view saw: the cell's output, the profile folders' files and
    logs, nsys's processes."""
    said = [f"the cell's output: {text!r}"]
    for folder in sorted((root / "nsight-profiles").glob("*")):
        said.append(f"{folder.name}: {sorted(p.name for p in folder.iterdir())}")
        for name in ("tool-output.txt", "finishing.json"):
            if (folder / name).is_file():
                said.append(f"{name}: {(folder / name).read_text(errors='replace')[-2000:]}")
    ps = subprocess.run(["ps", "-eo", "pid,ppid,etimes,args"], capture_output=True, text=True).stdout
    said.append("nsys: " + "\n".join(ln for ln in ps.splitlines() if "nsys" in ln))
    return "\n".join(said)


@pytest.mark.browser
@requires_chromium
@pytest.mark.timeout(400)
def test_jupyterlab_offers_the_kernel_and_it_profiles_a_cell_in_place(tmp_path, monkeypatch):
    """The kernel in JupyterLab's launcher; a notebook made from it profiles a cell in place and draws it."""
    from jupyterlab_server import TOKEN, jupyterlab_server
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    from kernels import install_inplace_kernel

    kernels = install_inplace_kernel(tmp_path / "prefix", "nvtx")
    monkeypatch.setenv("JUPYTER_PATH", str(kernels.parent))
    artifacts = Path(__file__).resolve().parents[1] / "test-artifacts"
    with jupyterlab_server(tmp_path) as (base, root):
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
            page = b.new_page(viewport={"width": 1500, "height": 1000})
            page.goto(f"{base}/lab?reset&token={TOKEN}")
            card = page.locator(".jp-LauncherCard", has_text="Python 3 (nsight-magic, profile in place)").first
            card.wait_for(timeout=90_000)
            artifacts.mkdir(exist_ok=True)
            page.screenshot(path=str(artifacts / "inplace_launcher.png"))
            card.click()
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
            page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=120_000)
            editor = page.locator(".jp-Notebook .jp-Cell .cm-content[contenteditable='true']").first
            editor.click(timeout=30_000)
            # no indented block: whether the editor auto-indents depends on when its Python mode loaded
            page.keyboard.type("%%nsys --name lab\nimport nvtx\nnvtx.push_range('in the lab')\n")
            page.keyboard.type("value = 41 + 1\nprint('value', value)\nnvtx.pop_range()")
            assert "%%nsys --name lab" in editor.inner_text() and "nvtx.pop_range()" in editor.inner_text()
            out = page.locator(".jp-Notebook .jp-CodeCell").first.locator(".jp-OutputArea")
            for _ in range(3):  # a request sent while the kernel connection settles can be lost: again
                page.keyboard.press("Shift+Enter")
                try:
                    out.get_by_text("profiled in place", exact=False).first.wait_for(timeout=60_000)
                    break
                except PlaywrightTimeout:
                    editor.click()
            try:
                out.locator(".nm-output").first.wait_for(timeout=200_000)
            except PlaywrightTimeout:  # say where the finish stood: the output, the folder, nsys's processes
                page.screenshot(path=str(artifacts / "inplace_lab_cell_timeout.png"))
                pytest.fail(_finish_state(out.inner_text(), root))
            page.wait_for_function(BOKEH_IDLE, timeout=60_000)  # drawn, for the screenshot
            text = out.inner_text()
            assert "value 42" in text and "profiled in place" in text, text
            assert page.locator(".jp-Notebook-ExecutionIndicator").count() >= 1
            page.screenshot(path=str(artifacts / "inplace_lab_cell.png"))
            b.close()
    names = [p.name for p in (root / "nsight-profiles").iterdir()]
    assert len(names) == 1 and names[0].startswith("lab-")


@pytest.mark.parametrize("what", ["--start-agent", " launch "])
def test_when_nsys_dies_the_kernel_lives_and_says_the_session_is_gone(kernel, what):
    """nsys's agent, or `nsys launch`, killed: the kernel lives on (its namespace's first process stays while it
    runs), answers, and %%nsys says the session has ended instead of recording nothing; its shutdown then leaves
    nothing (the fixture checks)."""
    import os
    import signal

    assert "profile ready" in kernel.run("%%nsys --name before\nkept = 7")
    session = kernel.session
    victims = [int(line.split()[0]) for line in nsys_of(session) if what in line]
    assert victims, nsys_of(session)
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    end = time.monotonic() + 20
    while any(" launch " in line for line in nsys_of(session)) and time.monotonic() < end:
        time.sleep(0.2)
    out = kernel.run("%%nsys --name after\nprint('not run', kept)")
    assert f"nsys session {session} has ended" in out and "%%nsys --fresh" in out, out
    assert "not run" not in out.replace("was not run", "")
    assert "kept 7" in kernel.run("print('kept', kept)")
    after = next((kernel.cwd / "nsight-profiles").glob("after-*"))
    assert (after / "cell.py").read_text().strip() == "print('not run', kept)"  # nothing lost: the cell stays


@requires_ncu
def test_the_nsight_compute_kernel_runs_under_ncu_in_its_namespace_and_leaves_nothing(tmp_path):
    """`nsight-magic kernel install --ncu`: a kernel of its own name under `ncu` (only our cell ranges measured),
    in its own PID namespace, its report growing beside the notebook.  Without a GPU its %%ncu says so in one
    line; its %%nsys runs in a fresh process; shutting it down leaves no process of it."""
    from kernels import DrivenKernel

    prefix = tmp_path / "prefix"
    subprocess.run([sys.executable, "-m", "nsight_magic.cli", "kernel", "install", "--prefix", str(prefix), "--ncu"],
                   check=True, capture_output=True, timeout=60)
    kernels = prefix / "share" / "jupyter" / "kernels"
    spec = json.loads((kernels / "nsight-magic-ncu" / "kernel.json").read_text())
    assert spec["display_name"] == "Python 3 (nsight-magic, Nsight Compute in place)"
    listed = subprocess.run([sys.executable, "-m", "nsight_magic.cli", "kernel", "list"], capture_output=True,
                            text=True, timeout=60, env={**os.environ, "JUPYTER_PATH": str(kernels.parent)}).stdout
    assert "nsight-magic-ncu\tncu --set basic" in listed, listed
    k = DrivenKernel(tmp_path / "work", "nsight-magic-ncu", kernels)
    session = None
    try:
        cfg = json.loads(k.run("import os; print(os.environ['NSIGHT_MAGIC_INPLACE'])"))
        session = cfg["session"]
        assert cfg["tool"] == "ncu" and Path(cfg["report"]).parent == k.cwd / "nsight-profiles" / ".ncu-sessions"
        first = k.run("print(open('/proc/1/cmdline').read().replace(chr(0), ' '))")
        assert "nsight_magic.inside.kernel_host" in first, first  # the namespace's first process is ours
        assert "--nvtx-include regex:nsight-magic@ncu-.*/" in cfg["launch"] and nsys_of(session), cfg["launch"]
        out = k.run("%%ncu\nprint('not run')")
        assert "no NVIDIA GPU is visible" in out and "not run" not in out.replace("was not run", ""), out
        out = k.run("%%nsys --name fresh\nprint('fresh under nsys')")
        assert "not in place: this kernel runs under Nsight Compute" in out and "fresh under nsys" in out, out
        assert "profile ready" in out, out
    finally:
        k.close()
    assert _gone_within([session]) == []
