"""A multi-node job: one report per rank, analysed in parallel on Dask, combined into the ranks' table, the
straggler per step, the job's findings and verdict.

    job = nsight_magic.open_job("prof/")                      # a LocalCluster sized to the machine
    job = nsight_magic.open_job("prof/", client=Client("tcp://scheduler:8786"))   # the reports read where they lie
    job.ranks; job.ranks_table(); job.stragglers_by_step(); job.findings(); job.bottleneck()
    job.kernel_summary(by="rank"); job.timeline_report([0, 5])   # the chosen ranks merged on one clock, opened

Each report is one Dask task (jobs.rank_task.summarize_rank): only its summaries, steps, NCCL timing and
utilisation bins come back, so the notebook's memory does not grow with the reports' size.  Then one rank of each
group of ranks that spend their time alike (jobs.alike), and the straggler, are diagnosed (verdict and findings,
jobs.rank_task.diagnose_rank): a diagnosis costs a few reads, and the ranks of a data-parallel job say the same.
Clocks of different hosts are aligned on each report's UTC session start, as readers.nsys_merge does.
"""
from __future__ import annotations

import importlib.util
import logging
import os
import signal
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from ..errors import OptionError, ReportWarning
from .discover import RankFile, find_rank_reports, missing_ranks
from .rank_task import RankDiagnosis, RankResult, diagnose_rank, summarize_rank

SCHEDULER_TIMEOUT_S = 10  # an address nobody answers at is said in one line, not after 30 s in a traceback

# (done, total, the result that just came): the reports read, then the diagnoses (total grows by their number)
ProgressCallback = Callable[[int, int, "RankResult | RankDiagnosis"], None]


def open_job(source, client=None, *, pattern: str | None = None, scheduler: str | None = None,
             progress: ProgressCallback | None = None) -> "Job":
    """Open a job's per-rank reports (a folder, or a list of paths) as one Job; see the module docstring.

    client: a distributed.Client to run the tasks on (the reports must be readable at the same paths on its
    workers); scheduler: the address of a running scheduler (e.g. dask-jobqueue on Slurm) to connect to instead;
    neither: a LocalCluster with one single-threaded worker process per core (at most one per report), closed when
    the job is loaded.  progress(done, total, result) is called as each report comes back."""
    files = find_rank_reports(source, pattern)
    own = None
    env = dict(os.environ)
    try:
        if client is None:
            require_dask()
            workers = max(1, min(os.cpu_count() or 1, len(files)))
            if scheduler:
                from distributed import Client

                try:
                    client = own = Client(scheduler, timeout=SCHEDULER_TIMEOUT_S)
                except (OSError, TimeoutError, ValueError) as e:
                    raise OptionError(f"--scheduler {scheduler}: no Dask scheduler answered there within "
                                      f"{SCHEDULER_TIMEOUT_S:g} s ({type(e).__name__}); start one (dask scheduler), "
                                      "check its address, or leave --scheduler out to use this machine") from None
            else:
                cluster = local_cluster(workers)  # imports Dask while its workers' forkserver imports theirs
                try:
                    from distributed import Client

                    client = own = Client(cluster)
                except BaseException:  # Ctrl-C between the two: the started cluster is closed, not left to atexit
                    cluster.close()
                    raise
        results = _run(client, files, progress)
    finally:
        if own is not None:
            cluster = getattr(own, "cluster", None)
            own.close()
            if cluster is not None and not scheduler:
                cluster.close()
        _restore_environ(env)
    root = Path(source) if isinstance(source, (str, Path)) else None
    if root is not None:  # a gap in a folder's ranks is named like an unreadable report
        top = max(f.rank for f in files)
        results += [RankResult(r, str(root), error=f"no report in {root} (ranks 0-{top} expected from the highest)")
                    for r in missing_ranks(files)]
        results.sort(key=lambda r: r.rank)
    return Job(results, root)


JOBS_EXTRA = "pip install 'nsight-magic[jobs]'"


def require_dask() -> None:
    """An OptionError saying how to install Dask where it is not installed (the `jobs` extra, the only part of
    nsight-magic that needs it), without importing it: a LocalCluster's start imports it while its workers'
    forkserver imports theirs."""
    try:
        found = importlib.util.find_spec("distributed") is not None
    except (ImportError, ValueError):  # ValueError: a module set to None in sys.modules
        found = False
    if not found:
        raise OptionError(f"a job's per-rank reports are analysed on Dask, which is not installed here: "
                          f"{JOBS_EXTRA} (or pip install distributed)")


