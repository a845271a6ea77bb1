"""Every ```python block of README.md and of every page under docs/ runs as a reader would paste it, and
"Two commands" matches CI.

The rules, for whoever edits the README:

- Each ```python block (an indented one too) is written to a file and run on its own in a process of its
  own as ``sys.executable -W error`` would run it (forked from a server that has imported torch and the
  library: tests/snippet_runner.py; a block that needs Ray runs in a fresh interpreter), with a fresh
  temporary folder as the working directory, so relative paths such as ``"./replay_data"`` land there. It
  must exit with 0 within its timeout.
- A block that needs an optional extra says so on the line just before its fence, in an HTML comment a
  reader does not see: ``<!-- needs: ray -->`` or ``<!-- needs: gymnasium, h5py -->`` (module names). The
  test skips, naming the module, when one is missing.
- A block that goes on from the previous ```python block of the SAME section (it uses the names that
  block defines) says ``<!-- continues -->`` on the line before its fence; it is run concatenated after
  that block (and after whatever that one continues). Prefer self-contained blocks.
- Shell blocks (```bash, ```sh, or a bare fence) are not run; only "Two commands" is checked: its test
  command is the one `.ci/run` runs.
- The README's "Documentation" section links every page of the site (each file `nav:` of mkdocs.yml names),
  and the nav names every page under docs/; every #anchor link of the README lands on a heading.
- The pages under docs/ (every folder) follow the same rules for their blocks (the sections are theirs: a
  block continues only a block of its own page). Every relative link of the README and of the docs names a
  file that exists, and a link to a heading (``docs/performance.md#reading``, ``../guides/reading.md#transforms``)
  lands on one; a page of the docs links only inside docs/ (the site has nothing else), and may link the
  pages docs/hooks.py generates at build time.
- Blocks of one page do not share a folder or file name (``"cartpole_data"``, ``"./replay_data"``) unless one
  continues the other: a reader who pastes two of them into one directory gets no clash and no silent append.
"""

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from snippet_runner import SnippetServer, run_fresh

ROOT = Path(__file__).parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").rglob("*.md"))  # the site's pages (mkdocs.yml); their blocks run too
# pages docs/hooks.py writes at build time (not in the tree): docs pages may link them
GENERATED = {ROOT / "docs" / name for name in
             re.findall(r'^[A-Z_]+ = "([\w/.-]+\.md)"$', (ROOT / "docs" / "hooks.py").read_text(), flags=re.M)}
TIMEOUT = 120  # seconds per block; the slowest (Ray's start) takes about 15 s
FRESH = {"ray"}  # blocks that need these start from a fresh interpreter (tests/snippet_runner.py: the others fork)

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


@pytest.fixture(scope="module")
def snippets():
    server = SnippetServer()
    yield server
    server.close()


@pytest.mark.parametrize("block", PYTHON, ids=[block.id for block in PYTHON])
def test_readme_block_runs(block, tmp_path, snippets):
    code, needs = program(block)
    for module in needs:
        pytest.importorskip(module, reason=f"{block.page} block {block.id} needs {module} (an optional extra)")
    script = tmp_path / "snippet.py"
    script.write_text(code, encoding="utf-8")
    work = tmp_path / "work"
    work.mkdir()
    run = run_fresh if FRESH.intersection(needs) else snippets.run
    status, stderr = run(script, work, TIMEOUT)
    assert status == 0, f"{block.page} line {block.line} ({block.id}):\n{code}\n{stderr[-4000:]}"


def test_readme_has_python_blocks():
    ids = [block.id for block in PYTHON]
    assert [b.section for b in PYTHON if b.page == "README.md"] == ["Quick start"], "the README's one block"
    assert len([b for b in PYTHON if b.page != "README.md"]) >= 35 and len(set(ids)) == len(ids), ids
    assert not [b for b in BLOCKS + DOC_BLOCKS
                if b.lang in ("py", "python3", "pycon")], "tag python blocks as ```python"


@pytest.mark.parametrize("page, section", [("README.md", "Two commands"), ("docs/getting-started.md", "Install")])
def test_two_commands_names_the_ci_command(page, section):
    """The README's "Two commands" test command (and getting started's copy) is, verbatim, the command
    `.ci/run` runs."""
    shell = [block.code.strip() for block in BLOCKS + DOC_BLOCKS
             if block.page == page and block.section == section and block.lang == "bash"]
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if "pytest" in line]
    assert len(ci) == 1, ci
    assert ci[0].strip() in shell, f".ci/run runs {ci[0]!r}; {page}'s {section} show {shell!r}"


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def nav_pages() -> list:
    """The pages mkdocs.yml's nav names, in order (paths under docs/)."""
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8").split("\nnav:\n", 1)[1]
    paths = re.findall(r"^\s+- (?:[^\n]*?: )?\"?([\w/.-]+\.md)\"?\s*$", text, flags=re.M)
    return [ROOT / "docs" / path for path in paths]


