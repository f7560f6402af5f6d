"""The matrix: the study spec, its cost plan and preflight, the resumable launcher and its retries, the pipeline stages and the shipped datasets."""
