"""A corpus to build a golden set from: documents with ids, text, title, metadata and source.

Read by ``synth`` (and usable by any command that needs the documents themselves, not only
their text). Three layouts:

- BEIR ``corpus.jsonl`` (or a BEIR folder holding one): one object a line with ``_id``
  (``id`` and ``doc_id`` also accepted), ``text`` (or ``contents``), optional ``title`` and
  ``metadata``; other top-level fields join the metadata (so ``--stratify-by`` can use them);
- a JSON file: an object ``{"doc-id": "text"}`` or ``{"doc-id": {"text": ..., "title": ...,
  "metadata": {...}}}``, or a list of objects shaped like the JSONL lines;
- a folder of text files: every file not hidden, read as UTF-8; its id is the path relative
  to the folder without the suffix (``guides/setup.md`` -> ``guides/setup``), its source the
  first folder under the root (``guides``).

Every malformed input is one :class:`CorpusError` naming the file, the line or JSON pointer,
and the fix. Ids are kept as the user wrote them (an integer ``_id`` becomes its decimal
string, as golden sets and the judge read them).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._internal.io import text_lines
from .._internal.json import JsonProblem, loads
from ..errors import InputError

_ID_KEYS = ("_id", "id", "doc_id")
_TEXT_KEYS = ("text", "contents")
_OWN_KEYS = frozenset({*_ID_KEYS, *_TEXT_KEYS, "title", "metadata"})
_EXAMPLE = '{"_id": "doc-1", "title": "...", "text": "...", "metadata": {"source": "..."}}'


class CorpusError(InputError):
    """A corpus that cannot be read: which file, where, what is wrong, how to fix it."""

    def __init__(self, source: Path, where: str, problem: str, fix: str) -> None:
        place = f"{source}, {where}" if where else str(source)
        super().__init__(f"corpus {place}: {problem}\n  fix: {fix}")


@dataclass(frozen=True)
class Document:
    """One document: ``text`` is what a query is written from (title, then body)."""

    id: str
    text: str
    source: str
    title: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)


def read_corpus(path: Path) -> list[Document]:
    """The documents of a corpus file or folder, in file order (a folder's: sorted paths)."""
    if path.is_dir():
        beir = path / "corpus.jsonl"
        documents = _jsonl(beir) if beir.is_file() else _folder(path)
    elif not path.exists():
        raise CorpusError(
            path,
            "",
            "no such file or folder",
            "give a corpus.jsonl, a .json file or a folder of text files",
        )
    elif path.suffix == ".jsonl":
        documents = _jsonl(path)
    elif path.suffix == ".json":
        documents = _json(path)
    else:
        raise CorpusError(
            path,
            "",
            f"unknown corpus format {path.suffix or '(no suffix)'!r}",
            "use a BEIR corpus.jsonl, a .json file of doc id -> text, or a folder of text files",
        )
    if not documents:
        raise CorpusError(path, "", "no documents", "give a corpus with at least one document")
    return documents


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise CorpusError(
            path, f"byte {exc.start}", "not UTF-8 text", "save it as UTF-8 (or remove it)"
        ) from None
    except OSError as exc:
        raise CorpusError(path, "", f"cannot read it ({exc.strerror})", "check the path") from None


def _parse(path: Path, text: str, where: str) -> Any:
    try:
        return loads(text)
    except JsonProblem as exc:
        pointer = exc.where.startswith("/")  # a key twice: the line, then its pointer
        place = f"{where}, {exc.where}" if where and pointer else where or exc.where
        raise CorpusError(path, place, exc.problem, exc.fix) from None


def _jsonl(path: Path) -> list[Document]:
    seen: dict[str, str] = {}
    documents = []
    for number, line in enumerate(text_lines(_text(path)), start=1):
        if line.strip():
            where = f"line {number}"
            document = _record(path, where, _parse(path, line, where), path.name)
            _unique(path, where, document.id, seen)
            documents.append(document)
    return documents


def _json(path: Path) -> list[Document]:
    data = _parse(path, _text(path), "")
    seen: dict[str, str] = {}
    documents = []
    if isinstance(data, Mapping):
        for key, value in data.items():
            where = f"/{_escape(key)}"
            if isinstance(value, str):
                document = Document(key, value, path.name)
            elif isinstance(value, Mapping):
                document = _record(path, where, {"_id": key, **value}, path.name)
            else:
                raise CorpusError(
                    path,
                    where,
                    f"a document must be a text or an object, not {type(value).__name__}",
                    'write "doc-id": "text" or "doc-id": {"text": "...", "metadata": {...}}',
                )
            seen[document.id] = where
            documents.append(document)
        return documents
    if isinstance(data, list):
        for index, value in enumerate(data):
            where = f"/{index}"
            document = _record(path, where, value, path.name)
            _unique(path, where, document.id, seen)
            documents.append(document)
        return documents
    raise CorpusError(
        path,
        "/",
        "a JSON corpus must be an object of doc id -> text, or a list of documents",
        f'write {{"doc-1": "text", ...}} or [{_EXAMPLE}, ...]',
    )


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _unique(path: Path, where: str, doc_id: str, seen: dict[str, str]) -> None:
    if doc_id in seen:
        raise CorpusError(
            path,
            where,
            f"doc id {doc_id!r} again (first at {seen[doc_id]})",
            "give each document its own id",
        )
    seen[doc_id] = where


def _record(path: Path, where: str, record: Any, source: str) -> Document:
    """One document object (a JSONL line, a JSON list item or value)."""
    if not isinstance(record, Mapping):
        raise CorpusError(path, where, "a document must be a JSON object", f"write {_EXAMPLE}")
    doc_id = next((record[key] for key in _ID_KEYS if key in record), None)
    if isinstance(doc_id, bool) or not isinstance(doc_id, str | int) or doc_id == "":
        raise CorpusError(
            path,
            where,
            "a document needs an id (_id, id or doc_id): a non-empty string or an integer",
            f"write {_EXAMPLE}",
        )
    text = next((record[key] for key in _TEXT_KEYS if key in record), None)
    if not isinstance(text, str):
        raise CorpusError(
            path, where, f"document {doc_id!r} needs a text (a string)", f"write {_EXAMPLE}"
        )
    title = record.get("title")
    if title is not None and not isinstance(title, str):
        raise CorpusError(path, where, "the title must be a string", f"write {_EXAMPLE}")
    metadata = record.get("metadata", {})
    if not isinstance(metadata, Mapping):
        raise CorpusError(
            path, where, "metadata must be an object", 'write "metadata": {"field": "value"}'
        )
    extra = {key: value for key, value in record.items() if key not in _OWN_KEYS}
    body = f"{title}\n{text}" if title else text  # as the judge reads a corpus (formats.py)
    return Document(str(doc_id), body, source, title or None, {**extra, **metadata})


def _folder(root: Path) -> list[Document]:
    seen: dict[str, str] = {}
    documents = []
    for path in _files(root):
        relative = path.relative_to(root)
        doc_id = relative.with_suffix("").as_posix()
        if doc_id in seen:
            raise CorpusError(
                path,
                "",
                f"doc id {doc_id!r} is also {seen[doc_id]} (ids are paths without suffix)",
                "rename one of the two files",
            )
        seen[doc_id] = relative.as_posix()
        source = relative.parts[0] if len(relative.parts) > 1 else "."
        documents.append(Document(doc_id, _text(path), source))
    return documents


def _files(root: Path) -> Iterator[Path]:
    """Every regular file under ``root`` in sorted order; hidden files and folders skipped."""
    for path in sorted(root.rglob("*")):
        parts = path.relative_to(root).parts
        if path.is_file() and not any(part.startswith(".") for part in parts):
            yield path
