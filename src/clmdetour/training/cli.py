"""Command-line entry of one pretraining phase (started by ``clmdetour.training.launch``).

Example (what the ``pretrain_phase1`` rule runs)::

    python -m clmdetour.training.launch --gpus 4 -- -m clmdetour.training.cli \\
        --variant clm-detour --input-model results/base/model --corpus results/corpus \\
        --output-dir results/pretrain/clm-detour/phase1 --section '{...resolved config...}'
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from clmdetour.io import read_json


def section_from_json(text: str) -> dict:
    """The ``--section`` option's value (the phase's resolved config, as JSON) as a dict.

    Raises:
        ConfigError: the text is not JSON, naming the option and the position of the problem.
    """
    from clmdetour.config import ConfigError

    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"--section: not valid JSON: {e.msg} at line {e.lineno}, column {e.colno} (character "
                          f"{e.pos}); give the phase's resolved config as one JSON object, as the pretrain rules "
                          "write it") from None


def main(argv: list[str] | None = None) -> None:
    """Run the phase the command line describes (``--help`` lists the options)."""
    p = argparse.ArgumentParser(description="Run one pretraining phase")
    p.add_argument("--variant", required=True)
    p.add_argument("--input-model", required=True)
    p.add_argument("--corpus", required=True, help="folder with train/, valid/ and manifest.json")
    p.add_argument("--output-dir", required=True)
    p.add_argument("--section", required=True, help="the phase's resolved config as JSON")
    p.add_argument("--previous-run", default=None, help="phase 1's run.json (decay: stream offset, optimizer state)")
    p.add_argument("--allow-repeat", choices=["true", "false"], default="true")
    args = p.parse_args(argv)
    from clmdetour.config import ConfigError

    try:
        section_dict = section_from_json(args.section)
    except ConfigError as e:
        sys.exit(f"error: {e}")  # one line, before any library loads
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from clmdetour.errors import install_excepthook

    install_excepthook()
    from clmdetour.runtime.composer_setup import import_training_libraries

    import_training_libraries()  # Composer, then gc.freeze(): docs/performance.md, "Fixed cost of a training process"
    from clmdetour.settings import PhaseSettings
    from clmdetour.training.phase import run_phase

    try:
        section = PhaseSettings.from_dict(section_dict, f"pretraining.variants.{args.variant} phase section")
    except ConfigError as e:
        sys.exit(f"error: {e}")  # one line: a section of the wrong shape is the caller's input, not a crash
    offset, opt_state = 0, None
    if args.previous_run:
        prev = read_json(args.previous_run)
        offset = prev["offset_tokens"] + prev["tokens"]
        if section.load_optimizer_state:
            opt_state = prev["optimizer_state_path"]
    # never optional: SIGTERM / SIGUSR1 (scancel, preemption) and the SLURM time limit save and exit for a retry
    from clmdetour.training.time_limit import StopOnSignal, time_limit_callbacks

    callbacks = [StopOnSignal(), *time_limit_callbacks(section.checkpoint_margin_s)]
    from clmdetour.training.callbacks import DivergenceError
    from clmdetour.training.quality import QualityFloorError

    try:
        run_phase(input_model=args.input_model, corpus_dir=args.corpus, output_dir=args.output_dir, section=section,
                  variant=args.variant, checkpoint_root=section.checkpoint_root, offset_tokens=offset,
                  optimizer_state=opt_state, allow_repeat=args.allow_repeat == "true", extra_callbacks=callbacks)
    except (DivergenceError, QualityFloorError) as e:
        # a model the training made useless is a result to report, not a crash: one line, no traceback
        print(f"error: {e}", file=sys.stderr, flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
