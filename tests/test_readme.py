"""Every ```python block of README.md (and of docs/*.md) runs as a reader would paste it, and "Two commands"
matches CI.

The rules, for whoever edits the README:

- Each ```python block (an indented one too) is written to a file and run on its own in a fresh
  subprocess (``sys.executable -W error``), with a fresh temporary folder as the working directory, so
  relative paths such as ``"./replay_data"`` land there. It must exit with 0 within its timeout.
- A block that needs an optional extra says so on the line just before its fence, in an HTML comment a
  reader does not see: ``<!-- needs: ray -->`` or ``<!-- needs: gymnasium, h5py -->`` (module names). The
  test skips, naming the module, when one is missing.
- A block that goes on from the previous ```python block of the SAME section (it uses the names that
  block defines) says ``<!-- continues -->`` on the line before its fence; it is run concatenated after
  that block (and after whatever that one continues). Prefer self-contained blocks.
- Shell blocks (```bash, ```sh, or a bare fence) are not run; only "Two commands" is checked: its test
  command is the one `.ci/run` runs.
- The "Contents" list near the top links every ## section, in order; every #anchor link lands on a heading.
- The pages under docs/ follow the same rules for their blocks (the sections are theirs: a block continues
  only a block of its own page). Every relative link of the README and of docs/*.md names a file that
  exists, and a link to a heading (``docs/performance.md#reading``, ``../README.md#on-disk``) lands on one.
"""

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))  # pages the README sends readers to; their blocks run too
TIMEOUT = 120  # seconds per block; the slowest (Ray's start) takes about 15 s

FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w-]*)\s*$")
MARKER = re.compile(r"^\s*<!--\s*(?P<key>needs|continues)\s*:?\s*(?P<value>[^>]*?)\s*-->\s*$")


@dataclass
class Block:
    section: str  # the heading (## or ###) the block is under
    number: int  # 1, 2, ... within that section (python blocks only)
    lang: str
    code: str
    needs: tuple = ()
    continues: bool = False
    line: int = 0  # of the opening fence, 1-based
    page: str = "README.md"  # the file, relative to the project root

    @property
    def id(self) -> str:
        slug = re.sub(r"[^A-Za-z0-9]+", "-", self.section).strip("-").lower()
        if self.page != "README.md":  # README ids stay as they were; a docs page's carry its name
            slug = re.sub(r"[^A-Za-z0-9]+", "-", Path(self.page).with_suffix("").as_posix()).lower() + "--" + slug
        return f"{slug}-{self.number}"


def readme_blocks(text: str, page: str = "README.md") -> list:
    """Every fenced block of ``text``, in order, with its section, language and markers."""
    blocks, section, counts, marks = [], "top", {}, {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        heading = re.match(r"^#{2,3} (.+)$", line)
        marker = MARKER.match(line)
        fence = FENCE.match(line)
        if heading:
            section, marks = heading.group(1).strip(), {}
        elif marker:
            marks[marker.group("key")] = marker.group("value")
        elif fence:
            indent, start = fence.group("indent"), i
            body = []
            i += 1
            while i < len(lines) and lines[i].strip() != "```":
                body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i].lstrip())
                i += 1
            lang = fence.group("lang") or "text"
            number = 0
            if lang == "python":
                number = counts[section] = counts.get(section, 0) + 1
            needs = tuple(name.strip() for name in marks.get("needs", "").split(",") if name.strip())
            blocks.append(Block(section, number, lang, "\n".join(body) + "\n", needs, "continues" in marks,
                                start + 1, page))
            marks = {}
        elif line.strip():
            marks = {}  # a marker belongs to the fence right after it
        i += 1
    return blocks


BLOCKS = readme_blocks(README.read_text(encoding="utf-8"))
DOC_BLOCKS = [block for page in DOCS
              for block in readme_blocks(page.read_text(encoding="utf-8"), page.relative_to(ROOT).as_posix())]
PYTHON = [block for block in BLOCKS + DOC_BLOCKS if block.lang == "python"]


