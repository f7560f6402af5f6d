"""Lens 4 (codebase footprint): densities, regions, differences, anchors, corridors and routes
against hand-computed expectations; maps return Figures and save nothing."""

from __future__ import annotations

import matplotlib.figure
import matplotlib.pyplot as plt
import pandas as pd
import pytest
from matplotlib.figure import Figure

from adakit.apparatus.world import World
from adakit.lenses import footprint as fp

READ_COLS = ["run_id", "turn", "file", "start_line", "end_line"]


@pytest.fixture
def reads():
    rows = [
        ("r1", 1, "a.py", 1, 10),
        ("r1", 2, "a.py", 5, 14),
        ("r1", 4, "b.py", 1, 5),
        ("r2", 1, "a.py", 1, 10),
        ("r3", 3, "c.py", 100, 109),
    ]
    return pd.DataFrame(rows, columns=READ_COLS)


@pytest.fixture
def runs():
    return pd.DataFrame({
        "run_id": ["r1", "r2", "r3", "r4"],  # r4 read nothing
        "model": ["m1", "m1", "m2", "m2"],
        "condition": ["natural", "budget_pressure", "natural", "budget_pressure"],
        "world": ["w", "w", "w", "w"],
    })


def test_trace_density_by_hand(reads, runs):
    d = fp.trace_density(reads, runs).set_index("file")
    # a.py: 10 + 10 + 10 lines shown, lines 1-14 distinct, 4 runs in the corpus
    assert d.loc["a.py", "lines_shown"] == 30
    assert d.loc["a.py", "distinct_lines"] == 14
    assert d.loc["a.py", "reads"] == 3 and d.loc["a.py", "runs_visiting"] == 2
    assert d.loc["a.py", "density"] == pytest.approx(7.5)
    assert d.loc["b.py", "density"] == pytest.approx(1.25)
    assert d.loc["c.py", "max_line"] == 109
    assert list(d.index) == ["a.py", "c.py", "b.py"]  # densest first
    # without the runs table only runs that read something count
    assert fp.trace_density(reads).set_index("file").loc["a.py", "density"] == pytest.approx(10)


def test_trace_density_by_group(reads, runs):
    d = fp.trace_density(reads, runs, by="model").set_index(["model", "file"])
    assert d.loc[("m1", "a.py"), "density"] == pytest.approx(15.0)
    assert d.loc[("m1", "b.py"), "density"] == pytest.approx(2.5)
    assert d.loc[("m2", "c.py"), "density"] == pytest.approx(5.0)  # r4 counts in m2
    assert d.loc[("m2", "c.py"), "n_runs"] == 2
    with pytest.raises(ValueError, match="runs table"):
        fp.trace_density(reads, by="model")


def test_distinct_lines_merge_overlaps_and_gaps():
    r = pd.DataFrame([("r", 1, "x", 1, 5), ("r", 2, "x", 3, 8), ("r", 3, "x", 20, 21),
                      ("r", 4, "x", 9, 9), ("q", 1, "x", 4, 30)], columns=READ_COLS)
    d = fp.trace_density(r, by="run_id").set_index("run_id")
    assert d.loc["r", "distinct_lines"] == 9 + 2  # 1-9 and 20-21
    assert d.loc["r", "lines_shown"] == 5 + 6 + 2 + 1
    assert d.loc["q", "distinct_lines"] == 27
    assert fp.trace_density(r).loc[0, "distinct_lines"] == 30


def test_bad_reads_are_refused(reads):
    bad = reads.copy()
    bad.loc[0, "end_line"] = 0
    with pytest.raises(ValueError, match="end before they start"):
        fp.trace_density(bad)
    with pytest.raises(ValueError, match="start_line"):
        fp.trace_density(reads.drop(columns="start_line"))


