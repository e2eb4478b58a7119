"""The ``vllm_diag_*`` part of ``/metrics`` as text, rendered once per evaluation per target.

This is the one path that serves the families of ``exporter.publish.exported`` (``Sidecar.metrics``).
Rebuilding every family of every target through a prometheus_client collector on each request costs
seconds of CPU at 1000 targets for text that changed only where a target was evaluated since. Here
each target's samples are formatted once per published state a request reads (a new :class:`TargetState`
per evaluation; states are immutable, so the same object always gives the same text) and kept; a request
formats the states published since the last one and joins the kept fragments under each family's header.
A state replaced before any request read it is never formatted. The bytes are those prometheus_client's
``generate_latest`` writes for the same families (tests/unit/test_exposition.py compares them on real
scenarios; tests/golden pins them).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from math import copysign, inf, isnan

from exporter.config import Settings
from exporter.publish.exported import EXPORTED, ExportedMetric, Sample, Source
from exporter.state import TargetState

Fragment = tuple[bytes, ...]  # one target's sample lines, per family of the catalog (b"" for none)


def go_float(value: float) -> str:
    """A sample value as Go (and prometheus_client's ``floatToGoString``) writes it: ``+Inf``, ``NaN``, and
    exponents from 1e+07 on. The same rule, not the library's function: importing prometheus_client loads its
    servers, push gateway and multiprocess mode, which a sidecar never uses (exporter/publish/process.py)."""
    value = float(value)
    if value == inf:
        return "+Inf"
    if value == -inf:
        return "-Inf"
    if isnan(value):
        return "NaN"
    text = repr(value)
    dot = text.find(".")
    if value > 0 and dot > 6:  # Go switches to exponents sooner than Python
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1:]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return text


def _label_value(value: str) -> str:
    """Escaped as the text format wants (prometheus_client's rule)."""
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")




class _Family:
    """One exported family's fixed parts: its header and a format string for its sample lines."""

    def __init__(self, metric: ExportedMetric[Source]) -> None:
        self.metric = metric
        name = metric.sample_name
        doc = metric.help.replace("\\", r"\\").replace("\n", r"\n")
        self.header = f"# HELP {name} {doc}\n# TYPE {name} {metric.type}\n"
        # generate_latest writes labels sorted by name; the line up to the value is one str.format.
        labels = metric.labels
        pairs = ",".join(f'{labels[i]}="{{{i}}}"' for i in sorted(range(len(labels)), key=labels.__getitem__))
        self.format = f"{name}{{{{{pairs}}}}} " if labels else f"{name} "
        self.arity = len(labels)

    def lines(self, samples: Iterable[Sample]) -> str:
        out = []
        line, arity = self.format.format, self.arity
        for values, value in samples:
            # Most samples are flags: 1.0 and 0.0 (not -0.0) are written without formatting.
            text = ("1.0" if value == 1.0 else "0.0" if value == 0.0 and copysign(1.0, value) > 0
                    else go_float(value))
            if len(values) != arity:  # label values not matching the names: paired as the client pairs them
                out.append(self._unmatched(values, text))
                continue
            joined = "".join(values)
            if "\\" in joined or "\n" in joined or '"' in joined:
                values = [_label_value(v) for v in values]
            out.append(line(*values) + text + "\n")
        return "".join(out)

    def _unmatched(self, values: Sequence[str], text: str) -> str:
        labels = ",".join(f'{k}="{_label_value(v)}"' for k, v in sorted(zip(self.metric.labels, values)))
        return f"{self.metric.sample_name}{{{labels}}} {text}\n" if labels else f"{self.metric.sample_name} {text}\n"


class Exposition:
    """The ``vllm_diag_*`` families of a set of target states, with each target's lines cached.

    Families whose samples come from the configuration (objectives, scrape intervals) are
    rendered once; the others per target state, when :meth:`fragment` first sees that state.
    """

    def __init__(self, settings: Settings | None, metrics: Sequence[ExportedMetric[Source]] = EXPORTED) -> None:
        self._settings = settings
        self._families = [_Family(m) for m in metrics]
        heads: list[bytes] = []
        self._per_state: list[bool] = []
        for family in self._families:
            # A source that yields without states reads the configuration: the same for every request.
            fixed = family.lines(family.metric.source((), settings))
            heads.append((family.header + fixed).encode())
            self._per_state.append(not fixed)
        self._heads = heads
        self._cache: dict[str, tuple[TargetState, Fragment]] = {}

    def fragment(self, state: TargetState) -> Fragment:
        """The target's sample lines per family, rendered on the first call for this state object."""
        cached = self._cache.get(state.target)
        if cached is not None and cached[0] is state:
            return cached[1]
        one = (state,)
        fragment = tuple(family.lines(family.metric.source(one, self._settings)).encode() if per_state else b""
                         for family, per_state in zip(self._families, self._per_state))
        self._cache[state.target] = (state, fragment)
        return fragment

    def render(self, states: Iterable[TargetState]) -> bytes:
        """The families in catalog order, each header followed by every target's lines in ``states`` order."""
        listed = list(states)
        fragments = [self.fragment(state) for state in listed]
        if len(self._cache) > len(fragments):  # targets gone (the central diagnoser drops them): forget them
            live = {state.target for state in listed}
            # A copy of the items first: a scrape on the event loop may add a fragment meanwhile.
            self._cache = {name: entry for name, entry in list(self._cache.items()) if name in live}
        out: list[bytes] = []
        for index, head in enumerate(self._heads):
            out.append(head)
            if self._per_state[index]:
                out.extend(fragment[index] for fragment in fragments)
        return b"".join(out)
