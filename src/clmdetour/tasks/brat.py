"""BRAT standoff reading and conversion to word-level IOB2 NER examples.

BRAT (Stenetorp et al., 2012; http://brat.nlplab.org/standoff.html) stores a
document as ``name.txt`` and its annotations as ``name.ann``. Entity lines are
``T<id>\\t<type> <start> <end>[;<start> <end>...]\\t<surface>`` with character
offsets (end exclusive) into the ``.txt``; fragments of a discontinuous entity
are separated by ``;`` and BRAT writes their surface joined by one space. Note
lines ``#<id>\\t<NoteType> <target>\\t<value>`` attach free text to an entity
(QUAERO: UMLS CUIs; FRACCO: ICD-O-3 codes). Other line kinds (relations,
events, attributes, normalisations) are ignored.

Policies (documented in docs/tasks.md, counted in the task manifest):

- **Offsets are checked**: every fragment must lie inside the text and the
  annotation's surface must equal ``" ".join(text[s:e] for each fragment)``;
  a mismatch raises :class:`BratError` naming the ``.ann`` file and line.
- **Discontinuous entities** (``;`` in the offsets): ``full_extent`` (default)
  replaces the fragments by one span from the first fragment's start to the
  last fragment's end; ``first_fragment`` keeps only the fragment that starts
  first in the text. (BRAT allows fragments listed out of text order; the
  surface follows the listed order.)
- **Nested / overlapping entities** (flat policy): entities are ranked by
  length (longest first), then start offset, then type name, and kept greedily
  when they overlap no entity kept before: the outermost (longest) span wins.
  Dropped entities are counted as ``nested`` (inside a kept span),
  ``crossing`` (partial overlap) or ``duplicate_span`` (same span, other type).
- **Segmentation**: ``document`` gives one example per file; ``sentence``
  splits at line breaks and after ``.``, ``!`` or ``?`` followed by
  whitespace and an upper-case letter or a digit, but never inside a kept
  entity; segments are stripped of surrounding whitespace and empty ones
  are skipped.
- **Words**: :data:`WORD_RE` (numbers with a decimal separator, a French
  elided word with its apostrophe such as ``l'`` / ``qu’``, a word with inner
  hyphens such as ``extra-utérine``, or a single punctuation mark), and a
  word is cut at any entity boundary falling inside it, so that entities
  always cover whole words.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

# French-aware word tokenisation: decimal numbers (12,5 / 3.4), elided words with
# their apostrophe (l' d' qu' jusqu’), hyphenated words, single non-space symbols.
WORD_RE = re.compile(r"\d+(?:[.,]\d+)+|\w+['’]|\w+(?:-\w+)*|[^\w\s]")
# A sentence ends at a line break, or after . ! ? (and closing quotes/brackets)
# when whitespace and an upper-case letter or a digit follow.
_SENT_END_RE = re.compile(r"\n+|(?<=[.!?])[\"»”)\]]*[ \t]+(?=[A-ZÀ-ÖØ-Þ0-9«\"(])")

DISCONTINUOUS_POLICIES = ("full_extent", "first_fragment")
SEGMENTATIONS = ("sentence", "document")


class BratError(ValueError):
    """A BRAT file cannot be used; the message names the file and line."""


@dataclass
class BratEntity:
    """One ``T`` line.

    Attributes:
        id: annotation id (``T12``).
        type: entity type (``DISO``, ``morphologie`` ...).
        fragments: list of ``(start, end)`` character offsets, end exclusive, in file order.
        surface: the surface string written in the ``.ann``.
        line: 1-based line number in the ``.ann`` file.
    """

    id: str
    type: str
    fragments: list[tuple[int, int]]
    surface: str
    line: int

    @property
    def start(self) -> int:
        """First character offset of the entity (over all fragments)."""
        return min(s for s, _ in self.fragments)

    @property
    def end(self) -> int:
        """Offset after the entity's last character (over all fragments)."""
        return max(e for _, e in self.fragments)


@dataclass
class BratNote:
    """One ``#`` line: ``#<id>\\t<note_type> <target>\\t<value>``."""

    id: str
    note_type: str
    target: str
    value: str
    line: int


