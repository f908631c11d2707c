"""The time plan of the GPU benchmark: which rows run, in which order, in which device command, and whether
each fits (``bash benchmarks/gpu.sh --plan``; docs/performance.md, "The device run and its plan").

A lent GPU gives about 12 minutes of work (machine start excluded) and at most 10 minutes a command. The
plan splits the rows into at most :data:`MAX_COMMANDS` commands of at most :data:`COMMAND_LIMIT_S` seconds
each, the kit's install (:data:`KIT_INSTALL_S`) included, filling them in the order of :data:`PRIORITY`:
what has never run on a GPU first (the decay, the Snakemake run with its kill and resume, the 8,192-token
fine-tuning rows), then the CLM row and the references. A row starts only when its whole expected time fits
what is left of its command (:func:`fits`); one that fits no command is listed as left out.

Every expected time lives in :data:`EXPECTED_S`, one line per row with its source (measured on which device,
or estimated, and from what). Units: seconds of wall time on one H100/H200, process start and
compilation included.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Seconds of one device command at most (the issue's budget: 8 minutes, the kit's install included).
COMMAND_LIMIT_S = 480
#: Device commands the plan may use (a lent GPU: about 12 minutes of work, at most 10 a command).
MAX_COMMANDS = 2
#: Seconds of ``.gpu-wheels/run.sh``'s checks and offline install before the first row (estimated: 108
#: wheels, 42 MB, ``pip install --no-deps --no-index --target``; 25-35 s on this CPU machine).
KIT_INSTALL_S = 35
#: Seconds the driver needs after the last row (table, projection, copying to ``$OUT``; estimated).
WRAP_UP_S = 10
#: A row may run this much longer than expected before it is stopped (its partial result is kept).
OVERRUN = 1.25
#: ...plus this many seconds (process start and teardown vary most on short rows).
OVERRUN_S = 15

_C8 = "H200 run of main c8ebbb5 (torch 2.11.0+cu130; docs/performance.md 'Before')"
_EST = "estimated, never run on a GPU"

#: row -> (expected seconds, source). Update a line after a device run (the row's ``process_wall_s``).
EXPECTED_S: dict[str, tuple[float, str]] = {
    "pretrain/decay-flex": (140, (f"estimated from the {_C8}: first step 85.2 s in a fresh process, 5 steps of "
                                 "about 1.5 s, the planner's probe and the same-process replan; 5 steps (was 6)")),
    "pipeline": (170, (f"{_EST}: the demo DAG's CPU rehearsal (about 150 s on 2 cores) scaled to one GPU, the "
                      "compilations of the resume runs shared with the DAG's phase 1 through the compile cache")),
    "finetune/ner-8192/project": (45, (f"{_EST}: 150M model built and saved (10 s), 64 windows of up to 8,192 "
                                      "tokens at batch 16, micro-batch planned")),
    "finetune/doc-8192/project": (40, f"{_EST}: as ner-8192, one multilabel input per document"),
    "finetune/ner-8192/trainer": (40, f"{_EST}: the same inputs through transformers.Trainer"),
    "finetune/doc-8192/trainer": (35, f"{_EST}: the same inputs through transformers.Trainer"),
    "pretrain/clm-flex": (110, f"estimated from the {_C8}: first step 50.4 s, 5 steps of about 1.5 s, the probe"),
    "pretrain/trainer-mlm": (45, f"estimated from the {_C8}: transformers.Trainer MLM, micro-batch 4"),
    "finetune/cls-512/project": (30, f"{_EST}: 320 inputs of up to 512 tokens at batch 16"),
    "finetune/cls-512/trainer": (25, f"{_EST}: the same inputs through transformers.Trainer"),
    "pretrain/clm-sdpa": (40, f"estimated from the {_C8}: sdpa, not compiled, micro-batch 4"),
    "finetune/ner-8192/flex": (60, f"{_EST}: FlexAttention uncompiled (torch's slow reference path)"),
    "finetune/ner-8192/flex-compile": (120, f"{_EST}: FlexAttention compiled over 8 bucketed lengths"),
}

#: The order rows are planned in: never measured on a GPU first, then the CLM row and the references.
PRIORITY = ["pretrain/decay-flex", "pipeline", "finetune/ner-8192/project", "finetune/doc-8192/project",
            "finetune/ner-8192/trainer", "finetune/doc-8192/trainer", "pretrain/clm-flex", "pretrain/trainer-mlm",
            "finetune/cls-512/project", "finetune/cls-512/trainer", "pretrain/clm-sdpa", "finetune/ner-8192/flex",
            "finetune/ner-8192/flex-compile"]

#: What each row stands for (the feature it proves), printed with the plan and in docs/performance.md.
PROVES = {
    "pretrain/decay-flex": "the decay's throughput goal (>= 240,000 tokens/s) and the planner in a fresh process",
    "pipeline": "Snakemake jobs on a GPU (bf16, FlexAttention, compile) and a kill -9 resume with equal losses",
    "finetune/ner-8192/project": "a paper grid job (NER, 8,192-token windows) on the project's path",
    "finetune/doc-8192/project": "a paper grid job (multilabel, 8,192 tokens) on the project's path",
    "finetune/ner-8192/trainer": "the reference of the NER grid job's ratio",
    "finetune/doc-8192/trainer": "the reference of the multilabel grid job's ratio",
    "pretrain/clm-flex": "phase 1's throughput goal (>= 280,000 tokens/s, MFU >= 40 %)",
    "pretrain/trainer-mlm": "the reference of every pretraining ratio",
    "finetune/cls-512/project": "a 512-token grid job (MedDialog-like) on the project's path",
    "finetune/cls-512/trainer": "the reference of the 512-token job's ratio",
    "pretrain/clm-sdpa": "the path before FlexAttention (sdpa, eager)",
    "finetune/ner-8192/flex": "fine-tuning's attention choice: FlexAttention uncompiled",
    "finetune/ner-8192/flex-compile": "fine-tuning's attention choice: FlexAttention compiled, bucketed lengths",
}


def expected_s(name: str) -> float:
    """Expected seconds of row ``name`` (:data:`EXPECTED_S`).

    Raises:
        KeyError: an unknown row, naming the known ones.
    """
    if name not in EXPECTED_S:
        raise KeyError(f"unknown row {name!r}; rows: {' '.join(EXPECTED_S)}")
    return EXPECTED_S[name][0]


def row_deadline_s(name: str, left_s: float) -> float:
    """Seconds row ``name`` may run before it is stopped: its expected time x :data:`OVERRUN` +
    :data:`OVERRUN_S`, never past what is left of the command (``left_s``)."""
    return max(1.0, min(left_s, expected_s(name) * OVERRUN + OVERRUN_S))


def fits(name: str, left_s: float) -> bool:
    """Whether row ``name``'s whole expected time fits in ``left_s`` seconds (the rule that starts a row)."""
    return expected_s(name) <= left_s


