"""One of the two JAX processes of test_multiprocess.py's whole-cluster test (run as a script).

Usage: python mp_stage_worker.py PROCESS_ID PORT OUT.npz PLAN — joins a 2-process cluster on
127.0.0.1:PORT with 8 fake CPU devices each, runs PLAN for one step on seeded random inputs, gathers
every output to every process and (process 0) compares them with the single-device reference of
``planmap run --verify``, saving max errors, verdicts and where each stage ran into OUT.npz.
"""

import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
os.environ["JAX_PLATFORMS"] = "cpu"


def main(process_id: int, port: int, out: str, plan: str) -> None:
    from planmap.runtime import distributed

    distributed.initialize(f"127.0.0.1:{port}", 2, process_id)
    import jax
    import numpy as np

    import planmap.runtime as rt
    from planmap.runtime.inputs import random_inputs
    from planmap.runtime.verify import compare, reference_outputs

    assert jax.process_count() == 2 and len(jax.devices()) == 16 and len(jax.local_devices()) == 8
    exe = rt.load(plan, unchecked=True)
    args = random_inputs(exe, 0)
    outs = [distributed.gather(o) for o in exe(*args)]  # collective: every process takes part
    wte = exe.artifact.arg_names.index("params['embed']['wte']")
    wte_stages = sorted({s.stage for s in exe.segments if (-1, wte) in s.cut.inputs})
    stage_processes = [sorted({d.process_index for s in segs for d in s.mesh.mesh.devices.flat})
                       for _, segs in sorted(exe.stage_segments().items())]
    if process_id == 0:
        errors = compare(exe, outs, reference_outputs(exe, args))
        np.savez(out, max_abs=np.array([e.max_abs for e in errors]), ok=np.array([e.ok for e in errors]),
                 stage_processes=np.array(stage_processes), wte_stages=np.array(wte_stages),
                 devices=np.array([str(d) for d in jax.devices()]))
    distributed.shutdown()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4])
