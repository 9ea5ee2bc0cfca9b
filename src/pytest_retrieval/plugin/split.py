"""One large golden set spread over pytest-xdist's workers (``pytest -n N``), merged back
into one evaluation on the controller.

Under ``-n N`` a golden set of at least ``--retrieval-split-min`` queries (ini
``retrieval_split_min``, default :data:`~.options.DEFAULT_SPLIT_MIN`; 0 never splits) is
collected as one item per worker, ``golden.json::retrieval[part1/2]``
(``retrieval[bm25-part1/2]`` for a parametrized retriever fixture). Part *i* evaluates the
queries whose id hashes to *i* (:func:`shard_of`, the rule of ``--retrieval-shard``), so the
parts are the same on every worker and every machine. xdist is the distributing engine:
its scheduler sends the parts to workers like any other tests, spread out in the run order
(:func:`spread`) so that they do not travel to one worker in one batch.

A part's item passes once its queries are evaluated: a part's numbers decide nothing. The
controller merges the parts of each (golden set, retriever) with
:func:`~.evaluation.merge_parts` (every number computed again over the union, in golden
order), compares the union with the baseline and decides with the same code as a run
without ``-n`` (:func:`~.runtest.attach_baseline`); outputs, baseline updates and the exit
status come from that merged evaluation. A failing merged verdict fails the session the way
pytest-cov's ``--cov-fail-under`` does: the items passed, the exit status is 1, the terminal's
retrieval section lists the reasons and ``--junitxml`` carries them as testsuite properties.

Only a complete set of parts is merged. A part that failed (its retriever fixture raised, the
worker crashed) or did not run (``-k``, ``--lf``, ``-x``) leaves the evaluation incomplete:
the other parts are not shown, gated or recorded as a baseline, and the session fails with
that reason -- the gate did not run, so no output may say it passed.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

from .._internal.io import relative
from ..errors import RetrievalError
from ..shards import shard_of
from ..validators import Shard
from .shard import evaluate_part

if TYPE_CHECKING:
    from ..golden import GoldenSet
    from ..limits import Threshold
    from ..results import EvaluationResult
    from ..verdicts import Reason
    from .session import SessionState

#: the golden-set test's argument that carries its part (a :class:`~.shards.Shard`)
PART_ARG = "retrieval_part"
#: where a worker leaves its part items for the controller (xdist's ``workeroutput``)
PARTS_KEY = "retrieval_parts"
#: where the controller tells each worker its distribution mode (``workerinput``: a worker's
#: own ``--dist`` option is reset to "no" by xdist)
DIST_KEY = "retrieval_dist"
#: xdist modes that hand one file's items to several workers (``loadfile`` and ``loadscope``
#: send them all to one, where a split would only add the merge; ``each`` runs every item on
#: every worker)
SPREADING = frozenset({"load", "worksteal", "loadgroup"})


def part_id(part: Shard) -> str:
    """A part in its item's id, 1-based as on the command line: ``part1/2``."""
    return f"part{part}"


#: this process's golden sets: path -> the parts they are collected as (none: not split)
_PARTS_OF = pytest.StashKey[dict[Path, list[Shard]]]()


def tell_worker(config: pytest.Config, workerinput: dict[str, Any]) -> None:
    """The controller's distribution mode, for a worker about to start
    (``pytest_configure_node``)."""
    workerinput[DIST_KEY] = str(config.getoption("dist", "no"))


