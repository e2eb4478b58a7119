"""A range-selector answer's bytes -> each target's compact series, without decoding the JSON into objects.

Every steady cycle reads about 270 series per target, each one new sample, and the same series (the
same name and labels) cycle after cycle. Decoded by ``json`` each is a dict of labels and lists of
lists, then copied, stripped of the target label and looked up (``StoredSeries.of``): most of a
steady cycle's CPU went there. Here one pattern walks the answer series by series, exactly as the
JSON grammar splits it; the target label is cut out of the series' label block as bytes, and what
is left (the same bytes for that series on every target and cycle) names its decoded labels in a
cache. Only the samples become numbers.

A steady answer (every series one sample) goes further (``read_steady``): one pattern splits it at its
samples into label blocks, stamps and values; the blocks are worked out once (which target, which
name and labels) and known again, cycle after cycle, by their SHA-1 (in their sorted order where the
store answers in another order each time, as VictoriaMetrics does); a read whose answers are all
steady is joined (``join_steady``) into one ``Steady`` per target: no object per series, and each
target's series in one order, what its snapshots' plans are cached by.

Only answers in the compact form Prometheus and VictoriaMetrics write are scanned; where the scan
cannot vouch for an answer (another spelling, warnings, a target label value with escapes, several
target labels) it returns None or hands that series to ``json``, which decides it as before.
"""

from __future__ import annotations

import json
import re
from array import array
from collections.abc import Mapping, Sequence
from itertools import chain

from exporter.promsource.rebuild import TargetKey
from exporter.promsource.stored import Known, Steady, StoredSeries, known_of

# Prometheus' answer, and VictoriaMetrics' (which says whether it is partial: a partial one is decoded).
_HEADS = (b'{"status":"success","data":{"resultType":"matrix","result":[',
          b'{"status":"success","isPartial":false,"data":{"resultType":"matrix","result":[')
_TAIL = b"]}}"  # no warnings after the data (an answer with them is decoded: they are counted)

_SERIES = b'{"metric":{'  # where each series starts: no label's value (a string) holds it
_VALUES = b'},"values":[['  # where its labels end: no label's value holds an unescaped quote
_NEXT = b"]]},"  # the end of a series but the last

# A label block without its target label's pair -> its name and other labels (None: a block with no name).
_REST: dict[bytes, Known | None] = {}
_REST_MAX = 65536


# A steady answer: every series one sample, closed by ``},"values":[[stamp,"value"]]}`` (no label's value
# holds that: its quotes would be escaped). Split there, the answer is its label blocks, stamps and values.
_ONE = re.compile(rb'\},"values":\[\[([0-9.eE+-]+),"([^"\\]*)"\]\]\}')
_MANY = b'"],['  # a series of several samples: no steady answer
# A cold answer (a window: series of many samples) is told by its first series: no steady answer is split for
# it. Past there, a series of several samples leaves a piece that is no label block (its blocks are checked).
_PEEK = 65536


class Layout:
    """A steady answer's label blocks worked out once (they are the same bytes every cycle while its series
    stay): per series, the target it belongs to (an index into ``targets``, each target's value as sent) and its
    name and labels; series with no name are left out. The blocks are not held: each answer's are known again
    by their hashes (``keys``: 8 bytes a series, 22 MB at 10,000 engines), in whatever order they come."""

    __slots__ = ("series", "owners", "targets", "knowns", "keys")

    def __init__(self, series: int, owners: array[int], targets: list[bytes], knowns: tuple[Known, ...],
                 keys: array[int]) -> None:
        self.series = series  # every series of the answer, named or not: the positions of its samples
        self.owners = owners  # per series; -1: a series with no name
        self.targets = targets
        self.knowns = knowns  # per named series, in the layout's order
        self.keys = keys  # each block's hash, in the layout's order (empty: two alike, none known again)

    def groups(self) -> list[tuple[bytes, list[int], list[Known]]]:
        """Per target: its value as sent, its series' positions in the answer and their names and labels, in the
        order of their names and labels: VictoriaMetrics' order differs from target to target (504 orders at
        1,000 engines), so one order is what lets targets alike share one plan for their snapshots
        (``stored._steady``: past its cache at 10,000 engines otherwise)."""
        groups: dict[int, list[tuple[int, Known]]] = {}
        named = iter(self.knowns)
        for index, owner in enumerate(self.owners):
            if owner >= 0:
                groups.setdefault(owner, []).append((index, next(named)))
        out = []
        for owner, series in groups.items():
            series.sort(key=_by_name_and_labels)
            out.append((self.targets[owner], [index for index, _ in series], [known for _, known in series]))
        return out


