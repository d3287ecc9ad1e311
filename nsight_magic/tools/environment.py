"""The environment a profiled process starts with: an allow-list, so that no secret reaches a saved report.

Nsight Systems (and Nsight Compute) store the profiled process's whole environment in the report, and reports get
shared.  No deny-list can know every name a team gives its secrets (`MY_PASSPHRASE`, `SERVICE_CREDS`, a connection
string in `CALLBACK`), so the profiled process starts, as sudo's `env_reset` + `env_keep` and CI runners do, from
what Python, its environment (venv, conda), CUDA, NCCL, PyTorch, the thread pools and the locale need, plus the
variables the user names (`--env NAME`, `%config NsightMagics.pass_env`, `NSIGHT_MAGIC_PASS_ENV` for headless
runs).  What the allow-list lets through is still checked by the secret rules of `options.is_secret` (a name like
`CUDA_API_TOKEN`, a password inside `PIP_INDEX_URL`): a second net.  What the user names is passed as it is, and so
is recorded in the report: the README says so.
"""
from __future__ import annotations

import os

from ..options import SECRET_NAME_PATTERNS, is_secret
from .injection import injection_free

PASS_ENV = "NSIGHT_MAGIC_PASS_ENV"              # comma-separated names to pass (headless runs, the command line)
SECRET_PATTERNS_ENV = "NSIGHT_MAGIC_SECRET_PATTERNS"  # extra name fragments the second net drops

# What the profiled process needs, by name ...
ALLOWED_NAMES = frozenset({
    # the process and its user
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "PWD", "HOSTNAME", "TZ", "LANG", "LANGUAGE",
    "TMPDIR", "TMP", "TEMP", "XDG_RUNTIME_DIR", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME",
    "DISPLAY", "COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR",
    # Python and its environment
    "PYTHONPATH", "PYTHONHOME", "PYTHONUNBUFFERED", "PYTHONHASHSEED", "PYTHONWARNINGS", "PYTHONDONTWRITEBYTECODE",
    "PYTHONIOENCODING", "PYTHONUTF8", "PYTHONFAULTHANDLER", "PYTHONBREAKPOINT", "PYTHONNOUSERSITE",
    "PYTHONUSERBASE", "PYTHONSAFEPATH", "PYTHONPYCACHEPREFIX", "VIRTUAL_ENV", "VIRTUAL_ENV_PROMPT",
    "LD_LIBRARY_PATH", "LIBRARY_PATH", "CPATH", "PKG_CONFIG_PATH",
    "MPLBACKEND", "MPLCONFIGDIR", "NUMBA_CACHE_DIR", "IPYTHONDIR",
    # the model caches a setup reads from (not their tokens)
    "HF_HOME", "HF_DATASETS_CACHE", "HF_HUB_CACHE", "HF_HUB_OFFLINE", "TRANSFORMERS_CACHE", "TRANSFORMERS_OFFLINE",
    "TORCH_HOME", "XLA_FLAGS",
    # several processes: torchrun's rendezvous, MPI and Slurm placement
    "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
})
# ... and by prefix.
ALLOWED_PREFIXES = (
    "LC_",                                                   # the locale
    "CONDA_",                                                # conda's environment
    "CUDA_", "NVIDIA_", "NV_", "CUDNN_", "CUBLAS_", "CUBLASLT_", "CUFFT_", "NVTE_",  # CUDA and its libraries
    "NSYS_", "NCCL_", "UCX_", "NVSHMEM_", "GDRCOPY_",       # Nsight Systems, NCCL and its transports
    "TORCH_", "PYTORCH_", "TORCHINDUCTOR_", "TORCHDYNAMO_", "TORCHELASTIC_", "TRITON_",  # PyTorch, its compilers
    "OMP_", "MKL_", "KMP_", "GOMP_", "OPENBLAS_", "BLIS_", "NUMEXPR_", "VECLIB_", "TBB_",  # thread pools
    "JAX_", "TF_", "XLA_",                                   # other frameworks' switches
    "NSIGHT_MAGIC_",                                         # ours
    "JPY_", "JUPYTER_",                                      # Jupyter's: the notebook's path, its config folders
)


def allowed_name(name: str) -> bool:
    return name in ALLOWED_NAMES or name.startswith(ALLOWED_PREFIXES)


def passed_names(extra=()) -> tuple[str, ...]:
    """What the user names: `extra` (--env, %config NsightMagics.pass_env) and NSIGHT_MAGIC_PASS_ENV."""
    names = [n.strip() for n in os.environ.get(PASS_ENV, "").split(",") if n.strip()]
    return tuple(dict.fromkeys([*names, *(n.strip() for n in extra if n and n.strip())]))


def profiled_environment(base: dict | None = None, passed=()) -> tuple[dict, list[str]]:
    """(the profiled process's environment, the names left out): the allow-list, checked by the secret rules,
    plus the names in `passed` (and NSIGHT_MAGIC_PASS_ENV) as they are."""
    base = injection_free(base)
    extra = tuple(p.strip().upper() for p in base.get(SECRET_PATTERNS_ENV, "").split(",") if p.strip())
    patterns = SECRET_NAME_PATTERNS + extra
    names = set(passed_names(passed))
    env, withheld = {}, []
    for k, v in base.items():
        if k in names or (allowed_name(k) and not is_secret(k, v, patterns)):
            env[k] = v
        else:
            withheld.append(k)
    return env, sorted(withheld)
