"""Scaffold options of issue 23 (an offline agent that explores): the thinking rule and the
worked demonstration, what they send to the model and what the run header records."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI

from adakit.apparatus.agent import LaunchContext, Run, RunConfig
from adakit.apparatus.conditions import get_condition
from adakit.apparatus.tasks import make_task
from adakit.apparatus.world import World
from adakit.llm.models import ModelSpec, OpenAIBackend, RetryPolicy
from adakit.study.retry import changed_settings
from adakit.study.spec import RunSpec

KEY_VAR = "ADAKIT_TEST_KEY"
FINAL = (
    "<thinking>The `serve` function calls\n`helper` and adds one.</thinking>\n<stash_conclusion>\n"
    "<title>Flow</title>\n<content>serve calls helper</content>\n"
    "<proceed_to_finalize>true</proceed_to_finalize>\n</stash_conclusion>"
)


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_VAR, "sk-test-key")


@pytest.fixture()
def world(tmp_path: Path) -> World:
    root = tmp_path / "toy"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "app.py").write_text(textwrap.dedent('''\
        from pkg.util import helper


        def serve(request):
            return helper(request) + 1
        '''))
    (root / "pkg" / "util.py").write_text("def helper(x):\n    return x * 2\n")
    return World(root, name="toy")


def launch(world: World, fake: FakeOpenAI, path: Path, constrain: str = "grammar", **cfg: object):
    spec = ModelSpec(name="fake", kind="llm", base_url=fake.url, model_id="fake-model",
                     api_key_env=KEY_VAR, temperature=0.2, max_tokens=256, context_window=32000,
                     constrain=constrain)
    backend = OpenAIBackend(spec, retry=RetryPolicy(attempts=1, base=0.01, cap=0.05))
    ctx = LaunchContext(world=world, task=make_task("feature_tracing", "toy"),
                        condition=get_condition("natural"), backend=backend)
    cfg.setdefault("turn_bound", 3)
    return Run(ctx, RunConfig(run_id=path.stem, **cfg), path).execute()  # type: ignore[arg-type]


def _grammar(request: dict) -> str:
    return request.get("grammar") or (request.get("extra_body") or {}).get("grammar") or ""


# --------------------------------------------------------------------------- thinking rule


def test_free_thinking_reaches_the_grammar_and_the_header(world: World, tmp_path: Path) -> None:
    with FakeOpenAI([FINAL]) as fake:
        free = launch(world, fake, tmp_path / "free.jsonl", thinking_rule="free")
    assert "think ::= [^<A-Za-z]{0,8} [A-Za-z] [^<]{23,291}" in _grammar(fake.requests[0])
    assert free.header.scaffold["grammar"]["thinking_rule"] == "free"
    assert free.turns[0].thinking == "The `serve` function calls\n`helper` and adds one."
    with FakeOpenAI([FINAL]) as fake:
        prose = launch(world, fake, tmp_path / "prose.jsonl")
    assert "think ::= [A-Za-z] [^<\\n`]{23,299}" in _grammar(fake.requests[0])
    # the default leaves the header as it was before the option existed
    assert "thinking_rule" not in prose.header.scaffold["grammar"]
    assert set(prose.header.scaffold["grammar"]) == {"thinking_min_chars", "thinking_chars", "paths"}


def test_thinking_rule_is_checked_and_a_changed_rule_is_redone(world: World, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="thinking_rule must be one of prose, free"):
        RunConfig(run_id="x", thinking_rule="markdown")
    with FakeOpenAI([FINAL]) as fake:
        rf = launch(world, fake, tmp_path / "p.jsonl")

    def spec(**settings: object) -> RunSpec:
        return RunSpec("s", "fake", "toy", "feature_tracing", "natural", 0, 0,
                       tuple(sorted({"turn_bound": 3, **settings}.items())))

    assert changed_settings(rf.header, spec()) == ()
    assert changed_settings(rf.header, spec(thinking_rule="prose")) == ()
    assert changed_settings(rf.header, spec(thinking_rule="free")) == ("thinking_rule",)


# --------------------------------------------------------------------------- demonstration


def test_the_demonstration_shows_what_the_tools_really_print() -> None:
    import re

    from gbnf import compile_gbnf

    from adakit.apparatus.demonstration import OBSERVATION_LINES, demo_steps, demonstration_text
    from adakit.apparatus.protocol import tool_grammar
    from adakit.apparatus.tools import TOOL_SPECS
    from adakit.apparatus.world import load_manifest

    steps = demo_steps()
    text = demonstration_text("toy")
    assert [s.call.tool for s in steps][-1] == "stash_conclusion"
    assert all(s.error_type is None for s in steps), [(s.call.tool, s.observation) for s in steps]
    for s in steps[:-1]:  # each result appears as the tools printed it (cut to its first lines)
        head = "\n".join(s.observation.splitlines()[:OBSERVATION_LINES])
        assert head in text
    # every line range the conclusion cites was shown by an earlier result
    shown = "\n".join(s.observation for s in steps[:-1])
    cited = re.findall(r"(\d+)-(\d+)\)", steps[-1].call.params["content"])
    assert len(cited) == 4
    for a, b in cited:
        assert re.search(rf"(lines |L){a}-{b}\b", shown), (a, b)
    # the thoughts obey the default (prose) thinking rule, so the example never shows what
    # the grammar would refuse
    think = compile_gbnf(tool_grammar(TOOL_SPECS), "think")
    for s in steps:
        assert think.fullmatch(s.thinking), s.thinking
    # the toy repository is none of the study's worlds
    assert "tally" not in load_manifest()
    assert demonstration_text("off") == ""
    with pytest.raises(ValueError, match="demonstration must be one of off, toy"):
        demonstration_text("long")


def test_the_demonstration_ends_the_system_prompt_and_is_recorded(world: World, tmp_path: Path) -> None:
    from adakit.apparatus.demonstration import demonstration_text

    with FakeOpenAI([FINAL]) as fake:
        demo = launch(world, fake, tmp_path / "demo.jsonl", demonstration="toy")
    system = fake.requests[0]["messages"][0]["content"]
    assert system.endswith(demonstration_text("toy"))
    assert system.index("# Repository: toy") < system.index("# A worked example")
    assert demo.header.scaffold["demonstration"] == "toy"
    assert demo.header.system_prompt == system
    with FakeOpenAI([FINAL]) as fake:
        plain = launch(world, fake, tmp_path / "plain.jsonl")
    assert "A worked example" not in fake.requests[0]["messages"][0]["content"]
    assert "demonstration" not in plain.header.scaffold  # headers without the aid stay as they were
    with pytest.raises(ValueError, match="demonstration must be one of off, toy"):
        RunConfig(run_id="x", demonstration="yes")

    def spec(**settings: object) -> RunSpec:
        return RunSpec("s", "fake", "toy", "feature_tracing", "natural", 0, 0,
                       tuple(sorted({"turn_bound": 3, **settings}.items())))

    assert changed_settings(plain.header, spec()) == ()
    assert changed_settings(plain.header, spec(demonstration="toy")) == ("demonstration",)
    assert changed_settings(demo.header, spec(demonstration="toy")) == ()
    assert changed_settings(demo.header, spec()) == ("demonstration",)


def test_a_redraw_note_is_a_setting_a_relaunch_compares(world: World, tmp_path: Path) -> None:
    with FakeOpenAI([FINAL]) as fake:
        plain = launch(world, fake, tmp_path / "plain.jsonl", redraw_repeats=2)
    with FakeOpenAI([FINAL]) as fake:
        noted = launch(world, fake, tmp_path / "noted.jsonl", redraw_repeats=2, redraw_note=True)

    def spec(**settings: object) -> RunSpec:
        return RunSpec("s", "fake", "toy", "feature_tracing", "natural", 0, 0,
                       tuple(sorted({"turn_bound": 3, "redraw_repeats": 2, **settings}.items())))

    assert changed_settings(plain.header, spec()) == ()
    assert changed_settings(plain.header, spec(redraw_note=True)) == ("redraw_note",)
    assert changed_settings(noted.header, spec(redraw_note=True)) == ()
    assert changed_settings(noted.header, spec()) == ("redraw_note",)
    # the window policy: a header without it had "pair"
    assert "window_drop" not in plain.header.scaffold
    assert changed_settings(plain.header, spec(window_drop="stable")) == ("window_drop",)
    with FakeOpenAI([FINAL]) as fake:
        stable = launch(world, fake, tmp_path / "stable.jsonl", redraw_repeats=2, window_drop="stable")
    assert stable.header.scaffold["window_drop"] == "stable"
    assert changed_settings(stable.header, spec(window_drop="stable")) == ()
    assert changed_settings(stable.header, spec()) == ("window_drop",)


# --------------------------------------------------------------------------- name hints


def test_name_hints_are_recorded_and_a_legacy_header_had_line(world: World, tmp_path: Path) -> None:
    from adakit.study.retry import LEGACY_SETTINGS, legacy_settings

    with FakeOpenAI([FINAL]) as fake:
        rf = launch(world, fake, tmp_path / "code.jsonl")
    assert rf.header.scaffold["name_hints"] == "code"
    with FakeOpenAI([FINAL]) as fake:
        legacy = launch(world, fake, tmp_path / "line.jsonl", name_hints="line")
    assert "name_hints" not in legacy.header.scaffold  # as headers were before the setting
    assert LEGACY_SETTINGS["name_hints"] == "line"
    # a replay restores it run by run, from each run's own header
    assert legacy_settings(legacy.header) == {"name_hints": "line"}
    assert legacy_settings(rf.header) == {}
    with pytest.raises(ValueError, match="name_hints must be one of code, line"):
        RunConfig(run_id="x", name_hints="words")

    def spec(**settings: object) -> RunSpec:
        return RunSpec("s", "fake", "toy", "feature_tracing", "natural", 0, 0,
                       tuple(sorted({"turn_bound": 3, **settings}.items())))

    assert changed_settings(rf.header, spec()) == ()
    assert changed_settings(rf.header, spec(name_hints="line")) == ("name_hints",)
    # a header without the key: compared only when the study names a value
    assert changed_settings(legacy.header, spec()) == ()
    assert changed_settings(legacy.header, spec(name_hints="line")) == ()
    assert changed_settings(legacy.header, spec(name_hints="code")) == ("name_hints",)


# --------------------------------------------------------------------------- suggest


def _peek(path: str, start: int, end: int) -> str:
    return (f"<thinking>Reading {path} from line {start} to see what it holds.</thinking>\n"
            f"<peek_code_region>\n<file_path>{path}</file_path>\n<start_line>{start}</start_line>\n"
            f"<end_line>{end}</end_line>\n</peek_code_region>")


def _big_world(tmp_path: Path) -> World:
    root = tmp_path / "big"
    (root / "pkg").mkdir(parents=True)
    (root / "lib").mkdir()
    (root / "pkg" / "app.py").write_text("".join(f"x{i} = {i}\n" for i in range(1, 61)))
    for name in ("a.py", "b.py", "c.py"):
        (root / "pkg" / name).write_text("def f():\n    return 1\n")
    (root / "lib" / "z.py").write_text("def g():\n    return 2\n")
    return World(root, name="big")


def test_a_repeat_under_suggest_is_refused_with_calls_not_made_yet(tmp_path: Path) -> None:
    world = _big_world(tmp_path)
    script = [_peek("pkg/app.py", 1, 10), _peek("pkg/app.py", 1, 10), FINAL]
    with FakeOpenAI(list(script)) as fake:
        rf = launch(world, fake, tmp_path / "suggest.jsonl", repeat_guard="suggest")
    assert rf.header.scaffold["repeat_guard"] == "suggest"
    t2 = rf.turns[1]
    assert t2.metrics.error_type == "repeated" and t2.metrics.ranges == []
    lines = t2.observation.splitlines()
    assert lines[0].startswith("Not run again: this call is exactly the one you made on turn 1")
    assert lines[1] == "Calls that would show you something new (not made yet in this session):"
    assert lines[2] == ("1. <peek_code_region><file_path>pkg/app.py</file_path><start_line>11</start_line>"
                        "<end_line>50</end_line></peek_code_region>")
    # outlines of files not opened yet, the repeated file's folder first, in the tree's order
    assert lines[3] == "2. <get_structural_overview><file_path>pkg/a.py</file_path></get_structural_overview>"
    assert lines[4] == "3. <get_structural_overview><file_path>pkg/b.py</file_path></get_structural_overview>"
    assert lines[5] == "This is mistake 1 of 3 in a row; at 3 the session ends."
    assert len(lines) == 6
    assert lines[2] in fake.requests[2]["messages"][-1]["content"]  # the model saw them
    with FakeOpenAI(list(script)) as fake:
        refuse = launch(world, fake, tmp_path / "refuse.jsonl", repeat_guard="refuse")
    assert "Calls that would show you something new" not in refuse.turns[1].observation
    assert refuse.turns[1].observation.splitlines() == [lines[0], lines[5]]


def test_suggested_calls_skip_what_the_run_made_or_opened(tmp_path: Path) -> None:
    from adakit.apparatus.suggest import next_calls
    from adakit.record import ToolCall

    world = _big_world(tmp_path)
    script = [_peek("pkg/app.py", 1, 60), _peek("pkg/a.py", 1, 2), _peek("lib/z.py", 1, 2), FINAL]
    with FakeOpenAI(list(script)) as fake:
        rf = launch(world, fake, tmp_path / "r.jsonl")
    repeated = rf.turns[0].call
    assert repeated is not None
    # app.py was read to its end: no read offered; a.py and z.py were opened: not offered
    assert next_calls(world, rf.turns, repeated) == [
        "<get_structural_overview><file_path>pkg/b.py</file_path></get_structural_overview>",
        "<get_structural_overview><file_path>pkg/c.py</file_path></get_structural_overview>",
    ]
    assert len(next_calls(world, rf.turns, repeated, k=1)) == 1
    # a call on a path the world refuses offers outlines only, never a read outside the world
    outside = ToolCall(tool="peek_code_region", params={"file_path": "../../etc/passwd",
                                                        "start_line": 1, "end_line": 5})
    offered = next_calls(world, rf.turns, outside)
    assert offered and all("get_structural_overview" in c for c in offered)
    assert all("passwd" not in c for c in offered)


def test_an_option_prompt_counts_in_the_digest_only_when_the_option_is_on() -> None:
    """Adding a template only one option shows leaves the digest of every run without the
    option as it was: the shipped reference runs keep theirs, so they still replay."""
    import json

    from adakit import config
    from adakit.apparatus.agent import scaffold_digest

    plain = scaffold_digest(RunConfig(run_id="r"))
    assert plain == scaffold_digest() == scaffold_digest(RunConfig(run_id="r", redraw_repeats=2))
    assert scaffold_digest(RunConfig(run_id="r", redraw_repeats=2, redraw_note=True)) != plain
    assert scaffold_digest(RunConfig(run_id="r", conclude_nudge=4)) != plain
    assert scaffold_digest(RunConfig(run_id="r", conclude_checkpoint=4)) != plain
    shipped = sorted(config.REFERENCE_RUNS.parent.parent.rglob("runs/*.jsonl"))
    if not shipped:
        pytest.skip("no reference runs shipped here")
    for path in shipped:
        scaffold = json.loads(path.read_text().split("\n", 1)[0])["scaffold"]
        cfg = RunConfig(run_id="r", redraw_repeats=scaffold.get("redraw_repeats", 0),
                        redraw_note=bool(scaffold.get("redraw_note")),
                        tool_format=scaffold.get("tool_format", "xml"),
                        conclude_nudge=scaffold.get("conclude_nudge", 0),
                        conclude_checkpoint=scaffold.get("conclude_checkpoint", 0),
                        checkpoint_turns=scaffold.get("checkpoint_turns", 0),
                        cognitive_streak=scaffold.get("cognitive_streak", 0))
        assert scaffold["prompts_sha256"] == scaffold_digest(cfg), path.name


# --------------------------------------------------------------------------- conclusion nudge


def test_the_conclusion_nudge_shows_from_the_nth_file_and_is_recorded(world: World, tmp_path: Path) -> None:
    """``conclude_nudge: 2``: after the second distinct file, every result asks whether what
    was read answers the task; a failed call's file does not count; all tools stay open."""
    replies = [_peek("pkg/app.py", 1, 5), _peek("pkg/nope.py", 1, 5), _peek("pkg/app.py", 2, 4),
               _peek("pkg/util.py", 1, 2), _peek("pkg/util.py", 1, 1), FINAL]
    with FakeOpenAI(replies) as fake:
        rf = launch(world, fake, tmp_path / "nudged.jsonl", conclude_nudge=2, turn_bound=8)
    assert rf.end.reason == "finalize"
    notes = [[i.text for i in t.injected if "answer the task" in i.text] for t in rf.turns]
    assert [len(n) for n in notes] == [0, 0, 0, 1, 1, 0]
    assert "looked at 2 files: `pkg/app.py`, `pkg/util.py`" in notes[3][0]
    assert "proceed_to_finalize=true" in notes[3][0]
    last = fake.requests[4]["messages"][-1]["content"]
    assert "looked at 2 files" in last
    assert fake.requests[4].get("grammar") == fake.requests[0].get("grammar")  # nothing closed
    assert rf.header.scaffold["conclude_nudge"] == 2
    with FakeOpenAI([FINAL]) as fake:
        plain = launch(world, fake, tmp_path / "plain.jsonl")
    assert "conclude_nudge" not in plain.header.scaffold
    with pytest.raises(ValueError, match="conclude_nudge must be 0 \\(off\\) or more"):
        RunConfig(run_id="x", conclude_nudge=-1)


