"""``ner``: named entity recognition, IOB2 word tags (token-classification head, seqeval strict entity F1).

Documents longer than the token budget are cut into windows
(:mod:`clmdetour.tasktypes.windows`) so that every word is scored; a word's
prediction is its first sub-token's tag. A word with no sub-token of its own
(inside a token that starts in an earlier word, ``.`` in ``).``) takes the
tag of the word whose token covers it, ``B-X`` turned into ``I-X``
(:mod:`clmdetour.tasktypes.align` says why); such words are counted apart from
truncated ones (``Encoded.words_without_token``), with those inside a gold
entity and the gold entities that no prediction can then match.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from clmdetour.textio import locate_words, nfc, word_spans

from .base import Encoded, Predictions, TaskType, Trivial, single_sequence_budget
from .metrics import ner_scores
from .records import MISSING, FormatError, check_tags, get_field, text_of
from .tags import iob2_to_spans
from .windows import plan_windows, window_inputs, word_token_counts

log = logging.getLogger("clmdetour.finetune")


@dataclass
class TokenEncoded(Encoded):
    """A NER split, tokenised: the windows plus what maps their tokens back to each document's words.

    Counts (see :mod:`clmdetour.tasktypes.align`): words no sub-token is assigned to (inside a token that
    starts in an earlier word, e.g. ``.`` in the token ``).``), not cut by any limit; those with a gold tag
    other than O; the gold entities that no prediction can match because one of their boundaries falls
    inside a token; the gold entities in all.
    """

    doc_index: list[int] = field(default_factory=list)  # document of each window
    word_ids: list[list] = field(default_factory=list)  # per window, word id of each token
    num_words: list[int] = field(default_factory=list)  # words per document
    covered_by: list[dict] = field(default_factory=list)  # per document, align.covering_words
    words_without_token: int = 0
    words_without_token_in_entity: int = 0
    entities_out_of_reach: int = 0
    entities: int = 0


# The record's ``data`` keys of a NER split beside ``truncated`` (TokenEncoded, clmdetour.tasktypes.align).
WORD_COUNT_KEYS = ("words_without_token", "words_without_token_in_entity", "entities_out_of_reach")


class NER(TaskType):
    name = "ner"
    trivial_rule = "no entities (0 whatever the metric)"
    truncated_unit = "words"
    default_metric = "f1_micro"
    hub_task = "token-classification"
    description = "named entity recognition"
    averaging = ("entity F1, seqeval strict IOB2: micro F1 pools the entities of every type, macro F1 averages "
                 "the per-type F1")
    formats = ("brat", "conll", "iob_tsv", "jsonl", "hub", "bigbio_kb")

    def jsonl_description(self, spec):
        return f"JSON lines or one JSON array of objects, with fields {spec['words_field']!r} and {spec['tags_field']!r} (IOB2)"

    def read_record(self, rec, fields, where, row):
        words, tags = get_field(rec, fields["words_field"]), get_field(rec, fields["tags_field"])
        for key, value in (("words_field", words), ("tags_field", tags)):
            if value is MISSING:
                raise FormatError(f"{where}: field {fields[key]!r} ({key}) missing; fields: {sorted(rec)}")
        if not isinstance(words, list) or not isinstance(tags, list) or len(words) != len(tags):
            raise FormatError(f"{where}: {fields['words_field']!r} and {fields['tags_field']!r} must be lists of "
                              "equal length")
        tags = [str(t) for t in tags]
        check_tags(tags, where)
        words = [nfc(str(w)) for w in words]
        text_names = fields.get("text_field") or "text"
        has_text = any(get_field(rec, n) not in (MISSING, None, "")
                       for n in ([text_names] if isinstance(text_names, str) else text_names))
        text = text_of(rec, fields, where) if has_text else None
        offsets = locate_words(text, words) if text is not None else None
        if offsets is None:  # no text, or words that are not the text's: the words joined by single spaces
            text, offsets = word_spans(words)
        row.update(words=words, tags=tags, text=text, word_offsets=offsets)
        return row

    def label_source(self, fields):
        return "the entity type (BRAT type, type_map, type_from_note)"

    def label_columns(self):
        import datasets

        return {"words": datasets.Sequence(datasets.Value("string")),
                "word_offsets": datasets.Sequence(datasets.Sequence(datasets.Value("int32"))),
                "tags": datasets.Sequence(datasets.Value("string"))}

    def labels_record(self, task, labels, metric):
        """As the base record, plus the BIO ``tags`` the model predicts (``O`` first)."""
        record = super().labels_record(task, labels, metric)
        record["tags"] = ["O"] + [f"{p}-{t}" for t in labels for p in ("B", "I")]
        return record

    def model_labels(self, spec, where):
        labels = list(spec.get("tags") or [])
        if "O" not in labels:
            raise ValueError(f"{where}: ner task needs 'tags' including 'O'")
        return labels

    def row_values(self, row, where):
        if len(row["tags"]) != len(row["words"]):
            raise ValueError(f"{where}: row {row['id']!r} has {len(row['words'])} words but {len(row['tags'])} tags")
        return list(row["tags"])

    def row_labels(self, row):
        return sorted({t[2:] for t in row["tags"] if t != "O"})

    def label_key(self, row):
        """The entities as ``(type, normalised words before it, its normalised words)``, in order.

        Normalised words as the split-overlap check's (NFKC, lower-case, ``\\w+`` runs), so the
        same sentence tokenised differently (``4 ).`` as 2 or 3 words) or with another case
        carries the same key, while a mention of another type or place does not.
        """
        from clmdetour.corpus.decontaminate import words as normalised
        return tuple((kind, len(normalised(" ".join(row["words"][:a]))), tuple(normalised(" ".join(row["words"][a:b]))))
                     for a, b, kind in iob2_to_spans(row["tags"]))

    def label_counts(self, rows):
        from collections import Counter

        c: Counter = Counter()
        for row in rows:
            c.update(typ for _, _, typ in iob2_to_spans(row["tags"]))
        return dict(sorted(c.items()))

    def remove_labels(self, row, drop):
        tags = list(row["tags"])
        for s, e, typ in iob2_to_spans(tags):
            if typ in drop:
                tags[s:e] = ["O"] * (e - s)
        return {**row, "tags": tags}

    def encode(self, rows, labels, tokenizer, max_length, settings, task) -> TokenEncoded:
        """Windows of every document (:mod:`clmdetour.tasktypes.windows`), labelled at first sub-tokens,
        with ``settings.ner_context_tokens`` tokens of left context (0 without settings).

        Besides the examples, counts per split: ``truncated``, words with a token
        that no window reads (0 by construction of the windows: a word longer than
        a window keeps its first sub-token); ``words_without_token``, words no
        token is assigned to (scored through the covering token at :meth:`score`),
        ``words_without_token_in_entity`` (of those, gold tag other than ``O``),
        ``entities_out_of_reach`` (gold entities with a boundary inside a token,
        :func:`clmdetour.tasktypes.align.entities_out_of_reach`) and ``entities``.
        """
        from clmdetour.tasktypes.align import (
            align_labels,
            covering_words,
            entities_out_of_reach,
            first_subtoken_positions,
            iob2_entities,
            word_ids_from_offsets,
        )

        prefix, suffix, budget = single_sequence_budget(tokenizer, max_length)
        context_tokens = getattr(settings, "ner_context_tokens", 0)
        index = {l: i for i, l in enumerate(labels)}
        # The original text with each word's offsets (the task contract); rows prepared before it
        # carried words only and are fed the words joined by single spaces.
        joined = [(r["text"], r["word_offsets"]) if r.get("word_offsets") else word_spans(r["words"]) for r in rows]
        if rows and "word_offsets" not in rows[0]:
            log.warning("task %s: rows without word_offsets (prepared before they existed): the model is fed the words "
                        "joined by single spaces; rerun prepare_task to feed the original text", task)
        batch = tokenizer([t for t, _ in joined], add_special_tokens=False, return_offsets_mapping=True, verbose=False)
        enc = TokenEncoded(examples=[], gold=[])
        for d, (row, (_, spans)) in enumerate(zip(rows, joined)):
            ids = batch["input_ids"][d]
            wids = word_ids_from_offsets(batch["offset_mapping"][d], spans)
            n = len(row["words"])
            counts = word_token_counts(wids, n)
            tag_ids = [index[t] for t in row["tags"]]
            read: set[int] = set()
            for w in plan_windows(counts, budget, context_tokens):
                win_ids, win_wids = window_inputs(ids, wids, n, w, budget, prefix, suffix)
                enc.examples.append({"input_ids": win_ids, "labels": align_labels(win_wids, tag_ids)})
                enc.doc_index.append(d)
                enc.word_ids.append(win_wids)
                read.update(first_subtoken_positions(win_wids))
            covered = covering_words(batch["offset_mapping"][d], spans, wids)
            enc.num_words.append(n)
            enc.gold.append(list(row["tags"]))
            enc.covered_by.append(covered)
            enc.truncated += sum(1 for i in range(n) if i not in read and i not in covered)
            enc.words_without_token += len(covered)
            enc.words_without_token_in_entity += sum(1 for i in covered if row["tags"][i] != "O")
            enc.entities_out_of_reach += entities_out_of_reach(row["tags"], covered)
            enc.entities += len(iob2_entities(row["tags"]))
        return enc

    def split_counts(self, enc):
        """:data:`WORD_COUNT_KEYS` of the split."""
        return {key: getattr(enc, key) for key in WORD_COUNT_KEYS}

    def check_encoded(self, task, split, enc):
        """Warn when words without a token of their own touch the gold entities of a split.

        Warns when such a word lies inside a gold entity, or when a gold entity is
        out of reach (a boundary inside a token): the split's entity recall, and so
        its F1, is then capped at ``1 - entities_out_of_reach / entities``.
        """
        if not (enc.words_without_token_in_entity or enc.entities_out_of_reach):
            return False
        ceiling = 1 - enc.entities_out_of_reach / enc.entities if enc.entities else 1.0
        log.warning("task %s, split %s: %d words have no sub-token of their own (each lies inside a token that starts "
                    "in an earlier word and takes that word's tag, B- as I-), %d of them inside a gold entity; %d of %d "
                    "gold entities have a boundary inside a token and can never be matched: entity recall at most %.4f",
                    task, split, enc.words_without_token, enc.words_without_token_in_entity, enc.entities_out_of_reach,
                    enc.entities, ceiling)
        return True

    def collate_labels(self, examples, length):
        import torch

        from clmdetour.modeling.loss import IGNORE_INDEX

        labels = torch.full((len(examples), length), IGNORE_INDEX, dtype=torch.long)
        for i, e in enumerate(examples):
            labels[i, :len(e["labels"])] = torch.tensor(e["labels"], dtype=torch.long)
        return labels

    def load_model(self, model_dir, kw):
        from transformers import AutoModelForTokenClassification

        return AutoModelForTokenClassification.from_pretrained(str(model_dir), **kw)

    def example_outputs(self, output, lengths):
        """Per window its ``[L_i, C]`` logits (``output.logits``: ``[B, L, C]``, cut to each window's length)."""
        logits = output.logits.float().cpu().numpy()
        return [logits[j, :n] for j, n in enumerate(lengths)]

    def predictions(self, labels, metric, enc, outputs, fitted=None, settings=None):
        """Per document its gold and predicted IOB2 tags, one per word (word ``i`` of the task file's row).

        A word's tag is the argmax at its first sub-token, in the window that
        scores it; a word with no token of its own then takes the tag of the word
        whose token covers it, ``B-X`` as ``I-X``
        (:func:`clmdetour.tasktypes.align.tags_of_words_without_token`); a word
        that no window reads is ``O``.

        Args:
            outputs: per window (``enc.examples`` order) ``[L_i, C]`` logits, ``C = len(labels)``.
        """
        from clmdetour.tasktypes.align import tags_of_words_without_token, word_predictions
        preds = [["O"] * n for n in enc.num_words]
        for k, (d, wids) in enumerate(zip(enc.doc_index, enc.word_ids)):
            tags = [labels[i] for i in outputs[k].argmax(-1)]
            for w, tag in enumerate(word_predictions(wids, tags, enc.num_words[d])):
                if tag is not None:
                    preds[d][w] = tag
        if enc.covered_by:
            preds = [tags_of_words_without_token(p, c) for p, c in zip(preds, enc.covered_by)]
        return Predictions([{"gold": list(g), "predicted": p} for g, p in zip(enc.gold, preds)])

    def rescore(self, labels, rows, fitted):
        """Strict IOB2 entity scores (:func:`clmdetour.tasktypes.metrics.ner_scores`)."""
        return ner_scores([r["gold"] for r in rows], [r["predicted"] for r in rows])

    def gold_of_row(self, row):
        return list(row["tags"])

    def trivial(self, train, test, labels, metric):
        return no_entities([r["tags"] for r in train], [r["tags"] for r in test], metric)


def no_entities(train_tags, test_tags, metric: str) -> Trivial:
    """Predict ``O`` for every word; strict seqeval entity scores (:func:`clmdetour.tasktypes.metrics.ner_scores`),
    0 whatever the metric since nothing is predicted.

    Raises:
        ValueError: an unknown metric.
    """
    NER().check_metric(metric)

    def score(tags):
        return ner_scores(tags, [["O"] * len(t) for t in tags])[metric]

    return Trivial(score(test_tags), score(train_tags), metric, "no entities")
