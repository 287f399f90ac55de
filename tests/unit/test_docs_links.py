"""The documentation holds together: every relative link in README.md, docs/*.md, CONTRIBUTING.md and
CHANGELOG.md resolves (file and, for `#anchor`, heading), every `docs/….md` path the code mentions
(docstrings, --help texts) exists, the docs carry no notes addressed to the people who wrote them,
and the manual carries no measurement history (that goes to CHANGELOG.md)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import ROOT

MANUAL = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
PAGES = [*MANUAL, ROOT / "CHANGELOG.md"]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
CODE_BLOCK = re.compile(r"```.*?```", re.S)


def _links(page: Path) -> list[str]:
    text = CODE_BLOCK.sub("", page.read_text())
    text = re.sub(r"`[^`\n]*`", "", text)
    return [m.group(1) or m.group(2) for m in LINK.finditer(text)]


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces → hyphens."""
    out = set()
    for line in CODE_BLOCK.sub("", page.read_text()).splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for link in _links(page):
        if re.match(r"^[a-z]+:", link):  # http:, https:, mailto: — not checked here
            continue
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            broken.append(f"{link}: no such file")
        elif anchor and target.suffix == ".md" and anchor not in _anchors(target):
            broken.append(f"{link}: no heading #{anchor} in {target.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_links_leave_the_repository_only_by_url() -> None:
    outside = [f"{p.relative_to(ROOT)}: {link}" for p in PAGES for link in _links(p)
               if not re.match(r"^[a-z]+:", link)
               and not (p.parent / link.partition("#")[0]).resolve().is_relative_to(ROOT)]
    assert not outside


def test_every_docs_path_in_the_code_exists() -> None:
    mentioned = {(m, str(f.relative_to(ROOT))) for f in (ROOT / "netkit").rglob("*.py")
                 for m in re.findall(r"docs/[A-Za-z0-9_/-]+\.md", f.read_text())}
    assert mentioned, "the code points readers at docs/ pages"
    missing = sorted(f"{where}: {m}" for m, where in mentioned if not (ROOT / m).exists())
    assert not missing


TEAM_NOTES = re.compile(r"\bissue \d+\b|\bthe issue\b|\bthe lead\b|\bsessions?\b(?! affinity)|#1[0-9] item", re.I)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_notes_addressed_to_the_team(page: Path) -> None:
    text = re.sub(r"\s+", " ", page.read_text().replace("sessionAffinity", ""))  # a phrase may wrap
    found = [text[max(m.start() - 40, 0):m.end() + 40] for m in TEAM_NOTES.finditer(text)]
    assert not found, found


# A run's clock time, load averages, dates, "was X", tracker numbers: a lab notebook, not a manual.
NOTEBOOK = re.compile(r"\b\d{1,2}:\d{2} UTC\b|\bat \d{1,2}:\d{2}\b|\bload average|\bload \d|\bmeasurement window"
                      r"|\bnot yet explained|\b20\d\d-\d\d-\d\d\b|(?<![\w/.])#\d+\b|\bwas [\d~]|\(was\b"
                      r"|\bre-measure|\bdeveloped on\b|\bbuild machines\b|\bbefore #", re.I)


def _prose(page: Path) -> str:
    text = CODE_BLOCK.sub("", page.read_text())  # command output and rule numbers (`#2`) are not prose
    return re.sub(r"\s+", " ", re.sub(r"`[^`\n]*`", "", text))


@pytest.mark.parametrize("page", MANUAL, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_manual_holds_no_measurement_history(page: Path) -> None:
    text = _prose(page)
    found = [text[max(m.start() - 50, 0):m.end() + 30] for m in NOTEBOOK.finditer(text)]
    assert not found, ("say what is true now and how to reproduce it; history goes to CHANGELOG.md: "
                       + " | ".join(found))


def test_the_history_pattern_sees_a_notebook_line() -> None:
    line = "took 2.74 s (2026-12-01, 22:00 UTC, load average 0.8; was 3.30 s; ~34 s before #15's work)"
    assert len(NOTEBOOK.findall(line)) >= 5
