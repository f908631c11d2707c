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
  annotation's surface must equal ``" ".join(text[s:e] for each fragment)``
  (compared in Unicode NFC); a mismatch raises :class:`BratError` naming the
  ``.ann`` file and line.
- **Encodings and line endings**: files are UTF-8. Tools disagree on whether a
  CRLF line break counts as one character or two and whether a leading BOM
  counts at all, so both conventions are accepted: the reader takes the
  ``.txt`` as written, then without its BOM, then with CRLF/CR read as one
  ``\n``, and keeps the first reading under which *every* entity's surface
  matches (counted as ``offsets_line_breaks_as_one`` / ``offsets_without_bom``).
  When none does, the error names the line endings and both conventions.
- **Entity types**: ``type_map`` renames the type written in the ``T`` line
  (e.g. a concept id to its group); ``type_from_note`` takes the type from
  the value of the entity's note of that kind (``AnnotatorNotes``) instead.
  A structured note (``"C0001", "name", "semantic type", "DISO"``) gives its
  type through a :class:`NoteTypeRule` (``type_from_note`` as a mapping): one
  comma-separated field (quotes respected, surrounding whitespace and quotes
  stripped; a negative index counts from the end) or the one capture group of
  a regex. A value listing several groups (``DISO|CHEM``) is resolved by
  ``multi_group``: ``error`` (stop, naming the line), ``first`` (the group
  listed first) or ``drop`` (the entity is left out). A note that yields no
  type (field out of range, regex not matching, empty) never becomes a type:
  by ``unmatched`` the entity keeps its written type as an entity without a
  note does (``written``), is left out (``drop``) or stops (``error``). Every
  outcome is counted (``type_notes_*``, ``types_*``).
- **Discontinuous entities** (``;`` in the offsets): ``contiguous_first``
  (default) flattens the contiguous mentions first and then keeps a
  discontinuous entity's full extent only where it overlaps no kept span
  (otherwise it is dropped and counted as ``discontinuous_dropped``), so no
  gold contiguous mention is lost to a discontinuous one; ``full_extent``
  replaces the fragments by one span from the first fragment's start to the
  last fragment's end (which may swallow a contiguous mention nested in it);
  ``first_fragment`` keeps only the fragment that starts first in the text;
  ``drop`` leaves discontinuous entities out. (BRAT allows fragments listed
  out of text order; the surface follows the listed order.)
- **Nested / overlapping entities** (flat policy): entities are ranked by
  length (longest first), then start offset, then type name, and kept greedily
  when they overlap no entity kept before: the outermost (longest) span wins.
  Dropped entities are counted as ``nested`` (inside a kept span),
  ``crossing`` (partial overlap) or ``duplicate_span`` (same span, other type).
- **Segmentation**: ``document`` gives one example per file; ``sentence``
  splits at line breaks and after ``.``, ``!`` or ``?`` (and closing
  quotes/brackets) followed by whitespace and an upper-case letter, a digit or
  an opening quote/bracket; with ``sentence_splitter: spacy`` (default) such a
  cut inside a line is kept only where spaCy's French ``senter`` also starts a
  sentence, so no cut follows ``Dr.`` or ``M.`` (:mod:`clmdetour.tasks.segment`);
  never inside a kept entity; segments are stripped of surrounding whitespace
  and empty ones are skipped.
- **Words**: :data:`WORD_RE` (numbers with a decimal separator, a French
  elided word with its apostrophe such as ``l'`` / ``qu’``, a word with inner
  hyphens such as ``extra-utérine``, or a single punctuation mark; combining
  marks belong to the word they follow, so an NFD ``é`` is never split), and
  a word is cut at any entity boundary falling inside it, so that entities
  always cover whole words. Words and texts are returned in NFC.
"""

from __future__ import annotations

import csv
import itertools
import logging
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from clmdetour.errors import ExpectedError
from clmdetour.textio import BOM, line_ending_names, nfc, one_group_regex, read_text, text_lines

log = logging.getLogger(__name__)

# French-aware word tokenisation: decimal numbers (12,5 / 3.4), elided words with
# their apostrophe (l' d' qu' jusqu’), hyphenated words, single non-space symbols.
# Combining marks (U+0300-036F and the other combining blocks) continue the word
# they follow, so a decomposed (NFD) "é" = "e" + U+0301 stays one word.
_W = r"[\w\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]"
WORD_RE = re.compile(rf"\d+(?:[.,]\d+)+|{_W}+['’]|{_W}+(?:-{_W}+)*|[^\w\s][\u0300-\u036f]*")
# A sentence ends at a line break, or after . ! ? (and closing quotes/brackets)
# when whitespace and an upper-case letter or a digit follow.
_SENT_END_RE = re.compile(r"\n+|(?<=[.!?])[\"»”)\]]*[ \t]+(?=[A-ZÀ-ÖØ-Þ0-9«\"(])")

DISCONTINUOUS_POLICIES = ("contiguous_first", "full_extent", "first_fragment", "drop")
DEFAULT_DISCONTINUOUS = "contiguous_first"
SEGMENTATIONS = ("sentence", "document")
# type_from_note as a mapping: what a note listing several groups, and a note yielding no type, lead to
MULTI_GROUP_RULES = ("error", "first", "drop")
UNMATCHED_RULES = ("written", "drop", "error")
NOTE_RULE_KEYS = ("note", "field", "regex", "multi_group", "group_separator", "unmatched")
FILTERED_EXAMPLES = 5  # entities dropped by entity_types shown in the manifest (entity_types.examples)


class BratError(ExpectedError, ValueError):
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
        type_origin: where ``type`` comes from once :func:`map_entity_types` ran with a
            ``type_from_note``: ``"note"`` (read from the entity's note), ``"no_note"`` (written, the entity
            has no such note), ``"unmatched_note"`` (written, its note yielded no type); ``"written"`` without
            ``type_from_note``.
        type_mapped: ``type_map`` renamed the type.
    """

    id: str
    type: str
    fragments: list[tuple[int, int]]
    surface: str
    line: int
    type_origin: str = "written"
    type_mapped: bool = False

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