def local_cluster(workers: int):
    """A LocalCluster of single-threaded worker processes, as open_job starts one.  Dask's nannies export
    MALLOC_TRIM_THRESHOLD_=65536 to their workers, which made a rank's task 1.5x slower here (pandas frees and
    re-allocates large blocks): left unset.

    Jupyter's Ctrl-C signals the kernel's whole process group: workers that took it mid-start printed a dozen
    tracebacks, and a start cut short by a KeyboardInterrupt left its cluster running until the kernel ended.  So
    the cluster starts in a thread of its own that blocks SIGINT (its event loop and the worker processes it
    spawns inherit the mask, which survives fork and exec); a Ctrl-C in the caller waits for that start to end,
    closes the cluster and goes on as a KeyboardInterrupt."""
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()  # its first start unblocks SIGINT in the thread that starts it
    box: dict = {}
    started = threading.Event()
    # an Event, not Thread.join: a join cut short by Ctrl-C marks a running thread stopped on Python 3.11
    threading.Thread(target=_start_cluster, args=(workers, box, started), name="nsight-magic: Dask start",
                     daemon=True).start()
    try:
        while not started.wait(0.1):
            pass
    except KeyboardInterrupt:
        started.wait()
        if "cluster" in box:
            box["cluster"].close()
        raise
    if "error" in box:
        raise box["error"]
    return box["cluster"]


# What a worker's tasks import, loaded once in the forkserver the workers are forked from (Dask's own list, then
# ours; a module that does not import is left out by multiprocessing)
WORKER_PRELOAD = ("distributed", "dask", "msgpack", "cloudpickle", "tornado", "toolz", "numpy", "pandas", "pyarrow",
                  "adbc_driver_sqlite.dbapi", "nsight_magic.jobs.rank_task", "nsight_magic.readers.nsys",
                  "nsight_magic.readers.nsys_cache", "nsight_magic.analysis.bottleneck",
                  "nsight_magic.analysis.findings", "nsight_magic.analysis.ranks")


def _start_forkserver() -> str:
    """The workers are forked from a forkserver that has imported what their tasks need, rather than spawned (Dask's
    default) as fresh interpreters that import Dask, then pandas and our readers in their first task: on the lent
    GPU host's 16 cores, 16 spawned workers took 3.3 s to start and each about 0.7 s more in its first task
    (docs/jobs.md).  multiprocessing's forkserver (one per process) is a fresh interpreter, not a fork of the
    kernel, and ends with it; started here, before this process imports Dask, it imports in parallel.  Started
    from the thread that blocks SIGINT: the mask is inherited by it and by every worker it forks.  The start
    method Dask is to use: spawn where there is no forkserver (not on Linux or macOS)."""
    import multiprocessing
    import multiprocessing.forkserver as forkserver

    if "forkserver" not in multiprocessing.get_all_start_methods():
        return "spawn"
    forkserver.set_forkserver_preload(list(WORKER_PRELOAD))
    forkserver.ensure_running()
    return "forkserver"


def _start_cluster(workers: int, box: dict, started: threading.Event) -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        method = _start_forkserver()
        import dask
        from distributed import LocalCluster

        # Dask's preload for its forkserver comes too late to matter (ours runs)
        with dask.config.set({"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None,
                              "distributed.worker.multiprocessing-method": method}), \
                warnings.catch_warnings():
            # no dashboard; the scheduler's HTTP routes take another port when 8787 is taken, which is no news to
            # users; a task's error comes back through its future, and what else Dask logs (heartbeats failing as a
            # stopped job's cluster closes) is not the user's business
            warnings.filterwarnings("ignore", message="Port .* is already in use")
            box["cluster"] = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                          dashboard_address=None, silence_logs=logging.CRITICAL)
    except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
        box["error"] = e
    finally:
        started.set()


def _restore_environ(before: dict) -> None:
    """Dask's nannies set their workers' variables (OMP_NUM_THREADS=1, PYTHONHASHSEED, ...) in the process that
    starts them, here the user's kernel; put its environment back, so that later profiled cells get the user's."""
    for k in set(os.environ) - set(before):
        del os.environ[k]
    for k, v in before.items():
        if os.environ.get(k) != v:
            os.environ[k] = v