def test_a_conclusion_nudge_names_at_most_eight_files() -> None:
    from adakit.apparatus.agent import conclude_note

    note = conclude_note([f"f{k}.py" for k in range(11)])
    assert "looked at 11 files" in note and "`f7.py` and 3 more" in note and "f8.py" not in note


def test_a_conclusion_nudge_is_a_setting_a_relaunch_compares(world: World, tmp_path: Path) -> None:
    with FakeOpenAI([FINAL]) as fake:
        nudged = launch(world, fake, tmp_path / "n.jsonl", conclude_nudge=3)

    def spec(**settings: object) -> RunSpec:
        return RunSpec("s", "fake", "toy", "feature_tracing", "natural", 0, 0,
                       tuple(sorted({"turn_bound": 3, **settings}.items())))

    assert changed_settings(nudged.header, spec(conclude_nudge=3)) == ()
    assert changed_settings(nudged.header, spec()) == ("conclude_nudge",)
    assert changed_settings(nudged.header, spec(conclude_nudge=3, history_thinking="drop")) == (
        "history_thinking",)


# --------------------------------------------------------------------------- history thinking


def test_dropped_history_thinking_leaves_the_calls_and_the_record_whole(world: World, tmp_path: Path) -> None:
    """``history_thinking: drop``: the next request holds the earlier reply without its
    thinking; the record keeps the thought; ``keep`` sends the reply as written."""
    replies = [_peek("pkg/app.py", 1, 5), FINAL]
    with FakeOpenAI(replies) as fake:
        rf = launch(world, fake, tmp_path / "dropped.jsonl", history_thinking="drop")
    earlier = [m["content"] for m in fake.requests[1]["messages"] if m["role"] == "assistant"]
    assert len(earlier) == 1 and "<thinking>" not in earlier[0]
    assert earlier[0].startswith("<peek_code_region>") and "pkg/app.py" in earlier[0]
    assert rf.turns[0].thinking.startswith("Reading pkg/app.py")
    assert rf.header.scaffold["history_thinking"] == "drop"
    with FakeOpenAI(list(replies)) as fake:
        kept = launch(world, fake, tmp_path / "kept.jsonl")
    earlier = [m["content"] for m in fake.requests[1]["messages"] if m["role"] == "assistant"]
    assert "<thinking>Reading pkg/app.py" in earlier[0]
    assert "history_thinking" not in kept.header.scaffold
    with pytest.raises(ValueError, match="history_thinking must be one of keep, drop"):
        RunConfig(run_id="x", history_thinking="trim")