def test_region_density_bins_by_hand(reads, runs):
    d = fp.region_density(reads, runs, bin_lines=10).set_index(["file", "region"])
    # a.py 1-10 twice and 5-14 once: 10 + 6 + 10 lines in L1-10, 4 in L11-20
    assert d.loc[("a.py", "L1-10"), "lines_shown"] == 26
    assert d.loc[("a.py", "L11-20"), "lines_shown"] == 4
    assert d.loc[("c.py", "L91-100"), "lines_shown"] == 1
    assert d.loc[("c.py", "L101-110"), "lines_shown"] == 9
    assert d.loc[("a.py", "L1-10"), "density"] == pytest.approx(26 / 4)
    assert d["lines_shown"].sum() == 45  # every shown line lands in exactly one bin
    with pytest.raises(ValueError, match="bin_lines"):
        fp.region_density(reads, bin_lines=0)


def test_region_density_named_regions(reads):
    regions = pd.DataFrame({"file": ["a.py", "a.py", "b.py"], "region": ["f", "g", "h"],
                            "start_line": [1, 8, 50], "end_line": [7, 20, 60]})
    d = fp.region_density(reads, regions=regions).set_index("region")
    assert d.loc["f", "lines_shown"] == 7 + 3 + 7
    assert d.loc["g", "lines_shown"] == 3 + 7 + 3
    assert "h" not in d.index  # b.py lines 1-5 miss h


def test_density_difference_by_hand(reads, runs):
    diff = fp.density_difference(reads, runs, {"model": "m1"}, {"model": "m2"}).set_index("file")
    assert diff.loc["a.py", "diff"] == pytest.approx(15.0)
    assert diff.loc["b.py", "diff"] == pytest.approx(2.5)
    assert diff.loc["c.py", "diff"] == pytest.approx(-5.0)
    assert diff.loc["c.py", "density_a"] == 0.0
    assert list(diff.index) == ["a.py", "b.py", "c.py"]
    same = fp.density_difference(reads, runs, {"condition": ["natural", "budget_pressure"]},
                                 {"world": "w"})
    assert (same["diff"] == 0).all()
    with pytest.raises(ValueError, match="no runs"):
        fp.density_difference(reads, runs, {"model": "m9"}, {"model": "m1"})


def test_compare_pairs_by_hand(reads, runs):
    out = fp.compare_pairs(reads, runs.iloc[::-1], {"model": [], "condition": ["natural",
                                                                     "budget_pressure"]},
                           hold={})  # pooled over tasks (the runs have none)
    assert list(out) == ["model", "condition"]
    models = out["model"]
    assert (models.a, models.b, models.skipped) == ("m1", "m2", "")  # display order, not row order
    assert models.difference.set_index("file")["diff"].to_dict() == {
        "a.py": 15.0, "b.py": 2.5, "c.py": -5.0}
    assert models.summary() == "m1 (2 runs) minus m2 (2 runs), 3 files"
    cond = out["condition"]
    # natural r1 + r3: a.py 20, b.py 5, c.py 10 over 2 runs; budget r2 + r4: a.py 10 over 2
    assert cond.difference.set_index("file")["diff"].to_dict() == {
        "a.py": 5.0, "b.py": 2.5, "c.py": 5.0}
    assert cond.labels == ("Natural", "Budget Pres.")
    assert cond.summary() == "Natural (2 runs) minus Budget Pres. (2 runs), 3 files"
    inside = fp.compare_pairs(reads, runs, {"condition": []}, within={"model": "m1"})["condition"]
    # within m1: natural is r1 (a.py 20, b.py 5), budget r2 (a.py 10); one run each
    assert (inside.a, inside.b) == ("natural", "budget_pressure")
    assert inside.difference.set_index("file")["diff"].to_dict() == {"a.py": 10.0, "b.py": 5.0}
    assert inside.difference["n_runs_a"].tolist() == [1, 1]


