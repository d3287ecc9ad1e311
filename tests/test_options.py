"""Options: pass-through validation, trace on CPU-only machines, secret-looking names, free names of a cell."""
from __future__ import annotations

import pytest

from nsight_magic.errors import OptionError
from nsight_magic.options import (NSYS_OWNED_FLAGS, NsysOptions, is_secret_name, nsys_default_args,
                                  trace_for_machine, validate_passthrough, wants_kernel_symbols)
from nsight_magic.run import child_environment
from nsight_magic.inside.state import free_names


@pytest.mark.parametrize("args", ["-o x", "--output=x", "-ox", "--force-overwrite true", "-x true",
                                  "--capture-range=nvtx", "--session-new s", "-t cuda"])
def test_owned_nsys_flags_are_refused(args):
    with pytest.raises(OptionError, match="may not contain"):
        validate_passthrough(args, NSYS_OWNED_FLAGS, "nsys")


def test_other_nsys_flags_pass_and_replace_our_defaults():
    args = validate_passthrough("--sample=cpu --cudabacktrace all", NSYS_OWNED_FLAGS, "nsys")
    assert args == ("--sample=cpu", "--cudabacktrace", "all")
    assert nsys_default_args(args) == ["--cpuctxsw=none"]
    assert nsys_default_args(()) == ["--sample=none", "--cpuctxsw=none"]


@pytest.mark.parametrize("args,wanted", [
    ("", False), ("--cudabacktrace all --osrt-threshold=1000", False), ("--cuda-memory-usage=true", False),
    ("--sample=cpu", True), ("-s cpu", True), ("--samp=process-tree", True), ("--cpuctxsw=process-tree", True),
    ("--backtrace=dwarf", True), ("-b fp", True), ("--event-sample=system-wide", True), ("--os-events=0", True),
    ("--cpu-core-events=2", True), ("--sample=none", True)])  # none given by the user: left alone
def test_kernel_symbols_are_wanted_where_nsys_may_record_kernel_frames(args, wanted):
    assert wants_kernel_symbols(validate_passthrough(args, NSYS_OWNED_FLAGS, "nsys")) is wanted


def test_unbalanced_quotes_are_a_clear_error():
    with pytest.raises(OptionError, match="could not be parsed"):
        validate_passthrough("--foo 'bar", NSYS_OWNED_FLAGS, "nsys")


def test_cuda_is_dropped_without_gpu_with_a_note():
    assert trace_for_machine("cuda,nvtx,osrt", gpu=True) == ("cuda,nvtx,osrt", None)
    trace, note = trace_for_machine("cuda,nvtx,osrt,cublas", gpu=False)
    assert trace == "nvtx,osrt" and "no GPU visible" in note


def test_bad_option_values():
    with pytest.raises(OptionError):
        NsysOptions(capture="sometimes")
    for t in (0, -1, float("nan"), float("inf")):
        with pytest.raises(OptionError, match="positive, finite"):
            NsysOptions(timeout=t)
    with pytest.raises(OptionError):
        NsysOptions(return_vars=("not a name",))


@pytest.mark.parametrize("name,secret", [
    ("GITHUB_TOKEN", True), ("HF_TOKEN", True), ("AWS_SECRET_ACCESS_KEY", True), ("OPENAI_API_KEY", True),
    ("DB_PASSWORD", True), ("SSH_AUTH_SOCK", True), ("GOOGLE_APPLICATION_CREDENTIALS", True),
    ("PGPASSWORD", True), ("KAGGLE_KEY", True), ("MYSQL_PWD", True), ("SSH_CONNECTION", True),
    ("TIKTOKEN_CACHE_DIR", False), ("GIT_AUTHOR_NAME", False), ("PATH", False), ("CUDA_VISIBLE_DEVICES", False),
    ("PWD", False), ("GITHUB_PAT", True), ("MY_PASS", True), ("SENTRY_DSN", True), ("JWT", True), ("BEARER", True),
    ("SLACK_WEBHOOK_URL", True), ("PATH_PREFIX", False), ("PASSTHROUGH_MODE", False), ("DISPLAY", False),
])
def test_secret_looking_names(name, secret):
    assert is_secret_name(name) is secret