def test_a_reply_of_thinking_alone_stays_whole_in_the_conversation() -> None:
    from adakit.apparatus.agent import without_thinking

    assert without_thinking("<thinking>only this</thinking>") == "<thinking>only this</thinking>"
    assert without_thinking("<thinking>a</thinking>\n<x>1</x>") == "<x>1</x>"


# --------------------------------------------------------------------------- checkpoints


STASH = (
    "<thinking>So far: serve calls helper, which doubles its input.</thinking>\n<stash_conclusion>\n"
    "<title>So far</title>\n<content>serve calls helper</content>\n"
    "<proceed_to_finalize>false</proceed_to_finalize>\n</stash_conclusion>"
)


def test_a_checkpoint_offers_only_a_conclusion_and_leaves_finalizing_to_the_model(
        world: World, tmp_path: Path) -> None:
    """``conclude_checkpoint: 2``: the turn after the second distinct file may only stash a
    conclusion; the model's false goes on (an interim conclusion), its later true finalizes."""
    replies = [_peek("pkg/app.py", 1, 5), _peek("pkg/util.py", 1, 2), STASH,
               _peek("pkg/app.py", 2, 3), FINAL]
    with FakeOpenAI(replies) as fake:
        rf = launch(world, fake, tmp_path / "cp.jsonl", conclude_checkpoint=2, turn_bound=8)
    grammars = [_grammar(r) for r in fake.requests]
    assert grammars[0] == grammars[1] == grammars[3] == grammars[4] != grammars[2]
    assert "stash_conclusion" in grammars[2] and "peek_code_region" not in grammars[2]
    notes = [[i.text for i in t.injected if i.text.startswith("Checkpoint:")] for t in rf.turns]
    assert [len(n) for n in notes] == [0, 1, 0, 0, 0]  # one note: a second needs 4 files
    assert "looked at 2 files: `pkg/app.py`, `pkg/util.py`" in notes[1][0]
    assert rf.turns[2].call.tool == "stash_conclusion" and not rf.turns[2].metrics.finalize
    assert rf.end.reason == "finalize" and len(rf.turns) == 5
    assert rf.header.scaffold["conclude_checkpoint"] == 2
    from adakit.variance.behaviour import finalized_at_checkpoint

    assert not finalized_at_checkpoint(rf)  # it finalized two turns after its checkpoint
    with FakeOpenAI([_peek("pkg/app.py", 1, 5), _peek("pkg/util.py", 1, 2), FINAL]) as fake:
        at = launch(world, fake, tmp_path / "at.jsonl", conclude_checkpoint=2, turn_bound=8)
    assert at.end.reason == "finalize" and finalized_at_checkpoint(at)
    with pytest.raises(ValueError, match="conclude_checkpoint must be 0 \\(off\\) or more"):
        RunConfig(run_id="x", conclude_checkpoint=-2)


