# Named targets: pretrain_{v}, {v} (the whole ablation), prepare_task_{t}, pretrain_all, all (default),
# eval_all, analysis_all. What each stands for: clmdetour.pipeline.Pipeline.


for _variant in VARIANTS:

    rule:
        name:
            f"pretrain_{variant_target(_variant)}"
        input:
            PIPELINE.pretrain_outputs(_variant),
        localrule: True

    rule:
        name:
            variant_target(_variant)
        input:
            PIPELINE.variant_outputs(_variant),
        localrule: True


# One task's preparation by name: prepare_task_{task} (with - written _), e.g. prepare_task_fracco_30.
for _task in PIPELINE.task_specs:

    rule:
        name:
            PIPELINE.task_target(_task)
        input:
            paths.task_dir(_task),
        localrule: True


# A task target typed with - (prepare_task_fracco-30): one line naming the target to type, at planning.
for _typed, _target in PIPELINE.misspelt_task_targets().items():

    rule:
        name:
            f"misspelt_{_target}"
        input:
            PIPELINE.did_you_mean(_typed, _target),
        output:
            temp(_typed),
        localrule: True


rule pretrain_all:
    input:
        [p for v in VARIANTS for p in PIPELINE.pretrain_outputs(v)],
    localrule: True


rule eval_all:
    # every fine-tuning run of the grid (without the table)
    input:
        PIPELINE.eval_grid_outputs(),
    localrule: True


rule analysis_all:
    input:
        PIPELINE.analysis_outputs(),
    localrule: True