def _by_name_and_labels(series: tuple[int, Known]) -> tuple[str, tuple[tuple[str, str], ...]]:
    return series[1].name, series[1].labels


class Layouts(dict[str, Layout]):
    """Each query's last steady answer worked out, and each read's answers joined (``join_steady``; a read in
    parts: one per part), by the first of their layouts: kept by the central diagnoser from cycle to cycle."""

    def __init__(self) -> None:
        super().__init__()
        self.joints: dict[int, Joint] = {}


class SteadyAnswer:
    """A steady answer read: its layout, each series' stamp (as sent: one target's are compared as bytes, one
    made a number) and value in the layout's order (its bytes are not kept)."""

    __slots__ = ("layout", "stamps", "values")

    def __init__(self, layout: Layout, stamps: list[bytes], values: list[float]) -> None:
        self.layout = layout
        self.stamps = stamps
        self.values = values


_LAYOUTS_MAX = 4096
_JOINTS_MAX = 64


def read_steady(body: bytes, label: str, layouts: dict[str, Layout], query: str) -> SteadyAnswer | None:
    """An answer whose every series holds one sample (a steady cycle's), its label blocks worked out or found
    as the last answer to ``query`` left them (``layouts``); None: not that form, or a series the scan cannot
    vouch for (several samples, other spellings, escapes), or a value ``float`` does not read.

    Prometheus answers its series in one order cycle after cycle; VictoriaMetrics in the order its workers
    finish. Each block is known again by its hash, wherever it comes: an answer in the layout's order is
    taken as it is (one comparison of the hashes), one in another order put in the layout's (one lookup a
    block), so each target's series keep one order from cycle to cycle, what the plans of its snapshots are
    cached by. A block the layout does not hold (a series come or gone, a label changed) has the answer's
    blocks worked out again. The hash is Python's (SipHash, keyed at random per process): a changed block
    passes for one of the layout's ``n`` with odds of about n/2**64 (1e-14 for the largest answer at 10,000
    engines), which is why the blocks need not be held or digested."""
    head = next((h for h in _HEADS if body.startswith(h)), None)
    if head is None or _MANY in body[:_PEEK]:
        return None
    pieces = _ONE.split(body)  # the body is not copied: the head is cut from the first block only
    blocks = pieces[0::3]
    last = blocks.pop()  # what follows the last sample: the tail alone where the last series had one
    if blocks:
        if last != _TAIL:
            return None
        blocks[0] = b"," + blocks[0][len(head):]  # each block led by its comma, whichever comes first
    elif last != head + _TAIL:  # no series (``"result":[]}}``)
        return None
    stamps, texts = pieces[1::3], pieces[2::3]
    keys = array("q", map(hash, blocks))
    layout = layouts.get(query)
    if layout is not None and len(layout.keys) == len(keys):
        if keys == layout.keys:  # the layout's blocks in its order (Prometheus)
            return _answer(layout, stamps, texts)
        order = _keyed(layout, keys)
        if order is not None:  # the layout's blocks in another order (VictoriaMetrics)
            return _answer(layout, list(map(stamps.__getitem__, order)), list(map(texts.__getitem__, order)))
    layout = _layout(blocks, label, keys)
    if layout is None:
        return None
    if len(layouts) >= _LAYOUTS_MAX:
        layouts.clear()
    layouts[query] = layout
    return _answer(layout, stamps, texts)


