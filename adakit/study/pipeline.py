"""The whole study as stages: worlds -> launch -> judge -> notebooks -> index.

``make study`` drives these stages as a Make dependency graph; ``adakit study PROFILE`` runs
the same stages in order for people without Make. A profile is a study file
``studies/<profile>.yaml`` (its ``judge`` block says which runs to adjudicate and how) and a
papermill parameter file ``studies/<profile>.params.yaml`` shared by every notebook.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import yaml

from adakit import config
from adakit.record import load_corpus
from adakit.study.index_page import IndexPage, build_index  # noqa: F401 - re-exported

if TYPE_CHECKING:
    from adakit.judging.run import JudgeReport


def study_file(profile: str) -> Path:
    """The study file of a profile (a name under studies/ or a path)."""
    p = Path(profile)
    if p.suffix in (".yaml", ".yml") and p.exists():
        return p
    path = config.STUDIES / f"{profile}.yaml"
    if not path.exists():
        known = sorted(f.stem for f in config.STUDIES.glob("*.yaml") if not f.stem.endswith(".params"))
        raise FileNotFoundError(f"no profile {profile!r}; known: {', '.join(known)}")
    return path


def params_file(profile: str) -> Path:
    """The papermill parameter file of a profile."""
    return study_file(profile).with_suffix("").with_suffix(".params.yaml")


def output_dir(profile: str) -> Path:
    """Where the executed notebooks, the index page and the stage stamps of a profile go."""
    return config.DATA / "study" / Path(profile).stem


def notebooks() -> list[Path]:
    """The numbered notebooks, in order (a glob, never a hand-kept list)."""
    return sorted(config.NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


# --------------------------------------------------------------------------- judge stage


def judge_selection(corpus: Path, spec: dict[str, Any]) -> list[Path]:
    """The run files the judge stage adjudicates.

    Every finished run of a non-baseline model is judged (only those of ``models`` when the
    spec names some); of each baseline model, at most ``baseline_runs`` runs (the first by run
    id, so the sample is stable).
    """
    runs = load_corpus(corpus, cache=False).runs
    if runs.empty:
        return []
    runs = runs[runs["finished"]].sort_values("run_id")
    if spec.get("models"):
        runs = runs[runs["model"].isin(list(spec["models"])) | (runs["model_kind"] == "baseline")]
    keep = runs[runs["model_kind"] != "baseline"]
    per = int(spec.get("baseline_runs", 0))
    if per > 0:
        base = runs[runs["model_kind"] == "baseline"].groupby("model", sort=True).head(per)
        keep = pd.concat([keep, base])
    return [Path(p) for p in keep.sort_values("run_id")["path"]]


@dataclass
class JudgePlan:
    """What a judging pass will do: which run files, which families, which judges, which
    limits, and where the verdicts go (built by :func:`judge_plan`)."""

    corpus: Path
    run_files: list[Path]
    families: list[str]
    judges: list[str]
    turn_judge: str
    max_turn_items: int | None
    max_tokens: int
    out_dir: Path

    @property
    def whole_corpus(self) -> bool:
        """True when the corpus is handed over as is (no per-run selection)."""
        return self.run_files == [self.corpus]

    def describe(self) -> str:
        """The plan in a few readable lines."""
        from adakit.judging.run import panel_note

        which = "every run" if self.whole_corpus else f"{len(self.run_files)} runs"
        lines = [
            f"corpus {self.corpus}: judging {which}",
            f"families: {', '.join(self.families)}",
            f"panel (conclusion level): {', '.join(self.judges)}; "
            f"turn-level judge: {self.turn_judge}",
        ]
        note = panel_note(self.judges)
        if note:
            lines.append(f"note: {note}")
        lines.append(f"steps per run and turn family: {self.max_turn_items or 'all'}; "
                     f"reply limit {self.max_tokens} tokens")
        lines.append(f"verdicts go to {self.out_dir}")
        return "\n".join(lines)

    def run(self, cache_mode: str = "use", progress: bool = True) -> JudgeReport:
        """Ask the judges (``adakit.judging.run.run_judgments``); returns its JudgeReport."""
        from adakit.judging.run import run_judgments

        return run_judgments(
            self.run_files,
            families=tuple(self.families),
            judges=self.judges,
            turn_judge=self.turn_judge,
            max_turn_items=self.max_turn_items,
            cache_mode=cache_mode,
            out_dir=self.out_dir,
            max_tokens=self.max_tokens,
            progress=progress,
        )


def _is_dataset(path: Path) -> bool:
    """A shipped dataset (its folder or its ``runs/``): read-only, with verdicts of its own."""
    from adakit.study.dataset import MANIFEST

    return (path / MANIFEST).exists() or (path.name == "runs" and (path.parent / MANIFEST).exists())


def _corpus_to_judge(corpus: str | Path | Sequence[str | Path]) -> Path | None:
    """The one folder (or run file) of ``corpus`` to judge: of a list (the notebooks' several
    folders), the one that is not a shipped dataset; None for an empty value."""
    if not corpus:
        return None
    if isinstance(corpus, str | Path):
        return config.resolve(corpus)
    folders = [config.resolve(c) for c in corpus]
    shipped = [f for f in folders if _is_dataset(f)]
    for f in shipped:
        print(f"note: {f} is a shipped dataset; its verdicts come with it and it is not judged here")
    left = [f for f in folders if f not in shipped]
    if len(left) > 1:
        raise ValueError(f"judge one corpus folder at a time, not {len(left)}: "
                         + ", ".join(map(str, left)))
    if not left:
        raise ValueError("every corpus folder given is a shipped dataset (judged already): "
                         + ", ".join(map(str, folders)))
    return left[0]


def judge_plan(
    study: str | Path = "",
    corpus: str | Path | Sequence[str | Path] = "",
    families: str | Sequence[str] = (),
    judges: str | Sequence[str] = (),
    turn_judge: str = "",
    max_turn_items: int = 0,
    baseline_runs: int = -1,
    max_tokens: int = 0,
    default_max_tokens: int = 2048,
) -> JudgePlan:
    """Resolve a judging pass from a study file's ``judge`` block and explicit overrides.

    Empty / zero / -1 arguments defer to the study's block, then to the defaults: all five
    families, the local model three times as the panel, the first judge for the turn-level
    families, every step, ``default_max_tokens``. ``corpus`` defaults to the study's output
    folder; relative paths are taken from the project root; of a list of folders, the one that
    is not a shipped dataset is judged (datasets carry their own verdicts). With a study (or an explicit
    ``baseline_runs``) a folder corpus is narrowed by :func:`judge_selection`; otherwise the
    corpus (folder or run file) is judged whole. Raises ValueError without a corpus.
    """
    from adakit.judging.families import parse_families
    from adakit.judging.run import DEFAULT_PANEL, parse_judges
    from adakit.judging.store import judgments_dir
    from adakit.study.spec import load_study

    spec: dict[str, Any] = {}
    corpus_path = _corpus_to_judge(corpus)
    if study:
        study_path = config.resolve(study)
        plan = load_study(study_path if study_path.exists() else study)
        spec = dict(plan.raw.get("judge") or {})
        corpus_path = corpus_path or Path(plan.output)
    if corpus_path is None:
        raise ValueError("set `corpus` (or `study`) to the corpus to judge")
    panel = parse_judges(judges or spec.get("judges")) or list(DEFAULT_PANEL)
    per_baseline = baseline_runs if baseline_runs >= 0 else int(spec.get("baseline_runs", 0))
    select = corpus_path.is_dir() and (bool(study) or baseline_runs >= 0)
    files = (judge_selection(corpus_path, {"baseline_runs": per_baseline,
                                           "models": spec.get("models") or []}) if select
             else [corpus_path])
    return JudgePlan(
        corpus=corpus_path,
        run_files=files,
        families=parse_families(families or spec.get("families")),
        judges=panel,
        turn_judge=turn_judge or spec.get("turn_judge") or panel[0],
        max_turn_items=max_turn_items or spec.get("max_turn_items"),
        max_tokens=max_tokens or int(spec.get("max_tokens", default_max_tokens)),
        out_dir=judgments_dir(corpus_path),
    )


def run_judge_stage(profile: str, progress: bool = True) -> dict[str, Any]:
    """Adjudicate a profile's corpus as its study file's ``judge`` block says."""
    from adakit.study.replies import restore_declared
    from adakit.study.spec import load_study

    path = study_file(profile)
    study = load_study(path)
    plan = judge_plan(study=path)
    if not plan.run_files:
        print(f"judge: no runs selected in {plan.corpus}")
        return {"runs": 0}
    cache_mode = (study.raw.get("judge") or {}).get("cache_mode") or study.cache_mode
    if cache_mode != "off" and (note := restore_declared(study.raw)):
        print(note)
    report = plan.run(cache_mode=cache_mode, progress=progress)
    print(f"judge: {len(plan.run_files)} runs -> {plan.out_dir}")
    return {"runs": len(plan.run_files), "report": report}


# --------------------------------------------------------------------------- notebooks


#: The tag papermill looks for on a notebook's parameters cell.
PARAMETERS_TAG = "parameters"


def declared_parameters(notebook: Path) -> dict[str, Any]:
    """A notebook's parameters, name -> default, in the order of its ``parameters`` cell.

    The cell holds literals only (one ``name = literal  # help`` per line); a value that is
    not a literal raises ValueError naming the notebook and the parameter.
    """
    nb = json.loads(Path(notebook).read_text(encoding="utf-8"))
    cell = next((c for c in nb.get("cells", []) if c.get("cell_type") == "code"
                 and PARAMETERS_TAG in c.get("metadata", {}).get("tags", [])), None)
    if cell is None:
        return {}
    source = "".join(cell.get("source", ""))
    out: dict[str, Any] = {}
    for node in ast.parse(source).body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)):
            continue
        name = node.targets[0].id
        try:
            out[name] = ast.literal_eval(node.value)
        except ValueError as exc:
            raise ValueError(f"{Path(notebook).name}: parameter {name} is not a literal") from exc
    return out


def profile_parameters(profile: str) -> dict[str, Any]:
    """What a profile's parameter file (``studies/<profile>.params.yaml``) sets; empty when
    the profile has none."""
    try:
        path = params_file(profile)
    except FileNotFoundError:
        return {}
    if not path.exists():
        return {}
    return dict(yaml.safe_load(path.read_text(encoding="utf-8")) or {})


def profile_corpus(profile: str) -> list[str]:
    """The folders of runs a profile's notebooks read: its parameter file's ``corpus``, else
    its study's output folder; none for an unknown profile."""
    given = profile_parameters(profile).get("corpus")
    if not given:
        from adakit.study.spec import load_study

        try:
            given = str(load_study(study_file(profile)).output)
        except FileNotFoundError:
            return []
    return [given] if isinstance(given, str) else [str(c) for c in given]


def study_parameters(notebook: Path, profile: str) -> dict[str, Any]:
    """The parameters a profile's study runs ``notebook`` with: its declared defaults, then the
    profile's parameter file for the names the notebook declares."""
    declared = declared_parameters(notebook)
    given = profile_parameters(profile)
    return {name: given.get(name, default) for name, default in declared.items()}


@contextmanager
def _environment(**values: str) -> Iterator[None]:
    """Set environment variables for the duration of a block (the notebook's kernel inherits
    them), then restore what was there."""
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, old in before.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old


def execute_notebook(src: Path, dest: Path, params: Path | None,
                     extra: dict[str, Any] | None = None, profile: str | None = None) -> float:
    """Run one notebook with papermill into ``dest`` (never over the source); seconds taken.

    Of the parameter file ``params`` (shared by every notebook of a profile) the notebook is
    given only the names it declares, so its guard (:mod:`adakit.workbench.guard`) sees no
    unknown name; ``extra`` is passed as is. ``profile`` (default: the parameter file's) is
    set as ``ADAKIT_PROFILE`` for the kernel, so the guard compares the notebook's parameters
    with that profile's and writes its figures into the study's own folders.
    """
    import papermill as pm

    if dest.resolve() == src.resolve():
        raise ValueError("papermill must not overwrite its source notebook")
    declared = declared_parameters(src)
    parameters: dict[str, Any] = {}
    if params is not None and params.exists():
        given = yaml.safe_load(params.read_text(encoding="utf-8")) or {}
        parameters.update({k: v for k, v in given.items() if k in declared})
    parameters.update(extra or {})
    if profile is None and params is not None:
        profile = params.name.removesuffix(".params.yaml")
    dest.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    with _environment(**{config.PROFILE_ENV: profile or config.DEFAULT_PROFILE}):
        pm.execute_notebook(
            str(src), str(dest), parameters=parameters, cwd=str(config.NOTEBOOKS),
            progress_bar=True, kernel_name="python3",
        )
    return time.time() - t0


# --------------------------------------------------------------------------- summary + CLI


def summary(profile: str) -> str:
    """What ran, what was replayed, where the outputs are."""
    from adakit.study.spec import load_study

    study = load_study(study_file(profile))
    lines = [f"study {study.name}"]
    if not study.output.exists():
        return "\n".join(lines + [f"  no runs yet in {study.output}"])
    corpus = load_corpus(study.output, cache=False)
    runs, turns = corpus.runs, corpus.turns
    if not runs.empty:
        reasons = runs["reason"].fillna("unfinished").value_counts()
        lines.append(f"  runs: {len(runs)} ({', '.join(f'{k} {v}' for k, v in reasons.items())})")
        model_turns = turns.merge(runs[["run_id", "model_kind"]], on="run_id")
        llm = model_turns[model_turns["model_kind"] != "baseline"]
        if len(llm):
            lines.append(
                f"  model turns: {len(llm)}, replayed from the response cache: {int(llm['cached'].sum())}"
            )
    jdir = config.JUDGMENTS / study.output.name
    jl = jdir / "judgments.jsonl"
    if jl.exists():
        rows = [json.loads(x) for x in jl.read_text().splitlines() if x.strip()]
        cached = sum(1 for r in rows if r.get("cached"))
        lines.append(f"  verdicts: {len(rows)} ({cached} replayed from the cache) -> {jdir}")
    out = output_dir(profile)
    lines.append(f"  corpus: {study.output}")
    lines.append(f"  executed notebooks: {out / 'notebooks'}")
    lines.append(f"  figures: {config.figures_dir()}")
    lines.append(f"  index page: {out / 'index.html'}")
    return "\n".join(lines)


def _cmd_study(args: argparse.Namespace) -> int:
    profile = args.profile
    out = output_dir(profile)
    stages = args.stages or ["worlds", "launch", "judge", "notebooks", "index"]
    from adakit.study.launch import gated_launch
    from adakit.study.spec import load_study

    study = load_study(study_file(profile))
    t0 = time.time()
    if "worlds" in stages:
        from adakit.apparatus.world import WorldUnavailable, fetch_world

        for name in dict.fromkeys(s.world for s in study.specs):
            try:
                fetch_world(name)
            except WorldUnavailable as exc:  # the launch's preflight reports it and decides
                print(f"worlds: {exc}", file=sys.stderr)
    if "launch" in stages:
        code = gated_launch(study, yes=args.yes, study_arg=str(study_file(profile)))
        if code:
            return code
    if "judge" in stages:
        run_judge_stage(profile)
    if "notebooks" in stages:
        for nb in notebooks():
            secs = execute_notebook(nb, out / "notebooks" / nb.name, params_file(profile),
                                    profile=Path(profile).stem)
            print(f"notebook {nb.name}: {secs:.1f}s")
    if "index" in stages:
        page = build_index(out, corpus=profile_corpus(profile))
        print(f"index: {page.path} ({len(page.pages)} notebooks, {page.images} figures)")
    if "launch" in stages:
        print(summary(profile))
    print(f"total {time.time() - t0:.1f}s")
    return 0


def build_declared_dataset(profile: str) -> str:
    """Pack a profile's corpus into the dataset its study file declares (``dataset: FOLDER``),
    with its verdicts and recorded replies (``adakit.study.dataset.build``); what was done, in a line."""
    from adakit.study.spec import load_study

    study = load_study(study_file(profile))
    target = study.raw.get("dataset")
    if not target:
        return f"study {study.name} declares no dataset: nothing to build"
    from adakit.study.dataset import build

    manifest = build(study.output, target, study=study_file(profile))
    c = manifest["counts"]
    return (f"dataset {manifest['name']}: {c['runs']} runs, {c['verdicts']} verdicts, "
            f"{c['responses']} recorded replies -> {target}")


def _cmd_report(args: argparse.Namespace) -> int:
    if args.what == "dataset":
        print(build_declared_dataset(args.profile))
    elif args.what == "index":
        page = build_index(output_dir(args.profile), corpus=profile_corpus(args.profile))
        print(f"index: {page.path} ({len(page.pages)} notebooks, {page.images} figures)")
    elif args.what == "judge":
        run_judge_stage(args.profile)
    elif args.what == "notebook":
        if not args.notebook:
            print("report notebook needs --notebook NAME", file=sys.stderr)
            return 2
        src = config.NOTEBOOKS / args.notebook
        secs = execute_notebook(src, output_dir(args.profile) / "notebooks" / src.name,
                                params_file(args.profile), profile=Path(args.profile).stem)
        print(f"notebook {src.name}: {secs:.1f}s")
    else:
        print(summary(args.profile))
    return 0


def register_cli(sub: Any) -> None:
    """``adakit study PROFILE`` and ``adakit stage``."""
    p = sub.add_parser("study", help="run the whole study for a profile (worlds, launch, judge, notebooks, index)")
    p.add_argument("profile", nargs="?", default="quick", help="quick (default), paper, ci, or a study file")
    p.add_argument("--stages", nargs="+", choices=["worlds", "launch", "judge", "notebooks", "index"])
    p.add_argument("--yes", action="store_true", help="launch whatever the estimated cost")
    p.set_defaults(func=_cmd_study)
    r = sub.add_parser("stage", help="one stage of the study pipeline (used by the Makefile)")
    r.add_argument("what", choices=["judge", "notebook", "index", "dataset", "summary"])
    r.add_argument("profile", nargs="?", default="quick")
    r.add_argument("--notebook", help="notebook file name, for 'notebook'")
    r.set_defaults(func=_cmd_report)

