"""One-word-a-line formats: ``conll`` (CoNLL/BIO, document marks, any tag column) and ``iob_tsv``
(``word<TAB>tag``). Both give NER tasks; ``tag_column`` and ``tag_scheme`` (IOB2, or IOB1 converted) apply to
them only. Readers: :func:`clmdetour.tasks.formats.read_conll`, :func:`clmdetour.tasks.formats.read_iob_tsv`.
"""

from __future__ import annotations

from collections.abc import Mapping

from clmdetour.tasks.fileformats.base import FILES, TaskFormat


def _read_conll(reader, path, sub) -> list[dict]:
    from clmdetour.tasks.formats import read_conll

    spec = reader.spec
    return read_conll(path, spec.get("comment_prefix"), spec.get("doc_marker"), spec["tag_column"],
                      spec["tag_scheme"], reader.counts, reader.key("tag_column"),
                      doc_marker_key=reader.key("doc_marker"), tag_scheme_key=reader.key("tag_scheme"))


def _read_iob_tsv(reader, path, sub) -> list[dict]:
    from clmdetour.tasks.formats import read_iob_tsv

    return read_iob_tsv(path, reader.spec["tag_scheme"], reader.counts, reader.key("tag_scheme"))


def tag_reports(spec: Mapping, info: Mapping) -> dict:
    """The manifest's ``tag_scheme`` section (:func:`clmdetour.tasks.formats.tag_scheme_report`)."""
    from clmdetour.tasks.formats import tag_scheme_report

    return {"tag_scheme": tag_scheme_report(spec, info)}


def _tag_policies(spec: Mapping) -> dict:
    return {"tag_column": spec["tag_column"], "tag_scheme": spec["tag_scheme"]}


CONLL = TaskFormat(
    "conll", FILES, extension="conll",
    describe=lambda spec: (f"CoNLL files: '<word> ... <tag>' per line (tag in column {spec.get('tag_column', -1)}, "
                           f"{spec.get('tag_scheme') or 'iob2'}), blank line between sentences"),
    read_unit=_read_conll, word_lines=True, doc_marks=True, documents="doc", reports=tag_reports,
    policies=lambda spec: {"doc_marker": spec["doc_marker"], **_tag_policies(spec)})

IOB_TSV = TaskFormat(
    "iob_tsv", FILES, extension="tsv", example_extension="txt",
    describe=lambda spec: (f"two-column TSV files: '<word><TAB><tag>' per line ({spec.get('tag_scheme') or 'iob2'}), "
                           "blank line between sentences"),
    read_unit=_read_iob_tsv, word_lines=True, tag_columns=(-1, 1), documents="doc", reports=tag_reports,
    policies=_tag_policies)

ENTRIES = (CONLL, IOB_TSV)
