"""J, the judges of lens 3: label families, verdicts, the anonymiser, judge context, the judgments log, the runner and inter-judge agreement."""