def _run(client, files: list[RankFile], progress) -> list[RankResult]:
    from distributed import as_completed

    def submit(fn, what, rank, path):
        return client.submit(fn, rank, path, key=f"nsight-magic-{what}-{rank}-{Path(path).name}", pure=False)

    def gather(futures, done, total):
        out = []
        for i, fut in enumerate(as_completed(futures), done + 1):
            out.append(fut.result())
            if progress:
                progress(i, total, out[-1])
        return out

    # The first rank's diagnosis starts with the reads: whatever the grouping, it represents its group (jobs.alike),
    # and the workers stay busy to the end instead of one waiting while the other diagnoses.  Only an export: a
    # report still to import or export is read once, by its summarize_rank.
    early = files[:1] if files and files[0].path.suffix == ".sqlite" else []
    futures = [submit(diagnose_rank, "diagnosis", f.rank, str(f.path)) for f in early]
    futures += [submit(summarize_rank, "rank", f.rank, str(f.path)) for f in files]
    got = gather(futures, 0, len(futures))
    results = sorted((r for r in got if isinstance(r, RankResult)), key=lambda r: r.rank)
    diagnosed = {d.rank: d for d in got if isinstance(d, RankDiagnosis)}
    done = len(futures)

    def diagnose(jobs):  # a round of diagnoses (a second one only where one failed): the progress counts on
        nonlocal done
        out = gather([submit(diagnose_rank, "diagnosis", *j) for j in jobs], done, done + len(jobs))
        done += len(jobs)
        return out

    return diagnose_groups(results, diagnose, diagnosed)


def diagnose_groups(results: list[RankResult], run, diagnosed: dict | None = None) -> list[RankResult]:
    """Diagnose one rank per group of alike ranks, and the straggler (jobs.alike), with run([(rank, path), ...]) ->
    [RankDiagnosis]; `diagnosed`: rank -> RankDiagnosis made already (each represents a group).  Each result gets
    its group's verdict and findings (`like`: the diagnosed rank).  A diagnosis that fails is its rank's error, and
    the next rank of its group is diagnosed in its place (a round per such failure), so that the others still get
    a verdict."""
    from .alike import groups

    loaded = [r for r in results if r.error is None]
    by_rank = {r.rank: r for r in loaded}
    early = {k: d for k, d in (diagnosed or {}).items() if k in by_rank}
    s = Job(results).straggler()
    plan = groups(loaded, always=(s["rank"],) if s else (), seeds=tuple(early))
    got = [*early.values(), *run([(rep, by_rank[rep].path) for rep in plan if rep not in early])]
    while got:
        retry = {}
        for d in got:
            members, own = plan.pop(d.rank), by_rank[d.rank]
            if d.error:
                own.error = d.error
                rest = [m for m in members if m != d.rank]
                if rest:
                    retry[rest[0]] = rest
                continue
            own.verdict, own.findings = d.verdict, d.findings
            for rank in members:
                by_rank[rank].like = d.rank
        plan.update(retry)
        got = run([(rep, by_rank[rep].path) for rep in retry]) if retry else []
    return results


