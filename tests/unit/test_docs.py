"""The docs say how the project works now: every file they name exists, every `python -m benchmarks NAME` is a
benchmark, every link lands on a page and heading, no page tells a story of work sessions or names a path on
someone's machine, the pages stay short, and each figures table is what its results file makes."""

import re
from pathlib import Path

import pytest

from benchmarks import harness
from benchmarks.__main__ import BENCHMARKS

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
# A repository path: a top-level folder of ours, then a path (what a reader would open or run).
REPO_PATH = re.compile(r"(?<![\w./~-])((?:benchmarks|scripts|tests|sapiens2_demo|docs|assets)/[\w./-]*\w)")
DIARY = re.compile(
    r"\b(first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|last|this|next|earlier|previous) "
    r"(session|pass|round)s?\b|\b(issue|session) #?\d+|\bsessions? (on|of) (the|a) (cpu|gpu)\b", re.I)
MACHINE_PATH = re.compile(r"/work/|/farm/|(?:^|[\s`'\"(])/root/|/tmp/s\d|/tmp/host|notes/s\d")
LINK = re.compile(r"\]\(([^)\s]+)\)")
PAGE_LINES = 300  # a page a newcomer reads in one sitting
README_LINES = 350
OWNED_ELSEWHERE: set[str] = set()  # pages held to the limit later (none now)


def text_of(page: Path) -> str:
    return page.read_text()


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {slug(line.lstrip("#")) for line in text_of(page).splitlines() if line.startswith("#")}


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_repository_path_a_page_names_exists(page):
    missing = sorted({path for path in REPO_PATH.findall(text_of(page))
                      if not (ROOT / path).exists() and not (ROOT / path.rstrip(".")).exists()})
    assert not missing, f"{page.name} names files that are not in the repository: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_benchmark_a_page_runs_exists(page):
    names = set(re.findall(r"python -m benchmarks ([a-z][\w-]*)", text_of(page)))
    unknown = names - set(BENCHMARKS) - {"list", "quick", "tables"}
    assert not unknown, f"{page.name} runs benchmarks that do not exist: {sorted(unknown)}"


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_link_lands_on_a_page_and_its_heading(page):
    broken = []
    for target in LINK.findall(text_of(page)):
        if re.match(r"[a-z]+:", target):
            continue  # another site
        file, _, anchor = target.partition("#")
        linked = (page.parent / file).resolve() if file else page
        if not linked.exists():
            broken.append(target)
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(target)
    assert not broken, f"{page.name} links to what is not there: {broken}"


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_no_page_tells_a_story_or_names_someones_machine(page):
    if page.name in OWNED_ELSEWHERE:
        pytest.skip("rewritten by its own owner")
    lines = text_of(page).splitlines()
    diary = [line.strip()[:90] for line in lines if DIARY.search(line)]
    paths = [line.strip()[:90] for line in lines if MACHINE_PATH.search(line)]
    assert not diary, f"{page.name} tells how the work went, not how the project works: {diary}"
    assert not paths, f"{page.name} names paths on someone's machine: {paths}"


def test_the_pages_stay_short():
    long = {page.name: n for page in PAGES if page.name not in OWNED_ELSEWHERE | {"README.md"}
            if (n := len(text_of(page).splitlines())) > PAGE_LINES}
    assert not long, f"pages over {PAGE_LINES} lines: {long}"
    assert len(text_of(ROOT / "README.md").splitlines()) <= README_LINES


def test_the_checks_catch_what_they_are_for():
    assert DIARY.search("The ninth session on the CPU") and DIARY.search("(issue 37, second session)")
    assert not DIARY.search("a session's folder goes when its tab closes")
    assert MACHINE_PATH.search("`/work/notes/s6/diag.py`") and MACHINE_PATH.search("in /root/.cache")
    assert not MACHINE_PATH.search("/tmp/sapiens2-tiny") and not MACHINE_PATH.search("<hash>/root/package.pt2")
    assert REPO_PATH.findall("see `benchmarks/bench_gone.py` and benchmarks/harness.py.") == [
        "benchmarks/bench_gone.py", "benchmarks/harness.py"]
    assert slug("An image request: the render first, the files after") == \
        "an-image-request-the-render-first-the-files-after"


@pytest.mark.parametrize("page", [p for p in PAGES if harness.BLOCK.search(text_of(p))], ids=lambda page: page.name)
def test_each_figures_table_is_what_its_results_file_makes(page):
    """`python -m benchmarks tables` writes these blocks; a table edited by hand, or a results file rerun without
    the tables rewritten, fails here."""
    text = text_of(page)
    assert harness.tables_in(text) == text, (
        f"{page.name}: a figures table differs from its results file: run `python -m benchmarks tables`")


def test_a_table_that_disagrees_with_its_file_is_found():
    page = next(p for p in PAGES if harness.BLOCK.search(text_of(p)))
    text = text_of(page)
    block = harness.BLOCK.search(text)
    edited = text[:block.start("body")] + block["body"].replace("|", "| 9", 1) + text[block.end("body"):]
    assert harness.tables_in(edited) != edited and harness.tables_in(edited) == text