def test_a_run_resumed_before_its_checkpoint_turn_takes_it(world: World, tmp_path: Path) -> None:
    """A run stopped right after the checkpoint note resumes into the checkpoint turn; the last
    turn before the bound carries no note (no turn is left to take it)."""
    path = tmp_path / "cp.jsonl"
    with FakeOpenAI([_peek("pkg/app.py", 1, 5), _peek("pkg/util.py", 1, 2)]) as fake:
        first = launch(world, fake, path, conclude_checkpoint=2, turn_bound=5)
    assert first.end.reason == "model_error" and len(first.turns) == 2
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:-1]) + "\n")  # as if stopped before the end record
    with FakeOpenAI([FINAL]) as fake:
        rf = launch(world, fake, path, conclude_checkpoint=2, turn_bound=5)
    assert "peek_code_region" not in _grammar(fake.requests[0])
    assert rf.end.reason == "finalize"
    with FakeOpenAI([_peek("pkg/app.py", 1, 5), _peek("pkg/util.py", 1, 2)]) as fake:
        last = launch(world, fake, tmp_path / "bound.jsonl", conclude_checkpoint=2, turn_bound=2)
    assert not any(i.text.startswith("Checkpoint:") for t in last.turns for i in t.injected)


def _bookmark(line: int) -> str:
    return (f"<thinking>Line {line} of `pkg/app.py` may matter later.</thinking>\n<bookmark>\n"
            f"<file_path>pkg/app.py</file_path>\n<line_number>{line}</line_number>\n"
            f"<note>look again at line {line}</note>\n</bookmark>")


