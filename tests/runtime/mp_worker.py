"""One of the two JAX processes of test_multiprocess.py (run as a script, not collected by pytest).

Usage: python mp_worker.py PROCESS_ID PORT OUT.npz PLAN...  — joins a 2-process cluster on
127.0.0.1:PORT with 4 fake CPU devices, runs each plan on the MLP example with fixed inputs, and
(process 0) saves every output, gathered to this host, into OUT.npz.
"""

import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
os.environ["JAX_PLATFORMS"] = "cpu"


def main(process_id: int, port: int, out: str, plans: list[str]) -> None:
    from planmap.runtime import distributed

    distributed.initialize(f"127.0.0.1:{port}", 2, process_id)
    import jax
    import numpy as np

    import planmap.runtime as rt
    from planmap.examples.models import mlp

    assert jax.process_count() == 2 and len(jax.devices()) == 8 and len(jax.local_devices()) == 4
    params = [np.asarray(p) for p in jax.tree.leaves(mlp.init(jax.random.PRNGKey(0)))]
    x = np.asarray(jax.random.normal(jax.random.PRNGKey(1), (64, 256), np.float32))
    results = {}
    for k, plan in enumerate(plans):
        exe = rt.load(plan, unchecked=True)
        (y,) = exe(*params, x)
        results[f"plan{k}"] = distributed.gather(y)
        results[f"plan{k}_processes"] = np.array(sorted({d.process_index for s in exe.segments
                                                         for d in s.mesh.mesh.devices.flat}))
    if process_id == 0:
        np.savez(out, **results)
    distributed.shutdown()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4:])
