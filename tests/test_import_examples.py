"""The bundled example trajectories (adakit.importers.examples) that notebook 40 reads: every
format imports, again changes nothing, and the run with subagents is the one shown."""

from __future__ import annotations

import pandas as pd
import pytest

from adakit.importers import examples
from adakit.importers.corpora import showcase_run
from adakit.record import load_corpus


def test_every_format_has_examples_that_import(tmp_path):
    first = dict(examples.import_examples(tmp_path, world=None))
    assert list(first) == list(examples.EXAMPLES)
    assert {f: len(r.imported) for f, r in first.items()} == {
        "swe-agent": 2, "mini-swe-agent": 2, "openhands": 2, "generic": 1, "claude-code": 3,
        "codex": 2, "inspect": 1, "atif": 2, "aider": 3}
    # skipped on purpose: a subagent's own file (read with its session), a damaged Inspect
    # sample, an aider session without a reply
    assert sum(r.counts()["subagent file"] for r in first.values()) == 1
    c = load_corpus(tmp_path, cache=False)
    assert set(c.runs["agent"]) == {"swe-agent", "mini-swe-agent", "openhands", "my-agent",
                                    "claude-code", "codex", "inspect_ai", "terminus-2", "aider"}
    # without a world each aider history is named after the folder it sits in
    assert set(c.runs.loc[c.runs["agent"] == "aider", "world"]) == {"v0.40", "v0.86"}
    chosen = showcase_run(c.runs, c.turns)
    assert "4c2e9a71" in chosen and c.turns.loc[c.turns["run_id"] == chosen,
                                                 "sidechain"].notna().sum() == 5
    again = examples.import_examples(tmp_path, ["codex", "aider"], world=None)
    assert [len(r.imported) for _, r in again] == [0, 0]


def test_examples_on_a_world_keep_the_one_in_its_own_repository(tmp_path, flask_world):
    [(_, rep)] = examples.import_examples(tmp_path, ["aider"], world="flask")
    assert len(rep.imported) == 3
    runs = load_corpus(tmp_path, cache=False).runs
    assert sorted(runs["world"]) == ["flask", "v0.86", "v0.86"]


def test_unknown_formats_and_missing_examples_are_one_line_errors(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="no bundled examples of 'cursor'; there are: swe-agent"):
        examples.import_examples(tmp_path, ["cursor"])
    with pytest.raises(ValueError, match="no bundled examples"):
        examples.example_paths("cursor")
    assert all(p.exists() for p in examples.example_paths("claude-code"))
    monkeypatch.setattr(examples, "SOURCE", tmp_path / "wheel")
    with pytest.raises(FileNotFoundError, match="the bundled examples are not here"):
        examples.import_examples(tmp_path / "out", ["atif"])
    ada = pd.DataFrame({"run_id": ["r"], "agent": ["ada"], "n_turns": [3]})
    with pytest.raises(ValueError, match="no imported run"):
        showcase_run(ada, pd.DataFrame({"run_id": ["r"], "turn": [1]}))
