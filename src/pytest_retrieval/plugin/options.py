"""The pytest front-end of :mod:`..settings`: its options and ini keys registered from the
spec, and resolved once into :class:`Settings` (CLI > ini > the spec's default).

Validators run at argument-parsing time, so a bad value is an argparse-style usage error
(exit 4) naming the option, never a failure deep inside a run.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ..errors import ConfigError
from ..settings import (
    DEFAULT_ALPHA,
    DEFAULT_CONCURRENCY,
    DEFAULT_DEADLINE,
    DEFAULT_FIXTURE,
    DEFAULT_JUDGE_MODEL,
    DEFAULT_MAX_FAILURES,
    DEFAULT_PROGRESS,
    DEFAULT_SPLIT_MIN,
    OPTIONS,
    JudgeConfig,
)
from ..validators import (
    alpha_arg,
    max_failures_arg,
    positive_float,
    positive_int,
    seconds_or_zero,
    split_min_arg,
)

if TYPE_CHECKING:
    from ..limits import Allowance, Threshold
    from ..validators import Shard


# ---------------------------------------------------------------------------- options


def pytest_addoption(parser: pytest.Parser) -> None:
    """Every ``--retrieval-*`` option and ``retrieval_*`` ini key: :data:`~..settings.OPTIONS`."""
    group = parser.getgroup("retrieval", "retrieval evaluation (pytest-retrieval)")
    for option in OPTIONS:
        if option.pytest:
            group.addoption(option.pytest_flag, **option.pytest_arguments())
    for option in OPTIONS:
        ini = option.ini
        if ini is not None:
            parser.addini(ini.key, ini.help, type=INI_TYPES[ini.kind], default=_ini_default(option))


def _ini_default(option: Any) -> Any:
    """An ini key's default as pytest gives it when unset: an empty value of its kind (the
    option's default applies then), or the fixture's name."""
    kind = option.ini.kind
    if kind == "bool":
        return False
    if kind in ("linelist", "paths"):
        return []
    return option.default if option.name == "fixture" else ""


#: the ini type of a numeric key: a string (as an ini file holds it), or from pytest 9.2 on,
#: where ini keys may have several types, a TOML number too -- pytest 9's native
#: ``[tool.pytest]`` table checks types, and refused ``retrieval_alpha = 0.05`` as not a string
NUMBER_INI: Any = str | int | float if pytest.version_tuple >= (9, 2) else "string"
#: an :class:`~.settings.Ini` kind -> pytest's ``addini`` type (None: a string)
INI_TYPES: dict[str, Any] = {
    "string": None,
    "number": NUMBER_INI,
    "bool": "bool",
    "linelist": "linelist",
    "paths": "paths",
}


@dataclass(frozen=True)
class Outputs:
    """Where the session's outputs go (None: not asked for). Resolved on its own, so a
    session that stops on a usage error can still write them."""

    report: Path | None = None
    markdown: Path | None = None
    html: Path | None = None


def output_paths(config: pytest.Config, given: argparse.Namespace | None = None) -> Outputs:
    """The output paths from the options (``given``: the namespace pytest parsed so far,
    before ``config.option`` is filled), relative to where pytest started, or the ini keys,
    relative to the ini file (:func:`_output`). Never raises for a bad setting."""
    options = config.option if given is None else given
    return Outputs(
        report=_output(config, "retrieval_report", options),
        markdown=_output(config, "retrieval_markdown", options),
        html=_output(config, "retrieval_html", options),
    )


@dataclass(frozen=True)
class Settings:
    """Everything the options and ini say, resolved once (CLI > ini > built-in default)."""

    goldens: list[Path]
    fixture: str
    concurrency: int
    timeout: float | None
    k: int | None
    metrics: list[str]
    #: threshold and allowance layers, parsed (a bad ini line is a usage error at start-up)
    ini_thresholds: tuple[Threshold, ...]
    cli_thresholds: tuple[Threshold, ...]
    report: Path | None
    baseline: Path | None
    update: str | None  # None, "safe" or "force"
    ini_max_drops: tuple[Allowance, ...]
    cli_max_drops: tuple[Allowance, ...]
    alpha: float
    compare_to: str | None
    markdown: Path | None = None
    html: Path | None = None
    sample: int | None = None
    sample_seed: int = 0
    progress: str = DEFAULT_PROGRESS
    judge: JudgeConfig | None = None
    only: bool = False  # --retrieval-only: golden evaluations and nothing else
    strict: bool = False  # golden-set warnings are errors
    doc_id_key: str | None = None  # metadata key of framework hits' doc ids
    #: metrics gated against the baseline (None: the default set); from CLI or ini
    gate: tuple[str, ...] | None = None
    strict_baseline: bool = False  # a missing or stale baseline fails the run
    shard: Shard | None = None  # --retrieval-shard: this CI job evaluates one part
    #: golden sets at least this large are split across xdist workers (0: never)
    split_min: int = DEFAULT_SPLIT_MIN
    #: failed retriever calls in a row after which the calls stop (0: never)
    max_failures: int = DEFAULT_MAX_FAILURES
    #: --retrieval-run: precomputed run files evaluated instead of the retriever fixture
    runs: tuple[Path, ...] = ()
    export_run: Path | None = None  # --retrieval-export-run: the TREC run to write

    @property
    def errors_kept_in(self) -> str:
        """Where the advice sends the reader for every failed call's traceback: the JSON
        report being written, else the option that writes one."""
        from ..render.terminal import kept_in

        return kept_in(self.report)


def _ini_number(config: pytest.Config, name: str, kind: Callable[[str], Any]) -> Any:
    raw = str(config.getini(name)).strip()
    if not raw:
        return None
    try:
        return kind(raw)
    except argparse.ArgumentTypeError as exc:
        raise ConfigError(f"ini option {name} = {raw!r}: {exc}") from None


def _resolve(config: pytest.Config, path: str, from_cli: bool) -> Path | None:
    """A path from the command line is relative to where pytest was started; from ini, to
    the ini file's folder."""
    if not path:
        return None
    base = (
        config.invocation_params.dir
        if from_cli
        else (config.inipath.parent if config.inipath else config.rootpath)
    )
    return base / path