def test_documentation_links_every_page_and_every_link_lands():
    """The README's "Documentation" section links every page of the site's nav (the generated ones aside),
    the nav names every page under docs/, and every #anchor link of the README names a heading (as GitHub
    spells anchors)."""
    text = re.sub(r"^ *```.*?^ *```$", "", README.read_text(encoding="utf-8"), flags=re.M | re.S)  # no code
    documentation = text.split("## Documentation\n", 1)[1].split("\n## ", 1)[0]
    linked = {(ROOT / link).resolve() for link in re.findall(r"\]\((docs/[^)#\s]+)\)", documentation)}
    nav = nav_pages()
    assert len(nav) == len(set(nav)), "mkdocs.yml's nav names a page twice"
    missing = [page.relative_to(ROOT).as_posix() for page in nav if page not in GENERATED and page not in linked]
    assert not missing, f"the README's Documentation section does not link {missing}"
    orphans = [page.relative_to(ROOT).as_posix() for page in DOCS if page not in nav]
    assert not orphans, f"pages under docs/ that mkdocs.yml's nav does not name: {orphans}"
    assert set(GENERATED) <= set(nav), "a generated page is missing from the nav"
    anchors = {github_anchor(h) for h in re.findall(r"^#{1,6} (.+)$", text, flags=re.M)}
    broken = [link for link in re.findall(r"\]\(#([^)]+)\)", text) if link not in anchors]
    assert not broken, f"README links to missing headings: {broken}"


def headings(path: Path) -> set:
    """The anchors of a Markdown file's headings (code blocks left out)."""
    text = re.sub(r"^ *```.*?^ *```$", "", path.read_text(encoding="utf-8"), flags=re.M | re.S)
    return {github_anchor(h) for h in re.findall(r"^#{1,6} (.+)$", text, flags=re.M)}


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda page: page.relative_to(ROOT).as_posix())
def test_relative_links_land(page):
    """Every relative link of the README and of the docs names a file of the project, and a #anchor after a
    Markdown file's name names one of its headings (what moved to docs/ stays reachable); a docs page links
    only inside docs/, where the site's generated pages count too."""
    text = re.sub(r"^ *```.*?^ *```$", "", page.read_text(encoding="utf-8"), flags=re.M | re.S)
    broken = []
    for link in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", link):  # https:, mailto:, ...
            continue
        target, _, anchor = link.partition("#")
        path = (page.parent / target).resolve() if target else page
        if page != README and not path.is_relative_to(ROOT / "docs"):
            broken.append(f"{link} (outside docs/: the site has no such page)")
        elif page != README and path in GENERATED:
            continue
        elif not path.exists():
            broken.append(f"{link} (no file {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path})")
        elif anchor and path.suffix == ".md" and anchor not in headings(path):
            broken.append(f"{link} (no heading #{anchor} in {path.relative_to(ROOT)})")
    assert not broken, f"{page.relative_to(ROOT)} links to: {broken}"


# calls whose string arguments name a folder or file the snippet writes or reads in its working directory
PATH_CALLS = frozenset({
    "ReplayBuffer", "from_folder", "RecordEpisodes", "RecordVectorEpisodes", "pack", "unpack", "update_card",
    "add_provenance", "read_card", "view", "report", "verify", "contact_sheet", "write_video", "shard_folder",
    "create_shard", "RateLimiter", "join", "ShardSet", "import_minari", "export_minari", "import_d4rl",
    "export_d4rl", "import_memmap_replay_buffer", "export_memmap_replay_buffer", "write_lerobot", "abspath",
    "Path", "ReplayBufferH5PY", "trajectory_to_video", "frames_to_sheet",
})


def written_names(code: str) -> set:
    """The first part of every relative path a block passes to a call that names a folder or file."""
    names = set()
    for node in ast.walk(ast.parse(code)):
        if not isinstance(node, ast.Call):
            continue
        name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
        if name not in PATH_CALLS:
            continue
        for arg in [*node.args, *(keyword.value for keyword in node.keywords)]:
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and re.fullmatch(r"[\w./-]+", arg.value) \
                    and not arg.value.startswith("/"):
                first = re.sub(r"^(\./)+", "", arg.value).split("/")[0]
                if first not in ("", ".", ".."):
                    names.add(first)
    return names


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda page: page.relative_to(ROOT).as_posix())
def test_blocks_of_a_page_share_no_folder_name(page):
    """Two blocks of one page name different folders and files, unless one continues the other: pasted
    into one directory, neither finds the other's store (an error, or episodes silently appended)."""
    name = page.relative_to(ROOT).as_posix()
    blocks = [b for b in PYTHON if b.page == name]
    def chain(block):  # the block and every block it continues
        found = [block]
        while found[0].continues:
            found.insert(0, next(b for b in blocks
                                 if b.section == found[0].section and b.number == found[0].number - 1))
        return found
    seen = {}  # folder name -> the block that names it first
    clashes = []
    for block in blocks:
        for folder in sorted(written_names(block.code)):
            first = seen.setdefault(folder, block)
            if first is not block and first not in chain(block):
                clashes.append(f"{folder!r}: line {first.line} and line {block.line}")
    assert not clashes, f"{name}: blocks that do not continue each other name the same folder: {clashes}"
