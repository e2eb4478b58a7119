"""What the sidecar's CPU source would read next to a simulated engine.

A real deployment gives the sidecar vLLM's processes (shared PID namespace), and the
schedstat reader measures how long their threads wait for a core. The simulated engine knows
its CPU share directly: uncontended threads wait little (on a host with spare cores), and a
process that gets a share ``s`` of the CPU it asks for waits about ``1 - s`` of its runnable time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from exporter.signals import HostInputs
from exporter.simulator.dataparallel import DataParallelEngine
from exporter.simulator.engine import Engine

# Run-queue wait share of an uncontended vLLM on a host with spare cores.
UNCONTENDED_WAIT_SHARE = 0.05


def run_queue_wait_share(engine: Engine | DataParallelEngine) -> float:
    share = engine.cfg.cpu_share
    return 1.0 - share * (1.0 - UNCONTENDED_WAIT_SHARE)


def simulated_host_inputs(engine: Engine | DataParallelEngine) -> HostInputs:
    # Every scenario serves traffic: the engine core keeps about a core busy stepping.
    return HostInputs(cpu_wait_share=run_queue_wait_share(engine), cpu_busy_cores=1.0,
                      sources=("schedstat (simulated)",))


HostProbeFactory = Callable[[object, float, int], Callable[[float], HostInputs] | None]


def host_probes_for(engines: Mapping[str, Callable[[], object]]) -> HostProbeFactory:
    """A sidecar host-probe factory over simulated engines, keyed by target name.

    ``engines`` maps a target name to a function returning that scenario's current engine (the
    live simulator replaces nothing, but a function keeps the lookup late). Targets that are not
    simulated get no probe, as a target without a CPU source would.
    """

    def factory(target: object, span_seconds: float, recent_evaluations: int) -> Callable[[float], HostInputs] | None:
        get = engines.get(getattr(target, "name", ""))
        if get is None:
            return None
        return lambda now: simulated_host_inputs(get())  # type: ignore[arg-type]

    return factory
