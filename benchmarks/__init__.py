"""The benchmark suite of feedcollector: run it with ``python -m benchmarks`` (see __main__)."""
