"""One short scripted run through the real Toolbox on the flask world, followed from the
record through the reads table into lens 0, lens 2 and lens 4. Every expected value is worked
out by hand below (line numbers of the pinned flask sdist)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from adakit.apparatus.agent import LaunchContext, Run, RunConfig
from adakit.apparatus.conditions import get_condition
from adakit.apparatus.tasks import make_task
from adakit.lenses import footprint as fp
from adakit.lenses import policy, surface
from adakit.llm.models import Completion
from adakit.record import load_corpus

pytestmark = pytest.mark.slow

APP, SCAFFOLD = "src/flask/app.py", "src/flask/sansio/scaffold.py"


def call(tool: str, **params: Any) -> str:
    body = "".join(f"<{k}>{v}</{k}>" for k, v in params.items())
    return f"<thinking>next step</thinking>\n<{tool}>{body}</{tool}>"


SCRIPT = [
    call("get_structural_overview", file_path=APP),  # 1 OVW: a visit, no line shown
    call("peek_code_region", file_path=APP, start_line=1, end_line=20),  # 2 PKR: 20 lines
    call("peek_code_region", file_path=APP, start_line=21, end_line=120),  # 3 PKR: clipped
    call("bookmark", file_path=APP, line_number=500, note="where Flask starts"),  # 4 BKM: 1 line
    call("get_structural_overview", file_path=SCAFFOLD),  # 5 OVW: a second file, no line
    call("create_memory", memory_title="app", memory_content="Flask subclasses App",
         confidence_level="high"),  # 6 MEM
    call("stash_conclusion", title="Flask", content="Flask builds on App and Scaffold.",
         proceed_to_finalize="true"),  # 7 CON, closing
]


class Scripted:
    """A backend that replies with the script, one reply per turn."""

    spec = SimpleNamespace(name="scripted-e2e", kind="baseline", mode="xml", constrain="none",
                           context_window=None, max_tokens=None, model_id="")

    def __init__(self, replies: list[str]) -> None:
        self.replies = list(replies)

    def complete(self, messages: list[dict[str, Any]], **kwargs: Any) -> Completion:
        return Completion(text=self.replies.pop(0), tokens_in=10, tokens_out=5, latency_s=0.01)


@pytest.fixture(scope="module")
def corpus(flask_world, tmp_path_factory):
    folder: Path = tmp_path_factory.mktemp("e2e")
    ctx = LaunchContext(world=flask_world, task=make_task("architecture_analysis", "flask"),
                        condition=get_condition("natural"), backend=Scripted(SCRIPT))
    # observations over 3000 characters are cut to whole lines: turn 3's 100 lines are not
    cfg = RunConfig(run_id="e2e", turn_bound=10, max_observation_chars=3000)
    rf = Run(ctx, cfg, folder / "e2e.jsonl").execute()
    assert rf.end.reason == "finalize" and len(rf.turns) == 7
    return load_corpus(folder, cache=False)


CUT = 88  # the last line of app.py 21-120 that fits in 3000 characters (read off the record)


def test_the_record_keeps_only_the_lines_shown(corpus):
    from adakit.record import read_run

    rf = read_run(corpus.runs.iloc[0]["path"])
    shown = rf.turns[2].observation.splitlines()
    assert shown[-1] == "[... output cut at 3000 characters; ask for a smaller range or block.]"
    assert shown[-2].lstrip().startswith(f"{CUT}: ")  # lines 89-120 never reached the model
    t = corpus.turns.set_index("turn")
    assert t["tool"].tolist() == ["OVW", "PKR", "PKR", "BKM", "OVW", "MEM", "CON"]
    assert t["lines_viewed"].tolist() == [0, 20, CUT - 20, 1, 0, 0, 0]
    assert (t.loc[3, "start_line"], t.loc[3, "end_line"]) == (21, CUT)
    reads = corpus.reads[["turn", "file", "start_line", "end_line", "n_lines"]]
    assert reads.values.tolist() == [[2, APP, 1, 20, 20], [3, APP, 21, CUT, CUT - 20],
                                     [4, APP, 500, 500, 1]]  # no row for OVW's zero lines


def test_lens0_lines_viewed_and_files_visited(corpus):
    row = surface.run_surface(corpus).iloc[0]
    # app.py: 1-20, 21-CUT and 500 -> CUT + 1 distinct lines, no repeats
    assert (row["loc_viewed"], row["lines_shown"]) == (CUT + 1, CUT + 1)
    assert row["files_visited"] == 2  # app.py and scaffold.py (outlined only)
    assert (row["OVW"], row["PKR"], row["BKM"], row["MEM"], row["CON"]) == (2, 2, 1, 1, 1)


def test_lens2_tags(corpus):
    tags = policy.tag_transitions(corpus.turns)
    assert tags["tag"].astype(str).tolist() == [
        "zoom in",  # OVW -> PKR
        "close read",  # PKR 1-20 -> PKR 21-CUT: starts right after the previous range
        "dump",  # PKR -> BKM
        "resume",  # BKM -> OVW
        "dump",  # OVW -> MEM
        "cognitive streak",  # MEM -> CON (closing)
    ]


def test_lens4_densities_and_visits_agree_with_lens0(corpus):
    d = fp.trace_density(corpus.reads, corpus.runs).set_index("file")
    assert list(d.index) == [APP]  # scaffold.py showed no line
    assert d.loc[APP, "lines_shown"] == CUT + 1 and d.loc[APP, "density"] == CUT + 1
    assert d.loc[APP, "distinct_lines"] == CUT + 1 and d.loc[APP, "reads"] == 3
    bins = fp.region_density(corpus.reads, corpus.runs, bin_lines=50).set_index("region")
    assert bins.loc["L1-50", "lines_shown"] == 50 and bins.loc["L51-100", "lines_shown"] == CUT - 50
    assert bins.loc["L451-500", "lines_shown"] == 1
    visits = fp.file_visits(corpus.turns, corpus.runs).set_index("file")
    assert visits["visits"].to_dict() == {APP: 4, SCAFFOLD: 1}
    assert len(visits) == surface.run_surface(corpus).iloc[0]["files_visited"]
    anchors = fp.anchor_files(corpus.reads, corpus.runs, top=None, turns=corpus.turns)
    assert anchors["file"].tolist() == [APP, SCAFFOLD]
    assert anchors["lines_shown"].tolist() == [CUT + 1, 0]
