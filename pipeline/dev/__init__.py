"""Developer tools kept off the command path: the benchmark and the nox environment helper.

`python -m pipeline --help` never imports this package.
"""
