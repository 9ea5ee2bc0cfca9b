"""Check the judge against human labels before trusting it: accuracy and Cohen's kappa.

The on-topic-rate paper validated its prompt on human-labelled pairs (94.5% agreement)
before using it as a metric; ``--retrieval-judge-validate labels.json`` does the same here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._internal.json import JsonProblem, loads
from ..errors import ConfigError, JudgeError
from .client import Judge, JudgePair


class LabelsError(ConfigError, JudgeError):
    """A labels file that cannot be used; names the file and the JSON pointer."""


@dataclass
class Calibration:
    n: int  # pairs the judge graded
    accuracy: float
    kappa: float
    tp: int
    fp: int
    fn: int
    tn: int
    ungraded: int
    #: with several samples per pair: the judge's mean agreement with its own majority,
    #: and how many pairs it answered the same way every time
    samples: int = 1
    self_agreement: float | None = None
    unanimous: int | None = None

    def line(self, source: str) -> str:
        weak = "" if self.kappa >= 0.6 else "; below 0.6 is weak agreement: fix the prompt first"
        repeat = ""
        if self.samples > 1 and self.self_agreement is not None:
            repeat = (
                f"; asked {self.samples} times, it gave the same answer every time on "
                f"{self.unanimous} of {self.n + self.ungraded} pairs, and on average "
                f"{self.self_agreement:.1%} of its answers matched its majority verdict"
            )
        return (
            f"judge calibration on {source}: {self.n} pairs, accuracy {self.accuracy:.3f}, "
            f"Cohen's kappa {self.kappa:.3f} (judge on topic: {self.tp} of the humans' on-topic, "
            f"{self.fp} of their off-topic)"
            + (f", {self.ungraded} ungraded" if self.ungraded else "")
            + repeat
            + weak
        )


def cohen_kappa(tp: int, fp: int, fn: int, tn: int) -> float:
    """Agreement beyond chance between two binary raters (1.0 perfect, 0 chance)."""
    n = tp + fp + fn + tn
    if n == 0:
        return float("nan")
    observed = (tp + tn) / n
    expected = ((tp + fp) * (tp + fn) + (fn + tn) * (fp + tn)) / (n * n)
    return 1.0 if expected == 1 else (observed - expected) / (1 - expected)


def load_labels(path: Path) -> list[tuple[JudgePair, bool]]:
    """``[{"query", "text", "on_topic", "criteria"?, "doc_id"?}, ...]`` from a JSON file."""
    try:
        data: Any = loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise LabelsError(f"{path}: cannot read it ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise LabelsError(f"{path}, byte {exc.start}: not UTF-8 text; save it as UTF-8") from None
    except JsonProblem as exc:
        raise LabelsError(f"{path}, {exc}; {exc.fix}" if exc.where else f"{path}: {exc}") from None
    if not isinstance(data, list) or not data:
        raise LabelsError(f"{path}, /: write a non-empty list of labelled pairs")
    pairs = []
    for index, item in enumerate(data):
        where = f"{path}, /{index}"
        if not isinstance(item, dict):
            raise LabelsError(f"{where}: each label is an object")
        for key, kind in (("query", str), ("text", str), ("on_topic", bool)):
            if not isinstance(item.get(key), kind):
                raise LabelsError(
                    f"{where}/{key}: missing or not a {kind.__name__} "
                    '(write {"query": "...", "text": "...", "on_topic": true})'
                )
        criteria = item.get("criteria")
        doc_id = str(item.get("doc_id", index))
        pairs.append((JudgePair(item["query"], criteria, doc_id, item["text"]), item["on_topic"]))
    return pairs


def calibrate(judge: Judge, path: Path) -> Calibration:
    labelled = load_labels(path)
    verdicts = judge.judge([pair for pair, _ in labelled])
    tp = fp = fn = tn = ungraded = 0
    for (_, human), verdict in zip(labelled, verdicts, strict=True):
        if verdict.error is not None or verdict.on_topic is None:
            ungraded += 1
            continue
        if verdict.on_topic:
            tp, fp = (tp + 1, fp) if human else (tp, fp + 1)
        else:
            fn, tn = (fn + 1, tn) if human else (fn, tn + 1)
    n = tp + fp + fn + tn
    agreements = [v.agreement for v in verdicts if v.agreement is not None]
    return Calibration(
        n=n,
        accuracy=(tp + tn) / n if n else float("nan"),
        kappa=cohen_kappa(tp, fp, fn, tn),
        tp=tp,
        fp=fp,
        fn=fn,
        tn=tn,
        ungraded=ungraded,
        samples=judge.config.samples,
        self_agreement=sum(agreements) / len(agreements) if agreements else None,
        unanimous=sum(1 for a in agreements if a == 1.0) if agreements else None,
    )
