"""Entity markers as special tokens: what a type whose tasks mark relation arguments needs before training.

A relation task marks its two arguments in the text (``tasks.{task}.entity_markers``, e.g. ``<< >>`` and
``[[ ]]``; checked at preparation by :mod:`clmdetour.tasks.relation`). With ``marker_tokens: true`` the
prepared task's ``labels.json`` lists the marker strings (``marker_tokens``), and the fine-tuning job adds
them to its own tokenizer as special tokens (:func:`add_marker_tokens`: never split, one id each) and gives
the task model an input-embedding row per new id (:func:`init_marker_embeddings`). A type takes part by
mixing in :class:`EntityMarkers`, whose two hooks (:meth:`clmdetour.tasktypes.TaskType.prepare_tokenizer`,
:meth:`clmdetour.tasktypes.TaskType.init_head`) do both; a type whose head reads the marker tokens extends
them (the marker ids are in the hooks' :class:`clmdetour.tasktypes.base.TokenizerAdditions`).
"""

from __future__ import annotations

from .base import TokenizerAdditions

#: The job record's ``data`` key listing each marker and its id (:attr:`TokenizerAdditions.record_key`).
MARKER_RECORD_KEY = "marker_tokens"


def add_marker_tokens(tokenizer, markers: list[str]) -> tuple[list[int], list[int]]:
    """Add relation-argument markers to a job's tokenizer as special tokens (``marker_tokens: true``).

    Only this in-memory tokenizer changes: the model folder's tokenizer files (a pretrained
    variant, a released model, a reference model) are never written. A marker the
    vocabulary already holds as one token keeps its id and its trained embedding.

    Args:
        tokenizer: a transformers tokenizer (modified in place).
        markers: the marker strings (``labels.json`` ``marker_tokens``), e.g. ``["<<", ">>", "[[", "]]"]``.

    Returns:
        ``(ids, new_ids)``: each marker's id in ``markers`` order (it encodes to exactly this one
        id), and the ids that are new to the vocabulary (their embeddings need initialising).

    Raises:
        ValueError: a marker that still does not encode to one token (names it).
    """
    if not markers:
        return [], []
    known = {m for m in markers if len(tokenizer(m, add_special_tokens=False)["input_ids"]) == 1
             and m in tokenizer.get_vocab()}
    tokenizer.add_tokens([m for m in markers if m not in known], special_tokens=True)  # never split or normalised
    ids = []
    for m in markers:
        enc = tokenizer(m, add_special_tokens=False)["input_ids"]
        if len(enc) != 1:
            raise ValueError(f"marker {m!r} encodes to {len(enc)} tokens after being added to the tokenizer")
        ids.append(enc[0])
    return ids, [i for m, i in zip(markers, ids) if m not in known]


def init_marker_embeddings(model, tokenizer, new_ids: list[int]) -> int:
    """Give the fine-tuned model an input-embedding row per new marker id, set to the mean token embedding.

    The embedding matrix grows (``resize_token_embeddings``) when a new id lies beyond it
    (ModernBERT pads its matrix to a multiple of 64 rows, so ids below that need no growth);
    each new row is then set to the mean of the rows of the tokenizer's other tokens, the
    initialisation of new tokens of Hewitt (2021), "Initializing New Word Embeddings for
    Pretrained Language Models". Only this task model changes.

    Args:
        model: a transformers ``PreTrainedModel`` (modified in place).
        tokenizer: the job's tokenizer, markers added (:func:`add_marker_tokens`).
        new_ids: the new marker ids (:func:`add_marker_tokens`).

    Returns:
        The number of input-embedding rows after the change.
    """
    import torch

    emb = model.get_input_embeddings()
    if not new_ids:
        return emb.weight.shape[0]
    if max(new_ids) >= emb.weight.shape[0]:
        model.resize_token_embeddings(max(new_ids) + 1, mean_resizing=False)
        emb = model.get_input_embeddings()
    new = set(new_ids)
    ref = sorted(i for i in tokenizer.get_vocab().values() if i not in new and i < emb.weight.shape[0])
    with torch.no_grad():
        mean = emb.weight[ref].mean(dim=0)
        for i in new_ids:
            emb.weight[i] = mean
    return emb.weight.shape[0]


class EntityMarkers:
    """Mixin of a task type whose tasks may add entity markers to the tokenizer (``labels.json``
    ``marker_tokens``; the class-label types, which accept ``entity_markers``). Put it before the
    :class:`clmdetour.tasktypes.TaskType` base, so its hooks replace the base's no-ops."""

    def prepare_tokenizer(self, tokenizer, task) -> TokenizerAdditions:
        """Add the task's marker strings (``task.marker_tokens``; none: nothing changes) to the job's
        tokenizer as special tokens (:func:`add_marker_tokens`).

        Returns:
            The :class:`TokenizerAdditions`: each marker's id, the ids new to the vocabulary, recorded
            under ``marker_tokens``.

        Raises:
            ValueError: a marker that does not encode to one token.
        """
        markers = list(task.marker_tokens)
        ids, new_ids = add_marker_tokens(tokenizer, markers)
        return TokenizerAdditions(tokens=dict(zip(markers, ids)), new_ids=tuple(new_ids), record_key=MARKER_RECORD_KEY)

    def init_head(self, model, tokenizer, additions: TokenizerAdditions) -> None:
        """Set the input-embedding rows of the markers new to the vocabulary (:func:`init_marker_embeddings`;
        the model is left as it is when there are none)."""
        if additions.new_ids:
            init_marker_embeddings(model, tokenizer, list(additions.new_ids))
