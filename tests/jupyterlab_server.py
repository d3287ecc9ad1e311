"""A real `jupyter lab` for the browser tests: 127.0.0.1, a free port, a token, a temporary root, and its own config,
data, runtime, settings and workspace folders (and the kernels' IPython folder), so that neither a user's
~/.jupyter nor a saved layout can change what the test sees, and the test leaves nothing behind.

NSIGHT_TEST_JUPYTERLAB_SITE may name a folder made with `pip install --target DIR jupyterlab` for machines whose
environment lacks JupyterLab (the server then runs with DIR on its sys.path; the kernel keeps this environment).
"""
from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import warnings
from pathlib import Path

import pytest

from conftest import REPO, requires_chromium

SITE = os.environ.get("NSIGHT_TEST_JUPYTERLAB_SITE")
TOKEN = "nsight-magic-test"

needs_jupyterlab = [
    pytest.mark.browser,
    requires_chromium,
    pytest.mark.skipif(importlib.util.find_spec("jupyterlab") is None and not SITE,
                       reason="JupyterLab not installed (pip install -e '.[test]')"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def isolated_env(tmp_path: Path) -> dict:
    """The environment of a Jupyter process that reads and writes only below tmp_path."""
    env = dict(os.environ)
    for var, sub in (("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_DATA_DIR", "data"),
                     ("JUPYTER_RUNTIME_DIR", "runtime"), ("JUPYTERLAB_SETTINGS_DIR", "lab-settings"),
                     ("JUPYTERLAB_WORKSPACES_DIR", "lab-workspaces"), ("IPYTHONDIR", "ipython")):
        d = tmp_path / "jupyter-home" / sub
        d.mkdir(parents=True, exist_ok=True)
        env[var] = str(d)
    env.pop("JPY_SESSION_NAME", None)
    # no build check on every page load (JupyterLab asks node and jlpm whether the app needs a rebuild: 0.6 CPU-s
    # a page here, and a prebuilt extension never needs one)
    labconfig = Path(env["JUPYTER_CONFIG_DIR"]) / "labconfig"
    labconfig.mkdir(exist_ok=True)
    (labconfig / "page_config.json").write_text('{"buildCheck": false, "buildAvailable": false}')
    # no news pop-up over the notebook, no update check
    settings = Path(env["JUPYTERLAB_SETTINGS_DIR"]) / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True, exist_ok=True)
    (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false", "checkForUpdates": false}')
    return env


@contextlib.contextmanager
def jupyterlab_server(tmp_path: Path):
    """Yields (base URL, root folder); stops the server and every kernel it started."""
    port = _free_port()
    root = tmp_path / "notebooks"
    root.mkdir()
    argv = ["jupyter-lab", "--no-browser", f"--port={port}", "--ServerApp.ip=127.0.0.1",
            f"--IdentityProvider.token={TOKEN}", f"--ServerApp.root_dir={root}", "--allow-root"]
    env = isolated_env(tmp_path)
    if SITE:
        argv.append(f"--app-dir={Path(SITE) / 'share' / 'jupyter' / 'lab'}")
        env["JUPYTER_PATH"] = str(Path(SITE) / "share" / "jupyter")
    code = (f"import sys; sys.path.append({SITE!r}) if {bool(SITE)} else None; "
            f"from jupyterlab.labapp import main; sys.argv = {argv!r}; sys.exit(main())")
    log = open(tmp_path / "server.log", "wb")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 90
        while True:  # poll the server's API until it answers
            try:
                urllib.request.urlopen(f"{base}/api/status?token={TOKEN}", timeout=2)
                break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    pytest.fail(f"JupyterLab did not start: {(tmp_path / 'server.log').read_text()[-2000:]}")
                time.sleep(0.3)
        yield base, root
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the server and the kernels it started
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


def answer_dialog(page, shot: str = "jupyterlab_dialog") -> None:
    """A JupyterLab dialog over the notebook (it takes the clicks): one that says the kernel failed fails the test
    with its text (and a screenshot, test-artifacts/SHOT.png); another (a kernel choice, a file changed on disk) is
    accepted, and its text kept as a warning."""
    dialog = page.locator(".jp-Dialog")
    if not dialog.count() or not dialog.first.is_visible():
        return
    text = " ".join(dialog.first.inner_text().split())
    # its title says what it is ("Kernel Restarting", "Error Starting Kernel"); the body names files, which may
    # hold any word ("Select kernel for: restart.ipynb")
    title = " ".join(dialog.first.locator(".jp-Dialog-header").first.inner_text().split())
    if re.search(r"died|dead|restart|error|fail", title, re.IGNORECASE):
        (REPO / "test-artifacts").mkdir(exist_ok=True)
        page.screenshot(path=str(REPO / "test-artifacts" / f"{shot}.png"))
        raise AssertionError(f"JupyterLab showed: {text!r}")
    warnings.warn(f"JupyterLab showed a dialog, accepted: {text!r}")
    page.locator(".jp-Dialog .jp-mod-accept").first.click()
