"""``simulator regress [--update]``: compare (or rewrite) the goldens of every shipped scenario."""

from __future__ import annotations

from pathlib import Path

from simulator.entries.regress import compare, read_golden, scenario_points, write_golden
from simulator.errors import UserError
from simulator.resources import golden_root, shipped_path


def register(subparsers) -> None:
    parser = subparsers.add_parser("regress", help="check predicted numbers against the golden JSON files")
    parser.add_argument("--update", action="store_true", help="rewrite the goldens and print what moved")
    parser.add_argument("--scenarios", default=str(shipped_path("scenarios")),
                        help="folder of scenario YAMLs (default: the shipped scenarios)")
    parser.add_argument("--goldens", default=str(golden_root()),
                        help="golden folder (default: the shipped goldens, tests/regression/golden in a checkout)")
    parser.set_defaults(handler=_regress)


def _folders(args) -> tuple[list[Path], Path]:
    """The scenario files and the golden folder, checked before any scenario runs (an empty run passes nothing)."""
    folder, goldens = Path(args.scenarios), Path(args.goldens)
    if not folder.is_dir():
        raise UserError(f"--scenarios {args.scenarios!r} is not a folder" if folder.exists()
                        else f"--scenarios folder {args.scenarios!r} does not exist; pass --scenarios FOLDER")
    scenarios = sorted(folder.glob("*.yaml"))
    if not scenarios:
        raise UserError(f"--scenarios folder {args.scenarios!r} holds no *.yaml scenario")
    if not args.update and not goldens.is_dir():
        raise UserError(f"--goldens folder {args.goldens!r} does not exist; pass --goldens FOLDER "
                        "(--update writes it)")
    if goldens.exists() and not goldens.is_dir():
        raise UserError(f"--goldens {args.goldens!r} is not a folder")
    return scenarios, goldens


def _regress(args) -> int:
    scenarios, goldens = _folders(args)
    moved = 0
    for scenario in scenarios:
        current = scenario_points(scenario)
        golden = read_golden(goldens, scenario)
        differences = compare(scenario.name, golden, current) if golden is not None else []
        for difference in differences:
            print(difference.describe())
        moved += len(differences) + (golden is None)
        if golden is None:
            print(f"{scenario.name}: no golden yet")
        if args.update and (differences or golden is None):
            goldens.mkdir(parents=True, exist_ok=True)
            print(f"wrote {write_golden(goldens, scenario, current)}")
    print(f"{len(scenarios)} scenarios, {moved} differences" + (" (goldens updated)" if args.update and moved else ""))
    return 0 if args.update or not moved else 1
