"""L, the observation lenses: each projects a corpus (``adakit.record.Corpus``) into tables
and figures. Compute functions take DataFrames and return DataFrames; plot functions take
data and return a matplotlib Figure without saving it (``adakit.figures.save_figure`` does).

========  ====================  ==========================================================
lens      module                projection
========  ====================  ==========================================================
0         ``surface``           surface activity: census signals per run (Fig. 4, 5, D5)
1         ``journey``           journey arc: runs on a normalized time axis (Fig. 6)
2         ``policy``            action policy: Table 5 transition tags, n-grams (Fig. 7)
3         ``adjudication``      automatic adjudication by a judge panel (Fig. 8, 9)
4         ``footprint``         codebase footprint: trace density over the world (Fig. 10)
========  ====================  ==========================================================

Import a lens module directly, e.g. ``from adakit.lenses import surface``.
"""

LENSES: dict[int, str] = {
    0: "surface",
    1: "journey",
    2: "policy",
    3: "adjudication",
    4: "footprint",
}
