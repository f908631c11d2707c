# Named targets: pretrain_{v}, {v} (the whole ablation), pretrain_all, all (default).


def _optional(fn_name, *args):
    fn = globals().get(fn_name)
    return fn(*args) if fn else []


for _variant in VARIANTS:

    rule:
        name:
            f"pretrain_{variant_target(_variant)}"
        input:
            pretrain_outputs(_variant),
        localrule: True

    rule:
        name:
            variant_target(_variant)
        input:
            pretrain_outputs(_variant),
            _optional("model_eval_outputs", _variant),
        localrule: True


rule pretrain_all:
    input:
        [p for v in VARIANTS for p in pretrain_outputs(v)],
    localrule: True


def all_targets():
    """Inputs of `rule all` (defined first in the Snakefile so that it is the default target)."""
    return [
        *[p for v in VARIANTS for p in pretrain_outputs(v)],
        *_optional("eval_table_outputs"),
        *_optional("analysis_outputs"),
        *[p for v in VARIANTS for p in _optional("release_outputs", v)],
    ]


rule eval_all:
    # every fine-tuning run of the grid (without the table)
    input:
        _optional("eval_grid_outputs"),
    localrule: True


rule analysis_all:
    input:
        _optional("analysis_outputs"),
    localrule: True