def test_fig10b_compares_models_on_the_same_task(reads, runs):
    """m1 ran task t1 (r1) and t2 (r2); m2 ran t1 (r3, r4). Only t1 has both models, so the
    model contrast holds t1: m1's r1 (a.py 20, b.py 5) minus m2's r3 + r4 (c.py 10 over 2)."""
    tasks = runs.assign(task=["t1", "t2", "t1", "t1"])
    out = fp.compare_pairs(reads, tasks, {"model": [], "condition": []})
    models = out["model"]
    assert models.scope == {"task": "t1"}
    assert models.difference.set_index("file")["diff"].to_dict() == {
        "a.py": 20.0, "b.py": 5.0, "c.py": -5.0}
    assert models.summary() == "m1 (1 runs) minus m2 (2 runs), 3 files (task t1)"
    assert out["condition"].scope == {}  # a condition contrast pools tasks
    # notebook 14's compare_models_condition: the condition held as well (natural: r1 vs r3)
    natural = fp.compare_pairs(reads, tasks, {"model": []},
                               hold={"model": {"task": None, "condition": "natural"}})["model"]
    assert natural.scope == {"task": "t1", "condition": "natural"}
    assert natural.difference.set_index("file")["diff"].to_dict() == {
        "a.py": 20.0, "b.py": 5.0, "c.py": -10.0}
    given = fp.compare_pairs(reads, tasks, {"model": []}, hold={"model": {"task": "t2"}})
    assert "have no runs with {'task': 't2'}" in given["model"].skipped
    apart = fp.compare_pairs(reads, runs.assign(task=["t1", "t1", "t2", "t2"]), {"model": []})
    assert apart["model"].skipped == "no task with runs of both 'm1' and 'm2'"


def test_fig10a_overview_is_cumulative_by_default(reads, runs):
    files = pd.DataFrame({"file": ["a.py", "b.py", "c.py"], "loc": [20, 10, 120]})
    density = fp.trace_density(reads, runs)
    fig = fp.plot_overview_map(files, density, clip_quantile=1.0)
    bar = fig.axes[-1]
    assert bar.get_ylabel() == "Cumulative trace density (lines shown, all runs)"
    assert bar.get_ylim()[1] == pytest.approx(30.0)  # a.py: 30 lines shown over all runs
    per_run = fp.plot_overview_map(files, density, values="per_run", clip_quantile=1.0)
    assert per_run.axes[-1].get_ylabel() == "Trace density (lines shown per run)"
    assert per_run.axes[-1].get_ylim()[1] == pytest.approx(7.5)
    with pytest.raises(ValueError, match="values must be one of"):
        fp.plot_overview_map(files, density, values="total")
    plt.close("all")


def test_compare_pairs_skips_what_cannot_be_compared(reads, runs):
    runs_t = runs.assign(task="t1")
    out = fp.compare_pairs(reads, runs_t, {"model": ["m1", "m9"], "condition": ["natural"]},
                           within={"model": "m1"})
    assert out["model"].difference is None
    assert "['m9'] not among the runs within {'model': 'm1'}" in out["model"].skipped
    assert out["model"].summary().startswith("skipped (")
    assert "give two values of condition as [A, B]" in out["condition"].skipped
    alone = fp.compare_pairs(reads, runs_t, {"model": []}, within={"condition": "natural",
                                                                  "model": "m2"})["model"]
    assert alone.skipped == ("need two values of model, have ['m2'] within "
                             "{'condition': 'natural', 'model': 'm2'}")
    same = fp.compare_pairs(reads, runs_t, {"model": ["m2", "m2"]})["model"]
    assert same.difference is None and same.skipped == "A and B are both 'm2'"
    with pytest.raises(ValueError, match="task"):
        fp.compare_pairs(reads, runs, {"task": []})


@pytest.fixture
def route_runs():
    rows = [("r1", "m1", "t1", "natural", "w"), ("r2", "m1", "t1", "budget_pressure", "w"),
            ("r3", "m1", "t1", "natural", "w"), ("r4", "m2", "t2", "natural", "w"),
            ("r5", "m1", "t1", "prior_suppression", "w"), ("r6", "m1", "t1", "combined", "w"),
            ("r7", "m2", "t1", "natural", "v")]
    return pd.DataFrame(rows, columns=["run_id", "model", "task", "condition", "world"])