def settings_from_config(config: pytest.Config) -> Settings:
    cli_goldens = config.getoption("retrieval_golden") or []
    goldens = [
        Path(p) if Path(p).is_absolute() else config.invocation_params.dir / p for p in cli_goldens
    ] or list(config.getini("retrieval_golden"))
    concurrency = config.getoption("retrieval_concurrency") or _ini_number(
        config, "retrieval_concurrency", positive_int
    )
    timeout = config.getoption("retrieval_timeout") or _ini_number(
        config, "retrieval_timeout", positive_float
    )
    outputs = output_paths(config)
    baseline = config.getoption("retrieval_baseline") or str(config.getini("retrieval_baseline"))
    alpha = config.getoption("retrieval_alpha") or _ini_number(config, "retrieval_alpha", alpha_arg)
    if not config.getoption("retrieval_judge"):
        _judge_ini(config)
    return Settings(
        goldens=goldens,
        fixture=str(config.getini("retrieval_fixture")).strip() or DEFAULT_FIXTURE,
        concurrency=concurrency or DEFAULT_CONCURRENCY,
        timeout=timeout,
        k=config.getoption("retrieval_k"),
        metrics=config.getoption("retrieval_metric") or [],
        ini_thresholds=_ini_layer(config, "retrieval_thresholds", _threshold),
        cli_thresholds=tuple(config.getoption("retrieval_threshold") or ()),
        report=outputs.report,
        baseline=_resolve(config, baseline, bool(config.getoption("retrieval_baseline"))),
        update=config.getoption("retrieval_update_baseline"),
        ini_max_drops=_ini_layer(config, "retrieval_max_drop", _allowance),
        cli_max_drops=tuple(config.getoption("retrieval_max_drop") or ()),
        alpha=alpha or DEFAULT_ALPHA,
        compare_to=config.getoption("retrieval_compare_to"),
        markdown=outputs.markdown,
        html=outputs.html,
        sample=config.getoption("retrieval_sample"),
        sample_seed=config.getoption("retrieval_sample_seed"),
        progress=config.getoption("retrieval_progress"),
        judge=_judge_settings(config) if config.getoption("retrieval_judge") else None,
        only=bool(config.getoption("retrieval_only")),
        strict=flag(config, "retrieval_strict"),
        doc_id_key=config.getoption("retrieval_doc_id_key")
        or str(config.getini("retrieval_doc_id_key")).strip()
        or None,
        gate=_gate(config),
        strict_baseline=flag(config, "retrieval_strict_baseline"),
        split_min=_split_min(config),
        max_failures=_max_failures(config),
        shard=_shard(config, outputs.report),
        runs=_runs(config),
        export_run=_output(config, "retrieval_export_run"),
    )