def test_a_checkpoint_also_comes_after_so_many_turns(world: World, tmp_path: Path) -> None:
    """``checkpoint_turns: 3``: a run that only bookmarks (no file looked at) still gets a
    checkpoint after three turns and another three turns after that; with
    ``conclude_checkpoint: 2`` beside it, the file count starts again at each checkpoint."""
    replies = [_bookmark(1), _bookmark(2), _bookmark(3), STASH, _bookmark(4), _bookmark(5), FINAL]
    with FakeOpenAI(replies) as fake:
        rf = launch(world, fake, tmp_path / "ct.jsonl", checkpoint_turns=3, turn_bound=12)
    notes = [[i.text for i in t.injected if i.text.startswith("Checkpoint:")] for t in rf.turns]
    assert [len(n) for n in notes] == [0, 0, 1, 0, 0, 1, 0]  # turns 4 and 7 are checkpoints
    assert "looked at 0 files: none yet" in notes[2][0]
    grammars = [_grammar(r) for r in fake.requests]
    assert "peek_code_region" not in grammars[3] and "peek_code_region" not in grammars[6]
    assert "peek_code_region" in grammars[4]
    assert rf.end.reason == "finalize" and rf.header.scaffold["checkpoint_turns"] == 3
    replies = [_peek("pkg/app.py", 1, 5), _peek("pkg/util.py", 1, 2), STASH, _bookmark(1),
               _peek("pkg/app.py", 2, 3), _bookmark(2), FINAL]
    with FakeOpenAI(replies) as fake:
        both = launch(world, fake, tmp_path / "both.jsonl", conclude_checkpoint=2, checkpoint_turns=3,
                      turn_bound=12)
    notes = [[i.text for i in t.injected if i.text.startswith("Checkpoint:")] for t in both.turns]
    # files at turn 2 (2 files), then three turns after that checkpoint's note (turn 5), though
    # no third file was looked at
    assert [len(n) for n in notes] == [0, 1, 0, 0, 1, 0, 0]
    with pytest.raises(ValueError, match="checkpoint_turns must be 0 \\(off\\) or more"):
        RunConfig(run_id="x", checkpoint_turns=-1)


