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
import re

from ..options import SECRET_NAME_PATTERNS, is_secret
from ..settings import current
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
# ... and under a prefix, as sudo's env_keep: a prefix is no promise (CUDA_HIDDEN, CONDA_TOKENISH, MKL_CREDS and
# TRITON_KEYISH held planted secrets), so where a stack reads a known set of names only those pass ...
KNOWN_UNDER_PREFIX = {
    "LC_": ("ALL", "CTYPE", "NUMERIC", "TIME", "COLLATE", "MONETARY", "MESSAGES", "PAPER", "NAME", "ADDRESS",
            "TELEPHONE", "MEASUREMENT", "IDENTIFICATION"),
    "CONDA_": ("PREFIX", "DEFAULT_ENV", "EXE", "PYTHON_EXE", "SHLVL", "PROMPT_MODIFIER", "ROOT", "PKGS_DIRS",
               "ENVS_PATH", "ENVS_DIRS", "CHANGEPS1", "AUTO_ACTIVATE_BASE"),
    "CUDA_": ("VISIBLE_DEVICES", "DEVICE_ORDER", "LAUNCH_BLOCKING", "HOME", "PATH", "ROOT", "VERSION", "BIN_PATH",
              "TOOLKIT_ROOT_DIR", "NVCC_EXECUTABLE", "MODULE_LOADING", "MODULE_DATA_LOADING", "CACHE_PATH",
              "CACHE_DISABLE", "CACHE_MAXSIZE", "FORCE_PTX_JIT", "DISABLE_PTX_JIT", "FORCE_JIT",
              "DEVICE_MAX_CONNECTIONS", "DEVICE_MAX_COPY_CONNECTIONS", "AUTO_BOOST", "SCALE_LAUNCH_QUEUES",
              "MPS_PIPE_DIRECTORY", "MPS_LOG_DIRECTORY", "MPS_ACTIVE_THREAD_PERCENTAGE",
              "MPS_PINNED_DEVICE_MEM_LIMIT", "ENABLE_COREDUMP_ON_EXCEPTION", "ENABLE_CPU_COREDUMP_ON_EXCEPTION",
              "ENABLE_USER_TRIGGERED_COREDUMP", "COREDUMP_FILE", "COREDUMP_SHOW_PROGRESS",
              "DEVICE_WAITS_ON_EXCEPTION", "MANAGED_FORCE_DEVICE_ALLOC", "ARCH_LIST"),
    "NVIDIA_": ("VISIBLE_DEVICES", "DRIVER_CAPABILITIES", "REQUIRE_CUDA", "PRODUCT_NAME", "CUDA_END_OF_LIFE",
                "DISABLE_REQUIRE", "MIG_CONFIG_DEVICES", "TF32_OVERRIDE"),
    "CUDNN_": ("VERSION", "LOGINFO_DBG", "LOGWARN_DBG", "LOGERR_DBG", "LOGDEST_DBG", "LOGLEVEL_DBG",
               "FRONTEND_LOG_INFO", "FRONTEND_LOG_FILE", "CONV_WSCAP_DBG"),
    "CUBLAS_": ("WORKSPACE_CONFIG", "LOGINFO_DBG", "LOGDEST_DBG", "EMULATE_SINGLE_PRECISION"),
    "CUBLASLT_": ("LOG_LEVEL", "LOG_MASK", "LOG_FILE", "WORKSPACE_SIZE"),
    "CUFFT_": ("LOG_LEVEL",),
    "MKL_": ("NUM_THREADS", "DYNAMIC", "THREADING_LAYER", "INTERFACE_LAYER", "SERVICE_FORCE_INTEL",
             "ENABLE_INSTRUCTIONS", "CBWR", "DEBUG_CPU_TYPE", "VERBOSE", "NUM_STRIPES", "DOMAIN_NUM_THREADS"),
    "OMP_": ("NUM_THREADS", "DYNAMIC", "PROC_BIND", "PLACES", "STACKSIZE", "WAIT_POLICY", "MAX_ACTIVE_LEVELS",
             "NESTED", "SCHEDULE", "THREAD_LIMIT", "DISPLAY_ENV", "DISPLAY_AFFINITY", "AFFINITY_FORMAT",
             "DEFAULT_DEVICE", "TARGET_OFFLOAD", "TOOL", "TOOL_LIBRARIES", "CANCELLATION", "MAX_TASK_PRIORITY",
             "TEAMS_THREAD_LIMIT", "NUM_TEAMS"),
    "KMP_": ("AFFINITY", "BLOCKTIME", "SETTINGS", "DUPLICATE_LIB_OK", "HW_SUBSET", "INIT_AT_FORK", "WARNINGS",
             "STACKSIZE"),
    "GOMP_": ("CPU_AFFINITY", "SPINCOUNT", "STACKSIZE", "DEBUG"),
    "OPENBLAS_": ("NUM_THREADS", "CORETYPE", "VERBOSE", "MAIN_FREE", "DEFAULT_NUM_THREADS"),
    "BLIS_": ("NUM_THREADS", "JC_NT", "IC_NT", "JR_NT", "IR_NT", "ARCH_TYPE"),
    "NUMEXPR_": ("NUM_THREADS", "MAX_THREADS"),
    "VECLIB_": ("MAXIMUM_THREADS",),
    "TBB_": ("NUM_THREADS",),
    "JPY_": ("PARENT_PID", "SESSION_NAME", "INTERRUPT_EVENT"),
    "JUPYTER_": ("CONFIG_DIR", "CONFIG_PATH", "DATA_DIR", "RUNTIME_DIR", "PATH", "PLATFORM_DIRS",
                 "PREFER_ENV_PATH", "SERVER_ROOT"),
}
KNOWN_PATTERN = re.compile(r"CONDA_PREFIX_\d+$")  # conda's stacked environments
# ... and where a family of tools takes more switches than a list can name (PyTorch's and its compilers', NCCL's,
# nsys's, ours), any name of the family that does not read like a secret's
FAMILIES = ("NV_", "NVTE_", "NSYS_", "NCCL_", "UCX_", "NVSHMEM_", "GDRCOPY_", "TORCH_", "PYTORCH_", "TORCHINDUCTOR_",
            "TORCHDYNAMO_", "TORCHELASTIC_", "TRITON_", "JAX_", "TF_", "XLA_", "NSIGHT_MAGIC_")