def _worker_count(config: pytest.Config) -> int:
    """How many workers share this run's items: 1 outside an xdist worker (but for
    ``--collect-only``: :func:`_listed_for`), or when the distribution mode keeps a file's
    items on one worker."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None:
        return _listed_for(config)
    if workerinput.get(DIST_KEY) not in SPREADING:
        return 1
    return int(workerinput.get("workercount", 1))


def _listed_for(config: pytest.Config) -> int:
    """The workers ``pytest -n N --collect-only`` lists items for: xdist starts none then,
    and its controller collects what they would have, one item per part (1 otherwise)."""
    if not config.getoption("collectonly") or config.getoption("dist", "no") not in SPREADING:
        return 1
    count = 0
    for spec in getattr(config.option, "tx", None) or ():  # -n N: N x "popen"; --tx 3*popen
        times, _, _ = str(spec).partition("*")
        count += int(times) if "*" in str(spec) and times.isdigit() else 1
    return count


def parts(config: pytest.Config, state: SessionState, golden_path: Path) -> list[Shard]:
    """The parts this process collects the golden set as (computed once): none when it is
    not split. A part no query hashes to is not collected (``part3/4`` may be absent)."""
    cache = config.stash.setdefault(_PARTS_OF, {})
    if golden_path not in cache:
        golden = state.golden(golden_path)
        count = _worker_count(config)
        minimum = state.settings.split_min
        if count < 2 or not minimum or len(golden) < minimum:
            cache[golden_path] = []
        else:
            found = {shard_of(query.id, count) for query in golden.queries}
            cache[golden_path] = [Shard(index, count) for index in sorted(found)]
    return cache[golden_path]


def parametrize(metafunc: pytest.Metafunc, state: SessionState, golden_path: Path) -> None:
    """The golden-set test, once per part."""
    chosen = parts(metafunc.config, state, golden_path)
    metafunc.parametrize(PART_ARG, chosen, ids=[part_id(part) for part in chosen])


def _whole_param_id(callspec_id: str, part: Shard) -> str:
    """The item's parameter id without its part (``bm25-part1/2`` -> ``bm25``): the retriever
    id and node id the evaluation has without ``-n``."""
    if callspec_id == part_id(part):
        return ""
    for affix in (f"-{part_id(part)}", f"{part_id(part)}-"):
        if affix in callspec_id:
            return callspec_id.replace(affix, "", 1)
    return callspec_id


def run_part(
    request: pytest.FixtureRequest,
    retriever: Any,
    golden_path: Path,
    thresholds: list[Threshold],
    state: SessionState,
    part: Shard,
) -> None:
    """Evaluate ``part``'s queries of the golden set (:func:`~.shards.evaluate_part`): the
    result goes to the controller in the test report, undecided. Its item passes, unless
    retriever calls failed: it fails on them, as a shard does and as the whole would, so
    that pytest-rerunfailures runs it again (only its last attempt is merged)."""
    from ..verdicts import RETRIEVER_ERRORS

    golden = state.golden(golden_path)
    callspec = request.node.callspec
    retriever_id = _whole_param_id(str(callspec.id), part) or state.settings.fixture
    result, positions = evaluate_part(
        request, retriever, golden, part, thresholds, state, retriever_id
    )
    request.node.user_properties.append(
        (
            "retrieval.part",
            f"{part_id(part)}: {len(positions)} of {len(golden)} queries (merged and decided on "
            "the controller)",
        )
    )
    failed = result.verdict.of_kind(RETRIEVER_ERRORS)
    if failed:
        pytest.fail(
            f"{golden.name} [{retriever_id}] {part_id(part)}: "
            + "; ".join(reason.message for reason in failed)
            + "; merged with the other parts and decided on the controller",
            pytrace=False,
        )


def retriever_param_id(item: pytest.Item) -> str:
    """The item's parameter id as without ``-n``: a part's (``bm25-part1/2``) without its
    part (``bm25``), "" for one with no other parameter, or for no parameter at all."""
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return ""
    part = _part(item)
    return str(callspec.id) if part is None else _whole_param_id(str(callspec.id), part)


def _part(item: pytest.Item) -> Shard | None:
    callspec = getattr(item, "callspec", None)
    part = None if callspec is None else callspec.params.get(PART_ARG)
    return part if isinstance(part, Shard) else None


def spread(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The parts far apart in the run order, the other items' order kept: xdist hands out
    consecutive tests together (batches with ``--dist load``, halves with ``worksteal``), so
    parts next to each other would run one after the other on one worker. Several golden
    sets' parts take turns, also when they are all there is to run (:func:`take_turns`)."""
    if not any(config.stash.get(_PARTS_OF, {}).values()):
        return  # nothing split here: not even a look at the items
    rounds: dict[int, list[tuple[str, pytest.Item]]] = {}
    workers = 1
    for item in items:
        part = _part(item)
        if part is not None and isinstance(item, pytest.Function):
            rounds.setdefault(part.index, []).append((_whole_of(item, part), item))
            workers = max(workers, part.count)
    parts = take_turns([rounds[index] for index in sorted(rounds)], workers)
    if not parts or len(parts) == len(items):
        items[:] = parts or items
        return
    slots = {len(items) * k // len(parts): part for k, part in enumerate(parts)}
    others = iter([item for item in items if _part(item) is None])
    items[:] = [slots[at] if at in slots else next(others) for at in range(len(items))]


T = TypeVar("T")

#: placements :func:`take_turns` tries before it keeps the rounds as they are
TURN_STEPS = 20_000


def take_turns(rounds: Sequence[Sequence[tuple[str, T]]], workers: int) -> list[T]:
    """The rounds (every evaluation's first part, then every second part, ...: ``(whole,
    item)`` pairs) one after another, each turned (rotated) so that no evaluation has two
    parts where xdist would hand them to one worker, however it deals them out: in turns
    (``loadgroup``: position mod ``workers``), in blocks of a round each (``worksteal``), or
    two in a row (``load``'s first batches). A search over the rotations: a few rounds of a
    few evaluations; past :data:`TURN_STEPS` tries, the rounds as they are."""
    order: list[tuple[str, T]] = []
    used: dict[str, set[int]] = {}  # whole -> the workers (position mod workers) it has
    steps = 0

    def place(at: int) -> bool:
        nonlocal steps
        if at == len(rounds):
            return True
        members = list(rounds[at])
        for turn in range(len(members)):
            steps += 1
            if steps > TURN_STEPS:
                return False
            turned = members[turn:] + members[:turn]
            start = len(order)
            slots = [(whole, (start + i) % workers) for i, (whole, _) in enumerate(turned)]
            if any(slot in used.get(whole, ()) for whole, slot in slots):
                continue
            if start % 2 and turned[0][0] == order[-1][0]:  # a pair of one whole
                continue
            order.extend(turned)
            for whole, slot in slots:
                used.setdefault(whole, set()).add(slot)
            if place(at + 1):
                return True
            del order[start:]
            for whole, slot in slots:
                used[whole].discard(slot)
        return False

    if not place(0):
        order = [member for members in rounds for member in members]
    return [item for _, item in order]


def _whole_of(item: pytest.Function, part: Shard) -> str:
    """The node id a part's evaluation has without ``-n`` (``golden.json::retrieval[bm25]``)."""
    other = _whole_param_id(str(item.callspec.id), part)
    parent = item.parent.nodeid if item.parent is not None else ""
    return f"{parent}::{item.originalname}" + (f"[{other}]" if other else "")


def part_items(items: Iterable[pytest.Item]) -> dict[str, list[Any]]:
    """Part node id -> [golden set path, node id of the whole evaluation, index, count]: what
    the controller needs to group the parts it receives (an xdist worker's output)."""
    found: dict[str, list[Any]] = {}
    for item in items:
        part = _part(item)
        if part is None or not isinstance(item, pytest.Function) or item.parent is None:
            continue
        golden = str(getattr(item.parent, "golden_path", item.path))
        found[item.nodeid] = [golden, _whole_of(item, part), part.index, part.count]
    return found


@dataclass(frozen=True)
class PartItem:
    """What the controller knows of one part's item (from the workers' collection)."""

    golden: Path  # the golden set's path, as configured
    whole: str  # the node id the evaluation has without -n
    index: int
    count: int


#: the controller's part items: node id -> what it is a part of
_PARTS = pytest.StashKey[dict[str, PartItem]]()


def receive(config: pytest.Config, output: Mapping[str, Any]) -> None:
    """Keep the part items an xdist worker collected (``pytest_testnodedown``)."""
    for nodeid, (golden, whole, index, count) in output.get(PARTS_KEY, {}).items():
        config.stash.setdefault(_PARTS, {})[nodeid] = PartItem(Path(golden), whole, index, count)


def fail_together(config: pytest.Config, failed: set[str]) -> None:
    """Every part of a failed evaluation (``failed``: node ids as without ``-n``; a part of
    it failed, or its merged verdict) is marked failed in pytest's last-failed cache, before
    the cache plugin writes it, so that ``--lf`` (under the same ``-n``) runs the whole
    evaluation again, as it does without ``-n``: a failed part alone would leave it
    incomplete, and a failed merged verdict left no failed item at all."""
    items = config.stash.get(_PARTS, None)
    lastfailed = getattr(config.pluginmanager.get_plugin("lfplugin"), "lastfailed", None)
    if not items or not isinstance(lastfailed, dict):
        return
    keys = {str(key): key for key in lastfailed}  # pytest 9.2 keys them by NodeId, not str
    failed = failed | {items[nodeid].whole for nodeid in keys if nodeid in items}
    key_of = _last_failed_key(lastfailed)
    for nodeid, item in items.items():
        if item.whole in failed and nodeid not in keys:
            lastfailed[key_of(nodeid)] = True


def _last_failed_key(lastfailed: Mapping[Any, bool]) -> Callable[[str], Any]:
    """How pytest's last-failed cache keys a node id: a NodeId from pytest 9.2 (its reports
    have an ``id``), a str before."""
    if lastfailed:
        kind = type(next(iter(lastfailed)))
        parse: Callable[[str], Any] = getattr(kind, "parse", str)
        return parse
    if hasattr(pytest.TestReport, "id"):
        from _pytest.nodeid import NodeId  # type: ignore[import-not-found,unused-ignore]

        parsed: Callable[[str], Any] = NodeId.parse
        return parsed
    return str


def junit_merged(config: pytest.Config, received: Received) -> None:
    """Each merged evaluation's properties (:func:`~..render.junit.junit_properties`) on its
    first part's JUnit test case (``--junitxml``), where a run without ``-n`` has them on its golden
    set's: CI dashboards read metrics there. pytest's JUnit writer closed that test case at
    its teardown, before the merge, so they go into the element it keeps for its file."""
    from _pytest.junitxml import bin_xml_escape, mangle_test_address, xml_key

    from ..render.junit import junit_properties

    items, xml = config.stash.get(_PARTS, None), config.stash.get(xml_key, None)
    if not items or xml is None:
        return
    for nodeid, (_, results) in received.items():
        if nodeid not in items or len(results) != 1:
            continue  # not a merged evaluation
        *path, name = mangle_test_address(nodeid)
        classname = ".".join([xml.prefix, *path] if xml.prefix else path)
        cases = [
            case
            for case in (reporter.to_xml() for reporter in xml.node_reporters_ordered)
            if case.get("classname") == classname and case.get("name") == bin_xml_escape(name)
        ]
        if not cases:
            continue
        case = cases[-1]  # pytest-rerunfailures: the last attempt's
        properties = case.find("properties")
        if properties is None:
            properties = ET.Element("properties")
            case.insert(0, properties)
        for key, value in junit_properties(results[0], 1):
            ET.SubElement(properties, "property", name=key, value=bin_xml_escape(str(value)))


#: what the controller received of an item: (declaration order, its evaluations)
Received = dict[str, tuple[int, list[Any]]]


@dataclass
class Merged:
    """The received evaluations with each complete set of parts merged into one (under its
    first part's node id), and what the session is to say of the others."""

    received: Received
    reasons: list[Reason] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: golden set sources with an incomplete evaluation: no baseline, even forced
    incomplete: set[str] = field(default_factory=set)
    #: the node ids (as without -n) of the evaluations that failed: incomplete, not
    #: merged, or a merged verdict that failed (for ``--lf``: :func:`fail_together`)
    failed: set[str] = field(default_factory=set)


class Incomplete(RetrievalError, ValueError):
    """Parts that do not add up to their golden set."""


def merge_received(
    config: pytest.Config, state: SessionState, received: Received, failed: set[str]
) -> Merged | None:
    """Each split evaluation as one, compared with its baseline and decided; None when no
    golden set was split. ``failed``: node ids of items that failed without an evaluation.

    Only a complete set of parts is merged. When some parts ran and others did not (one
    failed, ``-k`` or ``--lf`` left it out, ``-x`` stopped first), nothing of the evaluation
    is shown or gated and the session fails with that reason: the gate did not run, so no
    output may say it passed (a part left out on purpose still leaves the gate unrun)."""
    from ..verdicts import NO_RESULT, PARTIAL_RUN, Reason

    items = config.stash.get(_PARTS, None)
    if not items:
        return None
    groups: dict[str, list[str]] = {}
    for nodeid, item in sorted(items.items(), key=lambda kv: (kv[1].whole, kv[1].index)):
        groups.setdefault(item.whole, []).append(nodeid)
    hashed: dict[tuple[str, int], set[int]] = {}  # (golden set, count) -> its parts
    merged = Merged({nodeid: got for nodeid, got in received.items() if nodeid not in items})
    for whole, ids in groups.items():
        count = items[ids[0]].count
        missing = [nodeid for nodeid in ids if nodeid not in received]
        broken = [nodeid for nodeid in missing if nodeid in failed]
        # and the parts no worker collected (a node id or --lf chose the others); a part no
        # query hashes to is never collected, nor waited for
        collected = {items[nodeid].index for nodeid in ids}
        golden = state.golden(items[ids[0]].golden)
        if (golden.source, count) not in hashed:  # A/B: once per golden set, not retriever
            hashed[golden.source, count] = {shard_of(q.id, count) for q in golden.queries}
        expected = hashed[golden.source, count]
        unrun = sorted([*(items[nodeid].index for nodeid in missing), *expected - collected])
        reason = None
        if unrun and (broken or len(unrun) < len(expected)):  # all deselected: as without -n
            what = ", ".join(part_id(Shard(index, count)) for index in unrun)
            why = "failed" if broken else "did not run"
            reason = Reason(
                NO_RESULT if broken else PARTIAL_RUN,
                f"{whole}: evaluation incomplete: {len(unrun)} of {count} parts {why} "
                f"({what}); the other parts are not merged, shown, gated or recorded as a "
                "baseline"
                + (
                    ""
                    if broken
                    else "; run every part (no -k, -m, --sw or node id that leaves one out)"
                ),
            )
            merged.incomplete.add(golden.source)
        elif not missing:
            try:
                result = _merge(golden, [r for nodeid in ids for r in received[nodeid][1]], state)
            except ValueError as exc:  # PartsMismatch, Incomplete
                reason = Reason(NO_RESULT, f"{whole}: its parts cannot be merged: {exc}")
            else:
                merged.received[ids[0]] = (min(received[nodeid][0] for nodeid in ids), [result])
                if not result.verdict.passed:
                    merged.failed.add(whole)
        if reason is not None:
            merged.failed.add(whole)
            merged.reasons.append(reason)
            merged.notes.append(f"{reason.kind}: {reason.message}")
    return merged


def _merge(
    golden: GoldenSet, payloads: Sequence[EvaluationResult | dict[str, Any]], state: SessionState
) -> EvaluationResult:
    """The parts as one evaluation of ``golden``, with its thresholds, compared with its
    baseline and decided as a run without -n decides (the golden-set test gives no marker
    settings)."""
    from ..evaluation import merge_parts
    from ..results import EvaluationResult
    from .runtest import attach_baseline
    from .session import layered_thresholds

    parts = [
        r if isinstance(r, EvaluationResult) else EvaluationResult.from_dict(r) for r in payloads
    ]
    order = [query.id for query in golden.queries]
    result = merge_parts(parts, order=order)  # refuses parts of different golden contents
    if {query.id for query in result.queries} != set(order):
        raise Incomplete(
            f"their {len(result.queries)} queries are not the {len(order)} of "
            f"{relative(golden.source)}; was the file changed during the run?"
        )
    result = replace(result, thresholds=layered_thresholds(state.settings, golden))
    return attach_baseline(result, golden, state, {})