@dataclass
class BratDocument:
    """A ``.txt`` file with its parsed ``.ann`` annotations."""

    doc_id: str
    text: str
    entities: list[BratEntity] = field(default_factory=list)
    notes: list[BratNote] = field(default_factory=list)
    txt_path: str = ""
    ann_path: str | None = None


def _read_text(path: Path) -> str:
    # newline="" keeps \r\n as two characters: BRAT offsets count every character.
    with open(path, encoding="utf-8", newline="") as f:
        return f.read()


def parse_ann(ann_path: str | Path, text: str, check_offsets: bool = True) -> tuple[list[BratEntity], list[BratNote]]:
    """Parse one ``.ann`` file against its document text.

    Args:
        ann_path: the ``.ann`` file (UTF-8).
        text: the full text of the matching ``.txt`` (offsets are into it, in characters).
        check_offsets: verify each entity's surface against ``text`` (see module doc).

    Returns:
        ``(entities, notes)`` in file order.

    Raises:
        BratError: a malformed ``T`` or ``#`` line, offsets outside the text, or a surface that differs from the text at its
            offsets (empty fragments included); the message is ``<file>:<line>: ...``.
    """
    ann_path = Path(ann_path)
    entities: list[BratEntity] = []
    notes: list[BratNote] = []
    for lineno, raw in enumerate(_read_text(ann_path).split("\n"), start=1):
        line = raw.rstrip("\r")
        if not line.strip():
            continue
        where = f"{ann_path}:{lineno}"
        if line.startswith("T"):
            parts = line.split("\t")
            if len(parts) < 2:
                raise BratError(f"{where}: entity line needs '<id>\\t<type> <start> <end>\\t<text>', got {line!r}")
            ann_id, spec = parts[0], parts[1]
            surface = "\t".join(parts[2:])
            m = re.fullmatch(r"(\S+) (\d+ \d+(?:;\d+ \d+)*)", spec)
            if not m:
                raise BratError(f"{where}: entity {ann_id} has malformed type/offsets {spec!r}")
            frags = [tuple(int(x) for x in f.split()) for f in m.group(2).split(";")]
            for i, (s, e) in enumerate(frags):
                if not 0 <= s < e <= len(text):
                    raise BratError(f"{where}: entity {ann_id} span {s}-{e} is outside the text "
                                    f"({len(text)} characters) or empty")
            ent = BratEntity(ann_id, m.group(1), frags, surface, lineno)
            if check_offsets:
                actual = " ".join(text[s:e] for s, e in frags)
                if actual != surface:
                    raise BratError(f"{where}: entity {ann_id} {m.group(2)!r} covers {actual!r} in the text "
                                    f"but the annotation says {surface!r}")
            entities.append(ent)
        elif line.startswith("#"):
            parts = line.split("\t")
            head = parts[1].split() if len(parts) > 1 else []
            if len(head) != 2:
                raise BratError(f"{where}: note line needs '#<id>\\t<type> <target>\\t<value>', got {line!r}")
            notes.append(BratNote(parts[0], head[0], head[1], "\t".join(parts[2:]).strip(), lineno))
    return entities, notes