def test_choose_route_runs(route_runs):
    # m1 on t1 has most runs in w: one run (first by id) per condition, in paper order
    assert fp.choose_route_runs(route_runs, world="w")["run_id"].tolist() == ["r1", "r5", "r2"]
    assert fp.choose_route_runs(route_runs, max_runs=4)["run_id"].tolist() == [
        "r1", "r5", "r2", "r6"]
    assert fp.choose_route_runs(route_runs, world="v")["run_id"].tolist() == ["r7"]
    assert fp.choose_route_runs(route_runs, ["r4", "r2"])["run_id"].tolist() == ["r2", "r4"]
    with pytest.raises(ValueError, match=r"not in the corpus: \['r9'\]"):
        fp.choose_route_runs(route_runs, ["r1", "r9"])
    with pytest.raises(ValueError, match="no runs in world 'nowhere'"):
        fp.choose_route_runs(route_runs, world="nowhere")


def test_labelled_routes(turns):
    chosen = pd.DataFrame({"run_id": ["r1", "r2"], "model": ["m1", "m1"],
                           "condition": ["natural", "natural"]})
    routes = fp.labelled_routes(turns, chosen)
    assert list(routes) == ["Natural · m1", "r2"]  # a repeated label falls back to the run id
    assert routes["Natural · m1"].equals(fp.run_route(turns, "r1"))
    assert routes["r2"]["file"].tolist() == ["a.py", "b.py", "a.py", "b.py"]


def test_anchor_files_by_hand(reads, runs):
    a = fp.anchor_files(reads, runs, top=None, rank_by="lines")
    # natural: a 10/run, c 5, b 2.5 -> ranks 1, 2, 3; budget: only a (rank 1), b and c rank 2
    assert list(a["file"]) == ["a.py", "c.py", "b.py"]
    assert list(a["mean_rank"]) == pytest.approx([1.0, 2.0, 2.5])
    assert list(a["ranked_in"]) == [2, 1, 1] and set(a["groups"]) == {2}
    assert list(a["position"]) == [1, 2, 3]
    assert len(fp.anchor_files(reads, runs, top=2, rank_by="lines")) == 2
    with pytest.raises(ValueError, match="needs the turns table"):
        fp.anchor_files(reads, runs)


def test_anchor_ties_go_to_more_lines(runs):
    r = pd.DataFrame([("r1", 1, "x.py", 1, 10), ("r3", 1, "y.py", 1, 30),
                      ("r2", 1, "y.py", 1, 10), ("r4", 1, "x.py", 1, 20)], columns=READ_COLS)
    a = fp.anchor_files(r, runs, top=None, rank_by="lines")
    # natural: y (30) rank 1, x (10) rank 2; budget: x (20) 1, y (10) 2 -> both 1.5
    assert list(a["mean_rank"]) == [1.5, 1.5]
    assert list(a["file"]) == ["y.py", "x.py"]  # 40 lines shown beat 30


@pytest.fixture
def turns():
    rows = [
        ("r1", 1, "PKR", "a.py", None, 10),
        ("r1", 2, "PKR", "a.py", None, 10),
        ("r1", 3, "MEM", None, None, 0),
        ("r1", 4, "PKR", "b.py", None, 5),
        ("r1", 5, "OVW", "a.py", None, 7),
        ("r1", 6, "PKR", "b.py", "tool_error", 0),
        ("r1", 7, "EXP", "c.py", None, 12),
        ("r2", 1, "PKR", "a.py", None, 10),
        ("r2", 2, "PKR", "b.py", None, 10),
        ("r2", 3, "CON", None, None, 0),
        ("r2", 4, "PKR", "a.py", None, 10),
        ("r2", 5, "PKR", "b.py", None, 10),
    ]
    return pd.DataFrame(rows, columns=["run_id", "turn", "tool", "file", "error_type",
                                       "lines_viewed"])


def test_anchors_rank_by_visits_by_default(turns, reads, runs):
    # natural (r1): a 3 visits (PKR, PKR, OVW), b 1 (its failed PKR does not count), c 1
    #   -> ranks a 1, b 2, c 2; budget (r2): a 2, b 2 -> both 1, c never visited -> 3
    a = fp.anchor_files(reads, runs, top=None, turns=turns)
    assert a["file"].tolist() == ["a.py", "b.py", "c.py"]
    assert a["mean_rank"].tolist() == pytest.approx([1.0, 1.5, 2.5])
    assert a["visits"].tolist() == [5, 3, 1] and a["ranked_in"].tolist() == [2, 2, 1]


