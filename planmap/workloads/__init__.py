"""Benchmark and training workloads: profiled graphs and clusters built in code.

``graphs`` (hand-made examples, random and layered DAGs, the paper's cluster), ``nets`` (graphs
shaped like the networks of Tarnawski et al.'s latency benchmarks) and ``pipelines`` (their
throughput experiments' pipeline workloads). Tests, benchmarks and learned solvers' pre-training
use them; the core never imports this package.
"""
