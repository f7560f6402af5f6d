"""J, the post-hoc judges of lens 3 (paper §3.4, §4.2.3, Appendix C.1), in the order a verdict
is made and read:

- :mod:`~adakit.judging.families`: the label vocabulary (families, labels, scores, "unclear");
- :mod:`~adakit.judging.anonymise`: what a judge must not learn about the run;
- :mod:`~adakit.judging.context`: the capped, anonymised context of each item;
- :mod:`~adakit.judging.verdicts`: the reply schema and the parsing of a reply;
- :mod:`~adakit.judging.store`: the judgments log and table of a corpus;
- :mod:`~adakit.judging.run`: panels, the call, the runner and ``adakit judge``;
- :mod:`~adakit.judging.agreement`: how far to trust the verdicts (Appendix C's tables).
"""
