"""Analysis: pure functions over reader DataFrames -> DataFrames (no I/O, no plotting)."""