@dataclass
class Job:
    """The per-rank results of a job (RankResult each) and what they say together."""

    results: list[RankResult]
    root: Path | None = None
    _cache: dict = field(default_factory=dict, repr=False)

    # ---- the ranks ---------------------------------------------------------------------------------------------
    @property
    def loaded(self) -> list[RankResult]:
        return [r for r in self.results if r.error is None]

    def verdict_of(self, r: RankResult) -> dict:
        """A rank's verdict: its own, or the one of the alike rank diagnosed for it ({} when none was)."""
        if r.like is None or r.like == r.rank:
            return r.verdict
        if "by_rank" not in self._cache:
            self._cache["by_rank"] = {x.rank: x for x in self.results}
        like = self._cache["by_rank"].get(r.like)
        return like.verdict if like is not None else {}

    def alike(self, rank: int) -> list[int]:
        """The ranks whose diagnosis is the one of `rank` (itself included), as jobs.alike grouped them."""
        return [r.rank for r in self.loaded if r.like == rank]

    @property
    def errors(self) -> list[str]:
        """One line per report that could not be read (the job shows the others)."""
        return [f"rank {r.rank}: {r.error}" for r in self.results if r.error]

    @property
    def origin_ns(self) -> int:
        """x = 0 of the job: the earliest rank's capture start, in UTC ns."""
        return min((r.span[0] + r.clock_offset_ns for r in self.loaded), default=0)

    def to_job_clock(self, r: RankResult, t) -> np.ndarray:
        """A rank's times on the job's clock (ns from the earliest rank's capture start, hosts' clocks aligned by
        their UTC session starts)."""
        return np.asarray(t, np.int64) + r.clock_offset_ns - self.origin_ns

    @property
    def ranks(self) -> pd.DataFrame:
        """One row per rank: rank, path, host, kernels, kernel_ns, gpu_busy_ns (interval union), nccl_ns, wait_ns
        (its collectives' waiting for later ranks), others_wait_ns, capture_ns, kind (its verdict), like (the alike
        rank whose diagnosis stands for it), error."""
        if "ranks" not in self._cache:
            waits = self._waits()
            w = waits.groupby("rank")["wait_ns"].sum() if len(waits) else pd.Series(dtype=np.int64)
            late = waits[waits["rank"] != waits["straggler"]].groupby("straggler")["wait_ns"].sum() \
                if len(waits) else pd.Series(dtype=np.int64)
            rows = [{"rank": r.rank, "path": r.path, "host": r.host, "kernels": r.counts.get("kernels", 0),
                     "kernel_ns": r.kernel_ns, "gpu_busy_ns": r.gpu_busy_ns, "nccl_ns": r.nccl_ns,
                     "wait_ns": int(w.get(r.rank, 0)), "others_wait_ns": int(late.get(r.rank, 0)),
                     "capture_ns": r.span[1] - r.span[0], "kind": self.verdict_of(r).get("kind"), "like": r.like,
                     "error": r.error}
                    for r in self.results]
            self._cache["ranks"] = pd.DataFrame(rows).astype({"like": "Int64"}) if rows else pd.DataFrame(rows)
        return self._cache["ranks"]

    # ---- collectives and stragglers --------------------------------------------------------------------------
    def _waits(self) -> pd.DataFrame:
        """Every rank's NCCL kernels with wait_ns (its duration minus the shortest of the same collective, the
        k-th of every rank) and the straggler (the rank whose kernel was shortest: it came last)."""
        if "waits" in self._cache:
            return self._cache["waits"]
        parts = [r.nccl.assign(rank=r.rank) for r in self.loaded if r.nccl is not None and len(r.nccl)]
        cols = ["rank", "seq", "start_ns", "end_ns", "duration_ns", "launch_ns", "collective", "wait_ns", "straggler",
                "window_ns", "busy_ns", "kernels", "rank_kernels"]
        if len(parts) < 2:
            out = pd.DataFrame(columns=cols)
        else:
            n = pd.concat(parts, ignore_index=True)
            common = n.groupby("rank")["seq"].max().min()  # collectives every rank ran
            n = n[n["seq"] <= common]
            shortest = n.groupby("seq")["duration_ns"].transform("min")
            n["wait_ns"] = (n["duration_ns"] - shortest).astype(np.int64)
            last = n.loc[n.groupby("seq")["duration_ns"].idxmin(), ["seq", "rank"]].set_index("seq")["rank"]
            n["straggler"] = n["seq"].map(last).astype(np.int64)
            out = n.reindex(columns=cols).reset_index(drop=True)  # results kept from before: no arrivals
        self._cache["waits"] = out
        return out

    def stragglers_by_step(self) -> pd.DataFrame:
        """Per step: the rank the others waited for most in that step (a collective counts in the step in which
        its straggler launched it), and how long they waited (wait_ns)."""
        waits = self._waits()
        cols = ["step", "straggler", "rank", "wait_ns"]
        steps = {r.rank: r.steps for r in self.loaded if r.steps is not None}
        if waits.empty or not steps:
            return pd.DataFrame({c: [] for c in cols})
        w = waits.copy()
        w["step"] = -1
        for rank, (_, starts, _) in steps.items():
            m = (w["rank"] == rank).to_numpy()
            idx = np.searchsorted(starts, w.loc[m, "launch_ns"].to_numpy(np.int64), "right") - 1
            w.loc[m, "step"] = idx
        own = w[w["rank"] == w["straggler"]].set_index("seq")["step"]
        w["step"] = w["seq"].map(own).fillna(w["step"]).astype(np.int64)
        w = w[(w["step"] >= 0) & (w["rank"] != w["straggler"])]
        if w.empty:
            return pd.DataFrame({c: [] for c in cols})
        by = w.groupby(["step", "straggler"])["wait_ns"].sum().reset_index()
        best = by.loc[by.groupby("step")["wait_ns"].idxmax()]
        best["rank"] = best["straggler"].astype("Int64")
        return best[cols].reset_index(drop=True)

    def ranks_table(self) -> pd.DataFrame:
        """The Ranks table of %%nsys --nproc profiles: per rank GPU busy % of its capture, compute and NCCL kernel
        time, waiting, the others' waiting for it, the steps where it was the straggler, steps and median step."""
        rk = self.ranks.set_index("rank")
        strag = self.stragglers_by_step()
        rows = []
        for r in self.results:
            st = r.steps
            lengths = (np.r_[st[1][1:], st[2][-1]] - st[1]) if st is not None and len(st[1]) else np.empty(0)
            cap = max(r.span[1] - r.span[0], 1)
            rows.append({"rank": r.rank, "host": r.host, "gpu_busy_pct": 100.0 * r.gpu_busy_ns / cap,
                         "compute_ns": r.kernel_ns - r.nccl_ns, "nccl_ns": r.nccl_ns,
                         "wait_ns": rk.loc[r.rank, "wait_ns"], "others_wait_ns": rk.loc[r.rank, "others_wait_ns"],
                         "straggler_steps": int((strag["straggler"] == r.rank).sum()) if len(strag) else 0,
                         "steps": len(lengths), "step_med_ns": float(np.median(lengths)) if len(lengths) else np.nan,
                         "step_name": st[0] if st is not None else None, "kind": self.verdict_of(r).get("kind"),
                         "like": r.like})
        out = pd.DataFrame(rows)
        out["rank"] = out["rank"].astype("Int64")
        out["like"] = out["like"].astype("Int64")
        return out

    def _steady_waits(self) -> pd.DataFrame:
        """_waits() of the collectives each rank launched in its steady state, with the scale to its whole loop, as
        a single report's diagnosis judges them (analysis.rules.comm.steady_waits): from its second step's start
        to its last step's end, the first (warm-up) step left out: DDP's start-up broadcasts and the first step's
        one-off work are no straggling.  A rank without steps keeps all its collectives."""
        from ..analysis.steps import Steps

        w = self._waits()
        if w.empty:
            return w.assign(scale=pd.Series([], dtype=float))
        keep = np.ones(len(w), bool)
        scale = np.ones(len(w))
        at = w["launch_ns"].to_numpy(np.int64)
        for r in self.loaded:
            if r.steps is None:
                continue
            found = Steps(-1, -1, *r.steps)
            win = found.steady()
            if win is None:
                continue
            m = (w["rank"] == r.rank).to_numpy()
            keep[m] = (at[m] >= win[0]) & (at[m] <= win[1])
            scale[m] = found.count / max(found.steady_count, 1)
        return w.assign(scale=scale)[keep]

    def straggler(self) -> dict | None:
        """The rank the others wait for most in the steady state, and the job time it costs (the most any rank
        waited, scaled to its loop): None when nobody waited."""
        w = self._steady_waits()
        w = w[w["rank"] != w["straggler"]] if len(w) else w
        if w.empty or w["wait_ns"].sum() <= 0:
            return None
        scaled = w["wait_ns"] * w["scale"]
        on = scaled.groupby(w["straggler"]).sum().sort_values(ascending=False)
        return {"rank": int(on.index[0]), "ns": int(scaled.groupby(w["rank"]).sum().max()),
                "share": float(on.iloc[0] / on.sum())}

    # ---- summaries ---------------------------------------------------------------------------------------------
    def _summary(self, which: str, by: str | None) -> pd.DataFrame:
        parts = [r.summaries[which].assign(rank=r.rank) for r in self.loaded if which in r.summaries]
        parts = [p for p in parts if len(p)]
        if not parts:
            return pd.DataFrame()
        s = pd.concat(parts, ignore_index=True)
        s = s[["rank"] + [c for c in s.columns if c != "rank"]]
        if by == "rank":
            return s.reset_index(drop=True)
        if by is not None:
            raise OptionError(f"by must be 'rank' or None, not {by!r}")
        return combine_summaries(s)

    def kernel_summary(self, by: str | None = None) -> pd.DataFrame:
        """As NsysData.kernel_summary(): one row per kernel name over every rank, or by='rank'."""
        return self._summary("kernel", by)

    def memcpy_summary(self, by: str | None = None) -> pd.DataFrame:
        return self._summary("memcpy", by)

    def cuda_api_summary(self, by: str | None = None) -> pd.DataFrame:
        return self._summary("cuda_api", by)

    def nvtx_summary(self, by: str | None = None) -> pd.DataFrame:
        return self._summary("nvtx", by)

    # ---- utilisation, verdict, findings --------------------------------------------------------------------
    def utilization(self, bins: int = 300) -> pd.DataFrame:
        """GPU busy fraction and NCCL share per rank and time bin on the job's clock (the heat map): rank,
        bin_start_ns, bin_end_ns, busy_fraction, nccl_fraction."""
        loaded = [r for r in self.loaded if r.util is not None]
        if not loaded:
            return pd.DataFrame(columns=["rank", "bin_start_ns", "bin_end_ns", "busy_fraction", "nccl_fraction"])
        ends = max(int(self.to_job_clock(r, r.span[1])) for r in loaded)
        edges = np.linspace(0, max(ends, bins), bins + 1)
        mids = (edges[:-1] + edges[1:]) / 2
        rows = []
        for r in loaded:
            e, busy, nccl = r.util
            x = (self.to_job_clock(r, e[:-1]) + self.to_job_clock(r, e[1:])) / 2
            inside = (mids >= x[0]) & (mids <= x[-1])
            rows.append(pd.DataFrame({"rank": r.rank, "bin_start_ns": edges[:-1].astype(np.int64),
                                      "bin_end_ns": edges[1:].astype(np.int64),
                                      "busy_fraction": np.where(inside, np.interp(mids, x, busy), np.nan),
                                      "nccl_fraction": np.where(inside, np.interp(mids, x, nccl), np.nan)}))
        return pd.concat(rows, ignore_index=True)

    def bottleneck(self) -> "JobVerdict":
        """The job's verdict from its ranks' (analysis.bottleneck), with one row per rank."""
        from ..analysis.bottleneck import CATEGORIES, UNTRACED_LAUNCH, verdict_kind, verdict_summary

        totals = {c: 0 for c in CATEGORIES}
        window = 0
        rows = []
        for r in self.loaded:  # every rank counts, with the verdict of the alike rank diagnosed for it
            v = self.verdict_of(r)
            b = v.get("breakdown")
            if b is None or not len(b) or "compute" not in set(b["category"]):
                continue
            t = dict(zip(b["category"], b["time_ns"]))
            for c in CATEGORIES:
                totals[c] += int(t.get(c, 0))
            window += int(sum(t.values()))
            rows.append({"rank": r.rank, "like": r.like, "kind": v.get("kind"), "summary": v.get("summary"),
                         **{f"{c.replace(' ', '_')}_pct": round(float(p), 1) for c, p in zip(b["category"], b["pct"])}})
        per = pd.DataFrame(rows)
        if not rows:
            return JobVerdict("cpu", "no GPU work in any rank's report", pd.DataFrame(), per)
        pct = {c: 100.0 * totals[c] / max(window, 1) for c in CATEGORIES}
        kind = verdict_kind(pct)
        if kind != "communication" and len(per) > 1 and per["communication_pct"].max() >= 20:
            kind = "communication"
        breakdown = pd.DataFrame({"category": list(CATEGORIES), "time_ns": [totals[c] for c in CATEGORIES],
                                  "pct": [round(pct[c], 1) for c in CATEGORIES]})
        s = self.straggler()
        # the ranks' verdicts say whether their OS runtime was traced
        osrt = not all(UNTRACED_LAUNCH in str(r.get("summary") or "") for r in rows)
        summary = verdict_summary(kind, pct, osrt=osrt) + f" ({len(rows)} ranks"
        if s:
            summary += f"; the others wait for rank {s['rank']}: {s['ns'] / 1e6:,.1f} ms"
        return JobVerdict(kind, summary + ")", breakdown, per)

    def findings(self) -> list:
        """The job's findings: ranks waiting for the straggler (collective_wait, what it costs the job), then each
        rule's worst diagnosed rank (ranks run at once: a fix saves the worst rank's time once; a rank diagnosed
        for alike ranks says so in its title), the real causes first."""
        from .. import thresholds as T
        from ..analysis.findings import sort_findings
        from ..analysis.ranks import slower_gpu_pct
        from ..analysis.rules.comm import slower_gpu_words
        from ..analysis.rules.common import Finding, severity

        out = []
        s = self.straggler()
        loop = max((r.span[1] - r.span[0] - int(self.verdict_of(r).get("startup_ns", 0)) for r in self.loaded),
                   default=1)
        if s:
            w = self._steady_waits()
            ev = w[w["wait_ns"] > 0].drop(columns="scale")
            ev["start_ns"] = ev["start_ns"].astype(np.int64)
            ev["end_ns"] = ev["end_ns"].astype(np.int64)
            ev["name"] = "wait for rank " + ev["straggler"].astype(str)
            ev["duration_ns"] = ev["end_ns"] - ev["start_ns"]
            sev = severity(s["ns"], loop)
            cause = " Its own findings below say what it does differently."
            advice = (f"Look at rank {s['rank']}: uneven work per rank, slower data loading, extra work on one rank "
                      "(logging, evaluation, checkpoints), CPU contention, or a slower GPU or node.")
            slow = slower_gpu_pct(w, s["rank"], by="rank") if w["rank_kernels"].notna().all() else None
            if slow is not None:
                sev, cause, advice = slower_gpu_words(f"rank {s['rank']}", slow,
                                                      T.DEFAULTS["collective_wait.gpu_spread_pct"], sev)
            out.append(Finding(
                "collective_wait", sev,
                f"Ranks wait in collectives for rank {s['rank']}: {s['ns'] / 1e6:,.1f} ms of the job",
                f"A collective kernel runs until the last rank joins; {100 * s['share']:.0f}% of the waiting was for "
                f"rank {s['rank']}." + cause, advice,
                s["ns"], "the waiting of the rank that waited most in the steady state (its steps after the first, on "
                "its own clock), scaled to its loop", ev, ()))
        best: dict[str, tuple] = {}
        for r in self.loaded:
            for f in r.findings:
                if f.rule not in best or f.time_at_stake_ns > best[f.rule][1].time_at_stake_ns:
                    best[f.rule] = (r.rank, f)
        for rule, (rank, f) in best.items():
            import dataclasses

            stake = f.time_at_stake_ns
            if s and rank == s["rank"] and f.severity != "info":
                stake = max(0, stake - s["ns"])  # the straggler's own cause is the waiting collective_wait counts
            if rule == "nccl_share":  # a rank alone counts its waiting as communication: collective_wait's here
                stake = max(0, stake - int(self.ranks.set_index("rank").loc[rank, "wait_ns"]))
            others = len(self.alike(rank)) - 1
            who = f"rank {rank}" + (f" (and {others} rank{'s' * (others > 1)} alike)" if others > 0 else "")
            out.append(dataclasses.replace(f, title=f"{who}: {f.title}", time_at_stake_ns=int(stake),
                                           severity=f.severity if f.severity == "info" else severity(stake, loop)))
        return sort_findings(out)

    # ---- on demand -----------------------------------------------------------------------------------------------
    def suggested_ranks(self) -> list[int]:
        """The ranks worth a timeline: the straggler and a typical rank (the one closest to the median GPU busy)."""
        s = self.straggler()
        rk = self.ranks.dropna(subset=["kind"]) if "kind" in self.ranks else self.ranks
        if rk.empty:
            return []
        med = rk["gpu_busy_ns"].median()
        typical = int(rk.iloc[(rk["gpu_busy_ns"] - med).abs().argsort().iloc[0]]["rank"])
        out = ([s["rank"]] if s else []) + [typical]
        return list(dict.fromkeys(out))

    def timeline_report(self, ranks, out: Path | None = None):
        """The chosen ranks' reports merged into one export on one clock (readers.nsys_merge), opened (an
        nsight_magic.report.NsysReport: .show() draws their timeline)."""
        from ..readers.nsys import export_report, open_nsys_report
        from ..readers.nsys_merge import merge_exports
        from ..report import as_report

        chosen = [r for r in self.loaded if r.rank in set(ranks)]
        if not chosen:
            raise OptionError(f"no loaded rank among {list(ranks)}; the ranks are {[r.rank for r in self.loaded]}")
        got = {r.rank for r in chosen}
        left_out = [r for r in self.results if r.rank in set(ranks) and r.rank not in got]
        if left_out:  # asked for and not loadable: said, not dropped without a word
            warnings.warn("not in the merged timeline: " + "; ".join(
                f"rank {r.rank} ({r.error or 'not loaded'})" for r in left_out), ReportWarning, stacklevel=2)
        paths = [Path(r.path) if r.path.endswith(".sqlite") else export_report(Path(r.path)) for r in chosen]
        base = self.root if self.root is not None and os.access(self.root, os.W_OK) else Path(
            os.environ.get("TMPDIR", "/tmp"))
        out = out or base / f"job-ranks-{'-'.join(str(r.rank) for r in chosen)}.sqlite"
        return as_report(open_nsys_report(paths[0] if len(paths) == 1 else merge_exports(paths, out)))

    def __repr__(self):
        return f"<Job {len(self.loaded)} ranks loaded, {len(self.errors)} failed>"

    def show(self, **kw):
        from ..views.job import show_job

        return show_job(self, **kw)


