# The fault table of issue #22: seeded single damages to a store built by real sends, restarted.
"""Print the damage-kind x file-kind fault table (cases, refused, served, acknowledged
messages the damage destroyed, acknowledged messages lost otherwise) for ``--cases`` seeded
damages, ``--broker-cases`` of them also restarted as a real broker process; the machinery is
pybroker/_testbase/damage.py (the same as tests/crash/test_damage_property.py). Exit status 1
when any case broke the property (the cases are listed).

    python tools/damage_table.py --cases 3000 --broker-cases 20 --seed 7
"""
import argparse
import random
import sys
import tempfile

from pybroker._testbase.damage import build_store, run_cases

MESSAGES = 400


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=3000)
    parser.add_argument("--broker-cases", type=int, default=10)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--messages", type=int, default=MESSAGES)
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 32)
    rand = random.Random(seed)
    rand.seed_value = seed            # type: ignore[attr-defined]  # run_cases seeds from it
    with tempfile.TemporaryDirectory(prefix="damage-table-") as work_dir:
        built = build_store(work_dir, args.messages, random.Random(seed ^ 0x5EED))
        table, broker_table, problems = run_cases(built, rand, args.cases, args.broker_cases,
                                                  work_dir)
    out = sys.stdout
    out.write(f"seed {seed}: {args.cases} cases, {args.messages} acknowledged messages, "
              f"restarted in process\n\n{table.markdown()}\n\n{args.broker_cases} of them "
              f"restarted as a real broker process too\n\n{broker_table.markdown()}\n")
    for problem in problems:
        out.write(f"BROKEN: {problem}\n")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
