"""``ner``: named entity recognition, IOB2 word tags (token-classification head, seqeval strict entity F1).

Documents longer than the token budget are cut into windows
(:mod:`clmdetour.finetune.windows`) so that every word is scored; a word's
prediction is its first sub-token's tag. A word with no sub-token of its own
(inside a token that starts in an earlier word, ``.`` in ``).``) takes the
tag of the word whose token covers it, ``B-X`` turned into ``I-X``
(:mod:`clmdetour.finetune.align` says why); such words are counted apart from
truncated ones (``Encoded.words_without_token``), with those inside a gold
entity and the gold entities that no prediction can then match.
"""

from __future__ import annotations

import logging

from .base import Encoded, TaskType, Trivial

log = logging.getLogger("clmdetour.finetune")


class NER(TaskType):
    name = "ner"
    default_metric = "f1_micro"
    hub_task = "token-classification"
    description = "named entity recognition"
    averaging = ("entity F1, seqeval strict IOB2: micro F1 pools the entities of every type, macro F1 averages "
                 "the per-type F1")
    formats = ("brat", "conll", "iob_tsv", "jsonl", "hub", "bigbio_kb")

    def jsonl_description(self, spec):
        return f"JSON lines with fields {spec['words_field']!r} and {spec['tags_field']!r} (IOB2)"

    def read_record(self, rec, fields, where, row):
        from clmdetour.tasks.formats import _MISSING, FormatError, _check_tags, _text_of, get_field
        from clmdetour.tasks.textio import locate_words, nfc, word_spans

        words, tags = get_field(rec, fields["words_field"]), get_field(rec, fields["tags_field"])
        for key, value in (("words_field", words), ("tags_field", tags)):
            if value is _MISSING:
                raise FormatError(f"{where}: field {fields[key]!r} ({key}) missing; fields: {sorted(rec)}")
        if not isinstance(words, list) or not isinstance(tags, list) or len(words) != len(tags):
            raise FormatError(f"{where}: {fields['words_field']!r} and {fields['tags_field']!r} must be lists of "
                              "equal length")
        tags = [str(t) for t in tags]
        _check_tags(tags, where)
        words = [nfc(str(w)) for w in words]
        text_names = fields.get("text_field") or "text"
        has_text = any(get_field(rec, n) not in (_MISSING, None, "")
                       for n in ([text_names] if isinstance(text_names, str) else text_names))
        text = _text_of(rec, fields, where) if has_text else None
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
        from clmdetour.tasks.brat import iob2_to_spans

        return tuple((kind, len(normalised(" ".join(row["words"][:a]))), tuple(normalised(" ".join(row["words"][a:b]))))
                     for a, b, kind in iob2_to_spans(row["tags"]))

    def label_counts(self, rows):
        from collections import Counter

        from clmdetour.tasks.brat import iob2_to_spans

        c: Counter = Counter()
        for row in rows:
            c.update(typ for _, _, typ in iob2_to_spans(row["tags"]))
        return dict(sorted(c.items()))

    def remove_labels(self, row, drop):
        from clmdetour.tasks.brat import iob2_to_spans

        tags = list(row["tags"])
        for s, e, typ in iob2_to_spans(tags):
            if typ in drop:
                tags[s:e] = ["O"] * (e - s)
        return {**row, "tags": tags}

    def encode(self, rows, labels, tokenizer, budget, prefix, suffix, context_tokens, task) -> Encoded:
        """Windows of every document (:mod:`clmdetour.finetune.windows`), labelled at first sub-tokens.

        Besides the examples, counts per split: ``truncated``, words with a token
        that no window reads (0 by construction of the windows: a word longer than
        a window keeps its first sub-token); ``words_without_token``, words no
        token is assigned to (scored through the covering token at :meth:`score`),
        ``words_without_token_in_entity`` (of those, gold tag other than ``O``),
        ``entities_out_of_reach`` (gold entities with a boundary inside a token,
        :func:`clmdetour.finetune.align.entities_out_of_reach`) and ``entities``.
        """
        from clmdetour.finetune.align import (
            align_labels,
            covering_words,
            entities_out_of_reach,
            first_subtoken_positions,
            iob2_entities,
            word_ids_from_offsets,
            word_spans,
        )
        from clmdetour.finetune.windows import plan_windows, window_inputs, word_token_counts

        index = {l: i for i, l in enumerate(labels)}
        # The original text with each word's offsets (the task contract); rows prepared before it
        # carried words only and are fed the words joined by single spaces.
        joined = [(r["text"], r["word_offsets"]) if r.get("word_offsets") else word_spans(r["words"]) for r in rows]
        if rows and "word_offsets" not in rows[0]:
            log.warning("task %s: rows without word_offsets (prepared before they existed): the model is fed the words "
                        "joined by single spaces; rerun prepare_task to feed the original text", task)
        batch = tokenizer([t for t, _ in joined], add_special_tokens=False, return_offsets_mapping=True, verbose=False)
        enc = Encoded(examples=[], gold=[], words_without_token=0, words_without_token_in_entity=0,
                      entities_out_of_reach=0, entities=0)
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

    def collate_labels(self, examples, length):
        import torch

        from clmdetour.finetune.align import IGNORE_INDEX

        labels = torch.full((len(examples), length), IGNORE_INDEX, dtype=torch.long)
        for i, e in enumerate(examples):
            labels[i, :len(e["labels"])] = torch.tensor(e["labels"], dtype=torch.long)
        return labels

    def load_model(self, model_dir, kw):
        from transformers import AutoModelForTokenClassification

        return AutoModelForTokenClassification.from_pretrained(str(model_dir), **kw)

    def score(self, labels, metric, enc, logits, threshold=None, threshold_grid=None):
        """Strict IOB2 entity scores of one split (:func:`clmdetour.finetune.metrics.ner_scores`).

        A word's tag is the argmax at its first sub-token, in the window that
        scores it; a word with no token of its own then takes the tag of the word
        whose token covers it, ``B-X`` as ``I-X``
        (:func:`clmdetour.finetune.align.tags_of_words_without_token`); a word
        that no window reads is ``O``.

        Args:
            logits: per window (``enc.examples`` order) ``[L_i, C]``, ``C = len(labels)``.
        """
        from clmdetour.finetune.align import tags_of_words_without_token, word_predictions
        from clmdetour.finetune.metrics import ner_scores

        preds = [["O"] * n for n in enc.num_words]
        for k, (d, wids) in enumerate(zip(enc.doc_index, enc.word_ids)):
            tags = [labels[i] for i in logits[k].argmax(-1)]
            for w, tag in enumerate(word_predictions(wids, tags, enc.num_words[d])):
                if tag is not None:
                    preds[d][w] = tag
        if enc.covered_by:
            preds = [tags_of_words_without_token(p, c) for p, c in zip(preds, enc.covered_by)]
        return ner_scores(enc.gold, preds)

    def trivial(self, train, test, labels, metric):
        return no_entities([r["tags"] for r in train], [r["tags"] for r in test], metric)


def no_entities(train_tags, test_tags, metric: str) -> Trivial:
    """Predict ``O`` for every word; strict seqeval entity scores (:func:`clmdetour.finetune.metrics.ner_scores`),
    0 whatever the metric since nothing is predicted.

    Raises:
        ValueError: an unknown metric.
    """
    from clmdetour.finetune.metrics import ner_scores

    NER().check_metric(metric)

    def score(tags):
        return ner_scores(tags, [["O"] * len(t) for t in tags])[metric]

    return Trivial(score(test_tags), score(train_tags), metric, "no entities")