def read_brat_folder(folder: str | Path, missing_ann: str = "error", check_offsets: bool = True,
                     counts: Counter | None = None) -> list[BratDocument]:
    """Read every ``*.txt`` of a folder with its ``.ann``, sorted by file name.

    Args:
        folder: a folder of ``name.txt`` + ``name.ann`` pairs.
        missing_ann: ``"error"`` (a ``.txt`` without ``.ann`` raises) or ``"drop"``
            (the document is skipped and counted as ``documents_without_ann``).
        check_offsets: see :func:`parse_ann`.
        counts: optional Counter updated with ``documents_without_ann``.

    Raises:
        BratError: missing folder, no ``.txt`` files, a missing ``.ann``
            (with ``missing_ann="error"``), or any :func:`parse_ann` error.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise BratError(f"{folder}: BRAT folder not found")
    txts = sorted(folder.glob("*.txt"))
    if not txts:
        raise BratError(f"{folder}: no .txt files (expected BRAT name.txt + name.ann pairs)")
    docs = []
    for txt in txts:
        ann = txt.with_suffix(".ann")
        if not ann.exists():
            if missing_ann == "drop":
                if counts is not None:
                    counts["documents_without_ann"] += 1
                continue
            raise BratError(f"{ann}: annotation file missing for {txt.name}")
        text = _read_text(txt)
        ents, notes = parse_ann(ann, text, check_offsets=check_offsets)
        docs.append(BratDocument(txt.stem, text, ents, notes, str(txt), str(ann)))
    return docs


def flatten_entities(entities: list[BratEntity], discontinuous: str = "full_extent",
                     counts: Counter | None = None) -> list[tuple[int, int, str]]:
    """Apply the discontinuous and flat (longest span wins) policies.

    Args:
        entities: parsed entities of one document.
        discontinuous: ``"full_extent"`` or ``"first_fragment"`` (see module doc).
        counts: optional Counter updated with ``entities``, ``discontinuous``,
            ``nested``, ``crossing`` and ``duplicate_span``.

    Returns:
        Non-overlapping ``(start, end, type)`` spans sorted by start offset.

    Raises:
        ValueError: unknown ``discontinuous`` policy.
    """
    if discontinuous not in DISCONTINUOUS_POLICIES:
        raise ValueError(f"discontinuous policy must be one of {DISCONTINUOUS_POLICIES}, got {discontinuous!r}")
    counts = counts if counts is not None else Counter()
    spans = []
    for e in entities:
        counts["entities"] += 1
        if len(e.fragments) > 1:
            counts["discontinuous"] += 1
            s, t = (e.start, e.end) if discontinuous == "full_extent" else min(e.fragments)
        else:
            s, t = e.fragments[0]
        spans.append((s, t, e.type))
    kept: list[tuple[int, int, str]] = []
    for s, t, typ in sorted(spans, key=lambda x: (-(x[1] - x[0]), x[0], x[2])):
        clash = next(((ks, kt, ktyp) for ks, kt, ktyp in kept if s < kt and ks < t), None)
        if clash is None:
            kept.append((s, t, typ))
        elif (clash[0], clash[1]) == (s, t):
            counts["duplicate_span"] += 0 if clash[2] == typ else 1
            counts["duplicate_entity"] += 1 if clash[2] == typ else 0
        elif clash[0] <= s and t <= clash[1]:
            counts["nested"] += 1
        else:
            counts["crossing"] += 1
    return sorted(kept)


def sentence_spans(text: str, protected: list[tuple[int, int, str]] | None = None) -> list[tuple[int, int]]:
    """Character spans of the sentences of ``text`` (rule in the module doc).

    Args:
        text: document text.
        protected: entity spans a boundary must not fall inside.

    Returns:
        ``(start, end)`` spans (end exclusive) of non-blank segments, stripped of
        surrounding whitespace, in order.
    """
    protected = protected or []
    cuts = [0]
    for m in _SENT_END_RE.finditer(text):
        cut = m.end()
        if any(s < m.start() < t or s < cut < t for s, t, _ in protected):
            continue
        cuts.append(cut)
    cuts.append(len(text))
    out = []
    for a, b in zip(cuts, cuts[1:]):
        seg = text[a:b]
        if not seg.strip():
            continue
        lead = len(seg) - len(seg.lstrip())
        trail = len(seg) - len(seg.rstrip())
        out.append((a + lead, b - trail))
    return out


def tokenize(text: str, boundaries: set[int] | None = None) -> list[tuple[int, int]]:
    """Word spans of ``text`` by :data:`WORD_RE`, cut at any offset in ``boundaries``.

    Returns:
        ``(start, end)`` character spans (end exclusive) of the words, in order.
    """
    boundaries = boundaries or set()
    out = []
    for m in WORD_RE.finditer(text):
        s, e = m.span()
        cuts = sorted(b for b in boundaries if s < b < e)
        for a, b in zip([s] + cuts, cuts + [e]):
            out.append((a, b))
    return out


def spans_to_iob2(words: list[tuple[int, int]], entities: list[tuple[int, int, str]]) -> list[str]:
    """IOB2 tags of words given non-overlapping entity spans.

    A word inside an entity span gets ``B-<type>`` if it is the entity's first
    word, ``I-<type>`` otherwise; other words get ``O``. Entities that cover no
    word (only whitespace) produce no tag.

    Args:
        words: word ``(start, end)`` spans, in order.
        entities: ``(start, end, type)`` spans, non-overlapping.

    Returns:
        One tag per word.
    """
    tags = ["O"] * len(words)
    for s, t, typ in entities:
        inside = [i for i, (ws, we) in enumerate(words) if ws >= s and we <= t]
        for k, i in enumerate(inside):
            tags[i] = ("B-" if k == 0 else "I-") + typ
    return tags


def iob2_to_spans(tags: list[str]) -> list[tuple[int, int, str]]:
    """Entity spans over word indices ``(first, last_exclusive, type)`` from IOB2 tags.

    Strict IOB2: an ``I-X`` that does not continue an entity of type ``X`` is an error.

    Raises:
        ValueError: a malformed tag or an ``I-`` tag that starts an entity.
    """
    spans: list[tuple[int, int, str]] = []
    cur: list | None = None
    for i, tag in enumerate(tags):
        if tag == "O":
            cur = None
            continue
        m = re.fullmatch(r"([BI])-(.+)", tag)
        if not m:
            raise ValueError(f"tag {i} {tag!r} is not O, B-<type> or I-<type>")
        if m.group(1) == "B":
            cur = [i, i + 1, m.group(2)]
            spans.append(cur)
        else:
            if cur is None or cur[2] != m.group(2):
                raise ValueError(f"tag {i} {tag!r} continues no {m.group(2)} entity (strict IOB2)")
            cur[1] = i + 1
    return [tuple(s) for s in spans]


def document_to_examples(doc: BratDocument, segmentation: str = "sentence", discontinuous: str = "full_extent",
                         entity_types: list[str] | None = None, counts: Counter | None = None) -> list[dict]:
    """Convert one BRAT document to NER examples ``{id, text, words, tags}``.

    Args:
        doc: a parsed document.
        segmentation: ``"sentence"`` or ``"document"``.
        discontinuous: see :func:`flatten_entities`.
        entity_types: keep only these types (others counted as ``type_filtered``);
            ``None`` keeps all.
        counts: optional Counter for the policy counts.

    Returns:
        One dict per segment: ``id`` (``<doc_id>`` or ``<doc_id>:<n>``), ``text``
        (the segment's original text), ``words`` and ``tags`` (IOB2), plus
        ``entities`` (list of ``[start, end, type]`` offsets into ``text``).

    Raises:
        ValueError: unknown segmentation or discontinuous policy.
    """
    if segmentation not in SEGMENTATIONS:
        raise ValueError(f"segmentation must be one of {SEGMENTATIONS}, got {segmentation!r}")
    counts = counts if counts is not None else Counter()
    ents = doc.entities
    if entity_types is not None:
        allowed = set(entity_types)
        counts["type_filtered"] += sum(e.type not in allowed for e in ents)
        ents = [e for e in ents if e.type in allowed]
    flat = flatten_entities(ents, discontinuous, counts)
    if segmentation == "document":
        s0 = len(doc.text) - len(doc.text.lstrip())
        segs = [(s0, len(doc.text.rstrip()))] if doc.text.strip() else []
    else:
        segs = sentence_spans(doc.text, flat)
    out = []
    for n, (a, b) in enumerate(segs):
        seg_ents = [(s - a, t - a, typ) for s, t, typ in flat if a <= s and t <= b]
        seg_text = doc.text[a:b]
        bounds = {x for s, t, _ in seg_ents for x in (s, t)}
        words = tokenize(seg_text, bounds)
        tags = spans_to_iob2(words, seg_ents)
        counts["entities_without_words"] += len(seg_ents) - sum(t.startswith("B-") for t in tags)
        out.append({
            "id": doc.doc_id if segmentation == "document" else f"{doc.doc_id}:{n}",
            "text": seg_text,
            "words": [seg_text[s:e] for s, e in words],
            "tags": tags,
            "entities": [list(e) for e in seg_ents],
        })
    counts["segments"] += len(out)
    return out