@dataclass(frozen=True)
class Command:
    """One device command of the plan: its rows in order, their expected seconds and the total."""

    number: int
    rows: tuple[str, ...]

    @property
    def rows_s(self) -> float:
        """Expected seconds of the rows alone."""
        return sum(expected_s(r) for r in self.rows)

    @property
    def total_s(self) -> float:
        """Expected seconds of the command: the kit's install, the rows and the wrap-up."""
        return KIT_INSTALL_S + self.rows_s + WRAP_UP_S

    @property
    def budget_s(self) -> float:
        """The ``--budget-s`` the command's driver gets: the limit less the install and the wrap-up."""
        return COMMAND_LIMIT_S - KIT_INSTALL_S - WRAP_UP_S

    def shell(self) -> str:
        """The command to type on the device machine (in the checkout, the kit carried)."""
        return f"bash .gpu-wheels/run.sh --command {self.number}"


@dataclass(frozen=True)
class Plan:
    """The commands, and the rows that fit none (with their expected seconds)."""

    commands: tuple[Command, ...]
    left_out: tuple[str, ...]

    def command(self, number: int) -> Command:
        """Command ``number`` (1-based).

        Raises:
            ValueError: no such command in the plan.
        """
        for c in self.commands:
            if c.number == number:
                return c
        raise ValueError(f"--command {number}: the plan has commands {[c.number for c in self.commands]}")


def make_plan(names: list[str] | None = None, limit_s: float = COMMAND_LIMIT_S,
              max_commands: int = MAX_COMMANDS) -> Plan:
    """Split ``names`` (default: every row) into commands, in :data:`PRIORITY` order, first fit: each row goes
    into the first command whose rows, install and wrap-up stay within ``limit_s`` seconds.

    Raises:
        KeyError: an unknown row.
    """
    wanted = list(PRIORITY) if names is None else [n for n in PRIORITY if n in names]
    for n in names or []:
        expected_s(n)  # KeyError naming the known rows
    room = limit_s - KIT_INSTALL_S - WRAP_UP_S
    groups: list[list[str]] = [[] for _ in range(max_commands)]
    left_out = []
    for name in wanted:
        for group in groups:
            if sum(expected_s(r) for r in group) + expected_s(name) <= room:
                group.append(name)
                break
        else:
            left_out.append(name)
    commands = tuple(Command(i + 1, tuple(g)) for i, g in enumerate(groups) if g)
    return Plan(commands, tuple(left_out))


def format_plan(plan: Plan, limit_s: float = COMMAND_LIMIT_S) -> str:
    """The plan in words: per command its rows in order with expected seconds, when each starts, whether it
    fits, the command to type; then the rows left out."""
    lines = [(f"GPU benchmark plan: {len(plan.commands)} device command(s) of at most {limit_s:.0f} s each "
             f"(kit install {KIT_INSTALL_S} s and wrap-up {WRAP_UP_S} s included); expected seconds: "
             "benchmarks/gpu_plan.py EXPECTED_S")]
    for c in plan.commands:
        lines.append(f"\ncommand {c.number}: {c.shell()}   (expected {c.total_s:.0f} s of {limit_s:.0f})")
        t = KIT_INSTALL_S
        for r in c.rows:
            e = expected_s(r)
            verdict = "fits" if t + e <= limit_s - WRAP_UP_S else "DOES NOT FIT"
            lines.append(f"  {t:5.0f} s  {r:32s} {e:5.0f} s  {verdict}  ({PROVES[r]})")
            t += e
    for r in plan.left_out:
        lines.append(f"left out (fits no command): {r} ({expected_s(r):.0f} s): run it with --only {r}")
    lines.append("\nthen, here: python benchmarks/gpu.py --merge <command 1's gpu-c1.json> <command 2's gpu-c2.json>"
                 " (one table, ratios across commands) and python -m clmdetour.pipeline.rates update "
                 "benchmarks/results/gpu.json (the projection's rates)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``gpu_plan.py [show|commands|left-out]``: the plan in words, the command numbers, or the rows left out
    (one per line; for ``benchmarks/gpu-kit.sh rehearse``)."""
    import sys

    what = (argv if argv is not None else sys.argv[1:])[:1] or ["show"]
    plan = make_plan()
    if what == ["commands"]:
        print(" ".join(str(c.number) for c in plan.commands))
    elif what == ["left-out"]:
        print("\n".join(plan.left_out))
    elif what == ["show"]:
        print(format_plan(plan))
    else:
        print(f"gpu_plan.py: unknown {what[0]!r}; use show, commands or left-out", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