def _threshold(text: str, source: str) -> Threshold:
    from ..limits import parse_assignment

    return parse_assignment(text, source)


def _allowance(text: str, source: str) -> Allowance:
    from ..limits import parse_allowance_assignment

    return parse_allowance_assignment(text, source)


def _ini_layer(
    config: pytest.Config, name: str, parse: Callable[[str, str], Any]
) -> tuple[Any, ...]:
    """An ini list of METRIC=VALUE lines, parsed; a bad line is a usage error naming it."""
    lines = list(config.getini(name))
    if not lines:  # the common case: no import of the gate (and numpy) at start-up
        return ()
    from ..limits import AllowanceError, ThresholdError

    try:
        return tuple(parse(line, f"ini {name}") for line in lines)
    except (ThresholdError, AllowanceError) as exc:
        raise ConfigError(f"ini option {name}: {exc}") from None


def _gate(config: pytest.Config) -> tuple[str, ...] | None:
    """--retrieval-gate (repeatable) or the ini list; None: the default gated set."""
    given = config.getoption("retrieval_gate")
    if given:
        return tuple(given)
    lines = list(config.getini("retrieval_gate"))
    if not lines:  # the common case: no import of the metrics (and numpy) at start-up
        return None
    from ..metrics import MetricNameError, parse_metric

    try:
        return tuple(parse_metric(line).name for line in lines) or None
    except MetricNameError as exc:
        raise ConfigError(f"ini option retrieval_gate: {exc}") from None


def _max_failures(config: pytest.Config) -> int:
    """--retrieval-max-failures, else ini retrieval_max_failures, else the default (0 is a
    value)."""
    given = config.getoption("retrieval_max_failures")
    if given is None:
        given = _ini_number(config, "retrieval_max_failures", max_failures_arg)
    return DEFAULT_MAX_FAILURES if given is None else int(given)


def _split_min(config: pytest.Config) -> int:
    """--retrieval-split-min, else ini retrieval_split_min, else the default (0 is a value)."""
    given = config.getoption("retrieval_split_min")
    if given is None:
        given = _ini_number(config, "retrieval_split_min", split_min_arg)
    return DEFAULT_SPLIT_MIN if given is None else int(given)


def _shard(config: pytest.Config, report: Path | None) -> Shard | None:
    """--retrieval-shard, checked against what a part cannot do: be gated alone (it needs a
    report for `combine`), be recorded as a baseline, or be sampled."""
    shard: Shard | None = config.getoption("retrieval_shard")
    if shard is None:
        return None
    given = f"--retrieval-shard {shard}"
    if report is None:
        raise ConfigError(
            f"{given} needs --retrieval-report PATH (or ini retrieval_report): the shard's "
            "partial report is what `pytest-retrieval combine` gates, with every other shard's"
        )
    if config.getoption("retrieval_update_baseline") is not None:
        raise ConfigError(
            f"{given} with --retrieval-update-baseline: a shard holds part of the golden set, "
            "and a baseline is never recorded from part of one; record it from every shard's "
            "report with `pytest-retrieval combine ... --update-baseline`"
        )
    if config.getoption("retrieval_sample") is not None:
        raise ConfigError(
            f"{given} with --retrieval-sample: a sample cannot be combined into the whole "
            "golden set; use one or the other"
        )
    return shard


def _runs(config: pytest.Config) -> tuple[Path, ...]:
    """--retrieval-run files (relative to where pytest started), else the ini list (to the
    ini file); each file once."""
    given = config.getoption("retrieval_run")
    if given:
        here = config.invocation_params.dir
        return tuple(dict.fromkeys(here / path for path in given))
    return tuple(dict.fromkeys(Path(path) for path in config.getini("retrieval_run")))


def check_export_name(config: pytest.Config, settings: Settings) -> None:
    """--retrieval-export-run writes a TREC run: a JSON name would be read back as JSON."""
    path = settings.export_run
    if path is None:
        return
    from ..runfile import JSON_NAMES, format_suffix  # only now: it imports numpy

    if format_suffix(path) in JSON_NAMES:
        cli = config.getoption("retrieval_export_run")
        given = (
            f"--retrieval-export-run {cli}"
            if cli
            else (f"ini retrieval_export_run = {config.getini('retrieval_export_run')}")
        )
        stem = path.name[: -len("".join(path.suffixes))] or path.name
        raise ConfigError(
            f"{given}: the export is a TREC run, and a file named so is "
            "read as JSON (--retrieval-run, pytest-retrieval eval, ranx); name it "
            f"{stem}.trec (or {stem}.trec.gz)"
        )