def test_a_file_reached_only_by_outlines_is_an_anchor_by_visits(runs):
    """x.py was outlined twice (no line shown), y.py read once: the most visited file is
    x.py, which a ranking by lines shown never lists; lens 0 counts both as visited."""
    turns = pd.DataFrame([("r1", 1, "OVW", "x.py", None, 0), ("r1", 2, "OVW", "x.py", None, 0),
                          ("r1", 3, "PKR", "y.py", None, 50)],
                         columns=["run_id", "turn", "tool", "file", "error_type", "lines_viewed"])
    reads = pd.DataFrame([("r1", 3, "y.py", 1, 50)], columns=READ_COLS)
    one = runs[runs["run_id"] == "r1"]
    by_visits = fp.anchor_files(reads, one, top=None, turns=turns)
    assert by_visits["file"].tolist() == ["x.py", "y.py"]
    assert by_visits["lines_shown"].tolist() == [0, 50]
    assert fp.anchor_files(reads, one, top=None, rank_by="lines")["file"].tolist() == ["y.py"]
    v = fp.file_visits(turns, one).set_index("file")
    assert v.loc["x.py", "visits"] == 2 and v.loc["y.py", "visits_per_run"] == 1.0


def test_file_corridors_by_hand(turns, runs):
    c = fp.file_corridors(turns, runs, top=None)
    got = c[["source", "target", "moves", "trajectories", "rank"]].values.tolist()
    assert got == [["a.py", "b.py", 3, 2, 1], ["b.py", "a.py", 2, 2, 2],
                   ["a.py", "c.py", 1, 1, 3]]
    assert set(c["world"]) == {"w"}
    assert len(fp.file_corridors(turns, runs, top=1)) == 1
    pooled = fp.file_corridors(turns, by=None, top=None)
    assert list(pooled.columns) == ["source", "target", "moves", "trajectories", "rank"]
    one_file = turns[turns["file"] == "a.py"]
    assert fp.file_corridors(one_file, by=None).empty


def test_run_route_by_hand(turns):
    route = fp.run_route(turns, "r1")
    assert route[["step", "file", "first_turn", "last_turn", "calls", "lines"]].values.tolist() == [
        [1, "a.py", 1, 2, 2, 20], [2, "b.py", 4, 4, 1, 5], [3, "a.py", 5, 5, 1, 7],
        [4, "c.py", 7, 7, 1, 12]]
    with pytest.raises(ValueError, match="no run"):
        fp.run_route(turns, "nope")


def test_world_files_table_and_fallbacks(tmp_path, reads):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("x = 1\n" * 12)
    (tmp_path / "pkg" / "b.py").write_text("y = 2\n\nz = 3\n")
    (tmp_path / "notes.txt").write_text("hello\n")
    world = World(tmp_path, name="tiny")
    files = fp.world_files_table(world, progress=False).set_index("file")["loc"].to_dict()
    assert files == {"pkg/a.py": 12, "pkg/b.py": 3}
    every = fp.world_files_table(world, source_only=False, progress=False)
    assert set(every["file"]) == {"pkg/a.py", "pkg/b.py", "notes.txt"}
    txt = fp.world_files_table(world, extensions=[".txt"], progress=False)
    assert txt.values.tolist() == [["notes.txt", 1]]
    stand_in = fp.files_from_reads(reads).set_index("file")["loc"].to_dict()
    assert stand_in == {"a.py": 14, "b.py": 5, "c.py": 109}
    both = fp.complete_files(pd.DataFrame({"file": ["a.py"], "loc": [300]}), reads)
    assert both.set_index("file")["loc"].to_dict() == {"a.py": 300, "b.py": 5, "c.py": 109}