def _read_text(path: Path, keep_bom: bool = False) -> str:
    # Line endings kept: BRAT offsets may count every character of a CRLF (see module doc).
    return read_text(path, "BRAT file", BratError, keep_bom=keep_bom)


def _parse_ann_lines(ann_path: Path) -> tuple[list[BratEntity], list[BratNote]]:
    entities: list[BratEntity] = []
    notes: list[BratNote] = []
    for lineno, line in enumerate(text_lines(_read_text(ann_path)), start=1):
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
            for s, e in frags:
                if not s < e:
                    raise BratError(f"{where}: entity {ann_id} span {s}-{e} is empty")
            entities.append(BratEntity(ann_id, m.group(1), frags, surface, lineno))
        elif line.startswith("#"):
            parts = line.split("\t")
            head = parts[1].split() if len(parts) > 1 else []
            if len(head) != 2:
                raise BratError(f"{where}: note line needs '#<id>\\t<type> <target>\\t<value>', got {line!r}")
            notes.append(BratNote(parts[0], head[0], head[1], "\t".join(parts[2:]).strip(), lineno))
    return entities, notes


#: An entity id inside a relation, event, attribute or normalisation line (``Arg1:T3``, ``A1\tNeg T3``).
_ENTITY_REF = re.compile(r"(?:^|[\s:])(T\d+)\b")


def dangling_references(ann_path: str | Path, entity_ids: set[str]) -> list[str]:
    """The relation, event, attribute and normalisation lines (``R``, ``*``, ``E``, ``A``, ``M``, ``N``)
    of an ``.ann`` file that name an entity (``T<n>``) the file does not define, as ``file:line``.

    The reader uses none of these lines (module doc), but one pointing at a missing entity says the
    file was cut or edited by hand: :func:`read_brat_document` counts and reports them
    (``references_to_missing_entities``).
    """
    ann_path = Path(ann_path)
    found = []
    for lineno, line in enumerate(text_lines(_read_text(ann_path)), start=1):
        if line[:1] not in ("R", "*", "E", "A", "M", "N"):
            continue
        body = "\t".join(line.split("\t")[1:2])
        if any(ref not in entity_ids for ref in _ENTITY_REF.findall(body)):
            found.append(f"{ann_path}:{lineno}")
    return found


def _first_mismatch(entities: list[BratEntity], text: str, ann_path: Path) -> str | None:
    """The error for the first entity whose offsets do not fit ``text`` (None when all fit)."""
    for ent in entities:
        where = f"{ann_path}:{ent.line}"
        spec = ";".join(f"{s} {e}" for s, e in ent.fragments)
        for s, e in ent.fragments:
            if not 0 <= s < e <= len(text):
                return (f"{where}: entity {ent.id} span {s}-{e} is outside the text ({len(text)} characters) "
                        "or empty")
        actual = " ".join(text[s:e] for s, e in ent.fragments)
        if actual != ent.surface and nfc(actual) != nfc(ent.surface):
            return f"{where}: entity {ent.id} {spec!r} covers {actual!r} in the text but the annotation says {ent.surface!r}"
    return None