def flag(config: pytest.Config, name: str) -> bool:
    """A boolean option that its ini key can also set (the option wins when given)."""
    given = config.getoption(name)
    return bool(config.getini(name)) if given is None else bool(given)


def _output(
    config: pytest.Config, name: str, options: argparse.Namespace | None = None
) -> Path | None:
    """An output path: the option (relative to the start dir) or the ini key (to the ini)."""
    cli = getattr(config.option if options is None else options, name, None)
    return _resolve(config, cli or str(config.getini(name)).strip(), bool(cli))


def _judge_settings(config: pytest.Config) -> JudgeConfig:
    def option(name: str) -> Any:
        return config.getoption(f"retrieval_judge_{name}")

    cache: Path | None = None
    if not option("no_cache"):
        cache = _output(config, "retrieval_judge_cache")
        if cache is None:
            pytest_cache = getattr(config, "cache", None)  # absent with -p no:cacheprovider
            cache = (
                pytest_cache.mkdir("retrieval-judge")
                if pytest_cache is not None
                else config.rootpath / ".pytest_cache" / "retrieval-judge"
            )
    prompt = option("prompt")
    validate = option("validate")
    return JudgeConfig(
        model=option("model")
        or str(config.getini("retrieval_judge_model")).strip()
        or DEFAULT_JUDGE_MODEL,
        base_url=option("base_url") or os.environ.get("OPENAI_BASE_URL") or None,
        scale=option("scale"),
        min_score=option("min_score"),
        min_coverage=option("min_coverage"),
        concurrency=option("concurrency"),
        timeout=option("timeout"),
        max_retry_wait=option("max_wait"),
        cache_dir=cache,
        use_cache=cache is not None,
        cache_only=option("cache_only"),
        max_calls=option("max_calls"),
        max_tokens_budget=option("max_tokens"),
        prompt_file=Path(prompt).resolve() if prompt else None,
        text_budget_chars=option("text_budget"),
        validate=Path(validate).resolve() if validate else None,
        prices=_prices(list(config.getini("retrieval_judge_prices"))),
        fallback=_fallback(config),
        relevance_level=option("relevance_level"),
        samples=option("samples"),
        deadline=_deadline(config),
        max_failures=option("max_failures"),
        retry_ungraded=option("retry_ungraded"),
    )


def _judge_ini(config: pytest.Config) -> None:
    """Check the judge's ini values on a run without the judge too: a typo in the shared
    ini shows on the first run, not only on CI's judged one."""
    _deadline(config)
    _fallback(config)
    _prices(list(config.getini("retrieval_judge_prices")))


def _deadline(config: pytest.Config) -> float | None:
    """--retrieval-judge-deadline, else ini retrieval_judge_deadline, else the default;
    0 means none."""
    chosen = config.getoption("retrieval_judge_deadline")
    if chosen is None:
        chosen = _ini_number(config, "retrieval_judge_deadline", seconds_or_zero)
    if chosen is None:
        chosen = DEFAULT_DEADLINE
    return float(chosen) or None


def _fallback(config: pytest.Config) -> str:
    chosen = (
        config.getoption("retrieval_judge_fallback")
        or str(config.getini("retrieval_judge_fallback")).strip()
    )
    if chosen not in ("", "error", "cache-only"):
        raise ConfigError(
            f"ini option retrieval_judge_fallback = {chosen!r}: use error or cache-only"
        )
    return chosen or "error"


def _prices(lines: list[str]) -> dict[str, tuple[float, float]]:
    prices = {}
    for line in lines:
        model, _, numbers = line.partition("=")
        try:
            given, _, taken = numbers.partition(",")
            prices[model.strip()] = (float(given), float(taken))
        except ValueError:
            raise ConfigError(
                f"ini option retrieval_judge_prices: {line!r} is not MODEL=INPUT,OUTPUT "
                "(US$ per million tokens, e.g. gpt-4.1-mini=0.40,1.60)"
            ) from None
    return prices
