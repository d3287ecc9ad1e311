"""Jobs: one report per rank (multi-node runs), analysed in parallel on Dask (see jobs.job)."""
from __future__ import annotations

from .job import Job, open_job

__all__ = ["Job", "open_job"]