def resolve_offsets(raw: str, entities: list[BratEntity], ann_path: str | Path,
                    counts: Counter | None = None) -> str:
    """The reading of a ``.txt`` under which every entity's offsets fit (module doc, "Encodings and line endings").

    Args:
        raw: the ``.txt`` content as written (BOM and line endings kept).
        entities: the parsed entities of the matching ``.ann``.
        ann_path: the ``.ann`` file (for messages).
        counts: optional Counter updated with ``offsets_without_bom`` /
            ``offsets_line_breaks_as_one`` when that reading was needed.

    Returns:
        The document text the offsets index (a BOM the offsets count is replaced by a
        space, so offsets stay right and it never becomes a word).

    Raises:
        BratError: no reading fits; the message is the first mismatch under the file
            as written, and names the line endings and both conventions when the file
            has CR characters.
    """
    ann_path = Path(ann_path)
    bom = raw.startswith(BOM)
    has_cr = "\r" in raw
    readings = [("as written", raw)]
    if bom:
        readings.append(("without BOM", raw[1:]))
    if has_cr:
        one = re.sub(r"\r\n?", "\n", raw)
        readings.append(("line breaks as one character", one))
        if bom:
            readings.append(("without BOM, line breaks as one character", one[1:]))
    first = None
    for name, text in readings:
        err = _first_mismatch(entities, text, ann_path)
        if err is None:
            if counts is not None and name != "as written":
                counts["offsets_without_bom"] += "without BOM" in name
                counts["offsets_line_breaks_as_one"] += "line breaks" in name
            return (" " + text[1:]) if text.startswith(BOM) else text
        first = first or err
    if has_cr:
        endings = "/".join(line_ending_names(raw))
        first += (f"; the .txt has {endings} line endings and the offsets fit neither with each line break "
                  "counted as its characters (CRLF = 2) nor counted as 1")
    if bom:
        first += "; the .txt starts with a BOM, counted or not"
    raise BratError(first)


def parse_ann(ann_path: str | Path, text: str, check_offsets: bool = True) -> tuple[list[BratEntity], list[BratNote]]:
    """Parse one ``.ann`` file against its document text.

    Args:
        ann_path: the ``.ann`` file (UTF-8, with or without BOM, any line endings).
        text: the full text of the matching ``.txt`` (offsets are into it, in characters).
        check_offsets: verify each entity's surface against ``text`` (see module doc).

    Returns:
        ``(entities, notes)`` in file order.

    Raises:
        BratError: a malformed ``T`` or ``#`` line, offsets outside the text, or a surface that differs from the text at its
            offsets (empty fragments included); the message is ``<file>:<line>: ...``.
    """
    ann_path = Path(ann_path)
    entities, notes = _parse_ann_lines(ann_path)
    if check_offsets:
        err = _first_mismatch(entities, text, ann_path)
        if err:
            raise BratError(err)
    return entities, notes


def read_brat_document(txt: str | Path, ann: str | Path, doc_id: str | None = None, check_offsets: bool = True,
                       counts: Counter | None = None) -> BratDocument:
    """Read one ``.txt`` + ``.ann`` pair, choosing the offset convention the entities fit (see :func:`resolve_offsets`).

    Lines that reference an entity the file does not define are counted in ``counts``
    (``references_to_missing_entities``) and warned with their ``file:line`` (:func:`dangling_references`).

    Raises:
        BratError: a non-UTF-8 file, a malformed line, or offsets that fit no reading.
    """
    txt, ann = Path(txt), Path(ann)
    raw = _read_text(txt, keep_bom=True)
    ents, notes = _parse_ann_lines(ann)
    text = resolve_offsets(raw, ents, ann, counts) if check_offsets else raw
    dangling = dangling_references(ann, {e.id for e in ents})
    if dangling:
        if counts is not None:
            counts["references_to_missing_entities"] += len(dangling)
        log.warning("%s: %d relation/event/attribute line(s) name an entity the file does not define (the file "
                    "may be cut or hand-edited), e.g. %s", ann, len(dangling), ", ".join(dangling[:3]))
    return BratDocument(doc_id or txt.stem, text, ents, notes, str(txt), str(ann))