SECRET_WORDS = re.compile(r"TOKEN|KEY|CRED|SECRET|PASSW|PASSPHRASE|AUTH|PRIVATE|SIGNATURE|COOKIE|SALT|CERT")
ALLOWED_PREFIXES = (*KNOWN_UNDER_PREFIX, *FAMILIES)
_KNOWN = frozenset(f"{p}{n}" for p, names in KNOWN_UNDER_PREFIX.items() for n in names)


def allowed_name(name: str) -> bool:
    """Whether the allow-list passes this name: by name, by its prefix's list, or as a family's switch that does
    not read like a secret (the secret rules of options.is_secret check what passes, by name and value)."""
    if name in ALLOWED_NAMES or name in _KNOWN or KNOWN_PATTERN.fullmatch(name):
        return True
    return name.startswith(FAMILIES) and not SECRET_WORDS.search(name.upper())


def passed_names(extra=()) -> tuple[str, ...]:
    """What the user names: `extra` (--env, %config NsightMagics.pass_env) and NSIGHT_MAGIC_PASS_ENV."""
    names = [n.strip() for n in os.environ.get(PASS_ENV, "").split(",") if n.strip()]
    return tuple(dict.fromkeys([*names, *(n.strip() for n in extra if n and n.strip())]))


def profiled_environment(base: dict | None = None, passed=()) -> tuple[dict, list[str]]:
    """(the profiled process's environment, the names left out): the allow-list, checked by the secret rules,
    plus the names in `passed` (and NSIGHT_MAGIC_PASS_ENV) as they are."""
    base = injection_free(base)
    chosen = current().secret_patterns  # set (%config NsightMagics.secret_patterns), else the variable
    extra = tuple(p.strip().upper() for p in (base.get(SECRET_PATTERNS_ENV, "").split(",") if chosen is None
                                               else chosen) if p.strip())
    patterns = SECRET_NAME_PATTERNS + extra
    names = set(passed_names(passed))
    env, withheld = {}, []
    for k, v in base.items():
        if k in names or (allowed_name(k) and not is_secret(k, v, patterns)):
            env[k] = v
        else:
            withheld.append(k)
    return env, sorted(withheld)
