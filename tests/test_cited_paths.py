"""Code, data and docs cite only files the repository holds: every repository path and every upper-case ``*.md``
name they mention exists (relative to the repository root or to the citing file)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUFFIXES = {".py", ".md", ".yaml", ".csv", ".txt", ".ipynb", ".toml", ".jsonl"}
FOLDERS = ("simulator", "docs", "tests", "scenarios", "hardware_profiles", "benchmarks", "notebooks", ".ci")
SKIP = {"build", "dist", "__pycache__", ".git", ".venv", "venv", ".devrun"}  # .devrun: device scratch (git-excluded)
#: a path into the repository: a top-level folder (or a stale one: reference/, shared/), then more path characters
PATH = re.compile(r"(?<![\w/.-])((?:\.\./)*(?:reference|shared|calibration|" + "|".join(re.escape(f) for f in FOLDERS)
                  + r")/[\w./*-]*[\w*])")
DOC_NAME = re.compile(r"(?<![\w/-])([A-Z][A-Z_]+\.md)\b")
#: external documents cited by repository and path, not files of ours
EXTERNAL = ("nccl-tests doc/PERFORMANCE.md",)
#: the plan, memory, compute, traffic and schedule packages still cite the project-internal CONTRACT.md, DESIGN.md
#: and STYLE.md in docstrings; they are being rewritten and switch to docs/interface.md then


def _files():
    for path in ROOT.rglob("*"):
        rel = path.relative_to(ROOT)
        if path.suffix in SUFFIXES and path.is_file() and not SKIP & set(rel.parts) \
                and not any(p.endswith(".egg-info") for p in rel.parts) and rel.parts[:2] != ("simulator", "data"):
            yield path, rel


def _exists(cited: str, path: Path) -> bool:
    if "*" in cited:
        return any(ROOT.glob(cited)) or any(path.parent.glob(cited))
    return (ROOT / cited).exists() or (path.parent / cited).exists()


def test_cited_repository_paths_exist():
    missing = []
    for path, rel in _files():
        text = path.read_text(errors="replace")
        for match in PATH.finditer(text):
            cited = match.group(1).rstrip(".")
            if not _exists(cited, path):
                missing.append(f"{rel}: {cited}")
        for match in DOC_NAME.finditer(text):
            context = text[max(0, match.start() - 20):match.end()]
            itself = path == Path(__file__)
            if not _exists(match.group(1), path) and not any(e in context for e in EXTERNAL) and not itself:
                missing.append(f"{rel}: {match.group(1)}")
    assert not missing, "cited files the repository does not hold:\n" + "\n".join(sorted(set(missing)))
