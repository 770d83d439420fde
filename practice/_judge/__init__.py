"""The judge's own files: exercise definitions, checks, the sandboxed runner, reference and wrong
solutions. Learners edit the files in practice/ (created from starters/); nothing here."""