def _keyed(layout: Layout, keys: array[int]) -> list[int] | None:
    """The positions in the answer of the layout's blocks, in its order, found by their hashes (``keys``: the
    answer's blocks'); None: blocks that are not the layout's."""
    at = dict(zip(keys, range(len(keys))))
    if len(at) != len(keys):  # two blocks alike in hash: worked out again
        return None
    try:
        return list(map(at.__getitem__, layout.keys))
    except KeyError:  # a block the layout does not have
        return None


def _answer(layout: Layout, stamps: list[bytes], texts: list[bytes]) -> SteadyAnswer | None:
    try:
        return SteadyAnswer(layout, stamps, list(map(float, texts)))
    except ValueError:  # a value float() does not read as bytes: the series' path keeps its text
        return None


def file_steady(answer: SteadyAnswer, by_value: Mapping[str, TargetKey],
                by_target: dict[TargetKey, list[StoredSeries | Steady]],
                raw_keys: dict[bytes, TargetKey | None]) -> bool:
    """Each target's samples of one steady answer filed as one ``Steady`` (its series' names and labels, the
    stamp, the values), or, where its series are at several times, as its series one by one (what ``scan``
    files for them)."""
    stamps, values = answer.stamps, answer.values
    for raw, where, knowns in answer.layout.groups():
        key = raw_keys[raw] if raw in raw_keys else raw_keys.setdefault(raw, by_value.get(raw.decode()))
        if key is None:
            continue
        at = [stamps[index] for index in where]
        filed = by_target.setdefault(key, [])
        if at.count(at[0]) == len(at):  # the same bytes (one time spelled two ways: one by one)
            filed.append((tuple(knowns), float(at[0]), [values[index] for index in where]))
        else:
            filed += [StoredSeries(known, (float(stamps[index]),), (values[index],))
                      for index, known in zip(where, knowns, strict=True)]
    return True


def scan_steady(body: bytes, label: str, by_value: Mapping[str, TargetKey],
                by_target: dict[TargetKey, list[StoredSeries | Steady]], raw_keys: dict[bytes, TargetKey | None],
                layouts: dict[str, Layout], query: str) -> bool:
    """``scan`` for a steady answer (``read_steady``, ``file_steady``): no object per series. False, with
    nothing filed: ``scan`` decides the answer."""
    answer = read_steady(body, label, layouts, query)
    return answer is not None and file_steady(answer, by_value, by_target, raw_keys)


class Joint:
    """A read's steady answers (these layouts, in query order) as one: the positions of all their samples
    ordered by target (``order``), and per target its value as sent, decoded, its slice of that order, and
    its series' names and labels (one tuple shared by the targets whose series are alike)."""

    __slots__ = ("layouts", "order", "groups")

    def __init__(self, layouts: tuple[Layout, ...]) -> None:
        self.layouts = layouts
        joined: dict[bytes, tuple[list[int], list[Known]]] = {}
        offset = 0
        for layout in layouts:
            for raw, where, knowns in layout.groups():
                group = joined.setdefault(raw, ([], []))
                group[0].extend(offset + index for index in where)
                group[1].extend(knowns)
            offset += layout.series
        self.order = array("l")
        self.groups: list[tuple[bytes, str, int, int, tuple[Known, ...]]] = []
        shared: dict[tuple[Known, ...], tuple[Known, ...]] = {}
        for raw, (where, knowns) in joined.items():
            alike = tuple(knowns)
            self.groups.append((raw, raw.decode(), len(self.order), len(self.order) + len(where),
                                shared.setdefault(alike, alike)))
            self.order.extend(where)