@pytest.mark.parametrize("value,secret", [
    ("postgres://app:s3cr3t@db.example:5432/prod", True), ("https://user:tok@pypi.example/simple", True),
    ("https://hooks.slack.com/services/T000/B000/XXXX", True), ("https://discord.com/api/webhooks/1/abc", True),
    ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.sig", True), ("ghp_" + "a1" * 18, True),
    ("xoxb-1234567890-abcdef", True), ("sk-" + "A" * 40, True), ("AKIAIOSFODNN7EXAMPLE", True),
    ("https://pypi.org/simple", False), ("/usr/local/bin:/usr/bin", False), ("user@example.com", False),
    ("en_US.UTF-8", False), ("ssh://git@github.com/x/y", False),
])
def test_secret_values_whatever_the_name(value, secret):
    from nsight_magic.options import is_secret

    assert is_secret("SOME_SETTING", value) is secret


def test_child_environment_is_an_allow_list_with_what_the_user_passes(monkeypatch):
    base = {"MY_TOKEN": "1", "KEEP_TOKEN": "2", "MY_PASSPHRASE": "3", "PLAIN": "4", "PATH": "/usr/bin",
            "CUDA_VISIBLE_DEVICES": "0", "LC_ALL": "C", "OMP_NUM_THREADS": "4", "CUDA_API_TOKEN": "5",
            "PIP_INDEX_URL": "https://u:p@pypi.example/simple", "TORCH_HOME": "/cache",
            "NSIGHT_MAGIC_SECRET_PATTERNS": "home"}
    monkeypatch.setenv("NSIGHT_MAGIC_PASS_ENV", "KEEP_TOKEN")
    env = child_environment(base, passed=("PLAIN",))
    # what Python, CUDA, the thread pools and the locale need, and what the user passed, nothing else
    assert {k: env[k] for k in ("PATH", "CUDA_VISIBLE_DEVICES", "LC_ALL", "OMP_NUM_THREADS")} == {
        "PATH": "/usr/bin", "CUDA_VISIBLE_DEVICES": "0", "LC_ALL": "C", "OMP_NUM_THREADS": "4"}
    assert env["KEEP_TOKEN"] == "2" and env["PLAIN"] == "4"  # passed by name, as they are
    assert not {"MY_TOKEN", "MY_PASSPHRASE", "PIP_INDEX_URL"} & set(env)
    # the secret rules are a second net under the allow-list: a token name, extra patterns
    assert "CUDA_API_TOKEN" not in env and "TORCH_HOME" not in env


def test_env_names_are_checked():
    from nsight_magic.magics import NsightMagics, parse_line
    from nsight_magic.options import nsys_options_from_args

    opts = nsys_options_from_args(parse_line(NsightMagics.nsys, "--env HF_TOKEN,MY_MODE"), default_name="c")
    assert opts.pass_env == ("HF_TOKEN", "MY_MODE")
    with pytest.raises(OptionError, match="--env 'A=1': give the names of environment variables"):
        nsys_options_from_args(parse_line(NsightMagics.nsys, "--env A=1"), default_name="c")


def test_free_names_skip_setup_definitions_and_builtins():
    ns = {"x": 1, "model": object(), "helper": len, "unused": 2, "np": object()}
    cell = "import math\ny = helper(x) + len([1])\nmodel.eval()\nz = math.pi"
    assert free_names(cell, ["import numpy as np\ndef helper(v):\n    return v"], ns) == ["model", "x"]
    # IPython's input history (_i, _i7, _ii) is not sent; other underscore names are
    assert free_names("print(_i3, _img)", [], {"_i3": "x", "_img": 1}) == ["_img"]


def test_a_name_the_cell_binds_before_it_reads_it_is_not_sent():
    """`t = time.perf_counter()` first, `print(t)` after: the notebook's t is not the cell's (it was listed as
    "sending 2 variables: t (float, 21 B), ..."); a read before the binding, a binding that may not happen (a loop,
    a branch) or a read in a function defined before keep the name free."""
    ns = {"t": 1.0, "x": 2, "y": 3, "w": 4, "z": 5, "model": object(), "time": __import__("time")}
    cell = ("t = time.perf_counter()\nx = x + 1\nfor i in range(2):\n    y = i\nif x:\n    z = 1\n"
            "def get():\n    return w\nw = 0\nmodel2 = model\nprint(t, x, y, z, get(), model2)")
    assert free_names(cell, [], ns) == ["model", "time", "w", "x", "y", "z"]
