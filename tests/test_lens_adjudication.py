"""Lens 3 views (Fig. 8, Fig. 9, Table 6, per-tool prior leaning, Fig. D9) on hand-built data,
and notebook 13 executed with papermill on a synthetic corpus."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_hex
from matplotlib.figure import Figure

from adakit import config, figures
from adakit.judging import agreement as ag
from adakit.judging import families
from adakit.lenses import adjudication as l3

NAN = float("nan")


def v(run, fam, judge, label, turn=NAN, tool=None, valid=True):
    """One verdict; conclusion labels are given as digits and scored from them."""
    score = families.LABEL_SCORES[fam].get(label, NAN) if label else NAN
    item = run if turn != turn else f"{run}#{turn}"
    return {"item_id": item, "run_id": run, "family": fam, "judge": judge, "turn": turn,
            "tool": tool, "label": label, "score": score, "rationale": "", "valid": valid}


@pytest.fixture
def runs() -> pd.DataFrame:
    return pd.DataFrame({
        "run_id": ["r1", "r2", "r3", "r4"],
        "model": ["a", "b", "b", "a"],
        "condition": ["natural", "budget_pressure", "natural", "budget_pressure"],
        "task": ["architecture_analysis", "architecture_analysis", "asr_inference",
                 "asr_inference"],
        "world": ["w", "w", "w", "w"],
        "conclusion": ["one two", "one two three four", "one", "one two three"],
        "n_turns": [5, 4, 6, 3], "errors": [0, 1, 0, 0],
    })


@pytest.fixture
def judgments() -> pd.DataFrame:
    """Panel (A, B, C) verdicts per run, and single-judge turn items.

    task relevance     r1 4 4 3 -> 4   r2 2 2 2 -> 2   r3 1 3 2 -> 2   r4 3 unclear failed -> 3
    trace grounding    r1 3 3 3 -> 3   r2 4 4 1 -> 4   r3 1 1 1 -> 1   r4 2 2 3 -> 2
    termination        r1 3 3 3 -> 3   r2 2 3 failed -> 2.5 (split)
                       r3 failed x3 -> none            r4 1 2 4 -> 2
    navigation index   r1 OVW 1, EXP 0, PKR .5   r2 OVW .5, OVW unclear   r3 EXP 0, PKR 1
                       r4 OVW 1
    reasoning index    r1 CON 1   r2 MEM .5   r3 MEM 0, CON .5
    """
    rows = []
    panel = {
        "task_relevance": {"r1": "443", "r2": "222", "r3": "132", "r4": ["3", "unclear", None]},
        "trace_grounding": {"r1": "333", "r2": "441", "r3": "111", "r4": "223"},
        "termination_calibration": {"r1": "333", "r2": ["2", "3", None],
                                    "r3": [None, None, None], "r4": "124"},
    }
    for fam, per_run in panel.items():
        for run, labels in per_run.items():
            for judge, lab in zip("ABC", labels, strict=True):
                rows.append(v(run, fam, judge, lab, valid=lab is not None))
    nav = {"r1": [("OVW", "prior-led"), ("EXP", "evidence-led"), ("PKR", "mixed")],
           "r2": [("OVW", "mixed"), ("OVW", "unclear")],
           "r3": [("EXP", "evidence-led"), ("PKR", "prior-led")],
           "r4": [("OVW", "prior-led")]}
    syn = {"r1": [("CON", "prior-shaped")], "r2": [("MEM", "mixed")],
           "r3": [("MEM", "trajectory-grounded"), ("CON", "mixed")]}
    for fam, per_run in (("navigation_prior", nav), ("reasoning_prior", syn)):
        for run, steps in per_run.items():
            for k, (tool, lab) in enumerate(steps):
                turn = k if fam == "navigation_prior" else 10 + k
                rows.append(v(run, fam, "A", lab, turn=turn, tool=tool))
    return pd.DataFrame(rows)


def test_lens3_scores_normalise(judgments, runs):
    s = l3.lens3_scores(judgments, runs).set_index("run_id")
    # relevance (score - 1) / 3: 4 -> 1, 2 -> 1/3, 2 -> 1/3, 3 -> 2/3
    assert s["relevance"].tolist() == pytest.approx([1, 1 / 3, 1 / 3, 2 / 3])
    # calibration: 3 -> 2/3, split 2.5 -> 1/2, none -> NaN, 2 -> 1/3
    assert s.loc["r2", "calibration"] == pytest.approx(0.5)
    assert np.isnan(s.loc["r3", "calibration"])
    # navigation grounding = 1 - mean index: r1 1 - (1+0+.5)/3 = .5 ; r4 1 - 1 = 0
    assert s.loc["r1", "navigation_grounding"] == pytest.approx(0.5)
    assert s.loc["r4", "navigation_grounding"] == pytest.approx(0.0)
    assert s.loc["r2", "n_navigation_prior"] == 1  # the unclear step is not counted
    assert np.isnan(s.loc["r4", "synthesis_grounding"])  # no cognitive artifact judged
    assert s.loc["r2", "valid_turns"] == 3 and s.loc["r2", "conclusion_words"] == 4


def test_conclusion_quality_fig8(judgments, runs):
    cq = l3.conclusion_quality(l3.lens3_scores(judgments, runs), by=["model"]).set_index("model")
    # model a = r1, r4: relevance 1, 2/3 -> mean 5/6, sem = sd/sqrt(2) = (1/3)/sqrt(2)/sqrt(2)
    #   grounding (3-1)/3, (2-1)/3 = 2/3, 1/3 -> mean 1/2
    # model b = r2, r3: relevance 1/3, 1/3 -> sem 0 ; grounding 1, 0 -> mean 1/2, sem 1/2
    assert cq.loc["a", "relevance_mean"] == pytest.approx(5 / 6)
    assert cq.loc["a", "relevance_sem"] == pytest.approx(1 / 6)
    assert cq.loc["a", "conclusion_grounding_mean"] == pytest.approx(0.5)
    assert cq.loc["b", "relevance_sem"] == pytest.approx(0.0)
    assert cq.loc["b", "conclusion_grounding_sem"] == pytest.approx(0.5)
    assert cq["n"].tolist() == [2, 2]
    full = l3.conclusion_quality(l3.lens3_scores(judgments, runs))
    assert full["condition"].tolist() == ["natural", "budget_pressure"] * 2  # paper order
    ax = l3.plot_conclusion_quality(full).axes[0]
    # one error-bar point per model x condition cell, at (grounding, relevance):
    # a/natural r1 (2/3, 1), a/budget r4 (1/3, 2/3), b/natural r3 (0, 1/3), b/budget r2 (1, 1/3)
    points = {}
    for c in ax.containers:
        line = c.lines[0]
        xy = (float(line.get_xdata()[0]), float(line.get_ydata()[0]))
        points[tuple(np.round(xy, 6))] = (line.get_color(), line.get_marker())
    assert set(points) == {(round(2 / 3, 6), 1.0), (round(1 / 3, 6), round(2 / 3, 6)),
                           (0.0, round(1 / 3, 6)), (1.0, round(1 / 3, 6))}
    a_nat, a_bud = points[(round(2 / 3, 6), 1.0)], points[(round(1 / 3, 6), round(2 / 3, 6))]
    b_nat, b_bud = points[(0.0, round(1 / 3, 6))], points[(1.0, round(1 / 3, 6))]
    assert a_nat[0] == a_bud[0] != b_nat[0] == b_bud[0]  # colour = model
    assert a_nat[1] == b_nat[1] != a_bud[1] == b_bud[1]  # marker = condition
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "a", "b", "Natural", "Budget Pres."]


def test_orientation_fig9(judgments, runs):
    long = l3.orientation_scores(l3.lens3_scores(judgments, runs))
    assert set(long["dimension"]) == set(l3.FIG9_DIMENSIONS)
    nav = long[long["dimension"] == "navigation_grounding"].set_index("run_id")
    assert nav["n_items"].sum() == 7  # 8 navigation steps, one unclear
    assert nav.loc["r3", "value"] == pytest.approx(0.5)
    assert len(long[long["dimension"] == "calibration"]) == 3  # r3 has no calibration score
    fig = l3.plot_orientation(long)
    assert isinstance(fig, Figure) and len(fig.axes) == 3
    assert fig.axes[1].get_title(loc="left") == "Navigational orientation (n=7)"
    # one box per model x condition cell with runs, one point per run
    per_dim = long.groupby("dimension").size()
    for ax, dim in zip(fig.axes, l3.FIG9_DIMENSIONS, strict=True):
        assert sum(len(c.get_offsets()) for c in ax.collections) == per_dim[dim]
        cells = long[long["dimension"] == dim][["model", "condition"]].drop_duplicates()
        assert len(ax.patches) == len(cells)
    assert len(fig.axes[0].patches) == 3  # calibration: b under natural (r3) has no score


def test_label_shares(judgments, runs):
    sh = l3.label_shares(judgments, runs, "termination_calibration", by=["model"])
    got = {(r.model, r.label): r.share for r in sh.itertuples()}
    # a: r1 3 defensible, r4 2 borderline ; b: r2 split (2.5), r3 unclear (no counted verdict)
    assert got == {("a", "3 defensible"): 0.5, ("a", "2 borderline"): 0.5,
                   ("b", "split"): 0.5, ("b", "unclear"): 0.5}
    assert sh[sh["model"] == "a"]["label"].tolist() == ["3 defensible", "2 borderline"]
    ax = l3.plot_label_shares(sh, "termination_calibration", by=["model"]).axes[0]
    widths = {c.get_label(): [r.get_width() for r in c.patches] for c in ax.containers}
    # one layer per label present (favourable first), one segment per group (a, b)
    assert widths == {"3 defensible": [0.5, 0.0], "2 borderline": [0.5, 0.0],
                      "split": [0.0, 0.5], "unclear": [0.0, 0.5]}
    assert len(ax.patches) == 4 * 2
    assert np.array(list(widths.values())).sum(axis=0) == pytest.approx([1.0, 1.0])
    assert ax.get_xlim() == (0.0, 1.0)
    ticks = {t.get_text(): y for t, y in zip(ax.get_yticklabels(), ax.get_yticks(), strict=True)}
    assert ticks["a (n = 2)"] > ticks["b (n = 2)"]  # the first group on top, with its runs
    assert sh.groupby("model")["runs"].first().to_dict() == {"a": 2, "b": 2}
    nav = l3.label_shares(judgments, runs, "navigation_prior", by=["model"])
    assert nav[nav["model"] == "a"]["label"].tolist() == ["evidence-led", "mixed", "prior-led"]


def test_label_share_intervals(judgments, runs):
    from matplotlib.collections import LineCollection

    ci = l3.label_share_intervals(judgments, runs, "termination_calibration", by=["model"],
                                  n_resamples=500, seed=4)
    got = {(r.model, r.label): (r.share, r.share_lo, r.share_hi) for r in ci.itertuples()}
    # a: r1 3 defensible, r4 2 borderline, one item each: two draws give 0, 1/2 or 1 of either
    assert got[("a", "3 defensible")] == (0.5, 0.0, 1.0)
    assert got[("a", "2 borderline")] == (0.5, 0.0, 1.0)
    assert got[("b", "split")] == (0.5, 0.0, 1.0)
    # one run per model: no interval
    one = l3.label_share_intervals(judgments, runs, "termination_calibration",
                                   by=["model", "condition"], n_resamples=100)
    assert one["share_lo"].isna().all() and set(one["note"]) == {"too few runs"}
    # task relevance of model b: r2 and r3 both score 2, so every resample is all "2": zero width
    rel = l3.label_share_intervals(judgments, runs, "task_relevance", by=["model"],
                                   n_resamples=200)
    b = rel[rel["model"] == "b"]
    assert len(b) == 1 and b[["share", "share_lo", "share_hi"]].values.tolist() == [[1, 1, 1]]
    ax = l3.plot_label_shares(ci, "termination_calibration", by=["model"], interval=ci).axes[0]
    spans = sorted((float(s[0, 0]), float(s[1, 0])) for c in ax.collections
                   if isinstance(c, LineCollection) for s in c.get_segments() if s[0, 1] == s[1, 1])
    # a's bar: 3 defensible 0..0.5 then 2 borderline 0.5..1, whiskers measured from the left edge
    assert (0.0, 1.0) in spans and (0.5, 1.5) in spans


def test_grounding_intervals_resample_runs(judgments, runs):
    ci = l3.grounding_intervals(judgments, runs, by=["model"], n_resamples=1000, seed=3)
    a = ci[(ci["model"] == "a") & (ci["dimension"] == "navigation")].iloc[0]
    # model a's navigation items: r1 OVW 1, EXP 0, PKR .5 (grounding 0, 1, .5) and r4 OVW 1
    # (0): 1.5 / 4; drawing r1 twice gives .5, r4 twice 0, one of each 1.5 / 4
    assert (a["n_runs"], a["n_items"]) == (2, 4)
    assert [a["grounding"], a["grounding_lo"], a["grounding_hi"]] == pytest.approx(
        [0.375, 0.0, 0.5])
    # synthesis of model a: r1's CON only (grounding 0), one run: no interval
    syn = ci[(ci["model"] == "a") & (ci["dimension"] == "synthesis")].iloc[0]
    assert syn["n_runs"] == 1 and np.isnan(syn["grounding_lo"]) and syn["note"] == "too few runs"
    tools = l3.grounding_intervals(judgments, runs, by=[], split="tool", n_resamples=200)
    exp = tools.set_index("tool").loc["EXP"]  # r1 EXP 0 and r3 EXP 0: grounding 1 both
    assert [exp["grounding"], exp["grounding_lo"], exp["grounding_hi"]] == [1.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="split must be"):
        l3.grounding_intervals(judgments, runs, split="family")


def test_grounding_by_task_table6(judgments, runs):
    t6 = l3.grounding_by_task(judgments, runs)
    # architecture (r1 model a, r2 model b):
    #   a nav 1, 0, .5 -> 1 - .5 = .5 ; a syn 1 -> 0 ; b nav .5 -> .5 ; b syn .5 -> .5
    #   overall nav 1, 0, .5, .5 -> .5 ; overall syn 1, .5 -> 1 - .75 = .25
    # asr (r3 model b, r4 model a):
    #   a nav 1 -> 0 ; a syn none ; b nav 0, 1 -> .5 ; b syn 0, .5 -> .75
    #   overall nav 0, 1, 1 -> 1 - 2/3 = 1/3 ; overall syn .75
    arch, asr = "architecture_analysis", "asr_inference"
    assert t6.loc[arch, ("Overall", "navigation")] == pytest.approx(0.5)
    assert t6.loc[arch, ("Overall", "synthesis")] == pytest.approx(0.25)
    assert t6.loc[arch, ("a", "synthesis")] == pytest.approx(0.0)
    assert t6.loc[asr, ("Overall", "navigation")] == pytest.approx(1 / 3)
    assert np.isnan(t6.loc[asr, ("a", "synthesis")])
    printed = l3.format_pair_table(t6)
    assert printed.loc[arch].tolist() == ["0.500/0.250", "0.500/0.000", "0.500/0.500"]
    assert printed.loc[asr].tolist() == ["0.333/0.750", "0.000/-", "0.500/0.750"]


def test_table6_and_tool_scores_leave_out_the_coach_runs_by_default(judgments, runs):
    """One coach-judge item (prior-led, 0 grounding) beside a natural one (evidence-led, 1):
    the main-grid cell stays 1.0; pooled it would be 0.5."""
    extra = pd.DataFrame([
        v("k1", "navigation_prior", "A", "evidence-led", turn=0, tool="EXP"),
        v("k2", "navigation_prior", "A", "prior-led", turn=0, tool="EXP"),
    ])
    both = pd.DataFrame({"run_id": ["k1", "k2"], "model": ["gpt-4.1"] * 2,
                         "condition": ["natural", "coach_judge"],
                         "task": ["feature_tracing"] * 2, "world": ["w"] * 2})
    t6 = l3.grounding_by_task(extra, both)
    assert t6.loc["feature_tracing", ("gpt-4.1", "navigation")] == pytest.approx(1.0)
    pooled = l3.grounding_by_task(extra, both, exclude_conditions=())
    assert pooled.loc["feature_tracing", ("gpt-4.1", "navigation")] == pytest.approx(0.5)
    tools = l3.tool_prior_scores(extra, both).set_index("tool")
    assert tools.loc["EXP", "n"] == 1 and tools.loc["EXP", "grounding"] == pytest.approx(1.0)
    assert l3.tool_prior_scores(extra, exclude_conditions=()).iloc[0]["grounding"] == 0.5
    with pytest.raises(ValueError, match="needs the runs table"):
        l3.tool_prior_scores(extra)


def test_tool_prior_scores(judgments, runs):
    tp = l3.tool_prior_scores(judgments, runs).set_index("tool")
    # OVW 1, .5, 1 (one unclear) -> 2.5/3 ; EXP 0, 0 ; PKR .5, 1 ; MEM .5, 0 ; CON 1, .5
    assert list(tp.index) == ["OVW", "PKR", "EXP", "MEM", "CON"]
    assert tp.loc["OVW", "n"] == 3
    assert tp.loc["OVW", "prior_index"] == pytest.approx(2.5 / 3)
    assert tp.loc["OVW", "grounding"] == pytest.approx(1 / 6)
    assert tp.loc["EXP", "grounding"] == pytest.approx(1.0)
    assert tp.loc["CON", "grounding"] == pytest.approx(0.25)
    assert tp.loc["MEM", "grounding"] == pytest.approx(0.75)
    split = l3.tool_prior_scores(judgments, runs, by=["condition"])
    ovw = split[split["tool"] == "OVW"].set_index("condition")["prior_index"]
    assert ovw["natural"] == 1.0 and ovw["budget_pressure"] == pytest.approx(0.75)
    with pytest.raises(ValueError, match="needs the runs table"):
        l3.tool_prior_scores(judgments, by=["condition"])
    ax = l3.plot_tool_prior_scores(l3.tool_prior_scores(judgments, runs)).axes[0]
    bars = sorted(ax.patches, key=lambda r: -r.get_y())  # top to bottom
    assert [r.get_width() for r in bars] == pytest.approx([1 / 6, 0.25, 1.0, 0.75, 0.25])
    names = [t.get_text() for t in ax.get_yticklabels()]
    ticks = sorted(zip(ax.get_yticks(), names, strict=True), reverse=True)
    assert [t for _, t in ticks] == ["OVW (navigation)", "PKR (navigation)",
                                     "EXP (navigation)", "MEM (synthesis)", "CON (synthesis)"]
    assert [to_hex(r.get_facecolor()) for r in bars] == [
        to_hex(figures.TOOL_COLORS[t]) for t in ("OVW", "PKR", "EXP", "MEM", "CON")]
    assert [t.get_text() for t in ax.texts][:2] == ["0.17 (n=3)", "0.25 (n=2)"]
    with pytest.raises(ValueError, match="one row per tool"):
        l3.plot_tool_prior_scores(split)


def test_length_plot_d9(judgments, runs):
    scores = l3.lens3_scores(judgments, runs)
    fig = l3.plot_length_robustness(scores)
    ax = fig.axes[0]
    xs = np.concatenate([c.get_offsets()[:, 0] for c in ax.collections])
    assert sorted(xs) == [1, 2, 3, 4]  # one point per run, at its conclusion's word count
    fit = ax.lines[0]
    # least squares: slope -0.5 / 5 = -0.1, intercept 2.75 + 0.1 * 2.5 = 3.0
    assert (fit.get_xdata()[0], fit.get_xdata()[-1]) == pytest.approx((1.0, 4.0))
    assert (fit.get_ydata()[0], fit.get_ydata()[-1]) == pytest.approx((2.9, 2.6))
    text = ax.texts[0].get_text()
    # words 2, 4, 1, 3 against task relevance 4, 2, 2, 3:
    # dx = -.5 1.5 -1.5 .5, dy = 1.25 -.75 -.75 .25 -> -.625 -1.125 1.125 .125 = -.5
    # sum dx^2 = 5, sum dy^2 = 2.75 -> r = -.5 / sqrt(13.75) = -0.13
    assert "Pearson r = -0.13" in text and "n = 4" in text
    with pytest.raises(ValueError, match="unknown family"):
        l3.normalise("vibes", 1.0)


# --------------------------------------------------------------------------- the notebook

NOTEBOOK = config.NOTEBOOKS / "13_lens3_adjudication.ipynb"


def test_notebook_parameters_cell_and_stripped_outputs():
    nb = json.loads(NOTEBOOK.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert "parameters" in code[1]["metadata"].get("tags", [])
    assert all(c["execution_count"] is None and not c["outputs"] for c in code)
    for line in "".join(code[1]["source"]).splitlines():
        if line.strip() and not line.startswith("#"):
            assert "  # " in line, f"parameter without a comment: {line}"
    pm = pytest.importorskip("papermill")
    params = pm.inspect_notebook(str(NOTEBOOK))  # what papermill --help-notebook shows
    assert set(params) == {"corpus", "judgments", "human_labels", "group_cols", "table_rows",
                           "exclude_conditions", "n_resamples", "level", "seed", "figure_prefix"}
    assert all(p["help"] for p in params.values())
    assert params["corpus"]["default"] == '"data/runs/quick"'


@pytest.mark.timeout(300)
def test_notebook_runs_on_a_synthetic_corpus(tmp_path, monkeypatch):
    synthetic = pytest.importorskip("adakit.synthetic")
    pm = pytest.importorskip("papermill")
    from adakit.record import load_corpus

    corpus = tmp_path / "runs" / "synth16"
    synthetic.write_synthetic_corpus(corpus, 16, seed=2, progress=False)
    c = load_corpus(corpus, cache=False)
    judg = ag.synthetic_judgments(c.runs, c.turns, seed=4)
    jpath = tmp_path / "judgments.parquet"
    judg.to_parquet(jpath)
    agg = ag.aggregate_votes(judg)
    on_scale = agg[agg["rule"] == "majority"]  # human labels must be on the family's scale
    human = on_scale.groupby("family").head(5)[["item_id", "family", "score"]]
    from adakit.workbench.labels import LabelLog

    log = LabelLog(tmp_path / "labels.jsonl")  # two labellers, as the explorer writes them
    for who, shift in (("ana", 0), ("bo", 1)):
        for r in human.itertuples():
            values = families.SCALES[r.family]
            k = min(values.index(r.score) + shift * (r.Index % 2), len(values) - 1)
            log.add(who, r.item_id, r.family, ag.display_label(r.family, values[k]).split()[-1])
    # the kernel inherits the environment: figures go under tmp_path/figures
    monkeypatch.setenv("ADAKIT_HOME", str(tmp_path))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    out = tmp_path / "out.ipynb"
    pm.execute_notebook(
        str(NOTEBOOK), str(out), cwd=str(tmp_path), progress_bar=False, kernel_name="python3",
        parameters={"corpus": [str(corpus)], "judgments": str(jpath),
                    "human_labels": str(tmp_path / "labels.jsonl"), "figure_prefix": "nbtest"},
    )
    written = {p.name for p in (tmp_path / "figures" / "nbtest").glob("*.png")}
    assert {"fig8_quality.png", "fig9_orientation.png", "termination_shares.png",
            "tool_prior.png", "figD9_length.png"} <= written
    text = json.dumps(json.loads(out.read_text())["cells"])
    assert "pair_exact" in text and "human_model_r" in text and "added_r2" in text
    assert "by 2 labeller(s)" in text and "human_human_kappa" in text
    assert "judge_judge_kappa" in text and "human_judge_kappa" in text
    assert "mean_lo" in text  # Fig. 9's table: each condition's mean with its interval
    t6 = pd.read_csv(tmp_path / "data" / "processed" / "nbtest" / "table6_intervals.csv")
    assert {"task", "model", "dimension", "grounding_lo", "grounding_hi"} <= set(t6.columns)
    assert t6["grounding_lo"].notna().any()