def test_a_streak_of_notes_is_followed_by_a_turn_that_may_only_navigate(
        world: World, tmp_path: Path) -> None:
    """``cognitive_streak: 2``: after two bookmarks in a row the next reply may only call a
    navigation tool (its grammar offers no bookmark), the turn after that all tools again; a
    checkpoint due on the same turn comes first."""
    from adakit.apparatus.agent import cognitive_streak_of

    replies = [_bookmark(1), _bookmark(2), _peek("pkg/app.py", 1, 5), _bookmark(3), FINAL]
    with FakeOpenAI(replies) as fake:
        rf = launch(world, fake, tmp_path / "cs.jsonl", cognitive_streak=2, turn_bound=8)
    notes = [[i.text for i in t.injected if i.text.startswith("Back to the code")] for t in rf.turns]
    assert [len(n) for n in notes] == [0, 1, 0, 0, 0]
    assert "your last 2 calls were notes" in notes[1][0]
    grammars = [_grammar(r) for r in fake.requests]
    assert "bookmark" not in grammars[2] and "stash_conclusion" not in grammars[2]
    assert "peek_code_region" in grammars[2] and "explore_code" in grammars[2]
    assert grammars[0] == grammars[1] == grammars[3] and "bookmark" in grammars[3]
    assert rf.header.scaffold["cognitive_streak"] == 2 and rf.end.reason == "finalize"
    assert cognitive_streak_of(rf.turns[:2]) == 2 and cognitive_streak_of(rf.turns[:3]) == 0
    with FakeOpenAI([_bookmark(1), _bookmark(2), FINAL]) as fake:
        both = launch(world, fake, tmp_path / "both.jsonl", cognitive_streak=2, checkpoint_turns=2,
                      turn_bound=8)
    texts = [i.text for i in both.turns[1].injected]
    assert any(t.startswith("Checkpoint:") for t in texts)
    assert not any(t.startswith("Back to the code") for t in texts)
    assert "peek_code_region" not in _grammar(fake.requests[2])  # the checkpoint's turn
    with pytest.raises(ValueError, match="cognitive_streak must be 0 \\(off\\) or more"):
        RunConfig(run_id="x", cognitive_streak=-1)
