"""Process diagnostics after TraceProbe (issue 15): effect labels, anti-pattern detectors and
run alignment, for Ada's runs and imported runs alike.

- :mod:`adakit.diagnostics.steps`: canonical steps and the effect-label rules (data);
- :mod:`adakit.diagnostics.detectors`: the detector catalogue, frozen or calibrated thresholds,
  firing rows and rates per group with bootstrap intervals;
- :mod:`adakit.diagnostics.align`: LCS alignment at three levels, first divergences,
  divergence spans, the reference run, the aligned-tracks figure;
- :mod:`adakit.diagnostics.diagnosis`: :func:`~adakit.diagnostics.diagnosis.diagnose` runs all
  three over a corpus; ``adakit diagnose CORPUS`` does it from the shell and writes the tables
  as parquet beside the corpus (``<corpus>.diagnostics/``).
"""