@dataclass(frozen=True)
class JobVerdict:
    kind: str
    summary: str
    breakdown: pd.DataFrame
    per_rank: pd.DataFrame

    def __str__(self):
        return self.summary


def combine_summaries(s: pd.DataFrame) -> pd.DataFrame:
    """Per-rank summaries (a rank column) -> one row per key over every rank: count and total add up, avg is
    total / count, min and max are the extremes, std is pooled exactly from each rank's count, mean and std, med is
    the count-weighted median of the ranks' medians (the ranks' own instances are not brought home)."""
    keys = [c for c in s.columns if c not in ("rank", "count", "pct") and not c.endswith(("_ns", "_bytes"))
            and c not in ("gpu_ops",)]
    val = [p for p in ("ns", "bytes") if f"total_{p}" in s.columns]
    g = s.groupby(keys, sort=False, dropna=False)
    out = g["count"].sum().to_frame()
    for p in val:
        tot = g[f"total_{p}"].sum()
        out[f"total_{p}"] = tot
        out[f"avg_{p}"] = tot / out["count"]
        out[f"med_{p}"] = g.apply(lambda d, p=p: _weighted_median(d[f"med_{p}"], d["count"]), include_groups=False)
        out[f"min_{p}"] = g[f"min_{p}"].min()
        out[f"max_{p}"] = g[f"max_{p}"].max()
        # pooled variance: sum over ranks of (n-1) s^2 + n (mean - grand mean)^2, over N - 1
        d = s.assign(_m=s[f"avg_{p}"], _v=s[f"std_{p}"].fillna(0) ** 2)
        d["_grand"] = d.groupby(keys, sort=False, dropna=False)[f"total_{p}"].transform("sum") / \
            d.groupby(keys, sort=False, dropna=False)["count"].transform("sum")
        d["_ss"] = (d["count"] - 1).clip(lower=0) * d["_v"] + d["count"] * (d["_m"] - d["_grand"]) ** 2
        ss = d.groupby(keys, sort=False, dropna=False)["_ss"].sum()
        out[f"std_{p}"] = np.sqrt(ss / (out["count"] - 1).where(out["count"] > 1))
    for extra in ("gpu_ns", "gpu_ops"):
        if extra in s.columns:
            out[extra] = g[extra].sum()
    out = out.reset_index()
    if "total_ns" in out:
        total = out["total_ns"].sum()
        out["pct"] = out["total_ns"] * 100.0 / total if total else 0.0
        out = out.sort_values("total_ns", ascending=False, kind="stable")
    return out.reset_index(drop=True)[[c for c in s.columns if c != "rank" and c in out.columns]]


def _weighted_median(values: pd.Series, weights: pd.Series) -> float:
    o = np.argsort(values.to_numpy(float), kind="stable")
    v, w = values.to_numpy(float)[o], weights.to_numpy(float)[o]
    c = np.cumsum(w)
    return float(v[np.searchsorted(c, c[-1] / 2)]) if len(v) else float("nan")
