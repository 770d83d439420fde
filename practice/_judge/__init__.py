"""The judge's own files. Learners edit the files in practice/ (created from starters/); nothing here.

    exercises/   the exercises, one file per group of chapters (how to add one: its __init__.py)
    starters/ solutions/ wrong/ equivalent/   statements, references, known mistakes, other correct forms
    grading.py   one grading, in the judge's process: cases, expected values, comparison, diagnoses
    sandbox.py   the judge's side of the sandbox: the fresh process that runs the learner's functions, its limits
    runner.py    that process's side;  confine.py  its limits;  wire.py  plain data (never pickle)
    compare.py   tolerances and how results differ;  report.py  the report in words
    progress.py  the progress file;  notebook.py  practice.check for notebooks
"""
