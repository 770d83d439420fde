"""The glossary is followed: no banned variant of a term appears in the project's text."""
import re

from conftest import ROOT


def banned_terms():
    rows = (ROOT / "TERMINOLOGY.md").read_text(encoding="utf-8").splitlines()
    banned = {}
    for row in rows:
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[2] and not set(cells[2]) <= set("-") and "not used" not in cells[2]:
            for variant in re.split(r",\s*", cells[2]):
                banned[variant] = cells[1]
    return banned


def test_glossary_is_followed():
    banned = banned_terms()
    assert "令牌" in banned and banned["令牌"] == "词元"
    files = [p for p in ROOT.rglob("*.py") if not any(part.startswith((".venv", "tests", "build")) for part in p.relative_to(ROOT).parts)]
    files += [ROOT / "README.md"]
    problems = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        for variant, term in banned.items():
            if variant in text:
                problems.append(f"{path.relative_to(ROOT)}: {variant!r} (use {term!r})")
    assert not problems, problems


def glossary_terms():
    """The Chinese word of every row, e.g. '共享嵌入（输出层就是嵌入表）' -> '共享嵌入', 'bf16 / fp32' -> both."""
    terms = {}
    for row in (ROOT / "TERMINOLOGY.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[1] and not set(cells[1]) <= set("-") and cells[0] != "English":
            for word in cells[1].split(" / "):
                terms[word.split("（")[0].strip()] = cells[0]
    return terms


def test_glossary_words_are_used():
    """Not only are the banned variants absent: each term's own word appears in the project's text."""
    terms = glossary_terms()
    assert terms["层归一化"] == "LayerNorm" and "升到 fp32" in terms and "缩放" in terms
    files = [p for p in ROOT.rglob("*.py") if not any(part.startswith((".venv", "tests", "build", "bench"))
                                                     for part in p.relative_to(ROOT).parts)]
    text = "\n".join(p.read_text(encoding="utf-8") for p in files + [ROOT / "README.md"])
    missing = [f"{word} ({english})" for word, english in terms.items() if word not in text]
    assert not missing, missing