def test_repo_layout_nests_and_thins():
    files = pd.DataFrame({"file": ["src/pkg/a.py", "src/pkg/b.py", "src/pkg/sub/c.py",
                                   "src/pkg/sub/d.py", "src/pkg/sub/e.py", "setup.py"],
                          "loc": [100, 50, 10, 10, 10, 5]})
    lay = fp.repo_layout(files, {"src/pkg/a.py": 3.0})
    folders = lay[lay["kind"] == "folder"].set_index("path")
    assert "src/pkg" in folders.index and "src" not in folders.index  # chain merged
    assert folders.loc["src/pkg", "name"] == "src/pkg"
    assert (lay["kind"] == "file").sum() == 6
    a = lay.set_index("path").loc["src/pkg/a.py"]
    b = lay.set_index("path").loc["src/pkg/b.py"]
    assert a["r"] > b["r"] and a["value"] == 3.0
    assert ((lay["x"] ** 2 + lay["y"] ** 2) ** 0.5 + lay["r"] <= 1.0 + 1e-6).all()
    thin = fp.repo_layout(files, {"src/pkg/a.py": 3.0}, max_leaves=3)
    names = set(thin.loc[thin["kind"] == "file", "path"])
    # a lone unread file stays itself; several merge into one grey leaf
    assert names == {"src/pkg/a.py", "src/pkg/b.py", "src/pkg/sub/(3 files)", "setup.py"}
    extra = fp.repo_layout(files, {"docs/x.md": 1.0})
    assert "docs/x.md" in set(extra["path"])  # read files missing from the table are added
    with pytest.raises(ValueError, match="empty"):
        fp.repo_layout(files.iloc[0:0])


@pytest.fixture
def no_saving(monkeypatch, tmp_path):
    def refuse(*a, **k):
        raise AssertionError("a plot function tried to save")

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", refuse)
    monkeypatch.chdir(tmp_path)
    yield
    assert list(tmp_path.iterdir()) == []


def _file_faces(fig, files, values) -> dict[str, tuple]:
    """The face colour drawn for each file, found by the circle the layout gives it."""
    lay = fp.repo_layout(files, values).set_index("path")
    circles = {(round(c.center[0], 9), round(c.center[1], 9), round(c.radius, 9)): c
               for c in fig.axes[0].patches}
    out = {}
    for f in files["file"]:
        x, y, r = lay.loc[f, ["x", "y", "r"]]
        out[f] = circles[(round(x, 9), round(y, 9), round(r, 9))].get_facecolor()
    return out


def _luminance(rgba) -> float:
    r, g, b = rgba[:3]
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def test_repo_map_colours_files_by_density(reads, runs, no_saving):
    from matplotlib.colors import to_rgba

    files = pd.DataFrame({"file": ["a.py", "b.py", "c.py", "d.py"], "loc": [20, 10, 110, 40]})
    density = fp.trace_density(reads, runs)
    # lines shown per run (4 runs): a.py 30 / 4, b.py 5 / 4, c.py 10 / 4; d.py unread
    assert density.set_index("file")["density"].to_dict() == {"a.py": 7.5, "b.py": 1.25,
                                                              "c.py": 2.5}
    fig = fp.plot_repo_map(files, density, title="density", clip_quantile=1.0)
    faces = _file_faces(fig, files, density.set_index("file")["density"])
    assert faces["d.py"] == to_rgba(fp.UNVISITED_COLOR)
    assert all(faces[f] != to_rgba(fp.UNVISITED_COLOR) for f in ("a.py", "b.py", "c.py"))
    # denser files are darker on the sequential scale
    assert _luminance(faces["a.py"]) < _luminance(faces["c.py"]) < _luminance(faces["b.py"])
    assert fig.axes[-1].get_ylim() == pytest.approx((0.0, 7.5))  # colour bar from 0 to max
    assert fig.axes[0].get_title() == "density"
    assert "a.py" in {t.get_text() for t in fig.axes[0].texts}
    plt.close("all")