def program(block: Block) -> tuple:
    """The code to run for ``block`` (with the blocks it continues) and every module it needs."""
    chain = [block]
    while chain[0].continues:
        earlier = [b for b in PYTHON
                   if b.page == block.page and b.section == block.section and b.number == chain[0].number - 1]
        assert earlier, (f"{block.page} line {chain[0].line}: <!-- continues --> with no earlier python block in its "
                         f"section")
        chain.insert(0, earlier[0])
    needs = tuple(dict.fromkeys(name for b in chain for name in b.needs))
    return "\n".join(b.code for b in chain), needs


@pytest.mark.parametrize("block", PYTHON, ids=[block.id for block in PYTHON])
def test_readme_block_runs(block, tmp_path):
    code, needs = program(block)
    for module in needs:
        pytest.importorskip(module, reason=f"{block.page} block {block.id} needs {module} (an optional extra)")
    script = tmp_path / "snippet.py"
    script.write_text(code, encoding="utf-8")
    work = tmp_path / "work"
    work.mkdir()
    result = subprocess.run([sys.executable, "-W", "error", str(script)], cwd=work, capture_output=True,
                            text=True, timeout=TIMEOUT)
    assert result.returncode == 0, f"{block.page} line {block.line} ({block.id}):\n{code}\n{result.stderr[-4000:]}"


def test_readme_has_python_blocks():
    ids = [block.id for block in PYTHON]
    assert len([b for b in PYTHON if b.page == "README.md"]) >= 15 and len(set(ids)) == len(ids), ids
    assert not [b for b in BLOCKS + DOC_BLOCKS
                if b.lang in ("py", "python3", "pycon")], "tag python blocks as ```python"


def test_two_commands_names_the_ci_command():
    """The README's "Two commands" test command is, verbatim, the command `.ci/run` runs."""
    shell = [block.code.strip() for block in BLOCKS if block.section == "Two commands" and block.lang == "bash"]
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if "pytest" in line]
    assert len(ci) == 1, ci
    assert ci[0].strip() in shell, f".ci/run runs {ci[0]!r}; the README's Two commands show {shell!r}"


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_contents_links_every_section_and_every_link_lands():
    """The table of contents near the top lists every ## section in order, and every #anchor link of the
    README names a heading (as GitHub spells anchors)."""
    text = re.sub(r"^ *```.*?^ *```$", "", README.read_text(encoding="utf-8"), flags=re.M | re.S)  # no code
    sections = [h for h in re.findall(r"^## (.+)$", text, flags=re.M) if h != "Contents"]
    contents = text.split("## Contents\n", 1)[1].split("\n## ", 1)[0]
    assert re.findall(r"^- \[(.+?)\]\(#(.+?)\)$", contents, flags=re.M) == [(h, github_anchor(h)) for h in sections]
    anchors = {github_anchor(h) for h in re.findall(r"^#{1,6} (.+)$", text, flags=re.M)}
    broken = [link for link in re.findall(r"\]\(#([^)]+)\)", text) if link not in anchors]
    assert not broken, f"README links to missing headings: {broken}"


def headings(path: Path) -> set:
    """The anchors of a Markdown file's headings (code blocks left out)."""
    text = re.sub(r"^ *```.*?^ *```$", "", path.read_text(encoding="utf-8"), flags=re.M | re.S)
    return {github_anchor(h) for h in re.findall(r"^#{1,6} (.+)$", text, flags=re.M)}


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda page: page.relative_to(ROOT).as_posix())
def test_relative_links_land(page):
    """Every relative link of the README and of docs/*.md names a file of the project, and a #anchor after a
    Markdown file's name names one of its headings (what moved to docs/ stays reachable)."""
    text = re.sub(r"^ *```.*?^ *```$", "", page.read_text(encoding="utf-8"), flags=re.M | re.S)
    broken = []
    for link in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", link):  # https:, mailto:, ...
            continue
        target, _, anchor = link.partition("#")
        path = (page.parent / target).resolve() if target else page
        if not path.exists():
            broken.append(f"{link} (no file {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path})")
        elif anchor and path.suffix == ".md" and anchor not in headings(path):
            broken.append(f"{link} (no heading #{anchor} in {path.relative_to(ROOT)})")
    assert not broken, f"{page.relative_to(ROOT)} links to: {broken}"