def join_steady(answers: Sequence[SteadyAnswer], by_value: Mapping[str, TargetKey],
                raw_keys: dict[bytes, TargetKey | None],
                layouts: Layouts) -> dict[TargetKey, list[StoredSeries | Steady]] | None:
    """A read whose every answer is steady -> each target's one ``Steady`` (its series in query order, as
    ``file_steady`` answer by answer would file them); None: a target's series at several times."""
    held = tuple(answer.layout for answer in answers)
    joint = layouts.joints.get(id(held[0])) if held else None
    if joint is None or joint.layouts != held:  # the same Layout objects: compared by identity
        if len(layouts.joints) >= _JOINTS_MAX:
            layouts.joints.clear()
        joint = layouts.joints[id(held[0]) if held else 0] = Joint(held)
    order = joint.order
    stamps = list(chain.from_iterable(answer.stamps for answer in answers))
    values = list(chain.from_iterable(answer.values for answer in answers))
    ordered = [values[index] for index in order]
    # Every series of the read at one time (one fleet scraped in step), or each target's compared.
    one = float(stamps[0]) if stamps and stamps.count(stamps[0]) == len(stamps) else None
    by_target = None if one is not None else [stamps[index] for index in order]
    out: dict[TargetKey, list[StoredSeries | Steady]] = {}
    for raw, value, low, high, knowns in joint.groups:
        key = raw_keys[raw] if raw in raw_keys else raw_keys.setdefault(raw, by_value.get(value))
        if key is None:
            continue
        at = one
        if by_target is not None:
            mine = by_target[low:high]
            if mine.count(mine[0]) != high - low:
                return None
            at = float(mine[0])
        assert at is not None
        out[key] = [(knowns, at, ordered[low:high])]
    return out


def _layout(blocks: list[bytes], label: str, keys: array[int]) -> Layout | None:
    """The targets and series of a steady answer's label blocks (each ``,{"metric":{`` and its labels); None:
    not that form, or a series the scan cannot vouch for."""
    needle = b'"' + label.encode() + b'":"'
    skip = len(needle)
    owners = array("i")
    targets: dict[bytes, int] = {}
    knowns: list[Known] = []
    lead = b"," + _SERIES
    for block in blocks:
        if not block.startswith(lead) or block.count(_SERIES) != 1:
            return None
        labels = block[len(lead):]
        at = labels.find(needle)
        close = labels.find(b'"', at + skip) if at >= 0 else -1
        raw = labels[at + skip:close]
        if close < 0 or (at and labels[at - 1] != 0x2C) or b"\\" in raw:
            return None  # no target label where JSON puts a key, or a value with escapes
        rest = labels[:at] + labels[close + 1:]
        try:
            if rest in _REST:
                known = _REST[rest]
            else:
                metric = json.loads(b"{" + labels + b"}")
                if len(_REST) >= _REST_MAX:
                    _REST.clear()
                known = _REST[rest] = known_of(metric, frozenset((label,))) if "__name__" in metric else None
            raw.decode()
        except ValueError:  # labels json refuses, text not UTF-8
            return None
        if known is None:  # a series with no name: skipped, as every path skips it
            owners.append(-1)
            continue
        owners.append(targets.setdefault(raw, len(targets)))
        knowns.append(known)
    if len(set(keys)) != len(keys):  # two blocks alike in hash: none is known again by it
        keys = array("q")
    return Layout(len(blocks), owners, list(targets), tuple(knowns), keys)