def test_difference_map_is_signed_and_centred(reads, runs, no_saving):
    from matplotlib.colors import to_rgba

    files = pd.DataFrame({"file": ["a.py", "b.py", "c.py", "d.py"], "loc": [20, 10, 110, 40]})
    diff = fp.density_difference(reads, runs, {"model": "m1"}, {"model": "m2"})
    fig = fp.plot_difference_map(files, diff, labels=("m1", "m2"), clip_quantile=1.0)
    cbar = fig.axes[-1]
    assert cbar.get_ylim() == pytest.approx((-15.0, 15.0))  # |a.py diff| = 15 sets both ends
    assert cbar.get_ylabel() == "m1 minus m2 (lines per run)"
    assert fig.axes[0].get_title() == "m1 − m2"
    faces = _file_faces(fig, files, diff.set_index("file")["diff"])
    red, _, blue, _ = faces["a.py"]  # m1 read a.py more: red
    assert red > blue
    red, _, blue, _ = faces["c.py"]  # only m2 read c.py: blue
    assert blue > red
    assert faces["d.py"] == to_rgba(fp.UNVISITED_COLOR)
    default = fp.plot_difference_map(files, diff)
    lo, hi = default.axes[-1].get_ylim()
    assert lo == pytest.approx(-hi)  # the default clipping keeps the scale centred at zero
    plt.close("all")


def test_route_map_draws_numbered_steps(reads, turns, no_saving):
    from matplotlib.patches import FancyArrowPatch

    files = fp.files_from_reads(reads)
    fig3, ax = plt.subplots()
    out = fp.plot_route({"r1": fp.run_route(turns, "r1"), "r2": fp.run_route(turns, "r2")},
                        files, ax=ax)
    assert out is fig3
    # r1: a.py, b.py, a.py, c.py; r2: a.py, b.py, a.py, b.py -> 3 arrows each
    assert sum(isinstance(p, FancyArrowPatch) for p in ax.patches) == 6
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["r1 (4 steps)",
                                                                  "r2 (4 steps)"]
    steps = [t.get_text() for t in ax.texts]
    assert sorted(s for s in steps if s[0].isdigit()) == ["1,3", "1,3", "2", "2,4", "4"]
    single = fp.plot_route(fp.run_route(turns, "r2"))
    assert [t.get_text() for t in single.axes[0].get_legend().get_texts()] == ["run (4 steps)"]
    assert isinstance(single, Figure)
    plt.close("all")


def test_map_files_degrades_to_the_corpus(reads, monkeypatch, tmp_path):
    monkeypatch.setenv("ADAKIT_WORLDS", str(tmp_path))  # nothing fetched there
    files, note = fp.map_files("flask", reads)
    assert files.set_index("file")["loc"].to_dict() == {"a.py": 14, "b.py": 5, "c.py": 109}
    assert "not on disk" in note and "LOC unknown" in note
    files, note = fp.map_files("no-such-world", reads.assign(world="no-such-world"))
    assert len(files) == 3 and "unknown world" in note
    with pytest.raises(ValueError, match="no files"):
        fp.map_files("no-such-world", reads.assign(world="elsewhere"))


def test_concentration_by_hand(reads, runs):
    c = fp.concentration(reads, runs, by="model").set_index("model")
    # r1: a.py 20 lines, b.py 5 -> top share 0.8, hhi 0.64 + 0.04; r2: a.py only -> 1, 1
    assert c.loc["m1", "runs"] == 2
    assert c.loc["m1", "files_read"] == pytest.approx(1.5)
    assert c.loc["m1", "lines_shown"] == pytest.approx(17.5)
    assert c.loc["m1", "top_file_share"] == pytest.approx(0.9)
    assert c.loc["m1", "hhi"] == pytest.approx((0.68 + 1.0) / 2)
    assert c.loc["m1", "lines_per_file"] == pytest.approx((12.5 + 10) / 2)
    assert c.loc["m2", "runs"] == 1 and c.loc["m2", "hhi"] == pytest.approx(1.0)
    pooled = fp.concentration(reads)
    assert pooled.loc[0, "runs"] == 3 and pooled.loc[0, "files_read"] == pytest.approx(4 / 3)