def read_brat_folder(folder: str | Path, missing_ann: str = "error", check_offsets: bool = True,
                     counts: Counter | None = None, id_prefix: str = "") -> list[BratDocument]:
    """Read every ``*.txt`` of a folder with its ``.ann``, sorted by file name.

    Args:
        folder: a folder of ``name.txt`` + ``name.ann`` pairs.
        missing_ann: ``"error"`` (a ``.txt`` without ``.ann`` raises) or ``"drop"``
            (the document is skipped and counted as ``documents_without_ann``).
        check_offsets: see :func:`parse_ann`.
        counts: optional Counter updated with ``documents_without_ann`` and the
            offset-convention counts of :func:`resolve_offsets`.
        id_prefix: put before each document id (``EMEA/`` when several folders are read as one task).

    Raises:
        BratError: missing folder, no ``.txt`` files, a missing ``.ann``
            (with ``missing_ann="error"``), or any :func:`read_brat_document` error.
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
        docs.append(read_brat_document(txt, ann, id_prefix + txt.stem, check_offsets, counts))
    return docs


@dataclass(frozen=True)
class NoteTypeRule:
    """How an entity's type is read from a structured note (``type_from_note`` given as a mapping).

    Attributes:
        note: the note type read (``AnnotatorNotes``).
        field: index of the comma-separated field holding the type (0 = first, -1 = last), or None.
        regex: a compiled pattern whose one capture group is the type (searched in the value), or None;
            with neither ``field`` nor ``regex`` the whole value is the type.
        multi_group: a type listing several groups (``DISO|CHEM``): one of :data:`MULTI_GROUP_RULES`.
        group_separator: the separator between the groups of such a type (``|``).
        unmatched: a note that yields no type: one of :data:`UNMATCHED_RULES`.
        key: the config key the rule comes from (``tasks.<name>.type_from_note``), for messages.
    """

    note: str
    field: int | None
    regex: re.Pattern | None
    multi_group: str
    group_separator: str
    unmatched: str
    key: str = "type_from_note"

    def describe(self) -> str:
        """The extraction in words, for messages (``field -1``, ``regex '...'``, ``the whole value``)."""
        if self.regex is not None:
            return f"regex {self.regex.pattern!r}"
        return f"field {self.field}" if self.field is not None else "the whole value"


def note_type_rule(value, key: str = "type_from_note") -> str | NoteTypeRule | None:
    """The ``type_from_note`` setting checked: a note type name, a :class:`NoteTypeRule`, or None.

    Args:
        value: ``None`` (types as written), a note type name (its whole value is the type, as
            before rules existed), or a mapping with every key of :data:`NOTE_RULE_KEYS` (the task
            spec fills them from the schema's defaults): ``note``, ``field`` (int or null),
            ``regex`` (one capture group, or null; not both with ``field``), ``multi_group``,
            ``group_separator``, ``unmatched``.
        key: the config key, for messages.

    Returns:
        ``None`` or the name unchanged, or the rule.

    Raises:
        BratError: a mapping with an unknown or missing key, a value of the wrong kind, both ``field``
            and ``regex``, an invalid regex or one without exactly one capture group; one line naming
            ``key``.
    """
    if value is None or isinstance(value, str):
        return value or None
    if not isinstance(value, dict):
        raise BratError(f"{key}: expected a note type (AnnotatorNotes) or a mapping with keys {list(NOTE_RULE_KEYS)}, "
                        f"got {value!r}")
    unknown = sorted(set(value) - set(NOTE_RULE_KEYS))
    if unknown:
        raise BratError(f"{key}: unknown key(s) {unknown}; allowed: {list(NOTE_RULE_KEYS)}")
    missing = [k for k in NOTE_RULE_KEYS if k not in value]
    if missing:
        raise BratError(f"{key}: missing key(s) {missing} (tasks.spec.resolve_task_spec fills them from the schema)")
    note, field_, regex = value["note"], value["field"], value["regex"]
    if not isinstance(note, str) or not note.strip() or len(note.split()) != 1:
        raise BratError(f"{key}.note: a note type such as AnnotatorNotes (one word), got {note!r}")
    if field_ is not None and (isinstance(field_, bool) or not isinstance(field_, int)):
        raise BratError(f"{key}.field: an integer index (0 = first field, -1 = last), got {field_!r}")
    if field_ is not None and regex is not None:
        raise BratError(f"{key}: give field ({field_!r}) or regex ({regex!r}), not both")
    pattern = None if regex is None else one_group_regex(regex, f"{key}.regex", "the entity type", BratError)
    for name, allowed in (("multi_group", MULTI_GROUP_RULES), ("unmatched", UNMATCHED_RULES)):
        if value[name] not in allowed:
            raise BratError(f"{key}.{name}: {value[name]!r} is not one of {allowed}")
    sep = value["group_separator"]
    if not isinstance(sep, str) or not sep:
        raise BratError(f"{key}.group_separator: a non-empty string (|), got {sep!r}")
    return NoteTypeRule(note, field_, pattern, value["multi_group"], sep, value["unmatched"], key)


def note_fields(value: str) -> list[str]:
    """The fields of a structured note value such as ``"C0001", "Douleur, thoracique", "T184", "DISO"``.

    The value is split on commas outside double quotes (a quoted name may hold a comma); each
    field is stripped of surrounding whitespace and of one pair of surrounding quotes (``"`` or ``'``).
    """
    row = next(csv.reader([value], skipinitialspace=True), [])
    out = []
    for f in row:
        f = f.strip()
        if len(f) >= 2 and f[0] == f[-1] and f[0] in "\"'":
            f = f[1:-1].strip()
        out.append(f)
    return out


def note_type_value(value: str, rule: NoteTypeRule) -> str | None:
    """The type text a note value yields under ``rule`` (before splitting groups), or None when it yields none.

    None: the field index is outside the value's fields, the regex does not match (or its group
    takes no part in the match), or the result is empty after stripping whitespace.
    """
    if rule.regex is not None:
        m = rule.regex.search(value)
        got = m.group(1) if m else None
    elif rule.field is not None:
        fields = note_fields(value)
        got = fields[rule.field] if -len(fields) <= rule.field < len(fields) else None
    else:
        got = value
    got = got.strip() if got else ""
    return got or None


def _unmatched_fix(value: str, rule: NoteTypeRule) -> str:
    """The fix an ``unmatched: error`` stop proposes: for a note listing several groups (``OBJC|CHEM``), a field or
    regex that reads them all and ``multi_group`` to choose; else ``unmatched`` or another field or regex."""
    sep = rule.group_separator
    if sep in value:
        return (f"the note lists several groups separated by {sep!r}: read them all and choose one with "
                f"{rule.key}.multi_group (first or drop), e.g. {rule.key}: "
                "{regex: '\"([A-Z]{4}(?:\\|[A-Z]{4})*)\"\\s*$', multi_group: first, unmatched: error}")
    return f"set {rule.key}.unmatched to written or drop, or change the field or regex"


def _types_by_rule(doc: BratDocument, rule: NoteTypeRule, counts: Counter, examples: dict) -> None:
    """Set entity types of ``doc`` from notes by ``rule`` (module doc, "Entity types"); entities may be dropped."""
    typed: dict[str, tuple[str, BratNote]] = {}  # entity id -> (type, the note it came from)
    multi: set[str] = set()  # entities with a note listing several groups (multi_group drop)
    unmatched: dict[str, BratNote] = {}  # entities with a note yielding no type
    entity_ids = {e.id for e in doc.entities}
    for note in doc.notes:
        if note.note_type != rule.note or not note.value:
            continue
        where = f"{doc.ann_path}:{note.line}"
        counts["type_notes_read"] += 1
        if note.target not in entity_ids:
            counts["type_notes_without_entity"] += 1
            continue
        got = note_type_value(note.value, rule)
        groups = list(dict.fromkeys(g.strip() for g in (got or "").split(rule.group_separator) if g.strip()))
        if not groups:
            counts["type_notes_unmatched"] += 1
            examples.setdefault("unmatched", f"{where} {note.value!r}")
            if rule.unmatched == "error":
                raise BratError(f"{where}: {rule.note} note of entity {note.target} ({note.value!r}) yields no type by "
                                f"{rule.key} ({rule.describe()}); " + _unmatched_fix(note.value, rule))
            unmatched.setdefault(note.target, note)
            continue
        if len(groups) > 1:
            counts["type_notes_multi_group"] += 1
            examples.setdefault("multi_group", f"{where} {note.value!r}")
            if rule.multi_group == "error":
                raise BratError(f"{where}: {rule.note} note of entity {note.target} lists {len(groups)} groups "
                                f"({got!r}); set {rule.key}.multi_group to first (the group listed first) or drop "
                                "(leave the entity out)")
            if rule.multi_group == "drop":
                multi.add(note.target)
                continue
        typ = groups[0]
        if note.target in typed and typed[note.target][0] != typ:
            first = typed[note.target][1]
            raise BratError(f"{where}: entity {note.target} has two {rule.note} notes giving different types "
                            f"({typed[note.target][0]!r} at line {first.line}, {typ!r}); {rule.key} needs one")
        counts["type_notes_used"] += 1
        counts["types_multi_group_first"] += len(groups) > 1 and note.target not in typed
        typed[note.target] = (typ, note)
    kept = []
    for ent in doc.entities:
        if ent.id in typed:
            ent.type, ent.type_origin = typed[ent.id][0], "note"
            counts["types_from_note"] += 1
        elif ent.id in multi:
            counts["types_multi_group_dropped"] += 1
            continue
        elif ent.id in unmatched:
            if rule.unmatched == "drop":
                counts["types_unmatched_dropped"] += 1
                continue
            ent.type_origin = "unmatched_note"
            counts["types_unmatched_written"] += 1
        else:
            ent.type_origin = "no_note"
            counts["types_without_note"] += 1
        kept.append(ent)
    doc.entities = kept


def map_entity_types(doc: BratDocument, type_map: dict[str, str] | None = None,
                     type_from_note: str | NoteTypeRule | None = None, counts: Counter | None = None,
                     examples: dict | None = None, note_key: str = "type_from_note") -> None:
    """Rename the entity types of ``doc`` in place (module doc, "Entity types").

    Args:
        doc: a parsed document.
        type_map: written type -> type used (types absent from the map stay as written).
        type_from_note: a note type (``AnnotatorNotes``): the value of the entity's
            note of that type becomes its type; or a :class:`NoteTypeRule` (see
            :func:`note_type_rule`), which reads the type from a field or regex group of
            the value and may drop entities (then ``type_map`` applies to the type).
        counts: optional Counter updated with ``types_from_note``,
            ``types_without_note`` and ``types_mapped``; with a rule also
            ``type_notes_read``, ``type_notes_used``, ``type_notes_unmatched``,
            ``type_notes_multi_group``, ``type_notes_without_entity`` (notes) and
            ``types_multi_group_first``, ``types_multi_group_dropped``,
            ``types_unmatched_written``, ``types_unmatched_dropped`` (entities).
        examples: optional dict receiving, with a rule, the first ``"file:line 'value'"`` of an
            ``unmatched`` and of a ``multi_group`` note.
        note_key: the config key of a ``type_from_note`` given as a note type name, named in the
            warning on notes pointing at no entity (:func:`warn_notes_without_entity`; a rule names its own).

    Raises:
        BratError: an entity has two such notes with different values (or types, with a rule);
            with a rule also a multi-group note under ``multi_group: error`` or a note yielding
            no type under ``unmatched: error``. The message names the ``.ann`` file and line.
    """
    counts = counts if counts is not None else Counter()
    if type_from_note:
        note_type, key = ((type_from_note.note, type_from_note.key) if isinstance(type_from_note, NoteTypeRule)
                          else (type_from_note, note_key))
        warn_notes_without_entity(doc, note_type, key)
    if isinstance(type_from_note, NoteTypeRule):
        _types_by_rule(doc, type_from_note, counts, examples if examples is not None else {})
        type_from_note = None
    by_target: dict[str, str] = {}
    if type_from_note:
        for note in doc.notes:
            if note.note_type != type_from_note or not note.value:
                continue
            if by_target.get(note.target, note.value) != note.value:
                raise BratError(f"{doc.ann_path}:{note.line}: entity {note.target} has two {type_from_note} notes "
                                f"({by_target[note.target]!r}, {note.value!r}); type_from_note needs one")
            by_target[note.target] = note.value
    for ent in doc.entities:
        if type_from_note:
            if ent.id in by_target:
                ent.type, ent.type_origin = by_target[ent.id], "note"
                counts["types_from_note"] += 1
            else:
                ent.type_origin = "no_note"
                counts["types_without_note"] += 1
        if type_map and ent.type in type_map:
            ent.type, ent.type_mapped = type_map[ent.type], True
            counts["types_mapped"] += 1


def warn_notes_without_entity(doc: BratDocument, note_type: str, key: str = "type_from_note") -> list[str]:
    """Warn (one log line per ``.ann`` file, as :func:`read_brat_document` warns other dangling lines) the notes
    of ``note_type`` that point at an entity the file does not define; returns their ``file:line``.

    Such a note types nothing (the rule counts it as ``type_notes_without_entity``); it says the file was cut
    or edited by hand, or that the note's target id is mistyped.
    """
    ids = {e.id for e in doc.entities}
    found = [f"{doc.ann_path}:{n.line}" for n in doc.notes
             if n.note_type == note_type and n.value and n.target not in ids]
    if found:
        log.warning("%s: %d %s note line(s) name an entity the file does not define (the file may be cut or "
                    "hand-edited; %s types nothing from them), e.g. %s", doc.ann_path, len(found), note_type, key,
                    ", ".join(found[:3]))
    return found


def tally_type_origins(doc: BratDocument, entities: list[BratEntity], tally: dict) -> None:
    """Add ``entities`` (one document's, after ``type_from_note``, ``type_map`` and ``entity_types``) to
    ``tally``: ``tally["note"]`` counts the types read from notes; ``tally["written"]`` maps each type kept as
    written (no note, or a note yielding no type; not renamed by ``type_map``) to ``{"entities",
    "without_note", "unmatched_note", "example"}`` (counts of entities, the first ``file:line``).

    What :func:`clmdetour.tasks.traps.written_types_beside_note_types` reads."""
    notes, written = tally.setdefault("note", Counter()), tally.setdefault("written", {})
    for e in entities:
        if e.type_origin == "note":
            notes[e.type] += 1
        elif e.type_origin in ("no_note", "unmatched_note") and not e.type_mapped:
            entry = written.setdefault(e.type, {"entities": 0, "without_note": 0, "unmatched_note": 0,
                                                "example": f"{doc.ann_path}:{e.line}"})
            entry["entities"] += 1
            entry["without_note" if e.type_origin == "no_note" else "unmatched_note"] += 1


def flatten_entities(entities: list[BratEntity], discontinuous: str = DEFAULT_DISCONTINUOUS,
                     counts: Counter | None = None) -> list[tuple[int, int, str]]:
    """Apply the discontinuous and flat (longest span wins) policies.

    Args:
        entities: parsed entities of one document.
        discontinuous: one of :data:`DISCONTINUOUS_POLICIES` (see module doc).
        counts: optional Counter updated with ``entities``, ``discontinuous``,
            ``discontinuous_dropped``, ``nested``, ``crossing``, ``duplicate_span``
            and ``duplicate_entity``.

    Returns:
        Non-overlapping ``(start, end, type)`` character spans sorted by start offset.

    Raises:
        ValueError: unknown ``discontinuous`` policy.
    """
    if discontinuous not in DISCONTINUOUS_POLICIES:
        raise ValueError(f"discontinuous policy must be one of {DISCONTINUOUS_POLICIES}, got {discontinuous!r}")
    counts = counts if counts is not None else Counter()
    spans, later = [], []
    for e in entities:
        counts["entities"] += 1
        if len(e.fragments) > 1:
            counts["discontinuous"] += 1
            if discontinuous == "drop":
                counts["discontinuous_dropped"] += 1
            elif discontinuous == "contiguous_first":
                later.append((e.start, e.end, e.type))
            else:
                s, t = (e.start, e.end) if discontinuous == "full_extent" else min(e.fragments)
                spans.append((s, t, e.type))
        else:
            spans.append((*e.fragments[0], e.type))
    kept: list[tuple[int, int, str]] = []

    def rank(x):
        return (-(x[1] - x[0]), x[0], x[2])

    for s, t, typ in sorted(spans, key=rank):
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
    for s, t, typ in sorted(later, key=rank):  # contiguous_first: full extents only where free
        if any(s < kt and ks < t for ks, kt, _ in kept):
            counts["discontinuous_dropped"] += 1
        else:
            kept.append((s, t, typ))
    return sorted(kept)


def discontinuous_policy_counts(entities: list[BratEntity]) -> dict[str, dict[str, int]]:
    """What each discontinuous policy keeps of one document's entities (for the task manifest).

    Returns:
        ``{policy: {"entities_kept", "contiguous_kept", "contiguous_lost", "discontinuous_kept"}}``:
        spans kept by the flat policy; contiguous gold mentions kept as written or lost
        (to a longer span, nested or crossing); discontinuous entities represented by a span.
    """
    contiguous = {(*e.fragments[0], e.type) for e in entities if len(e.fragments) == 1}
    out = {}
    for policy in DISCONTINUOUS_POLICIES:
        kept = flatten_entities(entities, policy)
        hit = len(contiguous & set(kept))
        out[policy] = {"entities_kept": len(kept), "contiguous_kept": hit,
                       "contiguous_lost": len(contiguous) - hit, "discontinuous_kept": len(set(kept) - contiguous)}
    return out


def sentence_spans(text: str, protected: list[tuple[int, int, str]] | None = None,
                   splitter: str = "rules") -> list[tuple[int, int]]:
    """Character spans of the sentences of ``text`` (rule in the module doc).

    Args:
        text: document text.
        protected: entity spans a boundary must not fall inside.
        splitter: ``"rules"`` (the regex :data:`_SENT_END_RE`) or ``"spacy"`` (the
            regex's cuts kept only at line breaks or where spaCy's French ``senter``
            also starts a sentence: :mod:`clmdetour.tasks.segment`).

    Returns:
        ``(start, end)`` spans (end exclusive) of non-blank segments, stripped of
        surrounding whitespace, in order.

    Raises:
        ValueError: unknown splitter.
        clmdetour.tasks.segment.SegmentationError: spaCy or its model is missing.
    """
    protected = protected or []
    candidates = [(m.start(), m.end()) for m in _SENT_END_RE.finditer(text)]  # (boundary start, cut)
    if splitter != "rules":
        # spaCy's senter vetoes the rule's cuts after abbreviations (Dr. M. p.); line breaks always cut
        from clmdetour.tasks import segment

        breaks = [(m.start(), m.end()) for m in re.finditer(r"[\r\n]+", text)]
        starts = [0] + [e for _, e in breaks]
        ends = [s for s, _ in breaks] + [len(text)]
        confirmed = {a + c for a, cuts in zip(starts, segment.sentence_starts(
            [text[a:b] for a, b in zip(starts, ends)], splitter)) for c in cuts}
        candidates = [(a, c) for a, c in candidates if "\n" in text[a:c] or c in confirmed]
    cuts = [0]
    for start, cut in candidates:
        if any(s < start < t or s < cut < t for s, t, _ in protected):
            continue
        cuts.append(cut)
    cuts.append(len(text))
    out = []
    for a, b in itertools.pairwise(cuts):
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


def _nfc_with_word_offsets(text: str, words: list[tuple[int, int]]) -> tuple[str, list[list[int]]]:
    """``text`` in NFC and each word's ``[start, end]`` in it (``words``: spans into ``text`` as written).

    Words and the gaps between them are normalised piece by piece, so the offsets
    stay exact; the result equals ``nfc(text)`` unless a combining mark begins a
    word (it then stays beside its word instead of composing across the boundary).
    """
    pieces, offsets, pos, cursor = [], [], 0, 0
    for s, e in words:
        gap, word = nfc(text[cursor:s]), nfc(text[s:e])
        pieces += [gap, word]
        pos += len(gap)
        offsets.append([pos, pos + len(word)])
        pos += len(word)
        cursor = e
    pieces.append(nfc(text[cursor:]))
    return "".join(pieces), offsets


def document_to_examples(doc: BratDocument, segmentation: str = "sentence", discontinuous: str = DEFAULT_DISCONTINUOUS,
                         entity_types: list[str] | None = None, counts: Counter | None = None,
                         splitter: str = "spacy", filtered_examples: list[str] | None = None) -> list[dict]:
    """Convert one BRAT document to NER examples ``{id, text, words, tags}``.

    Args:
        doc: a parsed document.
        segmentation: ``"sentence"`` or ``"document"``.
        discontinuous: see :func:`flatten_entities`.
        entity_types: keep only these types (others counted as ``type_filtered``);
            ``None`` keeps all.
        counts: optional Counter for the policy counts.
        splitter: sentence splitter (``"spacy"`` or ``"rules"``, see :func:`sentence_spans`).
        filtered_examples: optional list receiving, up to :data:`FILTERED_EXAMPLES` in all, the
            entities ``entity_types`` drops, as ``"file:line 'type'"`` (the ``.ann`` line and the
            type it had then: as written, from a note or mapped).

    Returns:
        One dict per segment: ``id`` (``<doc_id>`` or ``<doc_id>:<n>``), ``text``
        (the segment's text in NFC, as written: the text the model is fed), ``words``
        (NFC), ``word_offsets`` (each word's ``[start, end]`` in ``text``, characters,
        end exclusive) and ``tags`` (IOB2), plus
        ``entities`` (list of ``[start, end, type]`` offsets into the segment as
        written in the file, before NFC).

    Raises:
        ValueError: unknown segmentation, splitter or discontinuous policy.
    """
    if segmentation not in SEGMENTATIONS:
        raise ValueError(f"segmentation must be one of {SEGMENTATIONS}, got {segmentation!r}")
    counts = counts if counts is not None else Counter()
    ents = doc.entities
    if entity_types is not None:
        allowed = set(entity_types)
        dropped = [e for e in ents if e.type not in allowed]
        counts["type_filtered"] += len(dropped)
        if filtered_examples is not None:
            room = max(0, FILTERED_EXAMPLES - len(filtered_examples))
            filtered_examples += [f"{doc.ann_path}:{e.line} {e.type!r}" for e in dropped[:room]]
        ents = [e for e in ents if e.type in allowed]
    flat = flatten_entities(ents, discontinuous, counts)
    if segmentation == "document":
        s0 = len(doc.text) - len(doc.text.lstrip())
        segs = [(s0, len(doc.text.rstrip()))] if doc.text.strip() else []
    else:
        segs = sentence_spans(doc.text, flat, splitter)
    out = []
    for n, (a, b) in enumerate(segs):
        seg_ents = [(s - a, t - a, typ) for s, t, typ in flat if a <= s and t <= b]
        seg_text = doc.text[a:b]
        bounds = {x for s, t, _ in seg_ents for x in (s, t)}
        words = tokenize(seg_text, bounds)
        tags = spans_to_iob2(words, seg_ents)
        counts["entities_without_words"] += len(seg_ents) - sum(t.startswith("B-") for t in tags)
        text, offsets = _nfc_with_word_offsets(seg_text, words)
        out.append({
            "id": doc.doc_id if segmentation == "document" else f"{doc.doc_id}:{n}",
            "text": text,
            "words": [text[s:e] for s, e in offsets],
            "word_offsets": offsets,
            "tags": tags,
            "entities": [list(e) for e in seg_ents],
        })
    counts["segments"] += len(out)
    return out


def type_note_report(spec: dict, info: dict) -> dict:
    """The brat manifest's ``type_from_note`` section for a rule (a mapping): the rule, and what it did.

    ``notes``: notes of the rule's kind read, used (gave an entity its type), unmatched (gave no
    type), multi-group (listed several groups), without entity; ``entities``: typed from a note,
    without note (written type kept), unmatched notes' entities kept with their written type or
    dropped, multi-group entities typed by the first group or dropped; ``examples``: the first
    unmatched and multi-group note (``file:line 'value'``).

    Args:
        spec: the resolved task spec (``type_from_note``, a mapping).
        info: what :func:`clmdetour.tasks.reading.load_raw_splits` returned beside the rows
            (``annotations``: the counts of :func:`map_entity_types`; ``type_note_examples``).
    """
    ann = info["annotations"]
    rule = spec["type_from_note"]
    return {
        "rule": rule,
        "notes": {k: ann.get(f"type_notes_{k}", 0) for k in ("read", "used", "unmatched", "multi_group",
                                                             "without_entity")},
        "entities": {"from_note": ann.get("types_from_note", 0), "without_note": ann.get("types_without_note", 0),
                     "unmatched_kept_written_type": ann.get("types_unmatched_written", 0),
                     "unmatched_dropped": ann.get("types_unmatched_dropped", 0),
                     "multi_group_first": ann.get("types_multi_group_first", 0),
                     "multi_group_dropped": ann.get("types_multi_group_dropped", 0)},
        "resolution": {"unmatched": rule["unmatched"], "multi_group": rule["multi_group"]},
        "examples": info.get("type_note_examples") or {},
    }


def entity_types_report(spec: dict, info: dict) -> dict:
    """The brat manifest's ``entity_types`` section (a task with ``entity_types``): the types kept, how many
    entities were dropped for their type (``type_filtered``: after ``type_from_note`` and ``type_map``) and up
    to :data:`FILTERED_EXAMPLES` of them (``file:line 'type'``, :func:`document_to_examples`)."""
    return {"kept": spec["entity_types"], "type_filtered": info["annotations"].get("type_filtered", 0),
            "examples": list(info.get("type_filtered_examples") or [])}