def scan(body: bytes, label: str, by_value: Mapping[str, TargetKey], strip: frozenset[str],
         by_target: dict[TargetKey, list[StoredSeries | Steady]], raw_keys: dict[bytes, TargetKey | None]) -> bool:
    """Append each series of ``body`` (a range selector's answer, undecoded) to its target's list in
    ``by_target``; ``label``: the one target label, whose value names the target in ``by_value`` (series
    of other targets are skipped, as is a series with no name); ``raw_keys``: the targets by their value as
    sent, filled as found (one per read). False, with nothing appended: the answer is not in the compact
    form, and must be decoded."""
    head = next((h for h in _HEADS if body.startswith(h)), None)
    end = len(body) - len(_TAIL)
    if head is None or not body.endswith(_TAIL):
        return False
    needle = b'"' + label.encode() + b'":"'
    skip, begin = len(needle), len(_VALUES)
    chunks = body[len(head):end].split(_SERIES)
    if chunks[0]:
        return False
    chunks[-1] += b","  # every series now ends as one but the last does
    staged: dict[bytes, list[StoredSeries | Steady]] = {}  # by the target label's value as sent
    cached = _REST.get
    for index in range(1, len(chunks)):
        chunk = chunks[index]
        cut = chunk.find(_VALUES)
        if cut < 0 or not chunk.endswith(_NEXT):
            return False
        samples = chunk[cut + begin:-4]
        # The usual series: its target label where JSON puts a key, a value with no escapes, one sample.
        at = chunk.find(needle, 0, cut)
        close = chunk.find(b'"', at + skip, cut) if at >= 0 else -1
        value = chunk[at + skip:close]
        plain = close >= 0 and (at == 0 or chunk[at - 1] == 0x2C) and b"\\" not in value
        if plain:
            known = cached(chunk[:at] + chunk[close + 1:cut])
            target = staged.get(value)
            if target is None and raw_keys.get(value) is not None:
                target = staged[value] = []
            if known is not None and target is not None and b"]" not in samples and b"\\" not in samples:
                stamp, comma, text = samples.partition(b',"')
                if comma and text.find(b'"') == len(text) - 1:
                    try:
                        target.append(StoredSeries(known, (float(stamp),), (float(text[:-1]),)))
                        continue
                    except ValueError:
                        pass
        try:  # anything else: the general path
            key, known = _labels(chunk, cut, needle, label, by_value, strip, raw_keys)
            if key is not None and known is not None:
                if not plain:  # a target's value with escapes: json keeps the answer's order of its series
                    return False
                staged.setdefault(value, []).append(_stored(known, samples))
        except ValueError:  # labels json refuses, text not UTF-8, samples in another form: all to json
            return False
    for value, series in staged.items():
        found = raw_keys[value]
        assert found is not None
        by_target.setdefault(found, []).extend(series)
    return True


def _labels(chunk: bytes, cut: int, needle: bytes, label: str, by_value: Mapping[str, TargetKey],
            strip: frozenset[str], raw_keys: dict[bytes, TargetKey | None]) -> tuple[TargetKey | None, Known | None]:
    """A series' target and its name and other labels, from its label block (``chunk[:cut]``, the opening
    brace left out)."""
    at = chunk.find(needle, 0, cut)
    close = chunk.find(b'"', at + len(needle), cut) if at >= 0 else -1
    value = chunk[at + len(needle):close]
    if close < 0 or (at and chunk[at - 1] != 0x2C) or b"\\" in value:  # not there, or escaped: json decides
        metric = json.loads(b"{" + chunk[:cut + 1])
        key = by_value.get(metric.get(label, ""))
        return key, known_of(metric, strip) if key is not None and "__name__" in metric else None
    if value in raw_keys:
        key = raw_keys[value]
    else:
        key = raw_keys[value] = by_value.get(value.decode())
    if key is None:
        return None, None
    # The pair is cut where JSON puts a key (first, or after ","): what is left is the same bytes for this
    # series on every target, and no other series leaves the same.
    rest = chunk[:at] + chunk[close + 1:cut]
    if rest in _REST:
        return key, _REST[rest]
    if len(_REST) >= _REST_MAX:
        _REST.clear()
    metric = json.loads(b"{" + chunk[:cut + 1])
    known = _REST[rest] = known_of(metric, strip) if "__name__" in metric else None
    return key, known


def _stored(known: Known, samples: bytes) -> StoredSeries:
    """``samples``: ``time,"value"`` pairs joined by ``],[``, as the store wrote them."""
    if b"\\" in samples:
        raise ValueError("escaped text in a sample")
    if b"]" not in samples:  # one sample: a steady cycle's
        stamp, comma, text = samples.partition(b',"')
        if comma and text.find(b'"') == len(text) - 1:
            try:
                return StoredSeries(known, (float(stamp),), (float(text[:-1]),))
            except ValueError:  # a value float() does not read as bytes: decoded, as StoredSeries.of reads it
                pass
    pairs = [pair.partition(b',"') for pair in samples.split(b"],[")]
    if not all(comma and text.find(b'"') == len(text) - 1 for _, comma, text in pairs):
        raise ValueError("a sample in another form")
    return StoredSeries.of_known(known, [(float(stamp), text[:-1].decode()) for stamp, _, text in pairs])
