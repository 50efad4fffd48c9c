"""Benchmarks of arbi-serve: each module prints a table and writes a results file. Run them from the repository
root, `python -m benchmarks.NAME --help`; docs/benchmarks.md has the current figures. Not part of the wheel."""
